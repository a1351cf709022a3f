/* base_view.c: ops that make a new tensor over the same storage (reshape, transpose, permute, expand,
 * narrow, select, squeeze, unsqueeze). They move no data and work for tensors on any device. */
#include <stdio.h>
#include "base/base.h"

#define SHP(n, s) vm_fmt_shape((char[128]){0}, 128, (n), (s))

/* reshape, view: resolve one -1 and check the element count. */
static grace_status reshape_shape(grace_vm *vm, const char *op, int nd, const int64_t *sizes, const grace_attrs *a,
                                  int64_t *shape) {
  int infer = -1;
  int64_t known = 1, numel = vm_numel(nd, sizes);
  if (a->nshape < 0 || a->nshape > GRACE_MAX_DIMS)
    return vm_err(vm, GRACE_EARG, "%s: %d dims requested, at most %d are supported", op, a->nshape, GRACE_MAX_DIMS);
  for (int d = 0; d < a->nshape; d++) {
    shape[d] = a->shape[d];
    if (shape[d] == -1) {
      if (infer >= 0) return vm_err(vm, GRACE_EARG, "%s: only one dimension can be -1", op);
      infer = d;
    } else if (shape[d] < 0)
      return vm_err(vm, GRACE_EARG, "%s: invalid size %lld", op, (long long)shape[d]);
    else if (!vm_mul_ok(known, shape[d], &known))   /* wrapped around, it could equal numel */
      return vm_err(vm, GRACE_ESHAPE, "%s: shape %s is too large (input of shape %s)", op, SHP(a->nshape, a->shape),
                    SHP(nd, sizes));
  }
  int bad = infer >= 0 && (known == 0 || numel % known != 0);   /* -1 stands for no whole size */
  if (infer >= 0 && !bad) {
    shape[infer] = numel / known;
    known *= shape[infer];
  }
  if (bad || known != numel)
    return vm_err(vm, GRACE_ESHAPE, "%s: shape %s is invalid for input of shape %s (%lld elements)", op,
                  SHP(a->nshape, a->shape), SHP(nd, sizes), (long long)numel);
  return GRACE_OK;
}

/* expand: a size per dim at least; -1 keeps a dim, a dim of size 1 takes any size, new leading dims any but -1. */
static grace_status expand_shape(grace_vm *vm, int nd, const int64_t *sizes, const grace_attrs *a, int64_t *osz,
                                 int *from) {
  if (a->nshape < nd || a->nshape > GRACE_MAX_DIMS)
    return vm_err(vm, GRACE_ESHAPE, "expand: cannot expand shape %s to %s (fewer dims)", SHP(nd, sizes),
                  SHP(a->nshape < 0 ? 0 : a->nshape > GRACE_MAX_DIMS ? GRACE_MAX_DIMS : a->nshape, a->shape));
  for (int d = 0; d < a->nshape; d++) {
    int xd = d - (a->nshape - nd);
    int64_t want = a->shape[d];
    from[d] = -1;
    if (xd < 0) {
      if (want < 0) return vm_err(vm, GRACE_ESHAPE, "expand: -1 is not allowed for a new leading dim");
      osz[d] = want;
    } else if (want == -1 || want == sizes[xd]) {
      osz[d] = sizes[xd];
      from[d] = xd;
    } else if (sizes[xd] == 1 && want >= 0) {
      osz[d] = want;
    } else
      return vm_err(vm, GRACE_ESHAPE, "expand: cannot expand shape %s to %s (size %lld in dim %d is not 1)",
                    SHP(nd, sizes), SHP(a->nshape, a->shape), (long long)sizes[xd], xd + vm->index_base);
  }
  return GRACE_OK;
}

/* transpose, permute, squeeze, unsqueeze: dims taken from the input. */
static grace_status move_dims(grace_vm *vm, grace_op op, int nd, const int64_t *sizes, const grace_attrs *a, int *ond,
                              int *from) {
  const char *name = grace_op_name(op);
  int d0, d1;
  grace_status s;
  *ond = nd;
  for (int d = 0; d < nd; d++) from[d] = d;
  switch (op) {
  case GRACE_OP_TRANSPOSE:
    if (a->ndims != 2) return vm_err(vm, GRACE_EARG, "transpose: expected two dims");
    if ((s = vm_norm_dim(vm, name, a->dims[0], nd, &d0)) || (s = vm_norm_dim(vm, name, a->dims[1], nd, &d1))) return s;
    if (nd) { from[d0] = d1; from[d1] = d0; }
    return GRACE_OK;
  case GRACE_OP_PERMUTE: {
    if (a->ndims != nd) return vm_err(vm, GRACE_EARG, "permute: %d dims given for a tensor of shape %s", a->ndims, SHP(nd, sizes));
    int seen[GRACE_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++) {
      if ((s = vm_norm_dim(vm, name, a->dims[d], nd, &d0))) return s;
      if (seen[d0]++) return vm_err(vm, GRACE_EARG, "permute: dim %d repeated", d0 + vm->index_base);
      from[d] = d0;
    }
    return GRACE_OK;
  }
  case GRACE_OP_SQUEEZE: {
    int drop[GRACE_MAX_DIMS] = {0}, k = 0;
    if (a->ndims == 0) for (int d = 0; d < nd; d++) drop[d] = sizes[d] == 1;
    for (int i = 0; i < a->ndims; i++) {
      if ((s = vm_norm_dim(vm, name, a->dims[i], nd, &d0))) return s;
      if (nd > 0 && sizes[d0] == 1) drop[d0] = 1;   /* a dim that is not 1 stays, as PyTorch */
    }
    for (int d = 0; d < nd; d++) if (!drop[d]) from[k++] = d;
    *ond = k;
    return GRACE_OK;
  }
  default:   /* unsqueeze */
    if (nd >= GRACE_MAX_DIMS) return vm_err(vm, GRACE_EARG, "unsqueeze: already %d dims", nd);
    if ((s = vm_norm_dim(vm, name, a->ndims ? a->dims[0] : 0, nd + 1, &d0))) return s;
    for (int d = nd; d > d0; d--) from[d] = d - 1;
    from[d0] = -1;
    *ond = nd + 1;
    return GRACE_OK;
  }
}

static grace_status view_shape(grace_vm *vm, grace_op op, int nd, const int64_t *sizes, const grace_attrs *a, int *ond,
                               int64_t *osz, int *from) {
  const char *name = grace_op_name(op);
  int d0;
  grace_status s;
  switch (op) {
  case GRACE_OP_RESHAPE: case GRACE_OP_VIEW:
    if ((s = reshape_shape(vm, name, nd, sizes, a, osz))) return s;
    *ond = a->nshape;
    for (int d = 0; d < *ond; d++) from[d] = -1;
    return GRACE_OK;
  case GRACE_OP_EXPAND:
    if ((s = expand_shape(vm, nd, sizes, a, osz, from))) return s;
    *ond = a->nshape;
    return GRACE_OK;
  case GRACE_OP_NARROW: case GRACE_OP_SELECT: {
    if (nd == 0) return vm_err(vm, GRACE_EARG, "%s: not possible on a 0-d tensor", name);
    if ((s = vm_norm_dim(vm, name, a->ndims ? a->dims[0] : 0, nd, &d0))) return s;
    int64_t n = sizes[d0], start = a->i0 < 0 ? a->i0 + n : a->i0;
    int b = vm->index_base, k = 0;
    if (op == GRACE_OP_SELECT && (start < 0 || start >= n))
      return vm_err(vm, GRACE_EINDEX, "select: index %lld out of range for dim %d of size %lld (shape %s)",
                    vm_user_index(a->i0, b), d0 + b, (long long)n, SHP(nd, sizes));
    if (op == GRACE_OP_NARROW && (start < 0 || start > n || a->i1 < 0 || a->i1 > n - start))   /* no overflow */
      return vm_err(vm, GRACE_EINDEX, "narrow: start %lld with length %lld is out of range for dim %d of size %lld",
                    vm_user_index(a->i0, b), (long long)a->i1, d0 + b, (long long)n);
    for (int d = 0; d < nd; d++) {
      if (d == d0 && op == GRACE_OP_SELECT) continue;
      from[k] = d == d0 ? -1 : d;   /* narrow's dim: a new size */
      osz[k++] = d == d0 ? a->i1 : sizes[d];
    }
    *ond = k;
    return GRACE_OK;
  }
  case GRACE_OP_TRANSPOSE: case GRACE_OP_PERMUTE: case GRACE_OP_SQUEEZE: case GRACE_OP_UNSQUEEZE:
    if ((s = move_dims(vm, op, nd, sizes, a, ond, from))) return s;
    for (int d = 0; d < *ond; d++) osz[d] = from[d] >= 0 ? sizes[from[d]] : 1;
    return GRACE_OK;
  default:
    return vm_err(vm, GRACE_EINTERNAL, "%s: not a view op", name);
  }
}

grace_status vm_view_shape(grace_vm *vm, grace_op op, int nd, const int64_t *sizes, const grace_attrs *a, int *ond,
                           int64_t *osz, int *from) {
  grace_status s = view_shape(vm, op, nd, sizes, a, ond, osz, from);
  /* expand multiplies the element count without a product anywhere: its result shape must be checked whole */
  return s != GRACE_OK ? s : vm_check_shape(vm, grace_op_name(op), *ond, osz);
}

/* Strides for viewing x as shape without a copy (ATen's computeStride); 0 when impossible. */
static int view_strides(const grace_tensor *x, int nd, const int64_t *shape, int64_t *st) {
  if (vm_numel(x->ndim, x->sizes) <= 1 || x->ndim == 0) { vm_contiguous_strides(nd, shape, st); return 1; }
  int vd = nd - 1;
  int64_t chunk = x->strides[x->ndim - 1], tn = 1, vn = 1;
  for (int td = x->ndim - 1; td >= 0; td--) {
    tn *= x->sizes[td];
    if (td == 0 || (x->sizes[td - 1] != 1 && x->strides[td - 1] != tn * chunk)) {
      while (vd >= 0 && (vn < tn || shape[vd] == 1)) {
        st[vd] = vn * chunk;
        vn *= shape[vd];
        vd--;
      }
      if (vn != tn) return 0;
      if (td > 0) { chunk = x->strides[td - 1]; tn = 1; vn = 1; }
    }
  }
  return vd == -1;
}

/* reshape, view: shape checked by vm_view_shape. A view of x where its strides allow one; else view fails and
 * reshape copies. */
static grace_status reshape(grace_vm *vm, grace_op op, grace_tensor *x, int nd, const int64_t *shape, grace_tensor **out) {
  const char *name = grace_op_name(op);
  int64_t st[GRACE_MAX_DIMS];
  grace_status s;
  if (view_strides(x, nd, shape, st)) {
    *out = vm_tensor_view(vm, name, x, nd, shape, st, x->offset);
    return *out ? GRACE_OK : vm->status;
  }
  if (op == GRACE_OP_VIEW)   /* a check on strides, which types do not have: eager's alone */
    return vm_err(vm, GRACE_ESHAPE, "view: a tensor of shape %s with strides %s cannot be viewed as %s without a copy; "
                  "use reshape (or contiguous first)", VM_SHAPE(x), SHP(x->ndim, x->strides), SHP(nd, shape));
  grace_tensor *c;
  if ((s = vm_route(vm, GRACE_OP_CLONE, 1, &x, NULL, 1, &c)) != GRACE_OK) return s;   /* on x's device */
  vm_contiguous_strides(nd, shape, st);
  *out = vm_tensor_view(vm, name, c, nd, shape, st, c->offset);
  grace_tensor_release(c);
  return *out ? GRACE_OK : vm->status;
}

grace_status vm_view_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout,
                         grace_tensor **out) {
  grace_tensor *x = in[0];
  const char *name = grace_op_name(op);
  int nd, from[GRACE_MAX_DIMS], d0 = 0;
  int64_t sz[GRACE_MAX_DIMS], st[GRACE_MAX_DIMS], off = x->offset;
  grace_status s = vm_view_shape(vm, op, x->ndim, x->sizes, a, &nd, sz, from);
  if (s != GRACE_OK) return s;
  if (op == GRACE_OP_RESHAPE || op == GRACE_OP_VIEW) return reshape(vm, op, x, nd, sz, out);
  for (int d = 0; d < nd; d++) st[d] = from[d] >= 0 ? x->strides[from[d]] : 0;   /* expand's new sizes: stride 0 */
  switch (op) {
  case GRACE_OP_NARROW: case GRACE_OP_SELECT: {
    (void)vm_norm_dim(vm, name, a->ndims ? a->dims[0] : 0, x->ndim, &d0);   /* checked above */
    int64_t start = a->i0 < 0 ? a->i0 + x->sizes[d0] : a->i0;
    if (op == GRACE_OP_SELECT || a->i1 > 0) off += start * x->strides[d0];
    if (op == GRACE_OP_NARROW) st[d0] = x->strides[d0];
    break;
  }
  case GRACE_OP_UNSQUEEZE:
    while (from[d0] >= 0) d0++;
    st[d0] = d0 < nd - 1 ? sz[d0 + 1] * st[d0 + 1] : 1;
    break;
  default: break;
  }
  *out = vm_tensor_view(vm, name, x, nd, sz, st, off);
  return *out ? GRACE_OK : vm->status;
}
