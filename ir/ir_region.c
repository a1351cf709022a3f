/* ir_region.c: region instructions, the IR's explicit control flow (MLIR's scf.if / scf.while, PyTorch's cond and
 * while_loop): IR_OP_COND and IR_OP_WHILE own two sub-programs each, kept in ir->subs. A sub-program is a complete
 * grace_ir that captures nothing (no captured tensors, dynamic scalars, breaks or writes): whatever it reads from the
 * enclosing program is an explicit input, so it verifies, optimizes, fuses and runs on its own, and the enclosing
 * program sees the region as one instruction with ordinary inputs and results.
 *   cond:  inputs (pred, args...);        then(args) -> results, else(args) -> results
 *   while: inputs (state..., inv...);     cond(state, inv) -> one 0-d value, body(state, inv) -> next state;
 *          results: the final state (nout = the state's count); attrs.i0 = max_iters (0: unbounded)
 * Here: the builder (public API), the verifier's checks, deep copies for the pass rewriter, and execution (the
 * predicate read on the host, the chosen sub-program run by its device's backend). */
#include <stdio.h>
#include <string.h>
#include "ir/ir_exec.h"
#include "ir/ir_pass.h"

int ir_has_region(const grace_ir *ir) {
  for (int i = 0; i < ir->ninst; i++) if (ir_is_region(ir->insts[i].op)) return 1;
  return 0;
}

static int reserve_subs(grace_ir *ir, int more) {
  if (ir->nsub + more <= ir->cap_sub) return 1;
  int nc = ir->cap_sub ? ir->cap_sub * 2 : 4;
  while (nc < ir->nsub + more) nc *= 2;
  grace_ir **p = grace_realloc(ir->vm, ir->subs, sizeof *p * (size_t)ir->cap_sub, sizeof *p * (size_t)nc);
  if (!p) { grace_set_error(ir->vm, GRACE_ENOMEM, "ir: out of host memory"); return 0; }
  ir->subs = p;
  ir->cap_sub = nc;
  return 1;
}

int32_t ir_add_sub(grace_ir *ir, grace_ir *sub) {
  if (!reserve_subs(ir, 1)) return -1;
  ir->subs[ir->nsub] = sub;
  return ir->nsub++;
}

grace_ir *grace_ir_sub(const grace_ir *ir, int k, int j) {
  if (!ir || k < 0 || k >= ir->ninst || j < 0 || j > 1 || !ir_is_region(ir->insts[k].op)) return NULL;
  return ir->subs[ir->insts[k].sub + j];
}

/* The type of input #index of sub (NULL: not declared). */
static const ir_type *input_type(const grace_ir *sub, int index) {
  int32_t v = ir_input_value(sub, index);
  return v < 0 ? NULL : &sub->vals[v].type;
}

/* Whether sub is a sub-program taking inputs of types in[0..nin) and giving nout outputs: an error (code, naming
 * the region's op and which sub-program) when not. */
static grace_status check_sub(grace_vm *vm, grace_status code, const char *op, const char *which, const grace_ir *sub,
                              int nin, const ir_type *const *in, int nout) {
  char a[160], b[160];
  if (!sub) return grace_set_error(vm, code, "%s: the %s sub-program is missing", op, which);
  if (sub->vm != vm) return grace_set_error(vm, code, "%s: the %s sub-program belongs to another VM", op, which);
  if (sub->nconst || sub->nscalars || sub->nbreak || sub->nwrite)
    return grace_set_error(vm, code, "%s: the %s sub-program '%s' has %d captured tensors, %d dynamic scalars, %d breaks "
                           "and %d writes; a sub-program captures nothing: what it reads from outside is an input", op,
                           which, sub->name, sub->nconst, sub->nscalars, sub->nbreak, sub->nwrite);
  if (sub->ninputs != nin)
    return grace_set_error(vm, code, "%s: the %s sub-program '%s' takes %d inputs, the region passes %d", op, which,
                           sub->name, sub->ninputs, nin);
  for (int j = 0; j < nin; j++) {
    const ir_type *t = input_type(sub, j);
    if (!t || !ir_type_equal(t, in[j], 0))
      return grace_set_error(vm, code, "%s: input %d of the %s sub-program '%s' is %s, the region passes %s", op, j,
                             which, sub->name, t ? ir_type_str(t, a, sizeof a) : "undeclared", ir_type_str(in[j], b, sizeof b));
  }
  if (sub->nout != nout)
    return grace_set_error(vm, code, "%s: the %s sub-program '%s' returns %d values, %d expected", op, which, sub->name,
                           sub->nout, nout);
  return GRACE_OK;
}

static const ir_type *out_type(const grace_ir *sub, int r) { return &sub->vals[sub->outputs[r]].type; }

/* The checks of a cond over input types in[0..nin) (in[0]: the predicate): both branches take in[1..] and return
 * nout values of equal types. */
static grace_status check_cond(grace_vm *vm, grace_status code, int nin, const ir_type *const *in, const grace_ir *t,
                               const grace_ir *e, int nout) {
  char a[160], b[160];
  if (nin < 1 || nin > 64) return grace_set_error(vm, code, "cond: %d inputs (the predicate and up to 63 arguments)", nin);
  if (in[0]->ndim != 0)
    return grace_set_error(vm, code, "cond: the predicate must be a 0-d tensor, got %s", ir_type_str(in[0], a, sizeof a));
  if (nout < 1) return grace_set_error(vm, code, "cond: the branches must return at least one tensor");
  grace_status st = check_sub(vm, code, "cond", "then", t, nin - 1, in + 1, nout);
  if (st == GRACE_OK) st = check_sub(vm, code, "cond", "else", e, nin - 1, in + 1, nout);
  for (int r = 0; r < nout && st == GRACE_OK; r++)
    if (!ir_type_equal(out_type(t, r), out_type(e, r), 0))
      st = grace_set_error(vm, code, "cond: the branches return different types: result %d is %s in then, %s in else", r,
                           ir_type_str(out_type(t, r), a, sizeof a), ir_type_str(out_type(e, r), b, sizeof b));
  return st;
}

/* The checks of a while over input types in[0..nin), the first nstate the state. */
static grace_status check_while(grace_vm *vm, grace_status code, int nin, const ir_type *const *in, int nstate,
                                const grace_ir *c, const grace_ir *body, int64_t max_iters) {
  char a[160], b[160];
  if (nstate < 1 || nstate > nin || nin > 64)
    return grace_set_error(vm, code, "while: %d state values of %d inputs (1 to 64 state values)", nstate, nin);
  if (max_iters < 0) return grace_set_error(vm, code, "while: max_iters must be >= 0, got %lld", (long long)max_iters);
  grace_status st = check_sub(vm, code, "while", "cond", c, nin, in, 1);
  if (st == GRACE_OK && out_type(c, 0)->ndim != 0)
    st = grace_set_error(vm, code, "while: the cond sub-program must return a 0-d tensor, it returns %s",
                         ir_type_str(out_type(c, 0), a, sizeof a));
  if (st == GRACE_OK) st = check_sub(vm, code, "while", "body", body, nin, in, nstate);
  for (int r = 0; r < nstate && st == GRACE_OK; r++)
    if (!ir_type_equal(out_type(body, r), in[r], 0))
      st = grace_set_error(vm, code, "while: the body changes state %d from %s to %s; the state keeps its dtype and shape",
                           r, ir_type_str(in[r], a, sizeof a), ir_type_str(out_type(body, r), b, sizeof b));
  return st;
}

/* Appends region op over in[0..nin) with results typed as sub-program s's outputs, owning s0 and s1. */
static grace_status append_region(grace_ir *ir, int op, int nin, const grace_value *in, const grace_attrs *a,
                                  grace_ir *s0, grace_ir *s1, int nout, grace_value *out) {
  ir_type types[64];
  const grace_ir *typed = op == IR_OP_COND ? s0 : s1;
  for (int r = 0; r < nout; r++) types[r] = *out_type(typed, r);
  if (!reserve_subs(ir, 2)) return GRACE_ENOMEM;
  int32_t v = ir_append(ir, op, nin, in, a, nout, types);
  if (v < 0) return GRACE_ENOMEM;
  ir->insts[ir->ninst - 1].sub = ir->nsub;
  ir->subs[ir->nsub++] = s0;
  ir->subs[ir->nsub++] = s1;
  for (int r = 0; r < nout; r++) out[r] = v + r;
  return GRACE_OK;
}

static grace_status gather(grace_ir *ir, const char *op, int n, const grace_value *v, const ir_type **types) {
  for (int j = 0; j < n; j++) {
    if (v[j] < 0 || v[j] >= ir->nval)
      return grace_set_error(ir->vm, GRACE_EARG, "%s: value %%%d is not defined in IR '%s'", op, (int)v[j], ir->name);
    types[j] = &ir->vals[v[j]].type;
  }
  return GRACE_OK;
}

grace_status grace_ir_cond(grace_ir *ir, grace_value pred, int nargs, const grace_value *args, grace_ir *then_ir,
                           grace_ir *else_ir, int nout, grace_value *out) {
  if (!ir) return GRACE_EARG;
  if ((nargs > 0 && !args) || !then_ir || !else_ir || (nout > 0 && !out))
    return grace_set_error(ir->vm, GRACE_EARG, "cond: a NULL argument");
  if (nargs < 0 || nargs > 63) return grace_set_error(ir->vm, GRACE_EARG, "cond: %d arguments (at most 63)", nargs);
  if (nout > 64) return grace_set_error(ir->vm, GRACE_EARG, "cond: %d results (at most 64)", nout);
  if (then_ir && then_ir == else_ir) return grace_set_error(ir->vm, GRACE_EARG, "cond: then and else are one IR; give two");
  grace_value in[64];
  const ir_type *types[64];
  in[0] = pred;
  for (int j = 0; j < nargs; j++) in[1 + j] = args[j];
  grace_status st = gather(ir, "cond", nargs + 1, in, types);
  if (st == GRACE_OK) st = check_cond(ir->vm, GRACE_EARG, nargs + 1, types, then_ir, else_ir, nout);
  if (st == GRACE_OK) st = append_region(ir, IR_OP_COND, nargs + 1, in, NULL, then_ir, else_ir, nout, out);
  return st;
}

grace_status grace_ir_while(grace_ir *ir, int nstate, const grace_value *state, int ninv, const grace_value *inv,
                            grace_ir *cond_ir, grace_ir *body_ir, int64_t max_iters, grace_value *out) {
  if (!ir) return GRACE_EARG;
  if ((nstate > 0 && !state) || (ninv > 0 && !inv) || !cond_ir || !body_ir || !out)
    return grace_set_error(ir->vm, GRACE_EARG, "while: a NULL argument");
  if (nstate < 1 || ninv < 0 || nstate + ninv > 64)
    return grace_set_error(ir->vm, GRACE_EARG, "while: %d state values and %d invariants (1 to 64 in all)", nstate, ninv);
  if (cond_ir && cond_ir == body_ir) return grace_set_error(ir->vm, GRACE_EARG, "while: cond and body are one IR; give two");
  grace_value in[64];
  const ir_type *types[64];
  for (int j = 0; j < nstate; j++) in[j] = state[j];
  for (int j = 0; j < ninv; j++) in[nstate + j] = inv[j];
  grace_status st = gather(ir, "while", nstate + ninv, in, types);
  if (st == GRACE_OK) st = check_while(ir->vm, GRACE_EARG, nstate + ninv, types, nstate, cond_ir, body_ir, max_iters);
  grace_attrs a = {.i0 = max_iters};
  if (st == GRACE_OK) st = append_region(ir, IR_OP_WHILE, nstate + ninv, in, &a, cond_ir, body_ir, nstate, out);
  return st;
}

grace_status ir_region_verify(grace_ir *ir, int i) {
  grace_vm *vm = ir->vm;
  const ir_inst *k = &ir->insts[i];
  const ir_type *types[64];
  char a[160], b[160];
  if (k->nin < 1 || k->nin > 64 || k->nout < 1 || k->nout > 64 || k->sub < 0 || k->sub + 1 >= ir->nsub)
    return grace_set_error(vm, GRACE_EINTERNAL, "verify: %s (%%%d) has %d inputs, %d results and sub-programs #%d of %d",
                           ir_op_name(k->op), k->first_result, k->nin, k->nout, k->sub, ir->nsub);
  for (int j = 0; j < k->nin; j++) {
    int32_t v = ir->args[k->first_arg + j];
    if (v < 0) return grace_set_error(vm, GRACE_EINTERNAL, "verify: %s (%%%d) has an absent input", ir_op_name(k->op), k->first_result);
    types[j] = &ir->vals[v].type;
  }
  grace_ir *s0 = ir->subs[k->sub], *s1 = ir->subs[k->sub + 1];
  grace_status st = k->op == IR_OP_COND ? check_cond(vm, GRACE_EINTERNAL, k->nin, types, s0, s1, k->nout)
                                        : check_while(vm, GRACE_EINTERNAL, k->nin, types, k->nout, s0, s1, k->attrs.i0);
  if (st != GRACE_OK) {
    char msg[VM_ERRLEN];
    snprintf(msg, sizeof msg, "%s", grace_last_error(vm));
    return grace_set_error(vm, GRACE_EINTERNAL, "verify: %%%d: %s", k->first_result, msg);
  }
  const grace_ir *typed = k->op == IR_OP_COND ? s0 : s1;
  for (int r = 0; r < k->nout; r++)
    if (!ir_type_equal(&ir->vals[k->first_result + r].type, out_type(typed, r), 0))
      return grace_set_error(vm, GRACE_EINTERNAL, "verify: %s (%%%d) is typed %s, its sub-program returns %s",
                             ir_op_name(k->op), k->first_result + r, ir_type_str(&ir->vals[k->first_result + r].type, a, sizeof a),
                             ir_type_str(out_type(typed, r), b, sizeof b));
  for (int j = 0; j < 2; j++) {
    if ((st = grace_ir_verify(ir->subs[k->sub + j])) != GRACE_OK) {
      char msg[VM_ERRLEN];
      snprintf(msg, sizeof msg, "%s", grace_last_error(vm));
      return grace_set_error(vm, GRACE_EINTERNAL, "verify: in sub-program '%s' of %s (%%%d): %s", ir->subs[k->sub + j]->name,
                             ir_op_name(k->op), k->first_result, msg);
    }
  }
  return GRACE_OK;
}

grace_ir *ir_clone(grace_ir *s) {
  ir_rewriter rw;
  if (ir_rw_begin(&rw, s) != GRACE_OK) return NULL;
  for (int k = 0; k < s->ninst; k++)
    if (ir_rw_copy(&rw, k) != GRACE_OK) { ir_rw_abort(&rw); return NULL; }
  grace_ir *out = NULL;
  return ir_rw_finish(&rw, &out) == GRACE_OK ? out : NULL;
}

static int draws_random(const grace_ir *ir) {
  for (int i = 0; i < ir->ninst; i++) if (ir_inst_random(ir, i)) return 1;
  return 0;
}

int ir_inst_random(const grace_ir *ir, int i) {
  int op = ir->insts[i].op;
  if (op == GRACE_OP_RAND || op == GRACE_OP_RANDN || op == GRACE_OP_RANDINT) return 1;
  return ir_is_region(op) && ir_region_random(ir, i);
}

int ir_region_random(const grace_ir *ir, int i) {
  const ir_inst *k = &ir->insts[i];
  return draws_random(ir->subs[k->sub]) || draws_random(ir->subs[k->sub + 1]);
}

/* ---- execution ---- */

/* Whether 0-d t is nonzero, read on the host (a device value is copied over: the host waits for it). */
static grace_status truth(grace_vm *vm, const char *op, const char *what, grace_tensor *t, int *out) {
  if (!t || t->ndim != 0)
    return vm_err(vm, GRACE_ESHAPE, "%s: %s must be a 0-d tensor, got %s", op, what, t ? VM_SHAPE(t) : "nothing");
  grace_tensor *h = t;
  if (t->storage->device != GRACE_CPU) {
    grace_status st = vm_to_host(vm, t, &h);
    if (st != GRACE_OK) return st;
  }
  double v = vm_load_f64(h->dtype, vm_ptr(h));
  *out = v != 0;   /* NaN is true, as Lua's and Python's truth of a NaN float */
  if (h != t) grace_tensor_release(h);
  return GRACE_OK;
}

/* Results that share storage with one of the region's inputs (a branch returned its argument, or a view of it)
 * are copied: the enclosing program may then treat every region result as a tensor of its own. */
static grace_status unalias(grace_vm *vm, int nin, grace_tensor *const *in, int nout, grace_tensor **res) {
  for (int r = 0; r < nout; r++) {
    int shared = 0;
    for (int j = 0; j < nin && !shared; j++) shared = in[j] && in[j]->storage == res[r]->storage;
    if (!shared) continue;
    grace_tensor *c = NULL;
    grace_status st = vm_route(vm, GRACE_OP_CLONE, 1, &res[r], NULL, 1, &c);
    if (st != GRACE_OK) return st;
    grace_tensor_release(res[r]);
    res[r] = c;
  }
  return GRACE_OK;
}

static grace_status exec_cond(grace_ir *ir, const ir_inst *k, grace_tensor *const *in, grace_tensor **res) {
  int p = 0;
  grace_status st = truth(ir->vm, "cond", "the predicate", in[0], &p);
  if (st != GRACE_OK) return st;
  grace_ir *sub = ir->subs[k->sub + (p ? 0 : 1)];
  if ((st = ir_exec_sub(sub, k->nin - 1, in + 1, k->nout, res)) != GRACE_OK) return st;
  return unalias(ir->vm, k->nin, in, k->nout, res);
}

static grace_status exec_while(grace_ir *ir, const ir_inst *k, grace_tensor *const *in, grace_tensor **res) {
  grace_vm *vm = ir->vm;
  grace_ir *cond = ir->subs[k->sub], *body = ir->subs[k->sub + 1];
  int n = k->nin, ns = k->nout;
  grace_tensor *cur[64], *next[64];
  for (int j = 0; j < n; j++) { cur[j] = in[j]; grace_tensor_retain(cur[j]); }
  grace_status st = GRACE_OK;
  for (int64_t it = 0;; it++) {
    grace_tensor *c = NULL;
    int go = 0;
    if ((st = ir_exec_sub(cond, n, cur, 1, &c)) == GRACE_OK) st = truth(vm, "while_loop", "the cond result", c, &go);
    grace_tensor_release(c);
    if (st != GRACE_OK || !go) break;
    if (k->attrs.i0 > 0 && it >= k->attrs.i0) {
      st = vm_err(vm, GRACE_EARG, "while_loop: the loop is still running after max_iters=%lld iterations",
                  (long long)k->attrs.i0);
      break;
    }
    if ((st = ir_exec_sub(body, n, cur, ns, next)) != GRACE_OK) break;
    for (int j = 0; j < ns; j++) { grace_tensor_release(cur[j]); cur[j] = next[j]; }
  }
  for (int j = ns; j < n; j++) grace_tensor_release(cur[j]);
  if (st == GRACE_OK) {
    for (int j = 0; j < ns; j++) res[j] = cur[j];
    return unalias(vm, n, in, ns, res);
  }
  for (int j = 0; j < ns; j++) grace_tensor_release(cur[j]);
  return st;
}

grace_status ir_region_exec(grace_ir *ir, int i, grace_tensor **val) {
  const ir_inst *k = &ir->insts[i];
  grace_tensor *in[64];
  for (int j = 0; j < k->nin && j < 64; j++) in[j] = val[ir->args[k->first_arg + j]];
  grace_tensor **res = &val[k->first_result];
  for (int r = 0; r < k->nout; r++) res[r] = NULL;
  grace_status st = k->op == IR_OP_COND ? exec_cond(ir, k, in, res) : exec_while(ir, k, in, res);
  if (st != GRACE_OK)
    for (int r = 0; r < k->nout; r++) { grace_tensor_release(res[r]); res[r] = NULL; }
  return st;
}
