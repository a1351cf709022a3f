/* vm_interp.h: the parts of the IR interpreter (vm_interp.c) that the device executor (gpu_exec.c) shares:
 * checking a call, running one instruction through grace_run, writing in-place updates back. */
#ifndef GRACE_VM_INTERP_H
#define GRACE_VM_INTERP_H

#include "ir/ir.h"

/* The argument counts of a call and the versions of captured tensors (stale: an error). */
grace_status vm_ir_check_call(grace_ir *ir, int nin, int nout);
/* Instruction i alone: inputs, scalars, captures and literals are bound, ops run through grace_run (in-place
 * ops on a copy, as the IR is functional); its results go to val[]. */
grace_status vm_ir_run_inst(grace_ir *ir, int i, grace_tensor *const *in, grace_tensor **val);
/* After a run whose status is st: in-place updates written back to inputs and captures (on failure, what eager
 * would have written before the failing op). Returns st, or the first write-back error. */
grace_status vm_ir_write_back(grace_ir *ir, grace_tensor **val, grace_status st);

#endif
