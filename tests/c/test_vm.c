/* test_vm.c: the VM core without Lua: lifecycle, dtypes and promotion, half/bfloat16 rounding, tensors and
 * views, creation ops, Philox against Random123's known answers, errors, and the CUDA probe. */
#include <stdlib.h>
#include "grace.h"
#include "tap.h"
#include "base/base.h"

static grace_tensor *make_f32(grace_vm *vm, int ndim, const int64_t *sizes, const float *v) {
  grace_tensor *t = NULL;
  grace_tensor_from_data(vm, GRACE_FLOAT32, ndim, sizes, GRACE_FLOAT32, v, &t);
  return t;
}

/* a view op through the public API */
static grace_tensor *run1(grace_vm *vm, grace_op op, grace_tensor *x, const grace_attrs *a) {
  grace_tensor *out = NULL;
  grace_run(vm, op, 1, &x, a, 1, &out);
  return out;
}

static void test_dtypes(void) {
  grace_dtype dt;
  is_str(grace_dtype_name(GRACE_BFLOAT16), "bfloat16", "dtype name");
  ok(grace_dtype_from_name("half", &dt) == GRACE_OK && dt == GRACE_FLOAT16, "alias half is float16");
  ok(grace_dtype_from_name("float8", &dt) != GRACE_OK, "unknown dtype name rejected");
  is_int(grace_dtype_size(GRACE_INT64), 8, "int64 is 8 bytes");
  is_int(vm_promote_types(GRACE_INT32, GRACE_FLOAT16), GRACE_FLOAT16, "int32 with float16 -> float16");
  is_int(vm_promote_types(GRACE_FLOAT16, GRACE_BFLOAT16), GRACE_FLOAT32, "float16 with bfloat16 -> float32");
  is_int(vm_promote_types(GRACE_UINT8, GRACE_INT32), GRACE_INT32, "uint8 with int32 -> int32");
  is_int(vm_promote_types(GRACE_BOOL, GRACE_UINT8), GRACE_UINT8, "bool with uint8 -> uint8");
  /* float16: 1/3 rounds to 0x3555 (0.333251953125); 65520 overflows to inf; 2^-24 is the smallest subnormal */
  is_int(vm_float_to_half(1.0f / 3.0f), 0x3555, "float16(1/3) bits");
  is_near(vm_half_to_float(0x3555), 0.333251953125, 0, "float16 0x3555 value");
  is_int(vm_float_to_half(65520.0f), 0x7c00, "float16(65520) is inf");
  is_int(vm_float_to_half(65519.0f), 0x7bff, "float16(65519) is 65504");
  is_int(vm_float_to_half(5.9604645e-8f), 0x0001, "float16 smallest subnormal");
  is_near(vm_half_to_float(0x0001), 5.9604644775390625e-8, 0, "float16 subnormal value");
  is_int(vm_float_to_half(-2.0f), 0xc000, "float16(-2)");
  /* bfloat16: 1/3 = 0x3eaaaaab in float32 -> round to nearest even 0x3eab */
  is_int(vm_float_to_bf16(1.0f / 3.0f), 0x3eab, "bfloat16(1/3) bits");
  is_near(vm_bf16_to_float(0x3f80), 1.0, 0, "bfloat16 one");
  /* ties to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 */
  is_int(vm_float_to_bf16(1.00390625f), 0x3f80, "bfloat16 tie rounds to even");
}

static void test_promotion(grace_vm *vm) {
  int64_t s3[] = {3};
  grace_tensor *i32 = NULL, *f16 = NULL, *wf = NULL, *wi = NULL, *z64 = NULL, *b = NULL;
  int32_t iv[] = {1, 2, 3};
  grace_tensor_from_data(vm, GRACE_INT32, 1, s3, GRACE_INT32, iv, &i32);
  grace_tensor_from_data(vm, GRACE_FLOAT16, 1, s3, GRACE_INT32, iv, &f16);
  grace_tensor_from_data(vm, GRACE_BOOL, 1, s3, GRACE_INT32, iv, &b);
  double d = 2.5;
  grace_tensor_from_data(vm, GRACE_FLOAT64, 0, NULL, GRACE_FLOAT64, &d, &z64);
  grace_tensor_scalar(vm, 2.5, 0, &wf);
  grace_tensor_scalar(vm, 7, 1, &wi);
  ok(grace_tensor_is_scalar(wf) && !grace_tensor_is_scalar(z64), "wrapped numbers are marked");
  is_int(vm_result_type(2, (grace_tensor *[]){i32, wf}), GRACE_FLOAT32, "int32 + 2.5 -> float32");
  is_int(vm_result_type(2, (grace_tensor *[]){i32, wi}), GRACE_INT32, "int32 + 7 -> int32");
  is_int(vm_result_type(2, (grace_tensor *[]){f16, wf}), GRACE_FLOAT16, "float16 * 2.5 -> float16");
  is_int(vm_result_type(2, (grace_tensor *[]){i32, z64}), GRACE_FLOAT64, "int32 + 0-d float64 -> float64");
  is_int(vm_result_type(2, (grace_tensor *[]){f16, z64}), GRACE_FLOAT16, "float16 + 0-d float64 -> float16");
  is_int(vm_result_type(2, (grace_tensor *[]){b, wi}), GRACE_INT64, "bool + 7 -> int64");
  is_int(vm_result_type(2, (grace_tensor *[]){wi, wf}), GRACE_FLOAT32, "7 + 2.5 -> float32");
  grace_tensor *all[] = {i32, f16, wf, wi, z64, b};
  for (int i = 0; i < 6; i++) grace_tensor_release(all[i]);
}

static void test_views(grace_vm *vm) {
  float v[6] = {1, 2, 3, 4, 5, 6};
  int64_t s23[] = {2, 3};
  grace_tensor *x = make_f32(vm, 2, s23, v);
  ok(x && grace_tensor_is_contiguous(x), "contiguous tensor from data");
  grace_attrs a = {.ndims = 2, .dims = {0, 1}};
  grace_tensor *t = run1(vm, GRACE_OP_TRANSPOSE, x, &a);
  ok(t && grace_tensor_sizes(t)[0] == 3 && grace_tensor_strides(t)[0] == 1 && !grace_tensor_is_contiguous(t),
     "transpose swaps sizes and strides");
  ok(grace_tensor_storage_id(t) == grace_tensor_storage_id(x), "transpose shares storage");
  double e;
  grace_tensor_get(vm, t, (int64_t[]){2, 1}, &e);
  is_near(e, 6, 0, "t[2][1] == x[1][2]");
  grace_attrs r = {.nshape = 2, .shape = {3, -1}};
  grace_tensor *rv = run1(vm, GRACE_OP_VIEW, x, &r);
  ok(rv && grace_tensor_sizes(rv)[1] == 2 && grace_tensor_storage_id(rv) == grace_tensor_storage_id(x),
     "view [3, -1] of a contiguous tensor shares storage");
  grace_attrs flat = {.nshape = 1, .shape = {6}};
  grace_tensor *bad = run1(vm, GRACE_OP_VIEW, t, &flat);
  ok(!bad && strstr(grace_last_error(vm), "view") && strstr(grace_last_error(vm), "reshape"),
     "view of a transposed tensor is an error suggesting reshape: %s", grace_last_error(vm));
  grace_attrs r5 = {.nshape = 1, .shape = {5}};
  ok(!run1(vm, GRACE_OP_RESHAPE, x, &r5) && strstr(grace_last_error(vm), "[5]") && strstr(grace_last_error(vm), "[2, 3]"),
     "reshape to a wrong count names both shapes: %s", grace_last_error(vm));
  grace_attrs n = {.ndims = 1, .dims = {1}, .i0 = 1, .i1 = 2};
  grace_tensor *nr = run1(vm, GRACE_OP_NARROW, x, &n);
  grace_tensor_get(vm, nr, (int64_t[]){1, 0}, &e);
  ok(nr && grace_tensor_offset(nr) == 1 && e == 5, "narrow(dim 1, 1, 2) starts at offset 1, [1][0] is 5");
  grace_attrs s = {.ndims = 1, .dims = {0}, .i0 = -1};
  grace_tensor *sel = run1(vm, GRACE_OP_SELECT, x, &s);
  grace_tensor_get(vm, sel, (int64_t[]){0}, &e);
  ok(sel && grace_tensor_ndim(sel) == 1 && e == 4, "select(0, -1) is the last row");
  grace_attrs s9 = {.ndims = 1, .dims = {0}, .i0 = 9};
  ok(!run1(vm, GRACE_OP_SELECT, x, &s9) && strstr(grace_last_error(vm), "out of range"), "select out of range errors");
  grace_attrs u = {.ndims = 1, .dims = {-1}};
  grace_tensor *un = run1(vm, GRACE_OP_UNSQUEEZE, x, &u);
  ok(un && grace_tensor_ndim(un) == 3 && grace_tensor_sizes(un)[2] == 1, "unsqueeze(-1) appends a dim");
  grace_tensor *sq = run1(vm, GRACE_OP_SQUEEZE, un, NULL);
  ok(sq && grace_tensor_ndim(sq) == 2, "squeeze drops size-1 dims");
  grace_attrs ex = {.nshape = 3, .shape = {4, -1, 3}};
  grace_tensor *xe = run1(vm, GRACE_OP_EXPAND, x, &ex);
  ok(xe && grace_tensor_sizes(xe)[0] == 4 && grace_tensor_strides(xe)[0] == 0, "expand adds a 0-stride dim");
  grace_attrs ex2 = {.nshape = 2, .shape = {4, 3}};
  ok(!run1(vm, GRACE_OP_EXPAND, x, &ex2), "expand of a non-1 dim errors");
  grace_attrs p = {.ndims = 2, .dims = {1, 0}};
  grace_tensor *pm = run1(vm, GRACE_OP_PERMUTE, x, &p);
  ok(pm && grace_tensor_sizes(pm)[0] == 3 && grace_tensor_strides(pm)[1] == 3, "permute(1, 0)");
  grace_attrs p2 = {.ndims = 2, .dims = {0, 0}};
  ok(!run1(vm, GRACE_OP_PERMUTE, x, &p2) && strstr(grace_last_error(vm), "repeated"), "permute with a repeated dim errors");
  grace_attrs d5 = {.ndims = 2, .dims = {0, 5}};
  ok(!run1(vm, GRACE_OP_TRANSPOSE, x, &d5) && strstr(grace_last_error(vm), "dim 5"), "bad dim names it: %s", grace_last_error(vm));
  grace_tensor *all[] = {x, t, rv, nr, sel, un, sq, xe, pm};
  for (int i = 0; i < 9; i++) grace_tensor_release(all[i]);
}

static void test_create(grace_vm *vm) {
  grace_attrs a = {.a = 0, .b = 1, .c = 0.25, .has_dtype = 1, .dtype = GRACE_FLOAT64};
  grace_tensor *t = NULL;
  ok(grace_run(vm, GRACE_OP_ARANGE, 0, NULL, &a, 1, &t) == GRACE_OK && grace_tensor_numel(t) == 4, "arange(0, 1, 0.25) has 4 elements");
  double v[4];
  grace_tensor_read(vm, t, GRACE_FLOAT64, v);
  ok(v[0] == 0 && v[3] == 0.75, "arange values");
  grace_tensor_release(t);
  grace_attrs bad = {.a = 0, .b = 1, .c = -1};
  ok(grace_run(vm, GRACE_OP_ARANGE, 0, NULL, &bad, 1, &t) != GRACE_OK, "arange with a step of the wrong sign errors");
  grace_attrs l = {.a = -1, .b = 1, .i0 = 5};
  grace_run(vm, GRACE_OP_LINSPACE, 0, NULL, &l, 1, &t);
  float f[5];
  grace_tensor_read(vm, t, GRACE_FLOAT32, f);
  ok(f[0] == -1 && f[1] == -0.5f && f[2] == 0 && f[4] == 1, "linspace(-1, 1, 5)");
  grace_tensor_release(t);
  grace_attrs e = {.nshape = 2, .shape = {2, 3}, .has_dtype = 1, .dtype = GRACE_INT32};
  grace_run(vm, GRACE_OP_EYE, 0, NULL, &e, 1, &t);
  int32_t iv[6];
  grace_tensor_read(vm, t, GRACE_INT32, iv);
  ok(iv[0] == 1 && iv[1] == 0 && iv[4] == 1 && iv[5] == 0, "eye(2, 3)");
  grace_tensor_release(t);
  grace_attrs fu = {.nshape = 1, .shape = {3}, .a = 7, .has_dtype = 1, .dtype = GRACE_UINT8};
  grace_run(vm, GRACE_OP_FULL, 0, NULL, &fu, 1, &t);
  uint8_t u8[3];
  grace_tensor_read(vm, t, GRACE_UINT8, u8);
  ok(u8[0] == 7 && u8[2] == 7, "full uint8");
  grace_tensor_release(t);
  /* random: same seed, same stream; range; mean and variance of 100k draws */
  enum { N = 100000 };
  grace_attrs r = {.nshape = 1, .shape = {N}};
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  grace_manual_seed(vm, 42);
  grace_run(vm, GRACE_OP_RAND, 0, NULL, &r, 1, &t);
  grace_tensor_read(vm, t, GRACE_FLOAT32, x);
  grace_tensor_release(t);
  grace_run(vm, GRACE_OP_RAND, 0, NULL, &r, 1, &t);
  grace_tensor_read(vm, t, GRACE_FLOAT32, y);
  grace_tensor_release(t);
  ok(memcmp(x, y, N * sizeof *x) != 0, "two draws differ");
  grace_manual_seed(vm, 42);
  grace_run(vm, GRACE_OP_RAND, 0, NULL, &r, 1, &t);
  grace_tensor_read(vm, t, GRACE_FLOAT32, y);
  grace_tensor_release(t);
  ok(memcmp(x, y, N * sizeof *x) == 0, "the same seed gives the same numbers");
  double mean = 0, var = 0, lo = 1, hi = 0;
  for (int i = 0; i < N; i++) { mean += x[i]; lo = x[i] < lo ? x[i] : lo; hi = x[i] > hi ? x[i] : hi; }
  mean /= N;
  for (int i = 0; i < N; i++) var += (x[i] - mean) * (x[i] - mean);
  var /= N;
  ok(lo >= 0 && hi < 1, "rand in [0, 1)");
  is_near(mean, 0.5, 0.005, "rand mean 1/2");
  is_near(var, 1.0 / 12, 0.002, "rand variance 1/12");
  grace_run(vm, GRACE_OP_RANDN, 0, NULL, &r, 1, &t);
  grace_tensor_read(vm, t, GRACE_FLOAT32, x);
  grace_tensor_release(t);
  mean = var = 0;
  for (int i = 0; i < N; i++) mean += x[i];
  mean /= N;
  for (int i = 0; i < N; i++) var += (x[i] - mean) * (x[i] - mean);
  var /= N;
  is_near(mean, 0, 0.01, "randn mean 0");
  is_near(var, 1, 0.02, "randn variance 1");
  grace_attrs ri = {.nshape = 1, .shape = {N}, .i0 = -3, .i1 = 4};
  grace_run(vm, GRACE_OP_RANDINT, 0, NULL, &ri, 1, &t);
  int64_t *iv64 = malloc(N * sizeof *iv64);
  grace_tensor_read(vm, t, GRACE_INT64, iv64);
  int64_t mn = 99, mx = -99;
  for (int i = 0; i < N; i++) { mn = iv64[i] < mn ? iv64[i] : mn; mx = iv64[i] > mx ? iv64[i] : mx; }
  ok(grace_tensor_dtype(t) == GRACE_INT64 && mn == -3 && mx == 3, "randint(-3, 4) covers [-3, 3]");
  grace_tensor_release(t);
  free(x); free(y); free(iv64);
}

static void test_philox(void) {
  /* Random123's tests/kat_vectors, "philox4x32 10" lines: ctr[4] key[2] -> result[4] */
  uint32_t o[4];
  vm_philox(0, 0, 0, o);
  ok(o[0] == 0x6627e8d5 && o[1] == 0xe169c58d && o[2] == 0xbc57ac4c && o[3] == 0x9b00dbd8, "Philox KAT zeros");
  vm_philox(UINT64_MAX, UINT64_MAX, UINT64_MAX, o);
  ok(o[0] == 0x408f276d && o[1] == 0x41c83b0e && o[2] == 0xa20bc7c6 && o[3] == 0x6d5451fd, "Philox KAT ones");
  vm_philox(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull, o);
  ok(o[0] == 0xd16cfe09 && o[1] == 0x94fdcceb && o[2] == 0x5001e420 && o[3] == 0x24126ea1, "Philox KAT pi");
}

static void test_errors(grace_vm *vm) {
  grace_tensor *t = NULL;
  grace_attrs neg = {.nshape = 2, .shape = {2, -3}};
  ok(grace_run(vm, GRACE_OP_FULL, 0, NULL, &neg, 1, &t) == GRACE_EARG && t == NULL && strstr(grace_last_error(vm), "-3"),
     "negative size errors: %s", grace_last_error(vm));
  grace_attrs huge = {.nshape = 3, .shape = {1 << 30, 1 << 30, 1 << 30}};
  ok(grace_run(vm, GRACE_OP_FULL, 0, NULL, &huge, 1, &t) != GRACE_OK && t == NULL, "absurd size errors, no abort");
  ok(grace_run(vm, GRACE_OP_EXP, 0, NULL, NULL, 1, &t) == GRACE_EARG, "wrong arity errors");
  ok(grace_run(vm, (grace_op)9999, 0, NULL, NULL, 1, &t) == GRACE_EARG, "invalid op errors");
  grace_tensor *w = NULL, *wc = NULL;
  grace_tensor_scalar(vm, 2.0, 0, &w);
  ok(grace_run(vm, GRACE_OP_CONTIGUOUS, 1, &w, NULL, 1, &wc) == GRACE_OK && wc != w && !grace_tensor_is_scalar(wc),
     "contiguous of a wrapped number is an ordinary 0-d tensor (as the IR types it)");
  grace_tensor_release(w); grace_tensor_release(wc);
  grace_op op;
  ok(grace_op_from_name("softmax", &op) == GRACE_OK && op == GRACE_OP_SOFTMAX, "op by name");
  is_str(grace_op_name(GRACE_OP_INDEX_COPY_), "index_copy_", "op name");
  ok(grace_op_kind(GRACE_OP_ADD) == GRACE_KIND_BINARY && grace_op_ninputs(GRACE_OP_WHERE) == 3, "op kinds and arity");
}

static int alloc_calls;
static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize, size_t align) {
  (void)ud; (void)osize;
  if (nsize == 0) { free(ptr); return NULL; }
  alloc_calls++;
  void *p = NULL;
  if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, nsize)) return NULL;
  if (ptr) { memcpy(p, ptr, osize < nsize ? osize : nsize); free(ptr); }
  return p;
}

int main(void) {
  char err[256];
  grace_vm *bad = grace_vm_new(&(grace_config){.device = "tpu"}, err, sizeof err);
  ok(!bad && strstr(err, "tpu"), "unknown device is a clean error: %s", err);
  grace_vm *vm = grace_vm_new(&(grace_config){.alloc = counting_alloc, .device = "cpu"}, err, sizeof err);
  ok(vm != NULL, "VM with a host allocator");
  ok(alloc_calls > 0, "the host allocator is used");
  test_dtypes();
  test_promotion(vm);
  test_views(vm);
  test_create(vm);
  test_philox();
  test_errors(vm);
  is_str(grace_device_name(grace_default_device(vm)), "cpu", "default device cpu");
  if (grace_cuda_available(vm)) {
    ok(strstr(grace_backend_info(vm), "sm_") != NULL, "CUDA device described: %s", grace_backend_info(vm));
  } else {
    skip("no CUDA device");
  }
  grace_vm_free(vm);
  return tap_done();
}
