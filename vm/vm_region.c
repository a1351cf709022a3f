/* vm_region.c: recording regions (grace.cond, grace.while_loop) inside a trace. Each function of a region is
 * recorded by running it under a trace of its own, nested in the active one, which waits meanwhile: the nested
 * trace records into the sub-program, with the function's tensor arguments as its first inputs. A tensor of an
 * enclosing trace that the function touches (a weight, a value computed before the region) is no implicit capture:
 * it becomes a further input of the sub-program (vm_region_capture), and the host passes it to the region as an
 * argument, so sub-programs stay whole programs. The host then appends the region itself (grace_trace_cond,
 * grace_trace_while) and maps the results it computed eagerly to the region's results. */
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

grace_status vm_region_check_op(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in) {
  vm_trace *tr = vm->trace;
  if (grace_op_kind(op) != GRACE_KIND_INPLACE || nin < 1 || !in[0]) return GRACE_OK;
  grace_tensor *b = tr_base_of(tr, in[0]);
  trace_slot *s = b ? tr_find(tr, b) : NULL;
  if (s && s->t && (s->v == STALE || s->v < 0 || tr_root_of(tr, s->v) < 0)) return GRACE_OK;   /* made inside */
  return vm_err(vm, GRACE_EARG, "%s: a cond or while_loop function writes in place to a tensor from outside it (%s %s); "
                "return the new value instead", grace_op_name(op), grace_dtype_name(in[0]->dtype), VM_SHAPE(in[0]));
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

grace_status grace_trace_sub_end(grace_vm *vm, int nout, grace_tensor *const *out, int maxcap, grace_tensor **caps,
                                 int *ncap) {
  if (!vm) return GRACE_EARG;
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
  if (st == GRACE_OK && grace_trace_mutated(vm))   /* vm_region_check_op refuses these first; kept as a safeguard */
    tr_problem(vm, "a cond or while_loop function writes in place to a tensor from outside it");
  if (st == GRACE_OK && tr->ncap > maxcap)
    st = vm_err(vm, GRACE_EARG, "trace: a region reads %d tensors from outside its functions (at most %d)", tr->ncap, maxcap);
  for (int i = 0; i < tr->ncap && st == GRACE_OK; i++) { caps[i] = tr->caps[i]; grace_tensor_retain(caps[i]); }
  if (st == GRACE_OK) *ncap = tr->ncap;
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

grace_status grace_trace_cond(grace_vm *vm, grace_tensor *pred, int nin, grace_tensor *const *in, grace_ir *then_ir,
                              grace_ir *else_ir, int nout, grace_tensor **res) {
  if (!vm) return GRACE_EARG;   /* no VM: nothing to free the sub-programs with */
  vm_trace *tr = vm->trace;
  grace_value v[64], r[64];
  if (!pred || nin < 0 || (nin && !in) || !then_ir || !else_ir || (nout > 0 && !res)) {
    grace_ir_free(then_ir);
    grace_ir_free(else_ir);
    return vm_err(vm, GRACE_EARG, "trace: cond: a NULL argument");
  }
  if (!tr || nin > 63 || nout > 64) {
    grace_ir_free(then_ir);
    grace_ir_free(else_ir);
    return vm_err(vm, GRACE_EARG, "trace: cond needs an active trace, at most 63 arguments and 64 results");
  }
  tr->paused++;   /* capturing values is no op of the program */
  grace_status st = values_of(vm, 1, &pred, v);
  if (st == GRACE_OK) st = values_of(vm, nin, in, v + 1);
  tr->paused--;
  if (st != GRACE_OK || tr->nproblems) { grace_ir_free(then_ir); grace_ir_free(else_ir); return st; }   /* runs eagerly */
  set_loc(tr);
  st = grace_ir_cond(tr->ir, v[0], nin, v + 1, then_ir, else_ir, nout, r);
  if (st != GRACE_OK) return refused(vm, st, then_ir, else_ir);
  return map_results(vm, nout, res, r);
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
