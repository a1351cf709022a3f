/* vm_grad_util.c: what the derivative rules compute with: one-output ops through grace_run whose results are
 * temporaries of the rule's context, and the broadcasting arithmetic every family needs (summing a gradient down to
 * an input's shape, broadcasting a reduction's gradient back). A failure sticks in the context: later helpers give
 * NULL, so a rule reads as a formula and checks once. */
#include "vm/vm_grad.h"

grace_tensor *gx_op(vm_gctx *c, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a) {
  if (c->st != GRACE_OK) return NULL;
  for (int i = 0; i < nin; i++)
    if (!in[i] && !grace_op_input_optional(op, i)) return NULL;
  grace_tensor *t = NULL;
  grace_status st = grace_run(c->vm, op, nin, in, a, 1, &t);
  if (st != GRACE_OK) { c->st = st; return NULL; }
  return gx_keep(c, t);
}

grace_tensor *gx_un(vm_gctx *c, grace_op op, grace_tensor *x) { return gx_op(c, op, 1, &x, NULL); }

grace_tensor *gx_bin(vm_gctx *c, grace_op op, grace_tensor *a, grace_tensor *b) {
  grace_tensor *in[2] = {a, b};
  return gx_op(c, op, 2, in, NULL);
}

grace_tensor *gx_num(vm_gctx *c, double v) {
  grace_tensor *t = NULL;
  if (c->st != GRACE_OK) return NULL;
  grace_status st = grace_tensor_scalar(c->vm, v, 0, &t);
  if (st != GRACE_OK) { c->st = st; return NULL; }
  return gx_keep(c, t);
}

grace_tensor *gx_muln(vm_gctx *c, grace_tensor *x, double v) { return gx_bin(c, GRACE_OP_MUL, x, gx_num(c, v)); }
grace_tensor *gx_addn(vm_gctx *c, grace_tensor *x, double v) { return gx_bin(c, GRACE_OP_ADD, x, gx_num(c, v)); }

grace_tensor *gx_full(vm_gctx *c, const grace_tensor *like, double v) {
  if (!like) return NULL;
  grace_attrs a = {0};
  a.nshape = like->ndim;
  for (int d = 0; d < like->ndim; d++) a.shape[d] = like->sizes[d];
  a.dtype = like->dtype;
  a.has_dtype = 1;
  a.device = like->storage->device;
  a.a = v;
  return gx_op(c, GRACE_OP_FULL, 0, NULL, &a);
}

grace_tensor *gx_cast(vm_gctx *c, grace_tensor *x, grace_dtype dt) {
  if (x && x->dtype == dt) return x;
  grace_attrs a = {0};
  a.dtype = dt;
  a.has_dtype = 1;
  return gx_op(c, GRACE_OP_CAST, 1, &x, &a);
}

grace_tensor *gx_where(vm_gctx *c, grace_tensor *cond, grace_tensor *a, grace_tensor *b) {
  grace_tensor *in[3] = {cond, a, b};
  return gx_op(c, GRACE_OP_WHERE, 3, in, NULL);
}

static grace_tensor *shaped(vm_gctx *c, grace_op op, grace_tensor *x, int ndim, const int64_t *sizes) {
  grace_attrs a = {0};
  a.nshape = ndim;
  for (int d = 0; d < ndim; d++) a.shape[d] = sizes[d];
  return gx_op(c, op, 1, &x, &a);
}
grace_tensor *gx_reshape(vm_gctx *c, grace_tensor *x, int ndim, const int64_t *sizes) {
  return shaped(c, GRACE_OP_RESHAPE, x, ndim, sizes);
}
grace_tensor *gx_expand(vm_gctx *c, grace_tensor *x, int ndim, const int64_t *sizes) {
  return shaped(c, GRACE_OP_EXPAND, x, ndim, sizes);
}

grace_tensor *gx_transpose(vm_gctx *c, grace_tensor *x, int d0, int d1) {
  grace_attrs a = {0};
  a.ndims = 2;
  a.dims[0] = d0;
  a.dims[1] = d1;
  return gx_op(c, GRACE_OP_TRANSPOSE, 1, &x, &a);
}

grace_tensor *gx_unsqueeze(vm_gctx *c, grace_tensor *x, int d) {
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = d;
  return gx_op(c, GRACE_OP_UNSQUEEZE, 1, &x, &a);
}

grace_tensor *gx_sum(vm_gctx *c, grace_tensor *x, int ndims, const int64_t *dims, int keepdim) {
  grace_attrs a = {0};
  a.ndims = ndims;
  for (int k = 0; k < ndims; k++) a.dims[k] = dims[k];
  a.keepdim = keepdim;
  return gx_op(c, GRACE_OP_SUM, 1, &x, &a);
}

grace_tensor *gx_sum1(vm_gctx *c, grace_tensor *x, int dim, int keepdim) {
  int64_t d = dim;
  return gx_sum(c, x, 1, &d, keepdim);
}

grace_tensor *gx_sum_to(vm_gctx *c, grace_tensor *g, const grace_tensor *like) {
  if (!g || !like) return NULL;
  int lead = g->ndim - like->ndim, nd = 0;
  int64_t dims[GRACE_MAX_DIMS];
  if (lead < 0) { gx_fail(c, GRACE_EINTERNAL, "backward of %s: a gradient of fewer dims than its input",
                          grace_op_name(c->n->op)); return NULL; }
  for (int d = 0; d < g->ndim; d++)
    if (d < lead || (like->sizes[d - lead] == 1 && g->sizes[d] != 1)) dims[nd++] = d;
  grace_tensor *s = nd ? gx_sum(c, g, nd, dims, 1) : g;
  if (s && (s->ndim != like->ndim || lead)) s = gx_reshape(c, s, like->ndim, like->sizes);
  return gx_cast(c, s, like->dtype);
}

grace_tensor *gx_unreduce(vm_gctx *c, grace_tensor *g, const grace_tensor *x, const grace_attrs *a) {
  if (!g || !x) return NULL;
  if (!a->keepdim) {
    int64_t shape[GRACE_MAX_DIMS];
    int red[GRACE_MAX_DIMS] = {0};
    for (int k = 0; k < a->ndims; k++) {
      int d;
      if (grace_norm_dim(c->vm, grace_op_name(c->n->op), a->dims[k], x->ndim, &d) != GRACE_OK) {
        c->st = GRACE_EARG;
        return NULL;
      }
      red[d] = 1;
    }
    for (int d = 0; d < x->ndim; d++) shape[d] = a->ndims == 0 || red[d] ? 1 : x->sizes[d];
    g = gx_reshape(c, g, x->ndim, shape);
  }
  return gx_expand(c, g, x->ndim, x->sizes);
}

grace_tensor *gx_index_add(vm_gctx *c, const grace_tensor *like, grace_tensor *values, int nidx,
                           grace_tensor *const *idx) {
  grace_tensor *dst = gx_full(c, like, 0), *in[2 + GRACE_MAX_DIMS];
  if (!dst || !values || nidx > GRACE_MAX_DIMS) return NULL;
  in[0] = dst;
  in[1] = values;
  for (int k = 0; k < nidx; k++) if (!(in[2 + k] = idx[k])) return NULL;
  grace_attrs a = {0};
  a.flag = 1;
  grace_status st = grace_run(c->vm, GRACE_OP_INDEX_PUT_, 2 + nidx, in, &a, 0, NULL);
  if (st != GRACE_OK) { c->st = st; return NULL; }
  return dst;
}
