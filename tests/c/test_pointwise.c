/* test_pointwise.c: the CPU pointwise family through the public API: unary, binary, compare and ternary
 * ops per dtype category, type promotion, broadcasting, strided/expanded/0-d/empty inputs, casts, copy_,
 * fill_, contiguous/clone, the error cases, and the float32 math (exp, tanh, erf, ...) against libm in
 * double over a million points. Expected values are hand-computed or from libm in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm;

#define V(...) ((const double[]){__VA_ARGS__})
#define S(...) ((const int64_t[]){__VA_ARGS__})
#define NV(...) ((int)(sizeof((const double[]){__VA_ARGS__}) / sizeof(double)))

static grace_tensor *mk(grace_dtype dt, int nd, const int64_t *sz, const double *v) {
  grace_tensor *t = NULL;
  if (grace_tensor_from_data(vm, dt, nd, sz, GRACE_FLOAT64, v, &t) != GRACE_OK)
    printf("# tensor failed: %s\n", grace_last_error(vm));
  return t;
}
#define T1(dt, ...) mk(dt, 1, S(NV(__VA_ARGS__)), V(__VA_ARGS__))

static grace_tensor *num(double v, int is_int) {
  grace_tensor *t = NULL;
  grace_tensor_scalar(vm, v, is_int, &t);
  return t;
}

static grace_tensor *run(grace_op op, int nin, grace_tensor **in, const grace_attrs *a) {
  grace_tensor *out = NULL;
  if (grace_run(vm, op, nin, in, a, 1, &out) != GRACE_OK)
    printf("# %s failed: %s\n", grace_op_name(op), grace_last_error(vm));
  return out;
}
#define R1(op, x) run(op, 1, (grace_tensor *[]){x}, NULL)
#define R1A(op, x, a) run(op, 1, (grace_tensor *[]){x}, a)
#define R2(op, x, y) run(op, 2, (grace_tensor *[]){x, y}, NULL)
#define R3(op, x, y, z) run(op, 3, (grace_tensor *[]){x, y, z}, NULL)

static void rel(grace_tensor *t) { grace_tensor_release(t); }

static int close_to(double got, double want, double tol) {
  if (isnan(want)) return isnan(got);
  if (got == want) return 1;
  return fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

/* Checks dtype, shape and values (relative tolerance above 1, absolute below), then releases t. */
static void check(grace_tensor *t, grace_dtype dt, int nd, const int64_t *sz, const double *want, double tol,
                  const char *name) {
  if (!t) { ok(0, "%s: no result", name); return; }
  int good = grace_tensor_dtype(t) == dt && grace_tensor_ndim(t) == nd;
  for (int d = 0; good && d < nd; d++) good = grace_tensor_sizes(t)[d] == sz[d];
  if (!good) {
    ok(0, "%s: dtype %s ndim %d", name, grace_dtype_name(grace_tensor_dtype(t)), grace_tensor_ndim(t));
    rel(t);
    return;
  }
  int64_t n = grace_tensor_numel(t);
  double *got = calloc((size_t)(n ? n : 1), sizeof(double));
  grace_tensor_read(vm, t, GRACE_FLOAT64, got);
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++) if (!close_to(got[i], want[i], tol)) bad = i;
  ok(bad < 0, "%s", name);
  if (bad >= 0) printf("#   element %lld: got %.17g, expected %.17g\n", (long long)bad, got[bad], want[bad]);
  free(got);
  rel(t);
}
#define CHECK1(t, dt, tol, name, ...) check(t, dt, 1, S(NV(__VA_ARGS__)), V(__VA_ARGS__), tol, name)

/* Expects op to fail with status st and a message containing each of up to two substrings. */
static void check_err(grace_op op, int nin, grace_tensor **in, const grace_attrs *a, grace_status st,
                      const char *sub1, const char *sub2, const char *name) {
  grace_tensor *out = NULL;
  int nout = grace_op_noutputs(op) ? 1 : 0;
  grace_status got = grace_run(vm, op, nin, in, a, nout, nout ? &out : NULL);
  const char *msg = grace_last_error(vm);
  int good = got == st && out == NULL && strstr(msg, sub1) && (!sub2 || strstr(msg, sub2));
  ok(good, "%s", name);
  if (!good) printf("#   status %d (want %d), message '%s'\n", (int)got, (int)st, msg);
  rel(out);
}

static void test_unary_float(void) {
  const double xs[] = {-1.5, -0.25, 0.5, 2.0};
  grace_tensor *x = mk(GRACE_FLOAT32, 1, S(4), xs), *xd = mk(GRACE_FLOAT64, 1, S(4), xs);
  struct { grace_op op; int flag; double (*f)(double); } ops[] = {
    {GRACE_OP_EXP, 0, exp}, {GRACE_OP_SIN, 0, sin}, {GRACE_OP_COS, 0, cos}, {GRACE_OP_TANH, 0, tanh},
    {GRACE_OP_ERF, 0, erf}, {GRACE_OP_SIGMOID, 0, NULL}, {GRACE_OP_SILU, 0, NULL}, {GRACE_OP_GELU, 0, NULL},
    {GRACE_OP_GELU, 1, NULL},
  };
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
    double want[4];
    for (int i = 0; i < 4; i++) {
      double v = xs[i], s = 1 / (1 + exp(-v));
      switch (ops[k].op) {
      case GRACE_OP_SIGMOID: want[i] = s; break;
      case GRACE_OP_SILU: want[i] = v * s; break;
      case GRACE_OP_GELU:
        want[i] = ops[k].flag ? 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                              : 0.5 * v * (1 + erf(v / sqrt(2.0)));
        break;
      default: want[i] = ops[k].f(v); break;
      }
    }
    grace_attrs a = {0};
    a.flag = ops[k].flag;
    char name[64];
    snprintf(name, sizeof name, "%s%s float32", grace_op_name(ops[k].op), ops[k].flag ? " (tanh)" : "");
    check(R1A(ops[k].op, x, &a), GRACE_FLOAT32, 1, S(4), want, 4e-7, name);
    snprintf(name, sizeof name, "%s%s float64", grace_op_name(ops[k].op), ops[k].flag ? " (tanh)" : "");
    check(R1A(ops[k].op, xd, &a), GRACE_FLOAT64, 1, S(4), want, 1e-15, name);
  }
  rel(x); rel(xd);

  x = T1(GRACE_FLOAT32, 0.25, 1, 2, 10, 0, -1);
  CHECK1(R1(GRACE_OP_LOG, x), GRACE_FLOAT32, 2e-7, "log float32 (0 gives -inf, -1 NaN)",
         log(0.25), 0, log(2), log(10), -INFINITY, NAN);
  CHECK1(R1(GRACE_OP_LOG1P, x), GRACE_FLOAT32, 2e-7, "log1p float32", log1p(0.25), log1p(1), log1p(2), log1p(10), 0,
         -INFINITY);
  CHECK1(R1(GRACE_OP_SQRT, x), GRACE_FLOAT32, 2e-7, "sqrt float32", 0.5, 1, sqrt(2), sqrt(10), 0, NAN);
  CHECK1(R1(GRACE_OP_RSQRT, x), GRACE_FLOAT32, 2e-7, "rsqrt float32", 2, 1, 1 / sqrt(2), 1 / sqrt(10), INFINITY, NAN);
  rel(x);

  /* integer and bool inputs of float math give float32 */
  x = T1(GRACE_INT32, 0, 1, 2);
  CHECK1(R1(GRACE_OP_EXP, x), GRACE_FLOAT32, 2e-7, "exp of int32 gives float32", 1, exp(1), exp(2));
  rel(x);
  x = T1(GRACE_BOOL, 0, 1);
  CHECK1(R1(GRACE_OP_SQRT, x), GRACE_FLOAT32, 0, "sqrt of bool gives float32", 0, 1);
  rel(x);
  x = T1(GRACE_FLOAT16, 1, -1);
  CHECK1(R1(GRACE_OP_EXP, x), GRACE_FLOAT16, 0, "exp float16 rounds to float16",
         2.71875 /* e = 2.71828 -> nearest half 2.71875 (spacing 2^-9) */, 0.367919921875 /* 1/e -> 0x35E3 */);
  rel(x);
  x = T1(GRACE_FLOAT32, NAN, INFINITY, -INFINITY, -103, 88.5);
  CHECK1(R1(GRACE_OP_EXP, x), GRACE_FLOAT32, 3e-7, "exp edge cases (NaN, inf, -inf, subnormal, near overflow)",
         NAN, INFINITY, 0, (double)expf(-103.0f), exp(88.5));
  CHECK1(R1(GRACE_OP_TANH, x), GRACE_FLOAT32, 0, "tanh edge cases", NAN, 1, -1, -1, 1);
  CHECK1(R1(GRACE_OP_SIGMOID, x), GRACE_FLOAT32, 3e-7, "sigmoid edge cases", NAN, 1, 0, 1 / (1 + exp(103)), 1);
  CHECK1(R1(GRACE_OP_ERF, x), GRACE_FLOAT32, 0, "erf edge cases", NAN, 1, -1, -1, 1);
  rel(x);
}

static void test_unary_keep(void) {
  grace_tensor *x = T1(GRACE_FLOAT32, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.6);
  CHECK1(R1(GRACE_OP_ROUND, x), GRACE_FLOAT32, 0, "round is half to even", -2, -2, -0.0, 0, 2, 2, 3);
  CHECK1(R1(GRACE_OP_FLOOR, x), GRACE_FLOAT32, 0, "floor float32", -3, -2, -1, 0, 1, 2, 2);
  CHECK1(R1(GRACE_OP_CEIL, x), GRACE_FLOAT32, 0, "ceil float32", -2, -1, -0.0, 1, 2, 3, 3);
  CHECK1(R1(GRACE_OP_NEG, x), GRACE_FLOAT32, 0, "neg float32", 2.5, 1.5, 0.5, -0.5, -1.5, -2.5, -2.6f);
  CHECK1(R1(GRACE_OP_ABS, x), GRACE_FLOAT32, 0, "abs float32", 2.5, 1.5, 0.5, 0.5, 1.5, 2.5, 2.6f);
  rel(x);
  x = T1(GRACE_FLOAT64, -3, 0, 2, NAN);
  CHECK1(R1(GRACE_OP_SIGN, x), GRACE_FLOAT64, 0, "sign float64 (NaN stays NaN)", -1, 0, 1, NAN);
  CHECK1(R1(GRACE_OP_RELU, x), GRACE_FLOAT64, 0, "relu float64 (NaN stays NaN)", 0, 0, 2, NAN);
  rel(x);
  x = T1(GRACE_INT32, -3, 0, 4);
  CHECK1(R1(GRACE_OP_ABS, x), GRACE_INT32, 0, "abs int32 stays int32", 3, 0, 4);
  CHECK1(R1(GRACE_OP_NEG, x), GRACE_INT32, 0, "neg int32", 3, 0, -4);
  CHECK1(R1(GRACE_OP_SIGN, x), GRACE_INT32, 0, "sign int32", -1, 0, 1);
  CHECK1(R1(GRACE_OP_RELU, x), GRACE_INT32, 0, "relu int32", 0, 0, 4);
  CHECK1(R1(GRACE_OP_FLOOR, x), GRACE_INT32, 0, "floor of int32 is the identity", -3, 0, 4);
  CHECK1(R1(GRACE_OP_ROUND, x), GRACE_INT32, 0, "round of int32 is the identity", -3, 0, 4);
  rel(x);
  x = T1(GRACE_UINT8, 1, 0);
  CHECK1(R1(GRACE_OP_NEG, x), GRACE_UINT8, 0, "neg uint8 wraps", 255, 0);
  rel(x);
  x = T1(GRACE_BOOL, 1, 0);
  check_err(GRACE_OP_NEG, 1, &x, NULL, GRACE_EDTYPE, "neg", "logical_not", "neg of bool is an error");
  CHECK1(R1(GRACE_OP_LOGICAL_NOT, x), GRACE_BOOL, 0, "logical_not bool", 0, 1);
  rel(x);
  x = T1(GRACE_FLOAT32, 0, 1.5, NAN);
  CHECK1(R1(GRACE_OP_LOGICAL_NOT, x), GRACE_BOOL, 0, "logical_not float32 (NaN is true)", 1, 0, 0);
  rel(x);

  /* clamp */
  x = T1(GRACE_FLOAT32, -2, 0.5, 3, NAN);
  grace_attrs a = {0};
  a.has_a = 1; a.a = -1; a.has_b = 1; a.b = 1;
  CHECK1(R1A(GRACE_OP_CLAMP, x, &a), GRACE_FLOAT32, 0, "clamp min and max (NaN propagates)", -1, 0.5, 1, NAN);
  a.has_b = 0; a.a = 0;
  CHECK1(R1A(GRACE_OP_CLAMP, x, &a), GRACE_FLOAT32, 0, "clamp min only", 0, 0.5, 3, NAN);
  a.has_a = 0; a.has_b = 1; a.b = 0;
  CHECK1(R1A(GRACE_OP_CLAMP, x, &a), GRACE_FLOAT32, 0, "clamp max only", -2, 0, 0, NAN);
  a.has_a = 1; a.a = 2; a.b = 1;
  CHECK1(R1A(GRACE_OP_CLAMP, x, &a), GRACE_FLOAT32, 0, "clamp with min > max gives max", 1, 1, 1, NAN);
  a = (grace_attrs){0};
  check_err(GRACE_OP_CLAMP, 1, &x, &a, GRACE_EARG, "clamp", "min", "clamp with no bounds is an error");
  rel(x);
  x = T1(GRACE_INT32, -5, 1, 5);
  a.has_a = 1; a.a = -1; a.has_b = 1; a.b = 2;
  CHECK1(R1A(GRACE_OP_CLAMP, x, &a), GRACE_INT32, 0, "clamp int32 with integral bounds stays int32", -1, 1, 2);
  a.a = 0.5; a.has_b = 0;
  CHECK1(R1A(GRACE_OP_CLAMP, x, &a), GRACE_FLOAT32, 0, "clamp int32 with a fractional bound gives float32", 0.5, 1, 5);
  rel(x);
}

static void test_binary(void) {
  grace_tensor *a, *b, *s;
  /* float16/bfloat16 compute in float32 and store rounded: 1/3 */
  a = T1(GRACE_FLOAT16, 1); b = T1(GRACE_FLOAT16, 3);
  CHECK1(R2(GRACE_OP_DIV, a, b), GRACE_FLOAT16, 0, "float16 1/3 rounds to 0x3555", 0.333251953125);
  rel(a); rel(b);
  a = T1(GRACE_BFLOAT16, 1); b = T1(GRACE_BFLOAT16, 3);
  CHECK1(R2(GRACE_OP_DIV, a, b), GRACE_BFLOAT16, 0, "bfloat16 1/3 rounds to 0x3EAB", 0.333984375);
  rel(a); rel(b);

  /* true division of integers */
  a = T1(GRACE_INT32, 7, -7, 1); b = T1(GRACE_INT32, 2, 2, 0);
  CHECK1(R2(GRACE_OP_DIV, a, b), GRACE_FLOAT32, 0, "int32 / int32 is true division in float32", 3.5, -3.5, INFINITY);
  rel(a); rel(b);

  /* uint8 wraps */
  a = T1(GRACE_UINT8, 250, 3);
  s = num(10, 1);
  CHECK1(R2(GRACE_OP_ADD, a, s), GRACE_UINT8, 0, "uint8 + 10 wraps in uint8", 4, 13);
  rel(s);
  s = num(300, 1);
  CHECK1(R2(GRACE_OP_ADD, a, s), GRACE_UINT8, 0, "uint8 + 300 wraps in uint8", 38, 47);
  CHECK1(R2(GRACE_OP_SUB, s, a), GRACE_UINT8, 0, "300 - uint8 wraps in uint8", 50, 41);
  rel(s); rel(a);
  a = T1(GRACE_INT32, 2147483647); s = num(1, 1);
  CHECK1(R2(GRACE_OP_ADD, a, s), GRACE_INT32, 0, "int32 overflow wraps", -2147483648.0);
  rel(a); rel(s);

  /* remainder: the sign of the divisor */
  a = T1(GRACE_FLOAT32, 5, -5, 5, -5, 5.5, 1); b = T1(GRACE_FLOAT32, 3, 3, -3, -3, 2, 0);
  CHECK1(R2(GRACE_OP_REM, a, b), GRACE_FLOAT32, 0, "remainder float32 signs follow the divisor", 2, 1, -1, -2, 1.5, NAN);
  rel(a); rel(b);
  a = T1(GRACE_INT32, 5, -5, 5, -5, 6); b = T1(GRACE_INT32, 3, 3, -3, -3, 3);
  CHECK1(R2(GRACE_OP_REM, a, b), GRACE_INT32, 0, "remainder int32 signs follow the divisor", 2, 1, -1, -2, 0);
  rel(b);
  b = T1(GRACE_INT32, 3, 0, 1, 1, 1);
  check_err(GRACE_OP_REM, 2, (grace_tensor *[]){a, b}, NULL, GRACE_EARG, "remainder", "integer division by zero",
            "integer remainder by zero is an error");
  rel(a); rel(b);
  a = T1(GRACE_FLOAT64, -7.5); s = num(2, 1);
  CHECK1(R2(GRACE_OP_REM, a, s), GRACE_FLOAT64, 0, "remainder float64 with a number", 0.5);
  rel(a); rel(s);

  /* pow */
  a = T1(GRACE_INT32, 2, 3, -2, 5, 2); b = T1(GRACE_INT32, 10, 3, 3, 0, 31);
  CHECK1(R2(GRACE_OP_POW, a, b), GRACE_INT32, 0, "pow int32 exact (2^31 wraps)", 1024, 27, -8, 1, -2147483648.0);
  rel(b);
  s = num(0.5, 0);
  CHECK1(R2(GRACE_OP_POW, a, s), GRACE_FLOAT32, 1e-7, "pow int32 ** 0.5 gives float32", sqrt(2), sqrt(3), NAN, sqrt(5),
         sqrt(2));
  rel(s);
  s = num(2, 1);
  CHECK1(R2(GRACE_OP_POW, a, s), GRACE_INT32, 0, "pow int32 ** 2 stays int32", 4, 9, 4, 25, 4);
  rel(s);
  b = T1(GRACE_INT32, 1, 1, -1, 1, 1);
  check_err(GRACE_OP_POW, 2, (grace_tensor *[]){a, b}, NULL, GRACE_EARG, "pow", "negative integer powers",
            "integer to a negative integer power is an error");
  rel(a); rel(b);
  {
    int64_t three = 3, e39 = 39, got = 0;
    grace_tensor *x, *y, *p;
    grace_tensor_from_data(vm, GRACE_INT64, 1, S(1), GRACE_INT64, &three, &x);
    grace_tensor_from_data(vm, GRACE_INT64, 1, S(1), GRACE_INT64, &e39, &y);
    p = R2(GRACE_OP_POW, x, y);
    if (p) grace_tensor_read(vm, p, GRACE_INT64, &got);
    is_int(got, 4052555153018976267LL, "pow int64 3^39 is exact (beyond double precision)");
    rel(x); rel(y); rel(p);
  }
  a = T1(GRACE_FLOAT32, 4, 2, -8); b = T1(GRACE_FLOAT32, 0.5, -1, 1.0 / 3);
  CHECK1(R2(GRACE_OP_POW, a, b), GRACE_FLOAT32, 1e-7, "pow float32", 2, 0.5, NAN);
  rel(a); rel(b);

  /* maximum/minimum propagate NaN */
  a = T1(GRACE_FLOAT32, 1, NAN, 3, -1); b = T1(GRACE_FLOAT32, 2, 0, NAN, -2);
  CHECK1(R2(GRACE_OP_MAXIMUM, a, b), GRACE_FLOAT32, 0, "maximum propagates NaN", 2, NAN, NAN, -1);
  CHECK1(R2(GRACE_OP_MINIMUM, a, b), GRACE_FLOAT32, 0, "minimum propagates NaN", 1, NAN, NAN, -2);
  rel(a); rel(b);
  a = T1(GRACE_INT64, 1, -5); b = T1(GRACE_INT32, 2, -6);
  CHECK1(R2(GRACE_OP_MAXIMUM, a, b), GRACE_INT64, 0, "maximum int64 with int32 gives int64", 2, -5);
  rel(a); rel(b);

  /* arithmetic per category */
  a = T1(GRACE_FLOAT64, 0.1, 1e300); b = T1(GRACE_FLOAT64, 0.2, 1e300);
  CHECK1(R2(GRACE_OP_ADD, a, b), GRACE_FLOAT64, 0, "add float64", 0.1 + 0.2, 2e300);
  CHECK1(R2(GRACE_OP_MUL, a, b), GRACE_FLOAT64, 0, "mul float64 (overflow to inf)", 0.1 * 0.2, INFINITY);
  rel(a); rel(b);
  {
    int64_t big[2] = {(int64_t)1 << 62, -3}, one[2] = {1, 5}, got[2] = {0, 0};
    grace_tensor *x, *y, *z;
    grace_tensor_from_data(vm, GRACE_INT64, 1, S(2), GRACE_INT64, big, &x);
    grace_tensor_from_data(vm, GRACE_INT64, 1, S(2), GRACE_INT64, one, &y);
    z = R2(GRACE_OP_ADD, x, y);
    if (z) grace_tensor_read(vm, z, GRACE_INT64, got);
    ok(got[0] == ((int64_t)1 << 62) + 1 && got[1] == 2, "add int64 exact beyond 2^53");
    rel(z);
    z = R2(GRACE_OP_MUL, x, y);
    if (z) grace_tensor_read(vm, z, GRACE_INT64, got);
    ok(got[0] == ((int64_t)1 << 62) && got[1] == -15, "mul int64");
    rel(x); rel(y); rel(z);
  }
  a = T1(GRACE_BOOL, 1, 1, 0); b = T1(GRACE_BOOL, 1, 0, 0);
  CHECK1(R2(GRACE_OP_ADD, a, b), GRACE_BOOL, 0, "bool + bool is bool (or)", 1, 1, 0);
  CHECK1(R2(GRACE_OP_MUL, a, b), GRACE_BOOL, 0, "bool * bool is bool (and)", 1, 0, 0);
  check_err(GRACE_OP_SUB, 2, (grace_tensor *[]){a, b}, NULL, GRACE_EDTYPE, "sub", "bool", "sub of bool tensors is an error");
  rel(a); rel(b);
}

static void test_compare(void) {
  grace_tensor *a = T1(GRACE_INT32, 1, 2, 3), *b = T1(GRACE_FLOAT32, 1.5, 2, 2.5);
  CHECK1(R2(GRACE_OP_EQ, a, b), GRACE_BOOL, 0, "eq int32 with float32", 0, 1, 0);
  CHECK1(R2(GRACE_OP_NE, a, b), GRACE_BOOL, 0, "ne", 1, 0, 1);
  CHECK1(R2(GRACE_OP_LT, a, b), GRACE_BOOL, 0, "lt", 1, 0, 0);
  CHECK1(R2(GRACE_OP_LE, a, b), GRACE_BOOL, 0, "le", 1, 1, 0);
  CHECK1(R2(GRACE_OP_GT, a, b), GRACE_BOOL, 0, "gt", 0, 0, 1);
  CHECK1(R2(GRACE_OP_GE, a, b), GRACE_BOOL, 0, "ge", 0, 1, 1);
  rel(a); rel(b);
  a = T1(GRACE_FLOAT32, NAN, 0.1);
  grace_tensor *s = num(0.1, 0);
  CHECK1(R2(GRACE_OP_EQ, a, s), GRACE_BOOL, 0, "eq compares in float32 (0.1f == 0.1), NaN is unequal", 0, 1);
  CHECK1(R2(GRACE_OP_NE, a, a), GRACE_BOOL, 0, "NaN != NaN", 1, 0);
  rel(s); rel(a);
  /* a wrapped number is first converted to the promoted dtype (as PyTorch's TensorIterator casts it) */
  a = T1(GRACE_FLOAT16, 1, 2);
  s = num(1.0001, 0);
  CHECK1(R2(GRACE_OP_EQ, a, s), GRACE_BOOL, 0, "eq compares in float16: 1.0001 rounds to 1", 1, 0);
  rel(a);
  a = T1(GRACE_FLOAT16, 1);
  CHECK1(R2(GRACE_OP_EQ, a, s), GRACE_BOOL, 0, "eq compares in float16 (one element)", 1);
  rel(a); rel(s);
  a = T1(GRACE_UINT8, 44);
  s = num(300, 1);
  CHECK1(R2(GRACE_OP_EQ, a, s), GRACE_BOOL, 0, "uint8 eq 300 compares in uint8 (300 wraps to 44)", 1);
  rel(a); rel(s);
  {
    int64_t v[2] = {((int64_t)1 << 53) + 1, 7};
    grace_tensor *x, *y;
    grace_tensor_from_data(vm, GRACE_INT64, 1, S(2), GRACE_INT64, v, &x);
    v[0] = (int64_t)1 << 53;
    grace_tensor_from_data(vm, GRACE_INT64, 1, S(2), GRACE_INT64, v, &y);
    CHECK1(R2(GRACE_OP_GT, x, y), GRACE_BOOL, 0, "gt int64 compares exactly beyond 2^53", 1, 0);
    rel(x); rel(y);
  }
  a = T1(GRACE_FLOAT32, 0, 1.5, NAN, 0); b = T1(GRACE_INT32, 2, 0, 1, 0);
  CHECK1(R2(GRACE_OP_LOGICAL_AND, a, b), GRACE_BOOL, 0, "logical_and (nonzero and NaN are true)", 0, 0, 1, 0);
  CHECK1(R2(GRACE_OP_LOGICAL_OR, a, b), GRACE_BOOL, 0, "logical_or", 1, 1, 1, 0);
  rel(a); rel(b);
}

static void test_ternary(void) {
  grace_tensor *c = T1(GRACE_INT32, 0, 2, 0), *a = T1(GRACE_INT32, 1, 2, 3), *s = num(2.5, 0);
  CHECK1(R3(GRACE_OP_WHERE, c, a, s), GRACE_FLOAT32, 0, "where(int cond, int32, 2.5) gives float32", 2.5, 2, 2.5);
  rel(c); rel(a); rel(s);
  c = mk(GRACE_BOOL, 2, S(3, 1), V(1, 0, 1));
  a = mk(GRACE_FLOAT64, 2, S(1, 2), V(10, 20));
  s = mk(GRACE_FLOAT32, 0, NULL, V(-1));
  check(R3(GRACE_OP_WHERE, c, a, s), GRACE_FLOAT64, 2, S(3, 2), V(10, 20, -1, -1, 10, 20), 0,
        "where broadcasts [3, 1], [1, 2] and 0-d");
  rel(c); rel(a); rel(s);

  grace_tensor *x = mk(GRACE_FLOAT32, 2, S(2, 3), V(1, 2, 3, 4, 5, 6));
  grace_tensor *m = mk(GRACE_BOOL, 1, S(3), V(1, 0, 1));
  s = num(9, 1);
  check(R3(GRACE_OP_MASKED_FILL, x, m, s), GRACE_FLOAT32, 2, S(2, 3), V(9, 2, 9, 9, 5, 9), 0,
        "masked_fill with a [3] mask on [2, 3]");
  rel(s);
  grace_tensor *xi = T1(GRACE_INT32, 1, 2, 3);
  s = num(7.9, 0);
  CHECK1(R3(GRACE_OP_MASKED_FILL, xi, m, s), GRACE_INT32, 0, "masked_fill keeps int32 (7.9 truncates)", 7, 2, 7);
  rel(xi);
  grace_tensor *mi = T1(GRACE_INT32, 1, 0, 1);
  check_err(GRACE_OP_MASKED_FILL, 3, (grace_tensor *[]){x, mi, s}, NULL, GRACE_EDTYPE, "masked_fill", "int32",
            "masked_fill with an int32 mask is an error naming the dtype");
  rel(mi);
  grace_tensor *v1 = T1(GRACE_FLOAT32, 1);
  check_err(GRACE_OP_MASKED_FILL, 3, (grace_tensor *[]){x, m, v1}, NULL, GRACE_ESHAPE, "masked_fill", "0-d",
            "masked_fill with a 1-d value is an error");
  rel(v1);
  grace_tensor *x3 = T1(GRACE_FLOAT32, 1, 2, 3), *m23 = mk(GRACE_BOOL, 2, S(2, 3), V(1, 0, 1, 0, 1, 0));
  check_err(GRACE_OP_MASKED_FILL, 3, (grace_tensor *[]){x3, m23, s}, NULL, GRACE_ESHAPE, "[2, 3]", "[3]",
            "masked_fill does not broadcast x up to the mask");
  rel(x3); rel(m23); rel(s); rel(x); rel(m);
}

static void test_layouts(void) {
  /* broadcasting [3, 1] with [4] */
  grace_tensor *a = mk(GRACE_FLOAT32, 2, S(3, 1), V(1, 2, 3)), *b = T1(GRACE_FLOAT32, 10, 20, 30, 40);
  check(R2(GRACE_OP_ADD, a, b), GRACE_FLOAT32, 2, S(3, 4), V(11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43), 0,
        "add broadcasts [3, 1] with [4]");
  check(R2(GRACE_OP_LT, b, a), GRACE_BOOL, 2, S(3, 4), V(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0,
        "lt broadcasts [4] with [3, 1]");
  rel(a); rel(b);
  a = mk(GRACE_FLOAT32, 2, S(3, 2), V(1, 2, 3, 4, 5, 6));
  b = T1(GRACE_FLOAT32, 1, 2, 3, 4);
  check_err(GRACE_OP_ADD, 2, (grace_tensor *[]){a, b}, NULL, GRACE_ESHAPE, "[3, 2]", "[4]",
            "broadcast mismatch names both shapes");
  rel(a); rel(b);

  /* a transposed (non-contiguous) input */
  grace_tensor *x = mk(GRACE_FLOAT32, 2, S(2, 3), V(1, 2, 3, 4, 5, 6));
  grace_attrs ta = {0};
  ta.ndims = 2; ta.dims[0] = 0; ta.dims[1] = 1;
  grace_tensor *t = R1A(GRACE_OP_TRANSPOSE, x, &ta);
  ok(t && !grace_tensor_is_contiguous(t), "transpose gives a non-contiguous view");
  b = mk(GRACE_FLOAT32, 2, S(3, 2), V(0.5, 0.5, 0.5, 0.5, 0.5, 0.5));
  check(R2(GRACE_OP_ADD, t, b), GRACE_FLOAT32, 2, S(3, 2), V(1.5, 4.5, 2.5, 5.5, 3.5, 6.5), 0,
        "add with a transposed input");
  check(R1(GRACE_OP_NEG, t), GRACE_FLOAT32, 2, S(3, 2), V(-1, -4, -2, -5, -3, -6), 0, "neg of a transposed input");
  check(R2(GRACE_OP_MUL, t, t), GRACE_FLOAT32, 2, S(3, 2), V(1, 16, 4, 25, 9, 36), 0, "mul of a transposed input by itself");
  rel(b);
  grace_tensor *xi = mk(GRACE_INT32, 2, S(2, 3), V(1, 2, 3, 4, 5, 6));
  grace_tensor *ti = R1A(GRACE_OP_TRANSPOSE, xi, &ta);
  check(R2(GRACE_OP_ADD, ti, t), GRACE_FLOAT32, 2, S(3, 2), V(2, 8, 4, 10, 6, 12), 0,
        "int32 transposed + float32 transposed gives float32");
  rel(ti); rel(xi); rel(t); rel(x);

  /* an input with a storage offset (narrow) */
  x = T1(GRACE_FLOAT64, 1, 2, 3, 4, 5, 6);
  grace_attrs na = {0};
  na.ndims = 1; na.dims[0] = 0; na.i0 = 2; na.i1 = 3;
  grace_tensor *n = R1A(GRACE_OP_NARROW, x, &na);
  grace_tensor *two = num(2, 1);
  CHECK1(R2(GRACE_OP_MUL, n, two), GRACE_FLOAT64, 0, "mul of a narrowed (offset) input", 6, 8, 10);
  rel(two); rel(n); rel(x);

  /* an expanded input (0 strides) */
  x = mk(GRACE_FLOAT32, 2, S(1, 3), V(1, 2, 3));
  grace_attrs ea = {0};
  ea.nshape = 2; ea.shape[0] = 4; ea.shape[1] = 3;
  grace_tensor *e = R1A(GRACE_OP_EXPAND, x, &ea);
  b = mk(GRACE_FLOAT32, 2, S(4, 3), V(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11));
  check(R2(GRACE_OP_MUL, e, b), GRACE_FLOAT32, 2, S(4, 3), V(0, 2, 6, 3, 8, 15, 6, 14, 24, 9, 20, 33), 0,
        "mul with an expanded input");
  check(R1(GRACE_OP_EXP, e), GRACE_FLOAT32, 2, S(4, 3),
        V(exp(1), exp(2), exp(3), exp(1), exp(2), exp(3), exp(1), exp(2), exp(3), exp(1), exp(2), exp(3)), 3e-7,
        "exp of an expanded input");
  rel(b); rel(x);

  /* 0-d and zero-size */
  a = mk(GRACE_FLOAT32, 0, NULL, V(2.5));
  b = mk(GRACE_FLOAT32, 0, NULL, V(1.5));
  check(R2(GRACE_OP_ADD, a, b), GRACE_FLOAT32, 0, NULL, V(4), 0, "0-d + 0-d is 0-d");
  check(R1(GRACE_OP_NEG, a), GRACE_FLOAT32, 0, NULL, V(-2.5), 0, "neg of 0-d");
  rel(b);
  b = mk(GRACE_FLOAT32, 2, S(0, 3), V(0));
  grace_tensor *c = T1(GRACE_FLOAT32, 1, 2, 3);
  check(R2(GRACE_OP_ADD, b, c), GRACE_FLOAT32, 2, S(0, 3), V(0), 0, "[0, 3] + [3] is [0, 3]");
  check(R1(GRACE_OP_EXP, b), GRACE_FLOAT32, 2, S(0, 3), V(0), 0, "exp of [0, 3]");
  check(R2(GRACE_OP_MUL, b, a), GRACE_FLOAT32, 2, S(0, 3), V(0), 0, "[0, 3] * 0-d");
  check(R3(GRACE_OP_WHERE, b, a, c), GRACE_FLOAT32, 2, S(0, 3), V(0), 0, "where with a [0, 3] condition");
  rel(a); rel(b); rel(c); rel(e);
}

static void test_promotion(void) {
  grace_tensor *i32 = T1(GRACE_INT32, 1, 2), *f = num(2.5, 0), *n3 = num(3, 1);
  CHECK1(R2(GRACE_OP_ADD, i32, f), GRACE_FLOAT32, 0, "int32 + 2.5 gives float32", 3.5, 4.5);
  CHECK1(R2(GRACE_OP_MUL, i32, n3), GRACE_INT32, 0, "int32 * 3 stays int32", 3, 6);
  grace_tensor *h = T1(GRACE_FLOAT16, 1.5, 2);
  CHECK1(R2(GRACE_OP_MUL, h, n3), GRACE_FLOAT16, 0, "float16 * 3 stays float16", 4.5, 6);
  CHECK1(R2(GRACE_OP_MUL, h, f), GRACE_FLOAT16, 0, "float16 * 2.5 stays float16", 3.75, 5);
  grace_tensor *bf = T1(GRACE_BFLOAT16, 1, 2);
  CHECK1(R2(GRACE_OP_ADD, h, bf), GRACE_FLOAT32, 0, "float16 + bfloat16 gives float32", 2.5, 4);
  grace_tensor *i64 = T1(GRACE_INT64, 10, 20);
  CHECK1(R2(GRACE_OP_ADD, i32, i64), GRACE_INT64, 0, "int32 + int64 gives int64", 11, 22);
  grace_tensor *b = T1(GRACE_BOOL, 1, 0);
  CHECK1(R2(GRACE_OP_ADD, b, n3), GRACE_INT64, 0, "bool + 3 gives int64", 4, 3);
  CHECK1(R2(GRACE_OP_ADD, b, i32), GRACE_INT32, 0, "bool + int32 gives int32", 2, 2);
  grace_tensor *f32 = T1(GRACE_FLOAT32, 0.5, 1), *d0 = mk(GRACE_FLOAT64, 0, NULL, V(0.25));
  CHECK1(R2(GRACE_OP_ADD, f32, d0), GRACE_FLOAT32, 0, "float32 [2] + float64 0-d gives float32", 0.75, 1.25);
  CHECK1(R2(GRACE_OP_ADD, i32, d0), GRACE_FLOAT64, 0, "int32 [2] + float64 0-d gives float64", 1.25, 2.25);
  CHECK1(R2(GRACE_OP_DIV, b, b), GRACE_FLOAT32, 0, "bool / bool gives float32", 1, NAN);
  rel(i32); rel(f); rel(n3); rel(h); rel(bf); rel(i64); rel(b); rel(f32); rel(d0);
}

static void test_copy_fill(void) {
  grace_tensor *dst = mk(GRACE_FLOAT32, 2, S(2, 3), V(0, 0, 0, 0, 0, 0));
  grace_tensor *src = T1(GRACE_INT32, 1, 2, 3);
  uint64_t v0 = grace_tensor_version(dst);
  grace_status st = grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){dst, src}, NULL, 0, NULL);
  ok(st == GRACE_OK && grace_tensor_version(dst) == v0 + 1, "copy_ succeeds and bumps the version");
  grace_tensor_retain(dst);
  check(dst, GRACE_FLOAT32, 2, S(2, 3), V(1, 2, 3, 1, 2, 3), 0, "copy_ broadcasts int32 [3] into float32 [2, 3]");
  rel(src);
  src = T1(GRACE_FLOAT32, 1, 2, 3, 4);
  check_err(GRACE_OP_COPY_, 2, (grace_tensor *[]){dst, src}, NULL, GRACE_ESHAPE, "[4]", "[2, 3]",
            "copy_ of a non-broadcastable source names both shapes");
  ok(grace_tensor_version(dst) == v0 + 1, "a failed copy_ does not bump the version");
  rel(src);

  /* into a strided (transposed) destination */
  grace_tensor *y = mk(GRACE_FLOAT64, 2, S(3, 2), V(0, 0, 0, 0, 0, 0));
  grace_attrs ta = {0};
  ta.ndims = 2; ta.dims[0] = 0; ta.dims[1] = 1;
  grace_tensor *yt = R1A(GRACE_OP_TRANSPOSE, y, &ta);
  src = mk(GRACE_FLOAT64, 2, S(2, 3), V(1, 2, 3, 4, 5, 6));
  v0 = grace_tensor_version(y);
  st = grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){yt, src}, NULL, 0, NULL);
  ok(st == GRACE_OK && grace_tensor_version(y) == v0 + 1, "copy_ into a view bumps the base's version");
  grace_tensor_retain(y);
  check(y, GRACE_FLOAT64, 2, S(3, 2), V(1, 4, 2, 5, 3, 6), 0, "copy_ into a transposed view writes through strides");
  grace_attrs fa = {0};
  fa.a = 7.5;
  v0 = grace_tensor_version(y);
  st = grace_run(vm, GRACE_OP_FILL_, 1, &yt, &fa, 0, NULL);
  ok(st == GRACE_OK && grace_tensor_version(y) == v0 + 1, "fill_ bumps the version");
  grace_tensor_retain(y);
  check(y, GRACE_FLOAT64, 2, S(3, 2), V(7.5, 7.5, 7.5, 7.5, 7.5, 7.5), 0, "fill_ of a transposed view");
  rel(src); rel(yt); rel(y);

  /* float32 -> float16 conversion in copy_ */
  grace_tensor *h = T1(GRACE_FLOAT16, 0);
  src = T1(GRACE_FLOAT64, 1.0 / 3);
  grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){h, src}, NULL, 0, NULL);
  grace_tensor_retain(h);
  CHECK1(h, GRACE_FLOAT16, 0, "copy_ of float64 1/3 into float16 rounds", 0.333251953125);
  rel(src); rel(h);

  /* overlapping source and destination in one storage */
  grace_tensor *x = T1(GRACE_FLOAT32, 1, 2, 3, 4, 5, 6);
  grace_attrs na = {0};
  na.ndims = 1; na.i0 = 0; na.i1 = 4;
  grace_tensor *lo = R1A(GRACE_OP_NARROW, x, &na);
  na.i0 = 2;
  grace_tensor *hi = R1A(GRACE_OP_NARROW, x, &na);
  grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){hi, lo}, NULL, 0, NULL);
  grace_tensor_retain(x);
  CHECK1(x, GRACE_FLOAT32, 0, "copy_ between overlapping views reads the source first", 1, 2, 1, 2, 3, 4);
  rel(lo); rel(hi);

  /* int fill truncates */
  grace_tensor *xi = mk(GRACE_INT32, 2, S(2, 2), V(0, 0, 0, 0));
  fa.a = 2.9;
  grace_run(vm, GRACE_OP_FILL_, 1, &xi, &fa, 0, NULL);
  grace_tensor_retain(xi);
  check(xi, GRACE_INT32, 2, S(2, 2), V(2, 2, 2, 2), 0, "fill_ of int32 with 2.9 stores 2");
  rel(xi);

  /* writing into an expanded tensor is an error */
  grace_tensor *row = mk(GRACE_FLOAT32, 2, S(1, 3), V(1, 2, 3));
  grace_attrs ea = {0};
  ea.nshape = 2; ea.shape[0] = 2; ea.shape[1] = 3;
  grace_tensor *e = R1A(GRACE_OP_EXPAND, row, &ea);
  src = T1(GRACE_FLOAT32, 4, 5, 6);
  v0 = grace_tensor_version(row);
  check_err(GRACE_OP_COPY_, 2, (grace_tensor *[]){e, src}, NULL, GRACE_EARG, "copy_", "overlapping",
            "copy_ into an expanded tensor is an error");
  check_err(GRACE_OP_FILL_, 1, &e, &fa, GRACE_EARG, "fill_", "overlapping", "fill_ of an expanded tensor is an error");
  ok(grace_tensor_version(row) == v0, "failed writes leave the version alone");
  rel(src); rel(e); rel(row);

  /* contiguous, clone, cast */
  grace_tensor *c = R1(GRACE_OP_CONTIGUOUS, x);
  ok(c == x, "contiguous of a contiguous tensor is the tensor itself");
  rel(c);
  grace_tensor *m = mk(GRACE_FLOAT32, 2, S(2, 3), V(1, 2, 3, 4, 5, 6));
  grace_tensor *mt = R1A(GRACE_OP_TRANSPOSE, m, &ta);
  c = R1(GRACE_OP_CONTIGUOUS, mt);
  ok(c && c != mt && grace_tensor_is_contiguous(c) && grace_tensor_storage_id(c) != grace_tensor_storage_id(m),
     "contiguous of a transposed view is a new contiguous tensor");
  check(c, GRACE_FLOAT32, 2, S(3, 2), V(1, 4, 2, 5, 3, 6), 0, "contiguous copies in logical order");
  c = R1(GRACE_OP_CLONE, x);
  ok(c && c != x && grace_tensor_storage_id(c) != grace_tensor_storage_id(x), "clone is a new tensor");
  CHECK1(c, GRACE_FLOAT32, 0, "clone copies the values", 1, 2, 1, 2, 3, 4);
  c = R1(GRACE_OP_CLONE, mt);
  check(c, GRACE_FLOAT32, 2, S(3, 2), V(1, 4, 2, 5, 3, 6), 0, "clone of a transposed view");
  rel(mt); rel(m);

  grace_tensor *fv = T1(GRACE_FLOAT32, -1.7, 2.9, 100.5, NAN);
  grace_attrs ca = {0};
  ca.has_dtype = 1; ca.dtype = GRACE_INT32;
  CHECK1(R1A(GRACE_OP_CAST, fv, &ca), GRACE_INT32, 0, "cast float32 to int32 truncates (NaN to 0)", -1, 2, 100, 0);
  ca.dtype = GRACE_BOOL;
  CHECK1(R1A(GRACE_OP_CAST, fv, &ca), GRACE_BOOL, 0, "cast float32 to bool (NaN is true)", 1, 1, 1, 1);
  ca.dtype = GRACE_FLOAT64;
  CHECK1(R1A(GRACE_OP_CAST, fv, &ca), GRACE_FLOAT64, 0, "cast float32 to float64", (double)-1.7f, (double)2.9f, 100.5, NAN);
  ca.dtype = GRACE_FLOAT32;
  c = R1A(GRACE_OP_CAST, fv, &ca);
  ok(c && c != fv && grace_tensor_storage_id(c) != grace_tensor_storage_id(fv), "cast to the same dtype is a copy");
  CHECK1(c, GRACE_FLOAT32, 0, "cast to the same dtype keeps the values", -1.7f, 2.9f, 100.5, NAN);
  rel(fv);
  grace_tensor *iv = T1(GRACE_INT64, 300, -1, 0);
  ca.dtype = GRACE_UINT8;
  CHECK1(R1A(GRACE_OP_CAST, iv, &ca), GRACE_UINT8, 0, "cast int64 to uint8 wraps", 44, 255, 0);
  ca.dtype = GRACE_BFLOAT16;
  CHECK1(R1A(GRACE_OP_CAST, iv, &ca), GRACE_BFLOAT16, 0, "cast int64 to bfloat16 rounds (300 -> 300)", 300, -1, 0);
  rel(iv);
  rel(x); rel(dst);
}

/* Strided, broadcast and converting paths on tensors large enough to span many blocks and both threads. */
static void test_large_strided(void) {
  const int64_t R = 400, C = 300;
  double *xv = malloc(sizeof(double) * (size_t)(R * C)), *want = malloc(sizeof(double) * (size_t)(R * C));
  double *row = malloc(sizeof(double) * (size_t)R);
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < C; j++) xv[i * C + j] = (double)(i - 2 * j);
  for (int64_t i = 0; i < R; i++) row[i] = 0.5 * (double)i;
  grace_tensor *x = mk(GRACE_FLOAT32, 2, S(R, C), xv), *r = mk(GRACE_FLOAT32, 1, S(R), row);
  grace_attrs ta = {0};
  ta.ndims = 2; ta.dims[0] = 0; ta.dims[1] = 1;
  grace_tensor *t = R1A(GRACE_OP_TRANSPOSE, x, &ta);   /* [C, R], t[a][b] = b - 2a */
  for (int64_t a = 0; a < C; a++)
    for (int64_t b = 0; b < R; b++) want[a * R + b] = (double)(b - 2 * a) + 0.5 * (double)b;
  check(R2(GRACE_OP_ADD, t, r), GRACE_FLOAT32, 2, S(C, R), want, 0, "add of a transposed [300, 400] and a [400] row");

  grace_tensor *xi = mk(GRACE_INT32, 2, S(R, C), xv);
  grace_tensor *ti = R1A(GRACE_OP_TRANSPOSE, xi, &ta);
  grace_tensor *three = num(3, 1);
  for (int64_t a = 0; a < C; a++)
    for (int64_t b = 0; b < R; b++) want[a * R + b] = (double)(3 * (b - 2 * a));
  check(R2(GRACE_OP_MUL, ti, three), GRACE_INT32, 2, S(C, R), want, 0, "mul of a transposed int32 [300, 400] by 3");
  for (int64_t a = 0; a < C; a++)
    for (int64_t b = 0; b < R; b++) want[a * R + b] = (b - 2 * a) > 0.5 * (double)b;
  check(R2(GRACE_OP_GT, ti, r), GRACE_BOOL, 2, S(C, R), want, 0, "gt of a transposed int32 and a float32 row");

  /* copy_ with conversion into a strided destination, from an expanded source */
  grace_tensor *d = mk(GRACE_FLOAT64, 2, S(R, C), xv);
  grace_tensor *dt = R1A(GRACE_OP_TRANSPOSE, d, &ta);   /* [C, R] view of d */
  grace_status st = grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){dt, r}, NULL, 0, NULL);
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < C; j++) want[i * C + j] = 0.5 * (double)i;   /* d[i][j] = dt[j][i] = row[i] */
  ok(st == GRACE_OK, "copy_ of a float32 row into a transposed float64 view");
  grace_tensor_retain(d);
  check(d, GRACE_FLOAT64, 2, S(R, C), want, 0, "copy_ converts and writes through the view's strides");
  st = grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){dt, t}, NULL, 0, NULL);
  for (int64_t i = 0; i < R * C; i++) want[i] = xv[i];
  grace_tensor_retain(d);
  check(d, GRACE_FLOAT64, 2, S(R, C), want, 0, "copy_ of a transposed float32 into a transposed float64 view");
  rel(dt); rel(d);
  rel(three); rel(ti); rel(xi); rel(t); rel(x); rel(r);
  free(xv); free(want); free(row);
}

/* A reproducible uniform float in [lo, hi). */
static uint64_t lcg = 0x9e3779b97f4a7c15ULL;
static float uniform(float lo, float hi) {
  lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
  return lo + (hi - lo) * (float)((lcg >> 40) * 0x1p-24);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Max relative error of op over the float32 inputs xs against f in double; |ref| below floor counts
 * absolutely (where float32 results are subnormal or the function is ~0). */
static double max_rel_err(grace_tensor *x, const float *xs, int64_t n, grace_op op, int flag, double (*f)(double, int),
                          double floor, double *at) {
  grace_attrs a = {0};
  a.flag = flag;
  grace_tensor *y = R1A(op, x, &a);
  if (!y) return INFINITY;
  const float *ys = grace_tensor_data(y);
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double r = f(xs[i], flag), e = fabs(ys[i] - r) / fmax(fabs(r), floor);
    if (!(e <= worst)) { worst = e; *at = xs[i]; }
  }
  rel(y);
  return worst;
}
static double ref_exp(double x, int f) { (void)f; return exp(x); }
static double ref_tanh(double x, int f) { (void)f; return tanh(x); }
static double ref_erf(double x, int f) { (void)f; return erf(x); }
static double ref_sigmoid(double x, int f) { (void)f; return 1 / (1 + exp(-x)); }
static double ref_silu(double x, int f) { (void)f; return x / (1 + exp(-x)); }
static double ref_gelu(double x, int f) {
  return f ? 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) : 0.5 * x * erfc(-x / sqrt(2.0));
}

static void test_large(void) {
  const int64_t n = 1 << 20;
  float *xs = malloc(sizeof(float) * (size_t)n), *ys = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) { xs[i] = uniform(-87.0f, 88.0f); ys[i] = uniform(-10.0f, 10.0f); }
  grace_tensor *x, *y;
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, &n, GRACE_FLOAT32, xs, &x);
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, &n, GRACE_FLOAT32, ys, &y);

  grace_tensor *s = R2(GRACE_OP_ADD, x, y);
  double worst = INFINITY;
  if (s) {
    const float *ss = grace_tensor_data(s);
    worst = 0;
    for (int64_t i = 0; i < n; i++) {
      double r = (double)xs[i] + (double)ys[i], e = fabs(ss[i] - r) / fmax(fabs(r), 1e-30);
      if (!(e <= worst)) worst = e;
    }
  }
  ok(worst <= 0x1p-24, "1M float32 add within half an ulp of the double sum (max rel err %.3g)", worst);
  rel(s);

  double at = 0;
  worst = max_rel_err(x, xs, n, GRACE_OP_EXP, 0, ref_exp, 1e-300, &at);
  ok(worst <= 2.4e-7, "1M float32 exp on [-87, 88] within 2 ulp of libm (max rel err %.3g at %.9g)", worst, at);
  rel(x);

  /* the other fast float32 functions, on [-12, 12] */
  for (int64_t i = 0; i < n; i++) xs[i] = uniform(-12.0f, 12.0f);
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, &n, GRACE_FLOAT32, xs, &x);
  worst = max_rel_err(x, xs, n, GRACE_OP_TANH, 0, ref_tanh, 1e-30, &at);
  ok(worst <= 2.4e-7, "1M float32 tanh within 2 ulp (max rel err %.3g at %.9g)", worst, at);
  worst = max_rel_err(x, xs, n, GRACE_OP_ERF, 0, ref_erf, 1e-30, &at);
  ok(worst <= 2.4e-7, "1M float32 erf within 2 ulp (max rel err %.3g at %.9g)", worst, at);
  worst = max_rel_err(x, xs, n, GRACE_OP_SIGMOID, 0, ref_sigmoid, 1e-30, &at);
  ok(worst <= 3.6e-7, "1M float32 sigmoid within 3 ulp (max rel err %.3g at %.9g)", worst, at);
  worst = max_rel_err(x, xs, n, GRACE_OP_SILU, 0, ref_silu, 1e-30, &at);
  ok(worst <= 4.8e-7, "1M float32 silu within 4 ulp (max rel err %.3g at %.9g)", worst, at);
  /* the exact GELU's negative tail is x * erfc(|x|/sqrt2)/2: its float32 argument carries ~1e-7 relative
   * error that the steep erfc amplifies, hence the wider bound, and an absolute one past erfc's 4 */
  worst = max_rel_err(x, xs, n, GRACE_OP_GELU, 0, ref_gelu, 1e-3, &at);
  ok(worst <= 5e-6, "1M float32 gelu within 5e-6 relative, 5e-9 absolute below 1e-3 (max %.3g at %.9g)", worst, at);
  worst = max_rel_err(x, xs, n, GRACE_OP_GELU, 1, ref_gelu, 1e-3, &at);
  ok(worst <= 5e-6, "1M float32 gelu (tanh) within 5e-6 relative (max %.3g at %.9g)", worst, at);

  /* timings for information only (the benchmark compares them with NumPy) */
  grace_op tops[] = {GRACE_OP_ADD, GRACE_OP_MUL, GRACE_OP_EXP, GRACE_OP_TANH, GRACE_OP_GELU};
  for (size_t k = 0; k < sizeof tops / sizeof *tops; k++) {
    int nin = grace_op_ninputs(tops[k]);
    double best = INFINITY;
    for (int r = 0; r < 3; r++) {
      double t0 = now();
      for (int i = 0; i < 20; i++) {
        grace_tensor *o = NULL;
        grace_run(vm, tops[k], nin, (grace_tensor *[]){x, y}, NULL, 1, &o);
        rel(o);
      }
      double t = (now() - t0) / 20;
      if (t < best) best = t;
    }
    printf("# diag: 1M float32 %s: %.1f us\n", grace_op_name(tops[k]), best * 1e6);
  }
  rel(x); rel(y);
  free(xs); free(ys);
}

int main(void) {
  char err[256];
  grace_config cfg = {0};
  cfg.device = "cpu";
  vm = grace_vm_new(&cfg, err, sizeof err);
  if (!vm) { printf("1..0 # SKIP no VM: %s\n", err); return 0; }
  test_unary_float();
  test_unary_keep();
  test_binary();
  test_compare();
  test_ternary();
  test_layouts();
  test_promotion();
  test_copy_fill();
  test_large_strided();
  test_large();
  grace_vm_free(vm);
  return tap_done();
}
