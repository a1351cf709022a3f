/* vm_grad_nn.c: the derivatives of the network ops: matmul, layer_norm and rms_norm, attention (its scores and
 * softmax recomputed from the saved inputs, as a fused attention kernel keeps none), embedding. Written as ops, so
 * the backward of a traced model fuses and runs on every backend like its forward. */
#include "vm/vm_grad.h"

#define G(op, a, b) gx_bin(c, GRACE_OP_##op, a, b)
#define U(op, a) gx_un(c, GRACE_OP_##op, a)

static grace_tensor *mT(vm_gctx *c, grace_tensor *t) { return gx_transpose(c, t, -1, -2); }

/* g summed to like's shape, then given shape's dims (a 1-d operand of matmul was made 2-d). */
static grace_tensor *fold(vm_gctx *c, grace_tensor *g, grace_tensor *like2, const grace_tensor *like) {
  grace_tensor *s = gx_sum_to(c, g, like2);
  return s && s->ndim != like->ndim ? gx_reshape(c, s, like->ndim, like->sizes) : s;
}

/* Whether t is the transpose of a contiguous matrix. */
static int transposed(const grace_tensor *t) {
  return t && t->ndim == 2 && t->sizes[0] > 1 && t->sizes[1] > 1 && t->strides[0] == 1 && t->strides[1] == t->sizes[0];
}

static grace_status matmul(vm_gctx *c, grace_tensor *g, grace_tensor **gin) {
  grace_tensor *a = gx_in(c, 0), *b = gx_in(c, 1);
  if (!a || !b || !g) return c->st;
  int a1 = a->ndim == 1, b1 = b->ndim == 1;
  grace_tensor *a2 = a1 ? gx_unsqueeze(c, a, 0) : a, *b2 = b1 ? gx_unsqueeze(c, b, -1) : b, *g2 = g;
  if (a1 && b1) g2 = gx_reshape(c, g, 2, (int64_t[]){1, 1});
  else if (a1) g2 = gx_unsqueeze(c, g, -2);
  else if (b1) g2 = gx_unsqueeze(c, g, -1);
  if (vm_gneeds(c->n, 0)) gin[0] = fold(c, G(MATMUL, g2, mT(c, b2)), a2, a);
  if (vm_gneeds(c->n, 1))   /* b a transposed matrix (a Linear's weight.T): its gradient made in b's own layout, so
                              the weight's gradient is contiguous, not a transposed copy */
    gin[1] = fold(c, transposed(b2) ? mT(c, G(MATMUL, mT(c, g2), a2)) : G(MATMUL, mT(c, a2), g2), b2, b);
  return c->st;
}

static grace_tensor *mean_last(vm_gctx *c, grace_tensor *t, int64_t d) { return gx_muln(c, gx_sum1(c, t, -1, 1), 1.0 / (double)d); }

/* layer_norm (x, weight, bias) and rms_norm (x, weight) over the last dim; attrs.a: eps. */
static grace_status norm(vm_gctx *c, grace_tensor *g, grace_tensor **gin) {
  int layer = c->n->op == GRACE_OP_LAYER_NORM;
  grace_tensor *x = gx_in(c, 0), *w = c->n->in[1] ? gx_in(c, 1) : NULL;
  if (!x || !g) return c->st;
  int64_t d = x->ndim ? x->sizes[x->ndim - 1] : 1;
  grace_tensor *xc = layer ? G(SUB, x, mean_last(c, x, d)) : x;
  grace_tensor *r = U(RSQRT, gx_addn(c, mean_last(c, G(MUL, xc, xc), d), c->n->attrs.a));
  grace_tensor *xhat = G(MUL, xc, r);
  if (layer && c->n->in[2] && vm_gneeds(c->n, 2)) gin[2] = gx_sum_to(c, g, c->n->in[2]);
  if (w && vm_gneeds(c->n, 1)) gin[1] = gx_sum_to(c, G(MUL, g, xhat), w);
  if (vm_gneeds(c->n, 0)) {
    grace_tensor *gh = w ? G(MUL, g, w) : g;
    grace_tensor *inner = G(SUB, gh, G(MUL, xhat, mean_last(c, G(MUL, gh, xhat), d)));
    if (layer) inner = G(SUB, inner, mean_last(c, gh, d));
    gin[0] = G(MUL, r, inner);
  }
  return c->st;
}

/* attention(q, kt, v, scale, mask): s = q kt (times or over scale), masked, p = softmax(s), p v. */
static grace_status attention(vm_gctx *c, grace_tensor *g, grace_tensor **gin) {
  const grace_attrs *at = &c->n->attrs;
  int div = (at->flag & GRACE_ATTN_DIV) != 0, keep = (at->flag & GRACE_ATTN_KEEP) != 0;
  grace_tensor *q = gx_in(c, 0), *kt = gx_in(c, 1), *v = gx_in(c, 2);
  grace_tensor *scale = c->n->in[3] ? gx_in(c, 3) : NULL, *mask = c->n->in[4] ? gx_in(c, 4) : NULL;
  grace_tensor *zero = gx_num(c, 0), *fill = gx_num(c, at->a);
  grace_tensor *s0 = G(MATMUL, q, kt), *s = s0;
  if (scale) s = div ? G(DIV, s0, scale) : G(MUL, s0, scale);
  if (mask) s = keep ? gx_where(c, mask, s, fill) : gx_where(c, mask, fill, s);
  grace_attrs sm = {0};
  sm.ndims = 1;
  sm.dims[0] = -1;
  grace_tensor *p = gx_op(c, GRACE_OP_SOFTMAX, 1, &s, &sm);
  if (vm_gneeds(c->n, 2)) gin[2] = gx_sum_to(c, G(MATMUL, mT(c, p), g), c->n->in[2]);
  grace_tensor *dp = G(MATMUL, g, mT(c, v));
  grace_tensor *ds = G(MUL, p, G(SUB, dp, gx_sum1(c, G(MUL, dp, p), -1, 1)));
  if (mask) ds = keep ? gx_where(c, mask, ds, zero) : gx_where(c, mask, zero, ds);
  if (scale && vm_gneeds(c->n, 3)) {   /* d(s0 c)/dc = s0; d(s0 / c)/dc = -s0 / c^2 */
    grace_tensor *t = gx_sum(c, G(MUL, ds, s0), 0, NULL, 0);
    gin[3] = div ? U(NEG, G(DIV, t, G(MUL, scale, scale))) : t;
  }
  grace_tensor *ds0 = scale ? (div ? G(DIV, ds, scale) : G(MUL, ds, scale)) : ds;
  if (vm_gneeds(c->n, 0)) gin[0] = gx_sum_to(c, G(MATMUL, ds0, mT(c, kt)), c->n->in[0]);
  if (vm_gneeds(c->n, 1)) gin[1] = gx_sum_to(c, G(MATMUL, mT(c, q), ds0), c->n->in[1]);
  return c->st;
}

grace_status vm_vjp_nn(vm_gctx *c, grace_tensor *const *gout, grace_tensor **gin) {
  switch (c->n->op) {
  case GRACE_OP_MATMUL: return matmul(c, gout[0], gin);
  case GRACE_OP_LAYER_NORM: case GRACE_OP_RMS_NORM: return norm(c, gout[0], gin);
  case GRACE_OP_ATTENTION: return attention(c, gout[0], gin);
  case GRACE_OP_EMBEDDING: {   /* ids, weight: each row's gradient added at its id */
    grace_tensor *ids = gx_in(c, 0);
    if (vm_gneeds(c->n, 1)) gin[1] = gx_index_add(c, c->n->in[1], gout[0], 1, &ids);
    return c->st;
  }
  default: return vm_vjp_none(c);
  }
}
