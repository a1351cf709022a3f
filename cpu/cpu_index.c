/* cpu_index.c: the CPU backend's indexing by values: masked_select and nonzero (results sized by the data, so
 * each counts first, then fills), and index_put_ (writes, or adds with accumulate, at positions given by index
 * tensors or a bool mask). Type checks are ir_infer's (vm_check_types); value checks (an index out of range, a
 * count of values that does not match the mask's) stay here. */
#include "cpu/cpu_kernels.h"
#include "ir/ir_check.h"

/* t's strides aligned to a broadcast shape of nd dims (0 along dims t lacks or has of size 1). */
static void bcast_strides(const grace_tensor *t, int nd, int64_t *st) {
  int off = nd - t->ndim;
  for (int d = 0; d < nd; d++) st[d] = d < off || t->sizes[d - off] == 1 ? 0 : t->strides[d - off];
}

static int is_nonzero(grace_dtype dt, const char *p) {
  return grace_dtype_is_float(dt) ? vm_load_f64(dt, p) != 0 : vm_load_i64(dt, p) != 0;   /* NaN is nonzero */
}

/* The broadcast shape of x and mask (ir_infer checked that it exists). */
static int bcast_shape(const grace_tensor *x, const grace_tensor *m, int64_t *sz) {
  int nd = x->ndim > m->ndim ? x->ndim : m->ndim;
  for (int d = 0; d < nd; d++) {
    int dx = d - (nd - x->ndim), dm = d - (nd - m->ndim);
    int64_t a = dx >= 0 ? x->sizes[dx] : 1, b = dm >= 0 ? m->sizes[dm] : 1;
    sz[d] = a == 1 ? b : a;
  }
  return nd;
}

/* Counts the true elements of m over the shape (nd, sz) with strides ms. */
static int64_t count_true(const grace_tensor *m, int nd, const int64_t *sz, const int64_t *ms) {
  int64_t n = vm_numel(nd, sz), cnt = 0, es = (int64_t)grace_dtype_size(m->dtype);
  if (n == 0) return 0;
  const char *mp = vm_ptr(m);
  vm_counter c;
  vm_counter_init(&c, nd, sz);
  for (;;) {
    cnt += is_nonzero(m->dtype, mp + vm_offset(nd, c.idx, ms) * es);
    if (!vm_counter_next(&c)) break;
  }
  return cnt;
}

static grace_status op_masked_select(grace_vm *vm, grace_tensor *x, grace_tensor *m, grace_tensor **out) {
  grace_status s = vm_check_types(vm, GRACE_OP_MASKED_SELECT, 2, (grace_tensor *[]){x, m}, NULL);
  if (s != GRACE_OK) return s;
  int64_t sz[GRACE_MAX_DIMS], xs[GRACE_MAX_DIMS], ms[GRACE_MAX_DIMS];
  int nd = bcast_shape(x, m, sz);
  bcast_strides(x, nd, xs);
  bcast_strides(m, nd, ms);
  int64_t cnt = count_true(m, nd, sz, ms);
  grace_tensor *o = vm_tensor_new(vm, "masked_select", x->dtype, GRACE_CPU, 1, &cnt);
  if (!o) return vm->status;
  if (cnt > 0) {
    int64_t es = (int64_t)grace_dtype_size(x->dtype), k = 0;
    const char *xp = vm_ptr(x), *mp = vm_ptr(m);
    char *op = vm_ptr(o);
    vm_counter c;
    vm_counter_init(&c, nd, sz);
    for (;;) {   /* row-major order, as PyTorch's */
      if (*(mp + vm_offset(nd, c.idx, ms))) memcpy(op + (k++) * es, xp + vm_offset(nd, c.idx, xs) * es, (size_t)es);
      if (!vm_counter_next(&c)) break;
    }
  }
  *out = o;
  return GRACE_OK;
}

static grace_status op_nonzero(grace_vm *vm, grace_tensor *x, grace_tensor **out) {
  grace_status s = vm_check_types(vm, GRACE_OP_NONZERO, 1, &x, NULL);
  if (s != GRACE_OK) return s;
  int nd = x->ndim;
  int64_t cnt = count_true(x, nd, x->sizes, x->strides);
  grace_tensor *o = vm_tensor_new(vm, "nonzero", GRACE_INT64, GRACE_CPU, 2, (int64_t[]){cnt, nd});
  if (!o) return vm->status;
  if (cnt > 0) {
    int64_t es = (int64_t)grace_dtype_size(x->dtype), *op = (int64_t *)vm_ptr(o), k = 0;
    const char *xp = vm_ptr(x);
    vm_counter c;
    vm_counter_init(&c, nd, x->sizes);
    for (;;) {
      if (is_nonzero(x->dtype, xp + vm_offset(nd, c.idx, x->strides) * es)) {
        for (int d = 0; d < nd; d++) op[k * nd + d] = c.idx[d] + vm->index_base;
        k++;
      }
      if (!vm_counter_next(&c)) break;
    }
  }
  *out = o;
  return GRACE_OK;
}

/* ---- index_put_ ---- */
typedef struct iput {
  int k, nb, nrest;                       /* indexed dims, dims of the broadcast index shape, dst's other dims */
  int64_t bsz[GRACE_MAX_DIMS], ist[GRACE_MAX_DIMS][GRACE_MAX_DIMS];
  int64_t nsel;                           /* elements of the broadcast index shape */
} iput;

/* The element offsets into dst of every position of the broadcast index shape, each index checked against its
 * dim's size. *offs is freed by the caller (nsel entries, at least one allocated). */
static grace_status put_offsets(grace_vm *vm, const grace_tensor *dst, grace_tensor *const *idx, iput *p, int64_t **offs) {
  int64_t *o = vm_alloc_data(vm, "index_put_", (size_t)(p->nsel > 0 ? p->nsel : 1), sizeof(int64_t));
  if (!o) return vm->status;
  *offs = o;
  if (p->nsel == 0) return GRACE_OK;
  vm_counter c;
  vm_counter_init(&c, p->nb, p->bsz);
  for (int64_t i = 0;; i++) {
    o[i] = 0;
    for (int j = 0; j < p->k; j++) {
      const grace_tensor *t = idx[j];
      int64_t v = vm_load_i64(t->dtype, (const char *)vm_ptr(t) + vm_offset(p->nb, c.idx, p->ist[j]) * (int64_t)grace_dtype_size(t->dtype));
      int64_t q;
      if (!vm_sub_ok(v, vm->index_base, &q)) q = -1;   /* INT64_MIN with base 1: out of range, not overflow */
      if (q < 0 || q >= dst->sizes[j])
        return vm_err(vm, GRACE_EINDEX, "index_put_: index %lld out of range for dim %d of size %lld", (long long)v,
                      j + vm->index_base, (long long)dst->sizes[j]);
      o[i] += q * dst->strides[j];
    }
    if (!vm_counter_next(&c)) break;
  }
  return GRACE_OK;
}

/* Writes (or adds) values, broadcast to the selection [broadcast index shape] + dst's other dims, in order. */
static grace_status put_values(grace_vm *vm, grace_tensor *dst, const grace_tensor *v, const iput *p, const int64_t *offs,
                               int acc) {
  int nd = p->nb + p->nrest;
  int64_t sz[GRACE_MAX_DIMS], vs[GRACE_MAX_DIMS], rs[GRACE_MAX_DIMS], n;
  memcpy(sz, p->bsz, sizeof(int64_t) * (size_t)p->nb);
  for (int d = 0; d < p->nrest; d++) { sz[p->nb + d] = dst->sizes[p->k + d]; rs[d] = dst->strides[p->k + d]; }
  for (int d = 0; d < v->ndim; d++) {   /* the mask's count is known only now */
    int at = nd - v->ndim + d;
    if (at < 0 || (v->sizes[d] != sz[at] && v->sizes[d] != 1))
      return vm_err(vm, GRACE_ESHAPE, "index_put_: values of shape %s do not broadcast to the selection's shape %s",
                    VM_SHAPE(v), vm_fmt_shape((char[128]){0}, 128, nd, sz));
  }
  bcast_strides(v, nd, vs);
  if ((n = vm_numel(nd, sz)) == 0) return GRACE_OK;
  int64_t rest = vm_numel(p->nrest, sz + p->nb);
  int64_t des = (int64_t)grace_dtype_size(dst->dtype), ves = (int64_t)grace_dtype_size(v->dtype);
  int fl = grace_dtype_is_float(dst->dtype) || grace_dtype_is_float(v->dtype);
  char *dp = vm_ptr(dst);
  const char *vp = vm_ptr(v);
  vm_counter c;
  vm_counter_init(&c, nd, sz);
  for (int64_t i = 0; i < n; i++) {   /* in order: with repeated positions the last write wins, sums are in order */
    char *to = dp + (offs[i / rest] + vm_offset(p->nrest, c.idx + p->nb, rs)) * des;
    const char *from = vp + vm_offset(nd, c.idx, vs) * ves;
    if (dst->dtype == GRACE_BOOL && acc) vm_store_i64(GRACE_BOOL, to, vm_load_i64(GRACE_BOOL, to) | is_nonzero(v->dtype, from));
    else if (fl) vm_store_f64(dst->dtype, to, (acc ? vm_load_f64(dst->dtype, to) : 0) + vm_load_f64(v->dtype, from));
    else vm_store_i64(dst->dtype, to, (int64_t)((uint64_t)(acc ? vm_load_i64(dst->dtype, to) : 0) + (uint64_t)vm_load_i64(v->dtype, from)));
    vm_counter_next(&c);
  }
  return GRACE_OK;
}

/* A bool mask becomes its nonzero positions' columns, one index tensor per mask dim (*nz owns them). */
static grace_status mask_columns(grace_vm *vm, grace_tensor *m, grace_tensor **nz, grace_tensor **cols) {
  grace_status s = op_nonzero(vm, m, nz);
  for (int j = 0; j < m->ndim && s == GRACE_OK; j++) {
    grace_attrs a = {.ndims = 1, .dims = {1}, .i0 = j};
    s = vm_view_run(vm, GRACE_OP_SELECT, 1, nz, &a, 1, &cols[j]);
  }
  return s;
}

static grace_status op_index_put(grace_vm *vm, int nin, grace_tensor *const *in, const grace_attrs *a) {
  grace_tensor *dst = in[0], *v = in[1], *cols[GRACE_MAX_DIMS] = {0}, *nz = NULL;
  grace_status s = vm_check_types(vm, GRACE_OP_INDEX_PUT_, nin, in, a);
  if (s == GRACE_OK) s = vm_check_writable(vm, "index_put_", dst);
  if (s != GRACE_OK) return s;
  iput p = {.k = nin - 2};
  grace_tensor *const *idx = in + 2;
  if (in[2]->dtype == GRACE_BOOL) {
    p.k = in[2]->ndim;
    if ((s = mask_columns(vm, in[2], &nz, cols)) != GRACE_OK) goto done;
    idx = cols;
  }
  p.nrest = dst->ndim - p.k;
  for (int j = 0; j < p.k; j++) if (idx[j]->ndim > p.nb) p.nb = idx[j]->ndim;
  for (int d = 0; d < p.nb; d++) {
    p.bsz[d] = 1;
    for (int j = 0; j < p.k; j++) {   /* ir_infer checked that they broadcast */
      int dj = d - (p.nb - idx[j]->ndim);
      if (dj >= 0 && idx[j]->sizes[dj] != 1) p.bsz[d] = idx[j]->sizes[dj];
    }
  }
  for (int j = 0; j < p.k; j++) bcast_strides(idx[j], p.nb, p.ist[j]);
  p.nsel = vm_numel(p.nb, p.bsz);
  int64_t *offs = NULL;
  if ((s = put_offsets(vm, dst, idx, &p, &offs)) == GRACE_OK) s = put_values(vm, dst, v, &p, offs, a && a->flag);
  if (offs) vm_free(vm, offs, (size_t)(p.nsel > 0 ? p.nsel : 1) * sizeof(int64_t));
  if (s == GRACE_OK) vm_bump_version(dst);
done:
  for (int j = 0; j < GRACE_MAX_DIMS; j++) grace_tensor_release(cols[j]);
  grace_tensor_release(nz);
  return s;
}

grace_status cpu_index_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout,
                           grace_tensor **out) {
  switch (op) {
  case GRACE_OP_MASKED_SELECT: return op_masked_select(vm, in[0], in[1], out);
  case GRACE_OP_NONZERO: return op_nonzero(vm, in[0], out);
  case GRACE_OP_INDEX_PUT_: return op_index_put(vm, nin, in, a);
  default: return vm_err(vm, GRACE_EUNSUPPORTED, "%s: not an indexing op of the CPU backend", grace_op_name(op));
  }
}
