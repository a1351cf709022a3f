/* ir_canon.c: canonicalizing passes: constant folding of literals (fold), algebraic identities that are
 * bit-exact with eager execution (simplify), common-subexpression elimination (cse) and folding of view
 * chains (views). Each pass keeps every remaining value's type, never touches random ops or captured
 * tensors' contents, and leaves dead instructions for dce.
 *
 * Three facts limit which value may stand for another. Outputs are handed to the host, so a value that
 * reaches the host (as an output, or through views, contiguous or to, which share its storage or return it)
 * must stay storage of its own: not an input, a capture, or storage another such value has. `view` fails
 * at run time on a layout it cannot view, so a value whose layout reaches a `view` (or the host) may only
 * be replaced by a value known to be contiguous, or by one with the same layout. And contiguous and to
 * hand a literal on as the wrapped number it is, which inference types as an ordinary 0-d tensor: what
 * reads such a value promotes differently at run time than its types say, so it is left alone. */
#include <stdio.h>
#include <string.h>
#include "ir/ir_pass.h"

/* Per src value facts. */
enum { V_ESCAPE = 1, V_WRITE = 2, V_LAYOUT = 4, V_TAINT = 8 };
#define ESC_MAX (INT32_MAX / 2)

typedef struct canon {
  grace_ir *src;
  ir_rewriter rw;
  char *flags;                    /* V_* per src value */
  int32_t *esc;                   /* per src value: the outputs it reaches through views, contiguous, to, in-place */
  int32_t *uses;                  /* per src value */
} canon;

static int is_random(int op) { return op == GRACE_OP_RAND || op == GRACE_OP_RANDN || op == GRACE_OP_RANDINT; }

static int is_tensor_op(int op) { return op >= 0 && op < GRACE_NOPS; }

static int kind_of(int op) { return is_tensor_op(op) ? (int)grace_op_kind((grace_op)op) : -1; }

/* The CPU kernels of these ops allocate their result (contiguous, shared with nothing). CONTIGUOUS gives a
 * contiguous result that may be its input; TO_DEVICE may give its input. */
static int op_fresh(int op) {
  switch (kind_of(op)) {
  case GRACE_KIND_UNARY: case GRACE_KIND_BINARY: case GRACE_KIND_COMPARE: case GRACE_KIND_TERNARY:
  case GRACE_KIND_REDUCE: case GRACE_KIND_SCAN: case GRACE_KIND_MATMUL: case GRACE_KIND_NORM: case GRACE_KIND_CREATE:
    return 1;
  case GRACE_KIND_MOVE: return op != GRACE_OP_CONTIGUOUS && op != GRACE_OP_TO_DEVICE;
  default: return 0;
  }
}
static int op_contiguous(int op) { return op_fresh(op) || op == GRACE_OP_CONTIGUOUS; }

/* Ops whose result shares its first input's storage (or is that tensor): views, contiguous, to, and in-place
 * ops (functional in the IR, but in eager the result is the tensor written). */
static int passes_storage(int op) {
  int kind = kind_of(op);
  return kind == GRACE_KIND_VIEW || kind == GRACE_KIND_INPLACE || op == GRACE_OP_CONTIGUOUS || op == GRACE_OP_TO_DEVICE;
}

static int dst_op(const canon *c, int32_t dv) { return dv < 0 ? -1 : c->rw.dst->insts[c->rw.dst->vals[dv].inst].op; }

static int sym_equal(const ir_type *a, const ir_type *b) {
  return a->ndim == b->ndim && !memcmp(a->sym, b->sym, sizeof(int32_t) * (size_t)a->ndim);
}
static int types_same(const ir_type *a, const ir_type *b) { return ir_type_equal(a, b, 1) && sym_equal(a, b); }

static grace_status canon_begin(canon *c, grace_ir *src) {
  grace_vm *vm = src->vm;
  memset(c, 0, sizeof *c);
  c->src = src;
  size_t n = (size_t)(src->nval ? src->nval : 1);
  c->uses = ir_count_uses(src);
  c->flags = grace_realloc(vm, NULL, 0, n);
  c->esc = grace_realloc(vm, NULL, 0, sizeof *c->esc * n);
  if (!c->uses || !c->flags || !c->esc) {
    if (c->uses) grace_realloc(vm, c->uses, sizeof *c->uses * n, 0);
    if (c->flags) grace_realloc(vm, c->flags, n, 0);
    if (c->esc) grace_realloc(vm, c->esc, sizeof *c->esc * n, 0);
    return grace_set_error(vm, GRACE_ENOMEM, "pass: out of host memory");
  }
  memset(c->flags, 0, n);
  memset(c->esc, 0, sizeof *c->esc * n);
  for (int i = 0; i < src->nout; i++) {
    c->flags[src->outputs[i]] |= V_ESCAPE | V_LAYOUT;
    if (c->esc[src->outputs[i]] < ESC_MAX) c->esc[src->outputs[i]]++;
  }
  for (int i = 0; i < src->nwrite; i++) c->flags[src->writes[i].target] |= V_WRITE, c->flags[src->writes[i].value] |= V_WRITE;
  /* forward: contiguous and to hand a wrapped number on as it is, where inference types an ordinary 0-d
   * tensor, so from there on run-time promotion may differ from the types: such values are left alone */
  for (int k = 0; k < src->ninst; k++) {
    const ir_inst *in = &src->insts[k];
    int taint = 0;
    for (int j = 0; j < in->nin; j++) {
      int32_t x = src->args[in->first_arg + j];
      if (x >= 0 && ((c->flags[x] & V_TAINT) ||
                     ((in->op == GRACE_OP_CONTIGUOUS || in->op == GRACE_OP_TO_DEVICE) && src->vals[x].type.wrapped)))
        taint = 1;
    }
    for (int r = 0; taint && r < in->nout; r++) c->flags[in->first_result + r] |= V_TAINT;
  }
  /* backward: a value's layout matters if a `view` reads it, if an in-place op writes it (its result is that
   * tensor), or if a view of it is a value whose layout matters; it reaches the host if a view of it, or
   * what contiguous, to or an in-place op makes of it, does */
  for (int k = src->ninst - 1; k >= 0; k--) {
    const ir_inst *in = &src->insts[k];
    int kind = kind_of(in->op);
    if (in->nin < 1 || src->args[in->first_arg] < 0) continue;
    int32_t x = src->args[in->first_arg];
    if (in->op == GRACE_OP_VIEW || kind == GRACE_KIND_INPLACE ||
        (kind == GRACE_KIND_VIEW && (c->flags[in->first_result] & V_LAYOUT)))
      c->flags[x] |= V_LAYOUT;
    if (passes_storage(in->op) && (c->flags[in->first_result] & V_ESCAPE)) {
      c->flags[x] |= V_ESCAPE;
      int64_t e = (int64_t)c->esc[x] + c->esc[in->first_result];
      c->esc[x] = (int32_t)(e < ESC_MAX ? e : ESC_MAX);   /* saturated: equal counts then only compare unequal */
    }
  }
  grace_status st = ir_rw_begin(&c->rw, src);
  if (st != GRACE_OK) {
    grace_realloc(vm, c->uses, sizeof *c->uses * n, 0);
    grace_realloc(vm, c->flags, n, 0);
    grace_realloc(vm, c->esc, sizeof *c->esc * n, 0);
  }
  return st;
}

/* Frees the pass state; on success hands over the new IR, otherwise drops it. */
static grace_status canon_end(canon *c, grace_status st, grace_ir **out) {
  grace_vm *vm = c->src->vm;
  size_t n = (size_t)(c->src->nval ? c->src->nval : 1);
  grace_realloc(vm, c->uses, sizeof *c->uses * n, 0);
  grace_realloc(vm, c->flags, n, 0);
  grace_realloc(vm, c->esc, sizeof *c->esc * n, 0);
  if (st != GRACE_OK) { if (c->rw.dst) ir_rw_abort(&c->rw); return st; }
  return ir_rw_finish(&c->rw, out);
}

/* Whether dst value dv already stands for a src value that reaches the host other than through src value v
 * (a value v is a view or contiguous of reaches the host through v, and v is what dv is to replace). */
static int dst_escapes(const canon *c, int32_t dv, int32_t v) {
  const grace_ir *s = c->src;
  for (int u = 0; u < s->nval; u++) {
    if (!(c->flags[u] & V_ESCAPE) || c->rw.map[u] != dv) continue;
    int through = 0;
    for (int32_t w = v; !through;) {
      const ir_inst *p = &s->insts[s->vals[w].inst];
      if (!passes_storage(p->op) || p->nin < 1 || s->args[p->first_arg] < 0) break;
      w = s->args[p->first_arg];
      through = w == u;
    }
    if (!through || c->esc[u] != c->esc[v]) return 1;
  }
  return 0;
}

/* Whether src value v may become dst value x. same_layout: x has v's layout (a transpose undone). */
static int can_replace(const canon *c, int32_t v, int32_t x, int same_layout) {
  if (x < 0 || (c->flags[v] & (V_WRITE | V_TAINT))) return 0;
  if (!types_same(&c->src->vals[v].type, &c->rw.dst->vals[x].type)) return 0;
  if ((c->flags[v] & V_ESCAPE) && (!op_fresh(dst_op(c, x)) || dst_escapes(c, x, v))) return 0;
  if ((c->flags[v] & V_LAYOUT) && !same_layout && !op_contiguous(dst_op(c, x))) return 0;
  return 1;
}

static void replace(canon *c, int32_t v, int32_t x) { ir_rw_set(&c->rw, v, x); }

/* ---- fold: pointwise ops over literals become literals ---- */

typedef struct { double f; int64_t i; } folded;

/* A 0-d tensor holding value v as eager saw it: a literal is a wrapped number, a folded result an ordinary
 * 0-d tensor (they differ in type promotion). */
static grace_status fold_arg(grace_ir *s, int32_t v, const folded *val, grace_tensor **t) {
  const ir_inst *p = &s->insts[s->vals[v].inst];
  const ir_type *ty = &s->vals[v].type;
  if (p->op == IR_OP_LITERAL)
    return ty->dtype == GRACE_INT64 ? grace_tensor_scalar_int(s->vm, p->iliteral, t) : grace_tensor_scalar(s->vm, p->literal, 0, t);
  const void *data = ty->dtype == GRACE_INT64 ? (const void *)&val[v].i : (const void *)&val[v].f;
  return grace_tensor_from_data(s->vm, ty->dtype, 0, (const int64_t[]){1}, ty->dtype, data, t);
}

/* Runs instruction k eagerly on its (literal or folded) inputs; 1 and the value in val[result] when it gives
 * a 0-d i64/f64 (what a literal can hold), 0 when it cannot be folded. */
static int fold_eval(grace_ir *s, int k, folded *val) {
  const ir_inst *in = &s->insts[k];
  grace_tensor *args[2] = {NULL, NULL}, *res = NULL;
  grace_status st = GRACE_OK;
  char err[512];   /* an op eager would reject (pow of integers to a negative power) is left alone, not an error */
  snprintf(err, sizeof err, "%s", grace_last_error(s->vm));
  for (int j = 0; j < in->nin && st == GRACE_OK; j++) st = fold_arg(s, s->args[in->first_arg + j], val, &args[j]);
  if (st == GRACE_OK) {
    vm_trace_hold(s->vm, 1);   /* the pass's own arithmetic is not part of any trace being recorded */
    st = vm_route(s->vm, (grace_op)in->op, in->nin, args, &in->attrs, 1, &res);
    vm_trace_hold(s->vm, -1);
  }
  grace_dtype dt = s->vals[in->first_result].type.dtype;
  int okv = st == GRACE_OK && grace_tensor_ndim(res) == 0 && grace_tensor_dtype(res) == dt;
  if (okv) okv = grace_tensor_read(s->vm, res, dt, dt == GRACE_INT64 ? (void *)&val[in->first_result].i
                                                                      : (void *)&val[in->first_result].f) == GRACE_OK;
  for (int j = 0; j < in->nin; j++) grace_tensor_release(args[j]);
  grace_tensor_release(res);
  if (!okv) grace_set_error(s->vm, GRACE_OK, "%s", err);
  return okv;
}

/* Whether instruction k (not folded) keeps its result types when its folded inputs become literals. */
static int fold_consumer_ok(const canon *c, int k, const char *cand) {
  grace_ir *s = c->src;
  const ir_inst *in = &s->insts[k];
  if (!is_tensor_op(in->op) || in->nin > 64) return 0;
  /* these would hand the literal itself on, a wrapped number where eager had a 0-d tensor */
  if (in->op == GRACE_OP_CONTIGUOUS || in->op == GRACE_OP_TO_DEVICE) return 0;
  const ir_type *tin[64];
  ir_type t[64];
  for (int j = 0; j < in->nin; j++) {
    int32_t v = s->args[in->first_arg + j];
    if (v < 0) { tin[j] = NULL; continue; }
    if (c->flags[v] & V_TAINT) return 0;   /* promotion at run time is not what the types say */
    t[j] = s->vals[v].type;
    if (cand[s->vals[v].inst]) t[j].wrapped = 1;
    tin[j] = &t[j];
  }
  ir_type res[2];
  char err[512];
  snprintf(err, sizeof err, "%s", grace_last_error(s->vm));
  int okv = ir_infer(s->vm, in->op, in->nin, tin, &in->attrs, in->nout > 2 ? 2 : in->nout, res) == GRACE_OK;
  for (int r = 0; okv && r < in->nout && r < 2; r++) okv = types_same(&res[r], &s->vals[in->first_result + r].type);
  grace_set_error(s->vm, GRACE_OK, "%s", err);   /* a rejected fold is not an error */
  return okv;
}

grace_status ir_pass_fold(grace_ir *src, grace_ir **out) {
  grace_vm *vm = src->vm;
  canon c;
  grace_status st = canon_begin(&c, src);
  if (st != GRACE_OK) return st;
  size_t ni = (size_t)(src->ninst ? src->ninst : 1), nv = (size_t)(src->nval ? src->nval : 1);
  char *cand = grace_realloc(vm, NULL, 0, ni);
  folded *val = grace_realloc(vm, NULL, 0, sizeof *val * nv);
  if (!cand || !val) st = grace_set_error(vm, GRACE_ENOMEM, "fold: out of host memory");
  /* candidates, in order: pointwise over literals and candidates, a 0-d i64/f64 result, computed eagerly */
  for (int k = 0; k < src->ninst && st == GRACE_OK; k++) {
    const ir_inst *in = &src->insts[k];
    int kind = kind_of(in->op);
    cand[k] = 0;
    if ((kind != GRACE_KIND_UNARY && kind != GRACE_KIND_BINARY && kind != GRACE_KIND_COMPARE) || in->nout != 1) continue;
    const ir_type *t = &src->vals[in->first_result].type;
    if (t->ndim != 0 || t->device != GRACE_CPU || (t->dtype != GRACE_INT64 && t->dtype != GRACE_FLOAT64)) continue;
    if (c.flags[in->first_result] & (V_ESCAPE | V_WRITE)) continue;   /* the host gets a tensor, not a number */
    int all = 1;
    for (int j = 0; j < in->nin && all; j++) {
      int32_t v = src->args[in->first_arg + j];
      all = v >= 0 && (src->insts[src->vals[v].inst].op == IR_OP_LITERAL || cand[src->vals[v].inst]);
    }
    cand[k] = (char)(all && fold_eval(src, k, val));
  }
  /* a folded value turns from a 0-d tensor into a wrapped number: drop folds that would change the type
   * of an instruction reading them, until none does */
  for (int changed = 1; changed && st == GRACE_OK;) {
    changed = 0;
    for (int k = 0; k < src->ninst; k++) {
      const ir_inst *in = &src->insts[k];
      int nc = 0, other = 0;
      for (int j = 0; j < in->nin; j++) {
        int32_t v = src->args[in->first_arg + j];
        if (v < 0) continue;
        int p = src->vals[v].inst;
        if (cand[p]) nc++;
        else if (src->insts[p].op != IR_OP_LITERAL) other = 1;
      }
      if (cand[k] && other) { cand[k] = 0; changed = 1; }
      if (!cand[k] && nc && !fold_consumer_ok(&c, k, cand)) {
        for (int j = 0; j < in->nin; j++) {
          int32_t v = src->args[in->first_arg + j];
          if (v >= 0 && cand[src->vals[v].inst]) cand[src->vals[v].inst] = 0;
        }
        changed = 1;
      }
    }
  }
  for (int k = 0; k < src->ninst && st == GRACE_OK; k++) {
    const ir_inst *in = &src->insts[k];
    if (!cand[k]) { st = ir_rw_copy(&c.rw, k); continue; }
    int32_t v = in->first_result, lit = -1;
    int is_int = src->vals[v].type.dtype == GRACE_INT64;
    if ((st = ir_rw_literal(&c.rw, k, val[v].f, is_int, val[v].i, &lit)) == GRACE_OK) replace(&c, v, lit);
  }
  if (cand) grace_realloc(vm, cand, ni, 0);
  if (val) grace_realloc(vm, val, sizeof *val * nv, 0);
  return canon_end(&c, st, out);
}

/* ---- simplify: identities exact for every input (NaN, inf and -0.0 included) ---- */

/* Literal v's kind: 1 integer one, 2 float one, 3 integer zero, 4 float +0.0, 5 float -0.0, 0 other. */
static int literal_kind(const grace_ir *s, int32_t v) {
  if (v < 0) return 0;
  const ir_inst *p = &s->insts[s->vals[v].inst];
  if (p->op != IR_OP_LITERAL) return 0;
  if (s->vals[v].type.dtype == GRACE_INT64) return p->iliteral == 1 ? 1 : p->iliteral == 0 ? 3 : 0;
  double z = 0.0, nz = -0.0;
  if (p->literal == 1.0) return 2;
  if (!memcmp(&p->literal, &z, sizeof z)) return 4;
  if (!memcmp(&p->literal, &nz, sizeof nz)) return 5;
  return 0;
}

static int norm_dim(int64_t d, int ndim) { return (int)(d < 0 ? d + ndim : d); }

/* The dst value src instruction k (one result) reduces to, or -1. *same_layout: it is k's layout exactly. */
static int32_t simplify_one(canon *c, int k, int *same_layout) {
  const grace_ir *s = c->src, *d = c->rw.dst;
  const ir_inst *in = &s->insts[k];
  *same_layout = 0;
  if (!is_tensor_op(in->op) || in->nout != 1 || in->nin < 1) return -1;
  int32_t a = s->args[in->first_arg], b = in->nin > 1 ? s->args[in->first_arg + 1] : -1;
  const ir_type *ta = a >= 0 ? &s->vals[a].type : NULL;
  int la = literal_kind(s, a), lb = literal_kind(s, b);
  int aint = ta && grace_dtype_is_int(ta->dtype) && ta->dtype != GRACE_BOOL, afl = ta && grace_dtype_is_float(ta->dtype);
  switch (in->op) {
  case GRACE_OP_MUL:   /* x * 1; the type check rejects promotions (int * 1.0, bool * 1) */
    if (lb == 1 || lb == 2) return ir_rw_value(&c->rw, a);
    if (la == 1 || la == 2) return ir_rw_value(&c->rw, b);
    return -1;
  case GRACE_OP_DIV:   /* x / 1 for floats (integers divide to float32, which the type check rejects) */
    return lb == 1 || lb == 2 ? ir_rw_value(&c->rw, a) : -1;
  case GRACE_OP_ADD: {   /* integers: x + 0; floats: only x + (-0.0), since -0.0 + 0 is +0.0 */
    const ir_type *tb = b >= 0 ? &s->vals[b].type : NULL;
    int bint = tb && grace_dtype_is_int(tb->dtype) && tb->dtype != GRACE_BOOL, bfl = tb && grace_dtype_is_float(tb->dtype);
    if ((lb == 3 && aint) || (lb == 5 && afl)) return ir_rw_value(&c->rw, a);
    if ((la == 3 && bint) || (la == 5 && bfl)) return ir_rw_value(&c->rw, b);
    return -1;
  }
  case GRACE_OP_SUB:   /* x - (+0) is x for every x, -0.0 included; x - (-0.0) is not */
    return lb == 3 || lb == 4 ? ir_rw_value(&c->rw, a) : -1;
  case GRACE_OP_NEG: {   /* neg(neg(x)): exact for floats, wraps back for integers */
    int32_t y = ir_rw_value(&c->rw, a);
    if (dst_op(c, y) != GRACE_OP_NEG) return -1;
    const ir_inst *p = &d->insts[d->vals[y].inst];
    return d->args[p->first_arg];
  }
  case GRACE_OP_CONTIGUOUS: {   /* of a value the kernels made contiguous: eager hands back that tensor */
    int32_t y = ir_rw_value(&c->rw, a);
    return op_contiguous(dst_op(c, y)) ? y : -1;
  }
  case GRACE_OP_TRANSPOSE: {   /* transpose(transpose(x, i, j), i, j): the same strides as x */
    int32_t y = ir_rw_value(&c->rw, a);
    if (dst_op(c, y) != GRACE_OP_TRANSPOSE) return -1;
    const ir_inst *p = &d->insts[d->vals[y].inst];
    int32_t x = d->args[p->first_arg];
    int n = ta->ndim;
    if (n < 2 || p->attrs.ndims != 2 || in->attrs.ndims != 2) return -1;
    int i0 = norm_dim(in->attrs.dims[0], n), i1 = norm_dim(in->attrs.dims[1], n);
    int p0 = norm_dim(p->attrs.dims[0], n), p1 = norm_dim(p->attrs.dims[1], n);
    if (!((i0 == p0 && i1 == p1) || (i0 == p1 && i1 == p0))) return -1;
    *same_layout = 1;
    return x;
  }
  default: return -1;
  }
}

static int is_reshape_like(int op) { return op == GRACE_OP_RESHAPE || op == GRACE_OP_VIEW; }
static int is_shape_view(int op) { return is_reshape_like(op) || op == GRACE_OP_SQUEEZE || op == GRACE_OP_UNSQUEEZE; }

/* State of the view-chain folder: per src value, whether it was folded from a chain of views that never
 * copy (view, squeeze, unsqueeze), and whether it was replaced by an earlier value (not a new view). */
typedef struct { char *nocopy, *gone; } chains;

/* Folds src instruction k, a shape change (reshape/view; with all: also squeeze/unsqueeze) of a single-use
 * shape change of x, into one reshape of x, or into x when the shapes agree. 1: folded, 0: not, -1: error. */
static int fold_view_chain(canon *c, chains *ch, int k, int all, grace_status *st) {
  const grace_ir *s = c->src;
  const ir_inst *in = &s->insts[k];
  if (!(all ? is_shape_view(in->op) : is_reshape_like(in->op)) || in->nout != 1) return 0;
  int32_t u = s->args[in->first_arg], v = in->first_result;
  int inner = s->insts[s->vals[u].inst].op;
  if (!(all ? is_shape_view(inner) : is_reshape_like(inner)) || c->uses[u] != 1 || ch->gone[u]) return 0;
  int32_t du = ir_rw_value(&c->rw, u);
  if (!is_shape_view(dst_op(c, du))) return 0;
  const ir_inst *p = &c->rw.dst->insts[c->rw.dst->vals[du].inst];
  int32_t x = c->rw.dst->args[p->first_arg];
  const ir_type *tv = &s->vals[v].type, *tx = &c->rw.dst->vals[x].type;
  /* a reshape may have copied along the chain: then the result is contiguous, where one reshape of x may be
   * a view of it; that matters only where v's layout matters or v reaches the host, and not at all when x
   * is contiguous */
  int nocopy = ch->nocopy[u] || op_contiguous(dst_op(c, x));
  if (!nocopy && (c->flags[v] & (V_LAYOUT | V_ESCAPE))) return 0;
  if (types_same(tv, tx)) {
    if (!can_replace(c, v, x, 1)) return 0;
    replace(c, v, x);
    ch->gone[v] = 1;
    return 1;
  }
  for (int dd = 0; dd < tv->ndim; dd++) if (tv->sym[dd]) return 0;   /* a reshape would lose the symbol */
  if ((c->flags[v] & (V_WRITE | V_TAINT)) || tx->wrapped) return 0;
  grace_attrs a = {.nshape = tv->ndim};
  memcpy(a.shape, tv->sizes, sizeof(int64_t) * (size_t)tv->ndim);
  int32_t r = -1;
  if ((*st = ir_rw_op(&c->rw, k, GRACE_OP_RESHAPE, 1, &x, &a, 1, &r)) != GRACE_OK) return -1;
  if (!types_same(tv, &c->rw.dst->vals[r].type)) {
    *st = grace_set_error(s->vm, GRACE_EINTERNAL, "views: folding %%%d changed its type", v);
    return -1;
  }
  replace(c, v, r);
  ch->nocopy[v] = (char)(ch->nocopy[u] && in->op != GRACE_OP_RESHAPE);
  return 1;
}

static grace_status chains_new(canon *c, chains *ch) {
  size_t n = (size_t)(c->src->nval ? c->src->nval : 1);
  ch->nocopy = grace_realloc(c->src->vm, NULL, 0, n);
  ch->gone = grace_realloc(c->src->vm, NULL, 0, n);
  if (!ch->nocopy || !ch->gone) return grace_set_error(c->src->vm, GRACE_ENOMEM, "pass: out of host memory");
  memset(ch->gone, 0, n);
  for (int v = 0; v < c->src->nval; v++) {
    int op = c->src->insts[c->src->vals[v].inst].op;
    ch->nocopy[v] = (char)(op == GRACE_OP_VIEW || op == GRACE_OP_SQUEEZE || op == GRACE_OP_UNSQUEEZE);
  }
  return GRACE_OK;
}

static void chains_free(canon *c, chains *ch) {
  size_t n = (size_t)(c->src->nval ? c->src->nval : 1);
  if (ch->nocopy) grace_realloc(c->src->vm, ch->nocopy, n, 0);
  if (ch->gone) grace_realloc(c->src->vm, ch->gone, n, 0);
}

grace_status ir_pass_simplify(grace_ir *src, grace_ir **out) {
  canon c;
  grace_status st = canon_begin(&c, src);
  if (st != GRACE_OK) return st;
  chains ch = {0};
  st = chains_new(&c, &ch);
  for (int k = 0; k < src->ninst && st == GRACE_OK; k++) {
    int same = 0;
    int32_t x = simplify_one(&c, k, &same);
    if (x >= 0 && can_replace(&c, src->insts[k].first_result, x, same)) { replace(&c, src->insts[k].first_result, x); continue; }
    int r = fold_view_chain(&c, &ch, k, 0, &st);
    if (r == 0) st = ir_rw_copy(&c.rw, k);
  }
  chains_free(&c, &ch);
  return canon_end(&c, st, out);
}

grace_status ir_pass_views(grace_ir *src, grace_ir **out) {
  canon c;
  grace_status st = canon_begin(&c, src);
  if (st != GRACE_OK) return st;
  chains ch = {0};
  st = chains_new(&c, &ch);
  for (int k = 0; k < src->ninst && st == GRACE_OK; k++) {
    int r = fold_view_chain(&c, &ch, k, 1, &st);
    if (r == 0) st = ir_rw_copy(&c.rw, k);
  }
  chains_free(&c, &ch);
  return canon_end(&c, st, out);
}

/* ---- cse: one instruction for each distinct computation ---- */

/* Whether src instruction k computes what dst instruction j computes. */
static int cse_same(const canon *c, int k, int j) {
  const grace_ir *s = c->src, *d = c->rw.dst;
  const ir_inst *a = &s->insts[k], *b = &d->insts[j];
  if (a->op != b->op || a->nin != b->nin || a->nout != b->nout) return 0;
  for (int r = 0; r < a->nout; r++)
    if (!types_same(&s->vals[a->first_result + r].type, &d->vals[b->first_result + r].type)) return 0;
  if (a->op == IR_OP_LITERAL) return !memcmp(&a->literal, &b->literal, sizeof a->literal) && a->iliteral == b->iliteral;
  if (a->op == IR_OP_CONST) {   /* one tensor captured twice; an unbound capture has no identity yet */
    const ir_const *x = &s->consts[a->input_index], *y = &d->consts[b->input_index];
    return x->t && x->t == y->t && x->version == y->version && x->local == y->local;
  }
  if (!ir_attrs_equal(&a->attrs, &b->attrs)) return 0;
  for (int i = 0; i < a->nin; i++)
    if (ir_rw_value(&c->rw, s->args[a->first_arg + i]) != d->args[b->first_arg + i]) return 0;
  return 1;
}

static int cse_mergeable(int op) {
  if (op == IR_OP_INPUT || op == IR_OP_SCALAR) return 0;
  if (op == IR_OP_LITERAL || op == IR_OP_CONST) return 1;
  return is_tensor_op(op) && !is_random(op) && grace_op_kind((grace_op)op) != GRACE_KIND_INPLACE;
}

grace_status ir_pass_cse(grace_ir *src, grace_ir **out) {
  grace_vm *vm = src->vm;
  canon c;
  grace_status st = canon_begin(&c, src);
  if (st != GRACE_OK) return st;
  /* dst instructions chained by op, newest first, so a lookup only visits instructions of the same op */
  size_t nh = (size_t)IR_NOPS, nn = (size_t)(src->ninst ? src->ninst : 1);
  int32_t *head = grace_realloc(vm, NULL, 0, sizeof *head * nh), *next = grace_realloc(vm, NULL, 0, sizeof *next * nn);
  if (!head || !next) st = grace_set_error(vm, GRACE_ENOMEM, "cse: out of host memory");
  else for (size_t i = 0; i < nh; i++) head[i] = -1;
  for (int k = 0; k < src->ninst && st == GRACE_OK; k++) {
    const ir_inst *in = &src->insts[k];
    int found = -1;
    if (cse_mergeable(in->op))
      for (int j = head[in->op]; j >= 0 && found < 0; j = next[j])
        if (cse_same(&c, k, j)) found = j;
    if (found >= 0) {
      const ir_inst *f = &c.rw.dst->insts[found];
      int all = 1;
      for (int r = 0; r < in->nout && all; r++) {
        int32_t v = in->first_result + r, x = f->first_result + r;
        /* what reaches the host must stay storage of its own; a capture that is written stays where it is */
        all = !(c.flags[v] & V_WRITE) && (!(c.flags[v] & V_ESCAPE) || (op_fresh(in->op) && !dst_escapes(&c, x, v)));
      }
      if (all) {
        for (int r = 0; r < in->nout; r++) replace(&c, in->first_result + r, f->first_result + r);
        continue;
      }
    }
    int before = c.rw.dst->ninst;
    if ((st = ir_rw_copy(&c.rw, k)) != GRACE_OK) break;
    if (cse_mergeable(in->op) && c.rw.dst->ninst == before + 1) { next[before] = head[in->op]; head[in->op] = before; }
  }
  if (head) grace_realloc(vm, head, sizeof *head * nh, 0);
  if (next) grace_realloc(vm, next, sizeof *next * nn, 0);
  return canon_end(&c, st, out);
}
