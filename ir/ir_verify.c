/* ir_verify.c: the IR verifier, run after every pass in tests: SSA order, arity, input numbering,
 * outputs, symbols in range, and that every result's type is the one type inference gives for its op and inputs. */
#include <stdio.h>
#include <string.h>
#include "ir/ir.h"
#include "ir/ir_sym.h"
#include "base/base.h"

grace_status grace_ir_verify(grace_ir *ir) {
  if (!ir) return GRACE_EARG;
  grace_vm *vm = ir->vm;
  int seen_in[256] = {0}, seen_sc[256] = {0};
  for (int v = 0; v < ir->nval; v++) {   /* a parsed type's sizes are the text's */
    const ir_type *t = &ir->vals[v].type;
    if ((unsigned)t->dtype >= GRACE_NDTYPES) return grace_set_error(vm, GRACE_EARG, "verify: %%%d has an invalid dtype", v);
    grace_status st = vm_check_shape(vm, "verify", t->ndim, t->sizes);
    if (st != GRACE_OK) return st;
    int input = ir->vals[v].inst >= 0 && ir->vals[v].inst < ir->ninst && ir->insts[ir->vals[v].inst].op == IR_OP_INPUT;
    for (int d = 0; d < t->ndim; d++) {
      int32_t k = t->sym[d];
      if (k < 0 || k > ir->nsyms || (k && input && ir->syms[k - 1].base))
        return grace_set_error(vm, GRACE_EARG, "verify: %%%d has symbol s%d in dim %d, which is not a %s symbol of the "
                               "program (it has %d)", v, (int)k, d, input ? "free" : "declared", ir->nsyms);
    }
  }
  for (int32_t k = 1; k <= ir->nsyms; k++) {
    const ir_sym *s = &ir->syms[k - 1];
    if (s->base < 0 || s->base >= k || s->same < 0 || s->same >= k || (s->base && s->mul < 1))
      return grace_set_error(vm, GRACE_EARG, "verify: symbol s%d refers to a later symbol or has a bad factor", (int)k);
  }
  if (ir->nsyms) {   /* every size a symbol stands for comes from an input's size */
    size_t bbytes = (size_t)ir->nsyms + 1;
    unsigned char *bound = vm_alloc(vm, bbytes);
    if (!bound) return grace_set_error(vm, GRACE_ENOMEM, "verify: out of host memory");
    memset(bound, 0, bbytes);
    for (int v = 0; v < ir->nval; v++)
      if (ir->vals[v].inst >= 0 && ir->vals[v].inst < ir->ninst && ir->insts[ir->vals[v].inst].op == IR_OP_INPUT)
        for (int d = 0; d < ir->vals[v].type.ndim; d++)
          if (ir->vals[v].type.sym[d]) bound[ir_sym_root(ir, ir->vals[v].type.sym[d])] = 1;
    for (int v = 0; v < ir->nval; v++)
      for (int d = 0; d < ir->vals[v].type.ndim; d++) {
        int32_t k = ir->vals[v].type.sym[d];
        if (k && !bound[ir_sym_root(ir, k)]) {
          vm_free(vm, bound, bbytes);
          return grace_set_error(vm, GRACE_EARG, "verify: %%%d dim %d has symbol s%d, which no input's size gives", v, d,
                                 (int)k);
        }
      }
    vm_free(vm, bound, bbytes);
  }
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    const char *name = ir_op_name(k->op);
    const char *loc = k->loc >= 0 ? ir->locs[k->loc] : "";
    if (k->op < 0 || k->op >= IR_NOPS) return grace_set_error(vm, GRACE_EINTERNAL, "verify: inst %d has invalid op %d", i, k->op);
    for (int j = 0; j < k->nin; j++) {
      int32_t v = ir->args[k->first_arg + j];
      if (v >= k->first_result || v < -1)
        return grace_set_error(vm, GRACE_EINTERNAL, "verify: %s (%%%d) uses %%%d before it is defined %s", name,
                               k->first_result, v, loc);
    }
    if (ir_is_region(k->op)) {
      grace_status st = ir_region_verify(ir, i);
      if (st != GRACE_OK) return st;
      continue;
    }
    if (k->op >= GRACE_NOPS) {
      int *seen = k->op == IR_OP_INPUT ? seen_in : k->op == IR_OP_SCALAR ? seen_sc : NULL;
      if (k->nin || k->nout != 1) return grace_set_error(vm, GRACE_EINTERNAL, "verify: %s takes no inputs and gives one value", name);
      if (seen) {
        int lim = k->op == IR_OP_INPUT ? ir->ninputs : ir->nscalars;
        if (k->input_index < 0 || k->input_index >= lim || k->input_index >= 256 || seen[k->input_index]++)
          return grace_set_error(vm, GRACE_EINTERNAL, "verify: %s #%d is out of range or repeated", name, k->input_index);
      }
      if (k->op == IR_OP_CONST && (k->input_index < 0 || k->input_index >= ir->nconst))
        return grace_set_error(vm, GRACE_EINTERNAL, "verify: const #%d has no captured tensor", k->input_index);
      continue;
    }
    int want = grace_op_ninputs((grace_op)k->op);
    if (want >= 0 ? k->nin != want : k->nin < 1)
      return grace_set_error(vm, GRACE_EINTERNAL, "verify: %s (%%%d) has %d inputs, the op takes %d %s", name,
                             k->first_result, k->nin, want, loc);
    if (k->nout < 1 || k->nout > ir_op_results(k->op, &k->attrs))
      return grace_set_error(vm, GRACE_EINTERNAL, "verify: %s (%%%d) has %d results", name, k->first_result, k->nout);
    const ir_type *small[64], **in = small;   /* a cat of many takes more than 64 */
    size_t bytes = sizeof *in * (size_t)k->nin;
    if (k->nin > 64 && !(in = vm_alloc(vm, bytes)))
      return grace_set_error(vm, GRACE_ENOMEM, "verify: out of host memory for %d inputs", k->nin);
    for (int j = 0; j < k->nin; j++) {
      int32_t v = ir->args[k->first_arg + j];
      in[j] = v < 0 ? NULL : &ir->vals[v].type;
    }
    ir_type res[2];
    grace_status st = ir_infer(vm, k->op, k->nin, in, &k->attrs, k->nout, res);
    if (in != small) vm_free(vm, in, bytes);
    if (st != GRACE_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", grace_last_error(vm));
      return grace_set_error(vm, GRACE_EINTERNAL, "verify: %%%d: %s %s", k->first_result, msg, loc);
    }
    for (int r = 0; r < k->nout; r++) {
      const ir_type *got = &ir->vals[k->first_result + r].type;
      if (!ir_type_equal(got, &res[r], 0)) {
        char a[160], b[160];
        return grace_set_error(vm, GRACE_EINTERNAL, "verify: %s (%%%d) is typed %s, inference gives %s %s", name,
                               k->first_result + r, ir_type_str(got, a, sizeof a), ir_type_str(&res[r], b, sizeof b), loc);
      }
    }
  }
  for (int i = 0; i < ir->ninputs && i < 256; i++)
    if (!seen_in[i]) return grace_set_error(vm, GRACE_EINTERNAL, "verify: input #%d is never declared", i);
  for (int i = 0; i < ir->nwrite; i++) {
    const ir_type *t = &ir->vals[ir->writes[i].target].type, *v = &ir->vals[ir->writes[i].value].type;
    if (!ir_type_equal(t, v, 0)) {
      char a[160], b[160];
      return grace_set_error(vm, GRACE_EINTERNAL, "verify: write of %s into %%%d of type %s", ir_type_str(v, a, sizeof a),
                             ir->writes[i].target, ir_type_str(t, b, sizeof b));
    }
  }
  for (int i = 0; i < ir->nout; i++)
    if (ir->outputs[i] < 0 || ir->outputs[i] >= ir->nval)
      return grace_set_error(vm, GRACE_EINTERNAL, "verify: output %d is not a value", i);
  return GRACE_OK;
}
