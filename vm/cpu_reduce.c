/* cpu_reduce.c: the CPU backend's reductions, scans, softmax, sort/topk and the norms. */
#include "vm/cpu_kernels.h"

grace_status cpu_reduce_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                          int nout, grace_tensor **out) {
  return vm_err(vm, GRACE_EUNSUPPORTED, "%s: not implemented on the CPU backend yet", grace_op_name(op));
}
