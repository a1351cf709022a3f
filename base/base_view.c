/* base_view.c: ops that make a new tensor over the same storage (reshape, transpose, permute, expand,
 * narrow, select, squeeze, unsqueeze). They move no data and work for tensors on any device. */
#include <stdio.h>
#include "base/base.h"

/* Resolve one -1 and check the element count. */
static grace_status infer_shape(grace_vm *vm, const char *op, const grace_tensor *x, const grace_attrs *a,
                                int64_t *shape) {
  int infer = -1;
  int64_t known = 1, numel = vm_numel(x->ndim, x->sizes);
  if (a->nshape < 0 || a->nshape > GRACE_MAX_DIMS)
    return vm_err(vm, GRACE_EARG, "%s: %d dims requested, at most %d are supported", op, a->nshape, GRACE_MAX_DIMS);
  for (int d = 0; d < a->nshape; d++) {
    shape[d] = a->shape[d];
    if (shape[d] == -1) {
      if (infer >= 0) return vm_err(vm, GRACE_EARG, "%s: only one dimension can be -1", op);
      infer = d;
    } else if (shape[d] < 0)
      return vm_err(vm, GRACE_EARG, "%s: invalid size %lld", op, (long long)shape[d]);
    else known *= shape[d];
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      return vm_err(vm, GRACE_ESHAPE, "%s: shape %s is invalid for input of shape %s (%lld elements)", op,
                    vm_fmt_shape((char[128]){0}, 128, a->nshape, a->shape), VM_SHAPE(x), (long long)numel);
    shape[infer] = numel / known;
    known *= shape[infer];
  }
  if (known != numel)
    return vm_err(vm, GRACE_ESHAPE, "%s: shape %s is invalid for input of shape %s (%lld elements)", op,
                  vm_fmt_shape((char[128]){0}, 128, a->nshape, a->shape), VM_SHAPE(x), (long long)numel);
  return GRACE_OK;
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

static grace_status reshape(grace_vm *vm, grace_op op, grace_tensor *x, const grace_attrs *a, grace_tensor **out) {
  const char *name = grace_op_name(op);
  int64_t shape[GRACE_MAX_DIMS], st[GRACE_MAX_DIMS];
  grace_status s = infer_shape(vm, name, x, a, shape);
  if (s != GRACE_OK) return s;
  if (view_strides(x, a->nshape, shape, st)) {
    *out = vm_tensor_view(vm, name, x, a->nshape, shape, st, x->offset);
    return *out ? GRACE_OK : vm->status;
  }
  if (op == GRACE_OP_VIEW)
    return vm_err(vm, GRACE_ESHAPE, "view: a tensor of shape %s with strides %s cannot be viewed as %s without a copy; "
                  "use reshape (or contiguous first)", VM_SHAPE(x), vm_fmt_shape((char[128]){0}, 128, x->ndim, x->strides),
                  vm_fmt_shape((char[128]){0}, 128, a->nshape, shape));
  grace_tensor *c;
  if ((s = vm_route(vm, GRACE_OP_CLONE, 1, &x, NULL, 1, &c)) != GRACE_OK) return s;   /* on x's device */
  vm_contiguous_strides(a->nshape, shape, st);
  *out = vm_tensor_view(vm, name, c, a->nshape, shape, st, c->offset);
  grace_tensor_release(c);
  return *out ? GRACE_OK : vm->status;
}

grace_status vm_view_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout,
                         grace_tensor **out) {
  grace_tensor *x = in[0];
  const char *name = grace_op_name(op);
  int nd = x->ndim, d0, d1;
  int64_t sz[GRACE_MAX_DIMS], st[GRACE_MAX_DIMS], off = x->offset;
  memcpy(sz, x->sizes, sizeof sz);
  memcpy(st, x->strides, sizeof st);
  grace_status s = GRACE_OK;
  switch (op) {
  case GRACE_OP_RESHAPE: case GRACE_OP_VIEW:
    return reshape(vm, op, x, a, out);
  case GRACE_OP_TRANSPOSE: {
    if (a->ndims != 2) return vm_err(vm, GRACE_EARG, "transpose: expected two dims");
    if ((s = vm_norm_dim(vm, name, a->dims[0], nd, &d0)) || (s = vm_norm_dim(vm, name, a->dims[1], nd, &d1))) return s;
    if (nd == 0) break;
    int64_t t = sz[d0]; sz[d0] = sz[d1]; sz[d1] = t;
    t = st[d0]; st[d0] = st[d1]; st[d1] = t;
    break;
  }
  case GRACE_OP_PERMUTE: {
    if (a->ndims != nd)
      return vm_err(vm, GRACE_EARG, "permute: %d dims given for a tensor of shape %s", a->ndims, VM_SHAPE(x));
    int seen[GRACE_MAX_DIMS] = {0};
    for (int d = 0; d < nd; d++) {
      if ((s = vm_norm_dim(vm, name, a->dims[d], nd, &d0))) return s;
      if (seen[d0]++) return vm_err(vm, GRACE_EARG, "permute: dim %d repeated", d0 + vm->index_base);
      sz[d] = x->sizes[d0]; st[d] = x->strides[d0];
    }
    break;
  }
  case GRACE_OP_EXPAND: {
    if (a->nshape < nd || a->nshape > GRACE_MAX_DIMS)
      return vm_err(vm, GRACE_ESHAPE, "expand: cannot expand shape %s to %s (fewer dims)", VM_SHAPE(x),
                    vm_fmt_shape((char[128]){0}, 128, a->nshape, a->shape));
    nd = a->nshape;
    for (int d = 0; d < nd; d++) {
      int xd = d - (nd - x->ndim);
      int64_t want = a->shape[d];
      if (xd < 0) {
        if (want < 0) return vm_err(vm, GRACE_ESHAPE, "expand: -1 is not allowed for a new leading dim");
        sz[d] = want; st[d] = 0;
      } else if (want == -1 || want == x->sizes[xd]) {
        sz[d] = x->sizes[xd]; st[d] = x->strides[xd];
      } else if (x->sizes[xd] == 1 && want >= 0) {
        sz[d] = want; st[d] = 0;
      } else
        return vm_err(vm, GRACE_ESHAPE, "expand: cannot expand shape %s to %s (size %lld in dim %d is not 1)",
                      VM_SHAPE(x), vm_fmt_shape((char[128]){0}, 128, a->nshape, a->shape), (long long)x->sizes[xd],
                      xd + vm->index_base);
    }
    break;
  }
  case GRACE_OP_NARROW: case GRACE_OP_SELECT: {
    if (nd == 0) return vm_err(vm, GRACE_EARG, "%s: not possible on a 0-d tensor", name);
    if ((s = vm_norm_dim(vm, name, a->ndims ? a->dims[0] : 0, nd, &d0))) return s;
    int64_t start = a->i0, n = x->sizes[d0];
    if (start < 0) start += n;
    if (op == GRACE_OP_SELECT) {
      if (start < 0 || start >= n)
        return vm_err(vm, GRACE_EINDEX, "select: index %lld out of range for dim %d of size %lld (shape %s)",
                      (long long)(a->i0 < 0 ? a->i0 : a->i0 + vm->index_base), d0 + vm->index_base, (long long)n,
                      VM_SHAPE(x));
      off += start * st[d0];
      for (int d = d0; d < nd - 1; d++) { sz[d] = sz[d + 1]; st[d] = st[d + 1]; }
      nd--;
    } else {
      if (start < 0 || start > n || a->i1 < 0 || start + a->i1 > n)
        return vm_err(vm, GRACE_EINDEX, "narrow: start %lld with length %lld is out of range for dim %d of size %lld",
                      (long long)(a->i0 < 0 ? a->i0 : a->i0 + vm->index_base), (long long)a->i1, d0 + vm->index_base,
                      (long long)n);
      if (a->i1 > 0) off += start * st[d0];
      sz[d0] = a->i1;
    }
    break;
  }
  case GRACE_OP_SQUEEZE: {
    int drop[GRACE_MAX_DIMS] = {0};
    if (a->ndims == 0) for (int d = 0; d < nd; d++) drop[d] = sz[d] == 1;
    for (int i = 0; i < a->ndims; i++) {
      if ((s = vm_norm_dim(vm, name, a->dims[i], nd, &d0))) return s;
      if (nd > 0 && sz[d0] == 1) drop[d0] = 1;   /* a dim that is not 1 stays, as PyTorch */
    }
    int k = 0;
    for (int d = 0; d < nd; d++) if (!drop[d]) { sz[k] = x->sizes[d]; st[k] = x->strides[d]; k++; }
    nd = k;
    break;
  }
  case GRACE_OP_UNSQUEEZE: {
    if (nd >= GRACE_MAX_DIMS) return vm_err(vm, GRACE_EARG, "unsqueeze: already %d dims", nd);
    if ((s = vm_norm_dim(vm, name, a->ndims ? a->dims[0] : 0, nd + 1, &d0))) return s;
    for (int d = nd; d > d0; d--) { sz[d] = sz[d - 1]; st[d] = st[d - 1]; }
    sz[d0] = 1;
    st[d0] = d0 < nd ? sz[d0 + 1] * st[d0 + 1] : 1;
    nd++;
    break;
  }
  default:
    return vm_err(vm, GRACE_EINTERNAL, "%s: not a view op", name);
  }
  *out = vm_tensor_view(vm, name, x, nd, sz, st, off);
  return *out ? GRACE_OK : vm->status;
}
