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

/* cat: PyTorch's rules. A 0-d input is an error; a 1-d input of size 0 is skipped (the legacy rule PyTorch 2.x
 * keeps: "or be a 1-D empty tensor with size (0,)") but still takes part in the result dtype; the others agree
 * in every dim but the cat dim, which the first of them numbers. Eager cat (vm_check_cat) takes these rules. */
static grace_status infer_cat(grace_vm *vm, int nin, const ir_type *const *in, const grace_attrs *a, ir_type *o) {
  int ref = -1, dim, b = grace_index_base(vm);
  int64_t dim_attr = a->ndims ? a->dims[0] : 0;
  grace_status st;
  for (int i = 0; i < nin; i++)
    if (in[i]->ndim == 0)
      return grace_set_error(vm, GRACE_ESHAPE, "cat: a 0-d tensor (input %d) cannot be concatenated", i + 1);
  for (int i = 0; i < nin && ref < 0; i++) if (!ir_cat_skips(in[i])) ref = i;
  *o = *in[ref < 0 ? 0 : ref];
  o->wrapped = 0;
  o->dtype = result_type(nin, in);
  if (ref < 0) return norm_dim(vm, "cat", dim_attr, 1, &dim);   /* only [0] inputs: the result is [0] */
  const ir_type *r = in[ref];
  if ((st = norm_dim(vm, "cat", dim_attr, r->ndim, &dim))) return st;
  o->sizes[dim] = 0;
  o->sym[dim] = 0;
  for (int i = 0; i < nin; i++) {
    const ir_type *t = in[i];
    if (ir_cat_skips(t)) continue;
    if (t->ndim != r->ndim)
      return grace_set_error(vm, GRACE_ESHAPE, "cat: tensors must have the same number of dims: got shapes %s and %s "
                             "(input %d)", SHAPE(r), SHAPE(t), i + 1);
    for (int d = 0; d < r->ndim; d++)
      if (d != dim && t->sizes[d] != r->sizes[d])
        return grace_set_error(vm, GRACE_ESHAPE, "cat: sizes must match except in dim %d: got shapes %s and %s (input %d)",
                               dim + b, SHAPE(r), SHAPE(t), i + 1);
    o->sizes[dim] += t->sizes[dim];
  }
  return GRACE_OK;
}

/* stack: inputs of one shape; the new dim anywhere from before the first dim to after the last. */
static grace_status infer_stack(grace_vm *vm, int nin, const ir_type *const *in, const grace_attrs *a, ir_type *o) {
  const ir_type *r = in[0];
  int nd = r->ndim, b = grace_index_base(vm);
  int64_t dim_attr = a->ndims ? a->dims[0] : 0;
  if (nd >= GRACE_MAX_DIMS)
    return grace_set_error(vm, GRACE_ESHAPE, "stack: inputs of shape %s already have %d dims, the most supported",
                           SHAPE(r), GRACE_MAX_DIMS);
  if (dim_attr < -nd - 1 || dim_attr > nd)
    return grace_set_error(vm, GRACE_EINDEX, "stack: dim %lld out of range for stacking %d-d tensors (expected %d to %d, "
                           "or %d to -1)", vm_user_index(dim_attr, b), nd, b, nd + b, -nd - 1);
  int dim = (int)(dim_attr < 0 ? dim_attr + nd + 1 : dim_attr);
  for (int i = 1; i < nin; i++) {
    int same = in[i]->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = in[i]->sizes[d] == r->sizes[d];
    if (!same)
      return grace_set_error(vm, GRACE_ESHAPE, "stack: expects each tensor to be the same shape, got %s and %s (input %d)",
                             SHAPE(r), SHAPE(in[i]), i + 1);
  }
  *o = *r;
  o->wrapped = 0;
  o->dtype = result_type(nin, in);
  for (int d = nd; d > dim; d--) { o->sizes[d] = o->sizes[d - 1]; o->sym[d] = o->sym[d - 1]; }
  o->sizes[dim] = nin;
  o->sym[dim] = 0;
  o->ndim = nd + 1;
  return GRACE_OK;
}

/* repeat: a count per dim of x at least (more add leading dims), none negative. */
static grace_status infer_repeat(grace_vm *vm, const ir_type *x, const grace_attrs *a, ir_type *o) {
  int nr = a->nshape, nd = x->ndim;
  if (nr < nd || nr > GRACE_MAX_DIMS)
    return grace_set_error(vm, GRACE_ESHAPE, "repeat: %d repeat counts given for a tensor of shape %s (need at least %d)",
                           nr, SHAPE(x), nd);
  *o = *x;
  o->wrapped = 0;
  o->ndim = nr;
  for (int d = 0; d < nr; d++) {
    int xd = d - (nr - nd);
    if (a->shape[d] < 0)
      return grace_set_error(vm, GRACE_EARG, "repeat: repeat counts must be >= 0, got %lld in dim %d",
                             (long long)a->shape[d], d + grace_index_base(vm));
    if (!vm_mul_ok(xd >= 0 ? x->sizes[xd] : 1, a->shape[d], &o->sizes[d]))
      return grace_set_error(vm, GRACE_ESHAPE, "repeat: %lld repeats of shape %s in dim %d are too many",
                             (long long)a->shape[d], SHAPE(x), d + grace_index_base(vm));
    o->sym[d] = xd >= 0 && a->shape[d] == 1 ? x->sym[xd] : 0;
  }
  return GRACE_OK;
}

/* masked_select and nonzero: how many elements are selected depends on the values, which types do not have, so
 * the size given is the most there can be (the backends make the exact one). A trace never records these ops
 * (vm_trace_record refuses them), so no program holds this bound. */
static grace_status infer_data_shape(grace_vm *vm, grace_op op, int nin, const ir_type *const *in, ir_type *o) {
  const ir_type *x = in[0];
  grace_status st;
  *o = *x;
  o->wrapped = 0;
  memset(o->sym, 0, sizeof o->sym);
  if (op == GRACE_OP_NONZERO) {
    o->dtype = GRACE_INT64;
    o->ndim = 2;
    o->sizes[0] = 1;
    for (int d = 0; d < x->ndim; d++) o->sizes[0] *= x->sizes[d];
    o->sizes[1] = x->ndim;
    return GRACE_OK;
  }
  if (nin != 2) return grace_set_error(vm, GRACE_EARG, "masked_select: expected an input and a mask");
  if (in[1]->dtype != GRACE_BOOL)
    return grace_set_error(vm, GRACE_EDTYPE, "masked_select: mask must be bool, got %s (shape %s)",
                           grace_dtype_name(in[1]->dtype), SHAPE(in[1]));
  ir_type b;
  if ((st = ir_broadcast(vm, "masked_select", 2, in, &b))) return st;
  o->ndim = 1;
  o->sizes[0] = 1;
  for (int d = 0; d < b.ndim; d++) o->sizes[0] *= b.sizes[d];
  return GRACE_OK;
}

/* index_put_(dst, values, indices...): either index tensors of integers, broadcast together to a shape B, over
 * dst's first k dims, with values broadcast to B + dst's other dims; or one bool mask over dst's first dims (its
 * sizes those dims' sizes), with values broadcast to [count] + dst's other dims, count known only at run time. */
grace_status ir_infer_index_put(grace_vm *vm, int nin, const ir_type *const *in, ir_type *o) {
  const ir_type *dst = in[0], *v = in[1];
  int k = nin - 2, nd = dst->ndim;
  grace_status st;
  if (k < 1) return grace_set_error(vm, GRACE_EARG, "index_put_: expected at least one index tensor");
  if (k > nd)
    return grace_set_error(vm, GRACE_EINDEX, "index_put_: %d index tensors for a destination of %d dims (shape %s)", k, nd,
                           SHAPE(dst));
  ir_type sel;
  int nsel;
  for (int i = 0; i < k; i++) {
    const ir_type *ix = in[2 + i];
    if (ix->dtype == GRACE_BOOL && k > 1)
      return grace_set_error(vm, GRACE_EARG, "index_put_: a bool mask must be the only index, got %d indices", k);
    if (ix->dtype != GRACE_BOOL && ix->dtype != GRACE_INT64 && ix->dtype != GRACE_INT32)
      return grace_set_error(vm, GRACE_EDTYPE, "index_put_: index %d must be int64, int32 or bool, got %s (shape %s)",
                             i + grace_index_base(vm), grace_dtype_name(ix->dtype), SHAPE(ix));
  }
  const ir_type *m = in[2];
  if (m->dtype == GRACE_BOOL) {
    if (m->ndim > nd || m->ndim == 0)
      return grace_set_error(vm, GRACE_ESHAPE, "index_put_: a mask of shape %s cannot index a destination of shape %s",
                             SHAPE(m), SHAPE(dst));
    for (int d = 0; d < m->ndim; d++)
      if (m->sizes[d] != dst->sizes[d])
        return grace_set_error(vm, GRACE_ESHAPE, "index_put_: mask of shape %s does not match the destination's shape %s "
                               "at dim %d (%lld against %lld)", SHAPE(m), SHAPE(dst), d + grace_index_base(vm),
                               (long long)m->sizes[d], (long long)dst->sizes[d]);
    k = m->ndim;
    memset(&sel, 0, sizeof sel);
    sel.ndim = 1;
    sel.sizes[0] = v->ndim > nd - k ? v->sizes[0] : 1;   /* the count is checked when it is known */
  } else if ((st = ir_broadcast(vm, "index_put_", k, in + 2, &sel))) {
    return st;
  }
  nsel = sel.ndim;
  if (nsel + nd - k > GRACE_MAX_DIMS)
    return grace_set_error(vm, GRACE_ESHAPE, "index_put_: the selection has more than %d dims", GRACE_MAX_DIMS);
  for (int d = k; d < nd; d++) { sel.sizes[sel.ndim] = dst->sizes[d]; sel.sym[sel.ndim++] = dst->sym[d]; }
  const ir_type *both[2] = {&sel, v};
  ir_type b;
  if ((st = ir_broadcast(vm, "index_put_", 2, both, &b)) == GRACE_OK &&
      (b.ndim != sel.ndim || memcmp(b.sizes, sel.sizes, sizeof(int64_t) * (size_t)b.ndim)))
    st = GRACE_ESHAPE;
  if (st != GRACE_OK)
    return grace_set_error(vm, GRACE_ESHAPE, "index_put_: values of shape %s do not broadcast to the selection's shape %s",
                           SHAPE(v), SHAPE(&sel));
  *o = *dst;
  o->wrapped = 0;
  return GRACE_OK;
}

grace_status ir_infer_move(grace_vm *vm, grace_op op, int nin, const ir_type *const *in, const grace_attrs *a, ir_type *o) {
  const char *name = grace_op_name(op);
  const ir_type *x = in[0];
  int d = 0;
  grace_status st;
  *o = *x;
  o->wrapped = 0;
  switch (op) {
  case GRACE_OP_CONTIGUOUS: case GRACE_OP_CLONE: return GRACE_OK;
  case GRACE_OP_TRIU: case GRACE_OP_TRIL:
    if (x->ndim < 2)
      return grace_set_error(vm, GRACE_ESHAPE, "%s: input must have at least 2 dims, got shape %s", name, SHAPE(x));
    return GRACE_OK;
  case GRACE_OP_TO_DEVICE: o->device = a->device; return GRACE_OK;
  case GRACE_OP_CAT: return infer_cat(vm, nin, in, a, o);
  case GRACE_OP_STACK: return infer_stack(vm, nin, in, a, o);
  case GRACE_OP_INDEX_SELECT: case GRACE_OP_GATHER: case GRACE_OP_SCATTER: case GRACE_OP_EMBEDDING: {
    const ir_type *idx = op == GRACE_OP_EMBEDDING ? in[0] : in[1];
    if (op != GRACE_OP_EMBEDDING && (st = norm_dim(vm, name, a->ndims ? a->dims[0] : 0, x->ndim, &d))) return st;
    if (idx->dtype != GRACE_INT64 && idx->dtype != GRACE_INT32)
      return grace_set_error(vm, GRACE_EDTYPE, "%s: %s must be int64 or int32, got %s (shape %s)", name,   /* as vm_check_index_dtype */
                             op == GRACE_OP_EMBEDDING ? "ids" : "index", grace_dtype_name(idx->dtype), SHAPE(idx));
    if (op == GRACE_OP_EMBEDDING) {
      const ir_type *w = in[1];
      if (w->ndim != 2)
        return grace_set_error(vm, GRACE_ESHAPE, "embedding: weight must be 2-d [rows, dim], got shape %s", SHAPE(w));
      if (idx->ndim >= GRACE_MAX_DIMS)
        return grace_set_error(vm, GRACE_ESHAPE, "embedding: ids of shape %s leave no room for the embedding dim", SHAPE(idx));
      *o = *idx;
      o->dtype = w->dtype; o->device = w->device;
      o->sizes[o->ndim] = w->sizes[1]; o->sym[o->ndim++] = w->sym[1];
      return GRACE_OK;
    }
    if (op == GRACE_OP_INDEX_SELECT) {   /* vm_check_index_select's rules */
      int64_t n = idx->ndim ? idx->sizes[0] : 1;
      if (idx->ndim > 1) return grace_set_error(vm, GRACE_ESHAPE, "index_select: index must be 1-d or 0-d, got shape %s", SHAPE(idx));
      if (x->ndim == 0 && n != 1)
        return grace_set_error(vm, GRACE_ESHAPE, "index_select: indexing a 0-d tensor takes exactly one index, got %lld",
                               (long long)n);
      if (x->ndim) { o->sizes[d] = idx->ndim ? idx->sizes[0] : 1; o->sym[d] = idx->ndim ? idx->sym[0] : 0; }
    } else if (op == GRACE_OP_SCATTER && in[2]->ndim != 0 && in[2]->dtype != x->dtype) {   /* a 0-d src converts */
      return grace_set_error(vm, GRACE_EDTYPE, "scatter: expected src to have the input's dtype %s, got %s",
                             grace_dtype_name(x->dtype), grace_dtype_name(in[2]->dtype));
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
  case GRACE_OP_REPEAT: return infer_repeat(vm, x, a, o);
  case GRACE_OP_MASKED_SELECT: case GRACE_OP_NONZERO: return infer_data_shape(vm, op, nin, in, o);
  default:
    return grace_set_error(vm, GRACE_EINTERNAL, "%s: no type rule", name);
  }
}

/* Views: the rules are base's (vm_view_shape), which eager views run, so both say the same words. A result dim
 * that is an input dim unchanged keeps its symbol. */
grace_status ir_infer_view(grace_vm *vm, grace_op op, const ir_type *x, const grace_attrs *a, ir_type *o) {
  int from[GRACE_MAX_DIMS];
  *o = *x;
  o->wrapped = 0;
  grace_status st = vm_view_shape(vm, op, x->ndim, x->sizes, a, &o->ndim, o->sizes, from);
  if (st != GRACE_OK) return st;
  for (int d = 0; d < o->ndim; d++) o->sym[d] = from[d] >= 0 ? x->sym[from[d]] : 0;
  return GRACE_OK;
}

/* Creation ops: the rules are vm_create_shape's (ir_check.c), which every backend's eager creation calls. */
grace_status ir_infer_create(grace_vm *vm, grace_op op, const grace_attrs *a, ir_type *o) {
  memset(o, 0, sizeof *o);
  o->device = a->device;
  return vm_create_shape(vm, op, a, &o->dtype, &o->ndim, o->sizes);
}
