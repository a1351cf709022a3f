/* gpu_matmul.h: matrix products on CUDA tensors outside an IR group, for the benchmark and the tests: the same
 * planning, kernels, cuBLASLt and autotuning that gpu_matmul_run (gpu/gpu_exec.h) uses for MATMUL groups. */
#ifndef GRACE_GPU_MATMUL_H
#define GRACE_GPU_MATMUL_H

#include "gpu/gpu_exec.h"

typedef enum gpu_mm_choice {
  GPU_MM_AUTO,      /* the autotuned choice for the shape (timed once, cached in the slot) */
  GPU_MM_OWN,       /* grace's generated kernels */
  GPU_MM_BLAS,      /* cuBLASLt (GRACE_EUNSUPPORTED when it cannot take the layout) */
  GPU_MM_OWN_SETTLED, /* grace's kernels, the caller vouching that no kernel still running writes y: a GEMV of short
                         rows may then load y before waiting on the kernel before it (in a graph, y not written there) */
  GPU_MM_PREFER_BLAS  /* cuBLASLt where it can take the product, grace's kernels elsewhere */
} gpu_mm_choice;

/* out = x @ y (torch.matmul shapes; x, y CUDA tensors of f32/f16/bf16, any strides); out is a contiguous CUDA
 * tensor of the result's shape and dtype, allocated by the caller. slot keeps compiled kernels, cuBLASLt and
 * the tuning table between calls (free it with slot->free). With GPU_MM_OWN no event or synchronisation is
 * used, so once the kernel is compiled (a first call) the launch can be captured into a CUDA graph. */
grace_status gpu_matmul_tensors(grace_vm *vm, gpu_slot *slot, grace_tensor *x, grace_tensor *y, grace_tensor *out,
                                gpu_mm_choice choice);

/* The program input or captured tensor (its value) that value v of ir is a view chain of, in a program that writes no
 * input in place; -1 otherwise. No kernel of the program writes such a value as long as it still shares the root's
 * storage (a reshape that cannot view copies), so a matmul captured into a graph may load it as a weight before
 * waiting on the kernel before it. */
int32_t gpu_matmul_settled_root(const grace_ir *ir, int32_t v);
/* What the last planned product of slot ran: "gemv_nt", "gemv_nn", "gemv_rw", "gemm_wg", "gemm_tc", "gemm_tc64",
 * "gemm_simt", "cublaslt" (gemm_tc and gemm_tc64 with " (no tensor map)" when the driver refused GEMM_WG's maps), with
 * "+splitk" when split; and how many autotuning decisions the slot holds. */
const char *gpu_matmul_last_kernel(const gpu_slot *slot);
int gpu_matmul_tuned(const gpu_slot *slot);
/* Forces the tensor-core GEMM's tile variant (0: 8 warps of 64x32, 1: 4 warps of 64x64; -1: by shape) and the
 * GEMV's warps per column (1, 2, 4; 0: by shape), for benchmarks comparing them. */
void gpu_matmul_force(grace_vm *vm, gpu_slot *slot, int tile, int wpr);

#endif
