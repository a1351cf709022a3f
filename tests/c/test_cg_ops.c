/* test_cg_ops.c: the single-op CUDA kernels (codegen/cg_ops.c) and their eager runner (gpu/gpu_ops.c).
 * Without a GPU: every template for every dtype it takes, plain and indirect, compiles with NVRTC for sm_90
 * (skipped when libnvrtc cannot load), and the sources carry the pieces the CPU's semantics depend on (the
 * index-check flag, Philox's constants, the stable tie break). With a GPU: every op on CUDA tensors against
 * the CPU backend on the same inputs (moves, index ops and integers exactly, floats within a tolerance),
 * strided inputs, odd and zero sizes, out-of-range indices (the CPU's status and message), cat and stack of
 * many inputs in few launches, and the random ops equal to the CPU's numbers for a seed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "codegen/cg_ops.h"
#include "cuda/cuda_api.h"
#include "pdl_check.h"
#include "tap.h"

static grace_vm *vm;

/* ---- compile checks ---- */
static int compile_ok(const cgo_spec *s, const char *what) {
  cg_kernel k;
  if (cg_ops_source(vm, s, &k) != GRACE_OK) return ok(0, "%s: source (%s)", what, grace_last_error(vm));
  char *out = NULL;
  size_t n = 0;
  int enters = s->pred ? pred_enters_first(k.src) : pdl_enters_first(k.src);
  if (!enters) printf("# %s: does not wait for earlier kernels on entry\n", k.name);
  grace_status st = cuda_nvrtc_compile(vm, k.src, 90, 1, &out, &n);
  int good = enters && st == GRACE_OK && out && strstr(out, k.name);
  if (!good && enters) printf("# %s: %s\n", k.name, grace_last_error(vm));
  if (out) grace_realloc(vm, out, n, 0);
  cg_kernel_free(vm, &k);
  return good;
}

static const grace_dtype all_dt[] = {GRACE_FLOAT32, GRACE_FLOAT64, GRACE_FLOAT16, GRACE_BFLOAT16,
                                     GRACE_INT32, GRACE_INT64, GRACE_UINT8, GRACE_BOOL};
static const grace_dtype float_dt[] = {GRACE_FLOAT32, GRACE_FLOAT64, GRACE_FLOAT16, GRACE_BFLOAT16};

/* Each template over its dtypes and variants; indirect alternates so both forms are covered per template and
 * dtype, the indirect pass predicated too (the predicate's parameters and entry, gpu/gpu_pred.c), and every pair of
 * dtypes of a copy compiles at least once. */
static void compile_all(void) {
  int fails = 0, count = 0;
  char what[96];
#define TRY(...) do { cgo_spec s_ = __VA_ARGS__; snprintf(what, sizeof what, "%s", cg_ops_tmpl_name(s_.tmpl)); \
                      count++; if (!compile_ok(&s_, what)) fails++; } while (0)
  for (int ind = 0; ind < 2; ind++) {
    for (int i = 0; i < 8; i++) {
      for (int j = 0; j < 8; j++) if ((i + j + ind) % 2 == 0 || i == j) TRY({CGO_COPY, {all_dt[i], all_dt[j], all_dt[i]}, i == j, ind, ind});
      TRY({CGO_FILL, {all_dt[i]}, 0, ind, ind});
      TRY({CGO_TRI, {all_dt[i]}, 0, ind, ind});
      TRY({CGO_IMOVE, {all_dt[i], all_dt[i], i % 2 ? GRACE_INT32 : GRACE_INT64}, 0, ind, ind});
      TRY({CGO_SORT, {all_dt[i]}, i % 2, ind, ind});
      TRY({CGO_SORT, {all_dt[i]}, 2 | ((i + 1) % 2), ind, ind});   /* selection (topk of long rows) */
      TRY({CGO_CUMSUM, {grace_dtype_is_float(all_dt[i]) ? all_dt[i] : GRACE_INT64, all_dt[i]}, 0, ind, ind});
    }
    TRY({CGO_IMOVE, {GRACE_FLOAT16, GRACE_INT64, GRACE_INT32}, 0, ind, ind});   /* scatter of a 0-d value */
    for (int i = 0; i < 8; i++) TRY({CGO_CAT, {all_dt[i], all_dt[(i + ind) % 8], all_dt[i]}, 0, ind, ind});   /* cat, stack */
    TRY({CGO_ICHECK, {GRACE_INT32}, 0, ind, ind});
    TRY({CGO_ICHECK, {GRACE_INT64}, 0, ind, ind});
    for (int i = 0; i < 8; i++) {   /* nonzero and masked_select: count, positions, values (any mask dtype) */
      TRY({CGO_NZ, {GRACE_INT64, all_dt[i], all_dt[i]}, CGO_NZ_COUNT, ind, ind});
      TRY({CGO_NZ, {GRACE_INT64, all_dt[i], all_dt[i]}, CGO_NZ_POS, ind, ind});
      TRY({CGO_NZ, {all_dt[i], GRACE_BOOL, all_dt[i]}, CGO_NZ_VALUES, ind, ind});
    }
    for (int i = 0; i < 8; i++)   /* index_put_ with accumulate: the dtypes with an atomic add, values of any dtype */
      if (all_dt[i] == GRACE_FLOAT32 || all_dt[i] == GRACE_FLOAT64 || all_dt[i] == GRACE_INT32 || all_dt[i] == GRACE_INT64)
        for (int j = 0; j < 8; j += 1 + ind) TRY({CGO_IADD, {all_dt[i], all_dt[j], GRACE_INT64}, 0, ind, ind});
    for (int v = 0; v < CGO_NCREATE; v++)
      for (int i = 0; i < 8; i++) {
        int fl = grace_dtype_is_float(all_dt[i]);
        if ((v == CGO_RAND || v == CGO_RANDN) && !fl) continue;
        if (v == CGO_ARANGE_I && fl) continue;
        TRY({CGO_CREATE, {all_dt[i]}, v, ind, ind});
      }
    for (int i = 0; i < 4; i++) {
      for (int v = 0; v < 8; v++) TRY({CGO_SOFTMAX, {float_dt[i], float_dt[(i + v) % 4]}, v, ind, ind});
      for (int v = 0; v < 32; v += 1 + ind) TRY({CGO_NORM, {float_dt[i], float_dt[(i + 1) % 4], float_dt[i]}, v, ind, ind});
      /* attention per dtype (out, q/kt/v, scale): no flags, and every flag (scale divided, mask kept) */
      TRY({CGO_ATTN, {float_dt[i], float_dt[i], float_dt[(i + 1) % 4]},
           (ind ? 15 : 0) | (float_dt[i] == GRACE_FLOAT64 ? CGO_ATTN_F64 : 0), ind, ind});
      /* the tiled kernel (float compute): every flag, or a scale by value with a mask */
      if (float_dt[i] != GRACE_FLOAT64)
        TRY({CGO_ATTN, {float_dt[i], float_dt[i], float_dt[(i + 1) % 4]},
             CGO_ATTN_TILED | (ind ? 15 : CGO_ATTN_SVAL | CGO_ATTN_MASK | CGO_ATTN_DIV), ind, ind});
      if (float_dt[i] != GRACE_FLOAT64)   /* the decode kernel: 1, 8, 16 vectors a key row, 2, 16, 1 a value row */
        for (int l = 0; l < 3; l++)
          TRY({CGO_ATTN, {float_dt[i], float_dt[i], float_dt[(i + 1) % 4]},
               CGO_ATTN_DECODE | (int[]){0, 3, 4}[l] << CGO_ATTN_LK_SHIFT | (int[]){1, 4, 0}[l] << CGO_ATTN_LV_SHIFT |
               (ind ? 15 : l == 1 ? CGO_ATTN_SVAL | CGO_ATTN_MASK | CGO_ATTN_KEEP : 0), ind, ind});
      if (float_dt[i] != GRACE_FLOAT64)   /* keys split over a cluster's blocks (decode) */
        TRY({CGO_ATTN, {float_dt[i], float_dt[i], float_dt[i]},
             CGO_ATTN_TILED | CGO_ATTN_SPLIT | (ind ? CGO_ATTN_SCALE : CGO_ATTN_SVAL | CGO_ATTN_MASK), ind, ind});
    }
  }
#undef TRY
  is_int(fails, 0, "all %d template instances compile with NVRTC for sm_90 (plain and indirect)", count);
}

static int count_of(const char *s, const char *what) {
  int n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

static void source_checks(void) {
  cg_kernel k;
  ok(cg_ops_source(vm, &(cgo_spec){CGO_ICHECK, {GRACE_INT32}, 0, 0, 0}, &k) == GRACE_OK &&
     strstr(k.src, "atomicMin(flag, i)") && strstr(k.src, "- p.base") && strstr(k.src, "q >= p.bound"),
     "index check: records the first bad position in the flag word, honours the index base");
  cg_kernel_free(vm, &k);
  ok(cg_ops_source(vm, &(cgo_spec){CGO_CREATE, {GRACE_FLOAT32}, CGO_RANDN, 0, 0}, &k) == GRACE_OK &&
     strstr(k.src, "0xD2511F53u") && strstr(k.src, "0xCD9E8D57u") && strstr(k.src, "0x9E3779B9u") &&
     strstr(k.src, "0xBB67AE85u") && strstr(k.src, "r < 10") && strstr(k.src, "6.283185307179586") &&
     strstr(k.src, "log(u1)"),
     "randn: Philox4x32-10 constants and the CPU's Box-Muller in double");
  cg_kernel_free(vm, &k);
  ok(cg_ops_source(vm, &(cgo_spec){CGO_CREATE, {GRACE_FLOAT32}, CGO_RAND, 1, 0}, &k) == GRACE_OK &&
     strstr(k.src, "long long *S_seed") && strstr(k.src, "long long *S_offset") && strstr(k.src, "D_t **P_out") && strstr(k.src, "typedef float D_t;"),
     "indirect: tensor pointers as T**, scalars (seed, offset) through pointers");
  cg_kernel_free(vm, &k);
  ok(cg_ops_source(vm, &(cgo_spec){CGO_SORT, {GRACE_FLOAT32}, 1, 0, 0}, &k) == GRACE_OK &&
     strstr(k.src, "ka == kb && ia > ib") && strstr(k.src, "~0ULL") && strstr(k.src, "if (d != d) return ~0ULL"),
     "sort: ties broken by index (stable), NaN largest, descending by inverted keys");
  cg_kernel_free(vm, &k);
  ok(cg_ops_source(vm, &(cgo_spec){CGO_IMOVE, {GRACE_FLOAT32, GRACE_FLOAT32, GRACE_INT64}, 0, 0, 0}, &k) == GRACE_OK &&
     strstr(k.src, "for (long long l = 0; l < p.len; l++)"),
     "scatter/index_copy_: the indexed dim is looped in order by one thread (last write wins)");
  cg_kernel_free(vm, &k);
  ok(cg_ops_source(vm, &(cgo_spec){CGO_NZ, {GRACE_INT64, GRACE_FLOAT32, GRACE_FLOAT32}, CGO_NZ_POS, 0, 0}, &k) == GRACE_OK &&
     strstr(k.src, "cnt[0] = sum") && strstr(k.src, "+ p.base") && strstr(k.src, "M_ld(m + mo) == 0.0") &&
     strstr(k.src, "C_t *P_cnt"),
     "nonzero: counts scanned in order, positions offset by the index base, a NaN counts as nonzero");
  cg_kernel_free(vm, &k);
  ok(cg_ops_source(vm, &(cgo_spec){CGO_NZ, {GRACE_FLOAT16, GRACE_BOOL, GRACE_FLOAT16}, CGO_NZ_COUNT, 0, 0}, &k) == GRACE_OK &&
     strstr(k.src, "#define CGO_NZ_COUNT_ONLY 1") && strstr(k.src, "#if !CGO_NZ_COUNT_ONLY"),
     "masked_select's counting pass writes no values (its body's writes are under #if !CGO_NZ_COUNT_ONLY)");
  cg_kernel_free(vm, &k);
  ok(cg_ops_source(vm, &(cgo_spec){CGO_IADD, {GRACE_INT64, GRACE_INT32, GRACE_INT64}, 0, 0, 0}, &k) == GRACE_OK &&
     strstr(k.src, "atomicAdd((unsigned long long *)d") && strstr(k.src, "I_ldi(off + io)"),
     "index_put_ accumulate: int64 added atomically at the precomputed offsets");
  cg_kernel_free(vm, &k);
  ok(cg_ops_source(vm, &(cgo_spec){CGO_IADD, {GRACE_FLOAT16, GRACE_FLOAT16, GRACE_INT64}, 0, 0, 0}, &k) == GRACE_EARG,
     "index_put_ accumulate into float16: no kernel (the CPU takes it)");
  ok(cg_ops_source(vm, &(cgo_spec){CGO_NTMPL, {GRACE_FLOAT32}, 0, 0, 0}, &k) == GRACE_EARG, "an invalid template is an error");
  is_int(cg_ops_nptr(CGO_NORM), 4, "norm takes y, x, weight, bias");
  for (int regs = 0; regs < 2; regs++) {   /* the row read once into registers, or once per pass (cg_ops_rows.cuh) */
    ok(cg_ops_source(vm, &(cgo_spec){CGO_NORM, {GRACE_BFLOAT16, GRACE_FLOAT32, GRACE_BFLOAT16}, 3 | (regs ? CGO_NORM_REGS : 0), 0, 0},
                     &k) == GRACE_OK && strstr(k.src, regs ? "#define CGO_NORM_REGS 1" : "#define CGO_NORM_REGS 0") &&
                     count_of(k.src, "xv[t] = CGO_XLD(x + xo + l * p.xl)") == 1 && count_of(k.src, "#define CGO_X xv[t]") == 1,
       "layer_norm %s", regs ? "in registers: x read once" : "without registers: x read by each pass");
    cg_kernel_free(vm, &k);
  }
}

/* The attention launch plans of the benchmark shapes on an H200 (132 SMs, 100 KB of shared memory granted), each
 * worked out by hand from the rules in cg_ops.h. */
static void attn_plans(void) {
  cgo_attn_plan p;
  /* GPT-2 decode's shape as the tiled kernel lays it out (op_attention runs the decode kernel there; rows of more
   * than CGO_ATTN_DECODE_MAXN keys take this plan): 12 heads of one query row against 129 keys. R: 16, 8, 4, 2
   * exceed M = 1, so 1; 12 tiles; a cluster of min(132 / 12, 8) = 8 blocks, 129 / 16 = 8 allows it;
   * ceil(129 / 8) = 17 keys a block -> C 24;
   * KP 68: 4 * (24*68 + 24*64 + 64 + 24 + 3 + 256) = 14060 bytes */
  cg_ops_attn_plan(12, 1, 129, 64, 64, 0, 132, 100 * 1024, 1, &p);
  ok(p.R == 1 && p.tiles == 12 && p.S == 8 && p.C == 24 && p.smem == 14060 && p.tiled,
     "decode: one row a block, the keys split over 8 blocks of 24-key chunks (R %lld S %lld C %lld smem %u)",
     (long long)p.R, (long long)p.S, (long long)p.C, p.smem);
  /* the same without clusters: one block a head over all 129 keys, C 136: 4 * (136*68 + 136*64 + 64 + 136 + 3 + 256) */
  cg_ops_attn_plan(12, 1, 129, 64, 64, 0, 132, 100 * 1024, 0, &p);
  ok(p.S == 1 && p.C == 136 && p.smem == 73644 && p.tiled, "decode without clusters: one 136-key chunk a head");
  /* st: 8 heads x 64 rows x 64 keys. Tiles at R = 16, 8, 4: 32, 64, 128 (< 132), at R = 2: 256 -> R 2, no split */
  cg_ops_attn_plan(512, 64, 64, 64, 64, 0, 132, 100 * 1024, 1, &p);
  ok(p.R == 2 && p.tiles == 256 && p.S == 1 && p.C == 64 && p.tiled, "short sequences: 2 rows a block, one chunk");
  /* fewer than 32 keys leave no 16 per block for a second one */
  cg_ops_attn_plan(12, 1, 31, 64, 64, 0, 132, 100 * 1024, 1, &p);
  ok(p.S == 1 && p.C == 32, "31 keys: no split");
  /* float64 computes in the per-row kernel */
  cg_ops_attn_plan(12, 1, 129, 64, 64, 1, 132, 100 * 1024, 1, &p);
  ok(!p.tiled && p.S == 1, "float64: the per-row kernel");
  /* D = Dv = 1024: even 16-key chunks need 4 * (16*1028 + 16*1024 + 1024 + 16 + 3 + 256) = 136524 bytes > 100 KB */
  cg_ops_attn_plan(4, 4, 512, 1024, 1024, 0, 132, 100 * 1024, 1, &p);
  ok(!p.tiled && p.S == 1 && p.C == 16, "rows too wide for shared memory: the per-row kernel");
}

/* ---- device vs CPU ---- */
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1p-53;
}

/* A CPU tensor of dt with values from gen (0: floats in [-3, 3) with repeats; 1: ints in [0, 5)). */
static grace_tensor *cpu_rand(grace_dtype dt, int nd, const int64_t *sz, int ints) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++) n *= sz[d];
  double *buf = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) buf[i] = ints ? (double)(int)(urand() * 5) : (urand() < 0.1 ? 1.0 : urand() * 6 - 3);
  grace_tensor *t = NULL;
  grace_tensor_from_data(vm, dt, nd, sz, GRACE_FLOAT64, buf, &t);
  free(buf);
  return t;
}
static grace_tensor *cpu_ints(grace_dtype dt, int nd, const int64_t *sz, const int64_t *v) {
  grace_tensor *t = NULL;
  grace_tensor_from_data(vm, dt, nd, sz, GRACE_INT64, v, &t);
  return t;
}
static grace_tensor *to_dev(grace_tensor *t, grace_device dev) {
  grace_attrs a = {0};
  a.device = dev;
  grace_tensor *o = NULL;
  if (t && grace_run(vm, GRACE_OP_TO_DEVICE, 1, &t, &a, 1, &o) != GRACE_OK) printf("# to: %s\n", grace_last_error(vm));
  return o;
}
/* A view of t through op (transpose, narrow, ...) with attrs a. */
static grace_tensor *view(grace_tensor *t, grace_op op, const grace_attrs *a) {
  grace_tensor *o = NULL;
  if (t && grace_run(vm, op, 1, &t, a, 1, &o) != GRACE_OK) printf("# view: %s\n", grace_last_error(vm));
  return o;
}
static grace_tensor *transposed(grace_tensor *t) {
  grace_attrs a = {0};
  a.ndims = 2; a.dims[0] = 0; a.dims[1] = 1;
  return view(t, GRACE_OP_TRANSPOSE, &a);
}

static double tol_of(grace_dtype dt) {
  return dt == GRACE_FLOAT32 ? 2e-6 : dt == GRACE_FLOAT64 ? 1e-13 : dt == GRACE_FLOAT16 ? 1e-3 : dt == GRACE_BFLOAT16 ? 8e-3 : 0;
}

/* Same dtype, shape and values (exact when tol is 0; int64 compared as integers). */
static int same_tensor(grace_tensor *g, grace_tensor *c, double tol, const char *what) {
  if (!g || !c) { printf("# %s: missing result\n", what); return 0; }
  if (grace_tensor_device(g) != GRACE_CUDA || grace_tensor_device(c) != GRACE_CPU) {
    printf("# %s: results on the wrong devices\n", what);
    return 0;
  }
  if (grace_tensor_dtype(g) != grace_tensor_dtype(c) || grace_tensor_ndim(g) != grace_tensor_ndim(c)) {
    printf("# %s: dtype/rank %d/%d vs %d/%d\n", what, grace_tensor_dtype(g), grace_tensor_ndim(g), grace_tensor_dtype(c), grace_tensor_ndim(c));
    return 0;
  }
  int nd = grace_tensor_ndim(g);
  int64_t n = 1;
  for (int d = 0; d < nd; d++) {
    if (grace_tensor_sizes(g)[d] != grace_tensor_sizes(c)[d]) { printf("# %s: sizes differ in dim %d\n", what, d); return 0; }
    n *= grace_tensor_sizes(g)[d];
  }
  int good = 1;
  if (grace_dtype_is_int(grace_tensor_dtype(g))) {
    int64_t *a = malloc(8 * (size_t)(n ? n : 1)), *b = malloc(8 * (size_t)(n ? n : 1));
    good = grace_tensor_read(vm, g, GRACE_INT64, a) == GRACE_OK && grace_tensor_read(vm, c, GRACE_INT64, b) == GRACE_OK;
    for (int64_t i = 0; good && i < n; i++)
      if (a[i] != b[i]) { printf("# %s: [%lld] %lld vs %lld\n", what, (long long)i, (long long)a[i], (long long)b[i]); good = 0; }
    free(a); free(b);
    return good;
  }
  double *a = malloc(8 * (size_t)(n ? n : 1)), *b = malloc(8 * (size_t)(n ? n : 1));
  good = grace_tensor_read(vm, g, GRACE_FLOAT64, a) == GRACE_OK && grace_tensor_read(vm, c, GRACE_FLOAT64, b) == GRACE_OK;
  for (int64_t i = 0; good && i < n; i++) {
    double d = fabs(a[i] - b[i]);
    if (a[i] != b[i] && !(a[i] != a[i] && b[i] != b[i]) && !(d <= tol * (1 + fabs(b[i])))) {
      printf("# %s: [%lld] %.9g vs %.9g\n", what, (long long)i, a[i], b[i]);
      good = 0;
    }
  }
  free(a); free(b);
  return good;
}

/* Runs op on the CPU inputs and on copies of them on the device; compares every output. Inputs may be views:
 * the device copies get the same view by `mk` (NULL: plain copies). Takes ownership of the inputs. */
typedef grace_tensor *(*mkview)(grace_tensor *);
static void check_op(const char *what, grace_op op, int nin, grace_tensor **cin, const mkview *mk, const grace_attrs *a,
                     int nout, double tol) {
  grace_tensor *gin[4] = {0}, *cv[4] = {0}, *co[2] = {0}, *go[2] = {0};
  for (int i = 0; i < nin; i++) {
    if (!cin[i]) continue;
    grace_tensor *g = to_dev(cin[i], GRACE_CUDA);
    cv[i] = mk && mk[i] ? mk[i](cin[i]) : (grace_tensor_retain(cin[i]), cin[i]);
    gin[i] = mk && mk[i] ? mk[i](g) : (grace_tensor_retain(g), g);
    grace_tensor_release(g);
  }
  grace_status cs = grace_run(vm, op, nin, cv, a, nout, co);
  char cmsg[512];
  snprintf(cmsg, sizeof cmsg, "%s", grace_last_error(vm));
  grace_status gs = grace_run(vm, op, nin, gin, a, nout, go);
  if (cs != GRACE_OK || gs != GRACE_OK) {
    ok(cs == gs && !strcmp(cmsg, grace_last_error(vm)), "%s: same status (%s) and message", what, grace_status_name(cs));
    if (cs != gs || strcmp(cmsg, grace_last_error(vm))) printf("# cpu: %s\n# gpu: %s\n", cmsg, grace_last_error(vm));
  } else if (nout == 0) {   /* in place: compare the written inputs */
    ok(same_tensor(gin[0], cv[0], tol, what) && grace_tensor_version(gin[0]) == grace_tensor_version(cv[0]),
       "%s: same result and version", what);
  } else {
    int good = 1;
    for (int i = 0; i < nout; i++) good &= same_tensor(go[i], co[i], tol, what);
    ok(good, "%s", what);
  }
  for (int i = 0; i < nin; i++) { grace_tensor_release(cin[i]); grace_tensor_release(cv[i]); grace_tensor_release(gin[i]); }
  for (int i = 0; i < 2; i++) { grace_tensor_release(co[i]); grace_tensor_release(go[i]); }
}

static grace_tensor *narrow1(grace_tensor *t) {   /* dim 1 from 1, length size-2 */
  grace_attrs a = {0};
  a.ndims = 1; a.dims[0] = 1; a.i0 = 1; a.i1 = grace_tensor_sizes(t)[1] - 2;
  return view(t, GRACE_OP_NARROW, &a);
}

#define SZ(...) (int64_t[]){__VA_ARGS__}
#define IN(...) (grace_tensor *[]){__VA_ARGS__}
static grace_attrs dimattr(int64_t d) { grace_attrs a = {0}; a.ndims = 1; a.dims[0] = d; return a; }

static void gpu_moves(void) {
  mkview T1[] = {transposed}, N1[] = {narrow1}, TT[] = {transposed, transposed};
  grace_dtype dts[] = {GRACE_FLOAT32, GRACE_FLOAT16, GRACE_INT64, GRACE_BOOL};
  for (int i = 0; i < 4; i++) {
    char w[64];
    snprintf(w, sizeof w, "contiguous of a transposed %s [37, 129]", grace_dtype_name(dts[i]));
    check_op(w, GRACE_OP_CONTIGUOUS, 1, IN(cpu_rand(dts[i], 2, SZ(37, 129), 0)), T1, NULL, 1, 0);
    snprintf(w, sizeof w, "clone of a narrowed %s [5, 9, 3]", grace_dtype_name(dts[i]));
    check_op(w, GRACE_OP_CLONE, 1, IN(cpu_rand(dts[i], 3, SZ(5, 9, 3), 0)), N1, NULL, 1, 0);
  }
  check_op("clone of an empty [0, 4]", GRACE_OP_CLONE, 1, IN(cpu_rand(GRACE_FLOAT32, 2, SZ(0, 4), 0)), NULL, NULL, 1, 0);
  grace_attrs a = dimattr(1);
  check_op("cat dim 1 of f32 [3,2] and transposed i32 [5,3] (promotes)", GRACE_OP_CAT, 2,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(2, 3), 0), cpu_rand(GRACE_INT32, 2, SZ(5, 3), 1)), TT, &a, 1, 0);
  a = dimattr(0);
  check_op("cat dim 0 with a legacy empty [0]", GRACE_OP_CAT, 3,
           IN(cpu_rand(GRACE_FLOAT64, 2, SZ(3, 4), 0), cpu_rand(GRACE_FLOAT64, 1, SZ(0), 0), cpu_rand(GRACE_FLOAT64, 2, SZ(1, 4), 0)),
           NULL, &a, 1, 0);
  check_op("cat of mismatched shapes: the CPU's error", GRACE_OP_CAT, 2,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(3, 4), 0), cpu_rand(GRACE_FLOAT32, 2, SZ(3, 5), 0)), NULL, &a, 1, 0);
  for (int d = -3; d <= 2; d++) {
    char w[64];
    a = dimattr(d);
    snprintf(w, sizeof w, "stack of two transposed [4, 6] at dim %d", d);
    check_op(w, GRACE_OP_STACK, 2, IN(cpu_rand(GRACE_BFLOAT16, 2, SZ(6, 4), 0), cpu_rand(GRACE_BFLOAT16, 2, SZ(6, 4), 0)),
             TT, &a, 1, 0);
  }
  for (int k = -2; k <= 3; k += 1) {
    a = (grace_attrs){0};
    a.i0 = k;
    char w[64];
    snprintf(w, sizeof w, "triu k=%d of [3, 4, 5]", k);
    check_op(w, GRACE_OP_TRIU, 1, IN(cpu_rand(GRACE_FLOAT32, 3, SZ(3, 4, 5), 0)), NULL, &a, 1, 0);
    snprintf(w, sizeof w, "tril k=%d of a transposed [7, 3]", k);
    check_op(w, GRACE_OP_TRIL, 1, IN(cpu_rand(GRACE_INT32, 2, SZ(7, 3), 1)), T1, &a, 1, 0);
  }
  a = (grace_attrs){0};
  a.nshape = 3; a.shape[0] = 2; a.shape[1] = 1; a.shape[2] = 3;
  check_op("repeat [2, 1, 3] of a transposed [4, 5]", GRACE_OP_REPEAT, 1, IN(cpu_rand(GRACE_FLOAT16, 2, SZ(5, 4), 0)), T1, &a, 1, 0);
  a.shape[1] = 0;
  check_op("repeat with a zero count", GRACE_OP_REPEAT, 1, IN(cpu_rand(GRACE_FLOAT16, 2, SZ(5, 4), 0)), NULL, &a, 1, 0);
  a = dimattr(1);
  a.i0 = 2; a.i1 = 3;
  check_op("slice_scatter: narrow(1, 2, 3) of a transposed base", GRACE_OP_SLICE_SCATTER, 2,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(8, 6), 0), cpu_rand(GRACE_FLOAT32, 2, SZ(6, 3), 0)), (mkview[]){transposed, NULL}, &a, 1, 0);
  a.flag = 1; a.i0 = 4;
  check_op("slice_scatter: select(1, 4) with a broadcast src", GRACE_OP_SLICE_SCATTER, 2,
           IN(cpu_rand(GRACE_INT64, 2, SZ(5, 7), 1), cpu_rand(GRACE_INT64, 1, SZ(1), 1)), NULL, &a, 1, 0);
  /* in place */
  check_op("copy_ into a transposed f32 from a broadcast f64 row", GRACE_OP_COPY_, 2,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(6, 4), 0), cpu_rand(GRACE_FLOAT64, 1, SZ(6), 0)), (mkview[]){transposed, NULL}, NULL, 0, 0);
  check_op("copy_ f32 -> i32 (truncation) and into u8", GRACE_OP_COPY_, 2,
           IN(cpu_rand(GRACE_INT32, 2, SZ(3, 5), 1), cpu_rand(GRACE_FLOAT32, 2, SZ(3, 5), 0)), NULL, NULL, 0, 0);
  check_op("copy_ of a non-broadcasting source: the CPU's error", GRACE_OP_COPY_, 2,
           IN(cpu_rand(GRACE_INT32, 2, SZ(3, 5), 1), cpu_rand(GRACE_FLOAT32, 1, SZ(4), 0)), NULL, NULL, 0, 0);
  a = (grace_attrs){0};
  a.a = -2.75;
  check_op("fill_ -2.75 of a narrowed i32", GRACE_OP_FILL_, 1, IN(cpu_rand(GRACE_INT32, 2, SZ(4, 6), 1)), N1, &a, 0, 0);
  check_op("fill_ -2.75 of f16", GRACE_OP_FILL_, 1, IN(cpu_rand(GRACE_FLOAT16, 2, SZ(4, 6), 0)), NULL, &a, 0, 0);
}

static int64_t launches(void) {
  grace_device_stats st;
  grace_device_stats_get(vm, &st);
  return (int64_t)st.kernel_launches;
}

/* cat and stack of many inputs: CGO_CAT_MAX pieces a launch, a launch per run of one source dtype, views among
 * them; the same values as the CPU's */
static void gpu_cat_many(void) {
  grace_tensor *cin[12], *cv[12], *gin[12], *co = NULL, *go = NULL;
  grace_attrs a = dimattr(0);
  for (int i = 0; i < 11; i++) {   /* [i + 1, 5] along dim 0: f32, with an f16 run at 4..5; odd ones transposed */
    grace_dtype dt = i == 4 || i == 5 ? GRACE_FLOAT16 : GRACE_FLOAT32;
    cin[i] = i % 2 ? cpu_rand(dt, 2, SZ(5, i + 1), 0) : cpu_rand(dt, 2, SZ(i + 1, 5), 0);
    grace_tensor *g = to_dev(cin[i], GRACE_CUDA);
    cv[i] = i % 2 ? transposed(cin[i]) : (grace_tensor_retain(cin[i]), cin[i]);
    gin[i] = i % 2 ? transposed(g) : (grace_tensor_retain(g), g);
    grace_tensor_release(g);
  }
  int64_t l0 = launches();
  ok(grace_run(vm, GRACE_OP_CAT, 11, cv, &a, 1, &co) == GRACE_OK && grace_run(vm, GRACE_OP_CAT, 11, gin, &a, 1, &go) == GRACE_OK &&
     same_tensor(go, co, 0, "cat of 11"), "cat of 11 inputs (f32, f16, transposed views) equals the CPU's");
  /* runs: f32 0..3 (one launch), f16 4..5 (one), f32 6..10 (one) */
  is_int((int)(launches() - l0), 3, "cat of 11 inputs in three runs of one dtype: 3 launches");
  for (int i = 0; i < 11; i++) { grace_tensor_release(cin[i]); grace_tensor_release(cv[i]); grace_tensor_release(gin[i]); }
  grace_tensor_release(co); grace_tensor_release(go);
  co = go = NULL;
  /* stack of 12 narrowed views (decode's new keys: each a [1, 4, 1, 8] slice of a bigger row) at dim 0 */
  grace_tensor *big = cpu_rand(GRACE_BFLOAT16, 4, SZ(1, 4, 3, 8), 0), *gbig = to_dev(big, GRACE_CUDA);
  for (int i = 0; i < 12; i++) {
    grace_attrs n = {0};
    n.ndims = 1; n.dims[0] = 2; n.i0 = i % 3; n.i1 = 1;
    cv[i] = view(big, GRACE_OP_NARROW, &n);
    gin[i] = view(gbig, GRACE_OP_NARROW, &n);
  }
  l0 = launches();
  ok(grace_run(vm, GRACE_OP_STACK, 12, cv, &a, 1, &co) == GRACE_OK && grace_run(vm, GRACE_OP_STACK, 12, gin, &a, 1, &go) == GRACE_OK &&
     same_tensor(go, co, 0, "stack of 12"), "stack of 12 narrowed bf16 views equals the CPU's");
  is_int((int)(launches() - l0), 2, "stack of 12: two launches of up to 8 pieces");
  for (int i = 0; i < 12; i++) { grace_tensor_release(cv[i]); grace_tensor_release(gin[i]); }
  grace_tensor_release(big); grace_tensor_release(gbig); grace_tensor_release(co); grace_tensor_release(go);
}

static void gpu_index(void) {
  grace_attrs a = dimattr(1);
  check_op("index_select dim 1 (int32 ids, repeats) of a transposed [9, 5]", GRACE_OP_INDEX_SELECT, 2,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(9, 5), 0), cpu_ints(GRACE_INT32, 1, SZ(6), SZ(8, 0, 3, 3, 7, 1))),
           (mkview[]){transposed, NULL}, &a, 1, 0);
  check_op("index_select with an index out of range: the CPU's error", GRACE_OP_INDEX_SELECT, 2,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(5, 9), 0), cpu_ints(GRACE_INT64, 1, SZ(4), SZ(1, 2, 9, -1))), NULL, &a, 1, 0);
  check_op("index_select with an empty index", GRACE_OP_INDEX_SELECT, 2,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(5, 9), 0), cpu_ints(GRACE_INT64, 1, SZ(0), SZ(0))), NULL, &a, 1, 0);
  a = dimattr(0);
  check_op("gather dim 0 of [4, 6] by a [3, 5] index", GRACE_OP_GATHER, 2,
           IN(cpu_rand(GRACE_FLOAT64, 2, SZ(4, 6), 0), cpu_ints(GRACE_INT64, 2, SZ(3, 5), SZ(0, 1, 2, 3, 0, 3, 3, 2, 1, 0, 1, 1, 1, 2, 2))),
           NULL, &a, 1, 0);
  check_op("gather with a negative index: the CPU's error", GRACE_OP_GATHER, 2,
           IN(cpu_rand(GRACE_FLOAT64, 2, SZ(4, 6), 0), cpu_ints(GRACE_INT64, 2, SZ(1, 2), SZ(0, -3))), NULL, &a, 1, 0);
  a = dimattr(1);
  check_op("scatter dim 1 with repeated indices (last write wins)", GRACE_OP_SCATTER, 3,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(3, 5), 0), cpu_ints(GRACE_INT32, 2, SZ(3, 4), SZ(0, 0, 4, 0, 2, 2, 2, 1, 3, 3, 1, 3)),
              cpu_rand(GRACE_FLOAT32, 2, SZ(3, 4), 0)),
           NULL, &a, 1, 0);
  check_op("scatter of a 0-d f64 value into i64", GRACE_OP_SCATTER, 3,
           IN(cpu_rand(GRACE_INT64, 2, SZ(3, 5), 1), cpu_ints(GRACE_INT64, 2, SZ(2, 2), SZ(4, 0, 1, 1)), cpu_rand(GRACE_FLOAT64, 0, NULL, 0)),
           NULL, &a, 1, 0);
  check_op("embedding: ids [2, 3] into a [10, 7] table", GRACE_OP_EMBEDDING, 2,
           IN(cpu_ints(GRACE_INT64, 2, SZ(2, 3), SZ(9, 0, 4, 4, 1, 2)), cpu_rand(GRACE_BFLOAT16, 2, SZ(10, 7), 0)), NULL, NULL, 1, 0);
  check_op("embedding: a transposed table", GRACE_OP_EMBEDDING, 2,
           IN(cpu_ints(GRACE_INT32, 1, SZ(4), SZ(6, 0, 6, 2)), cpu_rand(GRACE_FLOAT32, 2, SZ(5, 7), 0)), (mkview[]){NULL, transposed}, NULL, 1, 0);
  check_op("embedding: an id out of range: the CPU's error", GRACE_OP_EMBEDDING, 2,
           IN(cpu_ints(GRACE_INT64, 1, SZ(3), SZ(0, 10, 2)), cpu_rand(GRACE_FLOAT32, 2, SZ(10, 7), 0)), NULL, NULL, 1, 0);
  a = dimattr(0);
  check_op("index_copy_ dim 0 with a repeated index", GRACE_OP_INDEX_COPY_, 3,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(6, 4), 0), cpu_ints(GRACE_INT64, 1, SZ(3), SZ(5, 1, 5)), cpu_rand(GRACE_FLOAT32, 2, SZ(3, 4), 0)),
           NULL, &a, 0, 0);
}

static void gpu_scans(void) {
  grace_attrs a = dimattr(-1);
  grace_dtype fl[] = {GRACE_FLOAT32, GRACE_FLOAT64, GRACE_FLOAT16, GRACE_BFLOAT16};
  mkview T1[] = {transposed};
  for (int i = 0; i < 4; i++) {
    char w[96];
    for (int d = 0; d < 2; d++) {
      a = dimattr(d - 1);
      snprintf(w, sizeof w, "softmax dim %d of a transposed %s [33, 70]", d - 1, grace_dtype_name(fl[i]));
      check_op(w, GRACE_OP_SOFTMAX, 1, IN(cpu_rand(fl[i], 2, SZ(33, 70), 0)), T1, &a, 1, tol_of(fl[i]) * 4);
      snprintf(w, sizeof w, "log_softmax dim %d of %s [7, 1000]", d - 1, grace_dtype_name(fl[i]));
      check_op(w, GRACE_OP_LOG_SOFTMAX, 1, IN(cpu_rand(fl[i], 2, SZ(7, 1000), 0)), NULL, &a, 1, tol_of(fl[i]) * 4);
      snprintf(w, sizeof w, "cumsum dim %d of a transposed %s [17, 40]", d - 1, grace_dtype_name(fl[i]));
      check_op(w, GRACE_OP_CUMSUM, 1, IN(cpu_rand(fl[i], 2, SZ(17, 40), 0)), T1, &a, 1, 0);
    }
    snprintf(w, sizeof w, "layer_norm of %s [5, 300] with weight and bias", grace_dtype_name(fl[i]));
    a = (grace_attrs){0};
    a.a = 1e-5; a.has_a = 1;
    check_op(w, GRACE_OP_LAYER_NORM, 3,
             IN(cpu_rand(fl[i], 2, SZ(5, 300), 0), cpu_rand(GRACE_FLOAT32, 1, SZ(300), 0), cpu_rand(fl[i], 1, SZ(300), 0)),
             NULL, &a, 1, tol_of(fl[i]) * 8);
    snprintf(w, sizeof w, "layer_norm of a transposed %s [40, 9], no affine", grace_dtype_name(fl[i]));
    check_op(w, GRACE_OP_LAYER_NORM, 3, IN(cpu_rand(fl[i], 2, SZ(40, 9), 0), NULL, NULL), T1, &a, 1, tol_of(fl[i]) * 8);
    snprintf(w, sizeof w, "rms_norm of %s [3, 4, 33] with weight", grace_dtype_name(fl[i]));
    check_op(w, GRACE_OP_RMS_NORM, 2, IN(cpu_rand(fl[i], 3, SZ(3, 4, 33), 0), cpu_rand(fl[i], 1, SZ(33), 0)), NULL, NULL, 1,
             tol_of(fl[i]) * 8);
  }
  a = dimattr(0);
  check_op("cumsum of int32 gives int64", GRACE_OP_CUMSUM, 1, IN(cpu_rand(GRACE_INT32, 2, SZ(50, 3), 1)), NULL, &a, 1, 0);
  check_op("cumsum of bool", GRACE_OP_CUMSUM, 1, IN(cpu_rand(GRACE_BOOL, 1, SZ(77), 1)), NULL, &a, 1, 0);
  check_op("softmax of int32: the CPU's error", GRACE_OP_SOFTMAX, 1, IN(cpu_rand(GRACE_INT32, 1, SZ(7), 1)), NULL, &a, 1, 0);
  check_op("softmax of an empty [0, 5]", GRACE_OP_SOFTMAX, 1, IN(cpu_rand(GRACE_FLOAT32, 2, SZ(0, 5), 0)), NULL, &a, 1, 0);
  check_op("layer_norm with a mismatched weight: the CPU's error", GRACE_OP_LAYER_NORM, 3,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(2, 5), 0), cpu_rand(GRACE_FLOAT32, 1, SZ(4), 0), NULL), NULL, NULL, 1, 0);
  /* sort and topk: ties (values repeat) keep index order; NaN sorts largest */
  grace_dtype sd[] = {GRACE_FLOAT32, GRACE_FLOAT16, GRACE_INT64, GRACE_UINT8};
  for (int i = 0; i < 4; i++)
    for (int desc = 0; desc <= 1; desc++) {
      char w[96];
      a = dimattr(desc ? 0 : -1);
      a.flag = desc;
      snprintf(w, sizeof w, "sort %s dim %d of a transposed %s [31, 6] with ties", desc ? "descending" : "ascending",
               desc ? 0 : -1, grace_dtype_name(sd[i]));
      check_op(w, GRACE_OP_SORT, 1, IN(cpu_rand(sd[i], 2, SZ(31, 6), i >= 2)), T1, &a, 2, 0);
      a.i0 = 4;
      snprintf(w, sizeof w, "topk k=4 %s of %s [5, 1000]", desc ? "smallest" : "largest", grace_dtype_name(sd[i]));
      a.dims[0] = 1;
      check_op(w, GRACE_OP_TOPK, 1, IN(cpu_rand(sd[i], 2, SZ(5, 1000), i >= 2)), NULL, &a, 2, 0);
    }
  {
    float v[] = {3, NAN, -1, 0.0f, -0.0f, 3, INFINITY, NAN, -INFINITY, 2};
    grace_tensor *t = NULL;
    grace_tensor_from_data(vm, GRACE_FLOAT32, 1, SZ(10), GRACE_FLOAT32, v, &t);
    a = dimattr(0);
    check_op("sort with NaN, -0/+0 ties and infinities", GRACE_OP_SORT, 1, IN(t), NULL, &a, 2, 0);
  }
  a = dimattr(0);
  a.i0 = 7;
  check_op("topk with k past the size: the CPU's error", GRACE_OP_TOPK, 1, IN(cpu_rand(GRACE_FLOAT32, 1, SZ(5), 0)), NULL, &a, 2, 0);
}

/* Long rows, bigger shapes, the sort's limits. */
static void gpu_large(void) {
  mkview T1[] = {transposed};
  grace_attrs a = dimattr(1);
  for (int smallest = 0; smallest <= 1; smallest++) {
    a.i0 = 5; a.flag = smallest;
    check_op(smallest ? "topk k=5 smallest of f32 [3, 50257] (selection rounds, ties)" : "topk k=5 largest of f32 [3, 50257] (selection rounds, ties)",
             GRACE_OP_TOPK, 1, IN(cpu_rand(GRACE_FLOAT32, 2, SZ(3, 50257), 0)), NULL, &a, 2, 0);
  }
  a.i0 = 40; a.flag = 0;
  check_op("topk k=40 of a transposed bf16 [20000, 2] along dim 0", GRACE_OP_TOPK, 1,
           IN(cpu_rand(GRACE_BFLOAT16, 2, SZ(2, 20000), 0)), T1, &(grace_attrs){.ndims = 1, .dims = {0}, .i0 = 40}, 2, 0);
  a = dimattr(1);
  check_op("sort of i32 [2, 8192] (the longest shared-memory row)", GRACE_OP_SORT, 1,
           IN(cpu_rand(GRACE_INT32, 2, SZ(2, 8192), 1)), NULL, &a, 2, 0);
  /* longer rows are sorted through the CPU backend: still exact, ties in the CPU's order */
  check_op("sort of f32 [2, 8193] (past the shared-memory sort)", GRACE_OP_SORT, 1,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(2, 8193), 0)), NULL, &a, 2, 0);
  check_op("contiguous of a transposed f32 [1000, 1027]", GRACE_OP_CONTIGUOUS, 1, IN(cpu_rand(GRACE_FLOAT32, 2, SZ(1027, 1000), 0)),
           T1, NULL, 1, 0);
  a = dimattr(-1);
  check_op("softmax of f32 [4, 50257] (a block per row)", GRACE_OP_SOFTMAX, 1, IN(cpu_rand(GRACE_FLOAT32, 2, SZ(4, 50257), 0)), NULL, &a, 1, 1e-5);
  check_op("log_softmax of a transposed bf16 [5000, 3] (a block per row)", GRACE_OP_LOG_SOFTMAX, 1,
           IN(cpu_rand(GRACE_BFLOAT16, 2, SZ(3, 5000), 0)), T1, &(grace_attrs){.ndims = 1, .dims = {0}}, 1, 2e-2);
  check_op("softmax of f64 [2, 9000] (a block per row)", GRACE_OP_SOFTMAX, 1, IN(cpu_rand(GRACE_FLOAT64, 2, SZ(2, 9000), 0)), NULL, &a, 1, 1e-13);
  check_op("cumsum of f64 [1, 100000]", GRACE_OP_CUMSUM, 1, IN(cpu_rand(GRACE_FLOAT64, 2, SZ(1, 100000), 0)), NULL, &a, 1, 0);
  /* 2500 > 8 elements a thread of 256: each pass reads the row again (the rows above sit in registers) */
  check_op("layer_norm of f32 [3, 2500] (rows longer than the registers hold)", GRACE_OP_LAYER_NORM, 3,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(3, 2500), 0), cpu_rand(GRACE_FLOAT32, 1, SZ(2500), 0), cpu_rand(GRACE_FLOAT32, 1, SZ(2500), 0)),
           NULL, NULL, 1, 2e-5);
  check_op("rms_norm of f64 [2, 2049]", GRACE_OP_RMS_NORM, 1, IN(cpu_rand(GRACE_FLOAT64, 2, SZ(2, 2049), 0)), NULL, NULL, 1, 1e-12);
  check_op("layer_norm of f32 [64, 768]", GRACE_OP_LAYER_NORM, 3,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(64, 768), 0), cpu_rand(GRACE_FLOAT32, 1, SZ(768), 0), cpu_rand(GRACE_FLOAT32, 1, SZ(768), 0)),
           NULL, NULL, 1, 2e-5);
  a = dimattr(0);
  check_op("embedding of 2000 ids into a [50257, 64] table", GRACE_OP_EMBEDDING, 2,
           IN(cpu_ints(GRACE_INT64, 1, SZ(4), SZ(50256, 0, 17, 4096)), cpu_rand(GRACE_FLOAT32, 2, SZ(50257, 64), 0)), NULL, NULL, 1, 0);
}

/* copy_ between overlapping views of one storage (read through a copy), on both devices. */
static void gpu_overlap(void) {
  grace_tensor *c = cpu_rand(GRACE_FLOAT32, 1, SZ(40), 0), *g = to_dev(c, GRACE_CUDA), *r[2] = {c, g};
  grace_attrs dst = dimattr(0), src = dimattr(0);
  dst.i0 = 1; dst.i1 = 30; src.i0 = 0; src.i1 = 30;
  for (int i = 0; i < 2; i++) {
    grace_tensor *d = view(r[i], GRACE_OP_NARROW, &dst), *s = view(r[i], GRACE_OP_NARROW, &src);
    if (grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){d, s}, NULL, 0, NULL) != GRACE_OK) printf("# %s\n", grace_last_error(vm));
    grace_tensor_release(d); grace_tensor_release(s);
  }
  ok(same_tensor(g, c, 0, "overlap"), "copy_ between overlapping views of one storage (x[1:31] = x[0:30])");
  grace_tensor_release(c); grace_tensor_release(g);
}

/* Index values in a 1-based VM (Lua's): read, checked and produced with the base. */
static void gpu_base1(void) {
  grace_config cfg = {0};
  cfg.index_base = 1;
  char err[256];
  grace_vm *v1 = grace_vm_new(&cfg, err, sizeof err), *v0 = vm;
  if (!v1) { ok(0, "a 1-based VM: %s", err); return; }
  vm = v1;
  grace_attrs a = dimattr(1);
  check_op("1-based: gather dim 1 (indices 1..5)", GRACE_OP_GATHER, 2,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(2, 5), 0), cpu_ints(GRACE_INT64, 2, SZ(2, 3), SZ(1, 5, 3, 2, 2, 4))), NULL, &a, 1, 0);
  check_op("1-based: index 0 is out of range, with the CPU's message", GRACE_OP_INDEX_SELECT, 2,
           IN(cpu_rand(GRACE_FLOAT32, 2, SZ(2, 5), 0), cpu_ints(GRACE_INT32, 1, SZ(2), SZ(5, 0))), NULL, &a, 1, 0);
  check_op("1-based: sort gives 1-based indices", GRACE_OP_SORT, 1, IN(cpu_rand(GRACE_FLOAT32, 2, SZ(3, 9), 0)), NULL, &a, 2, 0);
  check_op("1-based: embedding ids", GRACE_OP_EMBEDDING, 2,
           IN(cpu_ints(GRACE_INT64, 1, SZ(3), SZ(1, 4, 4)), cpu_rand(GRACE_FLOAT32, 2, SZ(4, 3), 0)), NULL, NULL, 1, 0);
  vm = v0;
  grace_vm_free(v1);
}

static void gpu_create(void) {
  grace_op ops[] = {GRACE_OP_RAND, GRACE_OP_RANDN, GRACE_OP_RANDINT};
  grace_dtype dts[] = {GRACE_FLOAT32, GRACE_FLOAT64, GRACE_FLOAT16, GRACE_BFLOAT16};
  for (int o = 0; o < 3; o++)
    for (int i = 0; i < (o == 2 ? 1 : 4); i++) {
      grace_attrs a = {0};
      a.nshape = 2; a.shape[0] = 37; a.shape[1] = 1001;
      a.has_dtype = o < 2; a.dtype = dts[i];
      a.i0 = -5; a.i1 = 1000003;
      grace_tensor *c = NULL, *g = NULL, *c2 = NULL, *g2 = NULL;
      grace_manual_seed(vm, 1234 + (uint64_t)o);
      grace_run(vm, ops[o], 0, NULL, &a, 1, &c);
      grace_run(vm, ops[o], 0, NULL, &a, 1, &c2);
      grace_manual_seed(vm, 1234 + (uint64_t)o);
      a.device = GRACE_CUDA;
      if (grace_run(vm, ops[o], 0, NULL, &a, 1, &g) != GRACE_OK) printf("# %s\n", grace_last_error(vm));
      grace_run(vm, ops[o], 0, NULL, &a, 1, &g2);
      /* randn in double may differ from the CPU's libm in the last bit of a double */
      double tol = ops[o] == GRACE_OP_RANDN && dts[i] == GRACE_FLOAT64 ? 1e-15 : 0;
      ok(same_tensor(g, c, tol, "random") && same_tensor(g2, c2, tol, "random, second draw"),
         "%s %s [37, 1001]: the CPU's numbers for the seed, first and second op", grace_op_name(ops[o]),
         grace_dtype_name(grace_tensor_dtype(c)));
      grace_tensor_release(c); grace_tensor_release(g); grace_tensor_release(c2); grace_tensor_release(g2);
    }
  struct { grace_op op; grace_dtype dt; double a, b, c; int64_t i0; int exact; } cs[] = {
    {GRACE_OP_FULL, GRACE_INT32, 7.9, 0, 0, 0, 0}, {GRACE_OP_FULL, GRACE_BFLOAT16, 0.1, 0, 0, 0, 0},
    {GRACE_OP_ARANGE, GRACE_FLOAT32, 0.5, 10.25, 0.25, 0, 0}, {GRACE_OP_ARANGE, GRACE_INT64, 3, -40, -3, 0, 7},
    {GRACE_OP_ARANGE, GRACE_FLOAT64, 1, 2, 0.001, 0, 0}, {GRACE_OP_LINSPACE, GRACE_FLOAT32, -1, 3, 0, 101, 0},
    {GRACE_OP_LINSPACE, GRACE_FLOAT64, 0, 1, 0, 1, 0}, {GRACE_OP_EYE, GRACE_FLOAT16, 0, 0, 0, 0, 0},
    {GRACE_OP_ARANGE, GRACE_FLOAT32, 0, 1, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    grace_attrs a = {0};
    a.has_dtype = 1; a.dtype = cs[i].dt;
    a.a = cs[i].a; a.b = cs[i].b; a.c = cs[i].c; a.i0 = cs[i].i0;
    a.exact = cs[i].exact; a.ia = (int64_t)cs[i].a; a.ib = (int64_t)cs[i].b; a.ic = (int64_t)cs[i].c;
    a.nshape = 2; a.shape[0] = 5; a.shape[1] = 3;
    grace_tensor *c = NULL, *g = NULL;
    grace_status s1 = grace_run(vm, cs[i].op, 0, NULL, &a, 1, &c);
    char cmsg[512];
    snprintf(cmsg, sizeof cmsg, "%s", grace_last_error(vm));
    a.device = GRACE_CUDA;
    grace_status s2 = grace_run(vm, cs[i].op, 0, NULL, &a, 1, &g);
    if (s1 != GRACE_OK) ok(s1 == s2 && !strcmp(cmsg, grace_last_error(vm)), "%s #%zu: the CPU's error", grace_op_name(cs[i].op), i);
    else ok(s2 == GRACE_OK && same_tensor(g, c, 0, "create"), "%s %s #%zu: the CPU's values", grace_op_name(cs[i].op),
            grace_dtype_name(cs[i].dt), i);
    grace_tensor_release(c); grace_tensor_release(g);
  }
}

int main(void) {
  char err[256];
  vm = grace_vm_new(NULL, err, sizeof err);
  if (!vm) { printf("1..0 # SKIP no VM: %s\n", err); return 0; }
  source_checks();
  attn_plans();
  const char *why = cuda_nvrtc_why(vm);
  if (why) skip(why, "NVRTC compiles");
  else compile_all();
  if (!grace_cuda_available(vm)) {
    printf("# SKIP GPU tests: no CUDA device: %s\n", cuda_why(vm));
    skip("no CUDA device", "device vs CPU");
  } else {
    gpu_moves();
    gpu_cat_many();
    gpu_index();
    gpu_scans();
    gpu_create();
    gpu_large();
    gpu_overlap();
    gpu_base1();
  }
  grace_vm_free(vm);
  return tap_done();
}
