/* gpu_fused.c: runs a fused POINTWISE or ROW group on the device (gpu_fused_run, gpu/gpu_exec.h). Per group a
 * small cache in the executor's slot maps the spec (layout classes, ranks, vector width, strategy: everything the
 * source depends on) to a compiled kernel, so a program run again with tensors of the same layouts launches
 * without generating or compiling anything. */
#include <string.h>
#include "codegen/cg_fused.h"
#include "cuda/cuda_graph.h"
#include "gpu/gpu_exec.h"
#include "ir/ir_exec.h"

typedef struct fused_entry {
  cg_fused_spec spec;
  cg_kernel k;
  CUfunction fn;
} fused_entry;

typedef struct fused_cache {
  int have_io;
  cg_group_io io;
  int n, cap;
  fused_entry *e;
} fused_cache;

static void fused_cache_free(grace_vm *vm, void *p) {
  fused_cache *c = p;
  if (!c) return;
  for (int i = 0; i < c->n; i++) cg_kernel_free(vm, &c->e[i].k);
  if (c->e) grace_realloc(vm, c->e, sizeof *c->e * (size_t)c->cap, 0);
  grace_realloc(vm, c, sizeof *c, 0);
}

static grace_status get_cache(grace_vm *vm, gpu_slot *slot, fused_cache **out) {
  if (!slot->p) {
    fused_cache *c = grace_realloc(vm, NULL, 0, sizeof *c);
    if (!c) return vm_err(vm, GRACE_ENOMEM, "fused kernel: out of host memory");
    memset(c, 0, sizeof *c);
    slot->p = c;
    slot->free = fused_cache_free;
  }
  *out = slot->p;
  return GRACE_OK;
}

/* The compiled kernel for spec: from the cache, else generated, compiled (or found in the module cache) and
 * added. */
static grace_status get_kernel(grace_vm *vm, cuda_ctx *ctx, grace_ir *ir, const ir_fusion *f, int g, fused_cache *c,
                               const cg_fused_spec *spec, fused_entry **out) {
  for (int i = 0; i < c->n; i++)
    if (!memcmp(&c->e[i].spec, spec, sizeof *spec)) { *out = &c->e[i]; return GRACE_OK; }
  if (c->n == c->cap) {
    int cap = c->cap ? c->cap * 2 : 2;
    fused_entry *e = grace_realloc(vm, c->e, sizeof *e * (size_t)c->cap, sizeof *e * (size_t)cap);
    if (!e) return vm_err(vm, GRACE_ENOMEM, "fused kernel: out of host memory");
    c->e = e;
    c->cap = cap;
  }
  fused_entry *e = &c->e[c->n];
  memset(e, 0, sizeof *e);
  e->spec = *spec;
  grace_status st = cg_fused_generate(vm, ir, f, g, &c->io, spec, &e->k);
  if (st != GRACE_OK) return st;
  cuda_module *m = NULL;
  if ((st = cuda_module_get(ctx, e->k.src, &m)) != GRACE_OK || (st = cuda_module_function(ctx, m, e->k.name, &e->fn)) != GRACE_OK) {
    cg_kernel_free(vm, &e->k);
    return st;
  }
  c->n++;
  *out = e;
  return GRACE_OK;
}

/* The tensor whose storage copy_ member i writes: its destination, through the copy_ members of the group before
 * it (their results are registers, not tensors). */
static grace_tensor *copy_dest(const grace_ir *ir, const ir_fusion *f, int g, grace_tensor **vals, int i) {
  int32_t d = ir->args[ir->insts[i].first_arg];
  while (d >= 0 && f->inst_group[ir->vals[d].inst] == g && ir->insts[ir->vals[d].inst].op == GRACE_OP_COPY_)
    d = ir->args[ir->insts[ir->vals[d].inst].first_arg];
  return d >= 0 ? vals[d] : NULL;
}

/* The tensor a stored copy_ result v writes when it may write its destination itself (ir_exec_direct), NULL
 * where the result is a new tensor (the write-back copies it in). The kernel then stores straight into the input
 * or capture, as the op alone would, but only where every thread stores the elements it alone reads: a pointwise
 * kernel over exactly the destination's elements, the destination contiguous, and any operand over the same
 * storage the destination itself. Otherwise the group runs an op at a time (the report says so). */
static grace_status direct_target(grace_vm *vm, grace_ir *ir, const ir_fusion *f, int g, const cg_group_io *io,
                                  const cg_fused_spec *spec, const cg_fused_geom *geom, grace_tensor **vals, int32_t v,
                                  grace_tensor **out) {
  *out = NULL;
  int i = ir->vals[v].inst;
  if (ir->insts[i].op != GRACE_OP_COPY_ || !ir_exec_direct(ir, i)) return GRACE_OK;
  grace_tensor *t = copy_dest(ir, f, g, vals, i);
  const ir_type *ty = &ir->vals[v].type;
  int fits = t && spec->kind == CG_POINTWISE && t->storage->device == GRACE_CUDA && vm_is_contiguous(t) &&
             t->dtype == ty->dtype && t->ndim == ty->ndim && ir_type_numel(ty) == geom->n;
  for (int k = 0; fits && k < ty->ndim; k++) fits = t->sizes[k] == ty->sizes[k];
  for (int k = 0; fits && k < io->next; k++) {
    const grace_tensor *e = vals[io->ext[k]];
    if (!e || e->storage != t->storage) continue;
    fits = gpu_ptr(e) == gpu_ptr(t) && e->ndim == t->ndim && vm_is_contiguous(e);
    for (int j = 0; fits && j < t->ndim; j++) fits = e->sizes[j] == t->sizes[j];
  }
  if (!fits)
    return vm_err(vm, GRACE_EUNSUPPORTED, "fused kernel: copy_ into %%%d in place, where threads would read elements "
                  "others write", (int)v);
  *out = t;
  return GRACE_OK;
}

/* After the launch: each copy_ member that wrote its destination itself advances its version once, as eagerly. */
static void direct_versions(grace_ir *ir, const ir_fusion *f, int g, grace_tensor **vals) {
  const ir_fuse_group *gr = &f->groups[g];
  for (int j = 0; j < gr->n; j++) {
    int i = f->members[gr->first + j];
    if (ir->insts[i].op != GRACE_OP_COPY_ || !ir_exec_direct(ir, i)) continue;
    grace_tensor *t = copy_dest(ir, f, g, vals, i);
    if (t) t->storage->version++;
  }
}

/* The tensors the group's stored values go to (outs, their pointers in ptrs): the destination itself for a copy_
 * stored in place (direct_target), else new contiguous tensors. On failure none is left. */
static grace_status make_stores(grace_vm *vm, grace_ir *ir, const ir_fusion *f, int g, const cg_group_io *io,
                                const cg_fused_spec *spec, const cg_fused_geom *geom, grace_tensor **vals,
                                grace_tensor **outs, uint64_t *ptrs) {
  grace_tensor *direct[CG_MAX_ARGS] = {0};
  for (int s = 0; s < io->nstore; s++) {
    const ir_type *ty = &ir->vals[io->store[s]].type;
    grace_status st = direct_target(vm, ir, f, g, io, spec, geom, vals, io->store[s], &direct[s]);
    for (int r = 0; st == GRACE_OK && direct[s] && r < s; r++)
      if (direct[r] && direct[r]->storage == direct[s]->storage)
        st = vm_err(vm, GRACE_EUNSUPPORTED, "fused kernel: two versions of one tensor stored in place");
    if (st == GRACE_OK && direct[s]) grace_tensor_retain(direct[s]);
    outs[s] = st != GRACE_OK ? NULL
            : direct[s] ? direct[s] : vm_tensor_new(vm, "fused kernel", ty->dtype, GRACE_CUDA, ty->ndim, ty->sizes);
    if (!outs[s]) {
      for (int i = 0; i < s; i++) { grace_tensor_release(outs[i]); outs[i] = NULL; }
      return st != GRACE_OK ? st : vm->status;
    }
    ptrs[s] = gpu_ptr(outs[s]);
  }
  return GRACE_OK;
}

grace_status gpu_fused_run(grace_vm *vm, grace_ir *ir, const ir_fusion *f, int g, gpu_slot *slot, grace_tensor **vals) {
  fused_cache *c = NULL;
  grace_status st = get_cache(vm, slot, &c);
  if (st != GRACE_OK) return st;
  if (!c->have_io) {
    if ((st = cg_fused_io(vm, ir, f, g, &c->io)) != GRACE_OK) return st;
    c->have_io = 1;
  }
  const cg_group_io *io = &c->io;
  cg_tensor ext[CG_MAX_ARGS];
  /* host numbers (0-d CPU tensors: literals, dynamic scalars) are copied to the device for the launch; the copies
   * go back to the allocator after it, in stream order */
  grace_tensor *moved[CG_MAX_ARGS] = {0};
  int nmoved = 0;
#define RELEASE_MOVED() for (int i_ = 0; i_ < nmoved; i_++) grace_tensor_release(moved[i_])
  for (int k = 0; k < io->next; k++) {
    const grace_tensor *t = vals[io->ext[k]];
    const ir_type *ty = &ir->vals[io->ext[k]].type;
    if (!t) { RELEASE_MOVED(); return vm_err(vm, GRACE_EINTERNAL, "fused kernel: operand %%%d was not computed", io->ext[k]); }
    if (t->storage->device != GRACE_CUDA && t->ndim == 0) {
      if ((st = gpu_host_number(vm, (grace_tensor *)t, &moved[nmoved])) != GRACE_OK) {
        RELEASE_MOVED();
        return st;
      }
      t = moved[nmoved++];
    }
    if (t->storage->device != GRACE_CUDA) {
      RELEASE_MOVED();
      return vm_err(vm, GRACE_EUNSUPPORTED, "fused kernel: operand %%%d is not a CUDA tensor", io->ext[k]);
    }
    if (t->dtype != ty->dtype || t->ndim != ty->ndim) {
      RELEASE_MOVED();
      return vm_err(vm, GRACE_EUNSUPPORTED, "fused kernel: operand %%%d does not have its IR type", io->ext[k]);
    }
    memset(&ext[k], 0, sizeof ext[k]);
    ext[k].ptr = gpu_ptr(t);
    ext[k].ndim = t->ndim;
    ext[k].dtype = t->dtype;
    for (int d = 0; d < t->ndim; d++) { ext[k].sizes[d] = t->sizes[d]; ext[k].strides[d] = t->strides[d]; }
  }
  cuda_ctx *ctx = gpu_ctx(vm);
  if (!ctx) { RELEASE_MOVED(); return vm->status ? vm->status : GRACE_EDEVICE; }
  cg_fused_spec spec;
  cg_fused_geom geom;
  cuda_capture *ind = cuda_capture_indirect(ctx);   /* captured for a graph: pointers through its table */
  if ((st = cg_fused_plan(vm, ir, f, g, io, ext, ind != NULL, cuda_properties(ctx)->sms, &spec, &geom)) != GRACE_OK) {
    RELEASE_MOVED();
    return st;
  }
  spec.pred = cuda_pred_word(ctx, NULL) != 0;   /* in a predicated body (gpu_pred.c) */

  /* nothing to compute for an empty iteration, but rows over an empty reduced dim still get their values */
  int work = spec.kind == CG_POINTWISE ? geom.n > 0 : geom.rows > 0;
  fused_entry *e = NULL;
  if (work && (st = get_kernel(vm, ctx, ir, f, g, c, &spec, &e)) != GRACE_OK) { RELEASE_MOVED(); return st; }
  grace_tensor *outs[CG_MAX_ARGS] = {0};
  uint64_t ptrs[CG_MAX_ARGS + 1];
  for (int k = 0; k < io->next; k++) ptrs[k] = ext[k].ptr;
  if ((st = make_stores(vm, ir, f, g, io, &spec, &geom, vals, outs, ptrs + io->next)) != GRACE_OK) {
    RELEASE_MOVED();
    return st;
  }
  if (work) {
    cg_launch L;
    CUdeviceptr ws = 0;
    /* a split row's workspace: zeroed counters and partials, given back in stream order after the launch */
    if (geom.ws_bytes) {
      size_t wsb;   /* partials of every chunk of every row: data-sized */
      st = vm_data_bytes(vm, "fused kernel", geom.ws_bytes, 1, &wsb);
      if (st == GRACE_OK) st = cuda_malloc(ctx, wsb, &ws);
      if (st == GRACE_OK && (st = cuda_memset(ctx, ws, 0, geom.ws_bytes)) != GRACE_OK) cuda_release(ctx, ws, geom.ws_bytes);
      if (st != GRACE_OK) ws = 0;
      ptrs[io->next + io->nstore] = ws;
    }
    for (int a = 0; ind && st == GRACE_OK && a < e->k.narg; a++)
      if (!(ptrs[a] = cuda_capture_slot(ind, ptrs[a])))
        st = vm_err(vm, GRACE_EUNSUPPORTED, "fused kernel: the graph's argument table is full");
    int coop = spec.kind == CG_ROW && spec.strategy == CG_ROW_SYNC;
    if (coop && st == GRACE_OK) {
      /* the row's blocks wait for each other: no more of them than the device holds at once (rows < SMs, so
         every row keeps a block at least) */
      int64_t most = cuda_coresident_blocks(ctx, e->fn, (unsigned)spec.block, 0);
      if (most == 0)
        st = vm_err(vm, GRACE_EDEVICE, "fused kernel %s: the driver cannot say how many of its blocks fit the device "
                    "at once (cuOccupancyMaxActiveBlocksPerMultiprocessor)", e->k.name);
      else if (most < geom.rows)
        st = vm_err(vm, GRACE_EDEVICE, "fused kernel %s: the device holds %lld of its blocks at once, fewer than its "
                    "%lld rows", e->k.name, (long long)most, (long long)geom.rows);
      else if (geom.rows * geom.nchunk > most) geom.nchunk = most / geom.rows;
    }
    if (st == GRACE_OK) st = cg_fused_pack(vm, &e->k, &spec, &geom, ptrs, cuda_properties(ctx)->sms, &L);
    if (st == GRACE_OK) {
      size_t pb = sizeof(uint64_t) * (size_t)L.nwords;
      st = coop ? cuda_launch_cooperative(ctx, e->fn, L.grid, L.block, L.smem, L.words, pb)
                : cuda_launch_overlapped(ctx, e->fn, L.grid, L.block, L.smem, L.words, pb);
    }
    if (ws) cuda_release(ctx, ws, geom.ws_bytes);
    if (st != GRACE_OK) {
      for (int s = 0; s < io->nstore; s++) grace_tensor_release(outs[s]);
      RELEASE_MOVED();
      return st;
    }
  }
  direct_versions(ir, f, g, vals);   /* an empty one too: eager copy_ advances it whatever the size */
  for (int s = 0; s < io->nstore; s++) {
    grace_tensor_release(vals[io->store[s]]);
    vals[io->store[s]] = outs[s];
  }
  RELEASE_MOVED();
#undef RELEASE_MOVED
  return GRACE_OK;
}
