/* vm_ops.c: the op table's derived facts (names, kinds, arity) and grace_run, which checks arguments
 * common to all ops and dispatches to the backend family of the op's kind. */
#include <stdio.h>
#include "vm/cpu_kernels.h"
#include "vm/gpu_exec.h"

static const struct { const char *name; grace_opkind kind; int nin, nout; } op_info[] = {
#define OP_INFO(e, name, kind, nin, nout) {name, GRACE_KIND_##kind, nin, nout},
  GRACE_OPS(OP_INFO)
#undef OP_INFO
};

const char *grace_op_name(grace_op op) { return (unsigned)op < GRACE_NOPS ? op_info[op].name : "?"; }
grace_opkind grace_op_kind(grace_op op) { return op_info[op].kind; }
int grace_op_ninputs(grace_op op) { return op_info[op].nin; }
int grace_op_noutputs(grace_op op) { return op_info[op].nout; }

grace_status grace_op_from_name(const char *name, grace_op *out) {
  for (int i = 0; i < GRACE_NOPS; i++)
    if (!strcmp(op_info[i].name, name)) { *out = (grace_op)i; return GRACE_OK; }
  return GRACE_EARG;
}

int grace_op_input_optional(grace_op op, int i) {
  return (op == GRACE_OP_LAYER_NORM && i >= 1) || (op == GRACE_OP_RMS_NORM && i == 1) ||
         (op == GRACE_OP_ATTENTION && i >= 3);
}

static cpu_op_fn cpu_family(grace_op op) {
  switch (op) {
  case GRACE_OP_COPY_: case GRACE_OP_FILL_: case GRACE_OP_CONTIGUOUS: case GRACE_OP_CLONE:
    return cpu_pointwise_run;
  case GRACE_OP_INDEX_COPY_: return cpu_shape_run;
  case GRACE_OP_ATTENTION: return cpu_attention_run;
  default: break;
  }
  switch (op_info[op].kind) {
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

grace_status grace_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *attrs,
                       int nout, grace_tensor **out) {
  static const grace_attrs none = {0};
  if (!vm) return GRACE_EARG;
  if ((unsigned)op >= GRACE_NOPS) return vm_err(vm, GRACE_EARG, "grace_run: invalid op %d", (int)op);
  const char *name = op_info[op].name;
  if (!attrs) attrs = &none;
  for (int i = 0; i < nout; i++) out[i] = NULL;
  if (op_info[op].nin >= 0 ? nin != op_info[op].nin : nin < 1)
    return vm_err(vm, GRACE_EARG, "%s: expected %s%d tensor input%s, got %d", name, op_info[op].nin < 0 ? "at least " : "",
                  op_info[op].nin < 0 ? 1 : op_info[op].nin, op_info[op].nin == 1 ? "" : "s", nin);
  if (nout < 0 || nout > op_info[op].nout || (nout == 0 && op_info[op].nout > 0))
    return vm_err(vm, GRACE_EARG, "%s: %d outputs requested, the op gives %d", name, nout, op_info[op].nout);
  grace_device dev = op_info[op].kind == GRACE_KIND_CREATE ? attrs->device : GRACE_CPU;
  int ndev = 0;   /* inputs that decide the device: all but host 0-d tensors (numbers) */
  for (int i = 0; i < nin; i++) {
    if (!in[i]) {
      if (grace_op_input_optional(op, i)) continue;
      return vm_err(vm, GRACE_EARG, "%s: input %d is missing", name, i + 1);
    }
    if (in[i]->vm != vm) return vm_err(vm, GRACE_EARG, "%s: input %d belongs to another VM", name, i + 1);
    grace_device d = in[i]->storage->device;
    if (d == GRACE_CPU && in[i]->ndim == 0) continue;   /* a host number goes where the op runs */
    if (op == GRACE_OP_COPY_ && i == 1) continue;   /* copy_ moves its source across devices */
    if (ndev++ == 0) dev = d;
    else if (d != dev)
      return vm_err(vm, GRACE_EDEVICE, "%s: inputs on different devices (%s and %s); move one with :to()", name,
                    grace_device_name(dev), grace_device_name(d));
  }
  if (ndev == 0 && nin > 0 && op_info[op].kind != GRACE_KIND_CREATE) dev = GRACE_CPU;
  if (op == GRACE_OP_COPY_ && in[1]->storage->device != dev) dev = GRACE_CUDA;   /* the device side moves it */
  /* a wrapped number is not handed back as itself: the result is an ordinary 0-d tensor, as typed */
  if ((op == GRACE_OP_CONTIGUOUS || (op == GRACE_OP_TO_DEVICE && attrs->device == GRACE_CPU)) && in[0]->wrapped)
    op = GRACE_OP_CLONE;
  if (op == GRACE_OP_TO_DEVICE) {
    if (attrs->device == in[0]->storage->device) { grace_tensor_retain(in[0]); out[0] = in[0]; return GRACE_OK; }
    dev = GRACE_CUDA;   /* either direction runs on the device side */
  }
  vm->status = GRACE_OK;
  if (vm_tracing(vm) && vm_trace_replaying(vm)) {
    int handled = 0;
    grace_status rs = vm_replay_op(vm, op, nin, in, attrs, nout, out, &handled);
    if (handled) return rs;
  }
  int record = vm_tracing(vm);
  if (record) grace_trace_pause(vm);   /* kernels that call grace_run are one op of the trace */
  grace_status st = dev == GRACE_CUDA ? gpu_run(vm, op, nin, in, attrs, nout, out)
                                      : cpu_family(op)(vm, op, nin, in, attrs, nout, out);
  if (record) {
    grace_trace_resume(vm);
    if (st == GRACE_OK) st = vm_trace_record(vm, op, nin, in, attrs, nout, out);
  }
  if (st != GRACE_OK) {   /* an op that failed gives back nothing */
    for (int i = 0; i < nout; i++) { grace_tensor_release(out[i]); out[i] = NULL; }
  }
  return st;
}
