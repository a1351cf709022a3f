/* test_reduce.c: the CPU reductions, scans and norms through the public API, checked against hand-computed
 * values or against plain double-precision loops over the same inputs (an independent reference). */
#include <math.h>
#include <stdlib.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm0, *vm1;   /* index base 0 (4 threads), index base 1 (1 thread) */

#define A(...) (&(grace_attrs){__VA_ARGS__})
#define SZ(...) ((const int64_t[]){__VA_ARGS__})
#define D(...) ((const double[]){__VA_ARGS__})

static uint64_t lcg_state = 12345;
static double urand(void) {   /* uniform [0, 1) */
  lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(lcg_state >> 11) / 9007199254740992.0;
}

static grace_tensor *mk(grace_vm *vm, grace_dtype dt, int nd, const int64_t *sz, const double *data) {
  grace_tensor *t = NULL;
  if (grace_tensor_from_data(vm, dt, nd, sz, GRACE_FLOAT64, data, &t) != GRACE_OK) {
    printf("# tensor: %s\n", grace_last_error(vm));
    exit(1);
  }
  return t;
}
static grace_tensor *mki(grace_vm *vm, grace_dtype dt, int nd, const int64_t *sz, const int64_t *data) {
  grace_tensor *t = NULL;
  if (grace_tensor_from_data(vm, dt, nd, sz, GRACE_INT64, data, &t) != GRACE_OK) exit(1);
  return t;
}
/* One output of op; NULL (with a diagnostic) on failure. */
static grace_tensor *run1(grace_vm *vm, grace_op op, grace_tensor *x, const grace_attrs *a) {
  grace_tensor *o = NULL;
  if (grace_run(vm, op, 1, &x, a, 1, &o) != GRACE_OK) printf("# %s: %s\n", grace_op_name(op), grace_last_error(vm));
  return o;
}
static int run2(grace_vm *vm, grace_op op, grace_tensor *x, const grace_attrs *a, grace_tensor **o) {
  grace_status st = grace_run(vm, op, 1, &x, a, 2, o);
  if (st != GRACE_OK) printf("# %s: %s\n", grace_op_name(op), grace_last_error(vm));
  return st == GRACE_OK;
}
static grace_tensor *view(grace_vm *vm, grace_op op, grace_tensor *x, const grace_attrs *a) {
  grace_tensor *o = run1(vm, op, x, a);
  if (!o) exit(1);
  return o;
}
/* t's contents as doubles into a static buffer (tests read at most this many). */
static double rbuf[1 << 20];
static const double *rd(grace_vm *vm, grace_tensor *t) {
  if (!t || grace_tensor_numel(t) > (1 << 20) || grace_tensor_read(vm, t, GRACE_FLOAT64, rbuf) != GRACE_OK) {
    for (int i = 0; i < 16; i++) rbuf[i] = -12345.678;
    return rbuf;
  }
  return rbuf;
}
static int64_t ibuf[1 << 16];
static const int64_t *rdi(grace_vm *vm, grace_tensor *t) {
  if (!t || grace_tensor_numel(t) > (1 << 16) || grace_tensor_read(vm, t, GRACE_INT64, ibuf) != GRACE_OK) {
    for (int i = 0; i < 16; i++) ibuf[i] = -12345;
    return ibuf;
  }
  return ibuf;
}
static int has_shape(const grace_tensor *t, int nd, const int64_t *sz) {
  if (!t || grace_tensor_ndim(t) != nd) return 0;
  for (int d = 0; d < nd; d++) if (grace_tensor_sizes(t)[d] != sz[d]) return 0;
  return 1;
}
static int vals_near(const double *got, const double *want, int n, double tol) {
  for (int i = 0; i < n; i++) {
    if (isnan(want[i]) ? !isnan(got[i]) : !(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])) || got[i] == want[i])) {
      printf("#   element %d: got %.9g, want %.9g\n", i, got[i], want[i]);
      return 0;
    }
  }
  return 1;
}
/* |got - want| <= atol + rtol |want| elementwise */
static int vals_rel(const double *got, const double *want, int n, double rtol, double atol) {
  for (int i = 0; i < n; i++) {
    if (isnan(want[i]) ? !isnan(got[i]) : !(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i]) || got[i] == want[i])) {
      printf("#   element %d: got %.9g, want %.9g\n", i, got[i], want[i]);
      return 0;
    }
  }
  return 1;
}
static int ivals(const int64_t *got, const int64_t *want, int n) {
  for (int i = 0; i < n; i++)
    if (got[i] != want[i]) { printf("#   element %d: got %lld, want %lld\n", i, (long long)got[i], (long long)want[i]); return 0; }
  return 1;
}
static void rel(grace_tensor *t) { grace_tensor_release(t); }
/* op fails with status st, gives back no outputs, and the message contains `msg`. */
static void fails(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout,
                  grace_status st, const char *msg, const char *what) {
  grace_tensor *o[2] = {(grace_tensor *)1, (grace_tensor *)1};
  grace_status got = grace_run(vm, op, nin, in, a, nout, o);
  const char *err = grace_last_error(vm);
  ok(got == st && o[0] == NULL && (nout < 2 || o[1] == NULL) && strstr(err, msg), "%s (got '%s')", what, err);
  if (got == GRACE_OK) for (int i = 0; i < nout; i++) rel(o[i]);
}

/* ---- sum, mean, prod ---- */
static void test_sum_mean_prod(void) {
  grace_tensor *x = mk(vm0, GRACE_FLOAT32, 2, SZ(2, 3), D(1, 2, 3, 4, 5, 6)), *o;
  o = run1(vm0, GRACE_OP_SUM, x, NULL);
  ok(has_shape(o, 0, NULL) && grace_tensor_dtype(o) == GRACE_FLOAT32 && rd(vm0, o)[0] == 21, "sum all of [2, 3] is 21, 0-d float32");
  rel(o);
  o = run1(vm0, GRACE_OP_SUM, x, A(.ndims = 1, .dims = {0}));
  ok(has_shape(o, 1, SZ(3)) && vals_near(rd(vm0, o), D(5, 7, 9), 3, 0), "sum dim 0");
  rel(o);
  o = run1(vm0, GRACE_OP_SUM, x, A(.ndims = 1, .dims = {-1}, .keepdim = 1));
  ok(has_shape(o, 2, SZ(2, 1)) && vals_near(rd(vm0, o), D(6, 15), 2, 0), "sum dim -1 keepdim gives [2, 1]");
  rel(o);
  o = run1(vm0, GRACE_OP_SUM, x, A(.ndims = 2, .dims = {1, 0}, .keepdim = 1));
  ok(has_shape(o, 2, SZ(1, 1)) && rd(vm0, o)[0] == 21, "sum dims {1, 0} keepdim gives [1, 1]");
  rel(o);
  o = run1(vm0, GRACE_OP_MEAN, x, A(.ndims = 1, .dims = {1}));
  ok(has_shape(o, 1, SZ(2)) && vals_near(rd(vm0, o), D(2, 5), 2, 0), "mean dim 1");
  rel(o);
  o = run1(vm0, GRACE_OP_MEAN, x, NULL);
  ok(o && fabs(rd(vm0, o)[0] - 3.5) < 1e-7, "mean all");
  rel(o);
  o = run1(vm0, GRACE_OP_PROD, x, A(.ndims = 1, .dims = {0}));
  ok(vals_near(rd(vm0, o), D(4, 10, 18), 3, 0), "prod dim 0");
  rel(o);
  o = run1(vm0, GRACE_OP_PROD, x, NULL);
  ok(o && rd(vm0, o)[0] == 720, "prod all is 720");
  rel(o);
  rel(x);

  /* integer and bool inputs sum to int64; exact past 2^53 */
  x = mki(vm0, GRACE_INT64, 1, SZ(3), (const int64_t[]){(1ll << 60) + 1, 1ll << 60, 3});
  o = run1(vm0, GRACE_OP_SUM, x, NULL);
  ok(o && grace_tensor_dtype(o) == GRACE_INT64 && rdi(vm0, o)[0] == (1ll << 61) + 4, "int64 sum exact past 2^53");
  rel(o);
  rel(x);
  x = mki(vm0, GRACE_INT32, 2, SZ(2, 2), (const int64_t[]){-3, 4, 5, 6});
  o = run1(vm0, GRACE_OP_SUM, x, A(.ndims = 1, .dims = {1}));
  ok(o && grace_tensor_dtype(o) == GRACE_INT64 && ivals(rdi(vm0, o), (const int64_t[]){1, 11}, 2), "int32 sum gives int64");
  rel(o);
  o = run1(vm0, GRACE_OP_PROD, x, NULL);
  ok(o && grace_tensor_dtype(o) == GRACE_INT64 && rdi(vm0, o)[0] == -360, "int32 prod gives int64 -360");
  rel(o);
  o = run1(vm0, GRACE_OP_SUM, x, A(.has_dtype = 1, .dtype = GRACE_FLOAT64));
  ok(o && grace_tensor_dtype(o) == GRACE_FLOAT64 && rd(vm0, o)[0] == 12, "sum with dtype float64");
  rel(o);
  o = run1(vm0, GRACE_OP_MEAN, x, A(.has_dtype = 1, .dtype = GRACE_FLOAT32));
  ok(o && grace_tensor_dtype(o) == GRACE_FLOAT32 && rd(vm0, o)[0] == 3, "mean of int32 with dtype float32");
  rel(o);
  fails(vm0, GRACE_OP_MEAN, 1, &x, NULL, 1, GRACE_EDTYPE, "mean: input dtype int32 is not a float type; cast it with :float()",
        "mean of int32 is an EDTYPE error");
  fails(vm0, GRACE_OP_VAR, 1, &x, NULL, 1, GRACE_EDTYPE, "var: input dtype int32", "var of int32 is an error");
  fails(vm0, GRACE_OP_STD, 1, &x, NULL, 1, GRACE_EDTYPE, "std: input dtype int32", "std of int32 is an error");
  rel(x);
  x = mk(vm0, GRACE_BOOL, 1, SZ(4), D(1, 0, 1, 1));
  o = run1(vm0, GRACE_OP_SUM, x, NULL);
  ok(o && grace_tensor_dtype(o) == GRACE_INT64 && rdi(vm0, o)[0] == 3, "bool sum counts trues as int64");
  rel(o);
  rel(x);

  /* float16/bfloat16 accumulate in float, round once at the end */
  x = mk(vm0, GRACE_FLOAT16, 1, SZ(3), D(2048, 1, 1));
  o = run1(vm0, GRACE_OP_SUM, x, NULL);
  ok(o && grace_tensor_dtype(o) == GRACE_FLOAT16 && rd(vm0, o)[0] == 2050, "float16 sum 2048+1+1 = 2050 (float accumulation)");
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_FLOAT16, 1, SZ(2), D(2048, 1));
  o = run1(vm0, GRACE_OP_SUM, x, NULL);
  ok(o && rd(vm0, o)[0] == 2048, "float16 sum 2049 rounds to even 2048");
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_BFLOAT16, 1, SZ(3), D(256, 1, 2));
  o = run1(vm0, GRACE_OP_SUM, x, NULL);
  ok(o && grace_tensor_dtype(o) == GRACE_BFLOAT16 && rd(vm0, o)[0] == 260, "bfloat16 sum 259 rounds to 260");
  rel(o);
  o = run1(vm0, GRACE_OP_MEAN, x, NULL);
  ok(o && rd(vm0, o)[0] == 86.5, "bfloat16 mean 86.33 rounds to 86.5");
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_FLOAT64, 1, SZ(3), D(0.1, 0.2, 0.3));
  o = run1(vm0, GRACE_OP_SUM, x, NULL);
  ok(o && grace_tensor_dtype(o) == GRACE_FLOAT64 && fabs(rd(vm0, o)[0] - 0.6) < 1e-15, "float64 sum in double");
  rel(o);
  rel(x);
}

/* ---- max, min, argmax, argmin ---- */
static void test_max_min(void) {
  grace_tensor *x = mk(vm0, GRACE_FLOAT32, 2, SZ(2, 4), D(3, 1, 3, 2, -1, 7, 7, 0)), *o, *p[2];
  ok(run2(vm0, GRACE_OP_MAX, x, A(.ndims = 1, .dims = {1}), p) && has_shape(p[0], 1, SZ(2)) &&
     grace_tensor_dtype(p[1]) == GRACE_INT64 && vals_near(rd(vm0, p[0]), D(3, 7), 2, 0) &&
     ivals(rdi(vm0, p[1]), (const int64_t[]){0, 1}, 2), "max dim 1: values and first index of ties");
  rel(p[0]); rel(p[1]);
  ok(run2(vm0, GRACE_OP_MIN, x, A(.ndims = 1, .dims = {0}, .keepdim = 1), p) && has_shape(p[1], 2, SZ(1, 4)) &&
     vals_near(rd(vm0, p[0]), D(-1, 1, 3, 0), 4, 0) && ivals(rdi(vm0, p[1]), (const int64_t[]){1, 0, 0, 1}, 4),
     "min dim 0 keepdim: values and indices");
  rel(p[0]); rel(p[1]);
  o = run1(vm0, GRACE_OP_MAX, x, NULL);
  ok(has_shape(o, 0, NULL) && rd(vm0, o)[0] == 7, "max of all is 7");
  rel(o);
  o = run1(vm0, GRACE_OP_MIN, x, A(.ndims = 2, .dims = {0, 1}));
  ok(has_shape(o, 0, NULL) && rd(vm0, o)[0] == -1, "min over dims {0, 1} is -1");
  rel(o);
  o = run1(vm0, GRACE_OP_ARGMAX, x, NULL);
  ok(has_shape(o, 0, NULL) && grace_tensor_dtype(o) == GRACE_INT64 && rdi(vm0, o)[0] == 5, "argmax flat: first 7 at 5");
  rel(o);
  o = run1(vm0, GRACE_OP_ARGMAX, x, A(.keepdim = 1));
  ok(has_shape(o, 0, NULL), "argmax with no dim ignores keepdim");
  rel(o);
  o = run1(vm0, GRACE_OP_ARGMIN, x, A(.ndims = 1, .dims = {1}));
  ok(has_shape(o, 1, SZ(2)) && ivals(rdi(vm0, o), (const int64_t[]){1, 0}, 2), "argmin dim 1");
  rel(o);
  fails(vm0, GRACE_OP_MAX, 1, &x, NULL, 2, GRACE_EARG, "max: indices need a dim", "max indices without a dim is an error");
  fails(vm0, GRACE_OP_MAX, 1, &x, A(.ndims = 2, .dims = {0, 1}), 2, GRACE_EARG, "max: indices need exactly one dim",
        "max indices with two dims is an error");
  rel(x);

  /* index base 1 offsets indices */
  x = mk(vm1, GRACE_FLOAT64, 1, SZ(4), D(2, 9, 9, 1));
  ok(run2(vm1, GRACE_OP_MAX, x, A(.ndims = 1, .dims = {0}), p) && rd(vm1, p[0])[0] == 9 && rdi(vm1, p[1])[0] == 2,
     "index base 1: max index is 2 for position 1");
  rel(p[0]); rel(p[1]);
  o = run1(vm1, GRACE_OP_ARGMIN, x, NULL);
  ok(o && rdi(vm1, o)[0] == 4, "index base 1: argmin of the flat tensor is 4");
  rel(o);
  rel(x);

  /* NaN counts as the max and the min; first NaN wins */
  x = mk(vm0, GRACE_FLOAT32, 1, SZ(5), D(1, NAN, 5, NAN, -2));
  ok(run2(vm0, GRACE_OP_MAX, x, A(.ndims = 1, .dims = {0}), p) && isnan(rd(vm0, p[0])[0]) && rdi(vm0, p[1])[0] == 1,
     "max with NaN is NaN at its first position");
  rel(p[0]); rel(p[1]);
  ok(run2(vm0, GRACE_OP_MIN, x, A(.ndims = 1, .dims = {0}), p) && isnan(rd(vm0, p[0])[0]) && rdi(vm0, p[1])[0] == 1,
     "min with NaN is NaN too");
  rel(p[0]); rel(p[1]);
  o = run1(vm0, GRACE_OP_ARGMAX, x, NULL);
  ok(o && rdi(vm0, o)[0] == 1, "argmax points at the first NaN");
  rel(o);
  rel(x);

  /* integers keep their dtype and exactness; bool max */
  x = mki(vm0, GRACE_INT64, 1, SZ(3), (const int64_t[]){(1ll << 62) + 1, (1ll << 62) + 3, (1ll << 62) + 2});
  ok(run2(vm0, GRACE_OP_MAX, x, A(.ndims = 1, .dims = {0}), p) && grace_tensor_dtype(p[0]) == GRACE_INT64 &&
     rdi(vm0, p[0])[0] == (1ll << 62) + 3 && rdi(vm0, p[1])[0] == 1, "int64 max exact");
  rel(p[0]); rel(p[1]);
  rel(x);
  x = mk(vm0, GRACE_BOOL, 1, SZ(3), D(0, 1, 1));
  o = run1(vm0, GRACE_OP_MAX, x, NULL);
  ok(o && grace_tensor_dtype(o) == GRACE_BOOL && rd(vm0, o)[0] == 1, "bool max stays bool");
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_FLOAT16, 1, SZ(3), D(0.5, -3, 2));
  o = run1(vm0, GRACE_OP_MIN, x, NULL);
  ok(o && grace_tensor_dtype(o) == GRACE_FLOAT16 && rd(vm0, o)[0] == -3, "float16 min");
  rel(o);
  rel(x);
}

/* ---- var, std, logsumexp, all, any ---- */
static void test_var_lse_logic(void) {
  grace_tensor *x = mk(vm0, GRACE_FLOAT32, 1, SZ(4), D(1, 2, 3, 4)), *o;
  o = run1(vm0, GRACE_OP_VAR, x, A(.flag = 1));
  ok(o && fabs(rd(vm0, o)[0] - 5.0 / 3) < 1e-6, "unbiased var of 1..4 is 5/3");
  rel(o);
  o = run1(vm0, GRACE_OP_VAR, x, NULL);
  ok(o && fabs(rd(vm0, o)[0] - 1.25) < 1e-7, "biased var of 1..4 is 1.25");
  rel(o);
  o = run1(vm0, GRACE_OP_STD, x, A(.flag = 1));
  ok(o && fabs(rd(vm0, o)[0] - sqrt(5.0 / 3)) < 1e-6, "unbiased std");
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_FLOAT32, 1, SZ(1), D(3));
  o = run1(vm0, GRACE_OP_VAR, x, A(.flag = 1));
  ok(o && isnan(rd(vm0, o)[0]), "unbiased var of one element is nan");
  rel(o);
  o = run1(vm0, GRACE_OP_VAR, x, NULL);
  ok(o && rd(vm0, o)[0] == 0, "biased var of one element is 0");
  rel(o);
  rel(x);
  /* stability: a large common offset does not swamp the variance */
  x = mk(vm0, GRACE_FLOAT64, 2, SZ(2, 3), D(1e9 + 1, 1e9 + 2, 1e9 + 3, 4, 6, 8));
  o = run1(vm0, GRACE_OP_VAR, x, A(.ndims = 1, .dims = {1}, .flag = 1));
  ok(o && vals_near(rd(vm0, o), D(1, 4), 2, 1e-12), "var stable with offset 1e9 (float64)");
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_FLOAT32, 1, SZ(3), D(10001, 10002, 10003));
  o = run1(vm0, GRACE_OP_VAR, x, A(.flag = 1));
  ok(o && fabs(rd(vm0, o)[0] - 1) < 1e-6, "var stable with offset 1e4 (float32)");
  rel(o);
  rel(x);

  x = mk(vm0, GRACE_FLOAT32, 2, SZ(2, 2), D(1000, 1000, -INFINITY, -INFINITY));
  o = run1(vm0, GRACE_OP_LOGSUMEXP, x, A(.ndims = 1, .dims = {1}));
  ok(o && vals_near(rd(vm0, o), D(1000 + log(2.0), -INFINITY), 2, 1e-7), "logsumexp(1000, 1000) = 1000 + log 2; all -inf gives -inf");
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_FLOAT32, 1, SZ(2), D(INFINITY, 1));
  o = run1(vm0, GRACE_OP_LOGSUMEXP, x, NULL);
  ok(o && isinf(rd(vm0, o)[0]) && rd(vm0, o)[0] > 0, "logsumexp with +inf is +inf");
  rel(o);
  rel(x);
  x = mki(vm0, GRACE_INT32, 1, SZ(3), (const int64_t[]){0, 1, 2});
  o = run1(vm0, GRACE_OP_LOGSUMEXP, x, NULL);
  ok(o && grace_tensor_dtype(o) == GRACE_FLOAT32 && fabs(rd(vm0, o)[0] - log(1 + exp(1.0) + exp(2.0))) < 1e-6,
     "logsumexp of int32 gives float32");
  rel(o);
  rel(x);

  x = mk(vm0, GRACE_FLOAT32, 2, SZ(2, 3), D(1, 0, NAN, 0, 0, 0));
  o = run1(vm0, GRACE_OP_ANY, x, A(.ndims = 1, .dims = {1}));
  ok(o && grace_tensor_dtype(o) == GRACE_BOOL && vals_near(rd(vm0, o), D(1, 0), 2, 0), "any over dim 1");
  rel(o);
  o = run1(vm0, GRACE_OP_ALL, x, A(.ndims = 1, .dims = {0}));
  ok(o && vals_near(rd(vm0, o), D(0, 0, 0), 3, 0), "all over dim 0");
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_FLOAT32, 1, SZ(2), D(NAN, -1));
  o = run1(vm0, GRACE_OP_ALL, x, NULL);
  ok(o && rd(vm0, o)[0] == 1, "all: NaN counts as true");
  rel(o);
  rel(x);
  x = mki(vm0, GRACE_UINT8, 1, SZ(3), (const int64_t[]){3, 1, 200});
  o = run1(vm0, GRACE_OP_ALL, x, NULL);
  ok(o && rd(vm0, o)[0] == 1, "all of nonzero uint8 is true");
  rel(o);
  rel(x);
}

/* ---- layouts: transposed, expanded, 0-d, zero-size ---- */
static void test_layouts(void) {
  double data[12];
  for (int i = 0; i < 12; i++) data[i] = (i * 7) % 5 - 1.5 * (i % 3);
  grace_tensor *x = mk(vm0, GRACE_FLOAT32, 2, SZ(3, 4), data), *p[2];
  grace_tensor *t = view(vm0, GRACE_OP_TRANSPOSE, x, A(.ndims = 2, .dims = {0, 1}));   /* [4, 3] */
  grace_tensor *o = run1(vm0, GRACE_OP_SUM, t, A(.ndims = 1, .dims = {1}));
  double want[4];
  for (int j = 0; j < 4; j++) want[j] = data[j] + data[4 + j] + data[8 + j];
  ok(has_shape(o, 1, SZ(4)) && vals_near(rd(vm0, o), want, 4, 1e-6), "sum over dim 1 of a transposed tensor");
  rel(o);
  ok(run2(vm0, GRACE_OP_MAX, t, A(.ndims = 1, .dims = {0}), p), "max over dim 0 of a transposed tensor runs");
  {
    int okk = 1;
    const double *v = rd(vm0, p[0]);
    double vv[3];
    memcpy(vv, v, sizeof vv);
    const int64_t *ix = rdi(vm0, p[1]);
    for (int i = 0; i < 3; i++) {
      double best = data[i * 4];
      int bi = 0;
      for (int j = 1; j < 4; j++) if (data[i * 4 + j] > best) { best = data[i * 4 + j]; bi = j; }
      okk &= vv[i] == best && ix[i] == bi;
    }
    ok(okk, "transposed max values and indices match a naive loop");
  }
  rel(p[0]); rel(p[1]);
  o = run1(vm0, GRACE_OP_ARGMAX, t, NULL);
  {
    int bi = 0;
    double best = -1e300;
    for (int r = 0; r < 4; r++)
      for (int c = 0; c < 3; c++) if (data[c * 4 + r] > best) { best = data[c * 4 + r]; bi = r * 3 + c; }
    ok(o && rdi(vm0, o)[0] == bi, "argmax of a transposed tensor indexes its row-major flattening (%d)", bi);
  }
  rel(o);
  o = run1(vm0, GRACE_OP_VAR, t, A(.ndims = 1, .dims = {0}, .flag = 1));
  {
    double w[3];
    for (int c = 0; c < 3; c++) {
      double m = 0, s = 0;
      for (int r = 0; r < 4; r++) m += data[c * 4 + r];
      m /= 4;
      for (int r = 0; r < 4; r++) s += (data[c * 4 + r] - m) * (data[c * 4 + r] - m);
      w[c] = s / 3;
    }
    ok(o && vals_near(rd(vm0, o), w, 3, 1e-6), "var over dim 0 of a transposed tensor");
  }
  rel(o);
  rel(t);
  /* narrow gives a storage offset */
  t = view(vm0, GRACE_OP_NARROW, x, A(.ndims = 1, .dims = {1}, .i0 = 1, .i1 = 2));   /* [3, 2] */
  o = run1(vm0, GRACE_OP_SUM, t, A(.ndims = 1, .dims = {0}));
  ok(o && vals_near(rd(vm0, o), D(data[1] + data[5] + data[9], data[2] + data[6] + data[10]), 2, 1e-6),
     "sum of a narrowed view (offset, row stride 4)");
  rel(o);
  rel(t);
  rel(x);

  x = mk(vm0, GRACE_FLOAT32, 2, SZ(1, 3), D(1, -2, 5));
  t = view(vm0, GRACE_OP_EXPAND, x, A(.nshape = 2, .shape = {4, 3}));
  o = run1(vm0, GRACE_OP_SUM, t, A(.ndims = 1, .dims = {0}));
  ok(o && vals_near(rd(vm0, o), D(4, -8, 20), 3, 0), "sum over an expanded (stride 0) dim");
  rel(o);
  o = run1(vm0, GRACE_OP_MEAN, t, NULL);
  ok(o && fabs(rd(vm0, o)[0] - 4.0 / 3) < 1e-6, "mean of an expanded tensor");
  rel(o);
  o = run1(vm0, GRACE_OP_ARGMIN, t, A(.ndims = 1, .dims = {0}));
  ok(o && ivals(rdi(vm0, o), (const int64_t[]){0, 0, 0}, 3), "argmin over expanded dim: first index");
  rel(o);
  rel(t);
  rel(x);

  x = mk(vm1, GRACE_FLOAT32, 0, NULL, D(4.5));
  o = run1(vm1, GRACE_OP_SUM, x, NULL);
  ok(has_shape(o, 0, NULL) && rd(vm1, o)[0] == 4.5, "sum of a 0-d tensor");
  rel(o);
  ok(run2(vm1, GRACE_OP_MAX, x, A(.ndims = 1, .dims = {0}), p) && has_shape(p[0], 0, NULL) && rd(vm1, p[0])[0] == 4.5 &&
     rdi(vm1, p[1])[0] == 1, "max of a 0-d tensor over dim 0: value, index 1 (base 1)");
  rel(p[0]); rel(p[1]);
  o = run1(vm1, GRACE_OP_SUM, x, A(.ndims = 1, .dims = {-1}, .keepdim = 1));
  ok(has_shape(o, 0, NULL) && rd(vm1, o)[0] == 4.5, "sum of a 0-d tensor over dim -1 keepdim stays 0-d");
  rel(o);
  rel(x);

  x = mk(vm0, GRACE_FLOAT32, 2, SZ(0, 3), D(0));
  o = run1(vm0, GRACE_OP_SUM, x, A(.ndims = 1, .dims = {0}));
  ok(has_shape(o, 1, SZ(3)) && vals_near(rd(vm0, o), D(0, 0, 0), 3, 0), "sum over a zero-size dim is 0");
  rel(o);
  o = run1(vm0, GRACE_OP_PROD, x, A(.ndims = 1, .dims = {0}));
  ok(o && vals_near(rd(vm0, o), D(1, 1, 1), 3, 0), "prod over a zero-size dim is 1");
  rel(o);
  o = run1(vm0, GRACE_OP_MEAN, x, NULL);
  ok(o && isnan(rd(vm0, o)[0]), "mean of an empty tensor is nan");
  rel(o);
  o = run1(vm0, GRACE_OP_SUM, x, A(.ndims = 1, .dims = {1}));
  ok(has_shape(o, 1, SZ(0)), "sum over dim 1 of [0, 3] has shape [0]");
  rel(o);
  ok(run2(vm0, GRACE_OP_MAX, x, A(.ndims = 1, .dims = {1}), p) && has_shape(p[0], 1, SZ(0)) && has_shape(p[1], 1, SZ(0)),
     "max over the non-empty dim of [0, 3] gives [0]");
  rel(p[0]); rel(p[1]);
  o = run1(vm0, GRACE_OP_ALL, x, NULL);
  ok(o && rd(vm0, o)[0] == 1, "all of empty is true");
  rel(o);
  o = run1(vm0, GRACE_OP_ANY, x, NULL);
  ok(o && rd(vm0, o)[0] == 0, "any of empty is false");
  rel(o);
  o = run1(vm0, GRACE_OP_LOGSUMEXP, x, NULL);
  ok(o && isinf(rd(vm0, o)[0]) && rd(vm0, o)[0] < 0, "logsumexp of empty is -inf");
  rel(o);
  fails(vm0, GRACE_OP_MAX, 1, &x, A(.ndims = 1, .dims = {0}), 2, GRACE_EARG, "max: cannot reduce over a zero-size dim",
        "max over a zero-size dim is an error");
  fails(vm0, GRACE_OP_ARGMIN, 1, &x, NULL, 1, GRACE_EARG, "argmin: cannot reduce over a zero-size dim",
        "argmin of an empty tensor is an error");
  rel(x);
}

/* ---- dims errors ---- */
static void test_dim_errors(void) {
  grace_tensor *x = mk(vm1, GRACE_FLOAT32, 2, SZ(2, 3), D(1, 2, 3, 4, 5, 6));
  fails(vm1, GRACE_OP_SUM, 1, &x, A(.ndims = 1, .dims = {2}), 1, GRACE_EINDEX, "sum: dim 3 out of range",
        "bad dim: the message shows the 1-based dim");
  fails(vm1, GRACE_OP_SUM, 1, &x, A(.ndims = 2, .dims = {0, -2}), 1, GRACE_EARG, "sum: dim 1 given more than once",
        "repeated dim is an error (1-based in the message)");
  fails(vm1, GRACE_OP_ARGMAX, 1, &x, A(.ndims = 2, .dims = {0, 1}), 1, GRACE_EARG, "argmax: takes one dim",
        "argmax with two dims is an error");
  fails(vm1, GRACE_OP_SOFTMAX, 1, &x, A(.ndims = 1, .dims = {-3}), 1, GRACE_EINDEX, "softmax: dim -3 out of range",
        "softmax bad dim");
  rel(x);
  x = mk(vm0, GRACE_FLOAT32, 2, SZ(2, 3), D(1, 2, 3, 4, 5, 6));
  fails(vm0, GRACE_OP_MEAN, 1, &x, A(.ndims = 1, .dims = {2}), 1, GRACE_EINDEX, "mean: dim 2 out of range",
        "bad dim with index base 0 shows the 0-based dim");
  rel(x);
}

/* ---- big inputs: accuracy, the parallel/blocked paths, determinism ---- */
static void test_big(void) {
  enum { N = 1 << 20 };
  float *f = malloc(sizeof(float) * N);
  double *d = malloc(sizeof(double) * N);
  double ref = 0, mx = -1;
  int64_t amx = 0;
  for (int i = 0; i < N; i++) {
    f[i] = (float)(urand() * 2 - 0.5);
    d[i] = f[i];
    ref += d[i];
    if (d[i] > mx) { mx = d[i]; amx = i; }
  }
  grace_tensor *x = NULL, *x1 = NULL;
  grace_tensor_from_data(vm0, GRACE_FLOAT32, 1, SZ(N), GRACE_FLOAT32, f, &x);
  grace_tensor_from_data(vm1, GRACE_FLOAT32, 1, SZ(N), GRACE_FLOAT32, f, &x1);
  grace_tensor *o = run1(vm0, GRACE_OP_SUM, x, NULL), *o1 = run1(vm1, GRACE_OP_SUM, x1, NULL);
  double got = rd(vm0, o)[0], got1 = rd(vm1, o1)[0];
  ok(fabs(got - ref) / fabs(ref) < 1e-6, "1M float32 sum: relative error %.2g < 1e-6", fabs(got - ref) / fabs(ref));
  ok(got == got1, "1M float32 sum is the same with 4 threads and 1 thread");
  rel(o); rel(o1);
  o = run1(vm0, GRACE_OP_ARGMAX, x, NULL);
  ok(o && rdi(vm0, o)[0] == amx, "argmax of 1M (blocked) = %lld", (long long)amx);
  rel(o);
  {
    double m = ref / N, s = 0;
    for (int i = 0; i < N; i++) s += (d[i] - m) * (d[i] - m);
    o = run1(vm0, GRACE_OP_VAR, x, A(.flag = 1));
    ok(o && fabs(rd(vm0, o)[0] - s / (N - 1)) < 1e-5 * s / N, "var of 1M (blocks merged)");
    rel(o);
    o = run1(vm0, GRACE_OP_LOGSUMEXP, x, NULL);
    double ls = 0;
    for (int i = 0; i < N; i++) ls += exp(d[i] - mx);
    ok(o && fabs(rd(vm0, o)[0] - (mx + log(ls))) < 1e-5, "logsumexp of 1M (blocks merged)");
    rel(o);
  }
  /* [1024, 1024]: sums over each dim, against naive double loops */
  grace_tensor *m = run1(vm0, GRACE_OP_RESHAPE, x, A(.nshape = 2, .shape = {1024, 1024}));
  o = run1(vm0, GRACE_OP_SUM, m, A(.ndims = 1, .dims = {0}));
  o1 = run1(vm0, GRACE_OP_MEAN, m, A(.ndims = 1, .dims = {1}));
  {
    static double cs[1024], rs[1024];
    for (int i = 0; i < 1024; i++) for (int j = 0; j < 1024; j++) { cs[j] += d[i * 1024 + j]; rs[i] += d[i * 1024 + j] / 1024; }
    ok(o && vals_near(rd(vm0, o), cs, 1024, 1e-5), "column sums of [1024, 1024]");
    ok(o1 && vals_near(rd(vm0, o1), rs, 1024, 1e-6), "row means of [1024, 1024]");
  }
  rel(o); rel(o1);
  {   /* rows of [1024, 1024]: parallel softmax and topk */
    static double sm[1024];
    int okk = 1;
    o = run1(vm0, GRACE_OP_SOFTMAX, m, NULL);
    const double *v = rd(vm0, o);
    for (int r = 0; r < 1024 && okk; r += 97) {
      double mm = -1e300, s = 0;
      for (int j = 0; j < 1024; j++) mm = d[r * 1024 + j] > mm ? d[r * 1024 + j] : mm;
      for (int j = 0; j < 1024; j++) s += exp(d[r * 1024 + j] - mm);
      for (int j = 0; j < 1024; j++) sm[j] = exp(d[r * 1024 + j] - mm) / s;
      okk &= vals_rel(v + r * 1024, sm, 1024, 2e-6, 0);
    }
    ok(o && okk, "softmax of [1024, 1024] rows");
    rel(o);
    grace_tensor *p[2];
    okk = run2(vm0, GRACE_OP_TOPK, m, A(.i0 = 3), p);
    if (okk) {
      static double tv[3 * 1024];
      memcpy(tv, rd(vm0, p[0]), sizeof tv);
      const int64_t *ti = rdi(vm0, p[1]);
      for (int r = 0; r < 1024; r++) {
        double prev = 1e300;
        int64_t previ = -1;
        for (int j = 0; j < 3; j++) {   /* naive: the best below (prev, previ) in (value desc, index asc) order */
          int64_t bi = -1;
          for (int i = 0; i < 1024; i++) {
            double v2 = d[r * 1024 + i];
            if (v2 > prev || (v2 == prev && i <= previ)) continue;
            if (bi < 0 || v2 > d[r * 1024 + bi]) bi = i;
          }
          okk &= ti[r * 3 + j] == bi && tv[r * 3 + j] == d[r * 1024 + bi];
          prev = d[r * 1024 + bi];
          previ = bi;
        }
      }
      rel(p[0]); rel(p[1]);
    }
    ok(okk, "topk 3 of each row of [1024, 1024]");
  }
  rel(m);
  rel(x); rel(x1);
  free(f);
  free(d);
}

/* ---- cumsum ---- */
static void test_cumsum(void) {
  grace_tensor *x = mk(vm0, GRACE_FLOAT32, 2, SZ(2, 3), D(1, 2, 3, 4, 5, 6)), *o, *t;
  o = run1(vm0, GRACE_OP_CUMSUM, x, NULL);
  ok(has_shape(o, 2, SZ(2, 3)) && vals_near(rd(vm0, o), D(1, 3, 6, 4, 9, 15), 6, 0), "cumsum over the last dim by default");
  rel(o);
  o = run1(vm0, GRACE_OP_CUMSUM, x, A(.ndims = 1, .dims = {0}));
  ok(vals_near(rd(vm0, o), D(1, 2, 3, 5, 7, 9), 6, 0), "cumsum dim 0");
  rel(o);
  t = view(vm0, GRACE_OP_TRANSPOSE, x, A(.ndims = 2, .dims = {0, 1}));
  o = run1(vm0, GRACE_OP_CUMSUM, t, A(.ndims = 1, .dims = {1}));
  ok(has_shape(o, 2, SZ(3, 2)) && vals_near(rd(vm0, o), D(1, 5, 2, 7, 3, 9), 6, 0), "cumsum of a transposed tensor");
  rel(o);
  rel(t);
  rel(x);
  x = mki(vm0, GRACE_INT32, 1, SZ(4), (const int64_t[]){5, -2, 7, 1});
  o = run1(vm0, GRACE_OP_CUMSUM, x, NULL);
  ok(o && grace_tensor_dtype(o) == GRACE_INT64 && ivals(rdi(vm0, o), (const int64_t[]){5, 3, 10, 11}, 4), "int32 cumsum gives int64");
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_BOOL, 1, SZ(3), D(1, 0, 1));
  o = run1(vm0, GRACE_OP_CUMSUM, x, NULL);
  ok(o && grace_tensor_dtype(o) == GRACE_INT64 && ivals(rdi(vm0, o), (const int64_t[]){1, 1, 2}, 3), "bool cumsum gives int64");
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_FLOAT64, 0, NULL, D(2.5));
  o = run1(vm0, GRACE_OP_CUMSUM, x, NULL);
  ok(has_shape(o, 0, NULL) && rd(vm0, o)[0] == 2.5, "cumsum of a 0-d tensor");
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_FLOAT32, 2, SZ(2, 0), D(0));
  o = run1(vm0, GRACE_OP_CUMSUM, x, NULL);
  ok(has_shape(o, 2, SZ(2, 0)), "cumsum of a zero-size tensor");
  rel(o);
  rel(x);
}

/* naive softmax of row (n values, stride s) into out */
static void naive_softmax(const double *x, int n, int s, int logp, double *out) {
  double m = -INFINITY, sum = 0;
  for (int i = 0; i < n; i++) if (x[i * s] > m) m = x[i * s];
  for (int i = 0; i < n; i++) sum += exp(x[i * s] - m);
  for (int i = 0; i < n; i++) out[i * s] = logp ? x[i * s] - m - log(sum) : exp(x[i * s] - m) / sum;
}

static void test_softmax(void) {
  enum { R = 37, C = 300 };
  static double d[R * C], w[R * C];
  for (int i = 0; i < R * C; i++) d[i] = (urand() - 0.5) * 40;
  d[5] = -INFINITY;
  for (int logp = 0; logp < 2; logp++) {
    grace_op op = logp ? GRACE_OP_LOG_SOFTMAX : GRACE_OP_SOFTMAX;
    grace_tensor *x = mk(vm0, GRACE_FLOAT32, 2, SZ(R, C), d), *o;
    double dr[R * C];
    grace_tensor_read(vm0, x, GRACE_FLOAT64, dr);   /* the float32-rounded inputs */
    for (int r = 0; r < R; r++) naive_softmax(dr + r * C, C, 1, logp, w + r * C);
    o = run1(vm0, op, x, NULL);
    ok(has_shape(o, 2, SZ(R, C)) && grace_tensor_dtype(o) == GRACE_FLOAT32 && vals_rel(rd(vm0, o), w, R * C, 4e-6, logp ? 2e-6 : 0),
       "%s over rows (float32 fast path) matches a naive double computation", grace_op_name(op));
    if (!logp) {
      const double *v = rd(vm0, o);
      int okk = 1;
      for (int r = 0; r < R; r++) {
        double s = 0;
        for (int c = 0; c < C; c++) s += v[r * C + c];
        okk &= fabs(s - 1) < 1e-5;
      }
      ok(okk && v[5] == 0, "softmax rows sum to 1; exp(-inf) gives 0");
    }
    rel(o);
    /* over dim 0 (strided rows, general path) */
    for (int c = 0; c < C; c++) naive_softmax(dr + c, R, C, logp, w + c);
    o = run1(vm0, op, x, A(.ndims = 1, .dims = {0}));
    ok(o && vals_rel(rd(vm0, o), w, R * C, 4e-6, logp ? 2e-6 : 0), "%s over dim 0 (strided)", grace_op_name(op));
    rel(o);
    /* a transposed input over its last dim */
    grace_tensor *t = view(vm0, GRACE_OP_TRANSPOSE, x, A(.ndims = 2, .dims = {0, 1}));
    o = run1(vm0, op, t, NULL);
    {
      static double tw[R * C], tt[R * C];
      for (int r = 0; r < R; r++) for (int c = 0; c < C; c++) tt[c * R + r] = dr[r * C + c];
      for (int c = 0; c < C; c++) naive_softmax(tt + c * R, R, 1, logp, tw + c * R);
      ok(has_shape(o, 2, SZ(C, R)) && vals_rel(rd(vm0, o), tw, R * C, 4e-6, logp ? 2e-6 : 0), "%s of a transposed tensor", grace_op_name(op));
    }
    rel(o);
    rel(t);
    rel(x);
  }
  /* large values are stable, float16 stays float16 */
  grace_tensor *x = mk(vm0, GRACE_FLOAT16, 1, SZ(3), D(1000, 1000, 999)), *o;
  o = run1(vm0, GRACE_OP_SOFTMAX, x, NULL);
  {
    double e = exp(-1.0), s = 2 + e;
    double w16[3] = {1 / s, 1 / s, e / s};
    ok(o && grace_tensor_dtype(o) == GRACE_FLOAT16 && vals_near(rd(vm0, o), w16, 3, 1e-3), "float16 softmax of 1000s");
  }
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_FLOAT32, 1, SZ(2), D(-INFINITY, -INFINITY));
  o = run1(vm0, GRACE_OP_SOFTMAX, x, NULL);
  ok(o && isnan(rd(vm0, o)[0]) && isnan(rd(vm0, o)[1]), "softmax of an all -inf row is nan (as PyTorch)");
  rel(o);
  rel(x);
  {   /* float64 rows, computed in double */
    double r64[3 * 50], w64[3 * 50];
    for (int i = 0; i < 150; i++) r64[i] = urand() * 60 - 30;
    x = mk(vm0, GRACE_FLOAT64, 2, SZ(3, 50), r64);
    for (int logp = 0; logp < 2; logp++) {
      for (int r = 0; r < 3; r++) naive_softmax(r64 + r * 50, 50, 1, logp, w64 + r * 50);
      o = run1(vm0, logp ? GRACE_OP_LOG_SOFTMAX : GRACE_OP_SOFTMAX, x, NULL);
      ok(o && grace_tensor_dtype(o) == GRACE_FLOAT64 && vals_rel(rd(vm0, o), w64, 150, 1e-13, 1e-13), "float64 %s",
         logp ? "log_softmax" : "softmax");
      rel(o);
    }
    rel(x);
    /* bfloat16 rows staged through float32, with a dtype override to float32 */
    x = mk(vm0, GRACE_BFLOAT16, 2, SZ(3, 50), r64);
    grace_tensor_read(vm0, x, GRACE_FLOAT64, r64);
    for (int r = 0; r < 3; r++) naive_softmax(r64 + r * 50, 50, 1, 0, w64 + r * 50);
    o = run1(vm0, GRACE_OP_SOFTMAX, x, A(.has_dtype = 1, .dtype = GRACE_FLOAT32));
    ok(o && grace_tensor_dtype(o) == GRACE_FLOAT32 && vals_rel(rd(vm0, o), w64, 150, 1e-5, 0), "bfloat16 softmax with dtype float32");
    rel(o);
    o = run1(vm0, GRACE_OP_SOFTMAX, x, NULL);
    {
      double v[150];
      memcpy(v, rd(vm0, o), sizeof v);
      int okk = grace_tensor_dtype(o) == GRACE_BFLOAT16;
      for (int i = 0; i < 150; i++) okk &= fabs(v[i] - w64[i]) <= 4e-3 * w64[i] + 1e-30;
      ok(okk, "bfloat16 softmax stays bfloat16, values rounded");
    }
    rel(o);
    rel(x);
  }
  x = mk(vm0, GRACE_FLOAT64, 0, NULL, D(3));
  o = run1(vm0, GRACE_OP_SOFTMAX, x, NULL);
  ok(has_shape(o, 0, NULL) && rd(vm0, o)[0] == 1, "softmax of a 0-d tensor is 1");
  rel(o);
  rel(x);
  x = mki(vm0, GRACE_INT64, 1, SZ(2), (const int64_t[]){1, 2});
  fails(vm0, GRACE_OP_SOFTMAX, 1, &x, NULL, 1, GRACE_EDTYPE, "softmax: input dtype int64 is not a float type",
        "softmax of int64 is an error");
  fails(vm0, GRACE_OP_LOG_SOFTMAX, 1, &x, NULL, 1, GRACE_EDTYPE, "log_softmax: input dtype int64", "log_softmax of int64 is an error");
  rel(x);
  /* a long float32 row: the vectorized exp across its range */
  {
    enum { L = 5000 };
    static double lr[L], lw[L];
    for (int i = 0; i < L; i++) lr[i] = -100 + 190.0 * i / L;
    x = mk(vm0, GRACE_FLOAT32, 1, SZ(L), lr);
    grace_tensor_read(vm0, x, GRACE_FLOAT64, lr);
    naive_softmax(lr, L, 1, 1, lw);
    o = run1(vm0, GRACE_OP_LOG_SOFTMAX, x, NULL);
    ok(o && vals_rel(rd(vm0, o), lw, L, 1e-6, 4e-6), "log_softmax over a row spanning -100..90");
    rel(o);
    rel(x);
  }
}

/* ---- reductions over leading dims with a contiguous kept dim (the column-tile path) ---- */
static void test_columns(void) {
  enum { R = 6, C = 20 };
  double d[R * C];
  for (int i = 0; i < R * C; i++) d[i] = floor(urand() * 5);
  d[2 * C + 3] = NAN; d[4 * C + 3] = NAN; d[0 * C + 7] = NAN;
  grace_tensor *x = mk(vm0, GRACE_FLOAT32, 2, SZ(R, C), d), *p[2], *o;
  for (int wm = 0; wm < 2; wm++) {
    int okk = run2(vm0, wm ? GRACE_OP_MAX : GRACE_OP_MIN, x, A(.ndims = 1, .dims = {0}), p);
    if (okk) {
      double v[C];
      memcpy(v, rd(vm0, p[0]), sizeof v);
      const int64_t *ix = rdi(vm0, p[1]);
      for (int j = 0; j < C; j++) {
        double best = d[j];
        int bi = 0;
        for (int i = 1; i < R && !isnan(best); i++) {
          double u = d[i * C + j];
          if (isnan(u) || (wm ? u > best : u < best)) { best = u; bi = i; }
        }
        okk &= (isnan(best) ? isnan(v[j]) : v[j] == best) && ix[j] == bi;
      }
      rel(p[0]); rel(p[1]);
    }
    ok(okk, "%s over dim 0 of [%d, %d] with ties and NaN: values and first indices", wm ? "max" : "min", R, C);
  }
  rel(x);

  int64_t id[7 * 12];
  for (int i = 0; i < 7 * 12; i++) id[i] = (int64_t)(urand() * 9) - 4;
  x = mki(vm1, GRACE_INT32, 2, SZ(7, 12), id);
  o = run1(vm1, GRACE_OP_ARGMIN, x, A(.ndims = 1, .dims = {0}));
  {
    int64_t want[12];
    for (int j = 0; j < 12; j++) {
      int bi = 0;
      for (int i = 1; i < 7; i++) if (id[i * 12 + j] < id[bi * 12 + j]) bi = i;
      want[j] = bi + 1;
    }
    ok(o && ivals(rdi(vm1, o), want, 12), "argmin over dim 0 of int32 [7, 12] (base 1)");
  }
  rel(o);
  o = run1(vm1, GRACE_OP_SUM, x, A(.ndims = 1, .dims = {0}));
  {
    int64_t want[12] = {0};
    for (int i = 0; i < 7 * 12; i++) want[i % 12] += id[i];
    ok(o && grace_tensor_dtype(o) == GRACE_INT64 && ivals(rdi(vm1, o), want, 12), "int32 sum over dim 0 gives int64 columns");
  }
  rel(o);
  rel(x);

  double e[3 * 4 * 10], want[10] = {0}, hw[9] = {0};
  for (int i = 0; i < 120; i++) { e[i] = urand() * 100 - 50; want[i % 10] += e[i]; }
  x = mk(vm0, GRACE_FLOAT64, 3, SZ(3, 4, 10), e);
  o = run1(vm0, GRACE_OP_SUM, x, A(.ndims = 2, .dims = {0, 1}, .keepdim = 1));
  ok(has_shape(o, 3, SZ(1, 1, 10)) && vals_near(rd(vm0, o), want, 10, 1e-13), "float64 sum over dims {0, 1} of [3, 4, 10]");
  rel(o);
  rel(x);
  x = mk(vm0, GRACE_FLOAT16, 2, SZ(5, 9), e);
  grace_tensor_read(vm0, x, GRACE_FLOAT64, e);
  for (int i = 0; i < 45; i++) hw[i % 9] += e[i] / 5;
  o = run1(vm0, GRACE_OP_MEAN, x, A(.ndims = 1, .dims = {0}));
  ok(o && grace_tensor_dtype(o) == GRACE_FLOAT16 && vals_near(rd(vm0, o), hw, 9, 1e-3), "float16 mean over dim 0 of [5, 9]");
  rel(o);
  rel(x);

  /* softmax over the middle dim of a contiguous 3-d tensor */
  double s3[4 * 5 * 6], w3[4 * 5 * 6];
  for (int i = 0; i < 120; i++) s3[i] = urand() * 8 - 4;
  x = mk(vm0, GRACE_FLOAT32, 3, SZ(4, 5, 6), s3);
  grace_tensor_read(vm0, x, GRACE_FLOAT64, s3);
  for (int logp = 0; logp < 2; logp++) {
    for (int a = 0; a < 4; a++) for (int c = 0; c < 6; c++) naive_softmax(s3 + a * 30 + c, 5, 6, logp, w3 + a * 30 + c);
    o = run1(vm0, logp ? GRACE_OP_LOG_SOFTMAX : GRACE_OP_SOFTMAX, x, A(.ndims = 1, .dims = {1}));
    ok(has_shape(o, 3, SZ(4, 5, 6)) && vals_rel(rd(vm0, o), w3, 120, 2e-6, logp ? 1e-6 : 0), "%s over dim 1 of [4, 5, 6]",
       logp ? "log_softmax" : "softmax");
    rel(o);
  }
  rel(x);
}

/* ---- topk, sort ---- */
static void test_sort(void) {
  grace_tensor *x = mk(vm0, GRACE_FLOAT32, 1, SZ(5), D(1, 3, 2, 3, 0)), *p[2];
  ok(run2(vm0, GRACE_OP_TOPK, x, A(.i0 = 2), p) && has_shape(p[0], 1, SZ(2)) && vals_near(rd(vm0, p[0]), D(3, 3), 2, 0) &&
     ivals(rdi(vm0, p[1]), (const int64_t[]){1, 3}, 2), "topk 2: ties in index order");
  rel(p[0]); rel(p[1]);
  ok(run2(vm0, GRACE_OP_TOPK, x, A(.i0 = 3, .flag = 1), p) && vals_near(rd(vm0, p[0]), D(0, 1, 2), 3, 0) &&
     ivals(rdi(vm0, p[1]), (const int64_t[]){4, 0, 2}, 3), "topk 3 smallest, smallest first");
  rel(p[0]); rel(p[1]);
  rel(x);
  x = mk(vm1, GRACE_FLOAT32, 2, SZ(2, 3), D(1, 2, 3, 4, 5, 6));
  fails(vm1, GRACE_OP_TOPK, 1, &x, A(.i0 = 5), 2, GRACE_EINDEX, "topk: k (5) is out of range for dim 2 of size 3",
        "topk k too big is EINDEX (dim shown 1-based)");
  ok(run2(vm1, GRACE_OP_TOPK, x, A(.i0 = 1, .ndims = 1, .dims = {0}), p) && has_shape(p[0], 2, SZ(1, 3)) &&
     vals_near(rd(vm1, p[0]), D(4, 5, 6), 3, 0) && ivals(rdi(vm1, p[1]), (const int64_t[]){2, 2, 2}, 3),
     "topk over dim 0, indices 1-based");
  rel(p[0]); rel(p[1]);
  rel(x);

  x = mk(vm0, GRACE_FLOAT32, 1, SZ(7), D(2, NAN, 1, 2, -INFINITY, 0.0, -0.0));
  ok(run2(vm0, GRACE_OP_SORT, x, NULL, p) && vals_near(rd(vm0, p[0]), D(-INFINITY, 0, 0, 1, 2, 2, NAN), 7, 0) &&
     ivals(rdi(vm0, p[1]), (const int64_t[]){4, 5, 6, 2, 0, 3, 1}, 7), "sort ascending: stable, -0 ties +0, NaN last");
  rel(p[0]); rel(p[1]);
  ok(run2(vm0, GRACE_OP_SORT, x, A(.flag = 1), p) && vals_near(rd(vm0, p[0]), D(NAN, 2, 2, 1, 0, 0, -INFINITY), 7, 0) &&
     ivals(rdi(vm0, p[1]), (const int64_t[]){1, 0, 3, 2, 5, 6, 4}, 7), "sort descending: stable, NaN first");
  rel(p[0]); rel(p[1]);
  ok(run2(vm0, GRACE_OP_TOPK, x, A(.i0 = 2), p) && isnan(rd(vm0, p[0])[0]) && rdi(vm0, p[1])[0] == 1 && rdi(vm0, p[1])[1] == 0,
     "topk: NaN is the largest");
  rel(p[0]); rel(p[1]);
  rel(x);
  x = mki(vm0, GRACE_INT64, 1, SZ(4), (const int64_t[]){-5, INT64_MAX, INT64_MIN, 7});
  grace_tensor *o = NULL;
  ok(grace_run(vm0, GRACE_OP_SORT, 1, &x, NULL, 1, &o) == GRACE_OK && grace_tensor_dtype(o) == GRACE_INT64 &&
     ivals(rdi(vm0, o), (const int64_t[]){INT64_MIN, -5, 7, INT64_MAX}, 4), "int64 sort, values only, extremes exact");
  rel(o);
  rel(x);

  /* long rows against a naive selection: both the small-k scan and the full merge sort */
  enum { R = 6, L = 700 };
  static double d[R * L];
  for (int i = 0; i < R * L; i++) d[i] = floor(urand() * 50);   /* many ties */
  x = mk(vm0, GRACE_FLOAT64, 2, SZ(R, L), d);
  int ks[2] = {5, 400};
  for (int kk = 0; kk < 2; kk++) {
    for (int smallest = 0; smallest < 2; smallest++) {
      int k = ks[kk], okk = run2(vm0, GRACE_OP_TOPK, x, A(.i0 = k, .flag = smallest), p);
      if (okk) {
        static double v[R * 400];
        static int64_t ix[R * 400];
        memcpy(v, rd(vm0, p[0]), sizeof(double) * R * k);
        memcpy(ix, rdi(vm0, p[1]), sizeof(int64_t) * R * k);
        for (int r = 0; r < R && okk; r++) {
          /* naive: repeatedly pick the best unused element, lowest index first among equals */
          static char used[L];
          memset(used, 0, sizeof used);
          for (int j = 0; j < k && okk; j++) {
            int bi = -1;
            for (int i = 0; i < L; i++)
              if (!used[i] && (bi < 0 || (smallest ? d[r * L + i] < d[r * L + bi] : d[r * L + i] > d[r * L + bi]))) bi = i;
            used[bi] = 1;
            okk &= ix[r * k + j] == bi && v[r * k + j] == d[r * L + bi];
          }
        }
        rel(p[0]); rel(p[1]);
      }
      ok(okk, "topk k=%d %s on [%d, %d] matches a naive selection", k, smallest ? "smallest" : "largest", R, L);
    }
  }
  grace_tensor *t = view(vm0, GRACE_OP_TRANSPOSE, x, A(.ndims = 2, .dims = {0, 1}));   /* [L, R] */
  int okk = run2(vm0, GRACE_OP_SORT, t, A(.ndims = 1, .dims = {0}, .flag = 1), p);
  if (okk) {
    static double v[R * L];
    memcpy(v, rd(vm0, p[0]), sizeof v);
    const int64_t *ix = rdi(vm0, p[1]);
    for (int r = 0; r < R; r++)
      for (int j = 0; j < L; j++) {
        okk &= v[j * R + r] == d[r * L + ix[j * R + r]];
        if (j) okk &= v[j * R + r] < v[(j - 1) * R + r] || (v[j * R + r] == v[(j - 1) * R + r] && ix[j * R + r] > ix[(j - 1) * R + r]);
      }
    rel(p[0]); rel(p[1]);
  }
  ok(okk, "descending stable sort over dim 0 of a transposed [%d, %d]", L, R);
  rel(t);
  rel(x);

  x = mk(vm0, GRACE_FLOAT32, 0, NULL, D(3));
  ok(run2(vm0, GRACE_OP_SORT, x, NULL, p) && has_shape(p[0], 0, NULL) && rd(vm0, p[0])[0] == 3 && rdi(vm0, p[1])[0] == 0,
     "sort of a 0-d tensor");
  rel(p[0]); rel(p[1]);
  rel(x);
  x = mk(vm0, GRACE_FLOAT32, 2, SZ(3, 0), D(0));
  ok(run2(vm0, GRACE_OP_SORT, x, NULL, p) && has_shape(p[0], 2, SZ(3, 0)), "sort of a zero-size tensor");
  rel(p[0]); rel(p[1]);
  ok(run2(vm0, GRACE_OP_TOPK, x, A(.i0 = 0), p) && has_shape(p[1], 2, SZ(3, 0)), "topk 0 of rows of size 0");
  rel(p[0]); rel(p[1]);
  rel(x);
}

/* ---- layer_norm, rms_norm ---- */
static void naive_norm(const double *x, int rows, int D_, const double *w, const double *b, double eps, int rms, double *y) {
  for (int r = 0; r < rows; r++) {
    const double *xr = x + r * D_;
    double m = 0, v = 0;
    if (!rms) { for (int i = 0; i < D_; i++) m += xr[i]; m /= D_; }
    for (int i = 0; i < D_; i++) v += (xr[i] - m) * (xr[i] - m);
    v /= D_;
    for (int i = 0; i < D_; i++) y[r * D_ + i] = (xr[i] - m) / sqrt(v + eps) * (w ? w[i] : 1) + (b ? b[i] : 0);
  }
}

static void test_norms(void) {
  enum { R = 9, N = 77 };
  static double xd[R * N], wd[N], bd[N], want[R * N];
  for (int i = 0; i < R * N; i++) xd[i] = (urand() - 0.3) * 10;
  for (int i = 0; i < N; i++) { wd[i] = urand() * 2 - 1; bd[i] = urand(); }
  grace_tensor *x = mk(vm0, GRACE_FLOAT32, 2, SZ(R, N), xd), *w = mk(vm0, GRACE_FLOAT32, 1, SZ(N), wd);
  grace_tensor *b = mk(vm0, GRACE_FLOAT32, 1, SZ(N), bd), *o = NULL;
  grace_tensor_read(vm0, x, GRACE_FLOAT64, xd);
  grace_tensor_read(vm0, w, GRACE_FLOAT64, wd);
  grace_tensor_read(vm0, b, GRACE_FLOAT64, bd);

  naive_norm(xd, R, N, wd, bd, 1e-5, 0, want);
  ok(grace_run(vm0, GRACE_OP_LAYER_NORM, 3, (grace_tensor *[]){x, w, b}, NULL, 1, &o) == GRACE_OK &&
     grace_tensor_dtype(o) == GRACE_FLOAT32 && vals_near(rd(vm0, o), want, R * N, 1e-5), "layer_norm with weight and bias");
  rel(o);
  naive_norm(xd, R, N, NULL, NULL, 0.5, 0, want);
  ok(grace_run(vm0, GRACE_OP_LAYER_NORM, 3, (grace_tensor *[]){x, NULL, NULL}, A(.a = 0.5, .has_a = 1), 1, &o) == GRACE_OK &&
     vals_near(rd(vm0, o), want, R * N, 1e-5), "layer_norm without weight/bias, eps 0.5");
  rel(o);
  naive_norm(xd, R, N, wd, NULL, 1e-6, 1, want);
  ok(grace_run(vm0, GRACE_OP_RMS_NORM, 2, (grace_tensor *[]){x, w}, NULL, 1, &o) == GRACE_OK &&
     vals_near(rd(vm0, o), want, R * N, 1e-5), "rms_norm with weight, eps 1e-6");
  rel(o);
  naive_norm(xd, R, N, NULL, NULL, 2.0, 1, want);
  ok(grace_run(vm0, GRACE_OP_RMS_NORM, 2, (grace_tensor *[]){x, NULL}, A(.a = 2, .has_a = 1), 1, &o) == GRACE_OK &&
     vals_near(rd(vm0, o), want, R * N, 1e-5), "rms_norm without weight, eps 2");
  rel(o);

  /* float16 x with float32 weight: float16 result; a strided (transposed) x through the general path */
  grace_tensor *h = mk(vm0, GRACE_FLOAT16, 2, SZ(R, N), xd);
  static double hd[R * N];
  grace_tensor_read(vm0, h, GRACE_FLOAT64, hd);
  naive_norm(hd, R, N, wd, bd, 1e-5, 0, want);
  ok(grace_run(vm0, GRACE_OP_LAYER_NORM, 3, (grace_tensor *[]){h, w, b}, NULL, 1, &o) == GRACE_OK &&
     grace_tensor_dtype(o) == GRACE_FLOAT16 && vals_near(rd(vm0, o), want, R * N, 2e-3), "float16 layer_norm with float32 weight");
  rel(o);
  rel(h);
  grace_tensor *xt;
  {
    static double tr[R * N];
    for (int r = 0; r < R; r++) for (int i = 0; i < N; i++) tr[i * R + r] = xd[r * N + i];
    xt = mk(vm0, GRACE_FLOAT32, 2, SZ(N, R), tr);
  }
  grace_tensor *t = view(vm0, GRACE_OP_TRANSPOSE, xt, A(.ndims = 2, .dims = {0, 1}));   /* [R, N], strided */
  naive_norm(xd, R, N, wd, NULL, 1e-6, 1, want);
  ok(grace_run(vm0, GRACE_OP_RMS_NORM, 2, (grace_tensor *[]){t, w}, NULL, 1, &o) == GRACE_OK && has_shape(o, 2, SZ(R, N)) &&
     vals_near(rd(vm0, o), want, R * N, 1e-5), "rms_norm of a transposed tensor");
  rel(o);
  naive_norm(xd, R, N, wd, bd, 1e-5, 0, want);
  ok(grace_run(vm0, GRACE_OP_LAYER_NORM, 3, (grace_tensor *[]){t, w, b}, NULL, 1, &o) == GRACE_OK &&
     vals_near(rd(vm0, o), want, R * N, 1e-5), "layer_norm of a transposed tensor");
  rel(o);
  rel(t);
  rel(xt);

  /* float64 computes in double; a float16 weight is converted */
  {
    grace_tensor *x64 = mk(vm0, GRACE_FLOAT64, 2, SZ(R, N), xd), *w16 = mk(vm0, GRACE_FLOAT16, 1, SZ(N), wd);
    static double w16d[N];
    grace_tensor_read(vm0, w16, GRACE_FLOAT64, w16d);
    naive_norm(xd, R, N, w16d, bd, 1e-5, 0, want);
    ok(grace_run(vm0, GRACE_OP_LAYER_NORM, 3, (grace_tensor *[]){x64, w16, b}, NULL, 1, &o) == GRACE_OK &&
       grace_tensor_dtype(o) == GRACE_FLOAT64 && vals_near(rd(vm0, o), want, R * N, 1e-12), "float64 layer_norm (float16 weight) in double");
    rel(o);
    ok(grace_run(vm0, GRACE_OP_LAYER_NORM, 3, (grace_tensor *[]){x, w16, b}, NULL, 1, &o) == GRACE_OK &&
       vals_near(rd(vm0, o), want, R * N, 1e-5), "float32 layer_norm with a float16 weight");
    rel(o);
    naive_norm(xd, R, N, NULL, NULL, 1e-6, 1, want);
    ok(grace_run(vm0, GRACE_OP_RMS_NORM, 2, (grace_tensor *[]){x64, NULL}, NULL, 1, &o) == GRACE_OK &&
       vals_near(rd(vm0, o), want, R * N, 1e-12), "float64 rms_norm");
    rel(o);
    rel(w16);
    rel(x64);
  }

  grace_tensor *w4 = mk(vm0, GRACE_FLOAT32, 1, SZ(4), D(1, 1, 1, 1));
  fails(vm0, GRACE_OP_LAYER_NORM, 3, (grace_tensor *[]){x, w4, NULL}, NULL, 1, GRACE_ESHAPE,
        "layer_norm: weight of shape [4] does not match the last dim of input of shape [9, 77]", "layer_norm weight of the wrong size");
  fails(vm0, GRACE_OP_LAYER_NORM, 3, (grace_tensor *[]){x, w, w4}, NULL, 1, GRACE_ESHAPE, "layer_norm: bias of shape [4]",
        "layer_norm bias of the wrong size");
  fails(vm0, GRACE_OP_RMS_NORM, 2, (grace_tensor *[]){x, w4}, NULL, 1, GRACE_ESHAPE, "rms_norm: weight of shape [4]",
        "rms_norm weight of the wrong size");
  grace_tensor *xi = mki(vm0, GRACE_INT32, 2, SZ(1, 4), (const int64_t[]){1, 2, 3, 4});
  fails(vm0, GRACE_OP_LAYER_NORM, 3, (grace_tensor *[]){xi, NULL, NULL}, NULL, 1, GRACE_EDTYPE,
        "layer_norm: input dtype int32 is not a float type", "layer_norm of int32 is an error");
  fails(vm0, GRACE_OP_RMS_NORM, 2, (grace_tensor *[]){w4, xi}, NULL, 1, GRACE_EDTYPE, "rms_norm: weight dtype int32",
        "rms_norm with an int32 weight is an error");
  rel(xi);
  rel(w4);
  grace_tensor *e = mk(vm0, GRACE_FLOAT32, 2, SZ(0, 4), D(0));
  grace_tensor *w4b = mk(vm0, GRACE_FLOAT32, 1, SZ(4), D(1, 1, 1, 1));
  ok(grace_run(vm0, GRACE_OP_LAYER_NORM, 3, (grace_tensor *[]){e, w4b, NULL}, NULL, 1, &o) == GRACE_OK && has_shape(o, 2, SZ(0, 4)),
     "layer_norm of zero rows");
  rel(o);
  rel(w4b);
  rel(e);
  rel(x); rel(w); rel(b);
}

int main(void) {
  char err[256];
  vm0 = grace_vm_new(&(grace_config){.device = "cpu", .threads = 4}, err, sizeof err);
  vm1 = grace_vm_new(&(grace_config){.device = "cpu", .threads = 1, .index_base = 1}, err, sizeof err);
  if (!vm0 || !vm1) { printf("Bail out! %s\n", err); return 1; }
  test_sum_mean_prod();
  test_max_min();
  test_var_lse_logic();
  test_layouts();
  test_dim_errors();
  test_big();
  test_cumsum();
  test_softmax();
  test_columns();
  test_sort();
  test_norms();
  grace_vm_free(vm0);
  grace_vm_free(vm1);
  return tap_done();
}
