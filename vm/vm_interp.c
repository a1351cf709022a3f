/* vm_interp.c: grace_ir_run: a verified program handed to the backend of the device its inputs and captured
 * tensors live on (cpu/cpu_interp.c, gpu/gpu_exec.c). */
#include "ir/ir_exec.h"

/* Whether the program runs on the device: its inputs or captures live there. */
static int on_device(const grace_ir *ir) {
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    if ((k->op == IR_OP_INPUT || k->op == IR_OP_CONST) && ir->vals[k->first_result].type.device == GRACE_CUDA) return 1;
  }
  return 0;
}

grace_status grace_ir_run(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out) {
  for (int i = 0; i < nout; i++) out[i] = NULL;
  grace_status cs = ir_exec_check_call(ir, nin, nout);
  if (cs != GRACE_OK) return cs;
  return ir->vm->backend[on_device(ir) ? GRACE_CUDA : GRACE_CPU]->run_program(ir, nin, in, nout, out);
}
