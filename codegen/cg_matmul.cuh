// cg_matmul.cuh: the matmul kernels' shared PTX wrappers and the GEMV bodies (cg_matmul.c). A body runs inside
// the generated kernel, after its entry block (pointers A_, B_, C_, WS_, the words M, N, K, ..., the batch index bi
// and offsets offA, offB) and specialised by the MM_* #defines written before it; the epilogue MM_EPI(v, m, n) and
// MM_OUT are generated too. Format: see cg_prelude.cuh.

// PTX wrappers shared by the templates; guarded so several matmul kernels can share one NVRTC program.
//@ matmul_helpers
#ifndef CG_MM_HELPERS
#define CG_MM_HELPERS
struct __attribute__((aligned(16))) mm_u4 { unsigned x, y, z, w; };
__device__ __forceinline__ unsigned mm_smem_addr(const void *p) {
  unsigned r; asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p)); return r;
}
/* 16 bytes global -> shared, asynchronously; bytes 0 zero-fills (out-of-range rows and columns) */
__device__ __forceinline__ void mm_cp16(unsigned dst, const void *src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void mm_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void mm_cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }
__device__ __forceinline__ void mm_ldsm4(unsigned a, unsigned r[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void mm_ldsm4t(unsigned a, unsigned r[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void mm_mma_bf16(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mm_mma_f16(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* 16 bytes of a weight that is read once: the read-only path, not kept in L1 (volatile: stays after
   griddepcontrol.wait); it makes the fp32 LM head faster (bench/RESULTS.md). */
__device__ __forceinline__ mm_u4 mm_ld_stream(const void *p) {
  mm_u4 r;
#if __CUDA_ARCH__ >= 800
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
#else
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
#endif
  return r;
}
/* 16 bytes as floats: 4 f32, or 8 halves (element 0 in the low bits: little endian) */
__device__ __forceinline__ void mm_unpack_f32(const mm_u4 &u, float f[4]) {
  f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y); f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
}
__device__ __forceinline__ void mm_unpack_bf16(const mm_u4 &u, float f[8]) {
  const unsigned v[4] = {u.x, u.y, u.z, u.w};
  for (int i = 0; i < 4; i++) { f[2 * i] = __uint_as_float(v[i] << 16); f[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u); }
}
__device__ __forceinline__ void mm_unpack_f16(const mm_u4 &u, float f[8]) {
  const unsigned v[4] = {u.x, u.y, u.z, u.w};
  for (int i = 0; i < 4; i++) { f[2 * i] = grace_h2f((unsigned short)(v[i] & 0xffffu)); f[2 * i + 1] = grace_h2f((unsigned short)(v[i] >> 16)); }
}
#endif

// PTX wrappers of the Hopper GEMM (GEMM_WG): mbarriers, TMA loads, shared-memory matrix descriptors.
//@ matmul_helpers_wg
#ifndef CG_MM_WG_HELPERS
#define CG_MM_WG_HELPERS
/* the driver's CUtensorMap: 128 opaque bytes, passed inside the __grid_constant__ parameter struct */
struct __attribute__((aligned(64))) mm_tmap { unsigned long long q[16]; };
__device__ __forceinline__ void mm_mbar_init(unsigned long long *b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(mm_smem_addr(b)), "r"(count));
}
__device__ __forceinline__ void mm_mbar_expect(unsigned long long *b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(mm_smem_addr(b)), "r"(bytes) : "memory");
}
/* arrive and wait take the barrier's shared address (computed once by the caller) */
__device__ __forceinline__ void mm_mbar_arrive(unsigned b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(b) : "memory");
}
__device__ __forceinline__ void mm_mbar_wait(unsigned b, int parity) {
  asm volatile("{\n .reg .pred P1;\n LAB_WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
               " @P1 bra DONE;\n bra LAB_WAIT;\n DONE:\n}\n" :: "r"(b), "r"(parity) : "memory");
}
/* the box at (x = k, y = row) of the map into shared memory, its bytes counted on the mbarrier */
__device__ __forceinline__ void mm_tma_load(void *dst, const mm_tmap *map, int x, int y, unsigned long long *bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(mm_smem_addr(dst)), "l"(map), "r"(x), "r"(y), "r"(mm_smem_addr(bar)) : "memory");
}
/* a shared-memory matrix descriptor of a tile with the 128-byte swizzle: 8-row atoms of 1024 bytes (the stride byte
   offset); `lead` the leading byte offset, unused by k-major tiles (16), and for an n-major tile (wgmma's transposed
   B) the 8192 bytes between its 64-column boxes. The other reading of the two fields for n-major tiles gives wrong
   products; this one matches cuBLAS (bench/gemm_wgmma.cu) */
__device__ __forceinline__ unsigned long long mm_sdesc(const void *p, unsigned lead) {
  const unsigned long long a = mm_smem_addr(p);
  return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(lead >> 4) << 16) | ((unsigned long long)(1024 >> 4) << 32) |
         (1ull << 62);
}
/* two adjacent results in one store (the first at an even index of an even-width row: 4- or 8-byte aligned) */
__device__ __forceinline__ void mm_store2(unsigned short *p, unsigned short a, unsigned short b) {
  *(unsigned *)p = (unsigned)a | ((unsigned)b << 16);
}
struct __attribute__((aligned(8))) mm_f2 { float x, y; };
__device__ __forceinline__ void mm_store2(float *p, float a, float b) { *(mm_f2 *)p = mm_f2{a, b}; }
#endif
/* two float results rounded to nearest even by one conversion (a NaN becomes the canonical one); the first in the low
   half, the lower address */
#ifndef CG_MM_STORE2F
#define CG_MM_STORE2F
__device__ __forceinline__ void mm_store2_bf16(unsigned short *p, float a, float b) {
  unsigned u;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(b), "f"(a));
  *(unsigned *)p = u;
}
__device__ __forceinline__ void mm_store2_f16(unsigned short *p, float a, float b) {
  unsigned u;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(b), "f"(a));
  *(unsigned *)p = u;
}
#endif

// mm_wgmma<TB>(d, da, db), GEMM_WG: d (64 x 128 fp32, 64 registers a thread of the warpgroup) += A (64 x 16)
// B^T (16 x 128), both from shared-memory descriptors, B transposed (n-major) when TB; scale-d is a predicate (always
// accumulate: d starts at zero). The operands' type MM_WGT ("f16" or "bf16") is written before it; one type a program.
//@ matmul_wgmma
#ifndef CG_MM_WGMMA
#define CG_MM_WGMMA
template <int TB> __device__ __forceinline__ void mm_wgmma(float d[64], unsigned long long da,
                                                       unsigned long long db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n128k16.f32." MM_WGT "." MM_WGT " {"
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
    "}, %64, %65, p, 1, 1, 0, %67;\n}\n"
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
    : "l"(da), "l"(db), "r"(1), "n"(TB));
}
#endif

// A norm as the GEMVs' prologue (desc norm; MM_NORM 1: layer norm, 2: RMS norm): a warp computes a row's statistics
// from the raw row (MM_NSTATS, in float32 as the norm kernel does: the mean, then the mean square about it), and each
// element of A is normalised as it is read (MM_NX), rounded to A's dtype as the norm's stored result would be.
// Both read A, which the kernel before may write: they run after griddepcontrol.wait. Every lane of the warp runs
// MM_NSTATS (warp sums); with MM_AV (A's rows aligned vectors) in 16-byte loads. MM_NWP/MM_NBP: whether the weight
// NW_ and the bias NB_ are there; MM_EPS the epsilon.
//@ matmul_norm
#if MM_AV
/* rows 16-byte aligned, K a multiple of MM_VEC (the vector GEMVs): a lane reads vectors */
#define MM_NFOR(x, e) for (long long k_ = (long long)lane * MM_VEC; k_ < K; k_ += 32LL * MM_VEC) { \
    float v_[MM_VEC]; MM_UNPACK(*(const mm_u4 *)((x) + k_), v_); \
    _Pragma("unroll") for (int j_ = 0; j_ < MM_VEC; j_++) { e; } }
#else
#define MM_NFOR(x, e) for (long long k_ = lane; k_ < K; k_ += 32) { \
    const float v_[1] = {MM_LD((x)[k_ * A_SK])}; const int j_ = 0; { e; } }
#endif
#define MM_NSTATS(x, mu, rs) do { float s_ = 0.0f, q_ = 0.0f; \
  if (MM_NORM == 1) MM_NFOR(x, s_ += v_[j_]); \
  (mu) = grace_warp_sum_f(s_) / (float)K; \
  MM_NFOR(x, const float d_ = v_[j_] - (mu); q_ += d_ * d_); \
  (rs) = rsqrtf(grace_warp_sum_f(q_) / (float)K + MM_EPS); } while (0)
#if MM_NWP
#define MM_NWV(k) * MM_LD(NW_[k])
#else
#define MM_NWV(k)
#endif
#if MM_NBP
#define MM_NBV(k) + MM_LD(NB_[k])
#else
#define MM_NBV(k)
#endif
#define MM_NX(v, mu, rs, k) MM_RND(((v) - (mu)) * (rs) MM_NWV(k) MM_NBV(k))
#define MM_AX(i, k, v) MM_NX(v, nmu[i], nrs[i], k)

// MM_DOT(wv, kk), GEMV_NT: one 16-byte vector of B against MM_MT rows of A, A rows loaded as vectors too
//@ matmul_dot_avec
#define MM_DOT(wv, kk) { float wf[MM_VEC]; MM_UNPACK(wv, wf); \
  _Pragma("unroll") for (int i = 0; i < MM_MT; i++) if (m0 + i < M) { \
    mm_u4 av = *(const mm_u4 *)(a + (m0 + i) * A_SM + (kk)); float af[MM_VEC]; MM_UNPACK(av, af); \
    _Pragma("unroll") for (int j = 0; j < MM_VEC; j++) acc[i] += MM_AX(i, (kk) + j, af[j]) * wf[j]; } }

// MM_DOT(wv, kk), GEMV_NT: one 16-byte vector of B against MM_MT rows of A, A read element by element
//@ matmul_dot
#define MM_DOT(wv, kk) { float wf[MM_VEC]; MM_UNPACK(wv, wf); \
  _Pragma("unroll") for (int i = 0; i < MM_MT; i++) if (m0 + i < M) { \
    _Pragma("unroll") for (int j = 0; j < MM_VEC; j++) \
      acc[i] += MM_AX(i, (kk) + j, MM_LD(a[(m0 + i) * A_SM + ((kk) + j) * A_SK])) * wf[j]; } }

// Few rows, B[n, k] rows contiguous: MM_WPR warps per output column stream that row of B once with 16-byte
// loads (4 in flight per lane), every row of A against it; warp-shuffle sums, then shared memory across the
// column's warps. Split-K: blockIdx.y.
//@ matmul_gemv_nt
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % MM_WPR;
  const long long n = (long long)blockIdx.x * (4 / MM_WPR) + warp / MM_WPR;
  const bool live = n < N;
#if MM_WPR > 1
  __shared__ float red[4][MM_MT];
#else
  if (!live) return;
#endif
  const long long kb = (long long)blockIdx.y * KCHUNK, ke = kb + KCHUNK < K ? kb + KCHUNK : K;
  const MM_T *w = B_ + offB + (live ? n : 0) * B_SN;
  const MM_T *a = A_ + offA;
  /* launched as a programmatic dependent: let the next kernel start, pull this column of the weight into L2
     while the kernel before finishes (a one-wave grid only: in a longer one most blocks start after it, and
     the prefetches slow the LM head), and only then read what it wrote (no-ops in a plain
     launch) */
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
#if MM_PREFETCH
  if (live)
    for (long long k = kb + (part * 32 + lane) * MM_VEC; k < ke; k += 32LL * MM_WPR * MM_VEC)
      asm volatile("prefetch.global.L2 [%0];" :: "l"(w + k));
#endif
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  for (long long m0 = 0; m0 < M; m0 += MM_MT) {
    float acc[MM_MT];
#pragma unroll
    for (int i = 0; i < MM_MT; i++) acc[i] = 0.0f;
#if MM_NORM
    float nmu[MM_MT], nrs[MM_MT];
#pragma unroll
    for (int i = 0; i < MM_MT; i++) { nmu[i] = 0.0f; nrs[i] = 1.0f; if (m0 + i < M) MM_NSTATS(a + (m0 + i) * A_SM, nmu[i], nrs[i]); }
#endif
    if (live) {
#if MM_VEC > 1
      /* 4 vectors per lane in flight: all loads of a step are issued before the first is used */
      const long long step = 32LL * MM_WPR * MM_VEC;
      for (long long k = kb + (part * 32 + lane) * MM_VEC; k < ke; k += 4 * step) {
        mm_u4 wv[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
          if (k + u * step + MM_VEC <= ke) wv[u] = mm_ld_stream(w + k + u * step);
          else wv[u].x = wv[u].y = wv[u].z = wv[u].w = 0u;
        }
#pragma unroll
        for (int u = 0; u < 4; u++) if (k + u * step + MM_VEC <= ke) MM_DOT(wv[u], k + u * step);
      }
#else
      for (long long k = kb + part * 32 + lane; k < ke; k += 32 * MM_WPR) {
        const float wf = MM_LD(w[k]);
#pragma unroll
        for (int i = 0; i < MM_MT; i++) if (m0 + i < M) acc[i] += MM_AX(i, k, MM_LD(a[(m0 + i) * A_SM + k * A_SK])) * wf;
      }
#endif
    }
#pragma unroll
    for (int i = 0; i < MM_MT; i++) acc[i] = grace_warp_sum_f(acc[i]);
#if MM_WPR > 1
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < MM_MT; i++) red[warp][i] = acc[i];
    }
    __syncthreads();
    if (lane == 0 && part == 0 && live) {
#pragma unroll
      for (int i = 0; i < MM_MT; i++) {
        float s = red[warp][i];
#pragma unroll
        for (int q = 1; q < MM_WPR; q++) s += red[warp + q][i];
        if (m0 + i < M) { MM_OUT(s, m0 + i, n); }
      }
    }
    __syncthreads();
#else
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < MM_MT; i++) if (m0 + i < M) { MM_OUT(acc[i], m0 + i, n); }
    }
#endif
  }

// Few rows, B[k, n] rows contiguous: each thread owns MM_VEC adjacent columns (one 16-byte load per k), the 8
// thread rows of a block split k; their partial sums meet in shared memory, where every thread finishes one
// column so the epilogue runs wide.
//@ matmul_gemv_nn
  __shared__ float red[8][32 * MM_VEC];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const long long nbase = (long long)blockIdx.x * 32 * MM_VEC, n0 = nbase + tx * MM_VEC;
  const bool live = n0 < N;
  const long long kb = (long long)blockIdx.y * KCHUNK, ke = kb + KCHUNK < K ? kb + KCHUNK : K;
  const MM_T *w = B_ + offB + n0;
  const MM_T *a = A_ + offA;
  for (long long m0 = 0; m0 < M; m0 += MM_MT) {
    float acc[MM_MT][MM_VEC];
#pragma unroll
    for (int i = 0; i < MM_MT; i++)
#pragma unroll
      for (int j = 0; j < MM_VEC; j++) acc[i][j] = 0.0f;
    if (live) {
#pragma unroll 4
      for (long long k = kb + ty; k < ke; k += 8) {
        float wf[MM_VEC];
#if MM_VEC > 1
        mm_u4 wv = mm_ld_stream(w + k * B_SK);
        MM_UNPACK(wv, wf);
#else
        wf[0] = MM_LD(w[k * B_SK]);
#endif
#pragma unroll
        for (int i = 0; i < MM_MT; i++) if (m0 + i < M) {
          const float av = MM_LD(a[(m0 + i) * A_SM + k * A_SK]);
#pragma unroll
          for (int j = 0; j < MM_VEC; j++) acc[i][j] += av * wf[j];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < MM_MT; i++) {
      if (m0 + i >= M) break;
#pragma unroll
      for (int j = 0; j < MM_VEC; j++) red[ty][tx * MM_VEC + j] = acc[i][j];
      __syncthreads();
      for (int c = ty * 32 + tx; c < 32 * MM_VEC; c += 256) {
        const long long n = nbase + c;
        if (n < N) {
          float s = 0.0f;
#pragma unroll
          for (int y = 0; y < 8; y++) s += red[y][c];
          MM_OUT(s, m0 + i, n);
        }
      }
      __syncthreads();
    }
  }

// Few rows, B[n, k] rows contiguous and short: a warp owns MM_RC adjacent columns and each lane MM_RL 16-byte
// vectors of each, all loaded into registers before griddepcontrol.wait, so the weight streams while the kernels
// before this one finish. The next kernel is let in only after the loads are issued: ptxas hoists the wait above
// loads that precede it, but not above launch_dependents (seen in the SASS on sm_90). In a graph of decode GEMVs
// this is much faster than the same kernel loading after the wait (bench/RESULTS.md). Few warps holding many weights each let the next kernels' blocks fit beside this one's. Each lane's loads
// are constant offsets from one pointer a column; rows up to MM_MT (desc mtile, a power of two >= M). With
// MM_RWLATE (a weight some kernel still running may write) the loads follow the wait: the layout alone, every
// load of a warp in flight at once, is what makes it the faster LM head (bench/RESULTS.md).
//@ matmul_gemv_rw
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, kl = lane * MM_VEC;
  const long long n0 = ((long long)blockIdx.x * (blockDim.x >> 5) + warp) * MM_RC;
#if MM_RWLATE && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  mm_u4 wv[MM_RC][MM_RL];
#pragma unroll
  for (int c = 0; c < MM_RC; c++) {
    const MM_T *w = B_ + offB + (n0 + c < N ? n0 + c : N - 1) * B_SN + kl;
#pragma unroll
    for (int u = 0; u < MM_RL; u++) {
      if (kl + u * 32 * MM_VEC < K) wv[c][u] = mm_ld_stream(w + u * 32 * MM_VEC);
      else wv[c][u].x = wv[c][u].y = wv[c][u].z = wv[c][u].w = 0u;
    }
  }
#if !MM_RWLATE && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  /* MM_MT rows at most, a compile-time bound: under a loop to a run-time M the compiler unpacked 16-bit weights
     once outside it and kept the floats (bf16 at K 3072: 128 registers, 70 without) */
#pragma unroll
  for (int m = 0; m < MM_MT; m++) {
    if (m >= M) break;
    const MM_T *x = A_ + offA + m * A_SM;
#if MM_NORM
    float nmu[1], nrs[1];
    MM_NSTATS(x, nmu[0], nrs[0]);
#endif
    float acc[MM_RC];
#pragma unroll
    for (int c = 0; c < MM_RC; c++) acc[c] = 0.0f;
#pragma unroll
    for (int u = 0; u < MM_RL; u++) {
      const int k = kl + u * 32 * MM_VEC;
      float xf[MM_VEC];
#if MM_AV
      mm_u4 xv;
      if (k < K) xv = *(const mm_u4 *)(x + k);
      else xv.x = xv.y = xv.z = xv.w = 0u;
      MM_UNPACK(xv, xf);
#else
#pragma unroll
      for (int j = 0; j < MM_VEC; j++) xf[j] = k < K ? MM_LD(x[(long long)(k + j) * A_SK]) : 0.0f;
#endif
#if MM_NORM
#pragma unroll
      for (int j = 0; j < MM_VEC; j++) xf[j] = k + j < K ? MM_AX(0, k + j, xf[j]) : 0.0f;
#endif
#pragma unroll
      for (int c = 0; c < MM_RC; c++) {
        float wf[MM_VEC];
        MM_UNPACK(wv[c][u], wf);
#pragma unroll
        for (int j = 0; j < MM_VEC; j++) acc[c] += xf[j] * wf[j];
      }
    }
#pragma unroll
    for (int c = 0; c < MM_RC; c++) acc[c] = grace_warp_sum_f(acc[c]);
    if (lane == 0) {
#pragma unroll
      for (int c = 0; c < MM_RC; c++) if (n0 + c < N) { MM_OUT(acc[c], m, n0 + c); }
    }
  }

// The split-K finish: one thread per output element sums the partials in split order.
//@ matmul_splitk
  const long long idx = (long long)blockIdx.x * 256 + threadIdx.x;
  if (idx >= M * N) return;
  const long long m = idx / N, n = idx - m * N;
  float s = 0.0f;
  for (long long sp = 0; sp < SPLITS; sp++) s += WS_[(sp * NB + bi) * M * N + idx];
  MM_EPI(s, m, n);

// the end of every matmul kernel: its body closed, the specialising macros undefined (several kernels may share one
// NVRTC program); the epilogue operands' MM_LDE<i> are undefined by the generator
//@ matmul_end
}
#undef MM_T
#undef MM_OT
#undef MM_LD
#undef MM_STO
#undef MM_VEC
#undef MM_MT
#undef MM_AK
#undef MM_BK
#undef MM_STAGES
#undef MM_WPR
#undef MM_WGS
#undef MM_PLAIN
#undef MM_STORE2F
#undef MM_WGT
#undef MM_RL
#undef MM_RC
#undef MM_RWLATE
#undef MM_AV
#undef MM_PREFETCH
#undef MM_TCW
#undef MM_TCNJ
#undef MM_TCT
#undef MM_UNPACK
#undef MM_MMA
#undef MM_DOT
#undef MM_AX
#undef MM_NORM
#undef MM_NWP
#undef MM_NBP
#undef MM_EPS
#undef MM_RND
#undef MM_NSTATS
#undef MM_NFOR
#undef MM_NWV
#undef MM_NBV
#undef MM_NX
#undef MM_EPV
#undef MM_EPI
#undef MM_OUT
