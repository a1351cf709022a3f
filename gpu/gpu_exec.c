/* gpu_exec.c: the device side of grace_run and grace_ir_run. Moves between host and device; eager ops on CUDA
 * tensors run as one-op IR programs (cached per op, attributes and input types) so that an eager add and a
 * compiled, fused chain use the same generated kernels; IR programs run group by group (see gpu_exec.h), with
 * views made on the host when a group first needs them and every value released after the last group that
 * reads it (directly or through views). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/cg_fused.h"
#include "codegen/cg_ops.h"
#include "cuda/cuda_internal.h"   /* the launch counter and the allocator's peak (grace_device_stats_get) */
#include "ir/ir_place.h"
#include "gpu/gpu_exec.h"
#include "gpu/gpu_graph.h"
#include "cuda/cuda_graph.h"
#include "ir/ir_exec.h"
#include "ir/ir_sym.h"

cuda_ctx *gpu_ctx(grace_vm *vm) { return cuda_get(vm); }

void grace_device_stats_get(grace_vm *vm, grace_device_stats *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!vm || !vm->cuda || !cuda_usable(vm)) return;
  cuda_ctx *c = cuda_get(vm);
  cuda_mem_stats m;
  cuda_compile_stats k;
  cuda_memory_stats(c, &m);
  cuda_compile_stats_get(c, &k);
  out->allocated = m.allocated; out->reserved = m.reserved; out->peak_allocated = m.peak_allocated;
  out->nvrtc_calls = k.nvrtc_calls; out->disk_hits = k.disk_hits; out->memory_hits = k.memory_hits;
  out->nvrtc_seconds = k.nvrtc_seconds;
  out->kernel_launches = cuda_launch_count(c);
  out->syncs = cuda_sync_count(c);
}

void grace_device_reset_peak(grace_vm *vm) {
  if (vm && vm->cuda && cuda_usable(vm)) cuda_alloc_reset_peak(cuda_get(vm));
}

grace_status grace_synchronize(grace_vm *vm) {
  if (!vm) return GRACE_EARG;
  if (!vm->cuda || !cuda_usable(vm)) return GRACE_OK;
  return cuda_sync(cuda_get(vm));
}

grace_status grace_device_time(grace_vm *vm, grace_device dev, grace_timed_fn fn, void *ud, double *ms) {
  if (!vm) return GRACE_EARG;
  if (!fn || !ms) return vm_err(vm, GRACE_EARG, "device_time: a NULL argument");
  *ms = 0;
  if (dev != GRACE_CUDA) {
    double t0 = grace_clock();
    grace_status st = fn(vm, ud);
    if (st == GRACE_OK) *ms = (grace_clock() - t0) * 1e3;
    return st;
  }
  cuda_ctx *c = cuda_get(vm);
  if (!c) return vm->status;
  /* Two fresh events per call: the VM keeps no timing state, and creating an event costs microseconds of host time
   * outside the measured span. */
  CUevent a = NULL, b = NULL;
  float span = 0;
  grace_status st = cuda_event_new(c, &a);
  if (st == GRACE_OK) st = cuda_event_new(c, &b);
  if (st == GRACE_OK) st = cuda_event_record(c, a);
  if (st == GRACE_OK) st = fn(vm, ud);
  if (st == GRACE_OK) st = cuda_event_record(c, b);
  if (st == GRACE_OK) st = cuda_event_elapsed(c, a, b, &span);
  if (st == GRACE_OK) *ms = span;
  /* a recorded event may be destroyed before it completes: the driver frees it once it has */
  cuda_event_free(c, a);
  cuda_event_free(c, b);
  return st;
}

void grace_empty_cache(grace_vm *vm) {
  if (vm && vm->cuda && cuda_usable(vm)) cuda_empty_cache(cuda_get(vm));
}

/* ---- host <-> device ---- */

/* Elements from t's first to its last (strides are never negative), 0 when t is empty. */
/* x moved to dev as a new contiguous tensor (x is on the other device). */
static grace_status transfer(grace_vm *vm, grace_tensor *x, grace_device dev, grace_tensor **out) {
  grace_status st;
  if (dev == GRACE_CPU) {
    grace_tensor *h = NULL;
    if ((st = vm_to_host(vm, x, &h)) != GRACE_OK) return st;
    st = vm->backend[GRACE_CPU]->run_op(vm, GRACE_OP_CONTIGUOUS, 1, &h, &(grace_attrs){0}, 1, out);
    grace_tensor_release(h);
    return st;
  }
  cuda_ctx *c = cuda_get(vm);
  if (!c) return vm_err(vm, vm->status, "to: the CUDA device is not usable: %s", cuda_why(vm));
  grace_tensor *src = NULL;
  if ((st = vm->backend[GRACE_CPU]->run_op(vm, GRACE_OP_CONTIGUOUS, 1, &x, &(grace_attrs){0}, 1, &src)) != GRACE_OK) return st;
  grace_tensor *t = vm_tensor_new(vm, "to", x->dtype, GRACE_CUDA, x->ndim, x->sizes);
  if (!t) st = vm->status;
  else {
    size_t n = (size_t)vm_numel(x->ndim, x->sizes) * grace_dtype_size(x->dtype);
    st = n ? cuda_copy_to_device(c, gpu_ptr(t), vm_ptr(src), n) : GRACE_OK;
    if (st != GRACE_OK) { grace_tensor_release(t); t = NULL; }
  }
  grace_tensor_release(src);
  *out = t;
  return st;
}

/* ---- one-op programs for eager ops: built once per (op, attributes, input types), kept in the VM ---- */
#define PROG_MAXIN 4
#define PROG_CAP 1024          /* entries kept; a full table is emptied (shapes churn, programs are cheap) */

typedef struct prog_key {
  grace_op op;
  int nin, nout;
  grace_attrs attrs;
  struct { int present, device, dtype, ndim, wrapped; int64_t sizes[GRACE_MAX_DIMS]; } in[PROG_MAXIN];
} prog_key;

typedef struct prog_entry {
  uint64_t hash;
  prog_key key;
  grace_ir *ir;
} prog_entry;

struct gpu_state {
  prog_entry *tab;
  int n;
  int depth;          /* programs of the table running now (a nested op may come back here): no emptying then */
};

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }
static uint64_t mixd(uint64_t h, double d) { uint64_t b; memcpy(&b, &d, 8); return mix(h, b); }

static uint64_t key_hash(const prog_key *k) {
  uint64_t h = 0xcbf29ce484222325ull;
  h = mix(h, (uint64_t)k->op); h = mix(h, (uint64_t)k->nin); h = mix(h, (uint64_t)k->nout);
  const grace_attrs *a = &k->attrs;
  h = mix(h, (uint64_t)a->ndims);
  for (int d = 0; d < a->ndims && d < GRACE_MAX_DIMS; d++) h = mix(h, (uint64_t)a->dims[d]);
  h = mix(h, (uint64_t)a->nshape);
  for (int d = 0; d < a->nshape && d < GRACE_MAX_DIMS; d++) h = mix(h, (uint64_t)a->shape[d]);
  h = mixd(h, a->a); h = mixd(h, a->b); h = mixd(h, a->c);
  h = mix(h, (uint64_t)a->i0); h = mix(h, (uint64_t)a->i1);
  h = mix(h, (uint64_t)(a->keepdim | a->flag << 1 | a->has_dtype << 2 | a->has_a << 3 | a->has_b << 4));
  h = mix(h, (uint64_t)a->dtype);
  for (int i = 0; i < k->nin; i++) {
    h = mix(h, (uint64_t)(k->in[i].present | k->in[i].device << 1 | k->in[i].wrapped << 2 | k->in[i].dtype << 3 |
                          k->in[i].ndim << 8));
    for (int d = 0; d < k->in[i].ndim; d++) h = mix(h, (uint64_t)k->in[i].sizes[d]);
  }
  return h;
}

static int key_equal(const prog_key *x, const prog_key *y) {
  if (x->op != y->op || x->nin != y->nin || x->nout != y->nout || !ir_attrs_equal(&x->attrs, &y->attrs)) return 0;
  for (int i = 0; i < x->nin; i++) {
    if (x->in[i].present != y->in[i].present || x->in[i].device != y->in[i].device || x->in[i].dtype != y->in[i].dtype ||
        x->in[i].ndim != y->in[i].ndim || x->in[i].wrapped != y->in[i].wrapped)
      return 0;
    for (int d = 0; d < x->in[i].ndim; d++)
      if (x->in[i].sizes[d] != y->in[i].sizes[d]) return 0;
  }
  return 1;
}

static void state_clear(grace_vm *vm) {
  struct gpu_state *s = vm->gpu;
  for (int i = 0; i < PROG_CAP; i++)
    if (s->tab[i].ir) { grace_ir_free(s->tab[i].ir); s->tab[i].ir = NULL; }
  s->n = 0;
}

void gpu_state_free(grace_vm *vm) {
  if (!vm->gpu) return;
  state_clear(vm);
  vm_free(vm, vm->gpu->tab, sizeof *vm->gpu->tab * PROG_CAP);
  vm_free(vm, vm->gpu, sizeof *vm->gpu);
  vm->gpu = NULL;
}

/* Whether softmax / log_softmax over x (dtype, ndim, sizes) runs written out, as one row kernel split over blocks:
 * float results of x's dtype (the decompose pass expands those; float16/bfloat16 in float32) over rows few and long
 * enough. */
static int split_softmax(grace_vm *vm, grace_op op, int dtype, int nd, const int64_t *sizes, const grace_attrs *a) {
  if ((op != GRACE_OP_SOFTMAX && op != GRACE_OP_LOG_SOFTMAX) || nd == 0) return 0;
  if (!grace_dtype_is_float((grace_dtype)dtype) || (a->has_dtype && (int)a->dtype != dtype)) return 0;
  cuda_ctx *c = gpu_ctx(vm);
  int dim = nd - 1;
  if (!c || a->ndims > 1 || (a->ndims == 1 && grace_norm_dim(vm, grace_op_name(op), a->dims[0], nd, &dim) != GRACE_OK))
    return 0;
  return sizes[dim] > 0 && cg_fused_few_long_rows(vm_numel(nd, sizes) / sizes[dim], sizes[dim], cuda_properties(c)->sms);
}

/* The one-op program for op over in[]: CUDA inputs become tensor inputs, host 0-d tensors scalar inputs (a host
 * number keeps its wrapped-number typing). Errors are the ones eager type checking gives. */
static grace_status build_prog(grace_vm *vm, const prog_key *k, grace_ir **out) {
  grace_ir *ir = grace_ir_new(vm, "eager");
  if (!ir) return vm->status;
  grace_value v[PROG_MAXIN], res[4];
  grace_status st = GRACE_OK;
  for (int i = 0; i < k->nin && st == GRACE_OK; i++) {
    v[i] = -1;
    if (!k->in[i].present) continue;
    if (k->in[i].device == GRACE_CUDA)
      st = grace_ir_input(ir, (grace_dtype)k->in[i].dtype, GRACE_CUDA, k->in[i].ndim, k->in[i].sizes, &v[i]);
    else if ((st = grace_ir_scalar(ir, (grace_dtype)k->in[i].dtype, &v[i])) == GRACE_OK)
      ir->vals[v[i]].type.wrapped = k->in[i].wrapped;
  }
  if (st == GRACE_OK) st = grace_ir_op(ir, k->op, k->nin, v, &k->attrs, k->nout, res);
  for (int i = 0; i < k->nout && st == GRACE_OK; i++) st = grace_ir_output(ir, res[i]);
  if (st != GRACE_OK) { grace_ir_free(ir); return st; }
  if (split_softmax(vm, k->op, k->in[0].dtype, k->in[0].ndim, k->in[0].sizes, &k->attrs)) {
    /* few long rows: written out they become one row kernel split over blocks, where the softmax kernel takes a
       block a row and leaves the device idle (bench/RESULTS.md, softmax [1, 16M]) */
    grace_ir *dec = NULL;
    st = grace_ir_pass(ir, "decompose", &dec);
    grace_ir_free(ir);
    if (st != GRACE_OK) return st;
    ir = dec;
  }
  *out = ir;
  return GRACE_OK;
}

static grace_status run_prog(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *attrs,
                             int nout, grace_tensor **out) {
  if (nin > PROG_MAXIN) return vm_err(vm, GRACE_EUNSUPPORTED, "%s: too many inputs for the CUDA backend", grace_op_name(op));
  prog_key k;
  memset(&k, 0, sizeof k);
  k.op = op; k.nin = nin; k.nout = nout; k.attrs = *attrs;
  grace_tensor *args[PROG_MAXIN];
  int na = 0;
  for (int i = 0; i < nin; i++) {   /* declaration order: tensor inputs, then scalars */
    if (!in[i]) continue;
    k.in[i].present = 1; k.in[i].device = in[i]->storage->device; k.in[i].dtype = in[i]->dtype;
    k.in[i].ndim = in[i]->ndim; k.in[i].wrapped = in[i]->wrapped;
    for (int d = 0; d < in[i]->ndim; d++) k.in[i].sizes[d] = in[i]->sizes[d];
    if (k.in[i].device == GRACE_CUDA) args[na++] = in[i];
  }
  for (int i = 0; i < nin; i++)
    if (in[i] && in[i]->storage->device != GRACE_CUDA) args[na++] = in[i];
  if (!vm->gpu) {
    vm->gpu = vm_calloc(vm, sizeof *vm->gpu);
    if (vm->gpu && !(vm->gpu->tab = vm_calloc(vm, sizeof *vm->gpu->tab * PROG_CAP))) {
      vm_free(vm, vm->gpu, sizeof *vm->gpu);
      vm->gpu = NULL;
    }
    if (!vm->gpu) return vm_err(vm, GRACE_ENOMEM, "%s: out of host memory", grace_op_name(op));
  }
  struct gpu_state *s = vm->gpu;
  uint64_t h = key_hash(&k);
  int slot = (int)(h % PROG_CAP);
  while (s->tab[slot].ir && !(s->tab[slot].hash == h && key_equal(&s->tab[slot].key, &k))) slot = (slot + 1) % PROG_CAP;
  if (!s->tab[slot].ir) {
    grace_ir *ir = NULL;
    grace_status st;
    if (s->n >= PROG_CAP * 3 / 4) {
      if (s->depth > 0) {   /* a program of the table is running: this one runs once, uncached */
        if ((st = build_prog(vm, &k, &ir)) != GRACE_OK) return st;
        st = gpu_ir_run(ir, na, args, nout, out);
        grace_ir_free(ir);
        return st;
      }
      state_clear(vm);
      slot = (int)(h % PROG_CAP);
    }
    if ((st = build_prog(vm, &k, &ir)) != GRACE_OK) return st;
    s->tab[slot] = (prog_entry){.hash = h, .key = k, .ir = ir};
    s->n++;
  }
  s->depth++;
  grace_status st = gpu_ir_run(s->tab[slot].ir, na, args, nout, out);
  s->depth--;
  return st;
}

/* ---- the backend's ops (vm_route's device branch) ---- */

/* Where the device has no kernel: a float64 or integer matmul, a sort (or a topk of a large k) over rows longer
 * than the shared-memory sort takes. */
static int gpu_supports(grace_vm *vm, grace_op op, int nin, const vm_meta *in, const grace_attrs *a, char *why,
                        size_t n) {
  if (op == GRACE_OP_MATMUL && nin == 2 && in[0].ndim >= 0 && in[1].ndim >= 0) {
    grace_dtype x = in[0].dtype, y = in[1].dtype;
    if (x == y && x != GRACE_BOOL && x != GRACE_FLOAT32 && x != GRACE_FLOAT16 && x != GRACE_BFLOAT16) {
      snprintf(why, n, "matmul of %s has no device kernel", grace_dtype_name(x));
      return 0;
    }
  }
  if (op == GRACE_OP_INDEX_PUT_ && a && a->flag && nin >= 1 && !cg_ops_iadd_dtype(in[0].dtype)) {
    snprintf(why, n, "index_put_ with accumulate into %s has no device kernel (no atomic add)", grace_dtype_name(in[0].dtype));
    return 0;
  }
  if ((op == GRACE_OP_SORT || op == GRACE_OP_TOPK) && nin >= 1 && in[0].ndim >= 0) {
    const vm_meta *x = &in[0];
    int d = a->ndims ? (int)a->dims[0] : -1;
    if (d < 0) d += x->ndim;
    int64_t len = x->ndim && d >= 0 && d < x->ndim ? x->sizes[d] : 1, numel = vm_numel(x->ndim, x->sizes);
    int64_t k = op == GRACE_OP_TOPK ? a->i0 : len;
    if (len > CGO_SORT_MAX && k > 0 && numel > 0 && (op == GRACE_OP_SORT || k > CGO_SELECT_MAXK)) {
      snprintf(why, n, "%s over rows of %lld (more than %d) has no device kernel", grace_op_name(op), (long long)len,
               CGO_SORT_MAX);
      return 0;
    }
  }
  return 1;
}

grace_status gpu_host_number(grace_vm *vm, grace_tensor *t, grace_tensor **out) {
  /* in a graph capture a synchronous copy would end the capture: the number lives in the graph's table */
  return gpu_graph_capturing(vm) ? gpu_graph_number(vm, t, out) : transfer(vm, t, GRACE_CUDA, out);
}

/* cat or stack of more tensors than one template launch takes: each run of CAT_MAXIN joined on its own, then the
 * pieces concatenated along the same dim (stack's new dim is a dim of each piece). */
enum { CAT_MAXIN = GRACE_MAX_DIMS * 8 };
static grace_status join_chunks(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *attrs,
                                grace_tensor **out) {
  int np = (nin + CAT_MAXIN - 1) / CAT_MAXIN;
  grace_tensor **part = vm_calloc(vm, sizeof *part * (size_t)np);
  if (!part) return vm_err(vm, GRACE_ENOMEM, "%s: out of host memory", grace_op_name(op));
  grace_status st = GRACE_OK;
  for (int j = 0; j < np && st == GRACE_OK; j++) {
    int n = nin - j * CAT_MAXIN < CAT_MAXIN ? nin - j * CAT_MAXIN : CAT_MAXIN;
    st = gpu_run(vm, op, n, in + (size_t)j * CAT_MAXIN, attrs, 1, &part[j]);
  }
  if (st == GRACE_OK) st = gpu_run(vm, GRACE_OP_CAT, np, part, attrs, 1, out);
  for (int j = 0; j < np; j++) grace_tensor_release(part[j]);
  vm_free(vm, part, sizeof *part * (size_t)np);
  return st;
}

grace_status gpu_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *attrs, int nout,
                     grace_tensor **out) {
  if ((op == GRACE_OP_CAT || op == GRACE_OP_STACK) && nin > CAT_MAXIN && nout == 1)
    return join_chunks(vm, op, nin, in, attrs, out);
  if (op == GRACE_OP_TO_DEVICE) return transfer(vm, in[0], attrs->device, out);
  if (!cuda_get(vm)) return vm_err(vm, vm->status, "%s: the CUDA device is not usable: %s", grace_op_name(op), cuda_why(vm));
  if (op == GRACE_OP_COPY_ && in[1]->storage->device != in[0]->storage->device) {   /* copy_ across devices */
    grace_tensor *moved = NULL;
    grace_status st = transfer(vm, in[1], in[0]->storage->device, &moved);
    if (st != GRACE_OK) return st;
    st = gpu_run(vm, op, 2, (grace_tensor *[]){in[0], moved}, attrs, 0, NULL);
    grace_tensor_release(moved);
    return st;
  }
  if (nin == 1 && in[0]->storage->device == GRACE_CUDA &&
      split_softmax(vm, op, in[0]->dtype, in[0]->ndim, in[0]->sizes, attrs))
    return run_prog(vm, op, nin, in, attrs, nout, out);   /* written out by build_prog */
  switch (grace_op_kind(op)) {
  case GRACE_KIND_VIEW: return vm_view_run(vm, op, nin, in, attrs, nout, out);
  case GRACE_KIND_UNARY: case GRACE_KIND_BINARY: case GRACE_KIND_COMPARE: case GRACE_KIND_TERNARY:
  case GRACE_KIND_REDUCE: case GRACE_KIND_MATMUL:
    return run_prog(vm, op, nin, in, attrs, nout, out);
  default: {   /* templates take device tensors: host numbers (scatter's value) are moved first */
    grace_tensor *args[GRACE_MAX_DIMS * 8], *moved[GRACE_MAX_DIMS * 8];
    int nm = 0;
    grace_status st = nin <= (int)(sizeof args / sizeof *args) ? GRACE_OK
                      : vm_err(vm, GRACE_EUNSUPPORTED, "%s: too many inputs", grace_op_name(op));
    for (int i = 0; i < nin && st == GRACE_OK; i++) {
      args[i] = in[i];
      if (in[i] && in[i]->storage->device == GRACE_CPU && in[i]->ndim == 0 && op != GRACE_OP_COPY_ &&
          !(op == GRACE_OP_ATTENTION && i == 3))   /* attention takes its scale by value (op_attention) */
        if ((st = gpu_host_number(vm, in[i], &moved[nm])) == GRACE_OK) args[i] = moved[nm++];
    }
    if (st == GRACE_OK) st = gpu_op_run(vm, op, nin, args, attrs, nout, out);
    for (int i = 0; i < nm; i++) grace_tensor_release(moved[i]);
    return st;
  }
  }
}

/* ---- IR programs ---- */
typedef struct gpu_plan {
  ir_fusion f;
  gpu_slot *slots;            /* per group */
  int32_t *rel_first;         /* per group g: values released after it are rel[rel_first[g] .. rel_first[g+1]) */
  int32_t *rel;
  int nrel;
  int eager;                  /* a one-op program: falling back to grace_run would come back here */
  gpu_part *part;             /* graphs and launch measurements (gpu_graph.c); not for one-op programs */
  int unfused;                /* groups that ran an op at a time (slots[g].unfused), and why the first did */
  char unfused_why[160];
  int regions;                /* region instructions; in a graph they can become conditional nodes (cond_ok) or be */
  int cond_ok, pred_ok;       /* predicated (pred_ok) */
  int pred_warm;              /* its predicated kernels compiled (gpu_pred_warm, after the first host branch) */
  char region_why[160];       /* why not conditional nodes (gpu_cond_available, or the mode) */
  char pred_why[160];         /* why not predicated (gpu_pred_available, or the mode) */
  char host_why[160];         /* why not the host branch: the mode forces another lowering ("" when it is allowed) */
} gpu_plan;

static void plan_free(grace_ir *ir);
const gpu_part *gpu_ir_part(const grace_ir *ir) {
  const gpu_plan *p = ir->exec_free == plan_free ? ir->exec : NULL;
  return p ? p->part : NULL;
}

int gpu_ir_unfused(const grace_ir *ir, char *why, size_t n) {
  const gpu_plan *p = ir && ir->exec_free == plan_free ? ir->exec : NULL;
  if (n) snprintf(why, n, "%s", p ? p->unfused_why : "");
  return p ? p->unfused : 0;
}

int gpu_ir_lowerings(const grace_ir *ir, char why[3][160]) {
  const gpu_plan *p = ir && ir->exec_free == plan_free ? ir->exec : NULL;
  snprintf(why[GRACE_REGION_HOST], 160, "%s", p ? p->host_why : "");
  snprintf(why[GRACE_REGION_NODES], 160, "%s", p ? p->region_why : "");
  snprintf(why[GRACE_REGION_PRED], 160, "%s", p ? p->pred_why : "");
  return p ? p->regions : 0;
}

/* Which lowerings the regions of ir can take (conditional nodes, predication, the host branch), the mode
 * (grace_set_regions, GRACE_REGIONS) leaving only the one it names where the program can take it. */
static void plan_regions(grace_ir *ir, gpu_plan *p) {
  static const char *const names[] = {"the host branch", "conditional nodes", "predication"};
  grace_vm *vm = ir->vm;
  int mode = gpu_region_mode(vm);
  p->cond_ok = gpu_cond_available(ir, p->region_why, sizeof p->region_why);
  p->pred_ok = gpu_pred_available(ir, p->pred_why, sizeof p->pred_why);
  int ok[3] = {1, p->cond_ok, p->pred_ok};
  if (mode >= 0) {   /* the others off; the host branch stays where the one asked for cannot take them */
    char forced[160];
    snprintf(forced, sizeof forced, "regions are forced to %s (GRACE_REGIONS or grace.regions)", names[mode]);
    if (mode != GRACE_REGION_HOST && ok[mode]) snprintf(p->host_why, sizeof p->host_why, "%s", forced);
    if (mode != GRACE_REGION_NODES && p->cond_ok) p->cond_ok = 0, snprintf(p->region_why, sizeof p->region_why, "%s", forced);
    if (mode != GRACE_REGION_PRED && p->pred_ok) p->pred_ok = 0, snprintf(p->pred_why, sizeof p->pred_why, "%s", forced);
  }
  if (!p->cond_ok && !p->pred_ok)
    vm_progress(vm, "regions of %s run as host branches: conditional nodes: %s; predication: %s", ir->name,
                p->region_why, p->pred_why);
}

static void plan_free(grace_ir *ir) {
  gpu_plan *p = ir->exec;
  grace_vm *vm = ir->vm;
  if (!p) return;
  gpu_part_free(vm, p->part);
  int ng = p->f.ngroup;
  if (p->slots)
    for (int g = 0; g < ng; g++)
      if (p->slots[g].p && p->slots[g].free) p->slots[g].free(vm, p->slots[g].p);
  vm_free(vm, p->slots, sizeof *p->slots * (size_t)(ng ? ng : 1));
  vm_free(vm, p->rel_first, sizeof *p->rel_first * (size_t)(ng + 1));
  vm_free(vm, p->rel, sizeof *p->rel * (size_t)(p->nrel ? p->nrel : 1));
  ir_fuse_free(ir, &p->f);
  vm_free(vm, p, sizeof *p);
  ir->exec = NULL;
}

static int is_view(const grace_ir *ir, int32_t v) {
  int op = ir->insts[ir->vals[v].inst].op;
  return op < GRACE_NOPS && grace_op_kind((grace_op)op) == GRACE_KIND_VIEW;
}

/* last[v] = max(last[v], g) for v and every value a view chain from v reads. */
static void mark_chain(const grace_ir *ir, int32_t *last, int32_t v, int g) {
  while (v >= 0) {
    if (last[v] < g) last[v] = g;
    if (!is_view(ir, v)) break;
    v = ir->args[ir->insts[ir->vals[v].inst].first_arg];
  }
}

static grace_status make_plan(grace_ir *ir) {
  grace_vm *vm = ir->vm;
  gpu_plan *p = vm_calloc(vm, sizeof *p);
  if (!p) return vm_err(vm, GRACE_ENOMEM, "run: out of host memory");
  grace_status st = ir_fuse(ir, &p->f);
  if (st != GRACE_OK) { vm_free(vm, p, sizeof *p); return st; }
  ir->exec = p;
  ir->exec_free = plan_free;
  p->eager = !strcmp(ir->name, "eager");
  for (int i = 0; i < ir->ninst; i++) p->regions += ir_is_region(ir->insts[i].op);
  if (p->regions && !p->eager) plan_regions(ir, p);
  int ng = p->f.ngroup;
  int32_t *last = vm_alloc(vm, sizeof *last * (size_t)(ir->nval ? ir->nval : 1));
  p->slots = vm_calloc(vm, sizeof *p->slots * (size_t)(ng ? ng : 1));
  p->rel_first = vm_calloc(vm, sizeof *p->rel_first * (size_t)(ng + 1));
  if (!last || !p->slots || !p->rel_first) {
    vm_free(vm, last, sizeof *last * (size_t)(ir->nval ? ir->nval : 1));
    plan_free(ir);
    return vm_err(vm, GRACE_ENOMEM, "run: out of host memory");
  }
  for (int v = 0; v < ir->nval; v++) last[v] = -1;
  for (int g = 0; g < ng; g++) {
    const ir_fuse_group *gr = &p->f.groups[g];
    for (int j = 0; j < gr->n; j++) {
      const ir_inst *k = &ir->insts[p->f.members[gr->first + j]];
      for (int a = 0; a < k->nin; a++) mark_chain(ir, last, ir->args[k->first_arg + a], g);
      for (int r = 0; r < k->nout; r++) if (last[k->first_result + r] < g) last[k->first_result + r] = g;
    }
  }
  /* returned, written back, or needed to write back after a failure: kept to the end */
  for (int i = 0; i < ir->nout; i++) mark_chain(ir, last, ir->outputs[i], ng);
  for (int i = 0; i < ir->nwrite; i++) { mark_chain(ir, last, ir->writes[i].value, ng); mark_chain(ir, last, ir->writes[i].target, ng); }
  for (int v = 0; v < ir->nval; v++) if (ir->vals[v].root >= 0) mark_chain(ir, last, v, ng);
  for (int v = 0; v < ir->nval; v++) if (last[v] >= 0 && last[v] < ng) p->nrel++;
  p->rel = vm_alloc(vm, sizeof *p->rel * (size_t)(p->nrel ? p->nrel : 1));
  if (!p->rel) {
    vm_free(vm, last, sizeof *last * (size_t)(ir->nval ? ir->nval : 1));
    plan_free(ir);
    return vm_err(vm, GRACE_ENOMEM, "run: out of host memory");
  }
  for (int v = 0; v < ir->nval; v++) if (last[v] >= 0 && last[v] < ng) p->rel_first[last[v] + 1]++;
  for (int g = 0; g < ng; g++) p->rel_first[g + 1] += p->rel_first[g];
  int32_t *fill = vm_calloc(vm, sizeof *fill * (size_t)(ng ? ng : 1));
  if (!fill) {
    vm_free(vm, last, sizeof *last * (size_t)(ir->nval ? ir->nval : 1));
    plan_free(ir);
    return vm_err(vm, GRACE_ENOMEM, "run: out of host memory");
  }
  for (int v = 0; v < ir->nval; v++)
    if (last[v] >= 0 && last[v] < ng) p->rel[p->rel_first[last[v]] + fill[last[v]]++] = v;
  vm_free(vm, fill, sizeof *fill * (size_t)(ng ? ng : 1));
  vm_free(vm, last, sizeof *last * (size_t)(ir->nval ? ir->nval : 1));
  return GRACE_OK;
}

/* val[v], making the views it is read through on the host. */
static grace_status need(grace_ir *ir, int32_t v, grace_tensor *const *in, grace_tensor **val) {
  if (v < 0 || val[v]) return GRACE_OK;
  if (!is_view(ir, v))
    return vm_err(ir->vm, GRACE_EINTERNAL, "run: value %%%d is used before it is computed", (int)v);
  const ir_inst *k = &ir->insts[ir->vals[v].inst];
  grace_status st = need(ir, ir->args[k->first_arg], in, val);
  return st == GRACE_OK ? ir_exec_inst(ir, ir->vals[v].inst, in, val) : st;
}

/* The group's instructions one at a time through grace_run. */
static grace_status run_members(grace_ir *ir, const gpu_plan *p, const ir_fuse_group *gr, grace_tensor *const *in,
                                grace_tensor **val, int *at) {
  for (int j = 0; j < gr->n; j++) {
    int m = p->f.members[gr->first + j];
    const ir_inst *k = &ir->insts[m];
    *at = m;
    grace_status st = GRACE_OK;
    for (int a = 0; a < k->nin && st == GRACE_OK; a++) st = need(ir, ir->args[k->first_arg + a], in, val);
    /* in a graph capture a region becomes conditional nodes or is predicated, as the capture says; elsewhere the
     * IR runs it as a host branch */
    int region = ir_is_region(k->op), capturing = gpu_graph_capturing(ir->vm);
    if (st == GRACE_OK && region && capturing)
      st = gpu_graph_pred(ir->vm) ? gpu_pred_lower(ir, m, val) : gpu_cond_lower(ir, m, val);
    else if (st == GRACE_OK) st = ir_exec_inst(ir, m, in, val);
    if (st == GRACE_OK && region && !capturing && (p->cond_ok || p->pred_ok)) gpu_cond_warm(ir, m, val);
    if (st == GRACE_OK && region && !capturing && p->pred_ok && !p->pred_warm) gpu_pred_warm(ir, m, val);
    if (st != GRACE_OK) return st;
  }
  return GRACE_OK;
}

static grace_status run_group(grace_ir *ir, gpu_plan *p, int g, grace_tensor *const *in, grace_tensor **val, int *at) {
  grace_vm *vm = ir->vm;
  const ir_fuse_group *gr = &p->f.groups[g];
  const int32_t *m = &p->f.members[gr->first];
  *at = m[0];
  /* the values it reads from outside, views made (a view of a value the group computes itself waits for it: where
     no kernel runs the group, run_members makes the view once its base is there) */
  for (int j = 0; j < gr->n; j++) {
    const ir_inst *k = &ir->insts[m[j]];
    for (int a = 0; a < k->nin; a++) {
      int32_t v = ir->args[k->first_arg + a], b = ir_view_base(ir, v);
      if (b < 0 || p->f.inst_group[ir->vals[b].inst] == g) continue;
      grace_status st = need(ir, v, in, val);
      if (st != GRACE_OK) return st;
    }
  }
  int on_gpu = ir->vals[ir->insts[m[0]].first_result].type.device == GRACE_CUDA;
  grace_status st = GRACE_EUNSUPPORTED;
  if (on_gpu && (gr->kind == IR_FUSE_POINTWISE || gr->kind == IR_FUSE_ROW))
    st = gpu_fused_run(vm, ir, &p->f, g, &p->slots[g], val);
  else if (on_gpu && gr->kind == IR_FUSE_MATMUL)
    st = gpu_matmul_run(vm, ir, &p->f, g, &p->slots[g], val);
  if (st != GRACE_EUNSUPPORTED) return st;
  if (p->eager && on_gpu) {
    char msg[VM_ERRLEN];
    snprintf(msg, sizeof msg, "%s", vm->err);
    return vm_err(vm, GRACE_EUNSUPPORTED, "%s: no CUDA kernel for this case: %s",
                  grace_op_name((grace_op)ir->insts[m[0]].op), msg);
  }
  if (on_gpu && gr->n > 1 && !p->slots[g].unfused) {   /* said in grace_ir_graph_info, not silent */
    p->slots[g].unfused = 1;
    if (!p->unfused++) snprintf(p->unfused_why, sizeof p->unfused_why, "%.159s", vm->err);
  }
  for (int j = 0; j < gr->n; j++) {   /* what the kernels computed before giving up (a group's first products) */
    const ir_inst *k = &ir->insts[m[j]];
    for (int r = 0; r < k->nout; r++) { grace_tensor_release(val[k->first_result + r]); val[k->first_result + r] = NULL; }
  }
  return run_members(ir, p, gr, in, val, at);
}

/* The group executor: one call of ir, kernel by kernel (or captured into a graph by gpu_graph.c). */
static grace_status exec(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out) {
  grace_vm *vm = ir->vm;
  grace_status st = GRACE_OK;
  for (int i = 0; i < nout; i++) out[i] = NULL;
  gpu_plan *p = ir->exec;
  size_t vbytes = sizeof(grace_tensor *) * (size_t)(ir->nval ? ir->nval : 1);
  grace_tensor **val = vm_calloc(vm, vbytes);
  if (!val) return vm_err(vm, GRACE_ENOMEM, "run: out of host memory");
  (void)nin;
  int at = -1;
  for (int i = 0; i < ir->ninst && st == GRACE_OK; i++) {
    int op = ir->insts[i].op;
    if (op == IR_OP_INPUT || op == IR_OP_CONST || op == IR_OP_SCALAR || op == IR_OP_LITERAL) {
      at = i;
      st = ir_exec_inst(ir, i, in, val);
      if (st == GRACE_OK && op != IR_OP_LITERAL) st = gpu_graph_lift(ir, i, val);   /* host numbers, in a capture */
    }
  }
  for (int g = 0; g < p->f.ngroup && st == GRACE_OK; g++) {
    st = run_group(ir, p, g, in, val, &at);
    if (st != GRACE_OK) break;
    for (int r = p->rel_first[g]; r < p->rel_first[g + 1]; r++) {
      grace_tensor_release(val[p->rel[r]]);
      val[p->rel[r]] = NULL;
    }
  }
  if (st == GRACE_OK && !gpu_graph_capturing(vm)) p->pred_warm = 1;   /* every region of the plan warmed once */
  for (int i = 0; i < ir->nout && st == GRACE_OK; i++) st = need(ir, ir->outputs[i], in, val);
  for (int i = 0; i < ir->nwrite && st == GRACE_OK; i++) st = need(ir, ir->writes[i].value, in, val);
  if (st != GRACE_OK && at >= 0 && ir->insts[at].loc >= 0) {
    char msg[VM_ERRLEN];
    snprintf(msg, sizeof msg, "%s", vm->err);
    vm_err(vm, st, "%s (traced at %s)", msg, ir->locs[ir->insts[at].loc]);
  }
  st = ir_exec_write_back(ir, val, st);
  if (st == GRACE_OK)
    for (int i = 0; i < nout; i++) { out[i] = val[ir->outputs[i]]; grace_tensor_retain(out[i]); }
  for (int v = 0; v < ir->nval; v++) grace_tensor_release(val[v]);
  vm_free(vm, val, vbytes);
  return st;
}

/* ---- programs with symbolic sizes ----
 * A plan, its launch geometry and its graphs are made for fixed sizes, so a program with symbolic sizes runs as a
 * copy specialised to the call's sizes (ir_sym_specialize), kept for the next calls of those sizes. Generated
 * kernels are cached by their source, which depends on the layout classes and widths the plan picks, not on the
 * sizes: a new size mostly reuses compiled kernels, and costs a plan and its graph. At most GPU_SYM_KEEP
 * specialisations are kept (the least recently used goes first), fewer while the graph arena holds more than
 * GRACE_GRAPH_MEM bytes: the memory held does not grow with the number of sizes seen. The launch decision is made
 * for the program, not per size: the first specialisations measure, and one made after a decision starts decided
 * with it (gpu_share, gpu_graph_choice.c), as do later processes (the launch cache keys it by this program). */
enum { GPU_SYM_KEEP = 4 };

typedef struct gpu_symcache {
  int n;
  long tick;
  struct { grace_ir *ir; int64_t *vals; long used; char sizes[96]; } e[GPU_SYM_KEEP];
  size_t vbytes;
  gpu_share *share;
} gpu_symcache;

static void symcache_drop(grace_vm *vm, gpu_symcache *c, int k) {
  grace_ir_free(c->e[k].ir);
  vm_free(vm, c->e[k].vals, c->vbytes);
  c->e[k] = c->e[--c->n];
}

static void symcache_free(grace_ir *ir) {
  gpu_symcache *c = ir->exec;
  if (!c) return;
  while (c->n) symcache_drop(ir->vm, c, c->n - 1);
  gpu_share_free(c->share);
  vm_free(ir->vm, c, sizeof *c);
  ir->exec = NULL;
}

/* The least recently used specialisation but `keep` (-1: none). */
static int symcache_lru(const gpu_symcache *c, int keep) {
  int k = -1;
  for (int i = 0; i < c->n; i++) if (i != keep && (k < 0 || c->e[i].used < c->e[k].used)) k = i;
  return k;
}

/* GRACE_GRAPH_MEM: the bytes of graph memory kept across sizes (0: no bound but GPU_SYM_KEEP). */
static size_t graph_mem_budget(void) {
  const char *s = getenv("GRACE_GRAPH_MEM");
  char *end = NULL;
  unsigned long long v = s ? strtoull(s, &end, 10) : 0;
  return s && end != s && !*end ? (size_t)v : 0;
}

static grace_status run_program(grace_ir *ir, gpu_share *share, int nin, grace_tensor *const *in, int nout,
                                grace_tensor **out);

grace_ir *grace_ir_specialization(const grace_ir *ir, int k, char *sizes, size_t n) {
  if (sizes && n) sizes[0] = 0;
  const gpu_symcache *c = ir && ir->exec_free == symcache_free ? ir->exec : NULL;
  if (!c || k < 0 || k >= c->n) return NULL;
  size_t m = 0;
  for (int32_t s = 1; sizes && s <= ir->nsyms && m < n; s++)
    if (c->e[k].vals[s])   /* the free symbols the inputs bound */
      m += (size_t)snprintf(sizes + m, n - m, "%ss%d=%lld", m ? ", " : "", (int)s, (long long)c->e[k].vals[s]);
  return c->e[k].ir;
}

static grace_status run_symbolic(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out) {
  grace_vm *vm = ir->vm;
  if (ir->exec && ir->exec_free != symcache_free)
    return vm_err(vm, GRACE_EINTERNAL, "run: the program is held by another executor");
  if (!ir->exec) {
    gpu_symcache *c = vm_calloc(vm, sizeof *c);
    if (!c || !(c->share = gpu_share_new(ir))) {
      vm_free(vm, c, sizeof *c);
      return vm_err(vm, GRACE_ENOMEM, "run: out of host memory");
    }
    c->vbytes = sizeof(int64_t) * (size_t)(ir->nsyms + 1);
    ir->exec = c;
    ir->exec_free = symcache_free;
  }
  gpu_symcache *c = ir->exec;
  int64_t *vals = vm_alloc(vm, c->vbytes);
  if (!vals) return vm_err(vm, GRACE_ENOMEM, "run: out of host memory");
  grace_status st = ir_sym_bind(ir, nin, in, vals);
  int k = -1;
  for (int i = 0; st == GRACE_OK && i < c->n && k < 0; i++) if (!memcmp(c->e[i].vals, vals, c->vbytes)) k = i;
  if (st == GRACE_OK && k < 0) {
    grace_ir *spec = NULL;
    if ((st = ir_sym_specialize(ir, vals, &spec)) == GRACE_OK) {
      if (c->n == GPU_SYM_KEEP) symcache_drop(vm, c, symcache_lru(c, -1));
      k = c->n++;
      c->e[k].ir = spec;
      c->e[k].vals = vals;
      vals = NULL;
      grace_ir_specialization(ir, k, c->e[k].sizes, sizeof c->e[k].sizes);
    }
  }
  vm_free(vm, vals, c->vbytes);
  if (st != GRACE_OK) return st;
  c->e[k].used = ++c->tick;
  grace_ir *run = c->e[k].ir;
  gpu_share_running(c->share, c->e[k].sizes);
  st = run_program(run, c->share, nin, in, nout, out);
  gpu_share_running(c->share, NULL);
  size_t budget = graph_mem_budget();
  cuda_ctx *ctx = gpu_ctx(vm);
  /* over the budget: the other sizes' graphs go, least recently used first (this call's stays: it just ran) */
  while (budget && ctx && c->n > 1 && cuda_graph_arena_bytes(ctx) > budget) {
    int drop = symcache_lru(c, k);
    if (c->e[drop].ir == run) break;
    symcache_drop(vm, c, drop);
    for (k = 0; k < c->n && c->e[k].ir != run; k++) {}
  }
  return st;
}

grace_status gpu_ir_run(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out) {
  return run_program(ir, NULL, nin, in, nout, out);
}

/* A call of ir; share: the decision it shares with the other specialisations of its symbolic program (or NULL). */
static grace_status run_program(grace_ir *ir, gpu_share *share, int nin, grace_tensor *const *in, int nout,
                                grace_tensor **out) {
  grace_status st = GRACE_OK;
  for (int i = 0; i < nout; i++) out[i] = NULL;
  if (ir_sym_live(ir)) return run_symbolic(ir, nin, in, nout, out);
  if (ir->exec && ir->exec_free != plan_free)
    return vm_err(ir->vm, GRACE_EINTERNAL, "run: the program is held by another executor");
  if (!ir->exec && (st = make_plan(ir)) != GRACE_OK) return st;
  gpu_plan *p = ir->exec;
  /* Regions that can neither become conditional nodes (gpu_cond.c) nor be predicated (gpu_pred.c) run as host
   * branches (ir_region.c): the predicate read on the host, a synchronisation no CUDA graph can hold, so such a
   * program runs kernel by kernel. */
  if (p->eager || (p->regions && !p->cond_ok && !p->pred_ok)) return exec(ir, nin, in, nout, out);
  return gpu_graph_call(ir, &p->part, share, exec, nin, in, nout, out);
}

/* ---- the backend's table ---- */
static grace_status gpu_storage_alloc(grace_vm *vm, size_t bytes, void **data) {
  cuda_ctx *c = cuda_get(vm);
  if (!c) return vm_err(vm, vm->status, "the CUDA device is not usable: %s", cuda_why(vm));
  CUdeviceptr p = 0;
  grace_status st = cuda_malloc(c, bytes, &p);
  *data = (void *)(uintptr_t)p;
  return st;
}

static void gpu_storage_free(grace_vm *vm, void *data, size_t bytes) {
  if (data) cuda_release(vm->cuda, (CUdeviceptr)(uintptr_t)data, bytes);
}

static grace_status gpu_to_host(grace_vm *vm, void *dst, const void *src, size_t bytes) {
  cuda_ctx *c = cuda_get(vm);
  return c ? cuda_copy_to_host(c, dst, (CUdeviceptr)(uintptr_t)src, bytes) : vm->status;
}

static void gpu_release(grace_vm *vm) {
  gpu_state_free(vm);
  gpu_ops_free(vm);
  cuda_free_all(vm);
}

const vm_backend gpu_backend = {
  .name = "cuda",
  .device = GRACE_CUDA,
  .supports = gpu_supports,
  .run_op = gpu_run,
  .run_program = gpu_ir_run,
  .synchronize = grace_synchronize,
  .storage_alloc = gpu_storage_alloc,
  .storage_free = gpu_storage_free,
  .to_host = gpu_to_host,
  .release = gpu_release,
};
