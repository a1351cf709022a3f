/* vm_trace.c: recording IR by running: while a trace is active, grace_run appends each op it executes to
 * the trace's IR. Tensors map to IR values (the trace holds a reference to each mapped tensor, so a
 * pointer is never reused while the map lives). In-place ops are made functional: the written tensor maps
 * to a new value, and inputs or captures that changed are written back at the end. What the IR cannot
 * express is recorded as a problem with its location, so the host can explain it and run eagerly. */
#include <stdio.h>
#include "vm/vm_trace.h"
#include "ir/ir_sym.h"

static size_t hash_ptr(const void *p, int n) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33;
  return (size_t)(x & (uint64_t)(n - 1));
}

trace_slot *tr_find(vm_trace *tr, const grace_tensor *t) {
  size_t i = hash_ptr(t, tr->nslots);
  while (tr->slots[i].t && tr->slots[i].t != t) i = (i + 1) & (size_t)(tr->nslots - 1);
  return &tr->slots[i];
}

grace_status tr_problem(grace_vm *vm, const char *fmt, ...) {
  vm_trace *tr = vm->trace;
  char msg[512], loc[256] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (tr->where) tr->where(tr->where_ud, loc, sizeof loc);
  size_t need = strlen(msg) + strlen(loc) + 8;
  if (tr->plen + need >= tr->pcap) {
    size_t nc = tr->pcap ? tr->pcap * 2 : 1024;
    while (nc < tr->plen + need + 1) nc *= 2;
    char *p = vm->alloc(vm->alloc_ud, tr->problems, tr->pcap, nc, VM_ALIGN);
    if (!p) return GRACE_ENOMEM;
    tr->problems = p;
    tr->pcap = nc;
  }
  tr->plen += (size_t)snprintf(tr->problems + tr->plen, tr->pcap - tr->plen, "%s%s%s\n", loc, *loc ? ": " : "", msg);
  tr->nproblems++;
  return GRACE_OK;
}

grace_status tr_map_put(grace_vm *vm, grace_tensor *t, grace_value v) {
  vm_trace *tr = vm->trace;
  if ((tr->used + 1) * 2 > tr->nslots) {
    int n = tr->nslots ? tr->nslots * 2 : 256;
    trace_slot *s = vm_calloc(vm, sizeof *s * (size_t)n), *old = tr->slots;
    if (!s) return vm_err(vm, GRACE_ENOMEM, "trace: out of host memory");
    int on = tr->nslots;
    tr->slots = s;
    tr->nslots = n;
    for (int i = 0; i < on; i++) if (old[i].t) *tr_find(tr, old[i].t) = old[i];
    vm_free(vm, old, sizeof *old * (size_t)on);
  }
  trace_slot *s = tr_find(tr, t);
  if (!s->t) { grace_tensor_retain(t); s->t = t; s->parent = NULL; tr->used++; }
  s->v = v;
  return GRACE_OK;
}

/* root[v]: for values that are (updated versions of) an input or a capture, that input's value */
grace_status tr_set_root(grace_vm *vm, grace_value v, grace_value root) {
  vm_trace *tr = vm->trace;
  if (v >= tr->nroot) {
    int n = tr->nroot ? tr->nroot : 64;
    while (n <= v) n *= 2;
    /* both arrays are sized by nroot: grow them as one, so a failure of either leaves both as they were */
    grace_value *r = vm->alloc(vm->alloc_ud, NULL, 0, sizeof *r * (size_t)n, VM_ALIGN);
    int *b = r ? vm->alloc(vm->alloc_ud, NULL, 0, sizeof *b * (size_t)n, VM_ALIGN) : NULL;
    if (!b) {
      vm_free(vm, r, sizeof *r * (size_t)n);
      return vm_err(vm, GRACE_ENOMEM, "trace: out of host memory");
    }
    if (tr->nroot) {
      memcpy(r, tr->root, sizeof *r * (size_t)tr->nroot);
      memcpy(b, tr->bumps, sizeof *b * (size_t)tr->nroot);
    }
    vm_free(vm, tr->root, sizeof *tr->root * (size_t)tr->nroot);
    vm_free(vm, tr->bumps, sizeof *tr->bumps * (size_t)tr->nroot);
    tr->root = r;
    tr->bumps = b;
    for (int i = tr->nroot; i < n; i++) { r[i] = -1; b[i] = 0; }
    tr->nroot = n;
  }
  tr->root[v] = root;
  return GRACE_OK;
}

grace_value tr_root_of(vm_trace *tr, grace_value v) { return v >= 0 && v < tr->nroot ? tr->root[v] : -1; }

grace_status grace_trace_begin(grace_vm *vm, grace_ir *ir, grace_where_fn where, void *ud) {
  if (!vm) return GRACE_EARG;
  if (!ir) return vm_err(vm, GRACE_EARG, "trace: no IR to record into");
  return vm_trace_begin(vm, ir, where, ud);
}

grace_status vm_trace_begin(grace_vm *vm, grace_ir *ir, grace_where_fn where, void *ud) {
  if (vm->trace) return vm_err(vm, GRACE_EARG, "trace: a trace is already active (grace.compile inside a traced function?)");
  vm_trace *tr = vm_calloc(vm, sizeof *tr);
  if (!tr) return vm_err(vm, GRACE_ENOMEM, "trace: out of host memory");
  tr->ir = ir; tr->where = where; tr->where_ud = ud;
  vm->trace = tr;
  return GRACE_OK;
}

int grace_trace_active(const grace_vm *vm) { return vm && vm->trace != NULL && !vm->trace->paused; }
void grace_trace_pause(grace_vm *vm) { if (vm && vm->trace) vm->trace->paused++; }
void grace_trace_resume(grace_vm *vm) { if (vm && vm->trace && vm->trace->paused) vm->trace->paused--; }
const char *grace_trace_problems(grace_vm *vm) {
  return vm && vm->trace && vm->trace->problems ? vm->trace->problems : "";
}

static grace_status declare(grace_vm *vm, grace_tensor *t, int scalar, grace_value *out) {
  if (!vm) return GRACE_EARG;
  if (!t || !out) return vm_err(vm, GRACE_EARG, "trace: a NULL argument");
  vm_trace *tr = vm->trace;
  if (!tr) return vm_err(vm, GRACE_EARG, "trace: no active trace");
  if (tr->used && tr_find(tr, t)->t)
    return vm_err(vm, GRACE_EARG, "trace: the same tensor is passed twice; inputs must be distinct tensors");
  if (tr->replay) return vm_replay_input(vm, t, scalar, out);
  grace_status st = scalar ? (t->ndim == 0 ? grace_ir_scalar(tr->ir, t->dtype, out)
                                           : vm_err(vm, GRACE_EARG, "trace: a scalar input must be 0-d"))
                           : grace_ir_input(tr->ir, t->dtype, t->storage->device, t->ndim, t->sizes, out);
  if (st == GRACE_OK && scalar) tr->ir->vals[*out].type.wrapped = t->wrapped;
  if (st == GRACE_OK) st = tr_map_put(vm, t, *out);
  if (st == GRACE_OK && !scalar) st = tr_set_root(vm, *out, *out);
  return st;
}

grace_status grace_trace_input(grace_vm *vm, grace_tensor *t, grace_value *out) { return declare(vm, t, 0, out); }
grace_status grace_trace_scalar(grace_vm *vm, grace_tensor *t, grace_value *out) { return declare(vm, t, 1, out); }

static grace_status remake_view(grace_vm *vm, trace_slot *s);

grace_status grace_trace_value(grace_vm *vm, grace_tensor *t, grace_value *out) {
  if (!vm) return GRACE_EARG;
  if (!t || !out) return vm_err(vm, GRACE_EARG, "trace: a NULL argument");
  vm_trace *tr = vm->trace;
  if (!tr) return vm_err(vm, GRACE_EARG, "trace: no active trace");
  if (tr->used) {
    trace_slot *s = tr_find(tr, t);
    if (s->t && s->v == STALE) {
      grace_status st = remake_view(vm, s);
      *out = s->v;
      return st;
    }
    if (s->t) { *out = s->v; return GRACE_OK; }
  }
  grace_status st;
  if (tr->parent && !t->wrapped) return vm_region_capture(vm, t, out);   /* explicit: an input of the sub-program */
  if (t->wrapped) {
    st = t->dtype == GRACE_INT64 ? grace_ir_literal_int(tr->ir, *(const int64_t *)vm_ptr(t), out)
                                 : grace_ir_literal(tr->ir, vm_load_f64(t->dtype, vm_ptr(t)), 0, out);
  } else {
    st = grace_ir_const(tr->ir, t, out);
    if (st == GRACE_OK) st = tr_set_root(vm, *out, *out);
  }
  if (st == GRACE_OK) st = tr_map_put(vm, t, *out);
  return st;
}

grace_status vm_trace_created(grace_vm *vm, grace_tensor *t) {
  vm_trace *tr = vm->trace;
  if (t->wrapped || tr->replay) return GRACE_OK;   /* numbers become literals; a replay matches contents */
  if (tr->parent) {   /* a constant of the outermost program, captured into the sub-program when it is used */
    vm->trace = tr->parent;
    grace_status st = vm_trace_created(vm, t);
    vm->trace = tr;
    return st;
  }
  grace_value v;
  /* the constant is a snapshot: the traced call itself may go on to write t in place */
  tr->paused++;
  grace_tensor *copy = NULL;
  grace_status st = grace_run(vm, GRACE_OP_CLONE, 1, &t, NULL, 1, &copy);
  if (st == GRACE_OK) st = grace_ir_const(tr->ir, copy, &v);
  grace_tensor_release(copy);
  tr->paused--;
  if (st != GRACE_OK) return st;
  tr->ir->consts[tr->ir->nconst - 1].local = 1;   /* no root: made anew by every call, never written back */
  return tr_map_put(vm, t, v);
}

/* Another mapped tensor shares t's storage (a view, or t is viewed). */
static int aliased(vm_trace *tr, const grace_tensor *t) {
  for (int i = 0; i < tr->nslots; i++)
    if (tr->slots[i].t && tr->slots[i].t != t && tr->slots[i].t->storage == t->storage) return 1;
  return 0;
}

grace_tensor *tr_base_of(vm_trace *tr, grace_tensor *t) {
  for (int n = 0; n < 64; n++) {
    trace_slot *s = tr_find(tr, t);
    if (!s->t || !s->parent) return t;
    t = s->parent;
  }
  return NULL;
}

/* A view made before its storage was written: made again from its parent's current value. */
static grace_status remake_view(grace_vm *vm, trace_slot *s) {
  vm_trace *tr = vm->trace;
  trace_slot *p = s->parent ? tr_find(tr, s->parent) : NULL;
  if (!p || !p->t) {
    s->v = -1;
    return tr_problem(vm, "internal: a stale view has no parent to remake it from");
  }
  grace_status st = p->v == STALE ? remake_view(vm, p) : GRACE_OK;
  if (st != GRACE_OK || p->v < 0) { s->v = -1; return st; }
  grace_value v;
  st = grace_ir_op(tr->ir, s->vop, 1, &p->v, &s->va, 1, &v);
  s->v = st == GRACE_OK ? v : -1;
  tr->nsynthetic++;
  return st;
}

/* A write through view t (its new value newv) made functional: each view level is undone on the new
 * value (a narrow or select becomes a slice_scatter into the parent's value, the other views are inverted),
 * up to the base, which maps to its new value. Every other view of that storage is remade when next used;
 * a tensor sharing the storage without being a view of the same base cannot be kept right, and is refused. */
static grace_status write_through_view(grace_vm *vm, grace_tensor *t, grace_value newv) {
  vm_trace *tr = vm->trace;
  grace_ir *ir = tr->ir;
  grace_tensor *chain[64];
  int n = 0;
  for (grace_tensor *c = t; c; c = tr_find(tr, c)->parent) {
    if (n == 64) return tr_problem(vm, "writes through a chain of more than 64 views");
    chain[n++] = c;
  }
  grace_tensor *base = chain[n - 1];
  for (int i = 0; i < tr->nslots; i++) {
    trace_slot *s = &tr->slots[i];
    int on_chain = 0;
    for (int k = 0; k < n; k++) on_chain |= s->t == chain[k];
    if (!s->t || on_chain || s->t->storage != t->storage) continue;
    if (tr_base_of(tr, s->t) != base)
      return tr_problem(vm, "writes a tensor whose storage is shared with another argument or captured tensor; "
                     "pass tensors that do not overlap");
    s->v = STALE;
  }
  grace_value cur = newv;
  grace_status st = GRACE_OK;
  for (int k = 0; k + 1 < n && st == GRACE_OK && !tr->nproblems; k++) {
    trace_slot *cs = tr_find(tr, chain[k]), *ps = tr_find(tr, chain[k + 1]);
    if (ps->v == STALE && (st = remake_view(vm, ps)) != GRACE_OK) return st;
    grace_attrs a = cs->va;
    grace_value pv = ps->v, next;
    switch (cs->vop) {
    case GRACE_OP_NARROW: case GRACE_OP_SELECT:
      a.flag = cs->vop == GRACE_OP_SELECT;
      if (cs->vop == GRACE_OP_SELECT) a.i1 = 1;
      st = grace_ir_op(ir, GRACE_OP_SLICE_SCATTER, 2, (grace_value[]){pv, cur}, &a, 1, &next);
      break;
    case GRACE_OP_TRANSPOSE:
      st = grace_ir_op(ir, GRACE_OP_TRANSPOSE, 1, &cur, &a, 1, &next);
      break;
    case GRACE_OP_PERMUTE: {
      grace_attrs inv = {.ndims = a.ndims};
      for (int d = 0; d < a.ndims; d++) {
        int64_t pd = a.dims[d] < 0 ? a.dims[d] + a.ndims : a.dims[d];
        inv.dims[pd] = d;
      }
      st = grace_ir_op(ir, GRACE_OP_PERMUTE, 1, &cur, &inv, 1, &next);
      break;
    }
    case GRACE_OP_RESHAPE: case GRACE_OP_VIEW: case GRACE_OP_SQUEEZE: case GRACE_OP_UNSQUEEZE: {
      grace_tensor *p = chain[k + 1];
      grace_attrs r = {.nshape = p->ndim};
      memcpy(r.shape, p->sizes, sizeof(int64_t) * (size_t)p->ndim);
      st = grace_ir_op(ir, GRACE_OP_RESHAPE, 1, &cur, &r, 1, &next);
      break;
    }
    default:
      return tr_problem(vm, "writes through a %s view, which cannot be turned into an update of its base", grace_op_name(cs->vop));
    }
    if (st != GRACE_OK) {
      char msg[VM_ERRLEN];
      snprintf(msg, sizeof msg, "%s", vm->err);
      return tr_problem(vm, "internal: undoing a view for a write: %s", msg);
    }
    cur = next;
    tr->nsynthetic++;
  }
  if (tr->nproblems) return GRACE_OK;
  grace_value broot = tr_root_of(tr, tr_find(tr, base)->v);
  if ((st = tr_map_put(vm, base, cur)) == GRACE_OK) st = tr_set_root(vm, cur, broot);
  if (st == GRACE_OK && broot >= 0) { ir->vals[cur].root = broot; ir->vals[cur].nwrites = tr->bumps[broot]; }
  /* the views on the chain are remade from the new base too, with the layout eager execution gives them */
  for (int k = 0; k + 1 < n; k++) tr_find(tr, chain[k])->v = STALE;
  return st;
}

/* Called by grace_run after op ran successfully on in[] giving out[]. */
grace_status vm_trace_record(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout,
                             grace_tensor **out) {
  vm_trace *tr = vm->trace;
  grace_value args[64], res[2];
  if (nin > 64) return tr_problem(vm, "%s with %d inputs is too wide to trace", grace_op_name(op), nin);
  if (op == GRACE_OP_MASKED_SELECT || op == GRACE_OP_NONZERO)   /* the result's size is a value the program cannot know */
    return tr_problem(vm, "%s: its result's shape depends on the values of its input, so it cannot be part of a compiled "
                      "program (a graph break that runs eagerly)", grace_op_name(op));
  tr->paused++;   /* nothing below is part of the program */
  char loc[256] = "";
  if (tr->where) tr->where(tr->where_ud, loc, sizeof loc);
  grace_ir_set_location(tr->ir, *loc ? loc : NULL);
  grace_status st = GRACE_OK;
  for (int i = 0; i < nin && st == GRACE_OK; i++) {
    if (!in[i]) { args[i] = -1; continue; }
    st = grace_trace_value(vm, in[i], &args[i]);
  }
  int inplace = grace_op_kind(op) == GRACE_KIND_INPLACE;
  int through_view = inplace && aliased(tr, in[0]);
  grace_value wroot = -1;
  if (st == GRACE_OK && inplace && args[0] >= 0) {   /* count the write against the tensor it lands in */
    wroot = tr_root_of(tr, tr_find(tr, tr_base_of(tr, in[0]))->v);
    if (wroot >= 0 && wroot < tr->nroot) tr->bumps[wroot]++;
  }
  int nres = inplace ? 1 : nout;
  if (st == GRACE_OK && !tr->nproblems) {
    st = grace_ir_op(tr->ir, op, nin, args, a, nres, res);
    if (st != GRACE_OK) {
      char msg[VM_ERRLEN];
      snprintf(msg, sizeof msg, "%s", vm->err);
      st = tr_problem(vm, "the IR rejects %s as executed: %s", grace_op_name(op), msg);
    }
    grace_tensor *const *results = inplace ? in : out;
    for (int r = 0; r < nres && st == GRACE_OK && !tr->nproblems; r++) {
      /* the inferred type must be the executed one: a mismatch is a bug in one of them */
      const ir_type *ty = &tr->ir->vals[res[r]].type;
      const grace_tensor *t = results[r];
      int same = ty->dtype == t->dtype && ty->ndim == t->ndim;
      for (int d = 0; same && d < t->ndim; d++) same = ty->sizes[d] == t->sizes[d];
      if (!same) st = tr_problem(vm, "internal: %s traced as %s but executed as %s %s", grace_op_name(op),
                              ir_type_str(ty, (char[160]){0}, 160), grace_dtype_name(t->dtype), VM_SHAPE(t));
      else if (through_view) st = write_through_view(vm, in[0], res[r]);
      else {
        if (inplace && wroot >= 0) {   /* for a run that fails part way: what eager would have written by then */
          tr->ir->vals[res[r]].root = wroot;
          tr->ir->vals[res[r]].nwrites = tr->bumps[wroot];
        }
        st = tr_map_put(vm, results[r], res[r]);
        if (st == GRACE_OK && inplace) st = tr_set_root(vm, res[r], tr_root_of(tr, args[0]));
        if (st == GRACE_OK && grace_op_kind(op) == GRACE_KIND_VIEW && results[r]->storage == in[0]->storage) {
          /* remember how the view was made (a reshape that had to copy is no view) */
          trace_slot *vs = tr_find(tr, results[r]);
          vs->parent = in[0]; vs->vop = op; vs->va = *a;
        }
      }
    }
  }
  tr->paused--;
  return st;
}

/* Called before the host reads a tensor's data: a graph break. Recording marks where the partition ends;
 * replaying runs what was deferred, so the value is there to read (the status of that; recording problems are the
 * trace's, said at its end). */
grace_status vm_trace_read(grace_vm *vm, const grace_tensor *t, const char *how) {
  vm_trace *tr = vm->trace;
  vm_auto_read(vm, how);
  if (tr->replay) return vm_replay_flush(vm);
  if (tr->parent) {   /* no break can be inside a region: the function cannot be one program */
    tr_problem(vm, "reads a tensor on the host (%s) inside a cond or while_loop function; keep the value a tensor",
               how ? how : "a read");
    return GRACE_OK;
  }
  /* any tensor: one the trace has not met yet is outside state (a weight) whose value Lua now sees */
  char loc[256] = "";
  if (tr->where) tr->where(tr->where_ud, loc, sizeof loc);
  grace_ir_set_location(tr->ir, *loc ? loc : NULL);
  if (ir_add_break(tr->ir) != GRACE_OK) tr_problem(vm, "out of memory recording a break");
  (void)how;
  return GRACE_OK;
}

int grace_trace_mutated(const grace_vm *vm) {
  if (!vm) return 0;
  const vm_trace *tr = vm->trace;
  if (!tr) return 0;
  for (int i = 0; i < tr->nslots; i++) {
    const trace_slot *s = &tr->slots[i];
    grace_value r = s->t && s->v >= 0 ? tr_root_of((vm_trace *)tr, s->v) : -1;   /* stale views are never roots */
    if (r >= 0 && r != s->v) return 1;
  }
  return 0;
}

void grace_trace_size_read(grace_vm *vm, const grace_tensor *t, int dim) {
  vm_trace *tr = vm ? vm->trace : NULL;
  if (!tr || !t || tr->replay || tr->paused || !tr->used || !tr->ir->nsyms) return;
  trace_slot *s = tr_find(tr, t);
  if (!s->t || s->v < 0 || s->v >= tr->ir->nval) return;
  const ir_type *ty = &tr->ir->vals[s->v].type;
  char loc[256] = "";
  if (tr->where) tr->where(tr->where_ud, loc, sizeof loc);
  grace_ir_set_location(tr->ir, *loc ? loc : NULL);
  for (int d = 0; d < ty->ndim; d++)
    if ((dim < 0 || d == dim) && ty->sym[d]) ir_sym_pin(tr->ir, ty->sym[d], "its size is read by the host");
}

grace_status grace_trace_note(grace_vm *vm, const char *why) {
  if (!vm) return GRACE_EARG;
  if (!why) return vm_err(vm, GRACE_EARG, "trace: a note with no reason");
  if (!vm->trace) return vm_err(vm, GRACE_EARG, "trace: no active trace");
  return tr_problem(vm, "%s", why);
}

grace_status grace_trace_end(grace_vm *vm) {
  if (!vm) return GRACE_EARG;
  while (vm->trace && vm->trace->parent) grace_trace_sub_abort(vm);   /* a host that failed inside a region */
  vm_trace *tr = vm->trace;
  if (!tr) return vm_err(vm, GRACE_EARG, "trace: no active trace");
  grace_status st = GRACE_OK;
  /* writes: every input or capture whose latest value is not itself */
  for (int i = 0; i < tr->nslots && st == GRACE_OK && !tr->nproblems; i++) {
    trace_slot *s = &tr->slots[i];
    if (!s->t) continue;
    grace_value r = tr_root_of(tr, s->v);
    if (r < 0 || r == s->v) continue;
    /* s->t was updated in place; its first value is the root (an input or a capture) */
    st = grace_ir_write(tr->ir, r, s->v);
    if (st == GRACE_OK) tr->ir->writes[tr->ir->nwrite - 1].bumps = tr->bumps[r] > 0 ? tr->bumps[r] : 1;
  }
  /* a constant made from host data is a fresh tensor on every eager call: returned, it is copied */
  for (int i = 0; i < tr->ir->nout && st == GRACE_OK && !tr->nproblems; i++) {
    const ir_inst *k = &tr->ir->insts[tr->ir->vals[tr->ir->outputs[i]].inst];
    grace_value c;
    if (k->op != IR_OP_CONST || !tr->ir->consts[k->input_index].local) continue;
    if ((st = grace_ir_op(tr->ir, GRACE_OP_CLONE, 1, &tr->ir->outputs[i], NULL, 1, &c)) == GRACE_OK) tr->ir->outputs[i] = c;
  }
  if (st == GRACE_OK && tr->ir->nbreak && ir_has_region(tr->ir))
    tr_problem(vm, "cond and while_loop in a function with graph breaks cannot be replayed yet; remove the host reads");
  if (st == GRACE_OK && tr->ir->nbreak && tr->nsynthetic)
    tr_problem(vm, "writes through views in a function with graph breaks cannot be replayed; write base tensors");
  if (st == GRACE_OK && tr->nproblems) {
    const char *nl = strchr(tr->problems, '\n');
    st = vm_err(vm, GRACE_EUNSUPPORTED, "%.*s", (int)(nl ? nl - tr->problems : (long)strlen(tr->problems)), tr->problems);
  }
  tr_free(vm);
  return st;
}

void tr_free(grace_vm *vm) {
  vm_trace *tr = vm->trace;
  for (int i = 0; i < tr->nslots; i++) grace_tensor_release(tr->slots[i].t);
  vm_free(vm, tr->slots, sizeof *tr->slots * (size_t)tr->nslots);
  vm_free(vm, tr->root, sizeof *tr->root * (size_t)tr->nroot);
  vm_free(vm, tr->bumps, sizeof *tr->bumps * (size_t)tr->nroot);
  vm_free(vm, tr->problems, tr->pcap);
  vm_free(vm, tr->val, sizeof *tr->val * (size_t)tr->nval);
  vm_free(vm, tr->pending, sizeof *tr->pending * (size_t)tr->cap_pending);
  for (int i = 0; i < tr->ncap; i++) grace_tensor_release(tr->caps[i]);
  vm_free(vm, tr->caps, sizeof *tr->caps * (size_t)tr->cap_caps);
  if (tr->owns_ir) grace_ir_free(tr->ir);
  vm_free(vm, tr, sizeof *tr);
  vm->trace = NULL;
}
