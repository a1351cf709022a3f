/* ir_exec.c: what every executor of an IR program shares: checking a call (argument counts, captured tensors'
 * versions), running one instruction alone (inputs, scalars, captures and literals bound; ops computed through
 * vm_route, in-place ops on a copy since the IR is functional), and writing in-place updates back. */
#include <stdio.h>
#include <string.h>
#include "ir/ir_exec.h"

static int type_matches(const grace_ir *ir, const ir_type *t, const grace_tensor *x) {
  int lifted = ir->host_numbers_lifted && t->device == GRACE_CPU && t->ndim == 0 && x->storage->device == GRACE_CUDA;
  if (t->dtype != x->dtype || t->ndim != x->ndim || (t->device != x->storage->device && !lifted)) return 0;
  for (int d = 0; d < t->ndim; d++)   /* a symbolic size: ir_sym_bind checked the call's sizes */
    if (!t->sym[d] && t->sizes[d] != x->sizes[d]) return 0;
  return 1;
}

static grace_status input_error(grace_vm *vm, const char *what, int index, const ir_type *t, const grace_tensor *x) {
  char want[160];
  return vm_err(vm, GRACE_ESHAPE, "run: %s %d must be %s, got %s %s", what, index + vm->index_base,
                ir_type_str(t, want, sizeof want), grace_dtype_name(x->dtype), VM_SHAPE(x));
}

/* Marks in anc[] the instructions whose results instruction i depends on, directly or not (anc zeroed first). */
static void ancestors(const grace_ir *ir, int i, int8_t *anc, int32_t *stack) {
  memset(anc, 0, (size_t)(ir->ninst ? ir->ninst : 1));
  int sp = 0;
  stack[sp++] = i;
  while (sp > 0) {
    const ir_inst *k = &ir->insts[stack[--sp]];
    for (int a = 0; a < k->nin; a++) {
      int32_t v = ir->args[k->first_arg + a];
      if (v < 0 || anc[ir->vals[v].inst]) continue;
      anc[ir->vals[v].inst] = 1;
      stack[sp++] = ir->vals[v].inst;
    }
  }
}

/* Whether in-place instruction i may write the tensor of r's versions itself: every reader of a value holding its
 * contents from before i (derived[]: earlier versions and views of them) is i or something i depends on, so it runs
 * before i whatever order the executor picks among independent groups, and none of them is returned. */
static int safe_in_place(const grace_ir *ir, int i, const int8_t *derived, int8_t *anc, int32_t *stack) {
  const ir_inst *ki = &ir->insts[i];
  ancestors(ir, i, anc, stack);
  for (int j = 0; j < ir->ninst; j++) {
    const ir_inst *k = &ir->insts[j];
    if (j == i || anc[j]) continue;
    for (int a = 0; a < k->nin; a++) {
      int32_t v = ir->args[k->first_arg + a];
      if (v >= 0 && v < ki->first_result && derived[v]) return 0;
    }
  }
  for (int o = 0; o < ir->nout; o++) if (ir->outputs[o] < ki->first_result && derived[ir->outputs[o]]) return 0;
  return 1;
}

/* Which in-place instructions may write the input or capture itself (ir->direct): for each written target, when
 * every in-place op on it applies to its latest version (no view of it is written) and is safe (above), the ops run
 * on the tensor itself, as eager runs them: no copy of the state is made, the version counter advances once per op,
 * and the write-back has nothing left to copy. Otherwise each op updates a copy and the write-back copies it in. */
static int8_t *direct_plan(grace_ir *ir) {
  grace_vm *vm = ir->vm;
  size_t ni = (size_t)(ir->ninst ? ir->ninst : 1), nv = (size_t)(ir->nval ? ir->nval : 1);
  if (ir->direct && ir->ndirect == (int)ni) return ir->direct;
  if (ir->direct) grace_realloc(vm, ir->direct, (size_t)ir->ndirect, 0);
  ir->ndirect = (int)ni;
  ir->direct = grace_realloc(vm, NULL, 0, ni);
  int8_t *derived = grace_realloc(vm, NULL, 0, nv * 2 + ni);
  int32_t *stack = grace_realloc(vm, NULL, 0, sizeof *stack * ni);
  if (!ir->direct || !derived || !stack) {   /* no plan: every in-place op on a copy, as before */
    grace_realloc(vm, derived, nv * 2 + ni, 0);
    grace_realloc(vm, stack, sizeof *stack * ni, 0);
    if (!ir->direct) ir->ndirect = 0;
    else memset(ir->direct, 0, ni);
    return ir->direct;
  }
  memset(ir->direct, 0, ni);
  int8_t *version = derived + nv, *anc = derived + 2 * nv;
  for (int w = 0; w < ir->nwrite; w++) {
    int32_t r = ir->writes[w].target;
    memset(derived, 0, nv * 2);
    derived[r] = version[r] = 1;
    int ok = 1;
    for (int i = ir->vals[r].inst + 1; i < ir->ninst && ok; i++) {
      const ir_inst *k = &ir->insts[i];
      int32_t a0 = k->nin > 0 ? ir->args[k->first_arg] : -1;
      int kind = k->op < GRACE_NOPS ? (int)grace_op_kind((grace_op)k->op) : -1;
      if (a0 < 0 || !derived[a0] || (kind != GRACE_KIND_VIEW && kind != GRACE_KIND_INPLACE)) continue;
      if (kind == GRACE_KIND_INPLACE) ok = version[a0] && safe_in_place(ir, i, derived, anc, stack);
      for (int x = 0; x < k->nout; x++) {
        derived[k->first_result + x] = 1;
        version[k->first_result + x] = kind == GRACE_KIND_INPLACE;
      }
    }
    if (!ok || !version[ir->writes[w].value]) continue;
    for (int i = 0; i < ir->ninst; i++) {
      const ir_inst *k = &ir->insts[i];
      if (k->op < GRACE_NOPS && k->nin > 0 && grace_op_kind((grace_op)k->op) == GRACE_KIND_INPLACE &&
          ir->args[k->first_arg] >= 0 && version[ir->args[k->first_arg]])
        ir->direct[i] = 1;
    }
  }
  grace_realloc(vm, derived, nv * 2 + ni, 0);
  grace_realloc(vm, stack, sizeof *stack * ni, 0);
  return ir->direct;
}

int ir_exec_direct(grace_ir *ir, int i) {
  if (i < 0 || i >= ir->ninst || ir->insts[i].op >= GRACE_NOPS ||
      grace_op_kind((grace_op)ir->insts[i].op) != GRACE_KIND_INPLACE)
    return 0;
  const int8_t *direct = direct_plan(ir);
  return direct && i < ir->ndirect && direct[i];
}

/* Runs instruction k alone into val[]. */
grace_status ir_exec_inst(grace_ir *ir, int i, grace_tensor *const *in, grace_tensor **val) {
  grace_vm *vm = ir->vm;
  const ir_inst *k = &ir->insts[i];
  const ir_type *t0 = &ir->vals[k->first_result].type;
  grace_tensor **res = &val[k->first_result];
  grace_status st = GRACE_OK;
  switch (k->op) {
  case IR_OP_INPUT: {
    grace_tensor *x = in[k->input_index];
    if (!x || !type_matches(ir, t0, x))
      return x ? input_error(vm, "input", k->input_index, t0, x)
               : vm_err(vm, GRACE_EARG, "run: input %d is missing", k->input_index + vm->index_base);
    grace_tensor_retain(x);
    *res = x;
    return GRACE_OK;
  }
  case IR_OP_SCALAR: {
    grace_tensor *x = in[ir->ninputs + k->input_index];
    if (!x || x->ndim != 0) return vm_err(vm, GRACE_EARG, "run: scalar input %d must be a 0-d tensor", k->input_index + vm->index_base);
    if (x->dtype == t0->dtype) { grace_tensor_retain(x); *res = x; return GRACE_OK; }
    grace_attrs a = {.has_dtype = 1, .dtype = t0->dtype};
    return vm_route(vm, GRACE_OP_CAST, 1, &x, &a, 1, res);
  }
  case IR_OP_CONST:
    grace_tensor_retain(ir->consts[k->input_index].t);
    *res = ir->consts[k->input_index].t;
    return GRACE_OK;
  case IR_OP_COND: case IR_OP_WHILE:
    return ir_region_exec(ir, i, val);
  case IR_OP_LITERAL:
    return t0->dtype == GRACE_INT64 ? grace_tensor_scalar_int(vm, k->iliteral, res) : grace_tensor_scalar(vm, k->literal, 0, res);
  default: {
    grace_tensor *args[64];
    for (int j = 0; j < k->nin && j < 64; j++) {
      int32_t v = ir->args[k->first_arg + j];
      args[j] = v < 0 ? NULL : val[v];
    }
    const int8_t *direct = grace_op_kind((grace_op)k->op) == GRACE_KIND_INPLACE ? direct_plan(ir) : NULL;
    if (direct && direct[i] && args[0]) {
      /* on the input or capture itself (direct_plan says when that is safe): its version advances as eagerly */
      st = vm_route(vm, (grace_op)k->op, k->nin, args, &k->attrs, 0, NULL);
      if (st == GRACE_OK) { grace_tensor_retain(args[0]); *res = args[0]; }
      return st;
    }
    if (grace_op_kind((grace_op)k->op) == GRACE_KIND_INPLACE) {
      /* functional form: the result is an updated copy; the caller writes it back where it belongs */
      grace_tensor *copy = NULL;
      st = vm_route(vm, GRACE_OP_CLONE, 1, &args[0], NULL, 1, &copy);
      if (st != GRACE_OK) return st;
      args[0] = copy;
      st = vm_route(vm, (grace_op)k->op, k->nin, args, &k->attrs, 0, NULL);
      if (st == GRACE_OK) *res = copy;
      else grace_tensor_release(copy);
      return st;
    }
    return vm_route(vm, (grace_op)k->op, k->nin, args, &k->attrs, k->nout, res);
  }
  }
}

grace_device ir_exec_device(const grace_ir *ir) {
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    if ((k->op == IR_OP_INPUT || k->op == IR_OP_CONST) && ir->vals[k->first_result].type.device == GRACE_CUDA) return GRACE_CUDA;
  }
  return GRACE_CPU;
}

/* Through the backend table, as vm/ is above ir/: a region's sub-program runs as grace_ir_run would run it. */
grace_status ir_exec_sub(grace_ir *sub, int nin, grace_tensor *const *in, int nout, grace_tensor **out) {
  for (int i = 0; i < nout; i++) out[i] = NULL;
  grace_status st = ir_exec_check_call(sub, nin, nout);
  if (st != GRACE_OK) return st;
  return sub->vm->backend[ir_exec_device(sub)]->run_program(sub, nin, in, nout, out);
}

/* What an executor indexes with, in range: an IR made by the builder is so by construction and a parsed one was
 * verified, but either may have been changed since; a wrong index here reads past the inputs or the values. */
static grace_status check_indices(grace_ir *ir) {
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    int lim = k->op == IR_OP_INPUT ? ir->ninputs : k->op == IR_OP_SCALAR ? ir->nscalars
            : k->op == IR_OP_CONST ? ir->nconst : -1;
    if (k->nin < 0 || k->nout < 0 || k->first_arg < 0 || k->first_arg > ir->narg - k->nin || k->first_result < 0 ||
        k->first_result > ir->nval - k->nout || (lim >= 0 && (k->input_index < 0 || k->input_index >= lim)))
      return vm_err(ir->vm, GRACE_EARG, "run: '%s': instruction %d refers past the program's inputs or values "
                    "(grace_ir_verify says more)", ir->name, i);
    for (int j = 0; j < k->nin; j++)
      if (ir->args[k->first_arg + j] < -1 || ir->args[k->first_arg + j] >= k->first_result)
        return vm_err(ir->vm, GRACE_EARG, "run: '%s': instruction %d uses a value not defined before it", ir->name, i);
  }
  for (int i = 0; i < ir->nout; i++)
    if (ir->outputs[i] < 0 || ir->outputs[i] >= ir->nval)
      return vm_err(ir->vm, GRACE_EARG, "run: '%s': output %d is not a value", ir->name, i);
  return GRACE_OK;
}

grace_status ir_exec_check_call(grace_ir *ir, int nin, int nout) {
  grace_vm *vm = ir->vm;
  if (nin < 0 || nout < 0) return vm_err(vm, GRACE_EARG, "run: negative counts (%d inputs, %d outputs)", nin, nout);
  grace_status st = check_indices(ir);
  if (st != GRACE_OK) return st;
  if (nin != ir->ninputs + ir->nscalars)
    return vm_err(vm, GRACE_EARG, "run: '%s' takes %d tensor inputs and %d scalars, got %d values", ir->name, ir->ninputs,
                  ir->nscalars, nin);
  if (nout > ir->nout) return vm_err(vm, GRACE_EARG, "run: '%s' has %d outputs, %d requested", ir->name, ir->nout, nout);
  for (int i = 0; i < ir->nconst; i++) {
    const ir_const *c = &ir->consts[i];
    if (!c->t) return vm_err(vm, GRACE_EARG, "run: captured tensor %d of '%s' is not bound", i, ir->name);
    if (c->t->storage->version != c->version)
      return vm_err(vm, GRACE_EARG, "run: captured tensor %d of '%s' was modified since it was captured (stale: version %llu, "
                    "now %llu)", i, ir->name, (unsigned long long)c->version, (unsigned long long)c->t->storage->version);
  }
  return GRACE_OK;
}

/* Writes back in-place updates; a captured tensor's new version is the one the IR expects next time. A run
 * that failed part way (st) writes what eager execution would have written before the failing op. */
grace_status ir_exec_write_back(grace_ir *ir, grace_tensor **val, grace_status st) {
  grace_vm *vm = ir->vm;
  grace_status failed = st;
  char msg[VM_ERRLEN];
  if (failed != GRACE_OK) snprintf(msg, sizeof msg, "%s", vm->err);
  for (int i = 0; i < ir->nwrite; i++) {
    int32_t target = ir->writes[i].target, value = ir->writes[i].value, bumps = ir->writes[i].bumps;
    if (failed != GRACE_OK) {   /* the latest version of target computed before the failure */
      value = -1;
      for (int v = 0; v < ir->nval; v++)
        if (ir->vals[v].root == target && val[v] && (value < 0 || v > value)) value = v;
      if (value < 0) continue;
      bumps = ir->vals[value].nwrites;
    }
    grace_tensor *dst = val[target], *src = val[value];
    const ir_inst *tk = &ir->insts[ir->vals[target].inst];
    if (dst && dst == src && tk->op == IR_OP_CONST)   /* written in place: the capture's version is its own */
      ir->consts[tk->input_index].version = dst->storage->version;
    if (!dst || !src || dst == src) continue;
    grace_status ws = vm_route(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){dst, src}, NULL, 0, NULL);
    if (ws == GRACE_OK) dst->storage->version += (uint64_t)(bumps > 0 ? bumps - 1 : 0);   /* as many as eager made */
    const ir_inst *k = &ir->insts[ir->vals[target].inst];
    if (ws == GRACE_OK && k->op == IR_OP_CONST) ir->consts[k->input_index].version = dst->storage->version;
    if (st == GRACE_OK) st = ws;
  }
  if (failed != GRACE_OK) vm_err(vm, failed, "%s", msg);
  return st;
}
