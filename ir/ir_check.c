/* ir_check.c: argument checks and layout helpers shared by the CPU ops (cpu/cpu_shape.c, cpu_pointwise.c) and the
 * device ops (gpu/gpu_ops.c), next to shape inference (ir_infer.c), which some of them use. */
#include <math.h>
#include <string.h>
#include "ir/ir_check.h"
#include "ir/ir.h"

grace_status vm_check_index_dtype(grace_vm *vm, const char *op, const grace_tensor *idx, const char *what) {
  if (idx->dtype != GRACE_INT64 && idx->dtype != GRACE_INT32)
    return vm_err(vm, GRACE_EDTYPE, "%s: %s must be int64 or int32, got %s (shape %s)", op, what,
                  grace_dtype_name(idx->dtype), VM_SHAPE(idx));
  return GRACE_OK;
}

grace_status vm_check_gather_shapes(grace_vm *vm, const char *op, const grace_tensor *x, const grace_tensor *idx,
                                    const grace_tensor *src, int dim) {
  if (idx->ndim != x->ndim || (src && src->ndim != idx->ndim))
    return vm_err(vm, GRACE_ESHAPE, "%s: index (shape %s) must have the same number of dims as the input (shape %s)%s%s",
                  op, VM_SHAPE(idx), VM_SHAPE(x), src ? " and src " : "", src ? VM_SHAPE(src) : "");
  for (int d = 0; d < x->ndim; d++) {
    if (d != dim && idx->sizes[d] > x->sizes[d])
      return vm_err(vm, GRACE_ESHAPE, "%s: index shape %s is larger than input shape %s in dim %d", op, VM_SHAPE(idx),
                    VM_SHAPE(x), d + vm->index_base);
    if (src && idx->sizes[d] > src->sizes[d])
      return vm_err(vm, GRACE_ESHAPE, "%s: index shape %s is larger than src shape %s in dim %d", op, VM_SHAPE(idx),
                    VM_SHAPE(src), d + vm->index_base);
  }
  return GRACE_OK;
}

grace_status vm_check_writable(grace_vm *vm, const char *name, const grace_tensor *dst) {
  for (int d = 0; d < dst->ndim; d++)
    if (dst->strides[d] == 0 && dst->sizes[d] > 1)
      return vm_err(vm, GRACE_EARG, "%s: destination has overlapping (expanded) elements: shape %s, strides %s; "
                    "clone it first", name, VM_SHAPE(dst), vm_fmt_shape((char[128]){0}, 128, dst->ndim, dst->strides));
  return GRACE_OK;
}

/* Element range [lo, hi] of t within its storage. */
static void storage_span(const grace_tensor *t, int64_t *lo, int64_t *hi) {
  *lo = *hi = t->offset;
  for (int d = 0; d < t->ndim; d++) {
    int64_t ext = (t->sizes[d] - 1) * t->strides[d];
    if (ext < 0) *lo += ext; else *hi += ext;
  }
}

grace_status vm_check_copy(grace_vm *vm, const char *op, const grace_tensor *dst, const grace_tensor *src, int *empty,
                           int *overlap) {
  *empty = *overlap = 0;
  grace_status st = vm_check_writable(vm, op, dst);
  if (st != GRACE_OK) return st;
  int fits = src->ndim <= dst->ndim;
  for (int d = 0; fits && d < src->ndim; d++) {
    int64_t s = src->sizes[d], t = dst->sizes[dst->ndim - src->ndim + d];
    fits = s == t || s == 1;
  }
  if (!fits)
    return vm_err(vm, GRACE_ESHAPE, "%s: source of shape %s cannot be broadcast to the destination's shape %s", op,
                  VM_SHAPE(src), VM_SHAPE(dst));
  if (vm_numel(dst->ndim, dst->sizes) == 0) { *empty = 1; return GRACE_OK; }
  if (src->storage == dst->storage && vm_numel(src->ndim, src->sizes) > 0) {
    int64_t slo, shi, dlo, dhi;
    storage_span(src, &slo, &shi);
    storage_span(dst, &dlo, &dhi);
    *overlap = slo <= dhi && dlo <= shi;
  }
  return GRACE_OK;
}


grace_tensor *vm_dense_like(grace_vm *vm, grace_device dev, const char *op, const grace_tensor *base) {
  int perm[GRACE_MAX_DIMS], nd = base->ndim;
  for (int d = 0; d < nd; d++) perm[d] = d;
  for (int i = 1; i < nd; i++)   /* insertion sort by stride, largest first, stable */
    for (int j = i; j > 0 && base->strides[perm[j]] > base->strides[perm[j - 1]]; j--) {
      int t = perm[j]; perm[j] = perm[j - 1]; perm[j - 1] = t;
    }
  int64_t psz[GRACE_MAX_DIMS] = {0}, pst[GRACE_MAX_DIMS], st[GRACE_MAX_DIMS];
  for (int d = 0; d < nd; d++) psz[d] = base->sizes[perm[d]];
  grace_tensor *dense = vm_tensor_new(vm, op, base->dtype, dev, nd, psz);
  if (!dense) return NULL;
  vm_contiguous_strides(nd, psz, pst);
  for (int d = 0; d < nd; d++) st[perm[d]] = pst[d];
  grace_tensor *t = vm_tensor_view(vm, op, dense, nd, base->sizes, st, 0);
  grace_tensor_release(dense);
  return t;
}

grace_status vm_create_shape(grace_vm *vm, grace_op op, const grace_attrs *a, grace_dtype *dtype, int *ndim,
                             int64_t *shape) {
  const char *name = grace_op_name(op);
  grace_dtype dt = a->has_dtype ? a->dtype : op == GRACE_OP_RANDINT ? GRACE_INT64 : GRACE_FLOAT32;
  int nd = a->nshape;
  if (a->has_dtype && (unsigned)dt >= GRACE_NDTYPES) return vm_err(vm, GRACE_EDTYPE, "%s: invalid dtype %d", name, (int)dt);
  memcpy(shape, a->shape, sizeof a->shape);
  if (op == GRACE_OP_ARANGE) {
    double start = a->a, end = a->b, step = a->c;
    if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step))
      return vm_err(vm, GRACE_EARG, "arange: step must be nonzero and the bounds finite");
    if ((end - start) * step < 0)
      return vm_err(vm, GRACE_EARG, "arange: bounds %g to %g are inconsistent with step %g", start, end, step);
    nd = 1;
    if ((a->exact & 7) == 7 && grace_dtype_is_int(dt)) {   /* exact integer range */
      /* in uint64: the distance between two int64 fits there, not in int64 (mininteger to maxinteger) */
      int64_t s = a->ia, e = a->ib, k = a->ic;
      if (k == 0)   /* the exact step may disagree with c (a C caller sets both): it is the one used */
        return vm_err(vm, GRACE_EARG, "arange: step must be nonzero and the bounds finite");
      uint64_t span = k > 0 ? (e > s ? (uint64_t)e - (uint64_t)s : 0) : (s > e ? (uint64_t)s - (uint64_t)e : 0);
      uint64_t uk = k > 0 ? (uint64_t)k : (uint64_t)0 - (uint64_t)k, n = span / uk + (span % uk != 0);
      if (n > (uint64_t)VM_MAX_NUMEL)
        return vm_err(vm, GRACE_ESHAPE, "arange: %lld to %lld by %lld is too many elements", (long long)s,
                      (long long)e, (long long)k);
      shape[0] = (int64_t)n;
    } else {
      double n = ceil((end - start) / step);
      if (!(n <= (double)VM_MAX_NUMEL))   /* the cast of a larger double to int64 is undefined */
        return vm_err(vm, GRACE_ESHAPE, "arange: %g to %g by %g is too many elements", start, end, step);
      shape[0] = (int64_t)n;
    }
  } else if (op == GRACE_OP_LINSPACE) {
    if (a->i0 < 0) return vm_err(vm, GRACE_EARG, "linspace: number of steps must be non-negative, got %lld", (long long)a->i0);
    nd = 1;
    shape[0] = a->i0;
  } else if (op == GRACE_OP_EYE) {
    if (nd < 1 || nd > 2) return vm_err(vm, GRACE_EARG, "eye: expected n or n, m");
    if (nd == 1) shape[1] = shape[0];
    nd = 2;
  } else if (op == GRACE_OP_RAND || op == GRACE_OP_RANDN) {
    if (!grace_dtype_is_float(dt)) return vm_err(vm, GRACE_EDTYPE, "%s: dtype %s is not a float type", name, grace_dtype_name(dt));
  } else if (op == GRACE_OP_RANDINT) {
    if (a->i1 <= a->i0) return vm_err(vm, GRACE_EARG, "randint: empty range [%lld, %lld)", (long long)a->i0, (long long)a->i1);
  }
  /* as vm_tensor_new says them, so the IR rejects what eager creation would */
  grace_status st = vm_check_shape(vm, name, nd, shape);
  if (st != GRACE_OK) return st;
  *dtype = dt;
  *ndim = nd;
  return GRACE_OK;
}

grace_status vm_check_cat(grace_vm *vm, int nin, grace_tensor *const *in, int64_t dim_attr, grace_dtype *dt,
                          int *ndim, int64_t *sizes, int *dim) {
  grace_attrs a = {.ndims = 1, .dims = {dim_attr}};
  ir_type o;
  grace_status st = vm_infer_tensors(vm, GRACE_OP_CAT, nin, in, &a, 1, &o);   /* infer_cat: the rules */
  if (st != GRACE_OK) return st;
  *dt = o.dtype;
  *ndim = o.ndim;
  memcpy(sizes, o.sizes, sizeof(int64_t) * (size_t)o.ndim);
  return vm_norm_dim(vm, "cat", dim_attr, o.ndim, dim);   /* checked there */
}

grace_status vm_check_stack(grace_vm *vm, int nin, grace_tensor *const *in, int64_t dim_attr, grace_dtype *dt,
                            int *ndim, int64_t *sizes, int *dim) {
  grace_attrs a = {.ndims = 1, .dims = {dim_attr}};
  ir_type o;
  grace_status st = vm_infer_tensors(vm, GRACE_OP_STACK, nin, in, &a, 1, &o);   /* infer_stack: the rules */
  if (st != GRACE_OK) return st;
  *dt = o.dtype;
  *ndim = o.ndim;
  memcpy(sizes, o.sizes, sizeof(int64_t) * (size_t)o.ndim);
  *dim = (int)(dim_attr < 0 ? dim_attr + o.ndim : dim_attr);
  return GRACE_OK;
}

grace_status vm_check_repeat(grace_vm *vm, const grace_tensor *x, const grace_attrs *a, int64_t *xs, int64_t *xst,
                             int64_t *osz) {
  ir_type o;
  grace_tensor *xp = (grace_tensor *)x;   /* only read */
  grace_status st = vm_infer_tensors(vm, GRACE_OP_REPEAT, 1, &xp, a, 1, &o);   /* infer_repeat: the rules */
  if (st != GRACE_OK) return st;
  int nr = o.ndim, nd = x->ndim;
  for (int d = 0; d < nr; d++) {
    int xd = d - (nr - nd);
    xs[d] = xd < 0 ? 1 : x->sizes[xd];
    xst[d] = xd < 0 ? 0 : x->strides[xd];
    osz[d] = o.sizes[d];
  }
  return GRACE_OK;
}

grace_status vm_check_index_select(grace_vm *vm, const grace_tensor *x, const grace_tensor *idx, int64_t dim_attr,
                                   int *dim, int64_t *n) {
  grace_attrs a = {.ndims = 1, .dims = {dim_attr}};
  grace_status s = vm_check_types(vm, GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){(grace_tensor *)x, (grace_tensor *)idx}, &a);
  if (s != GRACE_OK) return s;   /* ir_infer's rules (infer_move) */
  *n = vm_numel(idx->ndim, idx->sizes);
  return vm_norm_dim(vm, "index_select", dim_attr, x->ndim, dim);
}

grace_status vm_check_index_copy(grace_vm *vm, const grace_tensor *dst, const grace_tensor *idx,
                                 const grace_tensor *src, int64_t dim_attr, int *dim, int64_t *n) {
  const char *op = "index_copy_";
  grace_status s = vm_norm_dim(vm, op, dim_attr, dst->ndim, dim);
  if (s != GRACE_OK || (s = vm_check_index_dtype(vm, op, idx, "index")) != GRACE_OK) return s;
  if (idx->ndim > 1)
    return vm_err(vm, GRACE_ESHAPE, "%s: index must be 1-d or 0-d, got shape %s", op, VM_SHAPE(idx));
  *n = vm_numel(idx->ndim, idx->sizes);
  /* src is dst's shape with dim resized to the index count; 0-d tensors count as [1] */
  int dn = dst->ndim ? dst->ndim : 1, sn = src->ndim ? src->ndim : 1;
  const int64_t one = 1, *ds = dst->ndim ? dst->sizes : &one, *ss = src->ndim ? src->sizes : &one;
  int fits = dn == sn && ss[*dim] == *n;
  for (int d = 0; fits && d < dn; d++) fits = d == *dim || ds[d] == ss[d];
  if (!fits)
    return vm_err(vm, GRACE_ESHAPE, "%s: source of shape %s does not fit destination %s with %lld indices in dim %d", op,
                  VM_SHAPE(src), VM_SHAPE(dst), (long long)*n, *dim + vm->index_base);
  return GRACE_OK;
}

grace_status vm_infer_tensors(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                              int nout, ir_type *out) {
  enum { MAXIN = VM_INFER_MAXIN };
  static const grace_attrs none = {0};
  ir_type small[MAXIN], *ty = small;
  const ir_type *small_p[MAXIN] = {0}, **tp = small_p;   /* zeroed: a newer gcc warns it may be read unset */
  size_t bytes = (sizeof *ty + sizeof *tp) * (size_t)nin;
  if (nin > MAXIN) {   /* cat and stack take any number of inputs */
    char *mem = vm_alloc(vm, bytes);
    if (!mem) return vm_err(vm, GRACE_ENOMEM, "%s: out of host memory for %d inputs", grace_op_name(op), nin);
    ty = (ir_type *)mem;
    tp = (const ir_type **)(mem + sizeof *ty * (size_t)nin);
  }
  for (int i = 0; i < nin; i++) {
    tp[i] = NULL;
    if (!in[i]) continue;
    memset(&ty[i], 0, sizeof ty[i]);
    ty[i].dtype = in[i]->dtype;
    ty[i].device = in[i]->storage->device;
    ty[i].wrapped = in[i]->wrapped;
    ty[i].ndim = in[i]->ndim;
    for (int d = 0; d < in[i]->ndim; d++) ty[i].sizes[d] = in[i]->sizes[d];
    tp[i] = &ty[i];
  }
  grace_status st = ir_infer(vm, op, nin, tp, a ? a : &none, nout, out);
  if (nin > MAXIN) vm_free(vm, ty, bytes);
  return st;
}

grace_status vm_check_types(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a) {
  ir_type o[2];
  return vm_infer_tensors(vm, op, nin, in, a, 1, o);
}

grace_status vm_check_attention(grace_vm *vm, grace_tensor *const *in, const grace_attrs *a, vm_attn *p) {
  ir_type o;
  grace_status st = vm_infer_tensors(vm, GRACE_OP_ATTENTION, 5, in, a, 1, &o);
  if (st != GRACE_OK) return st;   /* the message is set */
  memset(p, 0, sizeof *p);
  const grace_tensor *q = in[0], *k = in[1], *v = in[2], *m = in[4];
  p->odt = o.dtype;
  p->ndim = o.ndim;
  for (int d = 0; d < o.ndim; d++) p->osizes[d] = o.sizes[d];
  p->nb = o.ndim - 2;
  p->M = q->sizes[q->ndim - 2]; p->D = q->sizes[q->ndim - 1];
  p->N = k->sizes[k->ndim - 1]; p->Dv = v->sizes[v->ndim - 1];
  p->qm = q->strides[q->ndim - 2]; p->qd = q->strides[q->ndim - 1];
  p->kd = k->strides[k->ndim - 2]; p->kn = k->strides[k->ndim - 1];
  p->vn = v->strides[v->ndim - 2]; p->vd = v->strides[v->ndim - 1];
  p->rows = p->M;
  for (int d = 0; d < p->nb; d++) { p->bsize[d] = o.sizes[d]; p->rows *= o.sizes[d]; }
  /* the batch dims: each operand's all but its two matrix dims */
  vm_broadcast_dims(q->ndim - 2, q->sizes, q->strides, p->nb, p->bsize, p->qb);
  vm_broadcast_dims(k->ndim - 2, k->sizes, k->strides, p->nb, p->bsize, p->kb);
  vm_broadcast_dims(v->ndim - 2, v->sizes, v->strides, p->nb, p->bsize, p->vb);
  if (m) {   /* over the scores [batch..., M, N] */
    int64_t ms[GRACE_MAX_DIMS], ss[GRACE_MAX_DIMS];
    memcpy(ss, p->bsize, sizeof(int64_t) * (size_t)p->nb);
    ss[p->nb] = p->M; ss[p->nb + 1] = p->N;
    vm_broadcast_strides(m, p->nb + 2, ss, ms);
    for (int d = 0; d < p->nb; d++) p->mb[d] = ms[d];
    p->mm = ms[p->nb]; p->mn = ms[p->nb + 1];
  }
  return GRACE_OK;
}
