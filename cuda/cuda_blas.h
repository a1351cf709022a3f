/* cuda_blas.h: cuBLASLt, loaded with dlopen at run time (no header, no link-time dependency), as the vendor
 * alternative for matrix products: row-major C = A @ B with any leading dimensions and transposes, one strided
 * batch dim, fp32 accumulation (no TF32). Loading needs no GPU; running needs the VM's CUDA context. */
#ifndef GRACE_CUDA_BLAS_H
#define GRACE_CUDA_BLAS_H

#include <stddef.h>
#include <stdint.h>
#include "grace.h"
#include "cuda/cuda_api.h"

typedef struct cuda_blas cuda_blas;

/* Loads cuBLASLt: `path` when given, else $GRACE_CUBLASLT when set, else libcublasLt.so, .so.13, .so.12, then the same under
 * /usr/local/cuda/lib64. A missing library or symbol is GRACE_EDEVICE naming what is missing. The handle
 * (cublasLtCreate) is made on the first cuda_blas_matmul, so loading works without a device. */
grace_status cuda_blas_load(grace_vm *vm, const char *path, cuda_blas **out);
void cuda_blas_free(grace_vm *vm, cuda_blas *b);
/* cublasLtGetVersion(), e.g. 130000 */
size_t cuda_blas_version(const cuda_blas *b);

/* C[b, m, n] = sum_k A[b, m, k] B[b, k, n] (row-major view; element strides, one of each operand's two matrix
 * strides must be 1; C contiguous rows with leading dim N). dt: f32, f16 or bf16 for A, B and C. */
typedef struct cuda_blas_gemm {
  grace_dtype dt;
  grace_dtype c_dt;                 /* C's dtype: dt, or f32 (the product before an epilogue) */
  int64_t M, N, K, batch;
  CUdeviceptr A, B, C;
  int64_t a_sm, a_sk, b_sk, b_sn;   /* element strides along m, k (A) and k, n (B) */
  int64_t a_sb, b_sb, c_sb;         /* batch strides (0: broadcast) */
} cuda_blas_gemm;

/* Whether cuBLASLt can take this layout at all (unit strides, alignment is its own business). */
int cuda_blas_supports(const cuda_blas_gemm *g);
/* Runs g on the VM's stream with a workspace from the caching allocator (released in stream order).
 * GRACE_EUNSUPPORTED when the heuristic finds no algorithm (nothing launched). */
grace_status cuda_blas_matmul(grace_vm *vm, cuda_blas *b, cuda_ctx *c, const cuda_blas_gemm *g);

#endif
