/* vm_dispatch.c: grace_run: an op routed to its backend (base/base_route.c), recorded into an active trace,
 * or matched and deferred by an active replay, and recorded for autograd (vm_grad.c) where an input requires
 * grad. */
#include <stdio.h>
#include "base/base.h"
#include "vm/vm_trace.h"
#include "vm/vm_grad.h"

static grace_status run(grace_vm *vm, grace_device dev, grace_op op, int nin, grace_tensor *const *in,
                        const grace_attrs *attrs, int nout, grace_tensor **out) {
  grace_status ps;
  if (vm_tracing(vm) && vm_trace_replaying(vm)) {
    int handled = 0;
    grace_status rs = vm_replay_op(vm, op, nin, in, attrs, nout, out, &handled);
    if (handled) return rs;
  }
  /* a value a partition kept internal, used outside the recorded paths (or after the call): computed now */
  for (int i = 0; i < nin; i++)
    if (in[i] && in[i]->pending && (ps = vm_computed(vm, in[i])) != GRACE_OK) {
      char msg[VM_ERRLEN];
      snprintf(msg, sizeof msg, "%s", vm->err);
      return vm_err(vm, ps, "%s: input %d: %s", grace_op_name(op), i + 1, msg);
    }
  int record = vm_tracing(vm);
  if (record && vm->trace->parent && (ps = vm_region_check_op(vm, op, nin, in)) != GRACE_OK) return ps;
  if (record) grace_trace_pause(vm);   /* what the backend computes with is one op of the trace */
  grace_status st = vm_route_run(vm, dev, op, nin, in, attrs, nout, out);
  if (record) {
    grace_trace_resume(vm);
    if (st == GRACE_OK) st = vm_trace_record(vm, op, nin, in, attrs, nout, out);
    if (st != GRACE_OK)
      for (int i = 0; i < nout; i++) { grace_tensor_release(out[i]); out[i] = NULL; }
  }
  return st;
}

grace_status grace_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *attrs,
                       int nout, grace_tensor **out) {
  grace_device dev = GRACE_CPU;
  int done = 0;
  if (!vm) return GRACE_EARG;
  grace_status ps = vm_route_prepare(vm, &op, nin, in, &attrs, nout, out, &dev, &done);
  if (ps != GRACE_OK || done) return ps;
  int grad = !vm->no_grad;
  if (grad && (ps = vm_grad_check(vm, op, nin, in)) != GRACE_OK) return ps;
  grace_status st = run(vm, dev, op, nin, in, attrs, nout, out);
  if (st == GRACE_OK && grad && (st = vm_grad_record(vm, op, nin, in, attrs, nout, out)) != GRACE_OK)
    for (int i = 0; i < nout; i++) { grace_tensor_release(out[i]); out[i] = NULL; }
  return st;
}
