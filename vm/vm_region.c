/* vm_region.c: recording regions (grace.cond, grace.while_loop) inside a trace. Each function of a region is
 * recorded by running it under a trace of its own, nested in the active one, which waits meanwhile: the nested
 * trace records into the sub-program, with the function's tensor arguments as its first inputs. A tensor of an
 * enclosing trace that the function touches (a weight, a value computed before the region) is no implicit capture:
 * it becomes a further input of the sub-program (vm_region_capture), and the host passes it to the region as an
 * argument, so sub-programs stay whole programs. The host then appends the region itself (grace_trace_cond,
 * grace_trace_while) and maps the results it computed eagerly to the region's results. A tensor of an enclosing trace
 * that the function writes in place is saved before the first write and given back when the recording ends (the
 * host runs both of a cond's functions); a cond's writes become further results of the region, copied into their
 * tensors once after it, so sub-programs stay free of writes. */
#include <stdio.h>
#include "vm/vm_trace.h"

grace_status vm_region_capture(grace_vm *vm, grace_tensor *t, grace_value *out) {
  vm_trace *tr = vm->trace;
  grace_value pv;
  vm->trace = tr->parent;   /* the enclosing trace knows t, or captures it in turn (paused: no host read) */
  tr->parent->paused++;
  grace_status st = grace_trace_value(vm, t, &pv);
  tr->parent->paused--;
  vm->trace = tr;
  if (st != GRACE_OK) return st;
  if (tr->ncap == tr->cap_caps) {
    int nc = tr->cap_caps ? tr->cap_caps * 2 : 8;
    grace_tensor **p = vm->alloc(vm->alloc_ud, tr->caps, sizeof *p * (size_t)tr->cap_caps, sizeof *p * (size_t)nc, VM_ALIGN);
    if (!p) return vm_err(vm, GRACE_ENOMEM, "trace: out of host memory");
    tr->caps = p;
    tr->cap_caps = nc;
  }
  st = grace_ir_input(tr->ir, t->dtype, t->storage->device, t->ndim, t->sizes, out);
  if (st == GRACE_OK) st = tr_map_put(vm, t, *out);
  if (st == GRACE_OK) st = tr_set_root(vm, *out, *out);   /* from outside: a write to it is refused */
  if (st != GRACE_OK) return st;
  grace_tensor_retain(t);
  tr->caps[tr->ncap++] = t;
  return GRACE_OK;
}

/* The copies that save, give back and hand over a written tensor's contents: out = clone(a) (out given), else
 * a.copy_(b); no op of the program being recorded and no part of autograd's graph. */
static grace_status untraced(grace_vm *vm, grace_tensor *a, grace_tensor *b, grace_tensor **out) {
  int ng = vm->no_grad;
  vm->trace->paused++;
  vm->no_grad = 1;
  grace_status st = out ? grace_run(vm, GRACE_OP_CLONE, 1, &a, NULL, 1, out)
                        : grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){a, b}, NULL, 0, NULL);
  vm->no_grad = ng;
  vm->trace->paused--;
  return st;
}

/* An in-place op inside a region's function: a write to a tensor from outside the function is allowed (the tensor's
 * contents and version are saved before the first, to be given back when the recording ends: grace_trace_sub_end). */
grace_status vm_region_check_op(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in) {
  vm_trace *tr = vm->trace;
  if (grace_op_kind(op) != GRACE_KIND_INPLACE || nin < 1 || !in[0]) return GRACE_OK;
  grace_tensor *b = tr_base_of(tr, in[0]);
  trace_slot *s = b ? tr_find(tr, b) : NULL;
  if (s && s->t && (s->v == STALE || s->v < 0 || tr_root_of(tr, s->v) < 0)) return GRACE_OK;   /* made inside */
  if (!b) return GRACE_OK;   /* a view chain too long: the trace's write says so */
  for (int i = 0; i < tr->nwr; i++) if (tr->wr[i].t == b) return GRACE_OK;
  if (tr->nwr == GRACE_SUB_WRITES)
    return vm_err(vm, GRACE_EARG, "%s: a cond or while_loop function writes in place to more than %d tensors from "
                  "outside it", grace_op_name(op), GRACE_SUB_WRITES);
  grace_tensor *saved = NULL;
  grace_status st = untraced(vm, b, NULL, &saved);
  if (st != GRACE_OK) return st;
  grace_tensor_retain(b);
  tr->wr[tr->nwr].t = b;
  tr->wr[tr->nwr].saved = saved;
  tr->wr[tr->nwr++].version = b->storage->version;   /* not grace_tensor_version: no host read */
  return GRACE_OK;
}

/* Gives every tensor the function wrote its contents and version from before it ran. Last saved first: two written
 * tensors may share storage (a captured tensor and a view of it, each captured on its own), and the one saved later
 * was saved with the other's writes in it, which the earlier one's copy then undoes. */
static void restore_writes(grace_vm *vm, vm_trace *tr) {
  char keep[VM_ERRLEN];
  snprintf(keep, sizeof keep, "%s", vm->err);   /* the error being reported, if any, stays the last one */
  for (int i = tr->nwr - 1; i >= 0; i--) {
    grace_tensor *t = tr->wr[i].t;
    if (untraced(vm, t, tr->wr[i].saved, NULL) == GRACE_OK) t->storage->version = tr->wr[i].version;
    grace_tensor_release(tr->wr[i].saved);
    grace_tensor_release(t);
  }
  tr->nwr = 0;
  snprintf(vm->err, sizeof vm->err, "%s", keep);
}

grace_status grace_trace_sub_begin(grace_vm *vm, grace_ir *sub, int nin, grace_tensor *const *in) {
  if (!vm) return GRACE_EARG;
  if (!sub || nin < 0 || (nin && !in)) return vm_err(vm, GRACE_EARG, "trace: a region needs its IR and inputs");
  for (int i = 0; i < nin; i++) if (!in[i]) return vm_err(vm, GRACE_EARG, "trace: region input %d is NULL", i);
  vm_trace *outer = vm->trace;
  if (!outer || !grace_trace_active(vm)) return vm_err(vm, GRACE_EARG, "trace: no active trace to record a region in");
  if (outer->replay)   /* the host runs the region eagerly instead: a host read, as without regions */
    return vm_err(vm, GRACE_EUNSUPPORTED, "trace: a region is not recorded while a function with graph breaks replays");
  vm_trace *tr = vm_calloc(vm, sizeof *tr);
  if (!tr) return vm_err(vm, GRACE_ENOMEM, "trace: out of host memory");
  tr->ir = sub;
  tr->where = outer->where;
  tr->where_ud = outer->where_ud;
  tr->parent = outer;
  vm->trace = tr;
  grace_status st = GRACE_OK;
  for (int i = 0; i < nin && st == GRACE_OK; i++) {
    grace_value v;
    int dup = tr->used && tr_find(tr, in[i])->t;
    if (dup)   /* the same tensor twice: one value; the second input is declared and left unread */
      st = grace_ir_input(sub, in[i]->dtype, in[i]->storage->device, in[i]->ndim, in[i]->sizes, &v);
    else
      st = grace_trace_input(vm, in[i], &v);
  }
  if (st != GRACE_OK) grace_trace_sub_abort(vm);
  return st;
}

/* Ends the innermost sub-program's trace: its problems go to the enclosing trace, which is active again. */
static void pop(grace_vm *vm) {
  vm_trace *tr = vm->trace, *outer = tr->parent;
  restore_writes(vm, tr);
  if (tr->nproblems && tr->problems) {
    vm->trace = outer;
    const char *p = tr->problems;
    while (*p) {   /* one problem per line, each with its location already */
      const char *nl = strchr(p, '\n');
      int n = nl ? (int)(nl - p) : (int)strlen(p);
      grace_where_fn w = outer->where;
      outer->where = NULL;
      tr_problem(vm, "%.*s", n, p);
      outer->where = w;
      p += n + (nl ? 1 : 0);
    }
    vm->trace = tr;
  }
  tr_free(vm);
  vm->trace = outer;
}

void grace_trace_sub_abort(grace_vm *vm) {
  if (vm && vm->trace && vm->trace->parent) pop(vm);
}

void grace_sub_writes_release(grace_sub_writes *w) {
  if (!w) return;
  for (int i = 0; i < w->n && i < GRACE_SUB_WRITES; i++) {
    grace_tensor_release(w->t[i]);
    grace_tensor_release(w->final[i]);
  }
  w->n = 0;
}

/* The final values of the tensors the function wrote, as further outputs of its sub-program, and in w the tensors
 * with copies of their contents now. */
static grace_status hand_writes(grace_vm *vm, vm_trace *tr, grace_sub_writes *w) {
  grace_status st = GRACE_OK;
  for (int i = 0; i < tr->nwr && st == GRACE_OK; i++) {
    grace_value v;
    grace_tensor *f = NULL;
    if ((st = grace_trace_value(vm, tr->wr[i].t, &v)) != GRACE_OK) break;
    if (v < 0) { st = vm_err(vm, GRACE_EUNSUPPORTED, "trace: a tensor written in a region has no value"); break; }
    if ((st = grace_ir_output(tr->ir, v)) != GRACE_OK || (st = untraced(vm, tr->wr[i].t, NULL, &f)) != GRACE_OK) break;
    grace_tensor_retain(tr->wr[i].t);
    w->t[w->n] = tr->wr[i].t;
    w->final[w->n++] = f;
  }
  return st;
}

grace_status grace_trace_sub_end(grace_vm *vm, int nout, grace_tensor *const *out, int maxcap, grace_tensor **caps,
                                 int *ncap, grace_sub_writes *writes) {
  if (!vm) return GRACE_EARG;
  if (writes) writes->n = 0;
  if (!ncap || nout < 0 || (nout && !out) || (maxcap > 0 && !caps))
    return vm_err(vm, GRACE_EARG, "trace: a NULL argument ending a region");
  vm_trace *tr = vm->trace;
  *ncap = 0;
  if (!tr || !tr->parent) return vm_err(vm, GRACE_EARG, "trace: no region being recorded");
  grace_status st = GRACE_OK;
  for (int i = 0; i < nout && st == GRACE_OK; i++) {
    grace_value v;
    if ((st = grace_trace_value(vm, out[i], &v)) == GRACE_OK && v >= 0) st = grace_ir_output(tr->ir, v);
  }
  if (st == GRACE_OK && tr->nwr && !writes) {
    char d[160];
    grace_tensor *t = tr->wr[0].t;
    snprintf(d, sizeof d, "%s %s", grace_dtype_name(t->dtype), VM_SHAPE(t));
    st = vm_err(vm, GRACE_EARG, "a while_loop function writes in place to a tensor from outside it (%s); carry the "
                "tensor in the loop's state and return its new value instead", d);
  }
  if (st == GRACE_OK && writes) st = hand_writes(vm, tr, writes);
  else if (st == GRACE_OK && grace_trace_mutated(vm))   /* written without a record of it: kept as a safeguard */
    tr_problem(vm, "a cond or while_loop function writes in place to a tensor from outside it");
  if (st == GRACE_OK && tr->ncap > maxcap)
    st = vm_err(vm, GRACE_EARG, "trace: a region reads %d tensors from outside its functions (at most %d)", tr->ncap, maxcap);
  for (int i = 0; i < tr->ncap && st == GRACE_OK; i++) { caps[i] = tr->caps[i]; grace_tensor_retain(caps[i]); }
  if (st == GRACE_OK) *ncap = tr->ncap;
  if (st != GRACE_OK) grace_sub_writes_release(writes);
  pop(vm);
  return st;
}

/* Maps the host's results of a region to its results r[0..nout); a tensor the trace already knows (an argument
 * returned as it is) is replaced by a copy, so that value keeps its own mapping. */
static grace_status map_results(grace_vm *vm, int nout, grace_tensor **res, const grace_value *r) {
  vm_trace *tr = vm->trace;
  grace_status st = GRACE_OK;
  for (int i = 0; i < nout && st == GRACE_OK; i++) {
    if (tr->used && tr_find(tr, res[i])->t) {
      grace_tensor *c = NULL;
      tr->paused++;
      st = grace_run(vm, GRACE_OP_CLONE, 1, &res[i], NULL, 1, &c);
      tr->paused--;
      if (st != GRACE_OK) return st;
      grace_tensor_release(res[i]);
      res[i] = c;
    }
    st = tr_map_put(vm, res[i], r[i]);
  }
  return st;
}

/* The values of t[0..n) in the active trace. */
static grace_status values_of(grace_vm *vm, int n, grace_tensor *const *t, grace_value *v) {
  grace_status st = GRACE_OK;
  for (int i = 0; i < n && st == GRACE_OK; i++) st = grace_trace_value(vm, t[i], &v[i]);
  return st;
}

static void set_loc(vm_trace *tr) {
  char loc[256] = "";
  if (tr->where) tr->where(tr->where_ud, loc, sizeof loc);
  grace_ir_set_location(tr->ir, *loc ? loc : NULL);
}

/* A region the IR refuses is a problem of the trace (the function then runs eagerly), not an error of the call. */
static grace_status refused(grace_vm *vm, grace_status st, grace_ir *a, grace_ir *b) {
  char msg[VM_ERRLEN];
  snprintf(msg, sizeof msg, "%s", vm->err);
  grace_ir_free(a);
  grace_ir_free(b);
  return st == GRACE_ENOMEM ? st : tr_problem(vm, "the IR rejects the region: %s", msg);
}

/* The tensors either branch wrote, in u[0..*nu): then's in order, then else's others. Each branch's sub-program gets
 * one further output a tensor, in that order: its final value where the branch wrote it (grace_trace_sub_end put
 * those after its results, in its own order), else its input for the tensor (in[j] is sub input j). */
static grace_status unite_writes(grace_vm *vm, grace_ir *const sub[2], int nout, int nin, grace_tensor *const *in,
                                 const grace_sub_writes *w, grace_tensor **u, int *nu) {
  *nu = 0;
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < w[b].n; i++) {
      int seen = 0;
      for (int k = 0; k < *nu; k++) seen |= u[k] == w[b].t[i];
      if (!seen) u[(*nu)++] = w[b].t[i];
    }
  for (int b = 0; b < 2; b++) {
    grace_ir *ir = sub[b];
    if (ir->nout != nout + w[b].n) return vm_err(vm, GRACE_EARG, "trace: cond: a branch's outputs do not match its writes");
    int32_t fin[2 * GRACE_SUB_WRITES];
    for (int i = 0; i < w[b].n; i++) fin[i] = ir->outputs[nout + i];
    ir->nout = nout;
    for (int k = 0; k < *nu; k++) {
      grace_value v = -1;
      for (int i = 0; i < w[b].n; i++) if (w[b].t[i] == u[k]) v = fin[i];
      for (int j = 0; j < nin && v < 0; j++) if (in[j] == u[k]) v = ir_input_value(ir, j);
      if (v < 0) return vm_err(vm, GRACE_EARG, "trace: cond: a tensor a branch writes is none of the region's inputs");
      grace_status st = grace_ir_output(ir, v);
      if (st != GRACE_OK) return st;
    }
  }
  return GRACE_OK;
}

/* After the region: each written tensor u[k] takes the region's result nout + k (eagerly: the taken branch's final
 * contents, or its own), as one copy_ of the trace; the tensors given for those results in e[] are consumed. */
static grace_status write_back(grace_vm *vm, int nout, const grace_value *r, int nu, grace_tensor *const *u,
                               grace_tensor **e) {
  grace_status st = GRACE_OK;
  int ng = vm->no_grad;
  vm->no_grad = 1;   /* as the branch's writes: autograd has no derivative of an in-place write */
  for (int k = 0; k < nu; k++) {
    if (st == GRACE_OK) st = map_results(vm, 1, &e[k], &r[nout + k]);
    if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){u[k], e[k]}, NULL, 0, NULL);
    grace_tensor_release(e[k]);
  }
  vm->no_grad = ng;
  return st;
}

/* The same without recording (the call goes on eagerly): the tensors take the taken branch's contents. Inside
 * the recording of an enclosing region's function, each write is that function's write all the same: saved first
 * (vm_region_check_op), to be given back when its recording ends, or a write of the branch not taken would stay. */
static grace_status eager_writes(grace_vm *vm, int nu, grace_tensor *const *u, grace_tensor **e) {
  grace_status st = GRACE_OK;
  for (int k = 0; k < nu; k++) {
    if (st == GRACE_OK && vm->trace->parent) st = vm_region_check_op(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){u[k], e[k]});
    if (st == GRACE_OK) st = untraced(vm, u[k], e[k], NULL);
    grace_tensor_release(e[k]);
  }
  return st;
}

grace_status grace_trace_cond(grace_vm *vm, grace_tensor *pred, int nin, grace_tensor *const *in, grace_ir *then_ir,
                              grace_ir *else_ir, int nout, grace_tensor **res, const grace_sub_writes *writes,
                              int taken) {
  if (!vm) return GRACE_EARG;   /* no VM: nothing to free the sub-programs with */
  vm_trace *tr = vm->trace;
  grace_value v[64], r[64 + 2 * GRACE_SUB_WRITES];
  grace_tensor *u[2 * GRACE_SUB_WRITES], *e[2 * GRACE_SUB_WRITES];
  int nu = 0;
  if (!pred || nin < 0 || (nin && !in) || !then_ir || !else_ir || (nout > 0 && !res) || taken < 0 || taken > 1 ||
      (writes && (writes[0].n < 0 || writes[0].n > GRACE_SUB_WRITES || writes[1].n < 0 || writes[1].n > GRACE_SUB_WRITES))) {
    grace_ir_free(then_ir);
    grace_ir_free(else_ir);
    return vm_err(vm, GRACE_EARG, "trace: cond: a NULL or bad argument");
  }
  if (!tr || nin > 63 || nout > 64) {
    grace_ir_free(then_ir);
    grace_ir_free(else_ir);
    return vm_err(vm, GRACE_EARG, "trace: cond needs an active trace, at most 63 arguments and 64 results");
  }
  tr->paused++;   /* capturing values is no op of the program */
  grace_status st = values_of(vm, 1, &pred, v);
  if (st == GRACE_OK) st = values_of(vm, nin, in, v + 1);
  if (st == GRACE_OK && writes)
    st = unite_writes(vm, (grace_ir *[]){then_ir, else_ir}, nout, nin, in, writes, u, &nu);
  tr->paused--;
  for (int k = 0; k < nu && st == GRACE_OK; k++) {   /* what each written tensor holds after the taken branch */
    const grace_sub_writes *w = &writes[taken];
    e[k] = NULL;
    for (int i = 0; i < w->n; i++) if (w->t[i] == u[k]) { e[k] = w->final[i]; grace_tensor_retain(e[k]); }
    if (!e[k] && (st = untraced(vm, u[k], NULL, &e[k])) != GRACE_OK)
      for (int j = 0; j < k; j++) grace_tensor_release(e[j]);
  }
  if (st != GRACE_OK || tr->nproblems) {   /* runs eagerly */
    if (st == GRACE_OK) st = eager_writes(vm, nu, u, e);
    grace_ir_free(then_ir);
    grace_ir_free(else_ir);
    return st;
  }
  set_loc(tr);
  st = grace_ir_cond(tr->ir, v[0], nin, v + 1, then_ir, else_ir, nout + nu, r);
  if (st != GRACE_OK) {
    st = refused(vm, st, then_ir, else_ir);
    grace_status wst = eager_writes(vm, nu, u, e);
    return st != GRACE_OK ? st : wst;
  }
  /* written back first: a branch that returns a tensor it wrote (`A:add_(1) return A`) hands back A itself, which
     holds its old contents again since the recording ended; map_results copies it, and the copy must be of the
     contents the taken branch left, as the program's result is */
  grace_status wst = write_back(vm, nout, r, nu, u, e);
  st = map_results(vm, nout, res, r);
  return st != GRACE_OK ? st : wst;
}

grace_status grace_trace_while(grace_vm *vm, int nstate, int nin, grace_tensor *const *in, grace_ir *cond_ir,
                               grace_ir *body_ir, int64_t max_iters, grace_tensor **res) {
  if (!vm) return GRACE_EARG;
  vm_trace *tr = vm->trace;
  grace_value v[64], r[64];
  if (nin < 0 || (nin && !in) || !cond_ir || !body_ir || !res) {
    grace_ir_free(cond_ir);
    grace_ir_free(body_ir);
    return vm_err(vm, GRACE_EARG, "trace: while_loop: a NULL argument");
  }
  if (!tr || nin > 64 || nstate < 1 || nstate > nin) {
    grace_ir_free(cond_ir);
    grace_ir_free(body_ir);
    return vm_err(vm, GRACE_EARG, "trace: while_loop needs an active trace and 1 to 64 state values");
  }
  tr->paused++;
  grace_status st = values_of(vm, nin, in, v);
  tr->paused--;
  if (st != GRACE_OK || tr->nproblems) { grace_ir_free(cond_ir); grace_ir_free(body_ir); return st; }
  set_loc(tr);
  st = grace_ir_while(tr->ir, nstate, v, nin - nstate, v + nstate, cond_ir, body_ir, max_iters, r);
  if (st != GRACE_OK) return refused(vm, st, cond_ir, body_ir);
  return map_results(vm, nstate, res, r);
}
