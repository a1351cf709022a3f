/* cg_matmul.c: CUDA sources of the matrix-product kernels (see cg_matmul.h). Each kernel is a fixed template
 * specialised by #defines (dtype, layout, vector width, rows per pass, split-K) plus a generated epilogue:
 * the preprocessor does the specialisation, so the templates read as plain CUDA and stay checkable. Sources
 * include no header; f16/bf16 conversions come from cg_prelude. */
#include <stdio.h>
#include <string.h>
#include "codegen/cg_matmul.h"
#include "ir/ir_pointwise.h"

/* PTX wrappers shared by the templates; guarded so several matmul kernels can share one NVRTC program. */
static const char helpers[] =
  "#ifndef CG_MM_HELPERS\n"
  "#define CG_MM_HELPERS\n"
  "struct __attribute__((aligned(16))) mm_u4 { unsigned x, y, z, w; };\n"
  "__device__ __forceinline__ unsigned mm_smem_addr(const void *p) {\n"
  "  unsigned r; asm(\"{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\" : \"=r\"(r) : \"l\"(p)); return r;\n"
  "}\n"
  "/* 16 bytes global -> shared, asynchronously; bytes 0 zero-fills (out-of-range rows and columns) */\n"
  "__device__ __forceinline__ void mm_cp16(unsigned dst, const void *src, int bytes) {\n"
  "  asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\\n\" :: \"r\"(dst), \"l\"(src), \"r\"(bytes));\n"
  "}\n"
  "__device__ __forceinline__ void mm_cp_commit() { asm volatile(\"cp.async.commit_group;\\n\" ::); }\n"
  "template <int N> __device__ __forceinline__ void mm_cp_wait() { asm volatile(\"cp.async.wait_group %0;\\n\" :: \"n\"(N)); }\n"
  "__device__ __forceinline__ void mm_ldsm4(unsigned a, unsigned r[4]) {\n"
  "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\\n\"\n"
  "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(a));\n"
  "}\n"
  "__device__ __forceinline__ void mm_ldsm4t(unsigned a, unsigned r[4]) {\n"
  "  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\\n\"\n"
  "               : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(a));\n"
  "}\n"
  "__device__ __forceinline__ void mm_mma_bf16(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {\n"
  "  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\\n\"\n"
  "               : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
  "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n"
  "}\n"
  "__device__ __forceinline__ void mm_mma_f16(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {\n"
  "  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\\n\"\n"
  "               : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
  "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n"
  "}\n"
  "/* 16 bytes of a weight that is read once: the read-only path, not kept in L1 (volatile: stays after\n"
  "   griddepcontrol.wait). On the H200 the fp32 LM head went from 97% to 102% of copy bandwidth; bf16 stayed at 75%. */\n"
  "__device__ __forceinline__ mm_u4 mm_ld_stream(const void *p) {\n"
  "  mm_u4 r;\n"
  "#if __CUDA_ARCH__ >= 800\n"
  "  asm volatile(\"ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\" : \"=r\"(r.x), \"=r\"(r.y), \"=r\"(r.z), \"=r\"(r.w) : \"l\"(p));\n"
  "#else\n"
  "  asm volatile(\"ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\" : \"=r\"(r.x), \"=r\"(r.y), \"=r\"(r.z), \"=r\"(r.w) : \"l\"(p));\n"
  "#endif\n"
  "  return r;\n"
  "}\n"
  "/* 16 bytes as floats: 4 f32, or 8 halves (element 0 in the low bits: little endian) */\n"
  "__device__ __forceinline__ void mm_unpack_f32(const mm_u4 &u, float f[4]) {\n"
  "  f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y); f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);\n"
  "}\n"
  "__device__ __forceinline__ void mm_unpack_bf16(const mm_u4 &u, float f[8]) {\n"
  "  const unsigned v[4] = {u.x, u.y, u.z, u.w};\n"
  "  for (int i = 0; i < 4; i++) { f[2 * i] = __uint_as_float(v[i] << 16); f[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u); }\n"
  "}\n"
  "__device__ __forceinline__ void mm_unpack_f16(const mm_u4 &u, float f[8]) {\n"
  "  const unsigned v[4] = {u.x, u.y, u.z, u.w};\n"
  "  for (int i = 0; i < 4; i++) { f[2 * i] = grace_h2f((unsigned short)(v[i] & 0xffffu)); f[2 * i + 1] = grace_h2f((unsigned short)(v[i] >> 16)); }\n"
  "}\n"
  "#endif\n";

/* PTX wrappers of the Hopper GEMM (GEMM_WG): mbarriers, TMA loads, shared-memory matrix descriptors. */
static const char helpers_wg[] =
  "#ifndef CG_MM_WG_HELPERS\n"
  "#define CG_MM_WG_HELPERS\n"
  "/* the driver's CUtensorMap: 128 opaque bytes, passed inside the __grid_constant__ parameter struct */\n"
  "struct __attribute__((aligned(64))) mm_tmap { unsigned long long q[16]; };\n"
  "__device__ __forceinline__ void mm_mbar_init(unsigned long long *b, int count) {\n"
  "  asm volatile(\"mbarrier.init.shared::cta.b64 [%0], %1;\" :: \"r\"(mm_smem_addr(b)), \"r\"(count));\n"
  "}\n"
  "__device__ __forceinline__ void mm_mbar_expect(unsigned long long *b, unsigned bytes) {\n"
  "  asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\" :: \"r\"(mm_smem_addr(b)), \"r\"(bytes) : \"memory\");\n"
  "}\n"
  "/* arrive and wait take the barrier's shared address (computed once by the caller) */\n"
  "__device__ __forceinline__ void mm_mbar_arrive(unsigned b) {\n"
  "  asm volatile(\"mbarrier.arrive.shared::cta.b64 _, [%0];\" :: \"r\"(b) : \"memory\");\n"
  "}\n"
  "__device__ __forceinline__ void mm_mbar_wait(unsigned b, int parity) {\n"
  "  asm volatile(\"{\\n .reg .pred P1;\\n LAB_WAIT:\\n mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\\n\"\n"
  "               \" @P1 bra DONE;\\n bra LAB_WAIT;\\n DONE:\\n}\\n\" :: \"r\"(b), \"r\"(parity) : \"memory\");\n"
  "}\n"
  "/* the box at (x = k, y = row) of the map into shared memory, its bytes counted on the mbarrier */\n"
  "__device__ __forceinline__ void mm_tma_load(void *dst, const mm_tmap *map, int x, int y, unsigned long long *bar) {\n"
  "  asm volatile(\"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\"\n"
  "               :: \"r\"(mm_smem_addr(dst)), \"l\"(map), \"r\"(x), \"r\"(y), \"r\"(mm_smem_addr(bar)) : \"memory\");\n"
  "}\n"
  "/* a shared-memory matrix descriptor of a tile with the 128-byte swizzle: 8-row atoms of 1024 bytes (the stride byte\n"
  "   offset); `lead` the leading byte offset, unused by k-major tiles (16), and for an n-major tile (wgmma's transposed\n"
  "   B) the 8192 bytes between its 64-column boxes. H200, session 6: the other reading of the two fields for n-major\n"
  "   tiles gives wrong products; this one matches cuBLAS (bench/gemm_wgmma.cu) */\n"
  "__device__ __forceinline__ unsigned long long mm_sdesc(const void *p, unsigned lead) {\n"
  "  const unsigned long long a = mm_smem_addr(p);\n"
  "  return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(lead >> 4) << 16) | ((unsigned long long)(1024 >> 4) << 32) |\n"
  "         (1ull << 62);\n"
  "}\n"
  "/* two adjacent results in one store (the first at an even index of an even-width row: 4- or 8-byte aligned) */\n"
  "__device__ __forceinline__ void mm_store2(unsigned short *p, unsigned short a, unsigned short b) {\n"
  "  *(unsigned *)p = (unsigned)a | ((unsigned)b << 16);\n"
  "}\n"
  "struct __attribute__((aligned(8))) mm_f2 { float x, y; };\n"
  "__device__ __forceinline__ void mm_store2(float *p, float a, float b) { *(mm_f2 *)p = mm_f2{a, b}; }\n"
  "#endif\n"
  "/* two float results rounded to nearest even by one conversion (a NaN becomes the canonical one); the first in the low\n"
  "   half, the lower address */\n"
  "#ifndef CG_MM_STORE2F\n"
  "#define CG_MM_STORE2F\n"
  "__device__ __forceinline__ void mm_store2_bf16(unsigned short *p, float a, float b) {\n"
  "  unsigned u;\n"
  "  asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(u) : \"f\"(b), \"f\"(a));\n"
  "  *(unsigned *)p = u;\n"
  "}\n"
  "__device__ __forceinline__ void mm_store2_f16(unsigned short *p, float a, float b) {\n"
  "  unsigned u;\n"
  "  asm(\"cvt.rn.f16x2.f32 %0, %1, %2;\" : \"=r\"(u) : \"f\"(b), \"f\"(a));\n"
  "  *(unsigned *)p = u;\n"
  "}\n"
  "#endif\n";

/* ---- kernel bodies (the entry block, MM_ENTRY, and the epilogue, MM_EPI(v, m, n), are generated) ---- */

/* Few rows, B[n, k] rows contiguous: MM_WPR warps per output column stream that row of B once with 16-byte
 * loads (4 in flight per lane), every row of A against it; warp-shuffle sums, then shared memory across the
 * column's warps. Split-K: blockIdx.y. */
static const char body_gemv_nt[] =
  "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % MM_WPR;\n"
  "  const long long n = (long long)blockIdx.x * (4 / MM_WPR) + warp / MM_WPR;\n"
  "  const bool live = n < N;\n"
  "#if MM_WPR > 1\n"
  "  __shared__ float red[4][MM_MT];\n"
  "#else\n"
  "  if (!live) return;\n"
  "#endif\n"
  "  const long long kb = (long long)blockIdx.y * KCHUNK, ke = kb + KCHUNK < K ? kb + KCHUNK : K;\n"
  "  const MM_T *w = B_ + offB + (live ? n : 0) * B_SN;\n"
  "  const MM_T *a = A_ + offA;\n"
  "  /* launched as a programmatic dependent: let the next kernel start, pull this column of the weight into L2\n"
  "     while the kernel before finishes (a one-wave grid only: in a longer one most blocks start after it, and\n"
  "     the prefetches cost the LM head 8% of its bandwidth), and only then read what it wrote (no-ops in a plain\n"
  "     launch) */\n"
  "#if __CUDA_ARCH__ >= 900\n"
  "  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
  "#endif\n"
  "#if MM_PREFETCH\n"
  "  if (live)\n"
  "    for (long long k = kb + (part * 32 + lane) * MM_VEC; k < ke; k += 32LL * MM_WPR * MM_VEC)\n"
  "      asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(w + k));\n"
  "#endif\n"
  "#if __CUDA_ARCH__ >= 900\n"
  "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
  "#endif\n"
  "  for (long long m0 = 0; m0 < M; m0 += MM_MT) {\n"
  "    float acc[MM_MT];\n"
  "#pragma unroll\n"
  "    for (int i = 0; i < MM_MT; i++) acc[i] = 0.0f;\n"
  "    if (live) {\n"
  "#if MM_VEC > 1\n"
  "      /* 4 vectors per lane in flight: all loads of a step are issued before the first is used */\n"
  "      const long long step = 32LL * MM_WPR * MM_VEC;\n"
  "      for (long long k = kb + (part * 32 + lane) * MM_VEC; k < ke; k += 4 * step) {\n"
  "        mm_u4 wv[4];\n"
  "#pragma unroll\n"
  "        for (int u = 0; u < 4; u++) {\n"
  "          if (k + u * step + MM_VEC <= ke) wv[u] = mm_ld_stream(w + k + u * step);\n"
  "          else wv[u].x = wv[u].y = wv[u].z = wv[u].w = 0u;\n"
  "        }\n"
  "#pragma unroll\n"
  "        for (int u = 0; u < 4; u++) if (k + u * step + MM_VEC <= ke) MM_DOT(wv[u], k + u * step);\n"
  "      }\n"
  "#else\n"
  "      for (long long k = kb + part * 32 + lane; k < ke; k += 32 * MM_WPR) {\n"
  "        const float wf = MM_LD(w[k]);\n"
  "#pragma unroll\n"
  "        for (int i = 0; i < MM_MT; i++) if (m0 + i < M) acc[i] += MM_LD(a[(m0 + i) * A_SM + k * A_SK]) * wf;\n"
  "      }\n"
  "#endif\n"
  "    }\n"
  "#pragma unroll\n"
  "    for (int i = 0; i < MM_MT; i++) acc[i] = grace_warp_sum_f(acc[i]);\n"
  "#if MM_WPR > 1\n"
  "    if (lane == 0) {\n"
  "#pragma unroll\n"
  "      for (int i = 0; i < MM_MT; i++) red[warp][i] = acc[i];\n"
  "    }\n"
  "    __syncthreads();\n"
  "    if (lane == 0 && part == 0 && live) {\n"
  "#pragma unroll\n"
  "      for (int i = 0; i < MM_MT; i++) {\n"
  "        float s = red[warp][i];\n"
  "#pragma unroll\n"
  "        for (int q = 1; q < MM_WPR; q++) s += red[warp + q][i];\n"
  "        if (m0 + i < M) { MM_OUT(s, m0 + i, n); }\n"
  "      }\n"
  "    }\n"
  "    __syncthreads();\n"
  "#else\n"
  "    if (lane == 0) {\n"
  "#pragma unroll\n"
  "      for (int i = 0; i < MM_MT; i++) if (m0 + i < M) { MM_OUT(acc[i], m0 + i, n); }\n"
  "    }\n"
  "#endif\n"
  "  }\n";

/* Few rows, B[k, n] rows contiguous: each thread owns MM_VEC adjacent columns (one 16-byte load per k), the 8
 * thread rows of a block split k; their partial sums meet in shared memory, where every thread finishes one
 * column so the epilogue runs wide. */
static const char body_gemv_nn[] =
  "  __shared__ float red[8][32 * MM_VEC];\n"
  "  const int tx = threadIdx.x, ty = threadIdx.y;\n"
  "  const long long nbase = (long long)blockIdx.x * 32 * MM_VEC, n0 = nbase + tx * MM_VEC;\n"
  "  const bool live = n0 < N;\n"
  "  const long long kb = (long long)blockIdx.y * KCHUNK, ke = kb + KCHUNK < K ? kb + KCHUNK : K;\n"
  "  const MM_T *w = B_ + offB + n0;\n"
  "  const MM_T *a = A_ + offA;\n"
  "  for (long long m0 = 0; m0 < M; m0 += MM_MT) {\n"
  "    float acc[MM_MT][MM_VEC];\n"
  "#pragma unroll\n"
  "    for (int i = 0; i < MM_MT; i++)\n"
  "#pragma unroll\n"
  "      for (int j = 0; j < MM_VEC; j++) acc[i][j] = 0.0f;\n"
  "    if (live) {\n"
  "#pragma unroll 4\n"
  "      for (long long k = kb + ty; k < ke; k += 8) {\n"
  "        float wf[MM_VEC];\n"
  "#if MM_VEC > 1\n"
  "        mm_u4 wv = mm_ld_stream(w + k * B_SK);\n"
  "        MM_UNPACK(wv, wf);\n"
  "#else\n"
  "        wf[0] = MM_LD(w[k * B_SK]);\n"
  "#endif\n"
  "#pragma unroll\n"
  "        for (int i = 0; i < MM_MT; i++) if (m0 + i < M) {\n"
  "          const float av = MM_LD(a[(m0 + i) * A_SM + k * A_SK]);\n"
  "#pragma unroll\n"
  "          for (int j = 0; j < MM_VEC; j++) acc[i][j] += av * wf[j];\n"
  "        }\n"
  "      }\n"
  "    }\n"
  "#pragma unroll\n"
  "    for (int i = 0; i < MM_MT; i++) {\n"
  "      if (m0 + i >= M) break;\n"
  "#pragma unroll\n"
  "      for (int j = 0; j < MM_VEC; j++) red[ty][tx * MM_VEC + j] = acc[i][j];\n"
  "      __syncthreads();\n"
  "      for (int c = ty * 32 + tx; c < 32 * MM_VEC; c += 256) {\n"
  "        const long long n = nbase + c;\n"
  "        if (n < N) {\n"
  "          float s = 0.0f;\n"
  "#pragma unroll\n"
  "          for (int y = 0; y < 8; y++) s += red[y][c];\n"
  "          MM_OUT(s, m0 + i, n);\n"
  "        }\n"
  "      }\n"
  "      __syncthreads();\n"
  "    }\n"
  "  }\n";

/* Few rows, B[n, k] rows contiguous and short: a warp owns MM_RC adjacent columns and each lane MM_RL 16-byte
 * vectors of each, all loaded into registers before griddepcontrol.wait, so the weight streams while the kernels
 * before this one finish. The next kernel is let in only after the loads are issued: ptxas hoists the wait above
 * loads that precede it, but not above launch_dependents (seen in the SASS on sm_90, 2026-11-25). H200, GPT-2's
 * 48 decode GEMVs in a graph (bench/gemv_explore.cu): fp32 199 -> 108 us against the same kernel loading after the
 * wait. Few warps holding many weights each let the next kernels' blocks fit beside this one's. Each lane's loads
 * are constant offsets from one pointer a column; rows up to MM_MT (desc mtile, a power of two >= M). With
 * MM_RWLATE (a weight some kernel still running may write) the loads follow the wait: the layout alone, every
 * load of a warp in flight at once, is what makes it the faster LM head (H200: bf16 768x50257 19.1-19.3 us against
 * GEMV_NT's 21.2-21.5, bench/gemv_explore.cu). */
static const char body_gemv_rw[] =
  "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kl = lane * MM_VEC;\n"
  "  const long long n0 = ((long long)blockIdx.x * (blockDim.x >> 5) + warp) * MM_RC;\n"
  "#if MM_RWLATE && __CUDA_ARCH__ >= 900\n"
  "  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
  "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
  "#endif\n"
  "  mm_u4 wv[MM_RC][MM_RL];\n"
  "#pragma unroll\n"
  "  for (int c = 0; c < MM_RC; c++) {\n"
  "    const MM_T *w = B_ + offB + (n0 + c < N ? n0 + c : N - 1) * B_SN + kl;\n"
  "#pragma unroll\n"
  "    for (int u = 0; u < MM_RL; u++) {\n"
  "      if (kl + u * 32 * MM_VEC < K) wv[c][u] = mm_ld_stream(w + u * 32 * MM_VEC);\n"
  "      else wv[c][u].x = wv[c][u].y = wv[c][u].z = wv[c][u].w = 0u;\n"
  "    }\n"
  "  }\n"
  "#if !MM_RWLATE && __CUDA_ARCH__ >= 900\n"
  "  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
  "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
  "#endif\n"
  "  /* MM_MT rows at most, a compile-time bound: under a loop to a run-time M the compiler unpacked 16-bit weights\n"
  "     once outside it and kept the floats (bf16 at K 3072: 128 registers, 70 without) */\n"
  "#pragma unroll\n"
  "  for (int m = 0; m < MM_MT; m++) {\n"
  "    if (m >= M) break;\n"
  "    const MM_T *x = A_ + offA + m * A_SM;\n"
  "    float acc[MM_RC];\n"
  "#pragma unroll\n"
  "    for (int c = 0; c < MM_RC; c++) acc[c] = 0.0f;\n"
  "#pragma unroll\n"
  "    for (int u = 0; u < MM_RL; u++) {\n"
  "      const int k = kl + u * 32 * MM_VEC;\n"
  "      float xf[MM_VEC];\n"
  "#if MM_AV\n"
  "      mm_u4 xv;\n"
  "      if (k < K) xv = *(const mm_u4 *)(x + k);\n"
  "      else xv.x = xv.y = xv.z = xv.w = 0u;\n"
  "      MM_UNPACK(xv, xf);\n"
  "#else\n"
  "#pragma unroll\n"
  "      for (int j = 0; j < MM_VEC; j++) xf[j] = k < K ? MM_LD(x[(long long)(k + j) * A_SK]) : 0.0f;\n"
  "#endif\n"
  "#pragma unroll\n"
  "      for (int c = 0; c < MM_RC; c++) {\n"
  "        float wf[MM_VEC];\n"
  "        MM_UNPACK(wv[c][u], wf);\n"
  "#pragma unroll\n"
  "        for (int j = 0; j < MM_VEC; j++) acc[c] += xf[j] * wf[j];\n"
  "      }\n"
  "    }\n"
  "#pragma unroll\n"
  "    for (int c = 0; c < MM_RC; c++) acc[c] = grace_warp_sum_f(acc[c]);\n"
  "    if (lane == 0) {\n"
  "#pragma unroll\n"
  "      for (int c = 0; c < MM_RC; c++) if (n0 + c < N) { MM_OUT(acc[c], m, n0 + c); }\n"
  "    }\n"
  "  }\n";

/* Hopper tensor-core GEMM (sm_90a): A k-major, B k-major or n-major, fp32 accumulators in registers. First written and
 * checked in bench/gemm_wgmma.cu. H200, 4096^3 bf16 (bench/gpu_kernels.c, 2026-11-25): 597 / 594 TFLOP/s for B n- /
 * k-major, 77-78% of cuBLASLt; building the descriptors and barrier addresses once, outside the k loop, was worth
 * 14% of that (nothing but the offsets' additions stands between a stage's arrival and its wgmma). */
static const char body_wg[] =
  "  /* 128x128 tile of C per block: warpgroups 0 and 1 compute 64 rows each (wgmma m64n128k16 from shared memory),\n"
  "     warpgroup 2's first thread feeds a MM_WGS-stage ring of 128x64 tiles of A and B through TMA (128-byte swizzle,\n"
  "     zeros past the edges), one mbarrier pair a stage */\n"
  "  extern __shared__ unsigned char mm_wsm[];\n"
  "  unsigned short *sA = (unsigned short *)(((unsigned long long)mm_wsm + 1023) & ~1023ull), *sB = sA + MM_WGS * 128 * 64;\n"
  "  __shared__ __attribute__((aligned(8))) unsigned long long full[MM_WGS], empty[MM_WGS];\n"
  "  const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31;\n"
  "  const long long m0 = (long long)blockIdx.y * 128, n0 = (long long)blockIdx.x * 128;\n"
  "  const int KT = (int)((K + 63) / 64);\n"
  "  if (threadIdx.x == 0) {\n"
  "    for (int s = 0; s < MM_WGS; s++) { mm_mbar_init(&full[s], 1); mm_mbar_init(&empty[s], 8); }\n"
  "    asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");\n"
  "  }\n"
  "  __syncthreads();\n"
  "  const unsigned full_a = mm_smem_addr(full), empty_a = mm_smem_addr(empty);   /* 8 bytes a stage */\n"
  "  if (wg == 2) {\n"
  "    if (tid == 0)\n"
  "      for (int kt = 0; kt < KT; kt++) {\n"
  "        const int s = kt % MM_WGS;\n"
  "        if (kt >= MM_WGS) mm_mbar_wait(empty_a + 8 * s, (kt / MM_WGS - 1) & 1);\n"
  "        mm_mbar_expect(&full[s], 2 * 128 * 64 * 2);\n"
  "        mm_tma_load(sA + s * 128 * 64, &p.ta, kt * 64, (int)m0, &full[s]);\n"
  "#if MM_BK\n"
  "        mm_tma_load(sB + s * 128 * 64, &p.tb, kt * 64, (int)n0, &full[s]);\n"
  "#else   /* B [K, N]: two boxes of 64 k-rows x 64 columns, side by side in n */\n"
  "        mm_tma_load(sB + s * 128 * 64, &p.tb, (int)n0, kt * 64, &full[s]);\n"
  "        mm_tma_load(sB + s * 128 * 64 + 64 * 64, &p.tb, (int)n0 + 64, kt * 64, &full[s]);\n"
  "#endif\n"
  "      }\n"
  "    return;\n"
  "  }\n"
  "  float d[64];\n"
  "#pragma unroll\n"
  "  for (int i = 0; i < 64; i++) d[i] = 0.0f;\n"
  "  /* descriptors built once: a stage (16384 bytes) or a k step further is an offset in 16-byte units added to the\n"
  "     address field, so nothing but the additions sits between a stage's arrival and its wgmma */\n"
  "  const unsigned long long da = mm_sdesc(sA + wg * 64 * 64, 16);\n"
  "#if MM_BK\n"
  "  const unsigned long long db = mm_sdesc(sB, 16), dbk = 2;     /* 16 elements: 32 bytes along the rows */\n"
  "#else\n"
  "  const unsigned long long db = mm_sdesc(sB, 8192), dbk = 128; /* 16 rows of 128 bytes */\n"
  "#endif\n"
  "  for (int kt = 0; kt < KT; kt++) {\n"
  "    const int s = kt % MM_WGS;\n"
  "    mm_mbar_wait(full_a + 8 * s, (kt / MM_WGS) & 1);\n"
  "    asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
  "#pragma unroll\n"
  "    for (int kk = 0; kk < 4; kk++)\n"
  "      mm_wgmma<1 - MM_BK>(d, da + s * 1024 + kk * 2, db + s * 1024 + kk * dbk);\n"
  "    asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n"
  "    /* all of this stage's wgmma done before it goes back (keeping one group in flight measured 10% slower) */\n"
  "    asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n"
  "    if (lane == 0) mm_mbar_arrive(empty_a + 8 * s);\n"
  "  }\n"
  "  /* the accumulators: warp w of the warpgroup holds rows 16w..16w+15; registers 4j..4j+3 are columns\n"
  "     8j + 2 (lane % 4) + {0, 1} of rows lane / 4 and lane / 4 + 8: stored in pairs where N is even and C aligned */\n"
  "  const long long r = m0 + wg * 64 + warp * 16 + (lane >> 2);\n"
  "  const bool pairs = (N & 1) == 0 && ((unsigned long long)C_ & (2 * sizeof(MM_OT) - 1)) == 0;\n"
  "#pragma unroll\n"
  "  for (int h = 0; h < 2; h++) {\n"
  "    const long long m = r + h * 8;\n"
  "    if (m >= M) continue;\n"
  "    MM_OT *row = C_ + (bi * M + m) * N;\n"
  "#pragma unroll\n"
  "    for (int j = 0; j < 16; j++) {\n"
  "      const long long n = n0 + j * 8 + (lane & 3) * 2;\n"
  "      if (pairs && n + 1 < N) {\n"
  "#if MM_PLAIN   /* no epilogue: the hardware's paired conversion */\n"
  "        MM_STORE2F(row + n, d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);\n"
  "#else\n"
  "        float o0, o1;\n"
  "        MM_EPV(d[4 * j + 2 * h], m, n, o0);\n"
  "        MM_EPV(d[4 * j + 2 * h + 1], m, n + 1, o1);\n"
  "        mm_store2(row + n, MM_STO(o0), MM_STO(o1));\n"
  "#endif\n"
  "      } else {\n"
  "        if (n < N) { MM_EPI(d[4 * j + 2 * h], m, n); }\n"
  "        if (n + 1 < N) { MM_EPI(d[4 * j + 2 * h + 1], m, n + 1); }\n"
  "      }\n"
  "    }\n"
  "  }\n";

/* The split-K finish: one thread per output element sums the partials in split order. */
static const char body_splitk[] =
  "  const long long idx = (long long)blockIdx.x * 256 + threadIdx.x;\n"
  "  if (idx >= M * N) return;\n"
  "  const long long m = idx / N, n = idx - m * N;\n"
  "  float s = 0.0f;\n"
  "  for (long long sp = 0; sp < SPLITS; sp++) s += WS_[(sp * NB + bi) * M * N + idx];\n"
  "  MM_EPI(s, m, n);\n";

/* FFMA GEMM: 128x128 tiles over k steps of 8, 8x8 outputs per thread; operands are read through their
 * strides (converted to float on the way into shared memory), so any layout and dtype works. */
static const char body_simt[] =
  "  __shared__ float As[8][128 + 4], Bs[8][128 + 4];\n"
  "  const int t = threadIdx.x, tx = t & 15, ty = t >> 4;\n"
  "  const long long m0 = (long long)blockIdx.y * 128, n0 = (long long)blockIdx.x * 128;\n"
  "  const MM_T *a = A_ + offA, *b = B_ + offB;\n"
  "  float acc[8][8];\n"
  "#pragma unroll\n"
  "  for (int i = 0; i < 8; i++)\n"
  "#pragma unroll\n"
  "    for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;\n"
  "  for (long long k0 = 0; k0 < K; k0 += 8) {\n"
  "#pragma unroll\n"
  "    for (int r = 0; r < 4; r++) {\n"
  "      const int e = t + r * 256;\n"
  "#if MM_AK\n"
  "      const int mm = e >> 3, kk = e & 7;\n"
  "#else\n"
  "      const int mm = e & 127, kk = e >> 7;\n"
  "#endif\n"
  "      const long long gm = m0 + mm, gk = k0 + kk;\n"
  "      As[kk][mm] = gm < M && gk < K ? MM_LD(a[gm * A_SM + gk * A_SK]) : 0.0f;\n"
  "#if MM_BK\n"
  "      const int nn = e >> 3, kb = e & 7;\n"
  "#else\n"
  "      const int nn = e & 127, kb = e >> 7;\n"
  "#endif\n"
  "      const long long gn = n0 + nn, gkb = k0 + kb;\n"
  "      Bs[kb][nn] = gn < N && gkb < K ? MM_LD(b[gkb * B_SK + gn * B_SN]) : 0.0f;\n"
  "    }\n"
  "    __syncthreads();\n"
  "#pragma unroll\n"
  "    for (int kk = 0; kk < 8; kk++) {\n"
  "      float ar[8], br[8];\n"
  "#pragma unroll\n"
  "      for (int i = 0; i < 4; i++) {\n"
  "        ar[i] = As[kk][ty * 4 + i]; ar[4 + i] = As[kk][64 + ty * 4 + i];\n"
  "        br[i] = Bs[kk][tx * 4 + i]; br[4 + i] = Bs[kk][64 + tx * 4 + i];\n"
  "      }\n"
  "#pragma unroll\n"
  "      for (int i = 0; i < 8; i++)\n"
  "#pragma unroll\n"
  "        for (int j = 0; j < 8; j++) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);\n"
  "    }\n"
  "    __syncthreads();\n"
  "  }\n"
  "#pragma unroll\n"
  "  for (int i = 0; i < 8; i++) {\n"
  "    const long long m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);\n"
  "#pragma unroll\n"
  "    for (int j = 0; j < 8; j++) {\n"
  "      const long long n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);\n"
  "      if (m < M && n < N) { MM_EPI(acc[i][j], m, n); }\n"
  "    }\n"
  "  }\n";

/* Tensor-core GEMM: 128x128x32 block tiles, 8 warps of 64x32 (tile 0) or 4 warps of 64x64 (tile 1), mma.sync m16n8k16 with fp32 accumulators.
 * Tiles keep the operands' global layout in shared memory (rows padded by 8 halves so ldmatrix is free of
 * bank conflicts); ldmatrix (.trans for m- or n-contiguous operands) builds the fragments. cp.async fills
 * STAGES-1 tiles ahead; out-of-range 16-byte chunks are zero-filled. */
static const char body_tc[] =
  "#if MM_AK\n"
  "#define MM_ALD 40\n"
  "#define MM_AEL (128 * 40)\n"
  "#else\n"
  "#define MM_ALD 136\n"
  "#define MM_AEL (32 * 136)\n"
  "#endif\n"
  "#if MM_BK\n"
  "#define MM_BLD 40\n"
  "#define MM_BEL (128 * 40)\n"
  "#else\n"
  "#define MM_BLD 136\n"
  "#define MM_BEL (32 * 136)\n"
  "#endif\n"
  "  extern __shared__ __attribute__((aligned(16))) unsigned short mm_sm[];\n"
  "  unsigned short *As = mm_sm, *Bs = mm_sm + MM_STAGES * MM_AEL;\n"
  "  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, wm = warp / MM_TCW, wn = warp % MM_TCW;\n"
  "  const long long m0 = (long long)blockIdx.y * 128, n0 = (long long)blockIdx.x * 128;\n"
  "  const MM_T *a = A_ + offA, *b = B_ + offB;\n"
  "  const int KT = (int)((K + 31) / 32);\n"
  "  float acc[4][MM_TCNJ][4];\n"
  "#pragma unroll\n"
  "  for (int i = 0; i < 4; i++)\n"
  "#pragma unroll\n"
  "    for (int j = 0; j < MM_TCNJ; j++)\n"
  "#pragma unroll\n"
  "      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;\n"
  "#if MM_AK\n"
  "#define MM_LOAD_A(st, k0) for (int r = 0; r < 512 / MM_TCT; r++) { const int c = t + r * MM_TCT, row = c >> 2, col = (c & 3) * 8; \\\n"
  "    const long long gm = m0 + row, gk = (k0) + col; const bool ok = gm < M && gk < K; \\\n"
  "    mm_cp16(mm_smem_addr(As + (st) * MM_AEL + row * MM_ALD + col), ok ? (const void *)(a + gm * A_SM + gk) : (const void *)a, ok ? 16 : 0); }\n"
  "#else\n"
  "#define MM_LOAD_A(st, k0) for (int r = 0; r < 512 / MM_TCT; r++) { const int c = t + r * MM_TCT, row = c >> 4, col = (c & 15) * 8; \\\n"
  "    const long long gk = (k0) + row, gm = m0 + col; const bool ok = gm < M && gk < K; \\\n"
  "    mm_cp16(mm_smem_addr(As + (st) * MM_AEL + row * MM_ALD + col), ok ? (const void *)(a + gk * A_SK + gm) : (const void *)a, ok ? 16 : 0); }\n"
  "#endif\n"
  "#if MM_BK\n"
  "#define MM_LOAD_B(st, k0) for (int r = 0; r < 512 / MM_TCT; r++) { const int c = t + r * MM_TCT, row = c >> 2, col = (c & 3) * 8; \\\n"
  "    const long long gn = n0 + row, gk = (k0) + col; const bool ok = gn < N && gk < K; \\\n"
  "    mm_cp16(mm_smem_addr(Bs + (st) * MM_BEL + row * MM_BLD + col), ok ? (const void *)(b + gn * B_SN + gk) : (const void *)b, ok ? 16 : 0); }\n"
  "#else\n"
  "#define MM_LOAD_B(st, k0) for (int r = 0; r < 512 / MM_TCT; r++) { const int c = t + r * MM_TCT, row = c >> 4, col = (c & 15) * 8; \\\n"
  "    const long long gk = (k0) + row, gn = n0 + col; const bool ok = gn < N && gk < K; \\\n"
  "    mm_cp16(mm_smem_addr(Bs + (st) * MM_BEL + row * MM_BLD + col), ok ? (const void *)(b + gk * B_SK + gn) : (const void *)b, ok ? 16 : 0); }\n"
  "#endif\n"
  "  for (int s = 0; s < MM_STAGES - 1; s++) {\n"
  "    if (s < KT) { MM_LOAD_A(s, (long long)s * 32); MM_LOAD_B(s, (long long)s * 32); }\n"
  "    mm_cp_commit();\n"
  "  }\n"
  "  for (int kt = 0; kt < KT; kt++) {\n"
  "    mm_cp_wait<MM_STAGES - 2>();\n"
  "    __syncthreads();\n"
  "    {\n"
  "      const int nk = kt + MM_STAGES - 1;\n"
  "      if (nk < KT) { MM_LOAD_A(nk % MM_STAGES, (long long)nk * 32); MM_LOAD_B(nk % MM_STAGES, (long long)nk * 32); }\n"
  "      mm_cp_commit();\n"
  "    }\n"
  "    const unsigned short *as = As + (kt % MM_STAGES) * MM_AEL, *bs = Bs + (kt % MM_STAGES) * MM_BEL;\n"
  "#pragma unroll\n"
  "    for (int kk = 0; kk < 32; kk += 16) {\n"
  "      unsigned af[4][4], bfr[MM_TCNJ][2];\n"
  "#pragma unroll\n"
  "      for (int mi = 0; mi < 4; mi++) {\n"
  "#if MM_AK\n"
  "        mm_ldsm4(mm_smem_addr(as + (wm * 64 + mi * 16 + (lane & 15)) * MM_ALD + kk + (lane >> 4) * 8), af[mi]);\n"
  "#else\n"
  "        mm_ldsm4t(mm_smem_addr(as + (kk + (lane & 7) + (lane >> 4) * 8) * MM_ALD + wm * 64 + mi * 16 + ((lane >> 3) & 1) * 8), af[mi]);\n"
  "#endif\n"
  "      }\n"
  "#pragma unroll\n"
  "      for (int p = 0; p < MM_TCNJ / 2; p++) {\n"
  "        unsigned r[4];\n"
  "#if MM_BK\n"
  "        mm_ldsm4(mm_smem_addr(bs + (wn * MM_TCNJ * 8 + p * 16 + (lane & 7) + (lane >> 4) * 8) * MM_BLD + kk + ((lane >> 3) & 1) * 8), r);\n"
  "#else\n"
  "        mm_ldsm4t(mm_smem_addr(bs + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * MM_BLD + wn * MM_TCNJ * 8 + p * 16 + (lane >> 4) * 8), r);\n"
  "#endif\n"
  "        bfr[2 * p][0] = r[0]; bfr[2 * p][1] = r[1]; bfr[2 * p + 1][0] = r[2]; bfr[2 * p + 1][1] = r[3];\n"
  "      }\n"
  "#pragma unroll\n"
  "      for (int mi = 0; mi < 4; mi++)\n"
  "#pragma unroll\n"
  "        for (int nj = 0; nj < MM_TCNJ; nj++) MM_MMA(acc[mi][nj], af[mi], bfr[nj][0], bfr[nj][1]);\n"
  "    }\n"
  "  }\n"
  "  mm_cp_wait<0>();\n"
  "#pragma unroll\n"
  "  for (int mi = 0; mi < 4; mi++)\n"
  "#pragma unroll\n"
  "    for (int nj = 0; nj < MM_TCNJ; nj++)\n"
  "#pragma unroll\n"
  "      for (int e = 0; e < 4; e++) {\n"
  "        const long long m = m0 + wm * 64 + mi * 16 + (lane >> 2) + (e >> 1) * 8;\n"
  "        const long long n = n0 + wn * MM_TCNJ * 8 + nj * 8 + (lane & 3) * 2 + (e & 1);\n"
  "        if (m < M && n < N) { MM_EPI(acc[mi][nj][e], m, n); }\n"
  "      }\n"
  "#undef MM_LOAD_A\n"
  "#undef MM_LOAD_B\n"
  "#undef MM_ALD\n"
  "#undef MM_AEL\n"
  "#undef MM_BLD\n"
  "#undef MM_BEL\n";

/* ---- the generator ---- */
static int tc_stages(const cg_mm_desc *d) { return d->tile ? 4 : 3; }
static int tc_threads(const cg_mm_desc *d) { return d->tile ? 128 : 256; }

static const char *const form_names[] = {"gemv_nt", "gemv_nn", "gemm_tc", "gemm_simt", "splitk", "gemv_rw", "gemm_wg"};

static const char *dt_short(grace_dtype dt) {
  return dt == GRACE_FLOAT32 ? "f32" : dt == GRACE_FLOAT16 ? "f16" : dt == GRACE_BFLOAT16 ? "bf16" : "x";
}
static int is_mm_float(grace_dtype dt) {
  return dt == GRACE_FLOAT32 || dt == GRACE_FLOAT16 || dt == GRACE_BFLOAT16;
}
static const char *load_fn(grace_dtype dt) {
  return dt == GRACE_FLOAT16 ? "grace_h2f" : dt == GRACE_BFLOAT16 ? "grace_bf2f" : "(float)";
}
static const char *store_fn(grace_dtype dt) {
  return dt == GRACE_FLOAT16 ? "grace_f2h" : dt == GRACE_BFLOAT16 ? "grace_f2bf" : "(float)";
}

/* FNV-1a over the fields that shape the source (not the struct bytes: padding is not deterministic). */
static uint32_t desc_hash(const cg_mm_desc *d) {
  int64_t f[20 + CG_MM_MAX_OPS + 5 * CG_MM_MAX_EPI];
  int n = 0;
  f[n++] = d->form; f[n++] = d->dt; f[n++] = d->out_dt; f[n++] = d->a_kmajor; f[n++] = d->b_kmajor;
  f[n++] = d->vec; f[n++] = d->a_vec; f[n++] = d->mtile; f[n++] = d->wpr; f[n++] = d->tile; f[n++] = d->split; f[n++] = d->indirect;
  f[n++] = d->prefetch; f[n++] = d->rl; f[n++] = d->rc; f[n++] = d->rw_late;
  f[n++] = d->nop; f[n++] = d->nscalar; f[n++] = d->nepi;
  for (int i = 0; i < d->nop; i++) f[n++] = d->op_dtypes[i];
  for (int i = 0; i < d->nepi; i++) {
    const cg_epi_step *s = &d->epi[i];
    f[n++] = s->op; f[n++] = s->operand; f[n++] = s->dtype; f[n++] = s->flag; f[n++] = s->reversed;
  }
  uint32_t h = 2166136261u;
  for (int i = 0; i < n; i++)
    for (int b = 0; b < 8; b++) { h ^= (uint8_t)((uint64_t)f[i] >> (8 * b)); h *= 16777619u; }
  return h;
}

/* mm_wgmma<TB>(d, da, db): d (64 x 128 fp32, 64 registers a thread of the warpgroup) += A (64 x 16) B^T (16 x 128),
 * both from shared-memory descriptors, B transposed (n-major) when TB; scale-d is a predicate (always accumulate: d
 * starts at zero). */
static void emit_wgmma(cg_buf *b, const char *t) {
  cg_printf(b, "#ifndef CG_MM_WGMMA_%s\n#define CG_MM_WGMMA_%s\n", t, t);
  cg_printf(b, "template <int TB> __device__ __forceinline__ void mm_wgmma(float d[64], unsigned long long da,\n"
               "                                                       unsigned long long db) {\n"
               "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%66, 0;\\n\"\n"
               "    \"wgmma.mma_async.sync.aligned.m64n128k16.f32.%s.%s {", t, t);
  for (int i = 0; i < 64; i++) cg_printf(b, "%s%%%d", i ? ", " : "", i);
  cg_puts(b, "}, %64, %65, p, 1, 1, 0, %67;\\n}\\n\"\n    : ");
  for (int i = 0; i < 64; i++) cg_printf(b, "%s\"+f\"(d[%d])", i ? ", " : "", i);
  cg_puts(b, "\n    : \"l\"(da), \"l\"(db), \"r\"(1), \"n\"(TB));\n}\n#endif\n");
}

/* Rounds the float `e_` to dt when dt is a 16-bit type (the CPU rounds every op's result to its dtype). */
static void emit_round(cg_buf *b, grace_dtype dt) {
  if (dt == GRACE_FLOAT16) cg_puts(b, " e_ = grace_h2f(grace_f2h(e_));");
  else if (dt == GRACE_BFLOAT16) cg_puts(b, " e_ = grace_bf2f(grace_f2bf(e_));");
}

/* A binary step's other operand: scalar S<i>_ or element (m_, n_) of tensor operand i. */
static void operand_expr(char *out, size_t n, int operand) {
  if (operand < 0) snprintf(out, n, "S%d_", -1 - operand);
  else snprintf(out, n, "MM_LDE%d(E%d_[oE%d + (m_) * p.w[%d] + (n_) * p.w[%d]])", operand, operand, operand,
                CG_MM_NWORDS + operand * CG_MM_OPWORDS, CG_MM_NWORDS + operand * CG_MM_OPWORDS + 1);
}

/* MM_EPI(v, m, n): the epilogue chain on one accumulator and the store into C. */
static void emit_epilogue(cg_buf *b, const cg_mm_desc *d) {
  cg_puts(b, "#define MM_EPV(v, m, n, o) do { float e_ = (v); const long long m_ = (m), n_ = (n); (void)m_; (void)n_;");
  if (d->nepi > 0) emit_round(b, d->dt);   /* the product itself is stored in the inputs' dtype first */
  for (int i = 0; i < d->nepi; i++) {
    const cg_epi_step *s = &d->epi[i];
    cg_puts(b, " \\\n  ");
    const char *tmpl = ir_pw_epilogue(s->op, s->flag);
    if (tmpl) {   /* checked by cg_matmul_source; the expression as the pointwise table spells it */
      char opnd[160], e[512];
      operand_expr(opnd, sizeof opnd, s->operand);
      const char *args[2] = {s->reversed ? opnd : "e_", s->reversed ? "e_" : opnd};
      if (!cg_pw_expand(e, sizeof e, tmpl, args, 2, 1, "float")) b->oom = 1;
      else cg_printf(b, "e_ = %s;", e);
    }
    emit_round(b, s->dtype);
  }
  cg_puts(b, " \\\n  o = e_; } while (0)\n");
  cg_puts(b, "#define MM_EPI(v, m, n) do { float o_; MM_EPV(v, m, n, o_); C_[(bi * M + (m)) * N + (n)] = MM_STO(o_); } while (0)\n");
}

grace_status cg_matmul_source(grace_vm *vm, const cg_mm_desc *d, cg_kernel *k) {
  memset(k, 0, sizeof *k);
  if (!is_mm_float(d->dt) || !is_mm_float(d->out_dt) || d->nop < 0 || d->nop > CG_MM_MAX_OPS ||
      d->nscalar < 0 || d->nscalar > CG_MM_MAX_SCALARS || d->nepi < 0 || d->nepi > CG_MM_MAX_EPI)
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: unsupported dtypes or epilogue size");
  if (d->form == CG_MM_GEMM_TC && d->dt == GRACE_FLOAT32)
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: the tensor-core kernel takes f16/bf16 only");
  int vec = d->vec < 1 ? 1 : d->vec, mt = d->mtile < 1 ? 1 : d->mtile, wpr = d->wpr < 1 ? 1 : d->wpr;
  if (wpr != 1 && wpr != 2 && wpr != 4)
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: %d warps per column", wpr);
  if ((d->form == CG_MM_GEMV_NT || d->form == CG_MM_GEMV_NN) &&
      ((vec != 1 && vec * (int)grace_dtype_size(d->dt) != 16) || mt > 16 || mt * vec > 64))
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: bad GEMV vector width %d / rows %d", vec, mt);
  if (d->form == CG_MM_GEMM_WG && (d->dt == GRACE_FLOAT32 || !d->a_kmajor || d->indirect))
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: the Hopper GEMM takes f16/bf16 operands, A k-major, "
                           "its tensor maps hold their pointers (no indirection)");
  if (d->form == CG_MM_GEMV_RW && (vec * (int)grace_dtype_size(d->dt) != 16 || !d->b_kmajor || d->split ||
                                   d->rl < 1 || d->rc < 1 || d->rc > 4 || d->rl * d->rc > CG_MM_RW_MAX_VECS))
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: GEMV_RW of %d x %d vectors of %d", d->rc, d->rl, vec);
  for (int i = 0; i < d->nop; i++)
    if (!is_mm_float(d->op_dtypes[i]))
      return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: epilogue operand dtype %s",
                             grace_dtype_name(d->op_dtypes[i]));
  for (int i = 0; i < d->nepi; i++) {
    int o = d->epi[i].operand;
    int op = d->epi[i].op;
    if (op != GRACE_OP_CAST && !ir_pw_epilogue(op, d->epi[i].flag))
      return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: %s has no epilogue form",
                             (unsigned)op < GRACE_NOPS ? grace_op_name((grace_op)op) : "?");
    int binary = op != GRACE_OP_CAST && grace_op_kind((grace_op)op) == GRACE_KIND_BINARY;
    if (binary && (o >= d->nop || -1 - o >= d->nscalar))
      return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: epilogue step %d names a missing operand", i);
    if (!is_mm_float(d->epi[i].dtype))
      return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: epilogue dtype %s",
                             grace_dtype_name(d->epi[i].dtype));
  }

  snprintf(k->name, sizeof k->name, "gmm_%s_%s_%08x", form_names[d->form], dt_short(d->dt), desc_hash(d));
  k->kind = CG_MATMUL;
  k->indirect = d->indirect;
  k->variant = (int)d->form;
  k->nscalar = d->nscalar;
  const char *nm = k->name;
  const char *T = cg_ctype(d->dt), *OT = cg_ctype(d->out_dt);

  cg_buf b;
  cg_buf_init(&b, vm);
  if (d->form == CG_MM_GEMM_WG) cg_puts(&b, "#define GRACE_ARCH_SPECIFIC 1\n");   /* wgmma: sm_90a (cuda_nvrtc.c) */
  cg_prelude(&b);
  cg_puts(&b, helpers);
  if (d->form == CG_MM_GEMM_WG) {
    /* a product stored as it is (no epilogue, 16-bit out): pairs converted by the hardware */
    int plain = d->nepi == 0 && d->out_dt != GRACE_FLOAT32;
    cg_printf(&b, "#define MM_PLAIN %d\n#define MM_STORE2F mm_store2_%s\n", plain, d->out_dt == GRACE_FLOAT16 ? "f16" : "bf16");
    cg_puts(&b, helpers_wg);
    emit_wgmma(&b, d->dt == GRACE_FLOAT16 ? "f16" : "bf16");
  }
  cg_printf(&b, "/* %s: %s, %s -> %s, A %s-major, B %s-major */\n", nm, form_names[d->form], dt_short(d->dt),
            dt_short(d->out_dt), d->a_kmajor ? "k" : "m", d->b_kmajor ? "k" : "n");
  cg_printf(&b, "#define MM_T %s\n#define MM_OT %s\n#define MM_LD(x) %s(x)\n#define MM_STO(x) %s(x)\n", T, OT,
            load_fn(d->dt), store_fn(d->out_dt));
  cg_printf(&b, "#define MM_VEC %d\n#define MM_MT %d\n#define MM_AK %d\n#define MM_BK %d\n#define MM_STAGES %d\n", vec,
            mt, d->a_kmajor ? 1 : 0, d->b_kmajor ? 1 : 0, tc_stages(d));
  cg_printf(&b, "#define MM_TCW %d\n#define MM_TCNJ %d\n#define MM_TCT %d\n", d->tile ? 2 : 4, d->tile ? 8 : 4,
            tc_threads(d));
  cg_printf(&b, "#define MM_UNPACK(u, f) mm_unpack_%s(u, f)\n#define MM_WPR %d\n#define MM_PREFETCH %d\n", dt_short(d->dt),
            wpr, d->prefetch ? 1 : 0);
  cg_printf(&b, "#define MM_RL %d\n#define MM_RC %d\n#define MM_RWLATE %d\n#define MM_AV %d\n#define MM_WGS %d\n", d->rl,
            d->rc, d->rw_late ? 1 : 0, d->a_vec ? 1 : 0, CG_MM_WG_STAGES);
  cg_printf(&b, "#define MM_MMA(c, a, b0, b1) mm_mma_%s(c, a, b0, b1)\n", d->dt == GRACE_FLOAT16 ? "f16" : "bf16");
  for (int i = 0; i < d->nop; i++) cg_printf(&b, "#define MM_LDE%d(x) %s(x)\n", i, load_fn(d->op_dtypes[i]));
  /* one 16-byte vector of B against MM_MT rows of A (GEMV_NT) */
  if (d->a_vec)
    cg_puts(&b, "#define MM_DOT(wv, kk) { float wf[MM_VEC]; MM_UNPACK(wv, wf); \\\n"
                "  _Pragma(\"unroll\") for (int i = 0; i < MM_MT; i++) if (m0 + i < M) { \\\n"
                "    mm_u4 av = *(const mm_u4 *)(a + (m0 + i) * A_SM + (kk)); float af[MM_VEC]; MM_UNPACK(av, af); \\\n"
                "    _Pragma(\"unroll\") for (int j = 0; j < MM_VEC; j++) acc[i] += af[j] * wf[j]; } }\n");
  else
    cg_puts(&b, "#define MM_DOT(wv, kk) { float wf[MM_VEC]; MM_UNPACK(wv, wf); \\\n"
                "  _Pragma(\"unroll\") for (int i = 0; i < MM_MT; i++) if (m0 + i < M) { \\\n"
                "    _Pragma(\"unroll\") for (int j = 0; j < MM_VEC; j++) \\\n"
                "      acc[i] += MM_LD(a[(m0 + i) * A_SM + ((kk) + j) * A_SK]) * wf[j]; } }\n");

  /* the parameter struct */
  const char *ind = d->indirect ? "*" : "";
  cg_printf(&b, "struct %s_p {\n  const MM_T *%sA;\n  const MM_T *%sB;\n  MM_OT *%sC;\n  float *%sWS;\n", nm, ind, ind,
            ind, ind);
  for (int i = 0; i < d->nop; i++) cg_printf(&b, "  const %s *%sE%d;\n", cg_ctype(d->op_dtypes[i]), ind, i);
  cg_printf(&b, "  long long w[%d];\n", CG_MM_NWORDS + d->nop * CG_MM_OPWORDS);
  for (int i = 0; i < d->nscalar; i++) cg_printf(&b, "  const double %ss%d;\n", d->indirect ? "*" : "", i);
  if (d->form == CG_MM_GEMM_WG) cg_puts(&b, "  mm_tmap ta, tb;   /* A [M, K], B [N, K] or [K, N] (cg_matmul_wg_maps) */\n");
  cg_puts(&b, "};\n");
  emit_epilogue(&b, d);
  if (d->split) cg_puts(&b, "#define MM_OUT(v, m, n) WS_[(((long long)blockIdx.y * NB + bi) * M + (m)) * N + (n)] = (v)\n");
  else cg_puts(&b, "#define MM_OUT(v, m, n) MM_EPI(v, m, n)\n");

  static const int threads[] = {CG_MM_NT_WARPS * 32, CG_MM_NN_COLS * CG_MM_NN_KSLICES, 0,
                                CG_MM_SIMT_THREADS, 256, CG_MM_NT_WARPS * 32, CG_MM_WG_THREADS};
  cg_printf(&b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(const %s%s_p p) {\n",
            d->form == CG_MM_GEMM_TC ? tc_threads(d) : threads[d->form], nm,
            d->form == CG_MM_GEMM_WG ? "__grid_constant__ " : "", nm);
  const char *deref = d->indirect ? "*" : "";
  cg_printf(&b, "  const MM_T *A_ = %sp.A; const MM_T *B_ = %sp.B; MM_OT *C_ = %sp.C; float *WS_ = %sp.WS;\n", deref,
            deref, deref, deref);
  cg_puts(&b, "  (void)A_; (void)B_; (void)C_; (void)WS_;\n");
  for (int i = 0; i < d->nop; i++) cg_printf(&b, "  const %s *E%d_ = %sp.E%d;\n", cg_ctype(d->op_dtypes[i]), i, deref, i);
  for (int i = 0; i < d->nscalar; i++) cg_printf(&b, "  const float S%d_ = (float)%sp.s%d;\n", i, deref, i);
  static const char *const wnames[CG_MM_NWORDS] = {"M", "N", "K", "NB", "BD0", "BD1", "BD2", "A_SM", "A_SK", "A_B0",
                                                   "A_B1", "A_B2", "B_SK", "B_SN", "B_B0", "B_B1", "B_B2", "SPLITS",
                                                   "KCHUNK"};
  for (int i = 0; i < CG_MM_NWORDS; i++) cg_printf(&b, "  const long long %s = p.w[%d]; (void)%s;\n", wnames[i], i, wnames[i]);
  /* the batch index's coordinates: no divisions for the first (or only) matrix. Every thread runs this before
   * its first load, and a bf16 GEMV thread has only a few loads, so three divisions are a large share of its life
   * (suspected cause of the bf16 LM head's 74% against 88% for a kernel without them; not measured yet) */
  cg_puts(&b, "  const long long bi = blockIdx.z;\n  long long i0 = 0, i1 = 0, i2 = 0;\n"
              "  if (bi) { i0 = bi / (BD1 * BD2); i1 = bi / BD2 % BD1; i2 = bi % BD2; }\n");
  cg_puts(&b, "  const long long offA = i0 * A_B0 + i1 * A_B1 + i2 * A_B2, offB = i0 * B_B0 + i1 * B_B1 + i2 * B_B2;\n");
  cg_puts(&b, "  (void)offA; (void)offB;\n");
  for (int i = 0; i < d->nop; i++) {
    int w0 = CG_MM_NWORDS + i * CG_MM_OPWORDS;
    cg_printf(&b, "  const long long oE%d = i0 * p.w[%d] + i1 * p.w[%d] + i2 * p.w[%d];\n", i, w0 + 2, w0 + 3, w0 + 4);
  }
  static const char *const bodies[] = {body_gemv_nt, body_gemv_nn, body_tc, body_simt, body_splitk, body_gemv_rw,
                                       body_wg};
  cg_puts(&b, bodies[d->form]);
  cg_puts(&b, "}\n#undef MM_T\n#undef MM_OT\n#undef MM_LD\n#undef MM_STO\n#undef MM_VEC\n#undef MM_MT\n#undef MM_AK\n"
              "#undef MM_BK\n#undef MM_STAGES\n#undef MM_WPR\n#undef MM_WGS\n#undef MM_PLAIN\n#undef MM_STORE2F\n#undef MM_RL\n#undef MM_RC\n#undef MM_RWLATE\n#undef MM_AV\n#undef MM_PREFETCH\n#undef MM_TCW\n#undef MM_TCNJ\n#undef MM_TCT\n#undef MM_UNPACK\n#undef MM_MMA\n#undef MM_DOT\n#undef MM_EPV\n#undef MM_EPI\n#undef MM_OUT\n");
  for (int i = 0; i < d->nop; i++) cg_printf(&b, "#undef MM_LDE%d\n", i);
  k->src = cg_buf_take(&b, &k->src_len);
  if (!k->src) return grace_set_error(vm, GRACE_ENOMEM, "matmul codegen: out of memory");
  return GRACE_OK;
}

int cg_matmul_wg_maps(int nwords) { return (nwords + 7) / 8 * 8; }

unsigned cg_matmul_tc_smem(const cg_mm_desc *d) {
  unsigned a = d->a_kmajor ? 128 * 40 : 32 * 136, b = d->b_kmajor ? 128 * 40 : 32 * 136;
  return (unsigned)tc_stages(d) * (a + b) * 2u;
}

static unsigned cdiv(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

void cg_matmul_geometry(const cg_mm_desc *d, cg_launch *l) {
  int64_t M = (int64_t)l->words[CG_MM_M], N = (int64_t)l->words[CG_MM_N];
  int64_t nb = (int64_t)l->words[CG_MM_NB], splits = (int64_t)l->words[CG_MM_SPLITS];
  int vec = d->vec < 1 ? 1 : d->vec;
  l->grid[2] = (unsigned)(nb > 0 ? nb : 1);
  l->grid[1] = 1;
  l->block[1] = l->block[2] = 1;
  l->smem = 0;
  switch (d->form) {
  case CG_MM_GEMV_NT:
    l->block[0] = CG_MM_NT_WARPS * 32; l->grid[0] = cdiv(N, CG_MM_NT_WARPS / (d->wpr > 1 ? d->wpr : 1));
    l->grid[1] = (unsigned)splits; break;
  case CG_MM_GEMV_NN:
    l->block[0] = CG_MM_NN_COLS; l->block[1] = CG_MM_NN_KSLICES; l->grid[0] = cdiv(N, CG_MM_NN_COLS * vec);
    l->grid[1] = (unsigned)splits; break;
  case CG_MM_GEMM_TC:
    l->block[0] = (unsigned)tc_threads(d); l->grid[0] = cdiv(N, CG_MM_TC_BN); l->grid[1] = cdiv(M, CG_MM_TC_BM);
    l->smem = cg_matmul_tc_smem(d); break;
  case CG_MM_GEMM_SIMT:
    l->block[0] = CG_MM_SIMT_THREADS; l->grid[0] = cdiv(N, CG_MM_SIMT_BN); l->grid[1] = cdiv(M, CG_MM_SIMT_BM); break;
  case CG_MM_SPLITK:
    l->block[0] = 256; l->grid[0] = cdiv(M * N, 256); break;
  case CG_MM_GEMM_WG:
    l->block[0] = CG_MM_WG_THREADS; l->grid[0] = cdiv(N, 128); l->grid[1] = cdiv(M, 128);
    l->smem = CG_MM_WG_SMEM; break;
  case CG_MM_GEMV_RW:
    l->block[0] = CG_MM_NT_WARPS * 32; l->grid[0] = cdiv(N, CG_MM_NT_WARPS * (d->rc > 0 ? d->rc : 1)); break;
  }
  if (l->grid[0] == 0) l->grid[0] = 1;
  if (l->grid[1] == 0) l->grid[1] = 1;
}
