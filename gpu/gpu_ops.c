/* gpu_ops.c: grace_run's device branch for the ops that are not fused groups: data movement, scans, row
 * normalisations, creation and in-place writes, each with a template of codegen/cg_ops.c. The host side
 * follows the CPU backend's structure (cpu/cpu_shape.c, cpu_reduce_scan.c, cpu_reduce_norm.c, cpu_create.c,
 * cpu_pointwise.c's copy_/fill_) check for check and message for message, so both devices reject the same
 * inputs with the same words; only the element loops move to the device. Index values are checked on the
 * device by a kernel that records the first bad position; the host reads it back and reports the value. */
#include <math.h>
#include "gpu/gpu_exec.h"
#include "gpu/gpu_graph.h"
#include "cuda/cuda_graph.h"
#include "ir/ir.h"
#include "ir/ir_check.h"
#include "codegen/cg_ops.h"

/* ---- packing and launching ---- */
typedef struct words {
  int n;
  uint64_t w[CG_MAX_WORDS];
} words;

static void wput(words *w, int64_t v) { if (w->n < CG_MAX_WORDS) w->w[w->n++] = (uint64_t)v; }
static void wptr(words *w, CUdeviceptr p) { if (w->n < CG_MAX_WORDS) w->w[w->n++] = (uint64_t)p; }
static void warr(words *w, const int64_t *a, int n) { for (int i = 0; i < CGO_MAXD; i++) wput(w, i < n ? a[i] : 0); }
static int64_t dbits(double d) { int64_t b; memcpy(&b, &d, 8); return b; }

static unsigned blocks_for(int64_t n, int64_t per) {
  int64_t g = (n + per - 1) / per;
  return (unsigned)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

/* Functions already loaded, by (template, dtypes, variant), so an eager op neither regenerates nor hashes its
 * source. The table hangs off the VM through ops_cache_slot; without a slot every call goes through
 * cuda_module_get's memory cache. */
#define OPS_CACHE_CAP 512
typedef struct ops_entry {
  int used;
  cgo_spec spec;
  CUfunction f;
} ops_entry;
typedef struct ops_cache {
  int n;
  ops_entry tab[OPS_CACHE_CAP];
} ops_cache;

/* The VM's pointer to its ops_cache (NULL: no field for it in struct grace_vm yet). */
static void **ops_cache_slot(grace_vm *vm) { return &vm->gpu_ops; }

/* Frees the VM's table (at VM teardown, before the CUDA context goes). */
void gpu_ops_free(grace_vm *vm) {
  void **slot = ops_cache_slot(vm);
  if (slot && *slot) { vm_free(vm, *slot, sizeof(ops_cache)); *slot = NULL; }
}

static unsigned spec_hash(const cgo_spec *s) {
  unsigned h = 2166136261u;
  int v[5] = {(int)s->tmpl, (int)s->dt[0], (int)s->dt[1], (int)s->dt[2], s->variant};
  for (int i = 0; i < 5; i++) h = (h ^ (unsigned)v[i]) * 16777619u;
  return h;
}
static int spec_equal(const cgo_spec *a, const cgo_spec *b) {
  return a->tmpl == b->tmpl && a->dt[0] == b->dt[0] && a->dt[1] == b->dt[1] && a->dt[2] == b->dt[2] &&
         a->variant == b->variant && a->indirect == b->indirect && a->pred == b->pred;
}

static grace_status get_function(grace_vm *vm, cuda_ctx *c, const cgo_spec *spec, CUfunction *f) {
  void **slot = ops_cache_slot(vm);
  ops_cache *oc = slot ? *slot : NULL;
  if (slot && !oc) oc = *slot = vm_calloc(vm, sizeof(ops_cache));   /* no memory: go without the table */
  unsigned i = spec_hash(spec) % OPS_CACHE_CAP;
  if (oc) {
    while (oc->tab[i].used && !spec_equal(&oc->tab[i].spec, spec)) i = (i + 1) % OPS_CACHE_CAP;
    if (oc->tab[i].used) { *f = oc->tab[i].f; return GRACE_OK; }
  }
  cg_kernel k;
  cuda_module *m = NULL;
  grace_status st = cg_ops_source(vm, spec, &k);
  if (st == GRACE_OK) st = cuda_module_get(c, k.src, &m);
  if (st == GRACE_OK) st = cuda_module_function(c, m, k.name, f);
  cg_kernel_free(vm, &k);
  if (st == GRACE_OK && oc) {
    if (oc->n >= OPS_CACHE_CAP * 3 / 4) {   /* full: start over (the modules stay loaded) */
      memset(oc, 0, sizeof *oc);
      i = spec_hash(spec) % OPS_CACHE_CAP;
    }
    oc->tab[i] = (ops_entry){1, *spec, *f};
    oc->n++;
  }
  return st;
}

/* Finds (or compiles) and launches one template instance. In a capture with indirection the pointer and scalar
 * words go through table slots; the last `own` scalar words are slots already (gpu_graph_rng's). */
static grace_status launch_own(grace_vm *vm, cgo_tmpl t, grace_dtype d0, grace_dtype d1, grace_dtype d2, int variant,
                               unsigned grid, unsigned block, unsigned smem, const words *w, int own, unsigned cluster) {
  cuda_ctx *c = gpu_ctx(vm);
  cgo_spec spec = {t, {d0, d1, d2}, variant, 0, cuda_pred_word(c, NULL) != 0};   /* pred: in a predicated body */
  words wi;
  cuda_capture *ind = cuda_capture_indirect(c);
  if (ind) {   /* captured for a graph: pointers and scalars through slots of its argument table */
    spec.indirect = 1;
    wi = *w;
    int np = cg_ops_nptr(t), ns = cg_ops_nscalar(t);
    for (int i = 0; i < wi.n - own; i++)
      if ((i < np || i >= wi.n - ns) && !(wi.w[i] = cuda_capture_slot(ind, w->w[i])))
        return vm_err(vm, GRACE_EUNSUPPORTED, "%s: the graph's argument table is full", cg_ops_tmpl_name(t));
    w = &wi;
  }
  CUfunction f = NULL;
  grace_status st = get_function(vm, c, &spec, &f);
  if (st == GRACE_OK && cluster > 1)
    st = cuda_launch_cluster(c, f, (unsigned[]){grid, 1, 1}, (unsigned[]){block, 1, 1}, smem, w->w,
                             sizeof(uint64_t) * (size_t)w->n, cluster);
  else if (st == GRACE_OK)
    st = cuda_launch_overlapped(c, f, (unsigned[]){grid, 1, 1}, (unsigned[]){block, 1, 1}, smem, w->w,
                                sizeof(uint64_t) * (size_t)w->n);
  return st;
}

static grace_status launch(grace_vm *vm, cgo_tmpl t, grace_dtype d0, grace_dtype d1, grace_dtype d2, int variant,
                           unsigned grid, unsigned block, unsigned smem, const words *w) {
  return launch_own(vm, t, d0, d1, d2, variant, grid, block, smem, w, 0, 0);
}

static grace_tensor *dev_new(grace_vm *vm, const char *op, grace_dtype dt, int nd, const int64_t *sizes) {
  return vm_tensor_new(vm, op, dt, GRACE_CUDA, nd, sizes);
}

static CUdeviceptr at(CUdeviceptr base, int64_t elems, grace_dtype dt) {
  return base + (CUdeviceptr)(elems * (int64_t)grace_dtype_size(dt));
}

/* ---- the strided copy (cpu_shape.c's cp_run on the device) ---- */
/* A strided copy's iteration with size-1 dims dropped and runs contiguous in both source and destination merged:
 * its dims (at least one), or 0 when it has no element. */
static int copy_dims(int nd, const int64_t *sizes, const int64_t *ss, const int64_t *ds, int64_t *sz, int64_t *a,
                     int64_t *b) {
  int k = 0;
  for (int d = 0; d < nd; d++) {
    if (sizes[d] == 0) return 0;
    if (sizes[d] == 1) continue;
    if (k > 0 && a[k - 1] == ss[d] * sizes[d] && b[k - 1] == ds[d] * sizes[d]) {
      sz[k - 1] *= sizes[d]; a[k - 1] = ss[d]; b[k - 1] = ds[d];
      continue;
    }
    sz[k] = sizes[d]; a[k] = ss[d]; b[k] = ds[d];
    k++;
  }
  if (k == 0) { k = 1; sz[0] = 1; a[0] = b[0] = 1; }
  return k;
}

static grace_status dev_copy(grace_vm *vm, int nd, const int64_t *sizes, CUdeviceptr src, const int64_t *ss,
                             grace_dtype sdt, CUdeviceptr dst, const int64_t *ds, grace_dtype ddt) {
  int64_t sz[CGO_MAXD], a[CGO_MAXD], b[CGO_MAXD];
  int k = copy_dims(nd, sizes, ss, ds, sz, a, b);
  if (k == 0) return GRACE_OK;
  int64_t n = vm_numel(k, sz);
  words w = {0};
  wptr(&w, dst); wptr(&w, src);
  wput(&w, n); wput(&w, k); warr(&w, sz, k); warr(&w, a, k); warr(&w, b, k);
  int flat = k == 1 && a[0] == 1 && b[0] == 1;
  /* a flat copy is a driver copy, unless a graph is being captured with indirection (its kernel reads slots) or
   * the copy is in a predicated body (gpu_pred.c: a kernel can be skipped, a driver copy cannot) */
  cuda_ctx *c = gpu_ctx(vm);
  if (flat && sdt == ddt && !cuda_capture_indirect(c) && !cuda_pred_word(c, NULL))
    return cuda_copy_device(c, dst, src, (size_t)n * grace_dtype_size(ddt));
  return launch(vm, CGO_COPY, ddt, sdt, ddt, flat, blocks_for(n, 256), 256, 0, &w);
}

/* One piece of a cat or stack: a strided source copied to dst + off (elements) with strides ds. */
typedef struct copy_piece {
  CUdeviceptr src;
  grace_dtype sdt;
  int nd;
  const int64_t *sizes, *ss, *ds;
  int64_t off;
} copy_piece;

/* The pieces (at most CGO_CAT_MAX, one source dtype) into one destination in one launch: a cat or stack of a few
 * inputs is one kernel, not one per input. A piece alone goes as a plain copy. */
_Static_assert(CGO_CAT_MAXD >= GRACE_MAX_DIMS, "a cat piece takes every dim a tensor has");
static grace_status dev_copy_pieces(grace_vm *vm, CUdeviceptr dst, grace_dtype ddt, int np, const copy_piece *pc) {
  int64_t sz[CGO_CAT_MAX][CGO_MAXD], a[CGO_CAT_MAX][CGO_MAXD], b[CGO_CAT_MAX][CGO_MAXD], start[CGO_CAT_MAX],
          base[CGO_CAT_MAX], nds[CGO_CAT_MAX], n = 0;
  CUdeviceptr src[CGO_CAT_MAX];
  int k = 0;
  for (int j = 0; j < np && j < CGO_CAT_MAX; j++) {
    int d = copy_dims(pc[j].nd, pc[j].sizes, pc[j].ss, pc[j].ds, sz[k], a[k], b[k]);
    if (d == 0) continue;   /* an empty piece */
    start[k] = n; base[k] = pc[j].off; nds[k] = d; src[k] = pc[j].src;
    n += vm_numel(d, sz[k]);
    k++;
  }
  if (k == 0) return GRACE_OK;
  if (k == 1)
    return dev_copy(vm, (int)nds[0], sz[0], src[0], a[0], pc[0].sdt, at(dst, base[0], ddt), b[0], ddt);
  words w = {0};
  wptr(&w, dst);
  for (int t = 0; t < CGO_CAT_MAX; t++) wptr(&w, t < k ? src[t] : 0);
  wput(&w, n); wput(&w, k);
  for (int t = 0; t < CGO_CAT_MAX; t++) wput(&w, t < k ? start[t] : n);
  for (int t = 0; t < CGO_CAT_MAX; t++) wput(&w, t < k ? base[t] : 0);
  for (int t = 0; t < CGO_CAT_MAX; t++) wput(&w, t < k ? nds[t] : 0);
  int64_t *arr[3] = {&sz[0][0], &a[0][0], &b[0][0]};
  for (int q = 0; q < 3; q++)
    for (int t = 0; t < CGO_CAT_MAX; t++)
      for (int d = 0; d < CGO_CAT_MAXD; d++) wput(&w, t < k && d < nds[t] ? arr[q][t * CGO_MAXD + d] : 0);
  return launch(vm, CGO_CAT, ddt, pc[0].sdt, ddt, 0, blocks_for(n, 256), 256, 0, &w);
}

/* The pieces of one cat or stack as they come: a launch for each run of one source dtype, CGO_CAT_MAX pieces a
 * launch. batch_add copies what it holds when the piece would not join it; batch_end copies the rest. */
typedef struct copy_batch {
  CUdeviceptr dst;
  grace_dtype ddt;
  int np;
  copy_piece pc[CGO_CAT_MAX];
} copy_batch;

static grace_status batch_end(grace_vm *vm, copy_batch *b) {
  grace_status s = b->np ? dev_copy_pieces(vm, b->dst, b->ddt, b->np, b->pc) : GRACE_OK;
  b->np = 0;
  return s;
}
static grace_status batch_add(grace_vm *vm, copy_batch *b, copy_piece p) {
  grace_status s = b->np == CGO_CAT_MAX || (b->np && b->pc[0].sdt != p.sdt) ? batch_end(vm, b) : GRACE_OK;
  b->pc[b->np++] = p;
  return s;
}



static grace_status dev_clone(grace_vm *vm, const char *name, const grace_tensor *src, grace_tensor **out);

/* cpu_copy_into on the device: src broadcast to dst, converted to dst's dtype; overlapping storage is read
 * through a copy. */
static grace_status copy_into(grace_vm *vm, const char *op, grace_tensor *dst, const grace_tensor *src) {
  if (src->storage->device != GRACE_CUDA)   /* grace_run moves a host source first: a caller's bug */
    return vm_err(vm, GRACE_EDEVICE, "%s: source is on '%s', the destination on 'cuda'", op,
                  grace_device_name(src->storage->device));
  int empty, overlap;
  grace_status st = vm_check_copy(vm, op, dst, src, &empty, &overlap);
  if (st != GRACE_OK || empty) return st;
  if (overlap) {
    grace_tensor *tmp = NULL;
    if ((st = dev_clone(vm, op, src, &tmp)) != GRACE_OK) return st;
    st = copy_into(vm, op, dst, tmp);
    grace_tensor_release(tmp);
    return st;
  }
  int64_t bst[GRACE_MAX_DIMS];
  vm_broadcast_strides(src, dst->ndim, dst->sizes, bst);
  return dev_copy(vm, dst->ndim, dst->sizes, gpu_ptr(src), bst, src->dtype, gpu_ptr(dst), dst->strides, dst->dtype);
}

static grace_status dev_clone(grace_vm *vm, const char *name, const grace_tensor *src, grace_tensor **out) {
  grace_tensor *t = dev_new(vm, name, src->dtype, src->ndim, src->sizes);
  if (!t) return vm->status;
  grace_status st = copy_into(vm, name, t, src);
  if (st != GRACE_OK) { grace_tensor_release(t); return st; }
  *out = t;
  return GRACE_OK;
}

/* A value as the bits dt stores it, converted as the CPU's fill and full do. */
static int64_t value_bits(grace_dtype dt, const grace_attrs *a) {
  _Alignas(8) char v[8] = {0};
  if (grace_dtype_is_int(dt) && ((a->exact & 1) || a->a == floor(a->a))) vm_store_i64(dt, v, vm_attr_int(a, 0));
  else vm_store_f64(dt, v, a->a);
  int64_t bits;
  memcpy(&bits, v, 8);
  return bits;
}

static grace_status dev_fill(grace_vm *vm, grace_tensor *dst, int64_t bits) {
  int64_t n = vm_numel(dst->ndim, dst->sizes);
  if (n == 0) return GRACE_OK;
  words w = {0};
  wptr(&w, gpu_ptr(dst));
  wput(&w, n); wput(&w, dst->ndim); warr(&w, dst->sizes, dst->ndim); warr(&w, dst->strides, dst->ndim);
  wput(&w, bits);
  return launch(vm, CGO_FILL, dst->dtype, dst->dtype, dst->dtype, 0, blocks_for(n, 256), 256, 0, &w);
}

/* ---- index tensors ---- */
typedef struct tview {
  int nd;
  int64_t sizes[GRACE_MAX_DIMS], strides[GRACE_MAX_DIMS];
} tview;

static tview tv_of(const grace_tensor *t) {
  tview v = {.nd = t->ndim};
  for (int d = 0; d < t->ndim; d++) { v.sizes[d] = t->sizes[d]; v.strides[d] = t->strides[d]; }
  if (t->ndim == 0) { v.nd = 1; v.sizes[0] = 1; v.strides[0] = 0; }
  return v;
}


/* Every value of idx must lie in [index_base, index_base + size): a kernel records the first bad row-major
 * position in a device word; the host reads it and then the value, for the CPU's message. dim < 0: embedding. */
static grace_status check_index(grace_vm *vm, const char *op, const grace_tensor *idx, int64_t size, int dim) {
  int64_t n = vm_numel(idx->ndim, idx->sizes);
  if (n == 0) return GRACE_OK;
  if (idx->storage->device != GRACE_CUDA)
    return vm_err(vm, GRACE_EDEVICE, "%s: index is on '%s', the input on 'cuda'", op, grace_device_name(idx->storage->device));
  if (gpu_graph_check_seen(vm, idx, size)) return GRACE_OK;   /* (false outside a capture) */
  cuda_ctx *c = gpu_ctx(vm);
  CUdeviceptr flag = 0;
  grace_status st = cuda_malloc(c, 8, &flag);
  if (st != GRACE_OK) return st;
  int64_t first = INT64_MAX;
  if ((st = cuda_memset(c, flag, 0x7f, 8)) == GRACE_OK) {
    words w = {0};
    wptr(&w, gpu_ptr(idx)); wptr(&w, flag);
    wput(&w, n); wput(&w, idx->ndim); warr(&w, idx->sizes, idx->ndim); warr(&w, idx->strides, idx->ndim);
    wput(&w, size); wput(&w, vm->index_base);
    st = launch(vm, CGO_ICHECK, idx->dtype, GRACE_INT64, idx->dtype, 0, blocks_for(n, 256), 256, 0, &w);
    /* in a graph capture the flag becomes the graph's (it releases it when it goes) and is read after each
     * replay; released now, a later allocation of the capture could take its block */
    if (st == GRACE_OK && gpu_graph_capturing(vm)) {
      if ((st = gpu_graph_defer_check(vm, flag, op, idx, n, size, dim)) == GRACE_OK) return GRACE_OK;
    } else if (st == GRACE_OK)
      st = cuda_copy_to_host(c, &first, flag, 8);
  }
  cuda_release(c, flag, 8);
  if (st != GRACE_OK || first >= n) return st;
  int64_t off = 0, r = first;   /* the bad position, row-major, back to an element offset */
  for (int d = idx->ndim - 1; d >= 0; d--) { off += (r % idx->sizes[d]) * idx->strides[d]; r /= idx->sizes[d]; }
  _Alignas(8) char raw[8] = {0};
  if ((st = cuda_copy_to_host(c, raw, at(gpu_ptr(idx), off, idx->dtype), grace_dtype_size(idx->dtype))) != GRACE_OK) return st;
  long long v = (long long)vm_load_i64(idx->dtype, raw);
  if (dim < 0)
    return vm_err(vm, GRACE_EINDEX, "%s: id %lld out of range for a table of %lld rows", op, v, (long long)size);
  return vm_err(vm, GRACE_EINDEX, "%s: index %lld out of range for dim %d of size %lld", op, v, dim + vm->index_base,
                (long long)size);
}

/* For gpu_index.c (masked_select, nonzero, index_put_): a launch from packed words, and check_index. */
grace_status gpu_ops_launch(grace_vm *vm, cgo_tmpl t, grace_dtype d0, grace_dtype d1, grace_dtype d2, int variant,
                            unsigned grid, unsigned block, const uint64_t *w, int nw) {
  words ws = {0};
  for (int i = 0; i < nw && i < CG_MAX_WORDS; i++) ws.w[ws.n++] = w[i];
  return launch(vm, t, d0, d1, d2, variant, grid, block, 0, &ws);
}
grace_status gpu_ops_check_index(grace_vm *vm, const char *op, const grace_tensor *idx, int64_t size, int dim) {
  return check_index(vm, op, idx, size, dim);
}

/* One IMOVE launch: iteration over sizes[0..nd) (each element looping l < len in order). */
typedef struct imove {
  int nd;
  int64_t sizes[CGO_MAXD], ss[CGO_MAXD], ds[CGO_MAXD], is[CGO_MAXD];
  int64_t len, lss, lds, lis, sq, dq;
  int64_t bound;              /* the indexed dim's size: indices outside it are skipped (they were checked) */
} imove;

static grace_status run_imove(grace_vm *vm, const imove *m, CUdeviceptr dst, grace_dtype ddt, CUdeviceptr src,
                              grace_dtype sdt, const grace_tensor *idx) {
  int64_t n = vm_numel(m->nd, m->sizes);
  if (n == 0 || m->len == 0) return GRACE_OK;
  words w = {0};
  wptr(&w, dst); wptr(&w, src); wptr(&w, gpu_ptr(idx));
  wput(&w, n); wput(&w, m->nd);
  warr(&w, m->sizes, m->nd); warr(&w, m->ss, m->nd); warr(&w, m->ds, m->nd); warr(&w, m->is, m->nd);
  wput(&w, m->len); wput(&w, m->lss); wput(&w, m->lds); wput(&w, m->lis); wput(&w, m->sq); wput(&w, m->dq);
  wput(&w, vm->index_base); wput(&w, m->bound);
  return launch(vm, CGO_IMOVE, ddt, sdt, idx->dtype, 0, blocks_for(n, 256), 256, 0, &w);
}

static int64_t dim_arg(const grace_attrs *a) { return a->ndims ? a->dims[0] : 0; }

/* ---- cat and stack (checks shared with the CPU: ir/ir_check.c) ---- */
static grace_status op_cat(grace_vm *vm, int nin, grace_tensor *const *in, const grace_attrs *a, grace_tensor **out) {
  grace_dtype dt;
  int nd, dim;
  int64_t sz[GRACE_MAX_DIMS];
  grace_status s = vm_check_cat(vm, nin, in, dim_arg(a), &dt, &nd, sz, &dim);
  if (s != GRACE_OK) return s;
  grace_tensor *o = dev_new(vm, "cat", dt, nd, sz);
  if (!o) return vm->status;
  copy_batch b = {.dst = gpu_ptr(o), .ddt = dt};
  int64_t off = 0;
  for (int i = 0; i < nin && s == GRACE_OK; i++) {
    const grace_tensor *t = in[i];
    if (vm_cat_skips(t)) continue;
    s = batch_add(vm, &b, (copy_piece){gpu_ptr(t), t->dtype, t->ndim, t->sizes, t->strides, o->strides, off * o->strides[dim]});
    off += t->sizes[dim];
  }
  if (s == GRACE_OK) s = batch_end(vm, &b);
  if (s != GRACE_OK) { grace_tensor_release(o); return s; }
  *out = o;
  return GRACE_OK;
}

static grace_status op_stack(grace_vm *vm, int nin, grace_tensor *const *in, const grace_attrs *a, grace_tensor **out) {
  grace_dtype dt;
  int nd1, dim;
  int64_t sz[GRACE_MAX_DIMS];
  grace_status s = vm_check_stack(vm, nin, in, dim_arg(a), &dt, &nd1, sz, &dim);
  if (s != GRACE_OK) return s;
  int nd = nd1 - 1;
  grace_tensor *o = dev_new(vm, "stack", dt, nd1, sz);
  if (!o) return vm->status;
  int64_t ds[GRACE_MAX_DIMS];
  for (int d = 0, k = 0; d <= nd; d++) if (d != dim) ds[k++] = o->strides[d];
  copy_batch b = {.dst = gpu_ptr(o), .ddt = dt};
  for (int i = 0; i < nin && s == GRACE_OK; i++)
    s = batch_add(vm, &b, (copy_piece){gpu_ptr(in[i]), in[i]->dtype, nd, in[i]->sizes, in[i]->strides, ds, i * o->strides[dim]});
  if (s == GRACE_OK) s = batch_end(vm, &b);
  if (s != GRACE_OK) { grace_tensor_release(o); return s; }
  *out = o;
  return GRACE_OK;
}

/* ---- index_select, gather, scatter, index_copy_, embedding ---- */
static grace_status op_index_select(grace_vm *vm, grace_tensor *x, grace_tensor *idx, const grace_attrs *a,
                                    grace_tensor **out) {
  const char *op = "index_select";
  int dim;
  int64_t n;
  grace_status s = vm_check_index_select(vm, x, idx, dim_arg(a), &dim, &n);
  if (s != GRACE_OK) return s;
  tview xv = tv_of(x);
  if ((s = check_index(vm, op, idx, xv.sizes[dim], dim)) != GRACE_OK) return s;
  int64_t sz[GRACE_MAX_DIMS];
  memcpy(sz, x->sizes, sizeof sz);
  if (x->ndim > 0) sz[dim] = n;
  grace_tensor *o = dev_new(vm, op, x->dtype, x->ndim, sz);
  if (!o) return vm->status;
  tview ov = tv_of(o);
  imove m = {.nd = ov.nd, .len = 1, .sq = xv.strides[dim], .bound = xv.sizes[dim]};
  for (int d = 0; d < ov.nd; d++) {
    m.sizes[d] = ov.sizes[d];
    m.ss[d] = d == dim ? 0 : xv.strides[d];
    m.ds[d] = ov.strides[d];
    m.is[d] = d == dim && idx->ndim == 1 ? idx->strides[0] : 0;
  }
  if ((s = run_imove(vm, &m, gpu_ptr(o), o->dtype, gpu_ptr(x), x->dtype, idx)) != GRACE_OK) { grace_tensor_release(o); return s; }
  *out = o;
  return GRACE_OK;
}


static grace_status op_gather(grace_vm *vm, grace_tensor *x, grace_tensor *idx, const grace_attrs *a, grace_tensor **out) {
  const char *op = "gather";
  int dim;
  grace_status s = vm_norm_dim(vm, op, dim_arg(a), x->ndim, &dim);
  if (s != GRACE_OK || (s = vm_check_index_dtype(vm, op, idx, "index")) != GRACE_OK ||
      (s = vm_check_gather_shapes(vm, op, x, idx, NULL, dim)) != GRACE_OK)
    return s;
  tview xv = tv_of(x), iv = tv_of(idx);
  if ((s = check_index(vm, op, idx, xv.sizes[dim], dim)) != GRACE_OK) return s;
  grace_tensor *o = dev_new(vm, op, x->dtype, idx->ndim, idx->sizes);
  if (!o) return vm->status;
  tview ov = tv_of(o);
  imove m = {.nd = iv.nd, .len = 1, .sq = xv.strides[dim], .bound = xv.sizes[dim]};
  for (int d = 0; d < iv.nd; d++) {
    m.sizes[d] = iv.sizes[d];
    m.ss[d] = d == dim ? 0 : xv.strides[d];
    m.ds[d] = ov.strides[d];
    m.is[d] = iv.strides[d];
  }
  if ((s = run_imove(vm, &m, gpu_ptr(o), o->dtype, gpu_ptr(x), x->dtype, idx)) != GRACE_OK) { grace_tensor_release(o); return s; }
  *out = o;
  return GRACE_OK;
}

/* The dims of v other than dim as an IMOVE iteration, dim looped in order (so repeated indices: last wins). */
static void line_over(imove *m, const tview *iter, int dim) {
  m->nd = 0;
  for (int d = 0; d < iter->nd; d++)
    if (d != dim) m->sizes[m->nd++] = iter->sizes[d];
  m->len = iter->sizes[dim];
}
static void line_strides(int64_t *out, int64_t *along, const tview *v, int dim) {
  int k = 0;
  for (int d = 0; d < v->nd; d++) {
    if (d == dim) *along = v->strides[d];
    else out[k++] = v->strides[d];
  }
}

static grace_status op_scatter(grace_vm *vm, grace_tensor *x, grace_tensor *idx, grace_tensor *src, const grace_attrs *a,
                               grace_tensor **out) {
  const char *op = "scatter";
  int dim, scalar = src->ndim == 0;
  grace_status s = vm_norm_dim(vm, op, dim_arg(a), x->ndim, &dim);
  if (s != GRACE_OK || (s = vm_check_index_dtype(vm, op, idx, "index")) != GRACE_OK ||
      (s = vm_check_gather_shapes(vm, op, x, idx, scalar ? NULL : src, dim)) != GRACE_OK)
    return s;
  /* src's dtype (ir_infer's check) */
  if ((s = vm_check_types(vm, GRACE_OP_SCATTER, 3, (grace_tensor *[]){x, idx, src}, a)) != GRACE_OK) return s;
  tview xv = tv_of(x), iv = tv_of(idx), sv = tv_of(src);
  if ((s = check_index(vm, op, idx, xv.sizes[dim], dim)) != GRACE_OK) return s;
  grace_tensor *o = dev_new(vm, op, x->dtype, x->ndim, x->sizes);
  if (!o) return vm->status;
  tview ov = tv_of(o);
  s = copy_into(vm, op, o, x);
  imove m = {.bound = xv.sizes[dim]};
  line_over(&m, &iv, dim);
  int64_t unused;
  line_strides(m.is, &m.lis, &iv, dim);
  line_strides(m.ds, &unused, &ov, dim);
  m.dq = ov.strides[dim];
  if (!scalar) line_strides(m.ss, &m.lss, &sv, dim);   /* a 0-d src: every stride 0, converted per element */
  if (s == GRACE_OK) s = run_imove(vm, &m, gpu_ptr(o), o->dtype, gpu_ptr(src), src->dtype, idx);
  if (s != GRACE_OK) { grace_tensor_release(o); return s; }
  *out = o;
  return GRACE_OK;
}

static grace_status op_index_copy(grace_vm *vm, grace_tensor *dst, grace_tensor *idx, grace_tensor *src,
                                  const grace_attrs *a) {
  const char *op = "index_copy_";
  int dim;
  int64_t n;
  grace_status s = vm_check_index_copy(vm, dst, idx, src, dim_arg(a), &dim, &n);
  if (s != GRACE_OK) return s;
  tview dv = tv_of(dst), sv = tv_of(src);
  if (src->storage->device != GRACE_CUDA)
    return vm_err(vm, GRACE_EDEVICE, "%s: source is on '%s', the destination on 'cuda'", op,
                  grace_device_name(src->storage->device));
  if ((s = check_index(vm, op, idx, dv.sizes[dim], dim)) != GRACE_OK) return s;
  imove m = {.bound = dv.sizes[dim]};
  int64_t unused;
  line_over(&m, &sv, dim);
  line_strides(m.ss, &m.lss, &sv, dim);
  line_strides(m.ds, &unused, &dv, dim);
  m.dq = dv.strides[dim];
  m.lis = idx->ndim == 1 ? idx->strides[0] : 0;
  if ((s = run_imove(vm, &m, gpu_ptr(dst), dst->dtype, gpu_ptr(src), src->dtype, idx)) != GRACE_OK) return s;
  vm_bump_version(dst);
  return GRACE_OK;
}

static grace_status op_embedding(grace_vm *vm, grace_tensor *ids, grace_tensor *w, grace_tensor **out) {
  const char *op = "embedding";
  /* ir_infer's checks: ids int64/int32, weight 2-d; an id out of range is a matter of values, checked below */
  grace_status s = vm_check_types(vm, GRACE_OP_EMBEDDING, 2, (grace_tensor *[]){ids, w}, NULL);
  if (s != GRACE_OK) return s;
  if ((s = check_index(vm, op, ids, w->sizes[0], -1)) != GRACE_OK) return s;
  int64_t sz[GRACE_MAX_DIMS];
  int nd = ids->ndim;
  memcpy(sz, ids->sizes, sizeof(int64_t) * (size_t)nd);
  sz[nd] = w->sizes[1];
  grace_tensor *o = dev_new(vm, op, w->dtype, nd + 1, sz);
  if (!o) return vm->status;
  imove m = {.nd = nd + 1, .len = 1, .sq = w->strides[0], .bound = w->sizes[0]};
  for (int d = 0; d <= nd; d++) {
    m.sizes[d] = sz[d];
    m.ss[d] = d == nd ? w->strides[1] : 0;
    m.ds[d] = o->strides[d];
    m.is[d] = d == nd ? 0 : ids->strides[d];
  }
  if ((s = run_imove(vm, &m, gpu_ptr(o), o->dtype, gpu_ptr(w), w->dtype, ids)) != GRACE_OK) { grace_tensor_release(o); return s; }
  *out = o;
  return GRACE_OK;
}

/* ---- triu / tril, repeat, slice_scatter ---- */
static grace_status op_tri(grace_vm *vm, grace_op opc, grace_tensor *x, const grace_attrs *a, grace_tensor **out) {
  const char *op = grace_op_name(opc);
  grace_status cs = vm_check_types(vm, opc, 1, &x, a);   /* ir_infer's: at least 2 dims */
  if (cs != GRACE_OK) return cs;
  grace_tensor *o = dev_new(vm, op, x->dtype, x->ndim, x->sizes);
  if (!o) return vm->status;
  grace_status s = copy_into(vm, op, o, x);
  int64_t R = x->sizes[x->ndim - 2], C = x->sizes[x->ndim - 1], n = vm_numel(x->ndim, x->sizes);
  if (s == GRACE_OK && n > 0) {
    words w = {0};
    wptr(&w, gpu_ptr(o));
    wput(&w, n); wput(&w, R); wput(&w, C); wput(&w, vm_tri_diag(a->i0, R, C)); wput(&w, opc == GRACE_OP_TRIU);
    s = launch(vm, CGO_TRI, x->dtype, x->dtype, x->dtype, 0, blocks_for(n, 256), 256, 0, &w);
  }
  if (s != GRACE_OK) { grace_tensor_release(o); return s; }
  *out = o;
  return GRACE_OK;
}

static grace_status op_repeat(grace_vm *vm, grace_tensor *x, const grace_attrs *a, grace_tensor **out) {
  int nr = a->nshape;
  int64_t xs[GRACE_MAX_DIMS] = {0}, xst[GRACE_MAX_DIMS] = {0}, osz[GRACE_MAX_DIMS] = {0};
  grace_status cs = vm_check_repeat(vm, x, a, xs, xst, osz);
  if (cs != GRACE_OK) return cs;
  grace_tensor *o = dev_new(vm, "repeat", x->dtype, nr, osz);
  if (!o) return vm->status;
  int64_t sz[CGO_MAXD], ss[CGO_MAXD], ds[CGO_MAXD];
  for (int d = 0; d < nr; d++) {   /* the result viewed as [r0, s0, r1, s1, ...], the input read with stride 0 along r */
    sz[2 * d] = a->shape[d]; ss[2 * d] = 0; ds[2 * d] = xs[d] * o->strides[d];
    sz[2 * d + 1] = xs[d]; ss[2 * d + 1] = xst[d]; ds[2 * d + 1] = o->strides[d];
  }
  grace_status s = dev_copy(vm, 2 * nr, sz, gpu_ptr(x), ss, x->dtype, gpu_ptr(o), ds, x->dtype);
  if (s != GRACE_OK) { grace_tensor_release(o); return s; }
  *out = o;
  return GRACE_OK;
}


static grace_status op_slice_scatter(grace_vm *vm, grace_tensor *base, grace_tensor *src, const grace_attrs *a,
                                     grace_tensor **out) {
  grace_tensor *copy = vm_dense_like(vm, GRACE_CUDA, "slice_scatter", base), *view = NULL;
  grace_attrs va = *a;
  grace_status st = copy ? copy_into(vm, "slice_scatter", copy, base) : vm->status;
  if (st == GRACE_OK) st = vm_view_run(vm, a->flag ? GRACE_OP_SELECT : GRACE_OP_NARROW, 1, &copy, &va, 1, &view);
  if (st == GRACE_OK) st = copy_into(vm, "slice_scatter", view, src);
  grace_tensor_release(view);
  if (st != GRACE_OK) { grace_tensor_release(copy); return st; }
  *out = copy;
  return GRACE_OK;
}

/* ---- scans: cumsum, softmax, log_softmax, sort, topk ---- */
/* Rows of x along dim: the other dims (sizes and strides of x and of the output) and the row count; a 0-d
 * x is one row of one element. */
typedef struct rows {
  int nd;
  int64_t sizes[CGO_MAXD], xs[CGO_MAXD], os[CGO_MAXD];
  int64_t L, n, xl, ol;
} rows;

static void rows_of(rows *r, const grace_tensor *x, int dim, const int64_t *ostrides) {
  memset(r, 0, sizeof *r);
  if (x->ndim == 0) { r->L = 1; r->n = 1; r->xl = 1; r->ol = 1; return; }
  r->n = 1;
  for (int d = 0; d < x->ndim; d++) {
    if (d == dim) { r->L = x->sizes[d]; r->xl = x->strides[d]; r->ol = ostrides[d]; continue; }
    r->sizes[r->nd] = x->sizes[d]; r->xs[r->nd] = x->strides[d]; r->os[r->nd] = ostrides[d];
    r->n *= x->sizes[d];
    r->nd++;
  }
}

static void rows_words(words *w, const rows *r) {
  wput(w, r->nd); warr(w, r->sizes, r->nd); warr(w, r->xs, r->nd); warr(w, r->os, r->nd); wput(w, r->xl); wput(w, r->ol);
}

/* Whether an operand can be staged in 16-byte vectors along its dims: dims contiguous, every other stride and the
 * dim count multiples of the vector (the kernel checks the pointer's alignment itself). */
static int attn_vec(const vm_attn *p, int64_t dims, int64_t sd, int64_t sj, const int64_t *sb, grace_dtype dt) {
  int64_t v = 16 / (int64_t)grace_dtype_size(dt);
  if (sd != 1 || dims % v || sj % v) return 0;
  for (int d = 0; d < p->nb; d++)
    if (sb[d] % v) return 0;
  return 1;
}

/* Whether the decode kernel takes an attention: float compute, one query row (M = 1), at most
 * CGO_ATTN_DECODE_MAXN keys, keys and values in 16-byte vectors along D and Dv with a power of two of them a row
 * up to CGO_ATTN_LANES_MAX; *lk, *lv: log2 of the vectors a key row and a value row. */
static int attn_decode_lanes(const vm_attn *p, grace_tensor *const *in, int dbl, int *lk, int *lv) {
  if (dbl || p->M != 1 || p->N > CGO_ATTN_DECODE_MAXN || !attn_vec(p, p->D, p->kd, p->kn, p->kb, in[1]->dtype) ||
      !attn_vec(p, p->Dv, p->vd, p->vn, p->vb, in[2]->dtype))
    return 0;
  int64_t nk = p->D * (int64_t)grace_dtype_size(in[1]->dtype) / 16, nv = p->Dv * (int64_t)grace_dtype_size(in[2]->dtype) / 16;
  if (nk < 1 || nv < 1 || nk > CGO_ATTN_LANES_MAX || nv > CGO_ATTN_LANES_MAX || (nk & (nk - 1)) || (nv & (nv - 1))) return 0;
  for (*lk = 0; (1 << *lk) < nk; (*lk)++) {}
  for (*lv = 0; (1 << *lv) < nv; (*lv)++) {}
  return 1;
}

/* attention (cpu_attention.c on the CPU): one query row against few keys (decode) in the decode kernel; the tiled
 * kernel as cg_ops_attn_plan lays it out (rows a block, long key rows split over a cluster), else (float64, rows
 * too wide for shared memory) a block per query row, a warp per chunk of 32 keys up to 8 warps (4 when there are
 * rows enough to fill the device). A scale that is a host
 * number goes by value (a device copy would synchronize); in a capture it is the graph table's word. */
static grace_status op_attention(grace_vm *vm, grace_tensor *const *in, const grace_attrs *a, grace_tensor **out) {
  vm_attn p;
  grace_status st = vm_check_attention(vm, in, a, &p);
  if (st != GRACE_OK) return st;
  if (!(out[0] = dev_new(vm, "attention", p.odt, p.ndim, p.osizes))) return vm->status;
  if (p.rows == 0 || p.Dv == 0) return GRACE_OK;
  if (p.N == 0) return dev_fill(vm, out[0], 0);   /* no keys: the product of empty rows */
  grace_tensor *q = in[0], *sc = in[3], *m = in[4], *moved = NULL;
  double scv = 0;
  int sval = sc && sc->storage->device == GRACE_CPU && !gpu_graph_capturing(vm);
  if (sval) st = grace_tensor_read(vm, sc, GRACE_FLOAT64, &scv);
  else if (sc && sc->storage->device == GRACE_CPU && (st = gpu_host_number(vm, sc, &moved)) == GRACE_OK) sc = moved;
  if (st != GRACE_OK) {
    grace_tensor_release(out[0]);
    out[0] = NULL;
    return st;
  }
  cuda_ctx *c = gpu_ctx(vm);
  const cuda_props *pr = cuda_properties(c);
  int dbl = q->dtype == GRACE_FLOAT64;
  int64_t sms = pr->sms, limit = pr->smem_per_block_optin < 100 * 1024 ? pr->smem_per_block_optin : 100 * 1024;
  cgo_attn_plan pl;
  cg_ops_attn_plan(p.rows, p.M, p.N, p.D, p.Dv, dbl, sms, limit, cuda_has_clusters(c), &pl);
  words w = {0};
  wptr(&w, gpu_ptr(out[0])); wptr(&w, gpu_ptr(q)); wptr(&w, gpu_ptr(in[1])); wptr(&w, gpu_ptr(in[2]));
  wptr(&w, m ? gpu_ptr(m) : 0); wptr(&w, sc && !sval ? gpu_ptr(sc) : 0);
  wput(&w, p.rows); wput(&w, p.M); wput(&w, p.N); wput(&w, p.D); wput(&w, p.Dv); wput(&w, p.nb);
  warr(&w, p.bsize, p.nb); warr(&w, p.qb, p.nb); warr(&w, p.kb, p.nb); warr(&w, p.vb, p.nb); warr(&w, p.mb, p.nb);
  wput(&w, p.qm); wput(&w, p.qd); wput(&w, p.kd); wput(&w, p.kn); wput(&w, p.vn); wput(&w, p.vd);
  wput(&w, p.mm); wput(&w, p.mn); wput(&w, dbits(a->a));
  wput(&w, pl.R); wput(&w, pl.C); wput(&w, attn_vec(&p, p.D, p.kd, p.kn, p.kb, in[1]->dtype));
  wput(&w, attn_vec(&p, p.Dv, p.vd, p.vn, p.vb, in[2]->dtype)); wput(&w, dbits(scv)); wput(&w, pl.S);
  int variant = (sc && !sval ? CGO_ATTN_SCALE : 0) | (sval ? CGO_ATTN_SVAL : 0) |
                (a->flag & GRACE_ATTN_DIV ? CGO_ATTN_DIV : 0) | (m ? CGO_ATTN_MASK : 0) |
                (a->flag & GRACE_ATTN_KEEP ? CGO_ATTN_KEEP : 0) | (dbl ? CGO_ATTN_F64 : 0) | (pl.tiled ? CGO_ATTN_TILED : 0) |
                (pl.S > 1 ? CGO_ATTN_SPLIT : 0);
  grace_dtype sdt = sc && !sval ? sc->dtype : GRACE_FLOAT32;
  int lk = 0, lv = 0;
  if (attn_decode_lanes(&p, in, dbl, &lk, &lv)) {   /* one query row against few keys */
    unsigned nw = (unsigned)((p.N + 31) / 32 < CGO_ATTN_DECODE_WARPS ? (p.N + 31) / 32 : CGO_ATTN_DECODE_WARPS);
    variant = (variant & ~(CGO_ATTN_TILED | CGO_ATTN_SPLIT)) | CGO_ATTN_DECODE | lk << CGO_ATTN_LK_SHIFT | lv << CGO_ATTN_LV_SHIFT;
    st = launch(vm, CGO_ATTN, p.odt, q->dtype, sdt, variant, blocks_for(p.rows, 1), 32 * nw,
                nw * (unsigned)p.Dv * 4, &w);
  } else if (pl.tiled) {
    st = launch_own(vm, CGO_ATTN, p.odt, q->dtype, sdt, variant, blocks_for(pl.tiles, 1) * (unsigned)pl.S,
                    CGO_ATTN_THREADS, pl.smem, &w, 0, (unsigned)pl.S);
  } else {
    int64_t chunks = (p.N + 31) / 32, most = p.rows < 2 * sms ? 8 : 4;
    unsigned block = 32 * (unsigned)(chunks < most ? chunks : most);
    st = launch(vm, CGO_ATTN, p.odt, q->dtype, sdt, variant, blocks_for(p.rows, 1), block,
                block / 32 * 258 * (dbl ? 8 : 4), &w);
  }
  grace_tensor_release(moved);
  return st;
}

static grace_status op_scan(grace_vm *vm, grace_op op, grace_tensor *x, const grace_attrs *a, int nout, grace_tensor **out) {
  const char *name = grace_op_name(op);
  ir_type ot[2];
  /* the checks and result types are ir_infer's (infer_scan), which the IR and the CPU share */
  grace_status s = vm_infer_tensors(vm, op, 1, &x, a, nout, ot);
  if (s != GRACE_OK) return s;
  int dim = x->ndim > 0 ? x->ndim - 1 : 0;
  if (a->ndims == 1) (void)vm_norm_dim(vm, name, a->dims[0], x->ndim, &dim);   /* checked above */
  int64_t L = x->ndim ? x->sizes[dim] : 1;
  rows r;
  if (op == GRACE_OP_CUMSUM || op == GRACE_OP_SOFTMAX || op == GRACE_OP_LOG_SOFTMAX) {
    grace_dtype odt = ot[0].dtype;
    if (!(out[0] = dev_new(vm, name, odt, ot[0].ndim, ot[0].sizes))) return vm->status;
    rows_of(&r, x, dim, out[0]->strides);
    if (r.n == 0 || r.L == 0) return GRACE_OK;
    words w = {0};
    wptr(&w, gpu_ptr(out[0])); wptr(&w, gpu_ptr(x));
    wput(&w, r.n); wput(&w, r.L); rows_words(&w, &r);
    if (op == GRACE_OP_CUMSUM)   /* a thread per row, adding in order: the CPU's sums exactly */
      return launch(vm, CGO_CUMSUM, odt, x->dtype, odt, 0, blocks_for(r.n, 128), 128, 0, &w);
    int variant = (op == GRACE_OP_LOG_SOFTMAX) | (x->dtype == GRACE_FLOAT64 || odt == GRACE_FLOAT64 ? 2 : 0);
    if (r.L >= 4096 && r.n < 4 * 132)   /* few long rows (a vocabulary): a block per row */
      return launch(vm, CGO_SOFTMAX, odt, x->dtype, odt, variant | 4, blocks_for(r.n, 1), 1024, 0, &w);
    return launch(vm, CGO_SOFTMAX, odt, x->dtype, odt, variant, blocks_for(r.n, 8), 256, 0, &w);
  }
  int64_t k = op == GRACE_OP_TOPK ? a->i0 : L;
  int select = L > CGO_SORT_MAX;   /* long rows: topk by k selection rounds; a full sort is not offered */
  if (!(out[0] = dev_new(vm, name, x->dtype, ot[0].ndim, ot[0].sizes))) return vm->status;
  if (nout == 2 && !(out[1] = dev_new(vm, name, GRACE_INT64, ot[0].ndim, ot[0].sizes))) return vm->status;
  int64_t ost[GRACE_MAX_DIMS] = {1};
  if (x->ndim) memcpy(ost, out[0]->strides, sizeof ost);
  rows_of(&r, x, dim, ost);
  if (r.n == 0 || k == 0) return GRACE_OK;
  int64_t P = 1;
  while (P < r.L) P <<= 1;
  int desc = op == GRACE_OP_TOPK ? !a->flag : a->flag;
  words w = {0};
  wptr(&w, gpu_ptr(out[0])); wptr(&w, nout == 2 ? gpu_ptr(out[1]) : 0); wptr(&w, gpu_ptr(x));
  wput(&w, r.n); wput(&w, r.L); wput(&w, P); wput(&w, k); rows_words(&w, &r);
  wput(&w, vm->index_base); wput(&w, nout == 2);
  if (select) return launch(vm, CGO_SORT, x->dtype, GRACE_INT64, x->dtype, desc | 2, blocks_for(r.n, 1), 1024, 0, &w);
  unsigned block = P >= 512 ? 512 : P >= 32 ? (unsigned)P : 32;
  return launch(vm, CGO_SORT, x->dtype, GRACE_INT64, x->dtype, desc, blocks_for(r.n, 1), block, (unsigned)(P * 12), &w);
}

/* ---- layer_norm, rms_norm ---- */
static grace_status op_norm(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                            grace_tensor **out) {
  const char *name = grace_op_name(op);
  int rms = op == GRACE_OP_RMS_NORM;
  const grace_tensor *x = in[0], *wt = nin > 1 ? in[1] : NULL, *bt = !rms && nin > 2 ? in[2] : NULL;
  double eps = a->has_a ? a->a : rms ? 1e-6 : 1e-5;
  grace_status s;
  ir_type ot;
  /* the checks are ir_infer's (infer_norm), which the IR and the CPU share; the devices of weight and bias are
     this backend's own matter (the CPU computes on host copies of whatever it is given) */
  if ((s = vm_infer_tensors(vm, op, nin, in, a, 1, &ot)) != GRACE_OK) return s;
  if ((wt && wt->storage->device != GRACE_CUDA) || (bt && bt->storage->device != GRACE_CUDA))
    return vm_err(vm, GRACE_EDEVICE, "%s: weight and bias must be on the input's device 'cuda'", name);
  if (!(out[0] = dev_new(vm, name, x->dtype, x->ndim, x->sizes))) return vm->status;
  rows r;
  rows_of(&r, x, x->ndim - 1, out[0]->strides);
  if (r.n == 0 || r.L == 0) return GRACE_OK;
  words w = {0};
  wptr(&w, gpu_ptr(out[0])); wptr(&w, gpu_ptr(x)); wptr(&w, wt ? gpu_ptr(wt) : 0); wptr(&w, bt ? gpu_ptr(bt) : 0);
  wput(&w, r.n); wput(&w, r.L); wput(&w, r.nd); warr(&w, r.sizes, r.nd); warr(&w, r.xs, r.nd); wput(&w, r.xl);
  wput(&w, wt ? wt->strides[0] : 0); wput(&w, bt ? bt->strides[0] : 0); wput(&w, dbits(eps));
  unsigned block = r.L >= 256 ? 256 : (unsigned)((r.L + 31) / 32 * 32);
  int variant = (wt ? 1 : 0) | (bt ? 2 : 0) | (rms ? 4 : 0) | (x->dtype == GRACE_FLOAT64 ? 8 : 0) |
                (r.L <= (int64_t)block * CGO_NORM_REG ? CGO_NORM_REGS : 0);
  return launch(vm, CGO_NORM, x->dtype, wt ? wt->dtype : x->dtype, bt ? bt->dtype : x->dtype, variant,
                blocks_for(r.n, 1), block, 0, &w);
}

/* ---- creation ---- */
static grace_status op_create(grace_vm *vm, grace_op op, const grace_attrs *a, grace_tensor **out) {
  const char *name = grace_op_name(op);
  grace_dtype dt;
  int nd;
  int64_t shape[GRACE_MAX_DIMS];
  grace_status cs = vm_create_shape(vm, op, a, &dt, &nd, shape);
  if (cs != GRACE_OK) return cs;
  grace_tensor *t = dev_new(vm, name, dt, nd, shape);
  if (!t) return vm->status;
  int64_t n = vm_numel(nd, shape);
  grace_status s = GRACE_OK;
  words w = {0};
  wptr(&w, gpu_ptr(t));
  wput(&w, n);
  int variant = -1;
  int64_t w4[4] = {0};
  uint64_t offset = 0;
  switch (op) {
  case GRACE_OP_FULL: s = dev_fill(vm, t, value_bits(dt, a)); break;
  case GRACE_OP_ARANGE:
    if ((a->exact & 7) == 7 && grace_dtype_is_int(dt)) { variant = CGO_ARANGE_I; w4[0] = a->ia; w4[1] = a->ic; }
    else { variant = CGO_ARANGE_F; w4[0] = dbits(a->a); w4[1] = dbits(a->c); }
    break;
  case GRACE_OP_LINSPACE:
    variant = CGO_LINSPACE;
    w4[0] = dbits(a->a); w4[1] = dbits(a->b); w4[2] = dbits(n > 1 ? (a->b - a->a) / (double)(n - 1) : 0);
    break;
  case GRACE_OP_EYE: variant = CGO_EYE; w4[0] = shape[1]; break;
  case GRACE_OP_RAND: case GRACE_OP_RANDN: case GRACE_OP_RANDINT:
    variant = op == GRACE_OP_RAND ? CGO_RAND : op == GRACE_OP_RANDN ? CGO_RANDN : CGO_RANDINT;
    offset = vm->rng_offset++;   /* every random op takes the next offset, as on the CPU, even when empty */
    w4[0] = a->i0; w4[1] = (int64_t)((uint64_t)a->i1 - (uint64_t)a->i0);   /* the span, up to 2^64 - 1 */
    break;
  default:
    grace_tensor_release(t);
    return vm_err(vm, GRACE_EINTERNAL, "%s: not a creation op", name);
  }
  if (variant >= 0 && n > 0) {
    for (int i = 0; i < 4; i++) wput(&w, w4[i]);
    int own = 0;
    uint64_t seed_w = vm->seed, offset_w = offset;
    if (gpu_graph_capturing(vm) && (op == GRACE_OP_RAND || op == GRACE_OP_RANDN || op == GRACE_OP_RANDINT)) {
      /* in a graph the seed and the offset are per-call words of its table */
      if ((s = gpu_graph_rng(vm, offset, &seed_w, &offset_w)) != GRACE_OK) { grace_tensor_release(t); return s; }
      own = 2;
    }
    wput(&w, (int64_t)seed_w); wput(&w, (int64_t)offset_w);
    s = launch_own(vm, CGO_CREATE, dt, dt, dt, variant, blocks_for(n, 256), 256, 0, &w, own, 0);
  }
  if (s != GRACE_OK) { grace_tensor_release(t); return s; }
  out[0] = t;
  return GRACE_OK;
}

grace_status gpu_op_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *attrs,
                        int nout, grace_tensor **out) {
  static const grace_attrs none = {0};
  const grace_attrs *a = attrs ? attrs : &none;
  grace_status st;
  switch (op) {
  case GRACE_OP_CONTIGUOUS:
    if (vm_is_contiguous(in[0])) { grace_tensor_retain(in[0]); out[0] = in[0]; return GRACE_OK; }
    return dev_clone(vm, "contiguous", in[0], out);
  case GRACE_OP_CLONE: return dev_clone(vm, "clone", in[0], out);
  case GRACE_OP_CAT: return op_cat(vm, nin, in, a, out);
  case GRACE_OP_STACK: return op_stack(vm, nin, in, a, out);
  case GRACE_OP_INDEX_SELECT: return op_index_select(vm, in[0], in[1], a, out);
  case GRACE_OP_GATHER: return op_gather(vm, in[0], in[1], a, out);
  case GRACE_OP_SCATTER: return op_scatter(vm, in[0], in[1], in[2], a, out);
  case GRACE_OP_TRIU: case GRACE_OP_TRIL: return op_tri(vm, op, in[0], a, out);
  case GRACE_OP_REPEAT: return op_repeat(vm, in[0], a, out);
  case GRACE_OP_EMBEDDING: return op_embedding(vm, in[0], in[1], out);
  case GRACE_OP_SLICE_SCATTER: return op_slice_scatter(vm, in[0], in[1], a, out);
  case GRACE_OP_CUMSUM: case GRACE_OP_SOFTMAX: case GRACE_OP_LOG_SOFTMAX: case GRACE_OP_TOPK: case GRACE_OP_SORT:
    return op_scan(vm, op, in[0], a, nout, out);
  case GRACE_OP_LAYER_NORM: case GRACE_OP_RMS_NORM: return op_norm(vm, op, nin, in, a, out);
  case GRACE_OP_ATTENTION: return op_attention(vm, in, a, out);
  case GRACE_OP_FULL: case GRACE_OP_ARANGE: case GRACE_OP_LINSPACE: case GRACE_OP_EYE: case GRACE_OP_RAND:
  case GRACE_OP_RANDN: case GRACE_OP_RANDINT:
    return op_create(vm, op, a, out);
  case GRACE_OP_COPY_:
    if ((st = copy_into(vm, "copy_", in[0], in[1])) != GRACE_OK) return st;
    vm_bump_version(in[0]);
    return GRACE_OK;
  case GRACE_OP_FILL_:
    if ((st = vm_check_writable(vm, "fill_", in[0])) != GRACE_OK) return st;
    if ((st = dev_fill(vm, in[0], value_bits(in[0]->dtype, a))) != GRACE_OK) return st;
    vm_bump_version(in[0]);
    return GRACE_OK;
  case GRACE_OP_INDEX_COPY_: return op_index_copy(vm, in[0], in[1], in[2], a);
  case GRACE_OP_MASKED_SELECT: case GRACE_OP_NONZERO: case GRACE_OP_INDEX_PUT_:
    return gpu_index_run(vm, op, nin, in, a, nout, out);
  default:
    return vm_err(vm, GRACE_EUNSUPPORTED, "%s: no single-op CUDA kernel for this op", grace_op_name(op));
  }
}
