/* vm_replay.c: replaying a function with graph breaks (DESIGN: "replay mode"). Its Lua code runs on every
 * call; each op it calls is matched against the paths recorded for it and deferred, its results standing
 * as pending tensors; a host read (the break) or the end of the call runs what was deferred, in order.
 * Different outcomes at a break lead to different op sequences: the recorded paths form a tree by their
 * shared prefixes, and a call that leaves every path is recorded from that point as a new one. What was deferred
 * runs as its partition's program (vm_part.c: passes, fusion, kernels, a CUDA graph where that pays); without the
 * function's partitions (grace_replay_begin), or where a call leaves the paths, op by op. */
#include <stdio.h>
#include "vm/vm_trace.h"

int vm_trace_replaying(const grace_vm *vm) { return vm->trace && vm->trace->replay; }

static double now_ns(void) { return grace_clock() * 1e9; }

static grace_ir *lead(vm_trace *tr) { return tr->paths[tr->lead]; }

grace_status grace_replay_begin(grace_vm *vm, grace_ir *const *paths, int npaths, grace_where_fn where, void *ud) {
  return vm_replay_begin(vm, paths, npaths, where, ud, NULL);
}

grace_status vm_replay_begin(grace_vm *vm, grace_ir *const *paths, int npaths, grace_where_fn where, void *ud,
                             vm_parts *parts) {
  if (!vm) return GRACE_EARG;
  if (!paths) return vm_err(vm, GRACE_EARG, "replay: no paths");
  for (int i = 0; i < npaths && i < 64; i++)
    if (!paths[i]) return vm_err(vm, GRACE_EARG, "replay: path %d is NULL", i);
  if (npaths < 1 || npaths > 64) return vm_err(vm, GRACE_EARG, "replay: %d paths (1 to 64 are possible)", npaths);
  grace_status st = vm_trace_begin(vm, NULL, where, ud);
  if (st != GRACE_OK) return st;
  vm_trace *tr = vm->trace;
  tr->replay = 1;
  tr->parts = parts;
  tr->paths = paths;
  tr->npaths = npaths;
  tr->alive = npaths == 64 ? ~0ull : (1ull << npaths) - 1;
  int nval = 0;
  for (int p = 0; p < npaths; p++) nval = paths[p]->nval > nval ? paths[p]->nval : nval;
  tr->val = vm_calloc(vm, sizeof *tr->val * (size_t)(nval ? nval : 1));
  if (!tr->val) { tr_free(vm); return vm_err(vm, GRACE_ENOMEM, "replay: out of host memory"); }
  tr->nval = nval;
  return GRACE_OK;
}

grace_status vm_replay_input(grace_vm *vm, grace_tensor *t, int scalar, grace_value *out) {
  vm_trace *tr = vm->trace;
  grace_ir *ir = lead(tr);
  /* inputs are declared first, so they open every path in declaration order */
  const ir_inst *k = tr->cursor < ir->ninst ? &ir->insts[tr->cursor] : NULL;
  if (!k || k->op != (scalar ? IR_OP_SCALAR : IR_OP_INPUT))
    return vm_err(vm, GRACE_EARG, "replay: the paths do not take this many inputs");
  const ir_type *ty = &ir->vals[k->first_result].type;
  int same = ty->dtype == t->dtype && ty->ndim == t->ndim;
  for (int d = 0; same && d < t->ndim; d++) same = ty->sizes[d] == t->sizes[d];
  if (!same) return vm_err(vm, GRACE_EARG, "replay: input %d does not have the recorded type", k->input_index + vm->index_base);
  *out = k->first_result;
  tr->val[*out] = t;
  tr->cursor++;
  return tr_map_put(vm, t, *out);
}

/* Same dtype, shape and contents: a constant the function makes from host data on every call. */
static int same_contents(const grace_tensor *a, const grace_tensor *b) {
  if (!a || a->dtype != b->dtype || a->ndim != b->ndim || b->pending) return 0;
  for (int d = 0; d < a->ndim; d++) if (a->sizes[d] != b->sizes[d]) return 0;
  if (!vm_is_contiguous(a) || !vm_is_contiguous(b)) return 0;
  return !memcmp(vm_ptr(a), vm_ptr(b), (size_t)vm_numel(a->ndim, a->sizes) * grace_dtype_size(a->dtype));
}

/* Does path p, from instruction c, make this call? Gives the values of the inputs and the op's index. */
static int match(vm_trace *tr, grace_ir *p, int c, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                 int nres, grace_value *vals, int *at) {
  for (int i = 0; i < nin; i++) {
    grace_tensor *t = in[i];
    if (!t) { vals[i] = -1; continue; }
    trace_slot *s = tr->used ? tr_find(tr, t) : NULL;
    if (s && s->t) { vals[i] = s->v; continue; }
    if (c >= p->ninst) return 0;
    const ir_inst *k = &p->insts[c];
    if (k->op == IR_OP_CONST) {
      const ir_const *ct = &p->consts[k->input_index];
      if (ct->t != t && !(ct->local && same_contents(ct->t, t))) return 0;
    } else if (k->op == IR_OP_LITERAL) {
      const ir_type *ty = &p->vals[k->first_result].type;
      if (!t->wrapped || t->dtype != ty->dtype) return 0;
      if (t->dtype == GRACE_INT64 ? *(const int64_t *)vm_ptr(t) != k->iliteral : vm_load_f64(t->dtype, vm_ptr(t)) != k->literal)
        return 0;
    } else
      return 0;
    vals[i] = k->first_result;
    c++;
  }
  if (c >= p->ninst) return 0;
  const ir_inst *k = &p->insts[c];
  if (k->op != (int)op || k->nin != nin || k->nout != nres || !ir_attrs_equal(&k->attrs, a)) return 0;
  for (int i = 0; i < nin; i++) if (p->args[k->first_arg + i] != vals[i]) return 0;
  *at = c;
  return 1;
}

/* A tensor of the recorded type whose value comes at the next flush. */
static grace_tensor *shell(grace_vm *vm, const ir_type *ty) {
  vm_storage *s = vm_calloc(vm, sizeof *s);
  grace_tensor *t = vm_calloc(vm, sizeof *t);
  if (!s || !t) { vm_free(vm, s, sizeof *s); vm_free(vm, t, sizeof *t); return NULL; }
  s->refcount = 1;
  s->device = ty->device;
  t->refcount = 1; t->vm = vm; t->storage = s; t->dtype = ty->dtype; t->ndim = ty->ndim; t->pending = 1;
  for (int d = 0; d < ty->ndim; d++) t->sizes[d] = ty->sizes[d];
  vm_contiguous_strides(t->ndim, t->sizes, t->strides);
  return t;
}

/* The shell takes the computed tensor's storage and layout. */
void vm_replay_become(grace_tensor *shell, grace_tensor *r) {
  vm_storage *old = shell->storage;
  r->storage->refcount++;
  shell->storage = r->storage;
  shell->offset = r->offset;
  memcpy(shell->strides, r->strides, sizeof shell->strides);
  shell->pending = 0;
  if (shell->lazy) vm_lazy_drop(shell);
  if (--old->refcount == 0) { vm_free(shell->vm, old->data, old->nbytes); vm_free(shell->vm, old, sizeof *old); }
}

/* Leaves the recorded paths: everything deferred runs, and the call is recorded from here on as a new path
 * whose prefix is the one matched so far. */
grace_status vm_replay_diverge(grace_vm *vm) {
  vm_trace *tr = vm->trace;
  int n = tr->npending;
  tr->npending = 0;   /* a prefix ending here is no partition: op by op */
  grace_status st = vm_replay_run_ops(vm, tr->pending, n);
  if (st != GRACE_OK) return st;
  grace_ir *src = lead(tr), *ir = grace_ir_new(vm, src->name);
  if (!ir) return vm->status;
  for (int i = 0; i < tr->cursor && st == GRACE_OK; i++) {
    const ir_inst *k = &src->insts[i];
    ir_type types[4];
    for (int r = 0; r < k->nout && r < 4; r++) types[r] = src->vals[k->first_result + r].type;
    grace_ir_set_location(ir, k->loc >= 0 ? src->locs[k->loc] : NULL);
    if (k->op == IR_OP_CONST) {   /* captured again in the same order, so its index is the same */
      grace_value v;
      const ir_const *c = &src->consts[k->input_index];
      if ((st = grace_ir_const(ir, c->t, &v)) != GRACE_OK) break;
      ir->consts[ir->nconst - 1].version = c->version;
      ir->consts[ir->nconst - 1].local = c->local;
    } else {
      if (ir_append(ir, k->op, k->nin, &src->args[k->first_arg], &k->attrs, k->nout, types) < 0) { st = GRACE_ENOMEM; break; }
      ir_inst *n = &ir->insts[ir->ninst - 1];
      n->literal = k->literal; n->iliteral = k->iliteral; n->input_index = k->input_index;
      if (k->op == IR_OP_INPUT) ir->ninputs++;
      else if (k->op == IR_OP_SCALAR) ir->nscalars++;
    }
    for (int b = 0; b < src->nbreak; b++)
      if (src->breaks[b].after == i && st == GRACE_OK) {
        grace_ir_set_location(ir, src->breaks[b].loc >= 0 ? src->locs[src->breaks[b].loc] : NULL);
        st = ir_add_break(ir);
        if (st == GRACE_OK) st = vm_auto_copy_break(vm, ir, b);
      }
    if (st == GRACE_OK && (k->op == IR_OP_INPUT || k->op == IR_OP_CONST))
      st = tr_set_root(vm, k->first_result, k->first_result);
    /* a prefix value that is an in-place update of an input or capture stays one, with its count of writes: else a
       write the new path makes after it would not count as one to that tensor, and the path would record no write
       back of it (a merge of the paths into a cond region reads the paths' writes) */
    for (int r = 0; r < k->nout && st == GRACE_OK; r++) {
      const ir_value *sv = &src->vals[k->first_result + r];
      if (sv->root < 0 || k->op == IR_OP_INPUT || k->op == IR_OP_CONST) continue;
      ir->vals[k->first_result + r].root = sv->root;
      ir->vals[k->first_result + r].nwrites = sv->nwrites;
      st = tr_set_root(vm, k->first_result + r, sv->root);
      if (st == GRACE_OK && sv->nwrites > tr->bumps[sv->root]) tr->bumps[sv->root] = sv->nwrites;
    }
  }
  if (st != GRACE_OK) { grace_ir_free(ir); return st; }
  tr->ir = ir;
  tr->owns_ir = 1;
  tr->replay = 0;
  return GRACE_OK;
}

grace_status vm_replay_op(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout,
                          grace_tensor **out, int *handled) {
  vm_trace *tr = vm->trace;
  double t0 = now_ns();
  int inplace = grace_op_kind(op) == GRACE_KIND_INPLACE, nres = inplace ? 1 : nout, at = -1, best = -1;
  grace_value vals[64], bvals[64];
  uint64_t alive = 0;
  if (tr->ahead_on && (tr->ahead_forced || nin > 64)) {   /* the side recorded ahead was to return at once */
    *handled = 1;
    return vm_err(vm, GRACE_EUNSUPPORTED, "recording a branch's other outcome ahead: %s runs after the branch",
                  grace_op_name(op));
  }
  if (nin > 64) return vm_replay_diverge(vm);
  for (int p = 0; p < tr->npaths; p++) {
    if (!(tr->alive >> p & 1)) continue;
    int c;
    if (match(tr, tr->paths[p], tr->cursor, op, nin, in, a, nres, vals, &c)) {
      if (best < 0) { best = p; at = c; memcpy(bvals, vals, sizeof(grace_value) * (size_t)nin); }
      if (c == at) alive |= 1ull << p;
    }
  }
  if (tr->ahead_on && (best < 0 || at > tr->ahead_after)) {   /* the same inputs and Lua code cannot; if they did,
                                                                  nothing may run that the real call ran */
    *handled = 1;
    return vm_err(vm, GRACE_EUNSUPPORTED, "recording a branch's other outcome ahead: %s leaves the recorded path "
                  "or passes the branch unforced", grace_op_name(op));
  }
  if (best < 0) {   /* no recorded path makes this call */
    *handled = 0;
    return vm_replay_diverge(vm);
  }
  grace_status st = GRACE_OK;
  tr->alive = alive;
  tr->lead = best;
  grace_ir *p = lead(tr);
  /* constants and numbers met for the first time stand for their values from now on */
  for (int i = 0; i < nin && st == GRACE_OK; i++) {
    if (!in[i] || bvals[i] < 0 || tr->val[bvals[i]]) continue;
    tr->val[bvals[i]] = in[i];
    st = tr_map_put(vm, in[i], bvals[i]);
  }
  const ir_inst *k = &p->insts[at];
  if (st == GRACE_OK && inplace) {
    tr->val[k->first_result] = in[0];   /* runs in place at the flush; the tensor holds the new value */
    st = tr_map_put(vm, in[0], k->first_result);
  } else
    for (int r = 0; r < nout && st == GRACE_OK; r++) {
      grace_tensor *s = shell(vm, &p->vals[k->first_result + r].type);
      if (!s) { st = vm_err(vm, GRACE_ENOMEM, "replay: out of host memory"); break; }
      tr->val[k->first_result + r] = s;
      st = tr_map_put(vm, s, k->first_result + r);   /* the map's reference */
      out[r] = s;                                     /* the caller's */
    }
  if (st == GRACE_OK && tr->npending == tr->cap_pending) {
    int nc = tr->cap_pending ? tr->cap_pending * 2 : 64;
    int32_t *np = vm->alloc(vm->alloc_ud, tr->pending, sizeof *np * (size_t)tr->cap_pending, sizeof *np * (size_t)nc, VM_ALIGN);
    if (!np) st = vm_err(vm, GRACE_ENOMEM, "replay: out of host memory");
    else { tr->pending = np; tr->cap_pending = nc; }
  }
  if (st == GRACE_OK) tr->pending[tr->npending++] = at;
  tr->cursor = at + 1;
  tr->replayed_ops++;
  tr->replay_ns += now_ns() - t0;
  *handled = 1;
  return st;
}

grace_status vm_replay_flush(grace_vm *vm) {
  vm_trace *tr = vm->trace;
  if (!tr || !tr->npending) return GRACE_OK;
  int n = tr->npending;
  tr->npending = 0;
  return tr->parts ? vm_part_flush(vm, tr->pending, n) : vm_replay_run_ops(vm, tr->pending, n);
}

grace_status vm_replay_run_ops(grace_vm *vm, const int32_t *list, int n) {
  vm_trace *tr = vm->trace;
  grace_ir *p = lead(tr);
  tr->paused++;   /* grace_run executes for real below */
  int was = tr->replay;
  tr->replay = 0;
  grace_status st = GRACE_OK;
  for (int j = 0; j < n && st == GRACE_OK; j++) {
    const ir_inst *k = &p->insts[list[j]];
    grace_tensor *args[64], *res[4] = {0};
    for (int i = 0; i < k->nin; i++) {
      int32_t v = p->args[k->first_arg + i];
      args[i] = v < 0 ? NULL : tr->val[v];
    }
    if (grace_op_kind((grace_op)k->op) == GRACE_KIND_INPLACE) {
      st = grace_run(vm, (grace_op)k->op, k->nin, args, &k->attrs, 0, NULL);
      continue;
    }
    st = grace_run(vm, (grace_op)k->op, k->nin, args, &k->attrs, k->nout, res);
    for (int r = 0; r < k->nout && st == GRACE_OK; r++) {
      grace_tensor *s = tr->val[k->first_result + r];
      if (res[r]->dtype != s->dtype || res[r]->ndim != s->ndim || memcmp(res[r]->sizes, s->sizes, sizeof(int64_t) * (size_t)s->ndim))
        st = vm_err(vm, GRACE_EINTERNAL, "replay: %s computed %s, recorded %s", grace_op_name((grace_op)k->op), VM_SHAPE(res[r]), VM_SHAPE(s));
      else vm_replay_become(s, res[r]);
    }
    for (int r = 0; r < k->nout; r++) grace_tensor_release(res[r]);
    if (st != GRACE_OK && k->loc >= 0) {
      char msg[VM_ERRLEN];
      snprintf(msg, sizeof msg, "%s", vm->err);
      vm_err(vm, st, "%s (deferred from %s)", msg, p->locs[k->loc]);
    }
  }
  tr->replay = was;
  tr->paused--;
  return st;
}

grace_status grace_replay_end(grace_vm *vm, grace_ir **recorded) {
  if (!vm) return GRACE_EARG;
  if (!recorded) return vm_err(vm, GRACE_EARG, "replay: a NULL argument");
  vm_trace *tr = vm->trace;
  *recorded = NULL;
  if (!tr || !(tr->replay || tr->owns_ir)) return vm_err(vm, GRACE_EARG, "replay: no active replay");
  grace_status st = tr->replay ? vm_replay_flush(vm) : GRACE_OK;
  if (tr->replay) {   /* the call stayed on a path */
    tr_free(vm);
    return st;
  }
  grace_ir *ir = tr->ir;
  tr->owns_ir = 0;    /* grace_trace_end frees the trace, not the new path */
  grace_status te = grace_trace_end(vm);
  if (st == GRACE_OK && te == GRACE_OK) *recorded = ir;
  else grace_ir_free(ir);
  return st != GRACE_OK ? st : te;
}
