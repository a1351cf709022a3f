/* vm_interp.c: grace_ir_run: a verified program handed to the backend of the device its inputs and captured
 * tensors live on (cpu/cpu_interp.c, gpu/gpu_exec.c). */
#include "ir/ir_exec.h"

grace_status grace_ir_run(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out) {
  if (!ir) return GRACE_EARG;
  if ((nin > 0 && !in) || (nout > 0 && !out)) return vm_err(ir->vm, GRACE_EARG, "run: a NULL argument");
  for (int i = 0; i < nout; i++) out[i] = NULL;
  grace_status cs = ir_exec_check_call(ir, nin, nout);
  if (cs != GRACE_OK) return cs;
  return ir->vm->backend[ir_exec_device(ir)]->run_program(ir, nin, in, nout, out);
}
