/* cpu_backend.c: the CPU backend's table (base.h's vm_backend): ops by family of their kind, IR programs by
 * the interpreter (cpu_interp.c), storage in host memory through the VM's allocator. */
#include <string.h>
#include "cpu/cpu_kernels.h"

static cpu_op_fn cpu_family(grace_op op) {
  switch (op) {
  case GRACE_OP_COPY_: case GRACE_OP_FILL_: case GRACE_OP_CONTIGUOUS: case GRACE_OP_CLONE:
    return cpu_pointwise_run;
  case GRACE_OP_INDEX_COPY_: return cpu_shape_run;
  case GRACE_OP_MASKED_SELECT: case GRACE_OP_NONZERO: case GRACE_OP_INDEX_PUT_: return cpu_index_run;
  case GRACE_OP_ATTENTION: return cpu_attention_run;
  default: break;
  }
  switch (grace_op_kind(op)) {
  case GRACE_KIND_UNARY: case GRACE_KIND_BINARY: case GRACE_KIND_COMPARE: case GRACE_KIND_TERNARY:
    return cpu_pointwise_run;
  case GRACE_KIND_REDUCE: case GRACE_KIND_SCAN: case GRACE_KIND_NORM: return cpu_reduce_run;
  case GRACE_KIND_MATMUL: return cpu_matmul_run;
  case GRACE_KIND_VIEW: return vm_view_run;
  case GRACE_KIND_MOVE: return cpu_shape_run;
  case GRACE_KIND_CREATE: return cpu_create_run;
  default: return NULL;
  }
}

static grace_status cpu_run_op(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                               int nout, grace_tensor **out) {
  cpu_op_fn fn = cpu_family(op);
  if (!fn) return vm_err(vm, GRACE_EUNSUPPORTED, "%s: no CPU kernel", grace_op_name(op));
  return fn(vm, op, nin, in, a, nout, out);
}

static grace_status cpu_synchronize(grace_vm *vm) { return GRACE_OK; }

static grace_status cpu_storage_alloc(grace_vm *vm, size_t bytes, void **data) {
  *data = vm_alloc(vm, bytes);
  return *data ? GRACE_OK : vm_err(vm, GRACE_ENOMEM, "out of host memory allocating %zu bytes", bytes);
}

static void cpu_storage_free(grace_vm *vm, void *data, size_t bytes) { vm_free(vm, data, bytes); }

static grace_status cpu_to_host(grace_vm *vm, void *dst, const void *src, size_t bytes) {
  memcpy(dst, src, bytes);
  return GRACE_OK;
}

static void cpu_release(grace_vm *vm) { vm_pool_free(vm); }

const vm_backend cpu_backend = {
  .name = "cpu",
  .device = GRACE_CPU,
  .supports = NULL,
  .run_op = cpu_run_op,
  .run_program = cpu_ir_run,
  .synchronize = cpu_synchronize,
  .storage_alloc = cpu_storage_alloc,
  .storage_free = cpu_storage_free,
  .to_host = cpu_to_host,
  .release = cpu_release,
};
