/* ir_decompose.c: the `decompose` pass. Composite ops (softmax, log_softmax, logsumexp, layer_norm, rms_norm,
 * gelu, silu, var, std) are rewritten into pointwise ops and plain reductions (max, sum, mean), so that a later
 * fusion pass sees through them and groups their parts with their neighbours. One table, `decomps`, drives
 * the pass: adding a decomposition is one entry, an op and the function that emits its expansion.
 *
 * Eager execution computes a float16/bfloat16 composite op in float32 and rounds once at the end; an expansion
 * into several float16 ops would round after every step and give other numbers. So a float16/bfloat16 op is
 * expanded in float32 between two casts (its input to float32, its result back): in a fused kernel the casts are
 * conversions in registers, and the result is eager's up to float32 rounding.
 *
 * The expansions compute what eager computes, but not bit for bit: the fused kernels accumulate in double and
 * round once, the expansion rounds each step to the value's dtype. A device norm read only by matmuls of few rows
 * stays whole: they compute it as their prologue (ir/ir_fuse.h). Where eager defines a special result (the
 * logsumexp of a row of -inf is -inf, not NaN), the expansion is written to give it too. */
#include <math.h>
#include <string.h>
#include "ir/ir_fuse.h"
#include "ir/ir_pass.h"

/* The state of one expansion. The emitters do nothing once an emit failed and return -1, so an expansion is
 * written as straight-line code and its status checked once at the end. */
typedef struct dctx {
  ir_rewriter *rw;
  int k;                 /* the src instruction being expanded */
  const ir_inst *inst;
  const ir_type *xt;     /* type of input 0 as the expansion sees it (float32 for a float16/bfloat16 op) */
  int32_t in[3];         /* dst values of the inputs (-1: an absent optional input) */
  int x_cast;            /* in[0] is still float16/bfloat16: xin() casts it to float32 first */
  grace_status st;
} dctx;

static int32_t emit(dctx *c, grace_op op, int nin, const int32_t *in, const grace_attrs *a) {
  int32_t v = -1;
  if (c->st == GRACE_OK) c->st = ir_rw_op(c->rw, c->k, op, nin, in, a, 1, &v);
  return c->st == GRACE_OK ? v : -1;
}

static int32_t un(dctx *c, grace_op op, int32_t x) { return emit(c, op, 1, &x, NULL); }

static int32_t bin(dctx *c, grace_op op, int32_t x, int32_t y) {
  int32_t in[2] = {x, y};
  return emit(c, op, 2, in, NULL);
}

static int32_t cast(dctx *c, int32_t x, grace_dtype to) {
  grace_attrs a = {.has_dtype = 1, .dtype = to};
  return emit(c, GRACE_OP_CAST, 1, &x, &a);
}

/* The op's input x in the expansion's dtype. Called once an expansion knows it applies, so one that gives up
 * has emitted nothing. */
static int32_t xin(dctx *c) {
  if (c->x_cast) { c->in[0] = cast(c, c->in[0], GRACE_FLOAT32); c->x_cast = 0; }
  return c->in[0];
}

/* A reduction over the dims of `dims` (none: all dims). */
static int32_t reduce(dctx *c, grace_op op, int32_t x, const grace_attrs *dims, int keepdim) {
  grace_attrs a = {.ndims = dims->ndims, .keepdim = keepdim};
  memcpy(a.dims, dims->dims, sizeof a.dims);
  return emit(c, op, 1, &x, &a);
}

/* A literal (a wrapped number: an f32 tensor combined with it stays f32), at the op's place. */
static int32_t literal(dctx *c, double v, int is_int, int64_t iv) {
  int32_t out = -1;
  if (c->st == GRACE_OK) c->st = ir_rw_literal(c->rw, c->k, v, is_int, iv, &out);
  return c->st == GRACE_OK ? out : -1;
}
static int32_t lit(dctx *c, double v) { return literal(c, v, 0, 0); }

/* The dims of a row op (softmax: attrs.dims[0], default the last) as a one-dim reduction. */
static grace_attrs row_dim(const dctx *c) {
  return (grace_attrs){.ndims = 1, .dims = {c->inst->attrs.ndims ? c->inst->attrs.dims[0] : -1}};
}

/* Whether the dims reduced by `dims` (none: all) are all of static, non-zero size; *n gets their product. Eager
 * max refuses an empty region where eager softmax/logsumexp give a result, and var/std need the element count
 * as a number. A symbolic size may be 0 at run time, so it keeps the op too. */
static int reduced_count(const ir_type *t, const grace_attrs *dims, int64_t *n) {
  int red[GRACE_MAX_DIMS] = {0};
  for (int i = 0; i < dims->ndims; i++) {
    int64_t d = dims->dims[i] < 0 ? dims->dims[i] + t->ndim : dims->dims[i];
    if (d < 0 || d >= t->ndim) return 0;
    red[d] = 1;
  }
  *n = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (!red[d] && dims->ndims) continue;
    if (t->sym[d] || t->sizes[d] == 0) return 0;
    *n *= t->sizes[d];
  }
  return 1;
}

/* ---- the expansions: each gives the dst value standing for the op's result, or -1 (having emitted nothing)
 * where it does not apply, and the instruction is then copied as it is. ---- */

/* Whether a softmax's result has another dtype than its input (a dtype attribute): the expansions compute in
 * the input's, so such an op stays whole. */
static int other_dtype(const dctx *c) {
  return c->inst->attrs.has_dtype && c->inst->attrs.dtype != c->xt->dtype;
}

/* softmax(x, d) = e / sum(e, d), e = exp(x - max(x, d)) */
static int32_t x_softmax(dctx *c) {
  grace_attrs d = row_dim(c);
  int64_t n;
  if (c->xt->ndim == 0 || other_dtype(c) || !reduced_count(c->xt, &d, &n)) return -1;
  int32_t x = xin(c);
  int32_t m = reduce(c, GRACE_OP_MAX, x, &d, 1);
  int32_t e = un(c, GRACE_OP_EXP, bin(c, GRACE_OP_SUB, x, m));
  return bin(c, GRACE_OP_DIV, e, reduce(c, GRACE_OP_SUM, e, &d, 1));
}

/* log_softmax(x, d) = (x - m) - log(sum(exp(x - m), d)), m = max(x, d) */
static int32_t x_log_softmax(dctx *c) {
  grace_attrs d = row_dim(c);
  int64_t n;
  if (c->xt->ndim == 0 || other_dtype(c) || !reduced_count(c->xt, &d, &n)) return -1;
  int32_t x = xin(c);
  int32_t s = bin(c, GRACE_OP_SUB, x, reduce(c, GRACE_OP_MAX, x, &d, 1));
  return bin(c, GRACE_OP_SUB, s, un(c, GRACE_OP_LOG, reduce(c, GRACE_OP_SUM, un(c, GRACE_OP_EXP, s), &d, 1)));
}

/* logsumexp(x, dims) = m + log(sum(exp(x - m), dims)). The shift m is the max where it is finite and 0 where it
 * is infinite: a row of -inf then gives log(0) = -inf and a row holding +inf gives +inf, as eager does, where
 * shifting by the max itself would give inf - inf = NaN. (A NaN max stays and makes the result NaN, as eager.)
 * The shift is computed with keepdim so it broadcasts against x, then squeezed when the op drops the dims. */
static int32_t x_logsumexp(dctx *c) {
  const grace_attrs *a = &c->inst->attrs;
  int64_t n;
  if (c->xt->ndim == 0 || !reduced_count(c->xt, a, &n)) return -1;
  int32_t x = xin(c);
  int32_t m = reduce(c, GRACE_OP_MAX, x, a, 1);
  int32_t mag = un(c, GRACE_OP_ABS, m);   /* (C leaves the order of a call's arguments open: one emit each) */
  int32_t inf = bin(c, GRACE_OP_EQ, mag, lit(c, INFINITY));
  int32_t sel[3] = {inf, lit(c, 0), m};
  int32_t shift = emit(c, GRACE_OP_WHERE, 3, sel, NULL);
  int32_t z = reduce(c, GRACE_OP_SUM, un(c, GRACE_OP_EXP, bin(c, GRACE_OP_SUB, x, shift)), a, a->keepdim);
  if (!a->keepdim) {
    grace_attrs sq = {.ndims = a->ndims};
    memcpy(sq.dims, a->dims, sizeof sq.dims);
    if (!a->ndims) for (int d = 0; d < c->xt->ndim; d++) sq.dims[sq.ndims++] = d;
    shift = emit(c, GRACE_OP_SQUEEZE, 1, &shift, &sq);
  }
  return bin(c, GRACE_OP_ADD, shift, un(c, GRACE_OP_LOG, z));
}

/* A norm's weight or bias as an operand of x's dtype. Eager converts a float64 weight of a float32 x to
 * float32 (the result has x's dtype), where a plain mul would promote to float64: such a parameter is cast. */
static int32_t param(dctx *c, int i) {
  grace_dtype xd = c->xt->dtype, pd = c->rw->src->vals[c->rw->src->args[c->inst->first_arg + i]].type.dtype;
  if (grace_promote_types(xd, pd) == xd) return c->in[i];
  return cast(c, c->in[i], xd);
}

/* Whether the optional parameters are ones eager accepts (float, on x's device): a parameter eager would reject
 * keeps the op, so the run still reports it. */
static int params_ok(const dctx *c) {
  const grace_ir *s = c->rw->src;
  for (int i = 1; i < c->inst->nin; i++) {
    int32_t v = s->args[c->inst->first_arg + i];
    if (v >= 0 && (!grace_dtype_is_float(s->vals[v].type.dtype) || s->vals[v].type.device != c->xt->device)) return 0;
  }
  return 1;
}

/* layer_norm(x, w, b, eps) over the last dim = (x - mean) * rsqrt(mean((x - mean)^2) + eps) [* w] [+ b] */
static int32_t x_layer_norm(dctx *c) {
  if (!params_ok(c)) return -1;
  grace_attrs last = {.ndims = 1, .dims = {-1}};
  int32_t x = xin(c);
  int32_t ctr = bin(c, GRACE_OP_SUB, x, reduce(c, GRACE_OP_MEAN, x, &last, 1));
  int32_t var = reduce(c, GRACE_OP_MEAN, bin(c, GRACE_OP_MUL, ctr, ctr), &last, 1);
  int32_t y = bin(c, GRACE_OP_MUL, ctr, un(c, GRACE_OP_RSQRT, bin(c, GRACE_OP_ADD, var, lit(c, c->inst->attrs.a))));
  if (c->in[1] >= 0) y = bin(c, GRACE_OP_MUL, y, param(c, 1));
  if (c->in[2] >= 0) y = bin(c, GRACE_OP_ADD, y, param(c, 2));
  return y;
}

/* rms_norm(x, w, eps) = x * rsqrt(mean(x * x, -1) + eps) [* w] */
static int32_t x_rms_norm(dctx *c) {
  if (!params_ok(c)) return -1;
  grace_attrs last = {.ndims = 1, .dims = {-1}};
  int32_t x = xin(c);
  int32_t ms = reduce(c, GRACE_OP_MEAN, bin(c, GRACE_OP_MUL, x, x), &last, 1);
  int32_t y = bin(c, GRACE_OP_MUL, x, un(c, GRACE_OP_RSQRT, bin(c, GRACE_OP_ADD, ms, lit(c, c->inst->attrs.a))));
  if (c->in[1] >= 0) y = bin(c, GRACE_OP_MUL, y, param(c, 1));
  return y;
}

/* gelu(x) = 0.5 x (1 + erf(x / sqrt 2)); with attrs.flag the tanh approximation
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). x^3 is x*x*x: pow would be slower and no closer. */
static int32_t x_gelu(dctx *c) {
  int32_t x = xin(c), t;
  if (c->inst->attrs.flag) {
    int32_t x3 = bin(c, GRACE_OP_MUL, bin(c, GRACE_OP_MUL, x, x), x);
    int32_t u = bin(c, GRACE_OP_ADD, x, bin(c, GRACE_OP_MUL, x3, lit(c, 0.044715)));
    t = un(c, GRACE_OP_TANH, bin(c, GRACE_OP_MUL, u, lit(c, 0.7978845608028654)));
  } else
    t = un(c, GRACE_OP_ERF, bin(c, GRACE_OP_MUL, x, lit(c, 0.7071067811865476)));
  int32_t h = bin(c, GRACE_OP_MUL, x, bin(c, GRACE_OP_ADD, t, lit(c, 1)));
  return bin(c, GRACE_OP_MUL, h, lit(c, 0.5));
}

/* silu(x) = x * sigmoid(x) */
static int32_t x_silu(dctx *c) {
  int32_t x = xin(c);
  return bin(c, GRACE_OP_MUL, x, un(c, GRACE_OP_SIGMOID, x));
}

/* var(x, dims) = sum((x - mean(x, dims))^2, dims) / (N - unbiased), N the number of elements reduced, known
 * from the static shape (a symbolic or empty region keeps the op); std is its sqrt. */
static int32_t var_or_std(dctx *c, int is_std) {
  const grace_attrs *a = &c->inst->attrs;
  int64_t n;
  if (c->xt->ndim == 0 || !reduced_count(c->xt, a, &n)) return -1;
  int32_t x = xin(c);
  int32_t ctr = bin(c, GRACE_OP_SUB, x, reduce(c, GRACE_OP_MEAN, x, a, 1));
  int32_t ss = reduce(c, GRACE_OP_SUM, bin(c, GRACE_OP_MUL, ctr, ctr), a, a->keepdim);
  int64_t div = n - (a->flag != 0);
  int32_t v = bin(c, GRACE_OP_DIV, ss, literal(c, (double)div, 1, div));
  return is_std ? un(c, GRACE_OP_SQRT, v) : v;
}
static int32_t x_var(dctx *c) { return var_or_std(c, 0); }
static int32_t x_std(dctx *c) { return var_or_std(c, 1); }

/* The table: one entry per decomposed op. */
static const struct decomp {
  grace_op op;
  int32_t (*expand)(dctx *c);
} decomps[] = {
  {GRACE_OP_SOFTMAX, x_softmax},
  {GRACE_OP_LOG_SOFTMAX, x_log_softmax},
  {GRACE_OP_LOGSUMEXP, x_logsumexp},
  {GRACE_OP_LAYER_NORM, x_layer_norm},
  {GRACE_OP_RMS_NORM, x_rms_norm},
  {GRACE_OP_GELU, x_gelu},
  {GRACE_OP_SILU, x_silu},
  {GRACE_OP_VAR, x_var},
  {GRACE_OP_STD, x_std},
};

static const struct decomp *find(int op) {
  for (size_t i = 0; i < sizeof decomps / sizeof *decomps; i++)
    if ((int)decomps[i].op == op) return &decomps[i];
  return NULL;
}

/* Expands src instruction k when the table has its op and its value is a float; *v gets the dst value of its
 * result, or -1 when it is to be copied. */
static grace_status expand(ir_rewriter *rw, int k, int32_t *v) {
  const grace_ir *s = rw->src;
  const ir_inst *in = &s->insts[k];
  const struct decomp *d = find(in->op);
  *v = -1;
  if (!d || in->nout != 1 || in->nin < 1 || in->nin > 3 || s->args[in->first_arg] < 0) return GRACE_OK;
  /* a norm that the GEMVs reading it will compute as their prologue stays whole (ir/ir_fuse.h) */
  if (ir_norm_feeds_matmul(s, k)) return GRACE_OK;
  const ir_type *xt = &s->vals[s->args[in->first_arg]].type, *rt = &s->vals[in->first_result].type;
  /* a wrapped number is a constant: folding, not decomposing, is what it wants */
  if (!grace_dtype_is_float(xt->dtype) || rt->dtype != xt->dtype || xt->wrapped) return GRACE_OK;
  const int half = xt->dtype != GRACE_FLOAT32 && xt->dtype != GRACE_FLOAT64;
  ir_type xf = *xt;
  if (half) xf.dtype = GRACE_FLOAT32;
  dctx c = {.rw = rw, .k = k, .inst = in, .xt = &xf, .in = {-1, -1, -1}, .x_cast = half};
  for (int i = 0; i < in->nin; i++) c.in[i] = ir_rw_value(rw, s->args[in->first_arg + i]);
  int32_t r = d->expand(&c);
  if (r >= 0 && half) r = cast(&c, r, xt->dtype);
  if (c.st != GRACE_OK) return c.st;
  if (r < 0) return GRACE_OK;
  /* the verifier checks each expanded op against inference, but not that the expansion as a whole gives the
   * op's type: a consumer copied with its recorded types, or an output, would silently change */
  const ir_type *got = &rw->dst->vals[r].type;
  if (!ir_type_equal(got, rt, 1)) {
    char a[160], b[160];
    return grace_set_error(s->vm, GRACE_EINTERNAL, "decompose: %s (%%%d) expands to %s, the op gives %s", ir_op_name(in->op),
                           in->first_result, ir_type_str(got, a, sizeof a), ir_type_str(rt, b, sizeof b));
  }
  ir_rw_set(rw, in->first_result, r);
  *v = r;
  return GRACE_OK;
}

grace_status ir_pass_decompose(grace_ir *src, grace_ir **out) {
  ir_rewriter rw;
  grace_status st = ir_rw_begin(&rw, src);
  if (st != GRACE_OK) return st;
  for (int k = 0; k < src->ninst && st == GRACE_OK; k++) {
    int32_t v;
    st = expand(&rw, k, &v);
    if (st == GRACE_OK && v < 0) st = ir_rw_copy(&rw, k);
  }
  if (st != GRACE_OK) { ir_rw_abort(&rw); return st; }
  return ir_rw_finish(&rw, out);
}
