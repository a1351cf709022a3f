/* ir_hoist.c: the `hoist` pass: a tensor computed from no input at all (a causal mask from ones():triu(),
 * an arange of positions) is the same on every call, so it is computed once, when the pass runs, and held
 * as a constant of the program. Random ops are never hoisted (each call draws anew), and nor is anything
 * reading an input, a capture (its contents may change) or a dynamic scalar. */
#include <string.h>
#include "ir/ir_pass.h"

#define HOIST_MAX_BYTES (64 << 20)   /* constants bigger than this stay computed per call */

static int hoistable_op(int op) {
  if (op >= GRACE_NOPS) return op == IR_OP_LITERAL;
  return op != GRACE_OP_RAND && op != GRACE_OP_RANDN && op != GRACE_OP_RANDINT && op != GRACE_OP_TO_DEVICE;
}

grace_status ir_pass_hoist(grace_ir *src, grace_ir **out) {
  grace_vm *vm = src->vm;
  size_t nv = (size_t)(src->nval ? src->nval : 1);
  grace_tensor **val = grace_realloc(vm, NULL, 0, sizeof *val * nv);   /* computed constant values */
  if (!val) return grace_set_error(vm, GRACE_ENOMEM, "hoist: out of host memory");
  memset(val, 0, sizeof *val * nv);
  ir_rewriter rw;
  grace_status st = ir_rw_begin(&rw, src);
  if (st != GRACE_OK) { grace_realloc(vm, val, sizeof *val * nv, 0); return st; }
  vm_trace_hold(vm, 1);   /* computing here is not part of any trace */
  for (int k = 0; k < src->ninst && st == GRACE_OK; k++) {
    const ir_inst *in = &src->insts[k];
    const ir_type *ty = &src->vals[in->first_result].type;
    int ok = hoistable_op(in->op) && in->nout == 1;
    for (int j = 0; j < in->nin && ok; j++) {
      int32_t a = src->args[in->first_arg + j];
      ok = a < 0 || val[a] != NULL;
    }
    int64_t bytes = (int64_t)grace_dtype_size(ty->dtype);
    for (int d = 0; d < ty->ndim; d++) bytes *= ty->sizes[d];
    if (ok && in->op == IR_OP_LITERAL) {   /* a literal is a constant input to hoisted ops, kept as it is */
      st = in->iliteral && ty->dtype == GRACE_INT64 ? grace_tensor_scalar_int(vm, in->iliteral, &val[in->first_result])
           : ty->dtype == GRACE_INT64 ? grace_tensor_scalar_int(vm, (int64_t)in->literal, &val[in->first_result])
                                      : grace_tensor_scalar(vm, in->literal, 0, &val[in->first_result]);
      if (st == GRACE_OK) st = ir_rw_copy(&rw, k);
      continue;
    }
    if (!ok || bytes > HOIST_MAX_BYTES || in->op >= GRACE_NOPS) { st = ir_rw_copy(&rw, k); continue; }
    grace_tensor *args[64], *res = NULL;
    for (int j = 0; j < in->nin; j++) {
      int32_t a = src->args[in->first_arg + j];
      args[j] = a < 0 ? NULL : val[a];
    }
    grace_op op = (grace_op)in->op;
    if (grace_op_kind(op) == GRACE_KIND_INPLACE) {   /* functional: update a copy */
      st = vm_route(vm, GRACE_OP_CLONE, 1, &args[0], NULL, 1, &res);
      args[0] = res;
      if (st == GRACE_OK) st = vm_route(vm, op, in->nin, args, &in->attrs, 0, NULL);
    } else
      st = vm_route(vm, op, in->nin, args, &in->attrs, 1, &res);
    if (st != GRACE_OK) {   /* eager would fail here too: leave the op to fail at run time as it would */
      grace_tensor_release(res);
      st = ir_rw_copy(&rw, k);
      continue;
    }
    val[in->first_result] = res;
    /* the constant replaces the op; views of it stay views of it */
    int32_t c;
    grace_ir_set_location(rw.dst, in->loc >= 0 ? src->locs[in->loc] : NULL);
    st = grace_ir_const(rw.dst, res, &c);
    if (st == GRACE_OK) {
      rw.dst->consts[rw.dst->nconst - 1].local = 1;
      ir_rw_set(&rw, in->first_result, c);
    }
  }
  vm_trace_hold(vm, -1);
  /* a constant returned is a fresh tensor on every eager call: it is copied */
  for (int i = 0; i < src->nout && st == GRACE_OK; i++) {
    int32_t v = ir_rw_value(&rw, src->outputs[i]), c;
    const ir_inst *d = v >= 0 ? &rw.dst->insts[rw.dst->vals[v].inst] : NULL;
    if (!d || d->op != IR_OP_CONST || !rw.dst->consts[d->input_index].local) continue;
    if ((st = grace_ir_op(rw.dst, GRACE_OP_CLONE, 1, &v, NULL, 1, &c)) == GRACE_OK) ir_rw_set(&rw, src->outputs[i], c);
  }
  for (size_t i = 0; i < nv; i++) grace_tensor_release(val[i]);
  grace_realloc(vm, val, sizeof *val * nv, 0);
  if (st != GRACE_OK) { if (rw.dst) ir_rw_abort(&rw); return st; }
  return ir_rw_finish(&rw, out);
}
