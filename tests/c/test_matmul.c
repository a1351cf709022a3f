/* test_matmul.c: matmul through the public API against a naive double-precision reference written here:
 * every dtype, 1-D and batched/broadcast shapes, strided operands, matrix-vector products, zero sizes,
 * errors. Also reports (does not assert) the float32 GEMM and GEMV speed. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) {   /* xorshift64*, uniform in [-1, 1) */
  rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
  return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static int64_t numel(int nd, const int64_t *sz) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++) n *= sz[d];
  return n;
}

static double *fill_random(int64_t n, grace_dtype dt) {
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    double r = urand();
    if (dt == GRACE_UINT8) v[i] = floor((r + 1) * 4);         /* 0..7 */
    else if (!grace_dtype_is_float(dt)) v[i] = floor(r * 6);   /* -6..5 */
    else v[i] = r;
  }
  return v;
}

static double *read_all(grace_tensor *t) {
  int64_t n = grace_tensor_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (grace_tensor_read(vm, t, GRACE_FLOAT64, v) != GRACE_OK) { free(v); return NULL; }
  return v;
}

/* A tensor of logical shape (nd, sz) holding random values of dtype dt; when `trans`, it is the transpose
 * view of a contiguous tensor (last two dims swapped), so its strides are not row-major. `vals` gets the
 * values as stored (after rounding to dt), in logical row-major order. */
static grace_tensor *make_operand(grace_dtype dt, int nd, const int64_t *sz, int trans, double **vals) {
  int64_t psz[8];
  for (int d = 0; d < nd; d++) psz[d] = sz[d];
  if (trans) { psz[nd - 1] = sz[nd - 2]; psz[nd - 2] = sz[nd - 1]; }
  double *raw = fill_random(numel(nd, sz), dt);
  grace_tensor *t = NULL, *v = NULL;
  if (grace_tensor_from_data(vm, dt, nd, psz, GRACE_FLOAT64, raw, &t) != GRACE_OK) { free(raw); return NULL; }
  free(raw);
  if (trans) {
    grace_attrs a = {.ndims = 2, .dims = {-1, -2}};
    if (grace_run(vm, GRACE_OP_TRANSPOSE, 1, &t, &a, 1, &v) != GRACE_OK) v = NULL;
    grace_tensor_release(t);
    t = v;
  }
  if (t) *vals = read_all(t);
  return t;
}

/* Naive matmul in double: 1-D operands promoted as NumPy does, batch dims broadcast. Returns the result
 * shape in (ond, osz) and the values (row-major) in a malloc'd array. */
static double *ref_matmul(int na, const int64_t *sa, const double *a, int nb, const int64_t *sb, const double *b,
                          int *ond, int64_t *osz) {
  int64_t M = na == 1 ? 1 : sa[na - 2], K = sa[na - 1], N = nb == 1 ? 1 : sb[nb - 1];
  int ba = na > 2 ? na - 2 : 0, bb = nb > 2 ? nb - 2 : 0, nbd = ba > bb ? ba : bb;
  int64_t bs[8], nbat = 1;
  for (int d = 0; d < nbd; d++) {
    int64_t x = d - (nbd - ba) >= 0 ? sa[d - (nbd - ba)] : 1, y = d - (nbd - bb) >= 0 ? sb[d - (nbd - bb)] : 1;
    bs[d] = x > y ? x : y;
    nbat *= bs[d];
  }
  *ond = 0;
  for (int d = 0; d < nbd; d++) osz[(*ond)++] = bs[d];
  if (na >= 2) osz[(*ond)++] = M;
  if (nb >= 2) osz[(*ond)++] = N;
  double *c = calloc((size_t)(nbat * M * N + 1), sizeof(double));
  for (int64_t bi = 0; bi < nbat; bi++) {
    int64_t idx[8], rem = bi, abase = 0, bbase = 0, amul = M * K, bmul = K * N;
    for (int d = nbd - 1; d >= 0; d--) { idx[d] = rem % bs[d]; rem /= bs[d]; }
    for (int d = nbd - 1; d >= 0; d--) {   /* row-major offsets into each operand's own batch dims */
      int da = d - (nbd - ba), db = d - (nbd - bb);
      if (da >= 0) { abase += (sa[da] == 1 ? 0 : idx[d]) * amul; amul *= sa[da]; }
      if (db >= 0) { bbase += (sb[db] == 1 ? 0 : idx[d]) * bmul; bmul *= sb[db]; }
    }
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += a[abase + i * K + k] * b[bbase + k * N + j];
        c[bi * M * N + i * N + j] = s;
      }
  }
  return c;
}

static double tol_for(grace_dtype dt, int64_t K, double ref) {
  switch (dt) {
  case GRACE_FLOAT32: return 1e-5 * (double)(K + 1);
  case GRACE_FLOAT64: return 1e-12 * (double)(K + 1);
  case GRACE_FLOAT16: return fabs(ref) * 1e-3 + 1e-5 * (double)(K + 1);   /* output rounding: 2^-11 relative */
  case GRACE_BFLOAT16: return fabs(ref) * 8e-3 + 1e-5 * (double)(K + 1);  /* 2^-8 relative */
  default: return 0;
  }
}

/* One random case: A (na, sa) @ B (nb, sb) in dtype dt, optionally with transposed-view operands. */
static void check_case(const char *what, grace_dtype dt, int na, const int64_t *sa, int ta, int nb, const int64_t *sb,
                       int tb) {
  double *av = NULL, *bv = NULL;
  grace_tensor *A = make_operand(dt, na, sa, ta, &av), *B = make_operand(dt, nb, sb, tb, &bv), *C = NULL;
  if (!A || !B) { ok(0, "%s: making operands: %s", what, grace_last_error(vm)); goto done; }
  int ond;
  int64_t osz[8];
  double *ref = ref_matmul(na, sa, av, nb, sb, bv, &ond, osz);
  grace_tensor *in[2] = {A, B};
  grace_status st = grace_run(vm, GRACE_OP_MATMUL, 2, in, NULL, 1, &C);
  if (st != GRACE_OK) { ok(0, "%s (%s): %s", what, grace_dtype_name(dt), grace_last_error(vm)); free(ref); goto done; }
  int shape_ok = grace_tensor_ndim(C) == ond && grace_tensor_dtype(C) == dt && grace_tensor_is_contiguous(C);
  for (int d = 0; shape_ok && d < ond; d++) shape_ok = grace_tensor_sizes(C)[d] == osz[d];
  double *got = read_all(C), maxerr = 0, worst_ref = 0;
  int64_t n = numel(ond, osz), K = sa[na - 1], bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double want = ref[i];
    if (dt == GRACE_UINT8) want = (double)(((int64_t)want % 256 + 256) % 256);
    else if (dt == GRACE_INT32) want = (double)(int32_t)(uint32_t)(int64_t)want;
    double e = fabs(got[i] - want);
    if (e > tol_for(dt, K, want)) bad++;
    if (e > maxerr) { maxerr = e; worst_ref = want; }
  }
  ok(shape_ok && bad == 0, "%s (%s): shape and %lld values (max error %.3g near %.4g)", what, grace_dtype_name(dt),
     (long long)n, maxerr, worst_ref);
  free(got);
  free(ref);
done:
  free(av); free(bv);
  grace_tensor_release(A); grace_tensor_release(B); grace_tensor_release(C);
}

static grace_tensor *from(grace_dtype dt, int nd, const int64_t *sz, const double *v) {
  static const double none = 0;   /* zero-size tensors: any valid pointer */
  grace_tensor *t = NULL;
  grace_tensor_from_data(vm, dt, nd, sz, GRACE_FLOAT64, v ? v : &none, &t);
  return t;
}

static grace_status mm(grace_tensor *a, grace_tensor *b, grace_tensor **c) {
  grace_tensor *in[2] = {a, b};
  return grace_run(vm, GRACE_OP_MATMUL, 2, in, NULL, 1, c);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void hand_cases(void) {
  /* [[1,2,3],[4,5,6]] @ [[7,8],[9,10],[11,12]] = [[58,64],[139,154]] */
  double av[] = {1, 2, 3, 4, 5, 6}, bv[] = {7, 8, 9, 10, 11, 12};
  grace_tensor *a = from(GRACE_FLOAT32, 2, (int64_t[]){2, 3}, av), *b = from(GRACE_FLOAT32, 2, (int64_t[]){3, 2}, bv);
  grace_tensor *c = NULL;
  ok(mm(a, b, &c) == GRACE_OK, "2x3 @ 3x2 runs");
  double got[4] = {0};
  if (c) grace_tensor_read(vm, c, GRACE_FLOAT64, got);
  ok(got[0] == 58 && got[1] == 64 && got[2] == 139 && got[3] == 154, "2x3 @ 3x2 = [[58,64],[139,154]] (got %g %g %g %g)",
     got[0], got[1], got[2], got[3]);
  grace_tensor_release(c); c = NULL;
  /* 1-D . 1-D: [1,2,3].[4,5,6] = 32, a 0-d result */
  grace_tensor *u = from(GRACE_FLOAT32, 1, (int64_t[]){3}, (double[]){1, 2, 3});
  grace_tensor *v = from(GRACE_FLOAT32, 1, (int64_t[]){3}, (double[]){4, 5, 6});
  ok(mm(u, v, &c) == GRACE_OK && grace_tensor_ndim(c) == 0, "dot gives a 0-d tensor");
  double d = 0;
  if (c) grace_tensor_read(vm, c, GRACE_FLOAT64, &d);
  is_near(d, 32, 0, "[1,2,3].[4,5,6] = 32");
  grace_tensor_release(c); c = NULL;
  /* [1,2,3] @ b = [1*7+2*9+3*11, 1*8+2*10+3*12] = [58, 64], shape [2] */
  ok(mm(u, b, &c) == GRACE_OK && grace_tensor_ndim(c) == 1 && grace_tensor_sizes(c)[0] == 2, "[3] @ [3,2] gives [2]");
  if (c) grace_tensor_read(vm, c, GRACE_FLOAT64, got);
  ok(got[0] == 58 && got[1] == 64, "[3] @ [3,2] = [58, 64]");
  grace_tensor_release(c); c = NULL;
  /* a @ [1,2,3] = [14, 32] */
  ok(mm(a, u, &c) == GRACE_OK && grace_tensor_ndim(c) == 1 && grace_tensor_sizes(c)[0] == 2, "[2,3] @ [3] gives [2]");
  if (c) grace_tensor_read(vm, c, GRACE_FLOAT64, got);
  ok(got[0] == 14 && got[1] == 32, "[2,3] @ [3] = [14, 32]");
  grace_tensor_release(c); c = NULL;

  /* int64 stays exact beyond 2^53: [[2^53+1]] @ [[1]] */
  int64_t big = (INT64_C(1) << 53) + 1, one = 1, r = 0;
  grace_tensor *bi = NULL, *oi = NULL;
  grace_tensor_from_data(vm, GRACE_INT64, 2, (int64_t[]){1, 1}, GRACE_INT64, &big, &bi);
  grace_tensor_from_data(vm, GRACE_INT64, 2, (int64_t[]){1, 1}, GRACE_INT64, &one, &oi);
  ok(mm(bi, oi, &c) == GRACE_OK && grace_tensor_dtype(c) == GRACE_INT64, "int64 matmul keeps int64");
  if (c) grace_tensor_read(vm, c, GRACE_INT64, &r);
  is_int(r, big, "int64 matmul is exact beyond 2^53");
  grace_tensor_release(c); c = NULL;

  /* errors */
  grace_tensor *a64 = from(GRACE_FLOAT64, 2, (int64_t[]){3, 2}, bv);
  ok(mm(a, a64, &c) == GRACE_EDTYPE && c == NULL, "float32 @ float64 is a dtype error");
  is_str(grace_last_error(vm), "matmul: expected both inputs to have the same dtype, got float32 and float64",
         "dtype mismatch message");
  ok(mm(a, a, &c) == GRACE_ESHAPE && c == NULL, "[2,3] @ [2,3] is a shape error");
  ok(strstr(grace_last_error(vm), "[2, 3] and [2, 3]") != NULL, "inner-dim message names both shapes: %s",
     grace_last_error(vm));
  ok(mm(u, a, &c) == GRACE_ESHAPE, "[3] @ [2,3] is a shape error");
  grace_tensor *bb = from(GRACE_BOOL, 2, (int64_t[]){2, 2}, (double[]){1, 0, 1, 1});
  ok(mm(bb, bb, &c) == GRACE_EDTYPE && strstr(grace_last_error(vm), "bool"), "bool matmul is a dtype error: %s",
     grace_last_error(vm));
  grace_tensor *s = NULL;
  grace_tensor_scalar(vm, 2.0, 0, &s);
  ok(mm(s, a, &c) == GRACE_ESHAPE && strstr(grace_last_error(vm), "1-d"), "0-d operand is an error: %s",
     grace_last_error(vm));
  grace_tensor *b1 = from(GRACE_FLOAT32, 3, (int64_t[]){2, 2, 3}, (double[]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  grace_tensor *b2 = from(GRACE_FLOAT32, 3, (int64_t[]){3, 3, 2}, (double[]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  ok(mm(b1, b2, &c) == GRACE_ESHAPE && strstr(grace_last_error(vm), "broadcast"), "batch 2 against 3 is an error: %s",
     grace_last_error(vm));

  /* zero sizes: K = 0 gives zeros; M = 0 or N = 0 give empty results */
  grace_tensor *k0a = from(GRACE_FLOAT32, 2, (int64_t[]){2, 0}, NULL), *k0b = from(GRACE_FLOAT32, 2, (int64_t[]){0, 3}, NULL);
  ok(mm(k0a, k0b, &c) == GRACE_OK && grace_tensor_numel(c) == 6, "[2,0] @ [0,3] gives [2,3]");
  double z[6] = {1, 1, 1, 1, 1, 1};
  if (c) grace_tensor_read(vm, c, GRACE_FLOAT64, z);
  ok(z[0] == 0 && z[1] == 0 && z[2] == 0 && z[3] == 0 && z[4] == 0 && z[5] == 0, "K = 0 gives zeros");
  grace_tensor_release(c); c = NULL;
  grace_tensor *k0i = from(GRACE_INT32, 2, (int64_t[]){2, 0}, NULL), *k0j = from(GRACE_INT32, 2, (int64_t[]){0, 2}, NULL);
  int32_t zi[4] = {1, 1, 1, 1};
  ok(mm(k0i, k0j, &c) == GRACE_OK && grace_tensor_read(vm, c, GRACE_INT32, zi) == GRACE_OK &&
     zi[0] == 0 && zi[3] == 0, "int32 K = 0 gives zeros");
  grace_tensor_release(c); c = NULL;
  grace_tensor *m0 = from(GRACE_FLOAT32, 3, (int64_t[]){4, 0, 3}, NULL);
  ok(mm(m0, b, &c) == GRACE_OK && grace_tensor_ndim(c) == 3 && grace_tensor_sizes(c)[0] == 4 &&
     grace_tensor_sizes(c)[1] == 0 && grace_tensor_sizes(c)[2] == 2, "[4,0,3] @ [3,2] gives [4,0,2]");
  grace_tensor_release(c); c = NULL;
  grace_tensor *n0 = from(GRACE_FLOAT32, 2, (int64_t[]){3, 0}, NULL);
  ok(mm(a, n0, &c) == GRACE_OK && grace_tensor_sizes(c)[0] == 2 && grace_tensor_sizes(c)[1] == 0, "[2,3] @ [3,0] gives [2,0]");
  grace_tensor_release(c); c = NULL;
  grace_tensor *e0 = from(GRACE_FLOAT32, 3, (int64_t[]){0, 2, 3}, NULL);
  ok(mm(e0, b, &c) == GRACE_OK && grace_tensor_sizes(c)[0] == 0, "[0,2,3] @ [3,2] gives [0,2,2]");
  grace_tensor_release(c); c = NULL;

  grace_tensor *all[] = {a, b, u, v, bi, oi, a64, bb, s, b1, b2, k0a, k0b, k0i, k0j, m0, n0, e0};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) grace_tensor_release(all[i]);
}

/* A broadcast (stride-0) operand: x [3,4] expanded to [2,3,4] @ b [2,4,5]. */
static void expand_case(void) {
  double *xv = NULL, *bv = NULL;
  grace_tensor *x = make_operand(GRACE_FLOAT32, 2, (int64_t[]){3, 4}, 0, &xv), *xe = NULL, *b = NULL, *c = NULL;
  b = make_operand(GRACE_FLOAT32, 3, (int64_t[]){2, 4, 5}, 0, &bv);
  grace_attrs ea = {.nshape = 3, .shape = {2, 3, 4}};
  grace_run(vm, GRACE_OP_EXPAND, 1, &x, &ea, 1, &xe);
  ok(xe && mm(xe, b, &c) == GRACE_OK, "expanded [2,3,4] @ [2,4,5] runs");
  double *got = c ? read_all(c) : NULL;
  double maxerr = got ? 0 : 1;
  for (int bi = 0; got && bi < 2; bi++)
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 5; j++) {
        double s = 0;
        for (int k = 0; k < 4; k++) s += xv[i * 4 + k] * bv[bi * 20 + k * 5 + j];
        double e = fabs(s - got[bi * 15 + i * 5 + j]);
        if (e > maxerr) maxerr = e;
      }
  ok(maxerr < 1e-5, "expanded operand: max error %.3g", maxerr);
  free(got); free(xv); free(bv);
  grace_tensor_release(x); grace_tensor_release(xe); grace_tensor_release(b); grace_tensor_release(c);
}

static void timing(void) {
  double *av = NULL, *bv = NULL;
  int64_t n = 512;
  grace_tensor *a = make_operand(GRACE_FLOAT32, 2, (int64_t[]){n, n}, 0, &av);
  grace_tensor *b = make_operand(GRACE_FLOAT32, 2, (int64_t[]){n, n}, 0, &bv), *c = NULL;
  double best = 1e9;
  for (int r = 0; r < 6; r++) {
    double t0 = now();
    grace_status st = mm(a, b, &c);
    double t = now() - t0;
    if (st == GRACE_OK && t < best) best = t;
    grace_tensor_release(c); c = NULL;
  }
  printf("# float32 512x512x512 matmul: %.2f ms, %.1f GFLOP/s (%s)\n", best * 1e3, 2.0 * n * n * n / best * 1e-9,
         grace_backend_info(vm));
  free(av); free(bv);
  grace_tensor_release(a); grace_tensor_release(b);

  /* batch-1 linear layer: x[1,512] @ w:t() with w [2048,512] */
  grace_tensor *x = make_operand(GRACE_FLOAT32, 2, (int64_t[]){1, 512}, 0, &av);
  grace_tensor *wt = make_operand(GRACE_FLOAT32, 2, (int64_t[]){512, 2048}, 1, &bv);
  best = 1e9;
  for (int r = 0; r < 20; r++) {
    double t0 = now();
    grace_status st = mm(x, wt, &c);
    double t = now() - t0;
    if (st == GRACE_OK && t < best) best = t;
    grace_tensor_release(c); c = NULL;
  }
  printf("# float32 [1,512] @ w:t() (w [2048,512]): %.1f us, %.1f GB/s of weights\n", best * 1e6,
         512.0 * 2048 * 4 / best * 1e-9);
  free(av); free(bv);
  grace_tensor_release(x); grace_tensor_release(wt);
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu", .index_base = 0}, err, sizeof err);
  if (!vm) { printf("Bail out! %s\n", err); return 1; }

  hand_cases();
  expand_case();

  static const grace_dtype floats[] = {GRACE_FLOAT32, GRACE_FLOAT64, GRACE_FLOAT16, GRACE_BFLOAT16};
  static const grace_dtype ints[] = {GRACE_INT32, GRACE_INT64, GRACE_UINT8};
  static const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {67, 129, 33}, {256, 256, 256}};
  char what[128];
  for (size_t di = 0; di < 4; di++)
    for (size_t si = 0; si < 4; si++) {
      const int64_t *s = sizes[si];
      snprintf(what, sizeof what, "%lldx%lldx%lld", (long long)s[0], (long long)s[1], (long long)s[2]);
      check_case(what, floats[di], 2, (int64_t[]){s[0], s[1]}, 0, 2, (int64_t[]){s[1], s[2]}, 0);
    }
  for (size_t di = 0; di < 3; di++) {
    check_case("3x5x7", ints[di], 2, (int64_t[]){3, 5}, 0, 2, (int64_t[]){5, 7}, 0);
    check_case("67x40x33 (B transposed)", ints[di], 2, (int64_t[]){67, 40}, 0, 2, (int64_t[]){40, 33}, 1);
    check_case("batched [2,1,3,4] @ [5,4,6]", ints[di], 4, (int64_t[]){2, 1, 3, 4}, 0, 3, (int64_t[]){5, 4, 6}, 0);
  }
  for (size_t di = 0; di < 4; di++) {
    grace_dtype dt = floats[di];
    check_case("batched [2,1,3,4] @ [5,4,6]", dt, 4, (int64_t[]){2, 1, 3, 4}, 0, 3, (int64_t[]){5, 4, 6}, 0);
    check_case("batched [4,37,19] @ [4,19,23] (both transposed)", dt, 3, (int64_t[]){4, 37, 19}, 1, 3,
               (int64_t[]){4, 19, 23}, 1);
    check_case("folded [3,50,64] @ [64,40]", dt, 3, (int64_t[]){3, 50, 64}, 0, 2, (int64_t[]){64, 40}, 0);
    check_case("[2,30,64] @ w:t() [64,70]", dt, 3, (int64_t[]){2, 30, 64}, 0, 2, (int64_t[]){64, 70}, 1);
    check_case("A transposed 70x300x90", dt, 2, (int64_t[]){70, 300}, 1, 2, (int64_t[]){300, 90}, 0);
    check_case("[7] @ [7,9]", dt, 1, (int64_t[]){7}, 0, 2, (int64_t[]){7, 9}, 0);
    check_case("[7] @ [3,7,9]", dt, 1, (int64_t[]){7}, 0, 3, (int64_t[]){3, 7, 9}, 0);
    check_case("[2,3,8] @ [8]", dt, 3, (int64_t[]){2, 3, 8}, 0, 1, (int64_t[]){8}, 0);
    check_case("[300] . [300]", dt, 1, (int64_t[]){300}, 0, 1, (int64_t[]){300}, 0);
    check_case("gemv [1,512] @ w:t() (w [2048,512])", dt, 2, (int64_t[]){1, 512}, 0, 2, (int64_t[]){512, 2048}, 1);
    check_case("gemv [1,300] @ [300,1000]", dt, 2, (int64_t[]){1, 300}, 0, 2, (int64_t[]){300, 1000}, 0);
    check_case("gemv [500,300] @ [300]", dt, 2, (int64_t[]){500, 300}, 0, 1, (int64_t[]){300}, 0);
    check_case("gemv A transposed [500,300] @ [300,1]", dt, 2, (int64_t[]){500, 300}, 1, 2, (int64_t[]){300, 1}, 0);
    check_case("gemv [1,77] @ B transposed [77,1]", dt, 2, (int64_t[]){1, 77}, 0, 2, (int64_t[]){77, 1}, 1);
    check_case("batched gemv [6,1,65] @ [6,65,33] transposed", dt, 3, (int64_t[]){6, 1, 65}, 0, 3,
               (int64_t[]){6, 65, 33}, 1);
    check_case("batched decode [2,4,1,32] @ [2,4,32,100]", dt, 4, (int64_t[]){2, 4, 1, 32}, 0, 4,
               (int64_t[]){2, 4, 32, 100}, 1);
  }
  /* A strided vector: column 0 of a [300, 2] matrix (stride 2) as the right operand. */
  {
    double *wv = NULL, *mv = NULL;
    grace_tensor *m = make_operand(GRACE_FLOAT32, 2, (int64_t[]){40, 300}, 0, &mv);
    grace_tensor *w = make_operand(GRACE_FLOAT32, 2, (int64_t[]){300, 2}, 0, &wv), *col = NULL, *c = NULL;
    grace_attrs sel = {.ndims = 1, .dims = {1}, .i0 = 0};
    grace_run(vm, GRACE_OP_SELECT, 1, &w, &sel, 1, &col);
    ok(col && mm(m, col, &c) == GRACE_OK, "[40,300] @ strided [300] runs");
    double *got = c ? read_all(c) : NULL, maxerr = got ? 0 : 1;
    for (int i = 0; got && i < 40; i++) {
      double s = 0;
      for (int k = 0; k < 300; k++) s += mv[i * 300 + k] * wv[k * 2];
      if (fabs(s - got[i]) > maxerr) maxerr = fabs(s - got[i]);
    }
    ok(maxerr < 1e-3, "strided vector operand: max error %.3g", maxerr);
    free(got); free(wv); free(mv);
    grace_tensor_release(m); grace_tensor_release(w); grace_tensor_release(col); grace_tensor_release(c);
  }
  /* One thread gives the same answers (the serial path). */
  {
    grace_vm *saved = vm;
    vm = grace_vm_new(&(grace_config){.device = "cpu", .threads = 1}, err, sizeof err);
    check_case("one thread 130x70x90", GRACE_FLOAT32, 2, (int64_t[]){130, 70}, 0, 2, (int64_t[]){70, 90}, 1);
    check_case("one thread gemv", GRACE_FLOAT32, 2, (int64_t[]){1, 700}, 0, 2, (int64_t[]){700, 900}, 1);
    grace_vm_free(vm);
    vm = saved;
  }
  timing();
  grace_vm_free(vm);
  return tap_done();
}
