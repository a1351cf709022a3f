/* test_grad.c: every op of the op table has its derivative checked against central finite differences in float64
 * on the CPU (the gradient of sum(op(x) * w) for a random w, through grace_grad), or is listed with the reason it has
 * none. An op that is in neither table fails the test, so a new differentiable op cannot come without a derivative. */
#include <math.h>
#include <stdlib.h>
#include "grace.h"
#include "tap.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"   /* the case table names only what it sets */

enum { F, POS, INT, MASK, NUL, K0 };   /* input kinds: float, positive float, integers, bool mask, absent, 0-d float */
#define MAXIN 5

typedef struct inp {
  int kind;
  int nd;
  int64_t sz[4];
  const int64_t *ints;   /* INT and MASK values */
  double lo, hi;         /* F ranges (default [-1, 1]) */
} inp;

typedef struct gcase {
  const char *what;
  grace_op op;
  int nin, nout;
  inp in[MAXIN];
  grace_attrs a;
  double h, tol;         /* 0: 1e-6, 1e-6 */
} gcase;

#define SH(...) .nd = sizeof((int64_t[]){__VA_ARGS__}) / 8, .sz = {__VA_ARGS__}
#define X(...) {.kind = F, SH(__VA_ARGS__)}
#define P(...) {.kind = POS, SH(__VA_ARGS__)}
#define I(v, ...) {.kind = INT, .ints = (const int64_t[])v, SH(__VA_ARGS__)}
#define M(v, ...) {.kind = MASK, .ints = (const int64_t[])v, SH(__VA_ARGS__)}
#define L(...) __VA_ARGS__
#define U1(OP) {#OP, GRACE_OP_##OP, 1, 1, {X(2, 3)}}
#define U1P(OP) {#OP, GRACE_OP_##OP, 1, 1, {P(2, 3)}}
#define B2(OP) {#OP, GRACE_OP_##OP, 2, 1, {X(2, 3), X(3)}}
#define DIMS(...) .ndims = sizeof((int64_t[]){__VA_ARGS__}) / 8, .dims = {__VA_ARGS__}
#define SHAPE(...) .nshape = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}

static const gcase cases[] = {
  U1(NEG), U1(ABS), U1(EXP), U1P(LOG), U1P(LOG1P), U1P(SQRT), U1P(RSQRT), U1(SIN), U1(COS), U1(TAN), U1(TANH),
  U1(SIGMOID), U1(RELU), U1(GELU), U1(SILU), U1(ERF), U1(FLOOR), U1(CEIL), U1(ROUND), U1(SIGN),
  {"gelu tanh", GRACE_OP_GELU, 1, 1, {X(2, 3)}, {.flag = 1}},
  {"clamp", GRACE_OP_CLAMP, 1, 1, {X(2, 3)}, {.a = -0.3, .has_a = 1, .b = 0.4, .has_b = 1}},
  {"clamp min", GRACE_OP_CLAMP, 1, 1, {X(2, 3)}, {.a = -0.3, .has_a = 1}},
  {"cast to float32", GRACE_OP_CAST, 1, 1, {X(2, 3)}, {.dtype = GRACE_FLOAT32, .has_dtype = 1}, 1e-2, 1e-3},
  B2(ADD), B2(SUB), B2(MUL), B2(MAXIMUM), B2(MINIMUM),
  {"div", GRACE_OP_DIV, 2, 1, {X(2, 3), P(3)}},
  {"remainder", GRACE_OP_REM, 2, 1, {{.kind = F, SH(2, 3), .lo = 2.2, .hi = 2.8}, {.kind = F, SH(3), .lo = 1.5, .hi = 2}}},
  {"pow", GRACE_OP_POW, 2, 1, {P(2, 3), X(3)}},
  {"where", GRACE_OP_WHERE, 3, 1, {M(L({1, 0, 1, 0, 0, 1}), 2, 3), X(2, 3), X(3)}},
  {"masked_fill", GRACE_OP_MASKED_FILL, 3, 1, {X(2, 3), M(L({1, 0, 1, 0, 0, 1}), 2, 3), {.kind = K0}}},
  {"sum dim", GRACE_OP_SUM, 1, 1, {X(2, 3)}, {DIMS(1)}},
  {"sum all", GRACE_OP_SUM, 1, 1, {X(2, 3)}},
  {"mean keepdim", GRACE_OP_MEAN, 1, 1, {X(2, 3)}, {DIMS(0), .keepdim = 1}},
  {"prod", GRACE_OP_PROD, 1, 1, {P(2, 3)}, {DIMS(1)}},
  {"max dim", GRACE_OP_MAX, 1, 2, {X(2, 3)}, {DIMS(1)}},
  {"max all", GRACE_OP_MAX, 1, 1, {X(2, 3)}},
  {"min dim", GRACE_OP_MIN, 1, 2, {X(2, 3)}, {DIMS(0)}},
  {"var", GRACE_OP_VAR, 1, 1, {X(2, 3)}, {DIMS(1), .flag = 1}},
  {"std all", GRACE_OP_STD, 1, 1, {X(2, 3)}},
  {"logsumexp", GRACE_OP_LOGSUMEXP, 1, 1, {X(2, 3)}, {DIMS(1)}},
  {"cumsum", GRACE_OP_CUMSUM, 1, 1, {X(2, 3)}, {DIMS(1)}},
  {"softmax", GRACE_OP_SOFTMAX, 1, 1, {X(2, 3)}, {DIMS(1)}},
  {"log_softmax", GRACE_OP_LOG_SOFTMAX, 1, 1, {X(2, 3)}, {DIMS(0)}},
  {"topk", GRACE_OP_TOPK, 1, 2, {X(2, 4)}, {DIMS(1), .i0 = 2}},
  {"sort", GRACE_OP_SORT, 1, 2, {X(2, 4)}, {DIMS(1), .flag = 1}},
  {"attention masked", GRACE_OP_ATTENTION, 5, 1, {X(2, 3, 4), X(2, 4, 5), X(2, 5, 3), {.kind = K0},
    M(L({1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 1, 0, 0, 0, 1}), 3, 5)}, {.flag = 2, .a = -1e30}},
  {"attention divided", GRACE_OP_ATTENTION, 5, 1, {X(3, 4), X(4, 5), X(5, 2), {.kind = K0, .lo = 1, .hi = 2},
    {.kind = NUL}}, {.flag = 1}},
  {"matmul", GRACE_OP_MATMUL, 2, 1, {X(2, 3), X(3, 4)}},
  {"matmul batched", GRACE_OP_MATMUL, 2, 1, {X(2, 3, 4), X(4, 2)}},
  {"matmul vector-matrix", GRACE_OP_MATMUL, 2, 1, {X(3), X(3, 4)}},
  {"matmul matrix-vector", GRACE_OP_MATMUL, 2, 1, {X(2, 3), X(3)}},
  {"reshape", GRACE_OP_RESHAPE, 1, 1, {X(2, 3)}, {SHAPE(3, 2)}},
  {"view", GRACE_OP_VIEW, 1, 1, {X(2, 3)}, {SHAPE(6)}},
  {"transpose", GRACE_OP_TRANSPOSE, 1, 1, {X(2, 3)}, {DIMS(0, 1)}},
  {"permute", GRACE_OP_PERMUTE, 1, 1, {X(2, 3, 4)}, {DIMS(2, 0, 1)}},
  {"expand", GRACE_OP_EXPAND, 1, 1, {X(3, 1)}, {SHAPE(2, 3, 4)}},
  {"narrow", GRACE_OP_NARROW, 1, 1, {X(2, 4)}, {DIMS(1), .i0 = 1, .i1 = 2}},
  {"select", GRACE_OP_SELECT, 1, 1, {X(3, 2)}, {DIMS(0), .i0 = 1}},
  {"squeeze", GRACE_OP_SQUEEZE, 1, 1, {X(2, 1, 3)}},
  {"unsqueeze", GRACE_OP_UNSQUEEZE, 1, 1, {X(2, 3)}, {DIMS(1)}},
  {"contiguous", GRACE_OP_CONTIGUOUS, 1, 1, {X(2, 3)}},
  {"clone", GRACE_OP_CLONE, 1, 1, {X(2, 3)}},
  {"to", GRACE_OP_TO_DEVICE, 1, 1, {X(2, 3)}, {.device = GRACE_CPU}},
  {"cat", GRACE_OP_CAT, 3, 1, {X(2, 1), X(2, 3), X(2, 2)}, {DIMS(1)}},
  {"stack", GRACE_OP_STACK, 2, 1, {X(2, 3), X(2, 3)}, {DIMS(1)}},
  {"index_select", GRACE_OP_INDEX_SELECT, 2, 1, {X(4, 3), I(L({2, 0, 2}), 3)}, {DIMS(0)}},
  {"index_select dim 1", GRACE_OP_INDEX_SELECT, 2, 1, {X(2, 3), I(L({1, 1}), 2)}, {DIMS(1)}},
  {"gather", GRACE_OP_GATHER, 2, 1, {X(3, 4), I(L({0, 3, 1, 1, 2, 0}), 3, 2)}, {DIMS(1)}},
  {"scatter", GRACE_OP_SCATTER, 3, 1, {X(3, 4), I(L({0, 3, 1, 2, 2, 0}), 3, 2), X(3, 2)}, {DIMS(1)}},
  {"masked_select", GRACE_OP_MASKED_SELECT, 2, 1, {X(2, 3), M(L({1, 0, 1}), 3)}},
  {"triu", GRACE_OP_TRIU, 1, 1, {X(3, 3)}},
  {"tril", GRACE_OP_TRIL, 1, 1, {X(3, 4)}, {.i0 = -1}},
  {"repeat", GRACE_OP_REPEAT, 1, 1, {X(2, 3)}, {SHAPE(2, 1, 2)}},
  {"embedding", GRACE_OP_EMBEDDING, 2, 1, {I(L({1, 4, 1, 0, 2, 1}), 2, 3), X(5, 4)}},
  {"slice_scatter", GRACE_OP_SLICE_SCATTER, 2, 1, {X(3, 4), X(3, 2)}, {DIMS(1), .i0 = 1, .i1 = 2}},
  {"slice_scatter select", GRACE_OP_SLICE_SCATTER, 2, 1, {X(3, 4), X(4)}, {DIMS(0), .i0 = 2, .flag = 1}},
  {"layer_norm", GRACE_OP_LAYER_NORM, 3, 1, {X(2, 5), X(5), X(5)}, {.a = 1e-5}},
  {"layer_norm plain", GRACE_OP_LAYER_NORM, 3, 1, {X(2, 5), {.kind = NUL}, {.kind = NUL}}, {.a = 1e-5}},
  {"rms_norm", GRACE_OP_RMS_NORM, 2, 1, {X(2, 5), X(5)}, {.a = 1e-6}},
};

/* Ops with no derivative, and why; what autograd does with them is checked below. */
static const struct { grace_op op; const char *why; } none[] = {
  {GRACE_OP_LOGICAL_NOT, "bool result"}, {GRACE_OP_LOGICAL_AND, "bool result"}, {GRACE_OP_LOGICAL_OR, "bool result"},
  {GRACE_OP_EQ, "comparison: bool result"}, {GRACE_OP_NE, "comparison: bool result"},
  {GRACE_OP_LT, "comparison: bool result"}, {GRACE_OP_LE, "comparison: bool result"},
  {GRACE_OP_GT, "comparison: bool result"}, {GRACE_OP_GE, "comparison: bool result"},
  {GRACE_OP_ARGMAX, "integer result"}, {GRACE_OP_ARGMIN, "integer result"},
  {GRACE_OP_ALL, "bool result"}, {GRACE_OP_ANY, "bool result"}, {GRACE_OP_NONZERO, "integer result"},
  {GRACE_OP_FULL, "creation: no tensor input"}, {GRACE_OP_ARANGE, "creation: no tensor input"},
  {GRACE_OP_LINSPACE, "creation: no tensor input"}, {GRACE_OP_EYE, "creation: no tensor input"},
  {GRACE_OP_RAND, "random: no tensor input"}, {GRACE_OP_RANDN, "random: no tensor input"},
  {GRACE_OP_RANDINT, "random: no tensor input"},
  {GRACE_OP_COPY_, "in place: refused on tensors that require grad"},
  {GRACE_OP_FILL_, "in place: refused on tensors that require grad"},
  {GRACE_OP_INDEX_PUT_, "in place: refused on tensors that require grad"},
  {GRACE_OP_INDEX_COPY_, "in place: refused on tensors that require grad"},
};

static grace_vm *vm;
static uint64_t lcg = 99;
static double urand(void) {
  lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(lcg >> 11) / 9007199254740992.0;
}
static int64_t numel(const inp *p) {
  int64_t n = 1;
  for (int d = 0; d < p->nd; d++) n *= p->sz[d];
  return n;
}

/* The inputs from host values (vals[i] for float ones); diff inputs require grad when rg. */
static void make_inputs(const gcase *c, double *const *vals, int rg, grace_tensor **t) {
  for (int i = 0; i < c->nin; i++) {
    const inp *p = &c->in[i];
    t[i] = NULL;
    if (p->kind == NUL) continue;
    grace_status st;
    if (p->kind == INT || p->kind == MASK)
      st = grace_tensor_from_data(vm, p->kind == INT ? GRACE_INT64 : GRACE_BOOL, p->nd, p->sz, GRACE_INT64, p->ints,
                                  &t[i]);
    else {
      st = grace_tensor_from_data(vm, GRACE_FLOAT64, p->kind == K0 ? 0 : p->nd, p->sz, GRACE_FLOAT64, vals[i], &t[i]);
      if (st == GRACE_OK && rg) st = grace_tensor_set_requires_grad(t[i], 1);
    }
    if (st != GRACE_OK) { printf("# %s: %s\n", c->what, grace_last_error(vm)); exit(1); }
  }
}

static void release_all(int n, grace_tensor **t) { for (int i = 0; i < n; i++) grace_tensor_release(t[i]); }

/* sum(op(inputs) * w) */
static double loss(const gcase *c, double *const *vals, const double *w, int64_t nw) {
  grace_tensor *in[MAXIN], *out[2] = {NULL, NULL};
  make_inputs(c, vals, 0, in);
  if (grace_run(vm, c->op, c->nin, in, &c->a, c->nout, out) != GRACE_OK) {
    printf("# %s: %s\n", c->what, grace_last_error(vm));
    exit(1);
  }
  double *y = malloc(sizeof *y * (size_t)nw), s = 0;
  grace_tensor_read(vm, out[0], GRACE_FLOAT64, y);
  for (int64_t k = 0; k < nw; k++) s += y[k] * w[k];
  free(y);
  release_all(c->nout, out);
  release_all(c->nin, in);
  return s;
}

static int is_diff(const inp *p) { return p->kind == F || p->kind == POS || p->kind == K0; }

static void check(const gcase *c) {
  double *vals[MAXIN] = {0};
  grace_tensor *in[MAXIN], *out[2] = {NULL, NULL}, *wt = NULL, *diff[MAXIN], *grads[MAXIN] = {0};
  int nd = 0, which[MAXIN];
  for (int i = 0; i < c->nin; i++) {
    const inp *p = &c->in[i];
    if (!is_diff(p)) continue;
    int64_t n = p->kind == K0 ? 1 : numel(p);
    double lo = p->lo || p->hi ? p->lo : p->kind == POS ? 0.5 : -1, hi = p->lo || p->hi ? p->hi : p->kind == POS ? 2 : 1;
    vals[i] = malloc(sizeof(double) * (size_t)n);
    for (int64_t k = 0; k < n; k++) vals[i][k] = lo + (hi - lo) * urand();
  }
  make_inputs(c, vals, 1, in);
  for (int i = 0; i < c->nin; i++) if (is_diff(&c->in[i])) { which[nd] = i; diff[nd++] = in[i]; }
  if (grace_run(vm, c->op, c->nin, in, &c->a, c->nout, out) != GRACE_OK) {
    ok(0, "%s: %s", c->what, grace_last_error(vm));
    goto done;
  }
  int64_t nw = grace_tensor_numel(out[0]);
  double *w = malloc(sizeof *w * (size_t)(nw ? nw : 1));
  for (int64_t k = 0; k < nw; k++) w[k] = urand() * 2 - 1;
  grace_tensor_from_data(vm, GRACE_FLOAT64, grace_tensor_ndim(out[0]), grace_tensor_sizes(out[0]), GRACE_FLOAT64, w, &wt);
  if (!ok(grace_tensor_requires_grad(out[0]), "%s: the result requires grad", c->what) ||
      !ok(grace_grad(vm, 1, out, &wt, nd, diff, grads) == GRACE_OK, "%s: grad runs (%s)", c->what, grace_last_error(vm))) {
    free(w);
    goto done;
  }
  double h = c->h ? c->h : 1e-6, tol = c->tol ? c->tol : 1e-6, worst = 0;
  int bad_dtype = 0;
  for (int k = 0; k < nd; k++) {
    const inp *p = &c->in[which[k]];
    int64_t n = p->kind == K0 ? 1 : numel(p);
    double *an = calloc((size_t)n, sizeof *an);
    if (grads[k]) {
      bad_dtype |= grace_tensor_dtype(grads[k]) != GRACE_FLOAT64;
      grace_tensor_read(vm, grads[k], GRACE_FLOAT64, an);
    }
    for (int64_t e = 0; e < n; e++) {
      double x0 = vals[which[k]][e];
      vals[which[k]][e] = x0 + h;
      double fp = loss(c, vals, w, nw);
      vals[which[k]][e] = x0 - h;
      double fm = loss(c, vals, w, nw);
      vals[which[k]][e] = x0;
      double num = (fp - fm) / (2 * h), err = fabs(num - an[e]) / (1 + fabs(num));
      if (err > worst) worst = err;
      if (err > tol) printf("# %s input %d element %lld: analytic %.9g, numeric %.9g\n", c->what, which[k] + 1,
                            (long long)e, an[e], num);
    }
    free(an);
  }
  ok(worst <= tol && !bad_dtype, "%s: gradient matches finite differences (worst relative error %.2g)", c->what, worst);
  free(w);
done:
  release_all(nd, grads);
  grace_tensor_release(wt);
  release_all(c->nout, out);
  release_all(c->nin, in);
  for (int i = 0; i < c->nin; i++) free(vals[i]);
}

/* What the listed ops do with an input that requires grad: results that carry none, or an error for in place. */
static void check_none(void) {
  grace_tensor *x = NULL, *y = NULL, *r = NULL;
  grace_tensor_from_data(vm, GRACE_FLOAT64, 1, (int64_t[]){3}, GRACE_FLOAT64, (double[]){1, 2, 3}, &x);
  grace_tensor_set_requires_grad(x, 1);
  grace_tensor *two[2] = {x, x};
  ok(grace_run(vm, GRACE_OP_LT, 2, two, NULL, 1, &r) == GRACE_OK && !grace_tensor_requires_grad(r),
     "a comparison's bool result does not require grad");
  grace_tensor_release(r);
  ok(grace_run(vm, GRACE_OP_ARGMAX, 1, &x, NULL, 1, &r) == GRACE_OK && !grace_tensor_requires_grad(r),
     "argmax's integer result does not require grad");
  grace_tensor_release(r);
  grace_tensor_from_data(vm, GRACE_FLOAT64, 1, (int64_t[]){3}, GRACE_FLOAT64, (double[]){0, 0, 0}, &y);
  grace_tensor *cp[2] = {y, x};
  ok(grace_run(vm, GRACE_OP_COPY_, 2, cp, NULL, 0, NULL) == GRACE_EUNSUPPORTED &&
     strstr(grace_last_error(vm), "copy_") && strstr(grace_last_error(vm), "requires grad"),
     "copy_ from a tensor that requires grad is refused: %s", grace_last_error(vm));
  int was = grace_set_grad_enabled(vm, 0);
  ok(was == 1 && grace_run(vm, GRACE_OP_COPY_, 2, cp, NULL, 0, NULL) == GRACE_OK, "but allowed with grad mode off");
  grace_set_grad_enabled(vm, 1);
  grace_tensor_release(y);
  grace_tensor_release(x);
}

static grace_tensor *op1(grace_op op, grace_tensor *a, grace_tensor *b) {
  grace_tensor *in[2] = {a, b}, *r = NULL;
  if (grace_run(vm, op, b ? 2 : 1, in, NULL, 1, &r) != GRACE_OK) printf("# %s\n", grace_last_error(vm));
  return r;
}
static double at(grace_tensor *t, int64_t i) {
  double v = NAN;
  grace_tensor_get(vm, t, &i, &v);
  return v;
}

/* The engine: accumulation into grad, grace_grad leaving it alone, grad mode, detach, the version check. */
static void check_engine(void) {
  grace_tensor *x = NULL, *g = NULL;
  grace_tensor_from_data(vm, GRACE_FLOAT64, 1, (int64_t[]){3}, GRACE_FLOAT64, (double[]){1, 2, 3}, &x);
  grace_tensor_set_requires_grad(x, 1);
  grace_tensor *y = op1(GRACE_OP_MUL, x, x), *s = op1(GRACE_OP_SUM, y, NULL);
  ok(grace_tensor_is_leaf(x) && !grace_tensor_is_leaf(y) && !strcmp(grace_tensor_grad_fn(s), "sum"),
     "leaves and the op that made a result");
  ok(grace_backward(vm, 1, &s, NULL) == GRACE_OK && grace_tensor_grad(x) && at(grace_tensor_grad(x), 2) == 6,
     "backward: d sum(x*x) / dx = 2x");
  grace_backward(vm, 1, &s, NULL);
  ok(at(grace_tensor_grad(x), 1) == 8, "a second backward adds to grad");
  ok(grace_grad(vm, 1, &s, NULL, 1, &x, &g) == GRACE_OK && at(g, 0) == 2 && at(grace_tensor_grad(x), 0) == 4,
     "grace_grad gives 2x and leaves grad alone");
  grace_tensor_release(g);
  ok(grace_backward(vm, 1, &y, NULL) == GRACE_EARG && strstr(grace_last_error(vm), "[3]"),
     "a tensor of 3 elements needs its gradient given: %s", grace_last_error(vm));
  grace_tensor *d = NULL;
  ok(grace_detach(vm, y, &d) == GRACE_OK && !grace_tensor_requires_grad(d) &&
     grace_tensor_storage_id(d) == grace_tensor_storage_id(y), "detach shares the storage, without grad");
  grace_tensor_release(d);
  grace_set_grad_enabled(vm, 0);
  grace_tensor *n = op1(GRACE_OP_MUL, x, x);
  ok(!grace_tensor_requires_grad(n) && !grace_grad_enabled(vm), "no grad mode records nothing");
  grace_tensor_release(n);
  grace_tensor *e = op1(GRACE_OP_EXP, x, NULL);
  grace_set_grad_enabled(vm, 1);
  grace_tensor *e2 = op1(GRACE_OP_EXP, y, NULL), *s2 = op1(GRACE_OP_SUM, e2, NULL);
  grace_set_grad_enabled(vm, 0);
  grace_run(vm, GRACE_OP_FILL_, 1, &e2, &(grace_attrs){.a = 1}, 0, NULL);
  grace_set_grad_enabled(vm, 1);
  ok(grace_backward(vm, 1, &s2, NULL) == GRACE_EARG && strstr(grace_last_error(vm), "backward of exp") &&
     strstr(grace_last_error(vm), "modified in place"), "a saved result written in place: %s", grace_last_error(vm));
  ok(grace_tensor_set_requires_grad(e, 1) == GRACE_OK && grace_tensor_set_requires_grad(y, 0) == GRACE_EARG,
     "a leaf's flag can be set; a result's cannot be cleared");
  grace_tensor_release(e); grace_tensor_release(e2); grace_tensor_release(s2);
  grace_tensor_release(s); grace_tensor_release(y); grace_tensor_release(x);
}

int main(void) {
  vm = grace_vm_new(&(grace_config){.device = "cpu", .threads = 1}, NULL, 0);
  if (!vm) return 1;
  int listed[GRACE_NOPS] = {0};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    check(&cases[k]);
    listed[cases[k].op] = 1;
  }
  for (size_t k = 0; k < sizeof none / sizeof *none; k++) {
    ok(!listed[none[k].op], "%s: no derivative (%s)", grace_op_name(none[k].op), none[k].why);
    listed[none[k].op] = 1;
  }
  for (int op = 0; op < GRACE_NOPS; op++)
    if (!listed[op]) ok(0, "%s has neither a gradient check here nor a listed reason for having no derivative",
                        grace_op_name((grace_op)op));
  check_none();
  check_engine();
  is_int(grace_tensor_bytes(vm), 0, "every tensor the checks made is freed (no node keeps one alive)");
  grace_vm_free(vm);
  return tap_done();
}
