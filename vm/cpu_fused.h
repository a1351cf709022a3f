/* cpu_fused.h: the CPU executor for a fused group of pointwise instructions (see ir/ir_fuse.h): the whole
 * group runs as one loop over blocks of a few hundred elements, each block evaluating every instruction into
 * small L1-resident buffers, so no full-size intermediate is ever allocated. Results are bit-identical to
 * running the instructions one by one through grace_run (the same float32 kernels do the arithmetic). */
#ifndef GRACE_CPU_FUSED_H
#define GRACE_CPU_FUSED_H

#include "ir/ir.h"
#include "vm/vm.h"

/* Evaluates the group insts[0..ninst) (instruction indices of ir, in program order) and returns the value
 * out_value (the result of one of them) as a new contiguous float32 tensor in *out. Values the group reads
 * from outside are taken from vals[value id] (any strides, broadcast as eager ops broadcast them); literals
 * are read from the IR. Only float32 UNARY/BINARY ops, COMPARE ops over float32 (bool results) and WHERE
 * over float32 values are fused; anything else gives GRACE_EUNSUPPORTED, with nothing computed, so the
 * caller can fall back to running the instructions one at a time. */
grace_status cpu_fused_run(grace_vm *vm, grace_ir *ir, const int32_t *insts, int ninst, grace_tensor **vals,
                           int32_t out_value, grace_tensor **out);

/* (cpu_pointwise.c) Runs op's float32 kernel, the very function grace_run uses for float32 tensors, over n
 * elements of contiguous buffers: in[k] hold floats (truth bytes for WHERE's condition), out receives floats
 * (truth bytes for comparisons); attrs as for grace_run (gelu's variant, clamp's bounds), may be NULL.
 * GRACE_EUNSUPPORTED: op has no float32 kernel; GRACE_EARG: clamp without bounds. With n = 0 it only checks. */
grace_status cpu_pw_block_f32(grace_op op, const grace_attrs *attrs, int64_t n, const void *const *in, void *out);

#endif
