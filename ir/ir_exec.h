/* ir_exec.h: what every executor of an IR program shares (ir_exec.c): checking a call, running one instruction
 * alone through vm_route, writing in-place updates back. */
#ifndef GRACE_IR_EXEC_H
#define GRACE_IR_EXEC_H

#include "ir/ir.h"
#include "base/base.h"

/* The argument counts of a call and the versions of captured tensors (stale: an error). */
grace_status ir_exec_check_call(grace_ir *ir, int nin, int nout);
/* Instruction i alone: inputs, scalars, captures and literals are bound, ops run through vm_route (in-place
 * ops on a copy, as the IR is functional); its results go to val[]. */
grace_status ir_exec_inst(grace_ir *ir, int i, grace_tensor *const *in, grace_tensor **val);
/* Whether in-place instruction i may write its input or capture itself (every reader of the contents it replaces
 * runs before it, whatever order the executor picks among independent groups): 0 on any doubt. */
int ir_exec_direct(grace_ir *ir, int i);
/* After a run whose status is st: in-place updates written back to inputs and captures (on failure, what eager
 * would have written before the failing op). Returns st, or the first write-back error. */
grace_status ir_exec_write_back(grace_ir *ir, grace_tensor **val, grace_status st);

/* The device whose backend runs ir: CUDA when an input or capture lives there. */
grace_device ir_exec_device(const grace_ir *ir);
/* Runs sub-program sub (checked as grace_ir_run checks a call) on its device's backend; out[] gets new references. */
grace_status ir_exec_sub(grace_ir *sub, int nin, grace_tensor *const *in, int nout, grace_tensor **out);
/* Region instruction i (ir_region.c): the predicate read on the host, the chosen sub-program run; results to val[]. */
grace_status ir_region_exec(grace_ir *ir, int i, grace_tensor **val);

#endif
