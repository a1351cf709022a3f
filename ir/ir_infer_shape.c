/* ir_infer_shape.c: result types of the views, the data-movement ops and the creation ops (ir_infer.c has the
 * other kinds). Where eager execution needs more than types (strides, offsets), it calls these rules through
 * vm_infer_tensors (ir_check.c) or shares a base/ helper with them, so each check is written once. */
#include <string.h>
#include "ir/ir_infer.h"
#include "ir/ir_check.h"

#define SHAPE IR_SHAPE
#define norm_dim grace_norm_dim
#define broadcast ir_broadcast
#define result_type ir_result_type

grace_status ir_infer_move(grace_vm *vm, grace_op op, int nin, const ir_type *const *in, const grace_attrs *a, ir_type *o) {
  const char *name = grace_op_name(op);
  const ir_type *x = in[0];
  int d = 0;
  grace_status st;
  *o = *x;
  o->wrapped = 0;
  switch (op) {
  case GRACE_OP_CONTIGUOUS: case GRACE_OP_CLONE: case GRACE_OP_TRIU: case GRACE_OP_TRIL: return GRACE_OK;
  case GRACE_OP_TO_DEVICE: o->device = a->device; return GRACE_OK;
  case GRACE_OP_CAT: case GRACE_OP_STACK: {
    if (op == GRACE_OP_STACK) {
      if ((st = norm_dim(vm, name, a->ndims ? a->dims[0] : 0, x->ndim + 1, &d))) return st;
    } else if ((st = norm_dim(vm, name, a->ndims ? a->dims[0] : 0, x->ndim, &d))) return st;
    if (op == GRACE_OP_CAT && x->ndim == 0) return grace_set_error(vm, GRACE_ESHAPE, "cat: zero-dimensional tensors cannot be concatenated");
    int64_t total = 0;
    for (int i = 0; i < nin; i++) {
      const ir_type *t = in[i];
      int same = t->ndim == x->ndim;
      for (int k = 0; same && k < x->ndim; k++) same = (op == GRACE_OP_CAT && k == d) || t->sizes[k] == x->sizes[k];
      if (!same)
        return grace_set_error(vm, GRACE_ESHAPE, "%s: tensor %d has shape %s, expected %s%s", name, i + grace_index_base(vm),
                               SHAPE(t), SHAPE(x), op == GRACE_OP_CAT ? " except in the cat dim" : "");
      total += op == GRACE_OP_CAT ? t->sizes[d] : 1;
    }
    o->dtype = result_type(nin, in);
    if (op == GRACE_OP_CAT) { o->sizes[d] = total; o->sym[d] = 0; }
    else {
      for (int k = o->ndim; k > d; k--) { o->sizes[k] = o->sizes[k - 1]; o->sym[k] = o->sym[k - 1]; }
      o->sizes[d] = nin; o->sym[d] = 0; o->ndim++;
    }
    return GRACE_OK;
  }
  case GRACE_OP_INDEX_SELECT: case GRACE_OP_GATHER: case GRACE_OP_SCATTER: case GRACE_OP_EMBEDDING: {
    const ir_type *idx = op == GRACE_OP_EMBEDDING ? in[0] : in[1];
    if (idx->dtype != GRACE_INT64 && idx->dtype != GRACE_INT32)
      return grace_set_error(vm, GRACE_EDTYPE, "%s: %s must be int64 or int32, got %s (shape %s)", name,   /* as vm_check_index_dtype */
                             op == GRACE_OP_EMBEDDING ? "ids" : "index", grace_dtype_name(idx->dtype), SHAPE(idx));
    if (op == GRACE_OP_EMBEDDING) {
      const ir_type *w = in[1];
      if (w->ndim != 2) return grace_set_error(vm, GRACE_ESHAPE, "embedding: weight must be 2-d, got shape %s", SHAPE(w));
      if (idx->ndim >= GRACE_MAX_DIMS) return grace_set_error(vm, GRACE_ESHAPE, "embedding: too many dims");
      *o = *idx;
      o->dtype = w->dtype; o->device = w->device;
      o->sizes[o->ndim] = w->sizes[1]; o->sym[o->ndim++] = w->sym[1];
      return GRACE_OK;
    }
    if ((st = norm_dim(vm, name, a->ndims ? a->dims[0] : 0, x->ndim, &d))) return st;
    if (op == GRACE_OP_INDEX_SELECT) {
      if (idx->ndim > 1) return grace_set_error(vm, GRACE_ESHAPE, "index_select: index must be 0-d or 1-d, got shape %s", SHAPE(idx));
      if (x->ndim) { o->sizes[d] = idx->ndim ? idx->sizes[0] : 1; o->sym[d] = idx->ndim ? idx->sym[0] : 0; }
    } else if (op == GRACE_OP_GATHER) {
      if (idx->ndim != x->ndim)
        return grace_set_error(vm, GRACE_ESHAPE, "gather: index (shape %s) must have the same number of dims as the input "
                               "(shape %s)", SHAPE(idx), SHAPE(x));   /* as vm_check_gather_shapes */
      memcpy(o->sizes, idx->sizes, sizeof o->sizes);
      memcpy(o->sym, idx->sym, sizeof o->sym);
    }
    return GRACE_OK;
  }
  case GRACE_OP_SLICE_SCATTER: {
    ir_type view;
    st = ir_infer_view(vm, a->flag ? GRACE_OP_SELECT : GRACE_OP_NARROW, x, a, &view);
    if (st != GRACE_OK) return st;
    const ir_type *src = in[1], *both[2] = {&view, src};
    ir_type b;
    if ((st = broadcast(vm, name, 2, both, &b))) return st;
    if (b.ndim != view.ndim || memcmp(b.sizes, view.sizes, sizeof(int64_t) * (size_t)b.ndim))
      return grace_set_error(vm, GRACE_ESHAPE, "slice_scatter: source of shape %s does not fit the region %s", SHAPE(src), SHAPE(&view));
    return GRACE_OK;
  }
  case GRACE_OP_REPEAT: {
    if (a->nshape < x->ndim)
      return grace_set_error(vm, GRACE_ESHAPE, "repeat: %d repeats given for a %d-d tensor (need at least %d)", a->nshape, x->ndim, x->ndim);
    o->ndim = a->nshape;
    for (int k = 0; k < a->nshape; k++) {
      int xd = k - (a->nshape - x->ndim);
      if (a->shape[k] < 0) return grace_set_error(vm, GRACE_EARG, "repeat: negative repeat %lld", (long long)a->shape[k]);
      o->sizes[k] = (xd >= 0 ? x->sizes[xd] : 1) * a->shape[k];
      o->sym[k] = 0;
    }
    return GRACE_OK;
  }
  default:
    return grace_set_error(vm, GRACE_EINTERNAL, "%s: no type rule", name);
  }
}

grace_status ir_infer_view(grace_vm *vm, grace_op op, const ir_type *x, const grace_attrs *a, ir_type *o) {
  const char *name = grace_op_name(op);
  int d0, d1;
  grace_status st;
  *o = *x;
  o->wrapped = 0;
  switch (op) {
  case GRACE_OP_RESHAPE: case GRACE_OP_VIEW: {
    int64_t numel = 1, known = 1;
    int infer = -1;
    for (int d = 0; d < x->ndim; d++) numel *= x->sizes[d];
    if (a->nshape < 0 || a->nshape > GRACE_MAX_DIMS) return grace_set_error(vm, GRACE_EARG, "%s: too many dims", name);
    o->ndim = a->nshape;
    for (int d = 0; d < a->nshape; d++) {
      o->sizes[d] = a->shape[d]; o->sym[d] = 0;
      if (a->shape[d] == -1) {
        if (infer >= 0) return grace_set_error(vm, GRACE_EARG, "%s: only one dimension can be -1", name);
        infer = d;
      } else if (a->shape[d] < 0) return grace_set_error(vm, GRACE_EARG, "%s: invalid size %lld", name, (long long)a->shape[d]);
      else known *= a->shape[d];
    }
    if (infer >= 0 && known != 0 && numel % known == 0) { o->sizes[infer] = numel / known; known = numel; }
    if (known != numel)
      return grace_set_error(vm, GRACE_ESHAPE, "%s: shape %s is invalid for input of shape %s (%lld elements)", name,
                             SHAPE(o), SHAPE(x), (long long)numel);
    return GRACE_OK;
  }
  case GRACE_OP_TRANSPOSE:
    if (a->ndims != 2) return grace_set_error(vm, GRACE_EARG, "transpose: expected two dims");
    if ((st = norm_dim(vm, name, a->dims[0], x->ndim, &d0)) || (st = norm_dim(vm, name, a->dims[1], x->ndim, &d1))) return st;
    if (x->ndim) {
      o->sizes[d0] = x->sizes[d1]; o->sizes[d1] = x->sizes[d0];
      o->sym[d0] = x->sym[d1]; o->sym[d1] = x->sym[d0];
    }
    return GRACE_OK;
  case GRACE_OP_PERMUTE: {
    if (a->ndims != x->ndim) return grace_set_error(vm, GRACE_EARG, "permute: %d dims given for a tensor of shape %s", a->ndims, SHAPE(x));
    int seen[GRACE_MAX_DIMS] = {0};
    for (int d = 0; d < x->ndim; d++) {
      if ((st = norm_dim(vm, name, a->dims[d], x->ndim, &d0))) return st;
      if (seen[d0]++) return grace_set_error(vm, GRACE_EARG, "permute: dim %d repeated", d0 + grace_index_base(vm));
      o->sizes[d] = x->sizes[d0]; o->sym[d] = x->sym[d0];
    }
    return GRACE_OK;
  }
  case GRACE_OP_EXPAND:
    if (a->nshape < x->ndim || a->nshape > GRACE_MAX_DIMS)
      return grace_set_error(vm, GRACE_ESHAPE, "expand: cannot expand shape %s to %d dims", SHAPE(x), a->nshape);
    o->ndim = a->nshape;
    for (int d = 0; d < a->nshape; d++) {
      int xd = d - (a->nshape - x->ndim);
      int64_t want = a->shape[d];
      if (xd >= 0 && (want == -1 || want == x->sizes[xd])) { o->sizes[d] = x->sizes[xd]; o->sym[d] = x->sym[xd]; }
      else if ((xd < 0 || x->sizes[xd] == 1) && want >= 0) { o->sizes[d] = want; o->sym[d] = 0; }
      else return grace_set_error(vm, GRACE_ESHAPE, "expand: cannot expand shape %s (size %lld in dim %d)", SHAPE(x),
                                  (long long)(xd >= 0 ? x->sizes[xd] : -1), d + grace_index_base(vm));
    }
    return GRACE_OK;
  case GRACE_OP_NARROW: case GRACE_OP_SELECT: {
    if (x->ndim == 0) return grace_set_error(vm, GRACE_EARG, "%s: not possible on a 0-d tensor", name);
    if ((st = norm_dim(vm, name, a->ndims ? a->dims[0] : 0, x->ndim, &d0))) return st;
    int64_t n = x->sizes[d0], start = a->i0 < 0 ? a->i0 + n : a->i0;
    int b = grace_index_base(vm);
    if (op == GRACE_OP_SELECT) {
      if (start < 0 || start >= n)
        return grace_set_error(vm, GRACE_EINDEX, "select: index %lld out of range for dim %d of size %lld (shape %s)",
                               (long long)(a->i0 < 0 ? a->i0 : a->i0 + b), d0 + b, (long long)n, SHAPE(x));
      for (int d = d0; d < x->ndim - 1; d++) { o->sizes[d] = x->sizes[d + 1]; o->sym[d] = x->sym[d + 1]; }
      o->ndim--;
    } else {
      if (start < 0 || start > n || a->i1 < 0 || start + a->i1 > n)
        return grace_set_error(vm, GRACE_EINDEX, "narrow: start %lld with length %lld is out of range for dim %d of size %lld",
                               (long long)(a->i0 < 0 ? a->i0 : a->i0 + b), (long long)a->i1, d0 + b, (long long)n);
      o->sizes[d0] = a->i1; o->sym[d0] = 0;
    }
    return GRACE_OK;
  }
  case GRACE_OP_SQUEEZE: {
    int drop[GRACE_MAX_DIMS] = {0}, k = 0;
    if (a->ndims == 0) for (int d = 0; d < x->ndim; d++) drop[d] = x->sizes[d] == 1;
    for (int i = 0; i < a->ndims; i++) {
      if ((st = norm_dim(vm, name, a->dims[i], x->ndim, &d0))) return st;
      if (x->ndim && x->sizes[d0] == 1) drop[d0] = 1;
    }
    for (int d = 0; d < x->ndim; d++) if (!drop[d]) { o->sizes[k] = x->sizes[d]; o->sym[k++] = x->sym[d]; }
    o->ndim = k;
    return GRACE_OK;
  }
  case GRACE_OP_UNSQUEEZE:
    if (x->ndim >= GRACE_MAX_DIMS) return grace_set_error(vm, GRACE_EARG, "unsqueeze: already %d dims", x->ndim);
    if ((st = norm_dim(vm, name, a->ndims ? a->dims[0] : 0, x->ndim + 1, &d0))) return st;
    for (int d = x->ndim; d > d0; d--) { o->sizes[d] = x->sizes[d - 1]; o->sym[d] = x->sym[d - 1]; }
    o->sizes[d0] = 1; o->sym[d0] = 0;
    o->ndim++;
    return GRACE_OK;
  default:
    return grace_set_error(vm, GRACE_EINTERNAL, "%s: not a view op", name);
  }
}

grace_status ir_infer_create(grace_vm *vm, grace_op op, const grace_attrs *a, ir_type *o) {
  memset(o, 0, sizeof *o);
  o->device = a->device;
  o->dtype = a->has_dtype ? a->dtype : op == GRACE_OP_RANDINT ? GRACE_INT64 : GRACE_FLOAT32;
  o->ndim = a->nshape;
  memcpy(o->sizes, a->shape, sizeof o->sizes);
  if (op == GRACE_OP_ARANGE) {
    double n = a->c != 0 ? (a->b - a->a) / a->c : -1;
    if (!(n >= 0)) return grace_set_error(vm, GRACE_EARG, "arange: bounds %g to %g are inconsistent with step %g", a->a, a->b, a->c);
    o->ndim = 1;
    o->sizes[0] = (int64_t)n + ((double)(int64_t)n < n);
    if ((a->exact & 7) == 7 && !grace_dtype_is_float(o->dtype)) {   /* as the kernel: exact integer range */
      int64_t s = a->ia, e = a->ib, k = a->ic;
      o->sizes[0] = k > 0 ? (e > s ? (e - s + k - 1) / k : 0) : (s > e ? (s - e - k - 1) / -k : 0);
    }
  } else if (op == GRACE_OP_LINSPACE) { o->ndim = 1; o->sizes[0] = a->i0; }
  else if (op == GRACE_OP_EYE) { o->ndim = 2; if (a->nshape == 1) o->sizes[1] = a->shape[0]; }
  for (int d = 0; d < o->ndim; d++)
    if (o->sizes[d] < 0) return grace_set_error(vm, GRACE_EARG, "%s: negative size %lld", grace_op_name(op), (long long)o->sizes[d]);
  return GRACE_OK;
}

