/* vm_grad_reduce.c: the derivatives of the reductions and the row ops over one dim (include/grace_ops.h's REDUCE
 * and SCAN kinds; attention's is with the matrix products, vm_grad_nn.c). A reduction's gradient is broadcast back
 * over the reduced dims (gx_unreduce). argmax, argmin, all, any give integers or bools: no gradient, never
 * recorded; topk's and sort's indices likewise. */
#include "vm/vm_grad.h"

#define G(op, a, b) gx_bin(c, GRACE_OP_##op, a, b)
#define U(op, a) gx_un(c, GRACE_OP_##op, a)

static int64_t numel(const grace_tensor *t) { return t ? vm_numel(t->ndim, t->sizes) : 1; }

/* Elements reduced into each result element. */
static double count(vm_gctx *c) {
  int64_t n = numel(c->n->out[0]) ? numel(c->n->out[0]) : 1;
  return (double)numel(c->n->in[0]) / (double)n;
}

/* max and min: the gradient spread evenly over the elements equal to the extremum (one, without ties). */
static grace_tensor *extremum(vm_gctx *c, grace_tensor *g) {
  const grace_attrs *a = &c->n->attrs;
  grace_tensor *x = gx_in(c, 0);
  grace_tensor *hit = gx_cast(c, G(EQ, x, gx_unreduce(c, gx_out(c, 0), x, a)), x ? x->dtype : GRACE_FLOAT32);
  grace_tensor *n = gx_sum(c, hit, a->ndims, a->dims, 1);
  return G(DIV, G(MUL, gx_unreduce(c, g, x, a), hit), n);
}

/* sort and topk: the values' gradient scattered back to where the values came from (the indices recomputed). */
static grace_tensor *unpermute(vm_gctx *c, grace_tensor *g) {
  grace_tensor *x = gx_in(c, 0), *r[2] = {NULL, NULL};
  if (!x || c->st != GRACE_OK) return NULL;
  grace_status st = grace_run(c->vm, c->n->op, 1, &x, &c->n->attrs, 2, r);
  if (st != GRACE_OK) { c->st = st; return NULL; }
  gx_keep(c, r[0]);
  grace_tensor *idx = gx_keep(c, r[1]);
  grace_tensor *in[3] = {gx_full(c, x, 0), idx, g};
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = c->n->attrs.dims[0];
  return gx_op(c, GRACE_OP_SCATTER, 3, in, &a);
}

grace_status vm_vjp_reduce(vm_gctx *c, grace_tensor *const *gout, grace_tensor **gin) {
  const grace_attrs *a = &c->n->attrs;
  const grace_tensor *x0 = c->n->in[0];   /* for shapes only */
  grace_tensor *g = gout[0];
  int dim = a->ndims ? (int)a->dims[0] : -1;
  if (!g) return GRACE_OK;   /* only an integer result was used */
  switch (c->n->op) {
  case GRACE_OP_SUM: gin[0] = gx_unreduce(c, g, x0, a); break;
  case GRACE_OP_MEAN: gin[0] = gx_muln(c, gx_unreduce(c, g, x0, a), 1.0 / count(c)); break;
  case GRACE_OP_PROD:   /* y / x: inputs with zeros have no gradient here */
    gin[0] = G(DIV, G(MUL, gx_unreduce(c, g, x0, a), gx_unreduce(c, gx_out(c, 0), x0, a)), gx_in(c, 0));
    break;
  case GRACE_OP_MAX: case GRACE_OP_MIN: gin[0] = extremum(c, g); break;
  case GRACE_OP_VAR: case GRACE_OP_STD: {   /* var: 2 (x - mean) / (n - unbiased); std: that / (2 y) */
    grace_tensor *x = gx_in(c, 0);
    grace_tensor *d = G(SUB, x, gx_muln(c, gx_sum(c, x, a->ndims, a->dims, 1), 1.0 / count(c)));
    double k = 1.0 / (count(c) - (a->flag ? 1 : 0));
    grace_tensor *r = G(MUL, gx_unreduce(c, g, x0, a), gx_muln(c, d, c->n->op == GRACE_OP_VAR ? 2 * k : k));
    gin[0] = c->n->op == GRACE_OP_VAR ? r : G(DIV, r, gx_unreduce(c, gx_out(c, 0), x0, a));
    break;
  }
  case GRACE_OP_LOGSUMEXP:
    gin[0] = G(MUL, gx_unreduce(c, g, x0, a), U(EXP, G(SUB, gx_in(c, 0), gx_unreduce(c, gx_out(c, 0), x0, a))));
    break;
  case GRACE_OP_CUMSUM:   /* the reversed cumulative sum: total - cumsum + g */
    gin[0] = G(ADD, G(SUB, gx_sum1(c, g, dim, 1), gx_op(c, GRACE_OP_CUMSUM, 1, &g, a)), g);
    break;
  case GRACE_OP_SOFTMAX: {
    grace_tensor *y = gx_out(c, 0);
    gin[0] = G(MUL, y, G(SUB, g, gx_sum1(c, G(MUL, g, y), dim, 1)));
    break;
  }
  case GRACE_OP_LOG_SOFTMAX:
    gin[0] = G(SUB, g, G(MUL, U(EXP, gx_out(c, 0)), gx_sum1(c, g, dim, 1)));
    break;
  case GRACE_OP_TOPK: case GRACE_OP_SORT: gin[0] = unpermute(c, g); break;
  default: return vm_vjp_none(c);
  }
  return c->st;
}
