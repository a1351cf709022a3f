/* cpu_fused.h: the CPU executors for fused groups (see ir/ir_fuse.h): pointwise groups as one loop over blocks
 * of a few hundred elements, each block evaluating every instruction into small L1-resident buffers, so no
 * full-size intermediate is ever allocated; matmul groups as a GEMM on packed panels whose pointwise epilogue
 * updates each finished block in place; row groups (reductions over the last dim with their pointwise
 * producers and consumers) as one pass per row. Results are bit-identical to running the instructions one by
 * one through grace_run (the same float32 kernels and reduction loops do the arithmetic). */
#ifndef GRACE_CPU_FUSED_H
#define GRACE_CPU_FUSED_H

#include "ir/ir.h"
#include "base/base.h"

/* Evaluates the group insts[0..ninst) (instruction indices of ir, in program order) and returns the value
 * out_value (the result of one of them) as a new contiguous float32 tensor in *out. Values the group reads
 * from outside are taken from vals[value id] (any strides, broadcast as eager ops broadcast them); literals
 * are read from the IR. Only float32 UNARY/BINARY ops, COMPARE ops over float32 (bool results) and WHERE
 * over float32 values are fused; anything else gives GRACE_EUNSUPPORTED, with nothing computed, so the
 * caller can fall back to running the instructions one at a time. */
grace_status cpu_fused_run(grace_vm *vm, grace_ir *ir, const int32_t *insts, int ninst, grace_tensor **vals,
                           int32_t out_value, grace_tensor **out);

/* ---- matmul groups (cpu_matmul.c): a right operand packed once, products with an epilogue per block ---- */

/* A float32 [K, N] matrix in the GEMM's panel layout, made once for a captured weight and reused by every
 * call of a compiled program (the layout eager's GEMM makes per call). */
typedef struct cpu_mm_pack {
  int64_t K, N, npad;
  float *data;
  size_t bytes;
} cpu_mm_pack;

/* Packs b (2-d float32 CPU, any strides). GRACE_EUNSUPPORTED for another kind of tensor. */
grace_status cpu_mm_pack_b(grace_vm *vm, const grace_tensor *b, cpu_mm_pack *pk);
void cpu_mm_pack_free(grace_vm *vm, cpu_mm_pack *pk);

/* Called once rows [m0, m1) x columns [n0, n1) of C hold their final sums, on the thread that computed them;
 * calls for different blocks may run at the same time. */
typedef void (*cpu_mm_epi_fn)(void *ctx, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

/* Below this many multiply-adds (M N K) a packed product runs on the calling thread: waking the pool costs
 * more than it saves. Set between the largest product measured faster alone and the smallest measured faster on
 * two threads (bench/RESULTS.md, the CPU matmul groups' threshold). */
#define CPU_MM_PACKED_PAR_WORK 8388608.0

/* C ([rows of a, N] contiguous, rows = a's leading dims folded) = a @ B, bit for bit what grace_run's matmul
 * gives, then epi (may be NULL) per finished block. GRACE_EUNSUPPORTED, with nothing done, where eager takes
 * another path (one row or column: matrix-vector sums; K = 0) or a's rows do not fold into one strided run. */
grace_status cpu_mm_packed_run(grace_vm *vm, const grace_tensor *a, const cpu_mm_pack *pk, float *C, cpu_mm_epi_fn epi,
                               void *ctx);

/* Whether the fused loop runs instruction k (static checks: op, arity, dtypes); cpu_fused_run checks the rest. */
int cpu_fx_supported(const grace_ir *ir, const ir_inst *k);

/* The same group made ready once and then run over ranges of its output by any thread (a matmul epilogue runs
 * it on each block of rows as the GEMM finishes them). gather_value (or -1) names an outside value that lives
 * in the output's own storage: each block copies it into a buffer before any step writes, so the group can
 * update the matmul result in place. Tensors in vals must stay alive (their data may change) until freed. */
typedef struct cpu_fx cpu_fx;
grace_status cpu_fx_prepare(grace_vm *vm, grace_ir *ir, const int32_t *insts, int ninst, grace_tensor **vals,
                            int32_t out_value, int32_t gather_value, cpu_fx **out);
int cpu_fx_shape(const cpu_fx *fx, const int64_t **sizes);   /* the output's ndim and sizes */
void cpu_fx_bind(cpu_fx *fx, float *out);                    /* where the output's contiguous elements go */
void cpu_fx_range(cpu_fx *fx, int64_t begin, int64_t end);    /* computes elements [begin, end) of the output */
void cpu_fx_free(cpu_fx *fx);

/* A fused matmul group: insts[0] is a float32 matmul, the rest pointwise instructions (cpu_fx_supported) of
 * which out_value is the last; the matmul's result is read by nothing outside the group. Where the right
 * operand is a 2-d matrix the GEMM runs on its packed panels (pk: packed ahead, or NULL: packed now) and the
 * epilogue updates each finished block of the result in place; otherwise grace_run's matmul runs and then the
 * epilogue as one fused loop. Bit for bit what running the instructions one by one gives.
 * GRACE_EUNSUPPORTED with nothing returned where the group does not qualify. */
grace_status cpu_fused_matmul_run(grace_vm *vm, grace_ir *ir, const int32_t *insts, int ninst, grace_tensor **vals,
                                  const cpu_mm_pack *pk, int32_t out_value, grace_tensor **out);

/* A fused row group: float32 sum/mean/max/min reductions over the last dim of one row shape [..., L] (all with
 * the same keepdim; max/min values only), with pointwise members (cpu_fx_supported) of the row shape or of the
 * reduced shape, in program order, out_value the last one's result. Runs one pass per row over the worker
 * pool, bit for bit what running the instructions one by one gives. GRACE_EUNSUPPORTED with nothing returned
 * where the group does not qualify. */
grace_status cpu_fused_row_run(grace_vm *vm, grace_ir *ir, const int32_t *insts, int ninst, grace_tensor **vals,
                               int32_t out_value, grace_tensor **out);

/* (cpu_pointwise.c) Runs op's float32 kernel, the very function grace_run uses for float32 tensors, over n
 * elements of contiguous buffers: in[k] hold floats (truth bytes for WHERE's condition), out receives floats
 * (truth bytes for comparisons); attrs as for grace_run (gelu's variant, clamp's bounds), may be NULL.
 * GRACE_EUNSUPPORTED: op has no float32 kernel; GRACE_EARG: clamp without bounds. With n = 0 it only checks. */
grace_status cpu_pw_block_f32(grace_op op, const grace_attrs *attrs, int64_t n, const void *const *in, void *out);


#endif
