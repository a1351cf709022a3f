/* base_route.c: runs one op on the backend of its inputs' device, outside any trace: the argument checks common to
 * all ops, the choice of device, and the host fallback for what a device backend does not take (its inputs copied
 * to the host, the CPU backend runs it, the results copied back). grace_run (vm/vm_dispatch.c) is this plus
 * tracing and replay; backends and passes that need an op computed call this, never grace_run. */
#include <stdio.h>
#include <string.h>
#include "base/base.h"

/* op by the CPU backend over host copies of the inputs, results moved to dev: exact, and slow (two transfers
 * and a synchronize). An in-place op writes its host copy, which is then copied back into its device tensor. */
static grace_status on_host(grace_vm *vm, grace_device dev, grace_op op, int nin, grace_tensor *const *in,
                            const grace_attrs *attrs, int nout, grace_tensor **out) {
  enum { MAXIN = 64, MAXOUT = 4 };
  const vm_backend *be = vm->backend[dev], *cpu = vm->backend[GRACE_CPU];
  grace_tensor *h[MAXIN] = {0}, *r[MAXOUT] = {0};
  grace_attrs to_cpu = {.device = GRACE_CPU}, to_dev = {.device = dev};
  grace_status st = nin <= MAXIN && nout <= MAXOUT ? GRACE_OK
                    : vm_err(vm, GRACE_EUNSUPPORTED, "%s: too many operands", grace_op_name(op));
  for (int i = 0; i < nin && st == GRACE_OK; i++)
    if (in[i]) st = in[i]->storage->device != GRACE_CPU ? be->run_op(vm, GRACE_OP_TO_DEVICE, 1, &in[i], &to_cpu, 1, &h[i])
                                                        : (grace_tensor_retain(in[i]), h[i] = in[i], GRACE_OK);
  if (st == GRACE_OK) st = cpu->run_op(vm, op, nin, h, attrs, nout, r);
  if (st == GRACE_OK && grace_op_kind(op) == GRACE_KIND_INPLACE && h[0] != in[0])
    st = be->run_op(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){in[0], h[0]}, &(grace_attrs){0}, 0, NULL);
  for (int i = 0; i < nout && st == GRACE_OK; i++) st = be->run_op(vm, GRACE_OP_TO_DEVICE, 1, &r[i], &to_dev, 1, &out[i]);
  if (st != GRACE_OK)
    for (int i = 0; i < nout; i++) { grace_tensor_release(out[i]); out[i] = NULL; }
  for (int i = 0; i < nin && i < MAXIN; i++) grace_tensor_release(h[i]);
  for (int i = 0; i < nout && i < MAXOUT; i++) grace_tensor_release(r[i]);
  return st;
}

int vm_backend_supports(grace_vm *vm, grace_device dev, grace_op op, int nin, grace_tensor *const *in,
                        const grace_attrs *a, char *why, size_t n) {
  const vm_backend *be = vm->backend[dev];
  vm_meta m[64];
  if (!be->supports || nin > 64) return 1;
  for (int i = 0; i < nin; i++) {
    memset(&m[i], 0, sizeof m[i]);
    if (!in[i]) { m[i].ndim = -1; continue; }
    m[i].dtype = in[i]->dtype;
    m[i].device = in[i]->storage->device;
    m[i].ndim = in[i]->ndim;
    memcpy(m[i].sizes, in[i]->sizes, sizeof m[i].sizes);
  }
  return be->supports(vm, op, nin, m, a, why, n);
}

grace_status vm_route_prepare(grace_vm *vm, grace_op *opp, int nin, grace_tensor *const *in, const grace_attrs **attrsp,
                              int nout, grace_tensor **out, grace_device *devp, int *done) {
  static const grace_attrs none = {0};
  grace_op op = *opp;
  const grace_attrs *attrs = *attrsp;
  *done = 0;
  if (!vm) return GRACE_EARG;
  if ((unsigned)op >= GRACE_NOPS) return vm_err(vm, GRACE_EARG, "grace_run: invalid op %d", (int)op);
  const char *name = grace_op_name(op);
  if (!attrs) attrs = &none;
  if ((nin > 0 && !in) || (nout > 0 && !out))
    return vm_err(vm, GRACE_EARG, "%s: the %s array is NULL", name, !out && nout > 0 ? "output" : "input");
  for (int i = 0; i < nout; i++) out[i] = NULL;
  if (grace_op_ninputs(op) >= 0 ? nin != grace_op_ninputs(op) : nin < 1)
    return vm_err(vm, GRACE_EARG, "%s: expected %s%d tensor input%s, got %d", name, grace_op_ninputs(op) < 0 ? "at least " : "",
                  grace_op_ninputs(op) < 0 ? 1 : grace_op_ninputs(op), grace_op_ninputs(op) == 1 ? "" : "s", nin);
  if (nout < 0 || nout > grace_op_noutputs(op) || (nout == 0 && grace_op_noutputs(op) > 0))
    return vm_err(vm, GRACE_EARG, "%s: %d outputs requested, the op gives %d", name, nout, grace_op_noutputs(op));
  grace_device dev = grace_op_kind(op) == GRACE_KIND_CREATE ? attrs->device : GRACE_CPU;
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
  if (ndev == 0 && nin > 0 && grace_op_kind(op) != GRACE_KIND_CREATE) dev = GRACE_CPU;
  if (op == GRACE_OP_COPY_ && in[1]->storage->device != dev) dev = GRACE_CUDA;   /* the device side moves it */
  /* a wrapped number is not handed back as itself: the result is an ordinary 0-d tensor, as typed */
  if ((op == GRACE_OP_CONTIGUOUS || (op == GRACE_OP_TO_DEVICE && attrs->device == GRACE_CPU)) && in[0]->wrapped)
    op = GRACE_OP_CLONE;
  /* contiguous of a contiguous tensor is that tensor, decided here for every backend and before a trace or replay
   * sees the op: a trace that recorded it as a new value would lose in-place writes made through the result */
  if (op == GRACE_OP_CONTIGUOUS && vm_is_contiguous(in[0])) {
    grace_tensor_retain(in[0]);
    out[0] = in[0];
    *done = 1;
    return GRACE_OK;
  }
  if (op == GRACE_OP_TO_DEVICE) {
    if (attrs->device == in[0]->storage->device) {
      grace_tensor_retain(in[0]);
      out[0] = in[0];
      *done = 1;
      return GRACE_OK;
    }
    dev = GRACE_CUDA;   /* either direction runs on the device side */
  }
  *opp = op;
  *attrsp = attrs;
  *devp = dev;
  vm->status = GRACE_OK;
  return GRACE_OK;
}

grace_status vm_route_run(grace_vm *vm, grace_device dev, grace_op op, int nin, grace_tensor *const *in,
                          const grace_attrs *attrs, int nout, grace_tensor **out) {
  const vm_backend *be = vm->backend[dev];
  char why[8];
  if (dev != GRACE_CPU && !vm_backend_supports(vm, dev, op, nin, in, attrs, why, sizeof why))
    return on_host(vm, dev, op, nin, in, attrs, nout, out);
  grace_status st = be->run_op(vm, op, nin, in, attrs, nout, out);
  if (st != GRACE_OK) {   /* an op that failed gives back nothing */
    for (int i = 0; i < nout; i++) { grace_tensor_release(out[i]); out[i] = NULL; }
  }
  return st;
}

grace_status vm_route(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *attrs, int nout,
                      grace_tensor **out) {
  grace_device dev = GRACE_CPU;
  int done = 0;
  if (!vm) return GRACE_EARG;
  grace_status st = vm_route_prepare(vm, &op, nin, in, &attrs, nout, out, &dev, &done);
  return st != GRACE_OK || done ? st : vm_route_run(vm, dev, op, nin, in, attrs, nout, out);
}
