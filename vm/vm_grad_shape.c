/* vm_grad_shape.c: the derivatives of the views and the data movement ops (include/grace_ops.h's VIEW and MOVE
 * kinds; embedding's is with the nn ops, vm_grad_nn.c). Each routes the gradient back to where the elements came
 * from: the inverse view, a slice of the gradient, or zeros with the gradient written or added at the positions
 * read. nonzero gives integers: no gradient, never recorded. */
#include "vm/vm_grad.h"

#define G(op, a, b) gx_bin(c, GRACE_OP_##op, a, b)

static grace_tensor *slice(vm_gctx *c, grace_op op, grace_tensor *g, int64_t dim, int64_t start, int64_t len) {
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = dim;
  a.i0 = start;
  a.i1 = len;
  return gx_op(c, op, 1, &g, &a);
}

/* g (of a narrow or select of like) placed into zeros shaped as like. */
static grace_tensor *unslice(vm_gctx *c, grace_tensor *base, grace_tensor *g, const grace_attrs *va, int select) {
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = va->ndims ? va->dims[0] : 0;
  a.i0 = va->i0;
  a.i1 = select ? 1 : va->i1;
  a.flag = select;
  grace_tensor *in[2] = {base, g};
  return gx_op(c, GRACE_OP_SLICE_SCATTER, 2, in, &a);
}

/* An arange over n index positions (in the VM's index base), shaped to broadcast along dim d of ndim dims. */
static grace_tensor *positions(vm_gctx *c, int64_t n, int d, int ndim, grace_device dev) {
  grace_attrs a = {0};
  a.device = dev;   /* beside the index they go with */
  int base = grace_index_base(c->vm);
  a.a = base;
  a.b = (double)(n + base);
  a.c = 1;
  a.dtype = GRACE_INT64;
  a.has_dtype = 1;
  a.nshape = 1;
  a.shape[0] = n;
  int64_t shape[GRACE_MAX_DIMS];
  for (int k = 0; k < ndim; k++) shape[k] = k == d ? n : 1;
  return gx_reshape(c, gx_op(c, GRACE_OP_ARANGE, 0, NULL, &a), ndim, shape);
}

static int norm(vm_gctx *c, int64_t dim, int ndim) {
  int d = 0;
  if (grace_norm_dim(c->vm, grace_op_name(c->n->op), dim, ndim, &d) != GRACE_OK) c->st = GRACE_EARG;
  return d;
}

/* gather(x, idx, dim): g added into zeros at (i0, .., idx[..], .., in), the other coordinates their own positions. */
static grace_tensor *ungather(vm_gctx *c, const grace_tensor *x, grace_tensor *idx, grace_tensor *g, int64_t dim) {
  if (!idx) return NULL;
  int d = norm(c, dim, x->ndim);
  grace_tensor *at[GRACE_MAX_DIMS];
  for (int k = 0; k < x->ndim; k++)
    at[k] = k == d ? idx : positions(c, idx->sizes[k], k, x->ndim, idx->storage->device);
  return gx_index_add(c, x, g, x->ndim, at);
}

/* repeat: the copies of each dim summed, one dim at a time, as [before, repeats, size * after]. */
static grace_tensor *unrepeat(vm_gctx *c, grace_tensor *g, const grace_tensor *x, const grace_attrs *a) {
  int lead = a->nshape - x->ndim;
  int64_t cur[GRACE_MAX_DIMS];
  for (int d = 0; d < a->nshape; d++) cur[d] = g ? g->sizes[d] : 0;
  for (int d = 0; d < a->nshape && g; d++) {
    int64_t r = a->shape[d], before = 1, after = 1;
    if (r == 1) continue;
    for (int k = 0; k < d; k++) before *= cur[k];
    for (int k = d + 1; k < a->nshape; k++) after *= cur[k];
    cur[d] /= r;
    int64_t three[3] = {before, r, cur[d] * after};
    g = gx_reshape(c, gx_sum1(c, gx_reshape(c, g, 3, three), 1, 0), a->nshape, cur);
  }
  (void)lead;
  return gx_reshape(c, g, x->ndim, x->sizes);
}

static grace_status many(vm_gctx *c, grace_tensor *g, grace_tensor **gin) {
  const grace_attrs *a = &c->n->attrs;
  int64_t off = 0;
  int d = c->n->op == GRACE_OP_CAT ? norm(c, a->dims[0], c->n->in[0]->ndim) : 0;
  for (int i = 0; i < c->n->nin && c->st == GRACE_OK; i++) {
    const grace_tensor *x = c->n->in[i];
    if (c->n->op == GRACE_OP_STACK) {
      if (vm_gneeds(c->n, i)) gin[i] = slice(c, GRACE_OP_SELECT, g, a->dims[0], i, 0);
      continue;
    }
    if (x->ndim == 1 && x->sizes[0] == 0 && g->ndim != 1) continue;   /* an empty 1-d piece cat skips */
    if (vm_gneeds(c->n, i)) gin[i] = slice(c, GRACE_OP_NARROW, g, d, off, x->sizes[d]);
    off += x->sizes[d];
  }
  return c->st;
}

grace_status vm_vjp_shape(vm_gctx *c, grace_tensor *const *gout, grace_tensor **gin) {
  const grace_attrs *a = &c->n->attrs;
  const grace_tensor *x = c->n->in[0];   /* for its shape: views and moves need no values but indices */
  grace_tensor *g = gout[0];
  switch (c->n->op) {
  case GRACE_OP_RESHAPE: case GRACE_OP_VIEW: case GRACE_OP_SQUEEZE: case GRACE_OP_UNSQUEEZE:
    gin[0] = gx_reshape(c, g, x->ndim, x->sizes);
    break;
  case GRACE_OP_TRANSPOSE: gin[0] = gx_transpose(c, g, (int)a->dims[0], (int)a->dims[1]); break;
  case GRACE_OP_PERMUTE: {
    grace_attrs inv = {0};
    inv.ndims = x->ndim;
    for (int k = 0; k < x->ndim; k++) inv.dims[norm(c, a->dims[k], x->ndim)] = k;
    gin[0] = gx_op(c, GRACE_OP_PERMUTE, 1, &g, &inv);
    break;
  }
  case GRACE_OP_EXPAND: gin[0] = gx_sum_to(c, g, x); break;
  case GRACE_OP_NARROW: case GRACE_OP_SELECT:
    gin[0] = unslice(c, gx_full(c, x, 0), g, a, c->n->op == GRACE_OP_SELECT);
    break;
  case GRACE_OP_CONTIGUOUS: case GRACE_OP_CLONE: gin[0] = g; break;
  case GRACE_OP_TO_DEVICE: {
    grace_attrs to = {0};
    to.device = x->storage->device;
    gin[0] = gx_op(c, GRACE_OP_TO_DEVICE, 1, &g, &to);
    break;
  }
  case GRACE_OP_CAT: case GRACE_OP_STACK: return many(c, g, gin);
  case GRACE_OP_INDEX_SELECT: {   /* the selected dim moved first, where index_put_ indexes */
    int d = norm(c, a->ndims ? a->dims[0] : 0, x->ndim);
    grace_tensor *idx = gx_in(c, 1);
    if (d == 0) { gin[0] = gx_index_add(c, x, g, 1, &idx); break; }
    grace_tensor *gt = gx_transpose(c, g, 0, d), *xt = gx_transpose(c, gx_full(c, x, 0), 0, d);
    gin[0] = gx_transpose(c, gx_index_add(c, xt, gt, 1, &idx), 0, d);
    break;
  }
  case GRACE_OP_GATHER: gin[0] = ungather(c, x, gx_in(c, 1), g, a->ndims ? a->dims[0] : 0); break;
  case GRACE_OP_SCATTER: {   /* x, index, src: the written positions take src's gradient */
    grace_tensor *idx = gx_in(c, 1);
    const grace_tensor *src = c->n->in[2];
    grace_attrs ga = {0};
    ga.ndims = 1;
    ga.dims[0] = a->ndims ? a->dims[0] : 0;
    if (vm_gneeds(c->n, 0)) {
      grace_tensor *in[3] = {g, idx, gx_full(c, src, 0)};
      gin[0] = gx_op(c, GRACE_OP_SCATTER, 3, in, &ga);
    }
    if (vm_gneeds(c->n, 2)) {
      if (idx && (idx->ndim != src->ndim || memcmp(idx->sizes, src->sizes, sizeof *idx->sizes * (size_t)idx->ndim)))
        return gx_fail(c, GRACE_EUNSUPPORTED, "backward of scatter: the gradient of src needs src (shape %s) of the "
                       "index's shape %s", VM_SHAPE(src), VM_SHAPE(idx));
      grace_tensor *in[2] = {g, idx};
      gin[2] = gx_op(c, GRACE_OP_GATHER, 2, in, &ga);
    }
    break;
  }
  case GRACE_OP_MASKED_SELECT: {
    grace_tensor *mask = gx_un(c, GRACE_OP_CONTIGUOUS, gx_expand(c, gx_in(c, 1), x->ndim, x->sizes));
    gin[0] = gx_index_add(c, x, g, 1, &mask);
    break;
  }
  case GRACE_OP_TRIU: case GRACE_OP_TRIL: gin[0] = gx_op(c, c->n->op, 1, &g, a); break;
  case GRACE_OP_REPEAT: gin[0] = unrepeat(c, g, x, a); break;
  case GRACE_OP_SLICE_SCATTER: {   /* base, src */
    const grace_tensor *src = c->n->in[1];
    if (vm_gneeds(c->n, 0)) gin[0] = unslice(c, g, gx_full(c, src, 0), a, a->flag);
    if (vm_gneeds(c->n, 1))
      gin[1] = slice(c, a->flag ? GRACE_OP_SELECT : GRACE_OP_NARROW, g, a->ndims ? a->dims[0] : 0, a->i0, a->i1);
    break;
  }
  default: return vm_vjp_none(c);
  }
  return c->st;
}
