/* vm_interp.c: runs an IR function on the CPU one op at a time through grace_run: the reference every
 * compiled form is checked against, and the executor for compiled functions until fused code exists.
 * Inputs are checked against their declared types, captured tensors against their captured version;
 * intermediates are released after their last use. */
#include <stdio.h>
#include "ir/ir.h"
#include "vm/vm.h"

static int type_matches(const ir_type *t, const grace_tensor *x) {
  if (t->dtype != x->dtype || t->ndim != x->ndim || t->device != x->storage->device) return 0;
  for (int d = 0; d < t->ndim; d++)
    if (t->sizes[d] != x->sizes[d]) return 0;
  return 1;
}

static grace_status input_error(grace_vm *vm, const char *what, int index, const ir_type *t, const grace_tensor *x) {
  char want[160];
  return vm_err(vm, GRACE_ESHAPE, "run: %s %d must be %s, got %s %s", what, index + vm->index_base,
                ir_type_str(t, want, sizeof want), grace_dtype_name(x->dtype), VM_SHAPE(x));
}

grace_status grace_ir_run(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out) {
  grace_vm *vm = ir->vm;
  for (int i = 0; i < nout; i++) out[i] = NULL;
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
  size_t vbytes = sizeof(grace_tensor *) * (size_t)ir->nval, lbytes = sizeof(int32_t) * (size_t)ir->nval;
  grace_tensor **val = vm_calloc(vm, vbytes);
  int32_t *last = vm_alloc(vm, lbytes);
  if (!val || !last) {
    vm_free(vm, val, vbytes); vm_free(vm, last, lbytes);
    return vm_err(vm, GRACE_ENOMEM, "run: out of host memory");
  }
  /* last use of each value: outputs live to the end */
  for (int v = 0; v < ir->nval; v++) last[v] = ir->vals[v].inst;
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    for (int j = 0; j < k->nin; j++) if (ir->args[k->first_arg + j] >= 0) last[ir->args[k->first_arg + j]] = i;
  }
  for (int i = 0; i < ir->nout; i++) last[ir->outputs[i]] = ir->ninst;
  for (int i = 0; i < ir->nwrite; i++) last[ir->writes[i].value] = last[ir->writes[i].target] = ir->ninst;
  for (int v = 0; v < ir->nval; v++) if (ir->vals[v].root >= 0) last[v] = ir->ninst;   /* for a failed run */

  grace_status st = GRACE_OK;
  for (int i = 0; i < ir->ninst && st == GRACE_OK; i++) {
    const ir_inst *k = &ir->insts[i];
    const ir_type *t0 = &ir->vals[k->first_result].type;
    grace_tensor **res = &val[k->first_result];
    switch (k->op) {
    case IR_OP_INPUT: {
      grace_tensor *x = in[k->input_index];
      if (!x || !type_matches(t0, x)) { st = x ? input_error(vm, "input", k->input_index, t0, x) : vm_err(vm, GRACE_EARG, "run: input %d is missing", k->input_index + vm->index_base); break; }
      grace_tensor_retain(x);
      *res = x;
      break;
    }
    case IR_OP_SCALAR: {
      grace_tensor *x = in[ir->ninputs + k->input_index];
      if (!x || x->ndim != 0) { st = vm_err(vm, GRACE_EARG, "run: scalar input %d must be a 0-d tensor", k->input_index + vm->index_base); break; }
      if (x->dtype == t0->dtype) { grace_tensor_retain(x); *res = x; break; }
      grace_attrs a = {.has_dtype = 1, .dtype = t0->dtype};
      st = grace_run(vm, GRACE_OP_CAST, 1, &x, &a, 1, res);
      break;
    }
    case IR_OP_CONST:
      grace_tensor_retain(ir->consts[k->input_index].t);
      *res = ir->consts[k->input_index].t;
      break;
    case IR_OP_LITERAL:
      st = t0->dtype == GRACE_INT64 ? grace_tensor_scalar_int(vm, k->iliteral, res)
                                    : grace_tensor_scalar(vm, k->literal, 0, res);
      break;
    default: {
      grace_tensor *args[64];
      for (int j = 0; j < k->nin && j < 64; j++) {
        int32_t v = ir->args[k->first_arg + j];
        args[j] = v < 0 ? NULL : val[v];
      }
      if (grace_op_kind((grace_op)k->op) == GRACE_KIND_INPLACE) {
        /* functional form: the result is an updated copy; the caller writes it back where it belongs */
        grace_tensor *copy = NULL;
        st = grace_run(vm, GRACE_OP_CLONE, 1, &args[0], NULL, 1, &copy);
        if (st != GRACE_OK) break;
        args[0] = copy;
        st = grace_run(vm, (grace_op)k->op, k->nin, args, &k->attrs, 0, NULL);
        if (st == GRACE_OK) *res = copy;
        else grace_tensor_release(copy);
      } else
        st = grace_run(vm, (grace_op)k->op, k->nin, args, &k->attrs, k->nout, res);
      break;
    }
    }
    if (st != GRACE_OK) {
      if (k->loc >= 0) {
        char msg[VM_ERRLEN];
        snprintf(msg, sizeof msg, "%s", vm->err);
        vm_err(vm, st, "%s (traced at %s)", msg, ir->locs[k->loc]);
      }
      break;
    }
    for (int j = 0; j < k->nin; j++) {
      int32_t v = ir->args[k->first_arg + j];
      if (v >= 0 && last[v] == i) { grace_tensor_release(val[v]); val[v] = NULL; }
    }
    for (int r = 0; r < k->nout; r++)
      if (last[k->first_result + r] == i) { grace_tensor_release(val[k->first_result + r]); val[k->first_result + r] = NULL; }
  }
  /* writes back in-place updates; a captured tensor's new version is the one the IR expects next time. A run
   * that failed part way writes what eager execution would have written before the failing op. */
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
    if (!dst || !src || dst == src) continue;
    grace_status ws = grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){dst, src}, NULL, 0, NULL);
    if (ws == GRACE_OK) dst->storage->version += (uint64_t)(bumps > 0 ? bumps - 1 : 0);   /* as many as eager made */
    const ir_inst *k = &ir->insts[ir->vals[target].inst];
    if (ws == GRACE_OK && k->op == IR_OP_CONST) ir->consts[k->input_index].version = dst->storage->version;
    if (st == GRACE_OK) st = ws;
  }
  if (failed != GRACE_OK) vm_err(vm, failed, "%s", msg);
  if (st == GRACE_OK)
    for (int i = 0; i < nout; i++) { out[i] = val[ir->outputs[i]]; grace_tensor_retain(out[i]); }
  for (int v = 0; v < ir->nval; v++) grace_tensor_release(val[v]);
  vm_free(vm, val, vbytes);
  vm_free(vm, last, lbytes);
  return st;
}
