/* gpu_graph.c: CUDA graphs for device programs, chosen by measurement (grace_graph_info in grace.h).
 *
 * A program's first call runs eagerly and proves it stable (its kernels compiled, its matmuls tuned). Then
 * each strategy is measured on real calls (gpu_graph_choice.c: how they are timed and compared, and the re-check of
 * a kept decision): eager launches; a graph
 * fed by copying the inputs into placeholders and the outputs out of its arena (what PyTorch's reduce-overhead
 * does); a graph whose kernels read their pointers through a device argument table (parameter indirection); the
 * same with the library kernels (cuBLASLt), which cannot read the table, re-pointed at each call's inputs and
 * outputs by node-parameter updates (cuda/cuda_graph_update.h; only for a program that calls a library).
 * The fastest is kept. A graph is recorded per input layout (sizes, strides, 16-byte alignment), up to a limit,
 * least recently used first out; a new layout records again from the same compiled kernels.
 *
 * Recording: the group executor runs under stream capture with placeholder inputs, allocations coming from the
 * VM's graph arena (cuda/cuda_graph.h): intermediates and outputs get addresses that stay graph memory while
 * graphs live, shared with other graphs (replays are ordered on the one stream). With indirection the runners pass table slots instead of pointers. Host numbers (0-d CPU inputs,
 * dynamic scalars, captured 0-d CPU tensors) become 0-d device views into the table, rewritten per replay.
 * Afterwards every word handed to the device directly (a non-indirect kernel, a copy, cuBLASLt) is checked
 * against the placeholders and the outputs: an input read directly is copied into its placeholder before each
 * replay, an output written directly is copied out after it (cuBLASLt's words, with node updates, re-point its
 * nodes instead). So each replay gives fresh output tensors: a
 * result the caller keeps is never overwritten by a later call, whatever the strategy. The per-call words are
 * renumbered to the front of the table, so a replay copies only them. Nothing in a capture may synchronize:
 * matmul tuning happens in an eager run of each new layout before its capture, and index checks become flags
 * read back after the replay without waiting for it (a wait per call would serialise the host with the device:
 * a generation loop could not queue its next step). A bad index is skipped by the kernels (never an access out
 * of bounds) and its error is raised by the first wait for the device after it: a value read on the host, a
 * synchronize, or a later replay of the same graph that reuses the flags' buffer. So no value computed with a
 * bad index reaches the host without the error. One capture checks an index tensor once, however many ops use
 * it with the same bound (a KV cache written per layer at one position). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda/cuda_cond.h"
#include "ir/ir_place.h"
#include "gpu/gpu_graph_int.h"

static double now_us(void) { return grace_clock() * 1e6; }

/* ---- one graph ---- */
static void pending_unlink(grace_vm *vm, gg_graph *gg) {
  for (gg_graph **p = &vm->graph_pending; *p; p = &(*p)->pend_next)
    if (*p == gg) { *p = gg->pend_next; break; }
  gg->on_pending = 0;
  gg->pend_next = NULL;
}

static void graph_free(grace_vm *vm, gg_graph *gg) {
  if (!gg) return;
  cuda_ctx *c = vm->cuda;
  /* staging buffers and the table may still be in use; a bad index this wait finds cannot be raised here, so the
   * next wait raises it (the calls' results may still be read) */
  if (c && (gg->x || gg->cap) && cuda_sync(c) == GRACE_EINDEX) snprintf(vm->index_err, sizeof vm->index_err, "%s", vm->err);
  if (gg->on_pending) pending_unlink(vm, gg);
  if (c) {
    cuda_graph_destroy(c, gg->g, gg->x);
    for (int r = 0; r < GG_RING; r++) {
      cuda_host_free(c, gg->host[r]);
      cuda_event_free(c, gg->ev[r]);
      cuda_event_free(c, gg->chk_ev[r]);
    }
    cuda_host_free(c, gg->chk_host);
  }
  for (int k = 0; k < gg->ncheck; k++) grace_tensor_release(gg->chk[k].idx);
  grace_tensor_release(gg->table);
  for (int k = 0; c && k < gg->ncheck; k++) cuda_release(c, gg->chk[k].flag, sizeof(int64_t));
  if (c) cuda_capture_free(c, gg->cap);
  if (c) cuda_graph_updates_free(c, gg->upd);
  vm_free(vm, gg->rng, sizeof *gg->rng * (size_t)(gg->nrng ? gg->nrng : 1));
  vm_free(vm, gg->sig, sizeof *gg->sig * (size_t)(gg->nin ? gg->nin : 1));
  vm_free(vm, gg->in, sizeof *gg->in * (size_t)(gg->nin ? gg->nin : 1));
  vm_free(vm, gg->out, sizeof *gg->out * (size_t)(gg->nout ? gg->nout : 1));
  vm_free(vm, gg->grp, sizeof *gg->grp * (size_t)(gg->nout ? gg->nout : 1));
  vm_free(vm, gg->dyn, sizeof *gg->dyn * (size_t)GG_WORDS);
  vm_free(vm, gg->wr, sizeof *gg->wr * (size_t)(gg->nwr ? gg->nwr : 1));
  vm_free(vm, gg, sizeof *gg);
}

static void make_sig(int nin, grace_tensor *const *in, gg_sig *s) {
  for (int i = 0; i < nin; i++) {
    memset(&s[i], 0, sizeof s[i]);
    const grace_tensor *t = in[i];
    if (!t) continue;
    s[i].present = 1;
    s[i].device = t->storage->device;
    s[i].dtype = t->dtype;
    s[i].ndim = t->ndim;
    s[i].aligned = t->storage->device == GRACE_CUDA && gpu_ptr(t) % 16 == 0;
    for (int d = 0; d < t->ndim; d++) { s[i].sizes[d] = t->sizes[d]; s[i].strides[d] = t->strides[d]; }
  }
}

static int sig_matches(const gg_graph *gg, int nin, grace_tensor *const *in) {
  if (gg->nin != nin) return 0;
  gg_sig s;
  for (int i = 0; i < nin; i++) {
    make_sig(1, &in[i], &s);
    const gg_sig *g = &gg->sig[i];
    if (s.present != g->present || s.device != g->device || s.dtype != g->dtype || s.ndim != g->ndim ||
        s.aligned != g->aligned || memcmp(s.sizes, g->sizes, sizeof(int64_t) * (size_t)s.ndim) ||
        memcmp(s.strides, g->strides, sizeof(int64_t) * (size_t)s.ndim))
      return 0;
  }
  return 1;
}

/* A 0-d view of table word k holding a value of host's dtype. */
static grace_status table_scalar(grace_vm *vm, gg_graph *gg, const grace_tensor *host, gg_sc_kind kind, int inst,
                                 grace_tensor **out) {
  *out = NULL;
  if (gg->nsc >= GG_SCALARS)
    return vm_err(vm, GRACE_EUNSUPPORTED, "graph: more than %d host numbers in one program", GG_SCALARS);
  int k = gg->nsc;
  size_t es = grace_dtype_size(host->dtype);
  /* host number k is word GG_SCALARS - 1 - k: the per-call ones (lifted first) end where the slots begin, so
   * that they and the compacted per-call slots make one short range to copy */
  grace_tensor *v = vm_tensor_view(vm, "graph", gg->table, 0, NULL, NULL, (int64_t)((size_t)(GG_SCALARS - 1 - k) * 8 / es));
  if (!v) return vm->status;
  v->dtype = host->dtype;
  v->wrapped = host->wrapped;
  gg_scalar *s = &gg->sc[k];
  *s = (gg_scalar){kind, inst, host->dtype, 0};
  grace_status st = grace_tensor_read(vm, host, host->dtype, &s->bits);   /* the value now (kept if fixed) */
  if (st != GRACE_OK) { grace_tensor_release(v); return st; }
  gg->nsc++;
  *out = v;
  return GRACE_OK;
}

int gpu_graph_capturing(grace_vm *vm) { return vm->graph_cap != NULL; }

int gpu_graph_pred(grace_vm *vm) { return vm->graph_cap && vm->graph_cap->pred; }

void gpu_graph_cond_added(grace_vm *vm) { vm->graph_cap->ncond++; }

int gpu_graph_check_seen(grace_vm *vm, const grace_tensor *idx, int64_t size) {
  const gg_graph *gg = vm->graph_cap;
  for (int k = 0; gg && k < gg->ncheck; k++) {
    const grace_tensor *t = gg->chk[k].idx;   /* one made in a conditional body may not run: not one to skip by */
    if (!t || gg->chk[k].reset || t->storage != idx->storage || gg->chk[k].ver != idx->storage->version || t->offset != idx->offset ||
        t->dtype != idx->dtype || t->ndim != idx->ndim || gg->chk[k].size != size)
      continue;
    int same = 1;
    for (int d = 0; d < t->ndim && same; d++) same = t->sizes[d] == idx->sizes[d] && t->strides[d] == idx->strides[d];
    if (same) return 1;
  }
  return 0;
}

/* A new deferred check of the capture (idx: NULL for a loop counter). */
static grace_status add_check(grace_vm *vm, uint64_t flag, const char *op, const grace_tensor *idx, int64_t n,
                              int64_t size, int dim, int loop) {
  gg_graph *gg = vm->graph_cap;
  if (gg->ncheck >= GG_CHECKS) return vm_err(vm, GRACE_EUNSUPPORTED, "graph: more than %d index checks", GG_CHECKS);
  gg_check *k = &gg->chk[gg->ncheck++];
  cuda_ctx *c = gpu_ctx(vm);   /* made in a conditional or predicated body, which a replay may not run */
  int maybe = cuda_cond_depth(c) > 0 || cuda_pred_word(c, NULL) != 0;
  *k = (gg_check){flag, n, size, dim, maybe, loop, {0}, (grace_tensor *)idx,
                  idx ? idx->storage->version : 0};
  grace_tensor_retain(k->idx);
  snprintf(k->op, sizeof k->op, "%s", op);
  return GRACE_OK;
}

grace_status gpu_graph_defer_check(grace_vm *vm, uint64_t flag, const char *op, const grace_tensor *idx, int64_t n,
                                   int64_t size, int dim) {
  return add_check(vm, flag, op, idx, n, size, dim, 0);
}

grace_status gpu_graph_defer_loop(grace_vm *vm, uint64_t counter, int64_t max_iters) {
  return add_check(vm, counter, "while_loop", NULL, 0, max_iters, 0, 1);
}

/* Row r of gg's check flags, copied back and complete: the error of the first bad index or bounded loop, if any. */
static grace_status check_row(grace_vm *vm, gg_graph *gg, int r) {
  gg->chk_pend[r] = 0;
  const int64_t *h = gg->chk_host + (size_t)r * GG_CHECKS;
  for (int k = 0; k < gg->ncheck; k++) {
    const gg_check *q = &gg->chk[k];
    if (h[k] >= q->n) continue;
    if (q->loop)
      return vm_err(vm, GRACE_EARG, "while_loop: the loop is still running after max_iters=%lld iterations (in a "
                    "compiled call, found at the next wait for the device)", (long long)q->size);
    return q->dim < 0 ? vm_err(vm, GRACE_EINDEX, "%s: an id is out of range for a table of %lld rows (in a compiled "
                               "call, found at the next wait for the device)", q->op, (long long)q->size)
                      : vm_err(vm, GRACE_EINDEX, "%s: an index is out of range for dim %d of size %lld (in a compiled "
                               "call, found at the next wait for the device)", q->op, q->dim + vm->index_base,
                               (long long)q->size);
  }
  return GRACE_OK;
}

/* Run by cuda_sync once the stream is idle: every pending row of flags is back; the first bad index is the error. */
static grace_status after_sync(grace_vm *vm) {
  grace_status st = GRACE_OK;
  if (vm->index_err[0]) {
    st = vm_err(vm, GRACE_EINDEX, "%s", vm->index_err);
    vm->index_err[0] = 0;
  }
  while (vm->graph_pending) {
    gg_graph *gg = vm->graph_pending;
    for (int r = 0; r < GG_RING; r++)
      if (gg->chk_pend[r]) {
        grace_status s = check_row(vm, gg, r);
        if (st == GRACE_OK) st = s;
      }
    pending_unlink(vm, gg);
  }
  return st;
}

/* The table word of slot address a. */
static int32_t slot_word(const gg_graph *gg, uint64_t a) {
  return (int32_t)(GG_SCALARS + (a - (gpu_ptr(gg->table) + 8 * GG_SCALARS)) / 8);
}

grace_status gpu_graph_rng(grace_vm *vm, uint64_t offset, uint64_t *seed_slot, uint64_t *offset_slot) {
  gg_graph *gg = vm->graph_cap;
  cuda_capture *cap = cuda_capture_indirect(gpu_ctx(vm));
  if (!cap || gg->strat != GRACE_LAUNCH_INDIRECT)
    return vm_err(vm, GRACE_EUNSUPPORTED, "graph: random numbers need parameter indirection (the generator's offset "
                  "changes every call)");
  *seed_slot = cuda_capture_slot_own(cap, vm->seed);
  *offset_slot = cuda_capture_slot_own(cap, offset);
  if (!*seed_slot || !*offset_slot) return vm_err(vm, GRACE_EUNSUPPORTED, "graph: the argument table is full");
  gg->dyn[gg->ndyn++] = (gg_dyn){slot_word(gg, *seed_slot), SRC_SEED, 0, 0};
  gg->dyn[gg->ndyn++] = (gg_dyn){slot_word(gg, *offset_slot), SRC_RNG, 0, (int64_t)(offset - gg->rng0)};
  return GRACE_OK;
}

grace_status gpu_graph_number(grace_vm *vm, grace_tensor *t, grace_tensor **out) {
  return table_scalar(vm, vm->graph_cap, t, SC_FIXED, -1, out);
}

grace_status gpu_graph_lift(grace_ir *ir, int inst, grace_tensor **val) {
  grace_vm *vm = ir->vm;
  gg_graph *gg = vm->graph_cap;
  if (!gg) return GRACE_OK;
  const ir_inst *k = &ir->insts[inst];
  grace_tensor **slot = &val[k->first_result];
  grace_tensor *t = *slot;
  if (!t || t->storage->device != GRACE_CPU || t->ndim != 0) return GRACE_OK;
  /* a nested one-op program's inputs are only numbers the captured program fixed (its own are lifted first) */
  gg_sc_kind kind = ir != gg->ir ? SC_FIXED : k->op == IR_OP_INPUT ? SC_INPUT : k->op == IR_OP_SCALAR ? SC_SCALAR : SC_CONST;
  grace_tensor *v = NULL;
  grace_status st = table_scalar(vm, gg, t, kind, inst, &v);
  if (st != GRACE_OK) return st;
  grace_tensor_release(t);
  *slot = v;
  return GRACE_OK;
}

/* The value of host number s for this call, as its table word. */
static grace_status scalar_word(grace_ir *ir, const gg_scalar *s, grace_tensor *const *in, uint64_t *w) {
  if (s->kind == SC_FIXED) { *w = s->bits; return GRACE_OK; }
  const ir_inst *k = &ir->insts[s->inst];
  const grace_tensor *t = s->kind == SC_INPUT ? in[k->input_index]
                          : s->kind == SC_SCALAR ? in[ir->ninputs + k->input_index] : ir->consts[k->input_index].t;
  *w = 0;
  return grace_tensor_read(ir->vm, t, s->dt, w);
}

/* The program's in-place writes, for the replays to finish (gg->wr): each into a device input or capture (a write
 * into host memory would happen once, while capturing, and never on a replay: such a program is not graphed). */
static grace_status record_writes(grace_ir *ir, gg_graph *gg, grace_tensor *const *in) {
  grace_vm *vm = ir->vm;
  if (!ir->nwrite) return GRACE_OK;
  for (int w = 0; w < ir->nwrite; w++) {
    const ir_inst *k = &ir->insts[ir->vals[ir->writes[w].target].inst];
    const grace_tensor *t = k->op == IR_OP_INPUT ? in[k->input_index] : ir->consts[k->input_index].t;
    if (!t || t->storage->device != GRACE_CUDA)
      return vm_err(vm, GRACE_EUNSUPPORTED, "graph: the program writes a host tensor in place (%s %d)",
                    k->op == IR_OP_INPUT ? "input" : "captured tensor", k->input_index + vm->index_base);
  }
  if (!(gg->wr = vm_calloc(vm, sizeof *gg->wr * (size_t)ir->nwrite))) return vm_err(vm, GRACE_ENOMEM, "graph: out of host memory");
  for (int w = 0; w < ir->nwrite; w++) {
    const ir_inst *k = &ir->insts[ir->vals[ir->writes[w].target].inst];
    gg->wr[w] = (gg_write){k->op == IR_OP_INPUT ? k->input_index : -1, k->op == IR_OP_CONST ? k->input_index : -1,
                           ir->writes[w].bumps > 0 ? ir->writes[w].bumps : 1, 0};
  }
  gg->nwr = ir->nwrite;
  return GRACE_OK;
}

/* After a replay: a written input that some node wrote through its placeholder gets the new contents copied back
 * (with parameter indirection the kernels write the input itself: nothing to copy), and every written tensor's
 * version advances as the eager ops would have advanced it. */
static grace_status finish_writes(grace_ir *ir, gg_graph *gg, grace_tensor *const *in) {
  grace_status st = GRACE_OK;
  for (int w = 0; w < gg->nwr && st == GRACE_OK; w++) {
    const gg_write *x = &gg->wr[w];
    grace_tensor *t = x->input >= 0 ? in[x->input] : ir->consts[x->cst].t;
    if (x->input >= 0 && (gg->in[x->input].copy || gg->in[x->input].via))
      st = cuda_copy_device(gpu_ctx(ir->vm), gpu_ptr(t), gg->in[x->input].ph, gg->in[x->input].bytes);
    t->storage->version += (uint64_t)x->bumps;
    if (x->cst >= 0) ir->consts[x->cst].version = t->storage->version;
  }
  return st;
}

/* Pins the inputs and outputs that words[0..n) point into: copied in or out around each replay. */
static void pin_direct(gg_graph *gg, const uint64_t *words, size_t n) {
  for (size_t r = 0; r < n; r++) {
    for (int i = 0; i < gg->nin; i++)
      if (!gg->in[i].host && gg->in[i].bytes && words[r] >= gg->in[i].ph && words[r] < gg->in[i].ph + gg->in[i].bytes)
        gg->in[i].copy = 1;
    for (int g = 0; g < gg->ngrp; g++)
      if (words[r] >= gg->grp[g].base && words[r] < gg->grp[g].base + gg->grp[g].bytes) gg->grp[g].direct = 1;
  }
}

static int any_within(const uint64_t *w, size_t n, CUdeviceptr base, size_t bytes) {
  for (size_t k = 0; k < n; k++) if (w[k] >= base && w[k] - base < bytes) return 1;
  return 0;
}

/* graph+node updates: the inputs and outputs that library calls were given directly (and nothing pins) become
 * ranges their kernel nodes are re-pointed to per replay. Measured (not forced), a program whose library calls
 * touch none of them would only repeat graph+indirection's graph: refused. */
static grace_status plan_updates(grace_vm *vm, gg_graph *gg, const uint64_t *lib, size_t nlib, int forced) {
  cuda_ctx *c = gpu_ctx(vm);
  cuda_range r[512];
  gg_rng q[512];
  int nr = 0;
  for (int i = 0; i < gg->nin; i++)
    if (!gg->in[i].host && !gg->in[i].copy && gg->in[i].bytes && any_within(lib, nlib, gg->in[i].ph, gg->in[i].bytes))
      q[nr] = (gg_rng){SRC_INPUT, i, gg->in[i].ph, 0, gg->in[i].bytes}, r[nr++] = (cuda_range){gg->in[i].ph, gg->in[i].bytes};
  for (int g = 0; g < gg->ngrp; g++)
    if (!gg->grp[g].direct && any_within(lib, nlib, gg->grp[g].base, gg->grp[g].bytes))
      q[nr] = (gg_rng){SRC_OUTPUT, g, gg->grp[g].base, 0, gg->grp[g].bytes}, r[nr++] = (cuda_range){gg->grp[g].base, gg->grp[g].bytes};
  if (!nr)
    return forced ? GRACE_OK : vm_err(vm, GRACE_EUNSUPPORTED, "graph: no library kernel reads an input or writes an "
                                      "output directly (graph+indirection is the same graph)");
  grace_status st = cuda_graph_updates_find(c, gg->cap, gg->g, r, nr, &gg->upd);
  if (st != GRACE_OK) return st;
  if (!(gg->rng = vm_alloc(vm, sizeof *gg->rng * (size_t)nr))) return vm_err(vm, GRACE_ENOMEM, "graph: out of host memory");
  for (int k = 0; k < nr; k++) {
    uint64_t low = q[k].base & (~q[k].base + 1);
    q[k].align = low && low < 256 ? low : 256;
  }
  memcpy(gg->rng, q, sizeof *q * (size_t)nr);
  gg->nrng = nr;
  return GRACE_OK;
}

/* Before a replay of graph+node updates: each range's address this call (fb: the fresh outputs), the library
 * nodes re-pointed where it changed; a range whose address is less aligned than the capture's keeps the captured
 * one: an input is copied into its placeholder (now), an output marked to be copied out (after the launch). */
static grace_status point_nodes(cuda_ctx *c, gg_graph *gg, grace_tensor *const *in, CUdeviceptr fb, int *out_via) {
  CUdeviceptr base[512];
  grace_status st = GRACE_OK;
  for (int i = 0; i < gg->nin; i++) gg->in[i].via = 0;
  for (int k = 0; k < gg->nrng && st == GRACE_OK; k++) {
    const gg_rng *q = &gg->rng[k];
    base[k] = q->kind == SRC_INPUT ? gpu_ptr(in[q->index]) : fb + gg->grp[q->index].at;
    out_via[k] = 0;
    if (base[k] % q->align == 0) continue;
    base[k] = q->base;
    if (q->kind == SRC_INPUT) gg->in[q->index].via = 1, st = cuda_copy_device(c, q->base, gpu_ptr(in[q->index]), q->bytes);
    else out_via[k] = 1;
  }
  return st == GRACE_OK ? cuda_graph_updates_apply(c, gg->upd, gg->x, base, NULL) : st;
}

/* Records exec's launches for these inputs into a graph of strategy strat, its cond regions predicated when pred is
 * set (forced: chosen by the user, so a graph+node updates with nothing to update is still made). */
static grace_status capture(grace_ir *ir, gpu_exec_fn exec, grace_launch_strategy strat, int pred, int forced, int nin,
                            grace_tensor *const *in, int nout, gg_graph **out) {
  grace_vm *vm = ir->vm;
  cuda_ctx *c = gpu_ctx(vm);
  *out = NULL;
  if (!c) return vm->status;
  vm_progress(vm, "recording a CUDA graph (%s%s) of %s", gg_strategy_names[strat], pred ? ", regions predicated" : "",
              ir->name);
  if (nin > 256 || nout > 256) return vm_err(vm, GRACE_EUNSUPPORTED, "graph: more than 256 inputs or outputs");
  gg_graph *gg = vm_calloc(vm, sizeof *gg);
  if (!gg) return vm_err(vm, GRACE_ENOMEM, "graph: out of host memory");
  gg->ir = ir;
  gg->strat = strat;
  gg->pred = pred;
  gg->nin = nin;
  gg->nout = nout;
  gg->sig = vm_calloc(vm, sizeof *gg->sig * (size_t)(nin ? nin : 1));
  gg->in = vm_calloc(vm, sizeof *gg->in * (size_t)(nin ? nin : 1));
  gg->out = vm_calloc(vm, sizeof *gg->out * (size_t)(nout ? nout : 1));
  gg->grp = vm_calloc(vm, sizeof *gg->grp * (size_t)(nout ? nout : 1));
  gg->dyn = vm_calloc(vm, sizeof *gg->dyn * (size_t)GG_WORDS);
  grace_tensor *args[256] = {0}, *res[256] = {0};
  grace_status st = gg->sig && gg->in && gg->out && gg->grp && gg->dyn ? GRACE_OK
                    : vm_err(vm, GRACE_ENOMEM, "graph: out of host memory");
  if (st == GRACE_OK) make_sig(nin, in, gg->sig);
  for (int r = 0; r < GG_RING && st == GRACE_OK; r++) {
    if ((st = cuda_host_alloc(c, sizeof(uint64_t) * GG_WORDS, (void **)&gg->host[r])) == GRACE_OK)
      st = cuda_event_new(c, &gg->ev[r]);
  }
  for (int r = 0; r < GG_RING && st == GRACE_OK; r++) st = cuda_event_new(c, &gg->chk_ev[r]);
  /* The table keeps its fixed words from one replay to the next, so it must not be arena memory, which another
   * graph may use as scratch: it is allocated before the capture opens. */
  if (st == GRACE_OK && !(gg->table = vm_tensor_new(vm, "graph", GRACE_INT64, GRACE_CUDA, 1, (int64_t[]){GG_WORDS})))
    st = vm->status;
  if (st == GRACE_OK) st = cuda_capture_open(c, strat == GRACE_LAUNCH_INDIRECT || strat == GRACE_LAUNCH_UPDATE, &gg->cap);
  if (st == GRACE_OK) st = cuda_capture_set_table(c, gg->cap, gpu_ptr(gg->table) + 8 * GG_SCALARS, GG_SLOTS);
  /* placeholders: the inputs' layouts over memory of the graph's own */
  for (int i = 0; i < nin && st == GRACE_OK; i++) {
    grace_tensor *t = in[i];
    if (!t) continue;
    if (t->storage->device == GRACE_CPU && t->ndim == 0) { gg->in[i].host = 1; args[i] = t; grace_tensor_retain(t); continue; }
    if (t->storage->device != GRACE_CUDA) { st = vm_err(vm, GRACE_EUNSUPPORTED, "graph: input %d is a host tensor", i + 1); break; }
    int64_t span = 1;
    for (int d = 0; d < t->ndim; d++) {
      if (t->strides[d] < 0) { st = vm_err(vm, GRACE_EUNSUPPORTED, "graph: input %d has a negative stride", i + 1); break; }
      if (t->sizes[d] > 1) span += (t->sizes[d] - 1) * t->strides[d];
    }
    if (st != GRACE_OK) break;
    /* node updates: the placeholder as aligned as the input, so a library picks kernels the input can take */
    size_t es = grace_dtype_size(t->dtype);
    int64_t pad = strat == GRACE_LAUNCH_UPDATE ? (int64_t)(gpu_ptr(t) % 256 / es) : 0, all = span + pad;
    grace_tensor *ph = vm_tensor_new(vm, "graph", t->dtype, GRACE_CUDA, 1, &all);
    if (!ph) { st = vm->status; break; }
    args[i] = vm_tensor_view(vm, "graph", ph, t->ndim, t->sizes, t->strides, pad);
    grace_tensor_release(ph);
    if (!args[i]) { st = vm->status; break; }
    args[i]->wrapped = t->wrapped;
    gg->in[i].ph = gpu_ptr(args[i]);
    gg->in[i].bytes = (size_t)span * grace_dtype_size(t->dtype);
  }
  CUgraph graph = NULL;
  if (st == GRACE_OK) st = record_writes(ir, gg, in);
  if (st == GRACE_OK) {
    if ((st = cuda_capture_begin(c)) == GRACE_OK) {
      /* nothing runs in a capture: the generator's offset goes back, and each replay advances it as eager would;
       * so do the versions of captured tensors the program writes in place */
      gg->rng0 = vm->rng_offset;
      for (int k = 0; k < gg->nwr; k++)
        if (gg->wr[k].cst >= 0) gg->wr[k].ver = ir->consts[gg->wr[k].cst].t->storage->version;
      vm->graph_cap = gg;
      st = exec(ir, nin, args, nout, res);
      vm->graph_cap = NULL;
      for (int k = 0; k < gg->ncheck; k++) { grace_tensor_release(gg->chk[k].idx); gg->chk[k].idx = NULL; }
      for (int k = 0; k < gg->nwr; k++)
        if (gg->wr[k].cst >= 0)
          ir->consts[gg->wr[k].cst].t->storage->version = ir->consts[gg->wr[k].cst].version = gg->wr[k].ver;
      gg->rng_total = vm->rng_offset - gg->rng0;
      vm->rng_offset = gg->rng0;
    }
  }
  if (gg->cap) st = cuda_capture_close(c, st, &graph);
  gg->g = graph;
  for (int i = 0; i < nin; i++) grace_tensor_release(args[i]);
  /* the outputs: storages the capture made in the arena, each to be made fresh per replay */
  for (int j = 0; j < nout && st == GRACE_OK; j++) {
    const grace_tensor *o = res[j];
    CUdeviceptr base = 0;
    size_t bsize = 0;   /* the whole block: an intermediate that used it earlier in the capture stays in range */
    if (!o || o->storage->device != GRACE_CUDA ||
        !cuda_capture_owns(gg->cap, (CUdeviceptr)(uintptr_t)o->storage->data, &base, &bsize) ||
        base != (CUdeviceptr)(uintptr_t)o->storage->data || o->storage == gg->table->storage) {
      st = vm_err(vm, GRACE_EUNSUPPORTED, "graph: output %d is not a device tensor the program makes", j + 1);
      break;
    }
    for (int i = 0; i < nin && st == GRACE_OK; i++)   /* a view of an input: no fresh memory can stand for it */
      if (!gg->in[i].host && gg->in[i].bytes && base == gg->in[i].ph)
        st = vm_err(vm, GRACE_EUNSUPPORTED, "graph: output %d is a view of input %d", j + 1, i + 1);
    if (st != GRACE_OK) break;
    int g = 0;
    while (g < gg->ngrp && gg->grp[g].base != base) g++;
    if (g == gg->ngrp) {
      gg->grp[gg->ngrp++] = (gg_grp){base, bsize, gg->out_bytes, 0};
      gg->out_bytes += (bsize + 255) / 256 * 256;
    }
    gg_out *d = &gg->out[j];
    d->grp = g; d->dt = o->dtype; d->ndim = o->ndim; d->offset = o->offset;
    for (int k = 0; k < o->ndim; k++) { d->sizes[k] = o->sizes[k]; d->strides[k] = o->strides[k]; }
  }
  for (int j = 0; j < nout; j++) grace_tensor_release(res[j]);
  if (st == GRACE_OK) {
    /* words given to the device directly pin their input or output to its fixed address (a library's too,
     * unless its nodes are re-pointed per replay) */
    size_t nraw, nlib;
    const uint64_t *raw = cuda_capture_raw(gg->cap, &nraw), *lib = cuda_capture_lib(gg->cap, &nlib);
    pin_direct(gg, raw, nraw);
    if (strat != GRACE_LAUNCH_UPDATE) pin_direct(gg, lib, nlib);
    else st = plan_updates(vm, gg, lib, nlib, forced);
    /* table slots pointing into a redirectable input or output are rewritten per replay */
    const uint64_t *sl = cuda_capture_slots(gg->cap, &gg->nslots);   /* becomes the renumbered copy below */
    gg->lo = GG_WORDS;
    gg->hi = 0;
    for (int k = 0; k < gg->nslots; k++) {
      int word = GG_SCALARS + k;
      for (int i = 0; i < nin; i++)
        if (!gg->in[i].host && !gg->in[i].copy && sl[k] >= gg->in[i].ph && sl[k] < gg->in[i].ph + gg->in[i].bytes)
          gg->dyn[gg->ndyn++] = (gg_dyn){word, SRC_INPUT, i, (int64_t)(sl[k] - gg->in[i].ph)};
      for (int g = 0; g < gg->ngrp; g++)
        if (!gg->grp[g].direct && sl[k] >= gg->grp[g].base && sl[k] < gg->grp[g].base + gg->grp[g].bytes)
          gg->dyn[gg->ndyn++] = (gg_dyn){word, SRC_OUTPUT, g, (int64_t)(sl[k] - gg->grp[g].base)};
    }
    /* the per-call slots first: the kernels' slot addresses are renumbered in the graph */
    int *map = vm_alloc(vm, sizeof *map * (size_t)(gg->nslots ? gg->nslots : 1));
    uint64_t *perm = vm_alloc(vm, sizeof *perm * (size_t)(gg->nslots ? gg->nslots : 1));
    if (!map || !perm) st = vm_err(vm, GRACE_ENOMEM, "graph: out of host memory");
    /* kernels inside conditional bodies are not among the graph's own nodes: no renumbering then (the per-call
     * words then span a longer range of the table) */
    if (st == GRACE_OK && gg->ndyn && gg->strat != GRACE_LAUNCH_COPY && !gg->ncond) {
      int next = 0;
      for (int k = 0; k < gg->nslots; k++) map[k] = -1;
      for (int d = 0; d < gg->ndyn; d++) if (map[gg->dyn[d].word - GG_SCALARS] < 0) map[gg->dyn[d].word - GG_SCALARS] = next++;
      for (int k = 0; k < gg->nslots; k++) if (map[k] < 0) map[k] = next++;
      grace_status rs = cuda_graph_remap_slots(c, gg->cap, gg->g, map);
      if (rs == GRACE_OK) {
        for (int d = 0; d < gg->ndyn; d++) gg->dyn[d].word = GG_SCALARS + map[gg->dyn[d].word - GG_SCALARS];
        for (int k = 0; k < gg->nslots; k++) perm[map[k]] = sl[k];
        sl = perm;
      } else if (rs != GRACE_EUNSUPPORTED)
        st = rs;   /* the graph may be half rewritten: not used */
    }
    for (int d = 0; d < gg->ndyn; d++) {
      if (gg->dyn[d].word < gg->lo) gg->lo = gg->dyn[d].word;
      if (gg->dyn[d].word + 1 > gg->hi) gg->hi = gg->dyn[d].word + 1;
    }
    for (int k = 0; k < gg->nsc; k++)
      if (gg->sc[k].kind != SC_FIXED) {
        int w = GG_SCALARS - 1 - k;
        if (w < gg->lo) gg->lo = w;
        if (w + 1 > gg->hi) gg->hi = w + 1;
      }
    if (gg->hi < gg->lo) gg->lo = gg->hi = 0;
    /* every staging buffer starts as the whole table; the device copy is made once now */
    for (int r = 0; r < GG_RING && st == GRACE_OK; r++) {
      memset(gg->host[r], 0, sizeof(uint64_t) * GG_WORDS);
      for (int k = 0; k < gg->nsc; k++) gg->host[r][GG_SCALARS - 1 - k] = gg->sc[k].bits;
      memcpy(gg->host[r] + GG_SCALARS, sl, sizeof(uint64_t) * (size_t)gg->nslots);
    }
    vm_free(vm, map, sizeof *map * (size_t)(gg->nslots ? gg->nslots : 1));
    vm_free(vm, perm, sizeof *perm * (size_t)(gg->nslots ? gg->nslots : 1));
    if (st == GRACE_OK)
      st = cuda_copy_to_device_async(c, gpu_ptr(gg->table), gg->host[0], sizeof(uint64_t) * (size_t)(GG_SCALARS + gg->nslots));
    if (st == GRACE_OK) st = cuda_sync(c);
    if (st == GRACE_OK && gg->ncheck)
      st = cuda_host_alloc(c, sizeof(int64_t) * GG_CHECKS * GG_RING, (void **)&gg->chk_host);
    if (st == GRACE_OK) st = cuda_graph_instantiate(c, gg->g, &gg->x, &gg->nkernels);
    /* placeholders and outputs that every replay redirects are never touched again: their memory goes back */
    for (int i = 0; i < nin && st == GRACE_OK; i++)
      if (!gg->in[i].host && !gg->in[i].copy && gg->in[i].bytes) cuda_capture_drop(c, gg->cap, gg->in[i].ph);
    for (int g = 0; g < gg->ngrp && st == GRACE_OK; g++)
      if (!gg->grp[g].direct) cuda_capture_drop(c, gg->cap, gg->grp[g].base);
    gg->copy_bytes = sizeof(uint64_t) * (size_t)(gg->hi - gg->lo);
    for (int i = 0; i < nin; i++) if (gg->in[i].copy) gg->copy_bytes += gg->in[i].bytes;
    for (int w = 0; w < gg->nwr; w++) if (gg->wr[w].input >= 0 && gg->in[gg->wr[w].input].copy) gg->copy_bytes += gg->in[gg->wr[w].input].bytes;
    for (int g = 0; g < gg->ngrp; g++) if (gg->grp[g].direct) gg->copy_bytes += gg->grp[g].bytes;
  }
  if (st != GRACE_OK) {
    char msg[VM_ERRLEN];
    snprintf(msg, sizeof msg, "%s", vm->err);
    graph_free(vm, gg);
    return vm_err(vm, st, "%s", msg);
  }
  *out = gg;
  return GRACE_OK;
}

/* One call through graph gg: fresh outputs, the table's per-call words, one copy, one launch. */
static grace_status replay(grace_ir *ir, gg_graph *gg, grace_tensor *const *in, int nout, grace_tensor **out) {
  grace_vm *vm = ir->vm;
  cuda_ctx *c = gpu_ctx(vm);
  grace_status st = GRACE_OK;
  double t0 = now_us();
  int r = gg->ring;
  gg->ring = (r + 1) % GG_RING;
  if (gg->evused[r] && (st = cuda_event_sync(c, gg->ev[r])) != GRACE_OK) return st;
  if (gg->chk_pend[r]) {   /* the flags of the call GG_RING replays ago: waited for, as their row is reused */
    if ((st = cuda_event_sync(c, gg->chk_ev[r])) != GRACE_OK || (st = check_row(vm, gg, r)) != GRACE_OK) return st;
  }
  uint64_t *h = gg->host[r];
  /* the outputs: one allocation (one allocator call per replay); the caller's views keep it alive */
  grace_tensor *fresh = vm_tensor_new(vm, "graph", GRACE_BOOL, GRACE_CUDA, 1, (int64_t[]){(int64_t)gg->out_bytes});
  if (!fresh) return vm->status;
  CUdeviceptr fb = gpu_ptr(fresh);
  for (int d = 0; d < gg->ndyn; d++) {
    const gg_dyn *y = &gg->dyn[d];
    h[y->word] = y->kind == SRC_INPUT ? gpu_ptr(in[y->index]) + (uint64_t)y->delta
                 : y->kind == SRC_OUTPUT ? fb + gg->grp[y->index].at + (uint64_t)y->delta
                 : y->kind == SRC_SEED ? vm->seed : vm->rng_offset + (uint64_t)y->delta;
  }
  for (int k = 0; k < gg->nsc && st == GRACE_OK; k++)
    if (gg->sc[k].kind != SC_FIXED) st = scalar_word(ir, &gg->sc[k], in, &h[GG_SCALARS - 1 - k]);
  for (int i = 0; i < gg->nin && st == GRACE_OK; i++)
    if (gg->in[i].copy) st = cuda_copy_device(c, gg->in[i].ph, gpu_ptr(in[i]), gg->in[i].bytes);
  int out_via[512] = {0};
  if (st == GRACE_OK && gg->upd) st = point_nodes(c, gg, in, fb, out_via);
  if (st == GRACE_OK && gg->hi > gg->lo) {
    st = cuda_copy_to_device_async(c, gpu_ptr(gg->table) + 8u * (unsigned)gg->lo, h + gg->lo,
                                   sizeof(uint64_t) * (size_t)(gg->hi - gg->lo));
    if (st == GRACE_OK && (st = cuda_event_record(c, gg->ev[r])) == GRACE_OK) gg->evused[r] = 1;
  }
  for (int k = 0; k < gg->ncheck && st == GRACE_OK; k++)
    if (gg->chk[k].reset) st = cuda_memset(c, gg->chk[k].flag, 0x7f, sizeof(int64_t));
  if (st == GRACE_OK && (st = cuda_graph_launch(c, gg->x)) == GRACE_OK) vm->rng_offset += gg->rng_total;
  double dt = now_us() - t0;
  gg->replay_us_sum += dt;
  if (!gg->nreplay++ || dt < gg->replay_us_min) gg->replay_us_min = dt;
  for (int g = 0; g < gg->ngrp && st == GRACE_OK; g++)
    if (gg->grp[g].direct) st = cuda_copy_device(c, fb + gg->grp[g].at, gg->grp[g].base, gg->grp[g].bytes);
  for (int k = 0; k < gg->nrng && st == GRACE_OK; k++)
    if (out_via[k]) st = cuda_copy_device(c, fb + gg->grp[gg->rng[k].index].at, gg->rng[k].base, gg->rng[k].bytes);
  if (st == GRACE_OK) st = finish_writes(ir, gg, in);
  /* index checks: their flags come back without a wait; the next wait for the device looks at them */
  for (int k = 0; k < gg->ncheck && st == GRACE_OK; k++)
    st = cuda_copy_to_host_async(c, &gg->chk_host[(size_t)r * GG_CHECKS + k], gg->chk[k].flag, sizeof(int64_t));
  if (st == GRACE_OK && gg->ncheck && (st = cuda_event_record(c, gg->chk_ev[r])) == GRACE_OK) {
    gg->chk_pend[r] = 1;
    vm->after_sync = after_sync;
    if (!gg->on_pending) { gg->pend_next = vm->graph_pending; vm->graph_pending = gg; gg->on_pending = 1; }
  }
  for (int j = 0; j < nout; j++) out[j] = NULL;
  for (int j = 0; j < nout && st == GRACE_OK; j++) {
    const gg_out *o = &gg->out[j];
    out[j] = vm_tensor_view(vm, "graph", fresh, o->ndim, o->sizes, o->strides, 0);
    if (!out[j]) { st = vm->status; break; }
    out[j]->dtype = o->dt;
    out[j]->offset = (int64_t)(gg->grp[o->grp].at / grace_dtype_size(o->dt)) + o->offset;
  }
  if (st != GRACE_OK)
    for (int j = 0; j < nout; j++) { grace_tensor_release(out[j]); out[j] = NULL; }
  grace_tensor_release(fresh);
  return st;
}

/* ---- per program ---- */

/* -1 auto, -2 off, a strategy, or -3 for a name that is none of these */
static int parse_mode(const char *e) {
  if (!e || !*e || !strcmp(e, "auto")) return -1;
  if (!strcmp(e, "off") || !strcmp(e, "0")) return -2;
  for (int s = 0; s < GRACE_LAUNCH_NSTRATEGIES; s++)
    if (!strcmp(e, gg_strategy_names[s]) || (s == GRACE_LAUNCH_COPY && !strcmp(e, "copy")) ||
        (s == GRACE_LAUNCH_INDIRECT && !strcmp(e, "indirect")) || (s == GRACE_LAUNCH_UPDATE && !strcmp(e, "update")))
      return s;
  return -3;
}

grace_status grace_set_graphs(grace_vm *vm, const char *mode) {
  if (!vm) return GRACE_EARG;
  if (!mode) { vm->launch_mode = 0; return GRACE_OK; }
  int m = parse_mode(mode);
  if (m == -3)
    return vm_err(vm, GRACE_EARG, "graphs: unknown mode '%s' (auto, off, eager, copy, indirect or update)", mode);
  vm->launch_mode = m + 3;
  return GRACE_OK;
}

static int vm_mode(grace_vm *vm) {
  if (vm->launch_mode) return vm->launch_mode - 3;
  int m = parse_mode(getenv("GRACE_GRAPHS"));
  return m == -3 ? -1 : m;
}

void gpu_part_free(grace_vm *vm, gpu_part *p) {
  if (!p) return;
  vm_free(vm, p->warm, sizeof *p->warm * (size_t)(p->nwarm ? p->nwarm : 1));
  for (int i = 0; i < p->ngr; i++) graph_free(vm, p->gr[i]);
  vm_free(vm, p, sizeof *p);
}

void gg_drop_graphs(grace_vm *vm, gpu_part *p, int keep) {
  int k = 0;
  for (int i = 0; i < p->ngr; i++)
    if (p->gr[i]->strat == gg_strat(keep) && p->gr[i]->pred == gg_pred(keep)) p->gr[k++] = p->gr[i];
    else graph_free(vm, p->gr[i]);
  p->ngr = k;
}

/* The layout of in ran eagerly (its kernels compiled, its matmuls tuned): its next call of a graph strategy records. */
static void warmed(grace_vm *vm, gpu_part *p, int nin, grace_tensor *const *in) {
  vm_free(vm, p->warm, sizeof *p->warm * (size_t)(p->nwarm ? p->nwarm : 1));
  p->nwarm = nin;
  p->warm = vm_alloc(vm, sizeof *p->warm * (size_t)(nin ? nin : 1));
  if (p->warm) make_sig(nin, in, p->warm);
}

/* The graph of candidate s for these inputs: found, or recorded now (*fresh set). */
static grace_status find_graph(grace_ir *ir, gpu_part *p, gpu_exec_fn exec, int s, int nin, grace_tensor *const *in,
                               int nout, gg_graph **out, int *fresh) {
  *fresh = 0;
  for (int i = 0; i < p->ngr; i++)
    if (p->gr[i]->strat == gg_strat(s) && p->gr[i]->pred == gg_pred(s) && sig_matches(p->gr[i], nin, in)) { *out = p->gr[i]; p->gr[i]->used = ++p->tick; return GRACE_OK; }
  /* a layout not run before runs eagerly once (its kernels compiled and matmuls tuned outside any capture) */
  gg_graph probe = {.nin = p->nwarm, .sig = p->warm};
  if (!p->warm || !sig_matches(&probe, nin, in)) {
    warmed(ir->vm, p, nin, in);
    *out = NULL;
    return GRACE_OK;
  }
  gg_graph *gg = NULL;
  grace_status st = capture(ir, exec, gg_strat(s), gg_pred(s), p->mode >= 0, nin, in, nout, &gg);
  if (st != GRACE_OK) return st;
  p->captures++;
  if (p->ngr >= p->limit) {   /* the least recently used goes */
    int lru = 0;
    for (int i = 1; i < p->ngr; i++) if (p->gr[i]->used < p->gr[lru]->used) lru = i;
    graph_free(ir->vm, p->gr[lru]);
    p->gr[lru] = p->gr[--p->ngr];
  }
  gg->used = ++p->tick;
  p->gr[p->ngr++] = gg;
  *out = gg;
  *fresh = 1;
  return GRACE_OK;
}

/* The candidates the program's regions leave out, and why (a program without regions leaves out the predicated
 * ones); a forced strategy is decided now, its regions as conditional nodes where they can be, else predicated. */
static void part_lowerings(grace_ir *ir, gpu_part *p) {
  char lw[3][160];
  p->regions = gpu_ir_lowerings(ir, lw);
  for (int k = 0; k < GG_NCAND; k++) {
    const char *w = gg_pred(k) ? (p->regions ? lw[GRACE_REGION_PRED] : "no cond region to predicate")
                    : !p->regions ? "" : k == GRACE_LAUNCH_EAGER ? lw[GRACE_REGION_HOST] : lw[GRACE_REGION_NODES];
    if (w[0]) snprintf(p->why[k], sizeof p->why[k], "%.159s", w);
  }
  if (p->mode < 0) return;
  p->decided = 1;   /* forced: nothing to measure */
  p->chosen = p->mode;
  int pk = p->mode + GRACE_LAUNCH_NSTRATEGIES - 1;
  if (p->mode != GRACE_LAUNCH_EAGER && p->why[p->mode][0] && !p->why[pk][0]) p->chosen = pk;
}

grace_status gpu_graph_call(grace_ir *ir, gpu_part **pp, gpu_share *share, gpu_exec_fn exec, int nin,
                            grace_tensor *const *in, int nout, grace_tensor **out) {
  grace_vm *vm = ir->vm;
  gpu_part *p = *pp;
  if (!p) {
    if (!(p = vm_calloc(vm, sizeof *p))) return vm_err(vm, GRACE_ENOMEM, "run: out of host memory");
    p->mode = vm_mode(vm);
    const char *l = getenv("GRACE_GRAPH_LIMIT");
    p->limit = l && atoi(l) > 0 ? atoi(l) : 8;
    if (p->limit > GG_MAX_LIMIT) p->limit = GG_MAX_LIMIT;
    ir_graph_eligibility(ir, p->inel, sizeof p->inel);
    if (p->mode == -2) snprintf(p->inel, sizeof p->inel, "graphs are off (GRACE_GRAPHS or grace.graphs)");
    cuda_ctx *c = gpu_ctx(vm);
    if (!p->inel[0] && c && !cuda_graph_supported(c)) snprintf(p->inel, sizeof p->inel, "the driver lacks CUDA graphs");
    part_lowerings(ir, p);
    p->share = share;
    gg_choice_init(ir, p);
    *pp = p;
  }
  p->calls++;
  if (p->calls == 1) vm->graph_unsteady++;   /* its kernels compile now */
  if (p->calls == 1 && !p->inel[0] && !vm->graph_cap && p->mode == -1 && !p->from_cache) {
    /* the first call, eager: a program that calls no vendor library has nothing for node updates to re-point */
    uint64_t lib0 = cuda_library_calls(vm->cuda);
    grace_status st = exec(ir, nin, in, nout, out);
    for (int k = GRACE_LAUNCH_UPDATE; k < GG_NCAND && st == GRACE_OK && cuda_library_calls(vm->cuda) == lib0; k++)
      if (gg_strat(k) == GRACE_LAUNCH_UPDATE && !p->why[k][0])
        snprintf(p->why[k], sizeof p->why[k], "no library kernel in the program (graph+indirection is the same graph)");
    /* a specialisation whose siblings decided takes their decision: its next call records the graph */
    if (st == GRACE_OK && (gg_choice_inherit(ir, p), p->inherited)) warmed(vm, p, nin, in);
    return st;
  }
  if (p->inel[0] || vm->graph_cap || p->calls == 1) return exec(ir, nin, in, nout, out);
  /* inside another program's timed call (a branch of its region, run by its host branch): no measuring here, whose
   * synchronisations and captures would be timed as that program's */
  int s = vm->graph_timing ? -1 : gg_choice_next(ir, p), measure = s >= 0;
  if (!measure) s = p->decided ? p->chosen : GRACE_LAUNCH_EAGER;
  else {
    p->measure_calls++;
    char nm[64];
    vm_progress(vm, "measuring %s for %s (call %d of %d)", gg_cand_name(s, nm, sizeof nm), ir->name, p->samples[s] + 1,
                p->target);
  }
  cuda_ctx *c = gpu_ctx(vm);
  if (!c) return vm->status;
  double t0 = 0;
  uint64_t unsteady = vm->graph_unsteady;
  grace_status st = GRACE_OK;
  if (measure) {   /* the whole call, the device idle before it and done after it (gpu_graph_choice.c says why) */
    if ((st = cuda_sync(c)) != GRACE_OK) return st;
    t0 = cuda_clock(c);
    vm->graph_timing++;
  }
  int fresh = 0;
  if (gg_strat(s) == GRACE_LAUNCH_EAGER) st = exec(ir, nin, in, nout, out);
  else {
    gg_graph *gg = NULL;
    st = find_graph(ir, p, exec, s, nin, in, nout, &gg, &fresh);
    if (st == GRACE_OK && !gg) { fresh = 1; st = exec(ir, nin, in, nout, out); }   /* a new layout's first run */
    else if (st == GRACE_OK) st = replay(ir, gg, in, nout, out);
    else {   /* this strategy cannot run here: said in the report; this call eager, and the next once decided (an
              * inherited decision: the next ones measure) */
      snprintf(p->why[s], sizeof p->why[s], "%.159s", vm->err);
      if (gg_pred(s) && !p->pred_fail[0]) snprintf(p->pred_fail, sizeof p->pred_fail, "%.159s", vm->err);
      if (p->decided && s == p->chosen && !gg_choice_refused(ir, p, s)) p->chosen = GRACE_LAUNCH_EAGER;
      st = exec(ir, nin, in, nout, out);
    }
  }
  if (measure) vm->graph_timing--;
  if (fresh) vm->graph_unsteady++;
  /* untimed: a refused candidate, a new layout's eager run, a capture (and the graph's upload), or a call during
   * which a program it ran compiled or captured */
  double us = -1;
  if (measure && st == GRACE_OK && (st = cuda_sync(c)) == GRACE_OK && !fresh && !p->why[s][0] &&
      vm->graph_unsteady == unsteady)
    us = (cuda_clock(c) - t0) * 1e6;
  if (measure) gg_choice_after(ir, p, s, us);
  return st;
}
