/* cpu_backend.c: the CPU backend's table (base.h's vm_backend): ops by family of their kind, IR programs by
 * the interpreter (cpu_interp.c), storage in host memory through the VM's allocator. */
#include <string.h>
#include "cpu/cpu_kernels.h"
#include "ir/ir_check.h"
#include "ir/ir.h"

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

/* Results that are all empty need no kernel: made here, their kernel never runs. Kernels loop over outer dims and
 * divide by inner sizes, which a zero-size dim elsewhere makes loops over nothing (the 2^40 rows of a cumsum over
 * [2^40, 0]) or divisions by zero (softmax over dim 1 of [n, 0]). 1: done (or failed, status in *st). */
static int empty_results(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout,
                         grace_tensor **out, grace_status *st) {
  ir_type ty[4];
  switch (grace_op_kind(op)) {   /* views share storage, in-place ops return their input, creations loop over numel */
  case GRACE_KIND_VIEW: case GRACE_KIND_INPLACE: case GRACE_KIND_CREATE: return 0;
  default: break;
  }
  if (op == GRACE_OP_COPY_ || op == GRACE_OP_FILL_ || op == GRACE_OP_INDEX_COPY_ || op == GRACE_OP_INDEX_PUT_ ||
      nout < 1 || nout > 4)
    return 0;
  if (vm_infer_tensors(vm, op, nin, in, a, nout, ty) != GRACE_OK) return 0;   /* the kernel says the error */
  for (int i = 0; i < nout; i++) if (vm_numel(ty[i].ndim, ty[i].sizes) != 0) return 0;
  for (int i = 0; i < nout; i++) {
    out[i] = vm_tensor_new(vm, grace_op_name(op), ty[i].dtype, GRACE_CPU, ty[i].ndim, ty[i].sizes);
    if (!out[i]) {
      while (i > 0) { grace_tensor_release(out[--i]); out[i] = NULL; }
      *st = vm->status;
      return 1;
    }
  }
  *st = GRACE_OK;
  return 1;
}

static grace_status cpu_run_op(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                               int nout, grace_tensor **out) {
  cpu_op_fn fn = cpu_family(op);
  grace_status st;
  if (!fn) return vm_err(vm, GRACE_EUNSUPPORTED, "%s: no CPU kernel", grace_op_name(op));
  if (empty_results(vm, op, nin, in, a, nout, out, &st)) return st;
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
