/* base_tensor.c: tensors and their reference-counted storage, shape and broadcast helpers, element access. */
#include <stdio.h>
#include "base/base.h"

const char *vm_fmt_shape(char *buf, size_t n, int ndim, const int64_t *sizes) {
  size_t k = 0;
  k += (size_t)snprintf(buf + k, n - k, "[");
  for (int d = 0; d < ndim && k < n; d++)
    k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)sizes[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

int64_t vm_numel(int ndim, const int64_t *sizes) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= sizes[d];
  return n;
}

void vm_contiguous_strides(int ndim, const int64_t *sizes, int64_t *strides) {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) { strides[d] = s; s *= sizes[d] > 1 ? sizes[d] : 1; }
}

int vm_is_contiguous(const grace_tensor *t) {
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->sizes[d] == 0) return 1;
    if (t->sizes[d] != 1 && t->strides[d] != s) return 0;
    s *= t->sizes[d];
  }
  return 1;
}

grace_status vm_check_shape(grace_vm *vm, const char *op, int ndim, const int64_t *sizes) {
  if (ndim < 0 || ndim > GRACE_MAX_DIMS)
    return vm_err(vm, GRACE_EARG, "%s: %d dims requested, at most %d are supported", op, ndim, GRACE_MAX_DIMS);
  for (int d = 0; d < ndim; d++)
    if (sizes[d] < 0)
      return vm_err(vm, GRACE_EARG, "%s: negative size %lld in shape %s", op, (long long)sizes[d],
                    vm_fmt_shape((char[128]){0}, 128, ndim, sizes));
  if (vm_numel_checked(ndim, sizes) < 0)
    return vm_err(vm, GRACE_ESHAPE, "%s: shape %s is too large (more than 2^60 elements)", op,
                  vm_fmt_shape((char[128]){0}, 128, ndim, sizes));
  return GRACE_OK;
}

static grace_status check_shape(grace_vm *vm, const char *op, int ndim, const int64_t *sizes, size_t elsize,
                                size_t *bytes) {
  grace_status st = vm_check_shape(vm, op, ndim, sizes);
  if (st != GRACE_OK) return st;
  uint64_t n = (uint64_t)vm_numel(ndim, sizes);
  if (n > (UINT64_C(1) << 48))   /* storage: more than any host or device has, and bytes stay far from overflow */
    return vm_err(vm, GRACE_ENOMEM, "%s: shape %s is too large", op, vm_fmt_shape((char[128]){0}, 128, ndim, sizes));
  *bytes = (size_t)n * elsize;
  return GRACE_OK;
}

/* Whether a view (sizes, strides, offset in elements) reads and writes only inside a storage of nel elements:
 * the last line of defence against shape arithmetic gone wrong in any op, as an out-of-storage view is memory
 * corruption. An empty view touches nothing. */
static int view_in_storage(int ndim, const int64_t *sizes, const int64_t *strides, int64_t offset, int64_t nel) {
  int64_t lo = offset, hi = offset, step;
  if (vm_numel_checked(ndim, sizes) == 0) return offset >= 0 && offset <= nel;
  for (int d = 0; d < ndim; d++) {
    if (!vm_mul_ok(sizes[d] - 1, strides[d], &step)) return 0;
    if (!(step < 0 ? vm_add_ok(lo, step, &lo) : vm_add_ok(hi, step, &hi))) return 0;
  }
  return lo >= 0 && hi < nel;
}

grace_tensor *vm_tensor_new(grace_vm *vm, const char *op, grace_dtype dt, grace_device dev, int ndim,
                            const int64_t *sizes) {
  size_t bytes = 0;
  if ((unsigned)dt >= GRACE_NDTYPES) { vm_err(vm, GRACE_EDTYPE, "%s: invalid dtype %d", op, (int)dt); return NULL; }
  if (check_shape(vm, op, ndim, sizes, grace_dtype_size(dt), &bytes) != GRACE_OK) return NULL;
  /* checked before anything is allocated, so a refused storage leaves the VM as it was */
  if (vm->max_bytes && (bytes > vm->max_bytes || vm->tensor_bytes > vm->max_bytes - bytes)) {
    vm_err(vm, GRACE_ENOMEM, "%s: memory limit of %zu bytes reached (%zu in use, %zu requested)", op, vm->max_bytes,
           vm->tensor_bytes, bytes);
    return NULL;
  }
  vm_storage *s = vm_alloc(vm, sizeof *s);
  grace_tensor *t = vm_alloc(vm, sizeof *t);
  void *data = NULL;
  if (s && t) {
    grace_status st = vm->backend[dev]->storage_alloc(vm, bytes, &data);
    if (st != GRACE_OK) {
      char msg[VM_ERRLEN];
      snprintf(msg, sizeof msg, "%s", vm->err);
      vm_free(vm, s, sizeof *s); vm_free(vm, t, sizeof *t);
      vm_err(vm, st, "%s: %s for shape %s", op, msg, vm_fmt_shape((char[128]){0}, 128, ndim, sizes));
      return NULL;
    }
  }
  if (!s || !t) {
    vm_free(vm, s, sizeof *s); vm_free(vm, t, sizeof *t);
    vm_err(vm, GRACE_ENOMEM, "%s: out of host memory allocating shape %s", op,
           vm_fmt_shape((char[128]){0}, 128, ndim, sizes));
    return NULL;
  }
  *s = (vm_storage){.refcount = 1, .device = dev, .data = data, .nbytes = bytes, .version = 0};
  vm->tensor_bytes += bytes;
  memset(t, 0, sizeof *t);
  t->refcount = 1; t->vm = vm; t->storage = s; t->dtype = dt; t->ndim = ndim;
  for (int d = 0; d < ndim; d++) t->sizes[d] = sizes[d];
  vm_contiguous_strides(ndim, sizes, t->strides);
  return t;
}

grace_tensor *vm_tensor_view(grace_vm *vm, const char *op, grace_tensor *base, int ndim, const int64_t *sizes,
                             const int64_t *strides, int64_t offset) {
  if (vm_check_shape(vm, op, ndim, sizes) != GRACE_OK) return NULL;
  /* an empty view reads nothing, wherever it starts (x[2] of a [2, 0] tensor starts past a storage of 0
   * elements, as in PyTorch): it starts at 0, so no pointer past its storage is ever formed */
  if (vm_numel_checked(ndim, sizes) == 0) offset = 0;
  int64_t nel = (int64_t)(base->storage->nbytes / grace_dtype_size(base->dtype));
  if (!view_in_storage(ndim, sizes, strides, offset, nel)) {
    vm_err(vm, GRACE_EINTERNAL, "%s: a view of shape %s, strides %s, offset %lld does not lie within its storage "
           "of %lld elements", op, vm_fmt_shape((char[128]){0}, 128, ndim, sizes),
           vm_fmt_shape((char[128]){0}, 128, ndim, strides), (long long)offset, (long long)nel);
    return NULL;
  }
  grace_tensor *t = vm_alloc(vm, sizeof *t);
  if (!t) { vm_err(vm, GRACE_ENOMEM, "%s: out of host memory", op); return NULL; }
  memset(t, 0, sizeof *t);
  t->refcount = 1; t->vm = vm; t->storage = base->storage; t->dtype = base->dtype; t->ndim = ndim;
  t->offset = offset;
  for (int d = 0; d < ndim; d++) { t->sizes[d] = sizes[d]; t->strides[d] = strides[d]; }
  base->storage->refcount++;
  return t;
}

void grace_tensor_retain(grace_tensor *t) { if (t) t->refcount++; }

size_t grace_tensor_bytes(const grace_vm *vm) { return vm ? vm->tensor_bytes : 0; }

void grace_set_memory_limit(grace_vm *vm, size_t bytes) { if (vm) vm->max_bytes = bytes; }

size_t grace_memory_limit(const grace_vm *vm) { return vm ? vm->max_bytes : 0; }

void grace_tensor_release(grace_tensor *t) {
  if (!t || --t->refcount > 0) return;
  grace_vm *vm = t->vm;
  if (t->grad_fn && vm->hooks) vm->hooks->grad_drop(t);
  if (t->lazy && vm->hooks) vm->hooks->lazy_drop(t);
  grace_tensor_release(t->grad);
  vm_storage *s = t->storage;
  if (--s->refcount == 0) {
    if (s->foreign) {
      if (s->release) s->release(s->release_ud, s->data);
    } else {
      vm->tensor_bytes -= s->nbytes;
      vm->backend[s->device]->storage_free(vm, s->data, s->nbytes);
    }
    vm_free(vm, s, sizeof *s);
  }
  vm_free(vm, t, sizeof *t);
}

/* The public functions' NULL checks: an error status, with the message where there is a VM to hold it. */
#define NEED(vm, cond, what)                                                                                   \
  do {                                                                                                         \
    if (!(vm)) return GRACE_EARG;                                                                              \
    if (!(cond)) return vm_err((vm), GRACE_EARG, "%s: a NULL argument", (what));                               \
  } while (0)

grace_status grace_tensor_empty(grace_vm *vm, grace_dtype dt, grace_device dev, int ndim, const int64_t *sizes,
                                grace_tensor **out) {
  NEED(vm, out && (sizes || ndim == 0), "empty");
  if ((unsigned)dev > GRACE_CUDA) return vm_err(vm, GRACE_EARG, "empty: invalid device %d", (int)dev);
  *out = vm_tensor_new(vm, "empty", dt, dev, ndim, sizes);
  if (!*out) return vm->status;
  return vm->trace && vm->hooks ? vm->hooks->created(vm, *out) : GRACE_OK;
}

grace_status grace_tensor_from_data(grace_vm *vm, grace_dtype dt, int ndim, const int64_t *sizes, grace_dtype src_dt,
                                    const void *data, grace_tensor **out) {
  NEED(vm, out && data && (sizes || ndim == 0), "tensor");
  *out = NULL;
  if ((unsigned)src_dt >= GRACE_NDTYPES) return vm_err(vm, GRACE_EDTYPE, "tensor: invalid source dtype");
  grace_tensor *t = vm_tensor_new(vm, "tensor", dt, GRACE_CPU, ndim, sizes);
  if (!t) return vm->status;
  int64_t n = vm_numel(ndim, sizes);
  size_t ss = grace_dtype_size(src_dt), ds = grace_dtype_size(dt);
  char *dst = vm_ptr(t);
  const char *src = data;
  if (src_dt == dt) memcpy(dst, src, (size_t)n * ds);
  else if (grace_dtype_is_int(src_dt))
    for (int64_t i = 0; i < n; i++) vm_store_i64(dt, dst + i * ds, vm_load_i64(src_dt, src + i * ss));
  else
    for (int64_t i = 0; i < n; i++) vm_store_f64(dt, dst + i * ds, vm_load_f64(src_dt, src + i * ss));
  *out = t;
  return vm->trace && vm->hooks ? vm->hooks->created(vm, t) : GRACE_OK;
}

grace_status grace_tensor_wrap(grace_vm *vm, grace_dtype dt, int ndim, const int64_t *sizes, void *data,
                               grace_release_fn release, void *ud, grace_tensor **out) {
  NEED(vm, out && data && (sizes || ndim == 0), "wrap");
  *out = NULL;
  if ((unsigned)dt >= GRACE_NDTYPES) return vm_err(vm, GRACE_EDTYPE, "wrap: invalid dtype %d", (int)dt);
  size_t es = grace_dtype_size(dt), bytes = 0;
  grace_status st = check_shape(vm, "wrap", ndim, sizes, es, &bytes);
  if (st != GRACE_OK) return st;
  if ((uintptr_t)data % es)   /* kernels load whole elements */
    return vm_err(vm, GRACE_EARG, "wrap: data at %p is not aligned to the %zu bytes of a %s element", data, es,
                  grace_dtype_name(dt));
  vm_storage *s = vm_alloc(vm, sizeof *s);
  grace_tensor *t = vm_alloc(vm, sizeof *t);
  if (!s || !t) {
    vm_free(vm, s, sizeof *s); vm_free(vm, t, sizeof *t);
    return vm_err(vm, GRACE_ENOMEM, "wrap: out of host memory");
  }
  *s = (vm_storage){.refcount = 1, .device = GRACE_CPU, .data = data, .nbytes = bytes, .foreign = 1,
                    .release = release, .release_ud = ud};
  memset(t, 0, sizeof *t);
  t->refcount = 1; t->vm = vm; t->storage = s; t->dtype = dt; t->ndim = ndim;
  for (int d = 0; d < ndim; d++) t->sizes[d] = sizes[d];
  vm_contiguous_strides(ndim, sizes, t->strides);
  /* made during a trace: a constant of the program, as host data is (its contents at trace time) */
  st = vm->trace && vm->hooks ? vm->hooks->created(vm, t) : GRACE_OK;
  if (st != GRACE_OK) {   /* the caller keeps its memory: no release */
    s->release = NULL;
    grace_tensor_release(t);
    return st;
  }
  *out = t;
  return GRACE_OK;
}

grace_status grace_tensor_scalar(grace_vm *vm, double v, int is_integer, grace_tensor **out) {
  NEED(vm, out, "scalar");
  *out = NULL;
  /* [-2^63, 2^63): the doubles that convert to int64 (NaN and the rest would be undefined behaviour) */
  if (is_integer && !(v >= -9223372036854775808.0 && v < 9223372036854775808.0))
    return vm_err(vm, GRACE_EARG, "scalar: %g is outside int64", v);
  grace_tensor *t = vm_tensor_new(vm, "scalar", is_integer ? GRACE_INT64 : GRACE_FLOAT64, GRACE_CPU, 0, NULL);
  if (!t) { *out = NULL; return vm->status; }
  if (is_integer) *(int64_t *)vm_ptr(t) = (int64_t)v;
  else *(double *)vm_ptr(t) = v;
  t->wrapped = 1;
  *out = t;
  return GRACE_OK;
}

grace_status grace_tensor_scalar_int(grace_vm *vm, int64_t v, grace_tensor **out) {
  NEED(vm, out, "scalar");
  grace_tensor *t = vm_tensor_new(vm, "scalar", GRACE_INT64, GRACE_CPU, 0, NULL);
  if (!t) { *out = NULL; return vm->status; }
  *(int64_t *)vm_ptr(t) = v;
  t->wrapped = 1;
  *out = t;
  return GRACE_OK;
}

/* The accessors of a NULL tensor give 0 or NULL: the host's bug, not a crash. */
int grace_tensor_ndim(const grace_tensor *t) { return t ? t->ndim : 0; }
const int64_t *grace_tensor_sizes(const grace_tensor *t) { return t ? t->sizes : NULL; }
const int64_t *grace_tensor_strides(const grace_tensor *t) {
  if (!t) return NULL;
  vm_materialize(t);
  return t->strides;
}
int64_t grace_tensor_offset(const grace_tensor *t) {
  if (!t) return 0;
  vm_materialize(t);
  return t->offset;
}
int64_t grace_tensor_numel(const grace_tensor *t) { return t ? vm_numel(t->ndim, t->sizes) : 0; }
grace_dtype grace_tensor_dtype(const grace_tensor *t) { return t ? t->dtype : GRACE_FLOAT32; }
grace_device grace_tensor_device(const grace_tensor *t) { return t ? t->storage->device : GRACE_CPU; }
int grace_tensor_is_contiguous(const grace_tensor *t) {
  if (!t) return 0;
  vm_materialize(t);
  return vm_is_contiguous(t);
}
int grace_tensor_is_scalar(const grace_tensor *t) { return t ? t->wrapped : 0; }
uint64_t grace_tensor_version(const grace_tensor *t) {
  if (!t) return 0;
  vm_materialize(t);
  vm_note_read(t, "reading its version counter");
  return t->storage->version;
}
const void *grace_tensor_storage_id(const grace_tensor *t) {
  if (!t) return NULL;
  vm_materialize(t);
  return t->storage;
}
void *grace_tensor_data(grace_tensor *t) {
  if (!t) return NULL;
  if (vm_host_read(t->vm, t, "taking its data pointer") != GRACE_OK) return NULL;
  return t->storage->device == GRACE_CPU ? vm_ptr(t) : NULL;
}

/* Elements [0, span) of a device tensor's view copied into a new host storage: a view with t's layout there. */
grace_status vm_to_host(grace_vm *vm, const grace_tensor *t, grace_tensor **out) {
  *out = NULL;
  int64_t span = 1;   /* elements from the view's first to its last, inclusive */
  for (int d = 0; d < t->ndim; d++) {
    if (t->sizes[d] == 0) { span = 0; break; }
    span += (t->sizes[d] - 1) * t->strides[d];
  }
  grace_tensor *flat = vm_tensor_new(vm, "cpu", t->dtype, GRACE_CPU, 1, &span);
  if (!flat) return vm->status;
  grace_status st = span ? vm->backend[t->storage->device]->to_host(vm, vm_ptr(flat), vm_ptr(t),
                                                                    (size_t)span * grace_dtype_size(t->dtype))
                         : GRACE_OK;
  if (st == GRACE_OK) {
    *out = vm_tensor_view(vm, "cpu", flat, t->ndim, t->sizes, t->strides, 0);
    if (!*out) st = vm->status;
  }
  grace_tensor_release(flat);
  return st;
}

/* The elements of host tensor t in row-major order, converted to dst_dt. */
static void read_host(const grace_tensor *t, grace_dtype dst_dt, void *dst) {
  int64_t n = vm_numel(t->ndim, t->sizes);
  if (n == 0) return;
  size_t ss = grace_dtype_size(t->dtype), ds = grace_dtype_size(dst_dt);
  const char *base = vm_ptr(t);
  char *out = dst;
  vm_counter c;
  vm_counter_init(&c, t->ndim, t->sizes);
  int src_int = grace_dtype_is_int(t->dtype);
  for (int64_t i = 0;; i++) {
    const char *p = base + vm_offset(t->ndim, c.idx, t->strides) * (int64_t)ss;
    if (src_int) vm_store_i64(dst_dt, out + i * ds, vm_load_i64(t->dtype, p));
    else vm_store_f64(dst_dt, out + i * ds, vm_load_f64(t->dtype, p));
    if (!vm_counter_next(&c)) break;
  }
}

grace_status grace_tensor_read(grace_vm *vm, const grace_tensor *t, grace_dtype dst_dt, void *dst) {
  NEED(vm, t && dst, "read");
  grace_status rs = vm_host_read(vm, t, "reading its elements (item, tolist, print)");
  if (rs != GRACE_OK) return rs;
  if ((unsigned)dst_dt >= GRACE_NDTYPES) return vm_err(vm, GRACE_EDTYPE, "read: invalid dtype");
  if (t->storage->device == GRACE_CPU) {
    read_host(t, dst_dt, dst);
    return GRACE_OK;
  }
  /* through a host copy of the span it covers, read as it is: one read of t (a trace sees one break, whose value
   * is t's) */
  grace_tensor *h = NULL;
  grace_status st = vm_to_host(vm, t, &h);
  if (st == GRACE_OK) read_host(h, dst_dt, dst);
  grace_tensor_release(h);
  return st;
}

/* The element at index: its address, or for a device tensor a copy of it in buf. */
static grace_status element_ptr(grace_vm *vm, const grace_tensor *t, const int64_t *index, const char **p,
                                char buf[8]) {
  if (!vm) return GRACE_EARG;
  if (!t || (!index && t->ndim)) return vm_err(vm, GRACE_EARG, "get: a NULL argument");
  grace_status rs = vm_host_read(vm, t, "reading an element (item, tolist, print)");
  if (rs != GRACE_OK) return rs;
  int64_t off = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (index[d] < 0 || index[d] >= t->sizes[d])
      return vm_err(vm, GRACE_EINDEX, "get: index %lld out of range for dim %d of size %lld",
                    vm_user_index(index[d], vm->index_base), d + vm->index_base, (long long)t->sizes[d]);
    off += index[d] * t->strides[d];
  }
  size_t es = grace_dtype_size(t->dtype);
  *p = vm_ptr(t) + off * (int64_t)es;
  if (t->storage->device == GRACE_CPU) return GRACE_OK;
  grace_status st = vm->backend[t->storage->device]->to_host(vm, buf, *p, es);
  *p = buf;
  return st;
}

grace_status grace_tensor_get(grace_vm *vm, const grace_tensor *t, const int64_t *index, double *out) {
  const char *p;
  char buf[8];
  if (vm && !out) return vm_err(vm, GRACE_EARG, "get: a NULL argument");
  grace_status st = element_ptr(vm, t, index, &p, buf);
  if (st == GRACE_OK) *out = vm_load_f64(t->dtype, p);
  return st;
}

grace_status grace_tensor_get_int(grace_vm *vm, const grace_tensor *t, const int64_t *index, int64_t *out) {
  const char *p;
  char buf[8];
  if (vm && !out) return vm_err(vm, GRACE_EARG, "get: a NULL argument");
  grace_status st = element_ptr(vm, t, index, &p, buf);
  if (st == GRACE_OK) *out = vm_load_i64(t->dtype, p);
  return st;
}

/* ---- shape helpers ---- */
grace_status grace_norm_dim(grace_vm *vm, const char *op, int64_t dim, int ndim, int *out) {
  if (!vm) return GRACE_EARG;
  if (!op) op = "?";   /* only names the op in the message */
  if (!out) return vm_err(vm, GRACE_EARG, "%s: a NULL argument", op);
  int n = ndim > 0 ? ndim : 1;   /* a 0-d tensor accepts dim 0 / -1, as PyTorch */
  int64_t d = dim < 0 ? dim + n : dim;
  if (d < 0 || d >= n) {
    int b = vm->index_base;
    return vm_err(vm, GRACE_EINDEX, "%s: dim %lld out of range for a %d-d tensor (expected %d to %d, or -%d to -1)",
                  op, vm_user_index(dim, b), ndim, b, n - 1 + b, n);
  }
  *out = (int)d;
  return GRACE_OK;
}

grace_status grace_broadcast_shapes(grace_vm *vm, const char *op, int n, const int *ndims, const int64_t *const *sizes,
                                    int *ndim, int64_t *out) {
  if (!vm) return GRACE_EARG;
  if (!op) op = "?";
  if (n < 0 || (n && (!ndims || !sizes)) || !ndim || !out) return vm_err(vm, GRACE_EARG, "%s: a NULL argument", op);
  for (int i = 0; i < n; i++)
    if (ndims[i] < 0 || (ndims[i] && !sizes[i])) return vm_err(vm, GRACE_EARG, "%s: a NULL or negative shape", op);
  int nd = 0;
  for (int i = 0; i < n; i++) if (ndims[i] > nd) nd = ndims[i];
  if (nd > GRACE_MAX_DIMS) return vm_err(vm, GRACE_EARG, "%s: more than %d dims", op, GRACE_MAX_DIMS);
  for (int d = 0; d < nd; d++) out[d] = 1;
  for (int i = 0; i < n; i++) {
    for (int d = 0; d < ndims[i]; d++) {
      int od = nd - ndims[i] + d;
      int64_t s = sizes[i][d];
      if (s == out[od] || s == 1) continue;
      if (out[od] == 1) { out[od] = s; continue; }
      char msg[VM_ERRLEN] = "", *p = msg;
      for (int j = 0; j < n; j++)
        p += snprintf(p, (size_t)(msg + sizeof msg - p), "%s%s", j ? " and " : "",
                      vm_fmt_shape((char[128]){0}, 128, ndims[j], sizes[j]));
      return vm_err(vm, GRACE_ESHAPE, "%s: shapes %s do not broadcast (size %lld against %lld in dim %d)", op, msg,
                    (long long)s, (long long)out[od], od + vm->index_base);
    }
  }
  *ndim = nd;
  return GRACE_OK;
}

void vm_broadcast_dims(int own, const int64_t *tsizes, const int64_t *tstrides, int ndim, const int64_t *sizes,
                       int64_t *strides) {
  for (int d = 0; d < ndim; d++) {
    int td = d - (ndim - own);
    strides[d] = td < 0 || (tsizes[td] == 1 && sizes[d] != 1) ? 0 : tstrides[td];
  }
}

void vm_broadcast_strides(const grace_tensor *t, int ndim, const int64_t *sizes, int64_t *strides) {
  vm_broadcast_dims(t->ndim, t->sizes, t->strides, ndim, sizes, strides);
}

void vm_counter_init(vm_counter *c, int ndim, const int64_t *sizes) {
  c->ndim = ndim;
  for (int d = 0; d < ndim; d++) { c->sizes[d] = sizes[d]; c->idx[d] = 0; }
}
