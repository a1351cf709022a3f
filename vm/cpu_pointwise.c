/* cpu_pointwise.c: the CPU backend's pointwise ops (unary, binary, compare, ternary), copies and fills. */
#include "vm/cpu_kernels.h"

grace_status cpu_pointwise_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                          int nout, grace_tensor **out) {
  return vm_err(vm, GRACE_EUNSUPPORTED, "%s: not implemented on the CPU backend yet", grace_op_name(op));
}

grace_status cpu_copy_into(grace_vm *vm, const char *op, grace_tensor *dst, const grace_tensor *src) {
  return vm_err(vm, GRACE_EUNSUPPORTED, "%s: copy not implemented yet", op);
}

grace_status cpu_contiguous(grace_vm *vm, const char *op, grace_tensor *src, grace_tensor **out) {
  return vm_err(vm, GRACE_EUNSUPPORTED, "%s: contiguous not implemented yet", op);
}
