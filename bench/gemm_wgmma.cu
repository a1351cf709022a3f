// gemm_wgmma.cu: design experiment for issue 6's tensor-core GEMM target (70% of cuBLASLt at 4096^3 bf16) on
// sm_90a; not part of grace's build (nvcc, runtime API; `bench/device.sh wgmma`). C = A B^T with A [M, K] and B [N, K]
// bf16 row-major (both K-major: nn.Linear's x @ W^T), fp32 accumulation, bf16 out. Per block a 128 x 128 tile of C:
// one producer warp issues TMA loads (128-byte swizzle) into a STAGES-deep shared-memory ring guarded by mbarriers;
// two consumer warpgroups of 64 x 128 each run wgmma m64n128k16 from shared-memory descriptors. wgmma exists only
// for sm_90a (ptxas refuses it for sm_90). Session 6: correct and 78% of cuBLAS on the H200 (grace's GEMM_WG is this
// kernel); the same with B [K, N] (x @ W: n-major, wgmma's transposed B: of the two readings of the descriptor's two
// offsets one matched cuBLAS); and each with one wgmma group kept in flight across stages.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

constexpr int BM = 128, BN = 128, BK = 64, STAGES = 4, CONSUMERS = 2, THREADS = 128 * (CONSUMERS + 1);
constexpr int TILE_A = BM * BK, TILE_B = BN * BK;   // elements per stage
constexpr size_t SMEM = (size_t)STAGES * (TILE_A + TILE_B) * 2 + 1024;   // + room to align to 1024 bytes

__device__ __forceinline__ uint32_t saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(saddr(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(saddr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(saddr(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, int parity) {
  asm volatile("{\n .reg .pred P1;\n LAB_WAIT:\n"
               " mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
               " @P1 bra DONE;\n bra LAB_WAIT;\n DONE:\n}\n" :: "r"(saddr(b)), "r"(parity) : "memory");
}
// box at (x = k, y = row) of the tensor map into shared memory, completion counted on the mbarrier
__device__ __forceinline__ void tma_load(void *dst, const CUtensorMap *map, int x, int y, uint64_t *bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(saddr(dst)), "l"(map), "r"(x), "r"(y), "r"(saddr(bar)) : "memory");
}

// A shared-memory matrix descriptor for a K-major tile with 128-byte swizzle: rows of 64 bf16 (128 bytes), 8-row
// atoms of 1024 bytes (the stride byte offset); the leading byte offset is unused by swizzled K-major layouts.
__device__ __forceinline__ uint64_t sdesc(const void *p) {
  uint64_t a = saddr(p);
  return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

// An n-major B tile (session 6 experiment): two TMA boxes of 64 k-rows x 64 n (128 bytes, swizzled) side by side in
// n, 8192 bytes apart: that step goes in the leading field, the 1024-byte 8-row step in the stride field (H200,
// session 6: this matches cuBLAS; the two swapped gave wrong products).
__device__ __forceinline__ uint64_t sdesc_mn(const void *p) {
  uint64_t a = saddr(p);
  return ((a & 0x3FFFF) >> 4) | ((8192ull >> 4) << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

// d (64 x 128 fp32 over the warpgroup: 64 registers a thread) += A (64 x 16) B^T (16 x 128)
template <int TB> __device__ __forceinline__ void wgmma_128(float d[64], uint64_t da, uint64_t db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"   // scale-d: accumulate into d
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, %67;\n"
               "}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(da), "l"(db), "r"(1), "n"(TB));
}

template <int BT, int PIPE = 0>
__global__ void __launch_bounds__(THREADS) gemm(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb,
                                                __nv_bfloat16 *C, int M, int N, int K) {
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzled tiles want 1024-byte aligned shared memory
  __nv_bfloat16 *sA = (__nv_bfloat16 *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023), *sB = sA + STAGES * TILE_A;
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, KT = K / BK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) { mbar_init(&full[s], 1); mbar_init(&empty[s], 4 * CONSUMERS); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (wg == CONSUMERS) {   // the producer
    if (tid == 0)
      for (int kt = 0; kt < KT; kt++) {
        const int s = kt % STAGES;
        if (kt >= STAGES) mbar_wait(&empty[s], (kt / STAGES - 1) & 1);
        mbar_expect_tx(&full[s], (TILE_A + TILE_B) * 2);
        tma_load(sA + s * TILE_A, &ta, kt * BK, m0, &full[s]);
        if (BT == 0) tma_load(sB + s * TILE_B, &tb, kt * BK, n0, &full[s]);
        else {
          tma_load(sB + s * TILE_B, &tb, n0, kt * BK, &full[s]);
          tma_load(sB + s * TILE_B + 64 * BK, &tb, n0 + 64, kt * BK, &full[s]);
        }
      }
    return;
  }
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; i++) d[i] = 0.0f;
  for (int kt = 0; kt < KT; kt++) {
    const int s = kt % STAGES;
    mbar_wait(&full[s], (kt / STAGES) & 1);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++)   // 16 elements = 32 bytes further along the swizzled rows
      if (BT == 0) wgmma_128<0>(d, sdesc(sA + s * TILE_A + wg * 64 * BK + kk * 16), sdesc(sB + s * TILE_B + kk * 16));
      else wgmma_128<1>(d, sdesc(sA + s * TILE_A + wg * 64 * BK + kk * 16), sdesc_mn(sB + s * TILE_B + kk * 16 * 64));
    wgmma_commit();
    if (!PIPE) {
      wgmma_wait0();
      if (lane == 0) mbar_arrive(&empty[s]);   // this warp is done reading stage s
    } else {   // one group in flight: the one before is done, its stage goes back
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      if (kt > 0 && lane == 0) mbar_arrive(&empty[(kt - 1) % STAGES]);
    }
  }
  if (PIPE) wgmma_wait0();
  // the accumulator layout: warp w holds rows 16w..16w+15; registers 4j..4j+3 are columns 8j + 2 (lane % 4) + {0, 1}
  // of rows lane / 4 and lane / 4 + 8
  const int r = m0 + wg * 64 + warp * 16 + lane / 4;
#pragma unroll
  for (int j = 0; j < 16; j++) {
    const int c = n0 + j * 8 + (lane % 4) * 2;
    if (r < M && c + 1 < N) {
      *(__nv_bfloat162 *)&C[(size_t)r * N + c] = __floats2bfloat162_rn(d[4 * j], d[4 * j + 1]);
    }
    if (r + 8 < M && c + 1 < N) {
      *(__nv_bfloat162 *)&C[(size_t)(r + 8) * N + c] = __floats2bfloat162_rn(d[4 * j + 2], d[4 * j + 3]);
    }
  }
}

static CUtensorMap tensor_map(PFN_cuTensorMapEncodeTiled_v12000 encode, const void *p, int rows, int K, int box_rows,
                              int box_cols = BK) {
  CUtensorMap m;
  cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)K * 2};
  cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows}, estr[2] = {1, 1};
  CUresult r = encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, dims, strides, box, estr,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) { printf("cuTensorMapEncodeTiled: %d\n", (int)r); exit(1); }
  return m;
}

int main() {
  const int M = 4096, N = 4096, K = 4096;
  std::vector<__nv_bfloat16> ha((size_t)M * K), hb((size_t)N * K);
  uint64_t x = 88172645463325252ull;
  auto rnd = [&]() { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return (float)((x >> 40) / 16777216.0) - 0.5f; };
  for (auto &v : ha) v = __float2bfloat16(rnd());
  for (auto &v : hb) v = __float2bfloat16(rnd());
  __nv_bfloat16 *A, *B, *C, *R;
  CK(cudaMalloc(&A, ha.size() * 2)); CK(cudaMalloc(&B, hb.size() * 2));
  CK(cudaMalloc(&C, (size_t)M * N * 2)); CK(cudaMalloc(&R, (size_t)M * N * 2));
  CK(cudaMemcpy(A, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(B, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice));
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  auto encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
  cublasHandle_t h;
  cublasCreate(&h);
  float one = 1.0f, zero = 0.0f;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  auto time_us = [&](auto f) {
    std::vector<float> t;
    for (int r = 0; r < 21; r++) {
      CK(cudaEventRecord(e0)); f(); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
      float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t.push_back(ms * 1000.f);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const double fl = 2.0 * M * N * K;
  CUtensorMap ta = tensor_map(encode, A, M, K, BM);
  // B [N, K] (x @ W^T: k-major) and B [K, N] (x @ W: n-major), each also with one wgmma group kept in flight
  const void *kernels[4] = {(const void *)gemm<0>, (const void *)gemm<1>, (const void *)gemm<0, 1>, (const void *)gemm<1, 1>};
  const char *names[4] = {"B [N,K] k-major", "B [K,N] n-major", "B [N,K] k-major, one wgmma group in flight",
                          "B [K,N] n-major, one wgmma group in flight"};
  for (int v = 0; v < 4; v++) {
    const int bt = v & 1;
    CUtensorMap tb = bt == 0 ? tensor_map(encode, B, N, K, BN) : tensor_map(encode, B, K, N, BK, 64);
    CK(cudaFuncSetAttribute(kernels[v], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
    dim3 grid(N / BN, M / BM);
    auto ours = [&]() {
      void *args[] = {&ta, &tb, &C, (void *)&M, (void *)&N, (void *)&K};
      CK(cudaLaunchKernel(kernels[v], grid, dim3(THREADS), args, SMEM, 0));
    };
    auto theirs = [&]() {   // column-major: C^T [N, M] = B [N, K] . A^T, or B [K, N] seen as [N, K] column-major
      if (bt == 0)
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16BF, K, A, CUDA_R_16BF, K, &zero, R,
                     CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      else
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16BF, N, A, CUDA_R_16BF, K, &zero, R,
                     CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    CK(cudaMemset(C, 0xff, (size_t)M * N * 2));   // NaN: an unwritten output fails
    ours(); theirs();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> hc((size_t)M * N), hr((size_t)M * N);
    CK(cudaMemcpy(hc.data(), C, hc.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hr.data(), R, hr.size() * 2, cudaMemcpyDeviceToHost));
    double maxd = 0, maxr = 0;
    for (size_t i = 0; i < hc.size(); i++) {
      double d = fabsf(__bfloat162float(hc[i]) - __bfloat162float(hr[i]));
      if (!(d <= maxd)) maxd = d;
      maxr = std::max(maxr, (double)fabsf(__bfloat162float(hr[i])));
    }
    printf("%s: max |ours - cuBLAS| = %.4g (max |cuBLAS| %.4g, relative %.3g)%s\n", names[v], maxd, maxr, maxd / maxr,
           maxd / maxr < 1e-2 ? "" : "  WRONG");
    float a = time_us(ours), b = time_us(theirs);
    printf("GEMM %dx%dx%d bf16 %s: wgmma %.1f us %.0f TFLOP/s, cuBLAS %.1f us %.0f TFLOP/s, ours/cuBLAS %.0f%%\n", M, N,
           K, names[v], a, fl / (a * 1e-6) / 1e12, b, fl / (b * 1e-6) / 1e12, 100.0 * b / a);
  }
  return 0;
}
