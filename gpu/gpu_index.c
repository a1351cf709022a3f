/* gpu_index.c: the CUDA backend's indexing by values, following cpu/cpu_index.c check for check: masked_select and
 * nonzero (the NZ template counts, the host reads the count to size the result, then the same template writes),
 * and index_put_ (the element offsets of the index tensors summed by device pointwise ops, then IMOVE writes or
 * IADD adds). A bool mask of index_put_ becomes its nonzero positions first. Counts read on the host cannot be
 * part of a CUDA graph: these ops refuse a capture (a trace never records masked_select or nonzero). */
#include <string.h>
#include "gpu/gpu_exec.h"
#include "gpu/gpu_graph.h"
#include "ir/ir_check.h"
#include "codegen/cg_ops.h"

typedef struct wbuf {
  int n;
  uint64_t w[CG_MAX_WORDS];
} wbuf;
static void put(wbuf *b, int64_t v) { if (b->n < CG_MAX_WORDS) b->w[b->n++] = (uint64_t)v; }
static void put16(wbuf *b, const int64_t *a, int n) { for (int i = 0; i < CGO_MAXD; i++) put(b, i < n ? a[i] : 0); }

static void bcast_strides(const grace_tensor *t, int nd, int64_t *st) {
  int off = nd - t->ndim;
  for (int d = 0; d < nd; d++) st[d] = d < off || t->sizes[d - off] == 1 ? 0 : t->strides[d - off];
}

static grace_status no_capture(grace_vm *vm, const char *op) {
  if (!gpu_graph_capturing(vm)) return GRACE_OK;
  return vm_err(vm, GRACE_EUNSUPPORTED, "%s: reads a count on the host, which a CUDA graph cannot hold", op);
}

/* The NZ template over m (sizes sz, strides ms) and x (strides xs): *count, then (unless only counting) out. */
static grace_status run_nz(grace_vm *vm, const char *op, int variant, int nd, const int64_t *sz, const grace_tensor *m,
                           const int64_t *ms, const grace_tensor *x, const int64_t *xs, grace_dtype odt, int64_t *count,
                           grace_tensor **out) {
  cuda_ctx *c = gpu_ctx(vm);
  int64_t n = vm_numel(nd, sz);
  CUdeviceptr cnt = 0;
  *out = NULL;
  grace_status st = no_capture(vm, op);
  if (st == GRACE_OK) st = cuda_malloc(c, 8, &cnt);
  if (st != GRACE_OK) return st;
  unsigned block = n >= CGO_NZ_THREADS ? CGO_NZ_THREADS : (unsigned)((n + 31) / 32 * 32);
  for (int pass = 0; pass < 2 && st == GRACE_OK; pass++) {
    int64_t osz[2] = {pass ? *count : 0, nd};
    if (pass && !(*out = vm_tensor_new(vm, op, odt, GRACE_CUDA, variant == CGO_NZ_POS ? 2 : 1, osz))) {
      st = vm->status;
      break;
    }
    if (n == 0) { *count = 0; continue; }
    if (pass && *count == 0) break;
    wbuf w = {0};
    put(&w, (int64_t)(pass ? gpu_ptr(*out) : 0)); put(&w, (int64_t)gpu_ptr(m)); put(&w, (int64_t)gpu_ptr(x));
    put(&w, (int64_t)cnt);
    put(&w, n); put(&w, nd); put16(&w, sz, nd); put16(&w, ms, nd); put16(&w, xs, nd); put(&w, vm->index_base);
    st = gpu_ops_launch(vm, CGO_NZ, odt, m->dtype, x->dtype, pass ? variant : CGO_NZ_COUNT, 1, block, w.w, w.n);
    if (st == GRACE_OK && !pass) st = cuda_copy_to_host(c, count, cnt, 8);
  }
  cuda_release(c, cnt, 8);
  return st;
}

static grace_status op_masked_select(grace_vm *vm, grace_tensor *x, grace_tensor *m, grace_tensor **out) {
  grace_status s = vm_check_types(vm, GRACE_OP_MASKED_SELECT, 2, (grace_tensor *[]){x, m}, NULL);
  if (s != GRACE_OK) return s;
  if (m->storage->device != GRACE_CUDA)
    return vm_err(vm, GRACE_EDEVICE, "masked_select: mask is on '%s', the input on 'cuda'", grace_device_name(m->storage->device));
  int64_t sz[GRACE_MAX_DIMS], xs[GRACE_MAX_DIMS], ms[GRACE_MAX_DIMS], count = 0;
  int nd = x->ndim > m->ndim ? x->ndim : m->ndim;
  for (int d = 0; d < nd; d++) {
    int dx = d - (nd - x->ndim), dm = d - (nd - m->ndim);
    int64_t a = dx >= 0 ? x->sizes[dx] : 1, b = dm >= 0 ? m->sizes[dm] : 1;
    sz[d] = a == 1 ? b : a;
  }
  bcast_strides(x, nd, xs);
  bcast_strides(m, nd, ms);
  s = run_nz(vm, "masked_select", CGO_NZ_VALUES, nd, sz, m, ms, x, xs, x->dtype, &count, out);
  if (s != GRACE_OK) { grace_tensor_release(*out); *out = NULL; }
  return s;
}

static grace_status op_nonzero(grace_vm *vm, grace_tensor *x, grace_tensor **out) {
  grace_status s = vm_check_types(vm, GRACE_OP_NONZERO, 1, &x, NULL);
  int64_t count = 0;
  if (s == GRACE_OK) s = run_nz(vm, "nonzero", CGO_NZ_POS, x->ndim, x->sizes, x, x->strides, x, x->strides, GRACE_INT64, &count, out);
  if (s != GRACE_OK) { grace_tensor_release(*out); *out = NULL; }
  return s;
}

/* off = sum over j of (idx_j - base) * dst.stride[j], broadcast, by device pointwise ops (int64: no overflow of
 * int32 indices times strides). Every index is checked against its dim first, with the CPU's message. */
static grace_status put_offsets(grace_vm *vm, const grace_tensor *dst, grace_tensor *const *idx, int k, grace_tensor **off) {
  grace_status s = GRACE_OK;
  grace_tensor *acc = NULL;
  for (int j = 0; j < k && s == GRACE_OK; j++) {
    grace_tensor *t = NULL, *u = NULL, *sb = NULL, *sm = NULL;
    grace_attrs ca = {.has_dtype = 1, .dtype = GRACE_INT64};
    if ((s = gpu_ops_check_index(vm, "index_put_", idx[j], dst->sizes[j], j)) != GRACE_OK) break;
    if ((s = grace_tensor_scalar_int(vm, vm->index_base, &sb)) == GRACE_OK &&
        (s = grace_tensor_scalar_int(vm, dst->strides[j], &sm)) == GRACE_OK &&
        (s = vm_route(vm, GRACE_OP_CAST, 1, &idx[j], &ca, 1, &t)) == GRACE_OK &&
        (s = vm_route(vm, GRACE_OP_SUB, 2, (grace_tensor *[]){t, sb}, NULL, 1, &u)) == GRACE_OK) {
      grace_tensor_release(t);
      t = NULL;
      if ((s = vm_route(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){u, sm}, NULL, 1, &t)) == GRACE_OK && acc) {
        grace_tensor *sum = NULL;
        s = vm_route(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){acc, t}, NULL, 1, &sum);
        grace_tensor_release(acc);
        grace_tensor_release(t);
        acc = sum;
        t = NULL;
      } else if (s == GRACE_OK) {
        acc = t;
        t = NULL;
      }
    }
    grace_tensor_release(t); grace_tensor_release(u); grace_tensor_release(sb); grace_tensor_release(sm);
  }
  if (s != GRACE_OK) { grace_tensor_release(acc); return s; }
  s = vm_route(vm, GRACE_OP_CONTIGUOUS, 1, &acc, NULL, 1, off);
  grace_tensor_release(acc);
  return s;
}

/* Writes (IMOVE) or adds (IADD) v, broadcast to the selection off's shape + dst's dims from k on. */
static grace_status put_values(grace_vm *vm, grace_tensor *dst, const grace_tensor *v, const grace_tensor *off, int k, int acc) {
  int nb = off->ndim, nr = dst->ndim - k, nd = nb + nr;
  int64_t sz[GRACE_MAX_DIMS], vs[GRACE_MAX_DIMS], ds[GRACE_MAX_DIMS] = {0}, is[GRACE_MAX_DIMS] = {0};
  if (nd > CGO_MAXD) return vm_err(vm, GRACE_EUNSUPPORTED, "index_put_: a selection of %d dims on cuda", nd);
  for (int d = 0; d < nb; d++) { sz[d] = off->sizes[d]; is[d] = off->strides[d]; }
  for (int d = 0; d < nr; d++) { sz[nb + d] = dst->sizes[k + d]; ds[nb + d] = dst->strides[k + d]; }
  for (int d = 0; d < v->ndim; d++) {   /* the mask's count is known only now */
    int at = nd - v->ndim + d;
    if (at < 0 || (v->sizes[d] != sz[at] && v->sizes[d] != 1))
      return vm_err(vm, GRACE_ESHAPE, "index_put_: values of shape %s do not broadcast to the selection's shape %s",
                    VM_SHAPE(v), vm_fmt_shape((char[128]){0}, 128, nd, sz));
  }
  bcast_strides(v, nd, vs);
  int64_t n = vm_numel(nd, sz);
  if (n == 0) return GRACE_OK;
  wbuf w = {0};
  put(&w, (int64_t)gpu_ptr(dst)); put(&w, (int64_t)gpu_ptr(v)); put(&w, (int64_t)gpu_ptr(off));
  put(&w, n); put(&w, nd); put16(&w, sz, nd); put16(&w, vs, nd); put16(&w, ds, nd); put16(&w, is, nd);
  int64_t g = (n + 255) / 256;
  unsigned grid = (unsigned)(g > 65535 ? 65535 : g);
  if (acc) return gpu_ops_launch(vm, CGO_IADD, dst->dtype, v->dtype, GRACE_INT64, 0, grid, 256, w.w, w.n);
  /* IMOVE: len 1, lss lds lis 0, sq 0, dq 1 (the offset is in elements), base 0, any offset in bounds */
  put(&w, 1); put(&w, 0); put(&w, 0); put(&w, 0); put(&w, 0); put(&w, 1); put(&w, 0); put(&w, INT64_MAX);
  return gpu_ops_launch(vm, CGO_IMOVE, dst->dtype, v->dtype, GRACE_INT64, 0, grid, 256, w.w, w.n);
}

static grace_status op_index_put(grace_vm *vm, int nin, grace_tensor *const *in, const grace_attrs *a) {
  grace_tensor *dst = in[0], *v = in[1], *moved = NULL, *nz = NULL, *off = NULL, *cols[GRACE_MAX_DIMS] = {0};
  grace_tensor *const *idx = in + 2;
  int k = nin - 2, acc = a && a->flag;
  grace_status s = vm_check_types(vm, GRACE_OP_INDEX_PUT_, nin, in, a);
  if (s == GRACE_OK) s = vm_check_writable(vm, "index_put_", dst);
  if (s == GRACE_OK && acc && !cg_ops_iadd_dtype(dst->dtype))
    s = vm_err(vm, GRACE_EUNSUPPORTED, "index_put_: accumulate into %s has no device kernel", grace_dtype_name(dst->dtype));
  for (int j = 0; j < k && s == GRACE_OK; j++)
    if (idx[j]->storage->device != GRACE_CUDA)
      s = vm_err(vm, GRACE_EDEVICE, "index_put_: index %d is on '%s', the destination on 'cuda'", j + vm->index_base,
                 grace_device_name(idx[j]->storage->device));
  if (s == GRACE_OK && v->storage->device != GRACE_CUDA) {   /* a number or a 0-d host tensor */
    grace_attrs da = {.device = GRACE_CUDA};
    if ((s = vm_route(vm, GRACE_OP_TO_DEVICE, 1, &v, &da, 1, &moved)) == GRACE_OK) v = moved;
  }
  if (s == GRACE_OK && in[2]->dtype == GRACE_BOOL) {
    k = in[2]->ndim;
    s = op_nonzero(vm, in[2], &nz);
    for (int j = 0; j < k && s == GRACE_OK; j++) {
      grace_attrs sa = {.ndims = 1, .dims = {1}, .i0 = j};
      s = vm_view_run(vm, GRACE_OP_SELECT, 1, &nz, &sa, 1, &cols[j]);
    }
    idx = cols;
  }
  if (s == GRACE_OK) s = put_offsets(vm, dst, idx, k, &off);
  if (s == GRACE_OK) s = put_values(vm, dst, v, off, k, acc);
  if (s == GRACE_OK) vm_bump_version(dst);
  for (int j = 0; j < GRACE_MAX_DIMS; j++) grace_tensor_release(cols[j]);
  grace_tensor_release(nz); grace_tensor_release(off); grace_tensor_release(moved);
  return s;
}

grace_status gpu_index_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout,
                           grace_tensor **out) {
  switch (op) {
  case GRACE_OP_MASKED_SELECT: return op_masked_select(vm, in[0], in[1], out);
  case GRACE_OP_NONZERO: return op_nonzero(vm, in[0], out);
  case GRACE_OP_INDEX_PUT_: return op_index_put(vm, nin, in, a);
  default: return vm_err(vm, GRACE_EUNSUPPORTED, "%s: not an indexing op of the CUDA backend", grace_op_name(op));
  }
}
