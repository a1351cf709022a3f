// gemv_explore.cu: design experiment for decode GEMVs in a CUDA graph (not part of grace's build; nvcc, runtime
// API). y[n] = sum_k x[k] * W[n, k]; W rows contiguous. Hand-written variants: warps per column (WPR), loads in
// flight per lane (UNR), columns per warp (NPW), PDL on/off, weights into L2 (prefetch) or registers before
// griddepcontrol.wait; the chain's per-kernel timeline (%globaltimer), its floors, and what was tried against it
// (block shapes, kernels an SM, TMA bulk copies, L2 prefetch ahead, a prefetching side branch, ways of fetching x,
// kernels on disjoint halves of the SMs); per-block records of a replay (BT); and grace's own generated kernels
// (gemv_grace_gen.cuh, printed by gemv_grace_gen.c) in the same harness. Run by `bench/device.sh gemv` (GEMV_ONLY
// picks variants by name); findings in bench/RESULTS.md (sessions 5-9).
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <vector>
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <cmath>
#include <cstring>
#include <string>
#include <map>
#include "gemv_grace_gen.cuh"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

static inline float __uint_as_float_host(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }

template <typename T> __device__ __forceinline__ void unpack(const uint4 &u, float *f);
template <> __device__ __forceinline__ void unpack<float>(const uint4 &u, float *f) {
  f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y); f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
}
template <> __device__ __forceinline__ void unpack<__nv_bfloat16>(const uint4 &u, float *f) {
  const unsigned v[4] = {u.x, u.y, u.z, u.w};
  for (int i = 0; i < 4; i++) { f[2 * i] = __uint_as_float(v[i] << 16); f[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u); }
}

// MODE 0: L2 prefetch before wait; 1: registers before wait (first UNR vectors); 2: nothing before wait
template <typename T, int WPR, int UNR, int NPW, int MODE>
__global__ void __launch_bounds__(128) gemv(const T *__restrict__ x, const T *__restrict__ W, T *__restrict__ y, int N, int K) {
  constexpr int VEC = 16 / sizeof(T);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % WPR;
  const long long n0 = ((long long)blockIdx.x * (4 / WPR) + warp / WPR) * NPW;
  __shared__ float red[4][NPW];
  const long long step = 32LL * WPR * VEC;
  const long long kb = (long long)(part * 32 + lane) * VEC;
  const T *w[NPW];
#pragma unroll
  for (int c = 0; c < NPW; c++) w[c] = W + (n0 + c < N ? n0 + c : N - 1) * (long long)K;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  uint4 wv[NPW][UNR];
  if (MODE == 0) {
#pragma unroll
    for (int c = 0; c < NPW; c++)
      for (long long k = kb; k < K; k += step) asm volatile("prefetch.global.L2 [%0];" :: "l"(w[c] + k));
  }
  if (MODE == 1) {
#pragma unroll
    for (int c = 0; c < NPW; c++)
#pragma unroll
      for (int u = 0; u < UNR; u++) {
        long long k = kb + u * step;
        if (k < K) wv[c][u] = *(const uint4 *)(w[c] + k);
      }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  float acc[NPW];
#pragma unroll
  for (int c = 0; c < NPW; c++) acc[c] = 0.f;
  for (long long k0 = 0; k0 < K; k0 += UNR * step) {
    if (!(MODE == 1 && k0 == 0)) {
#pragma unroll
      for (int c = 0; c < NPW; c++)
#pragma unroll
        for (int u = 0; u < UNR; u++) {
          long long k = k0 + kb + u * step;
          if (k < K) wv[c][u] = *(const uint4 *)(w[c] + k);
        }
    }
#pragma unroll
    for (int u = 0; u < UNR; u++) {
      long long k = k0 + kb + u * step;
      if (k < K) {
        uint4 xv = *(const uint4 *)(x + k);
        float xf[VEC];
        unpack<T>(xv, xf);
#pragma unroll
        for (int c = 0; c < NPW; c++) {
          float wf[VEC];
          unpack<T>(wv[c][u], wf);
#pragma unroll
          for (int j = 0; j < VEC; j++) acc[c] += xf[j] * wf[j];
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < NPW; c++)
    for (int o = 16; o; o >>= 1) acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], o);
  if (WPR > 1) {
    if (lane == 0)
      for (int c = 0; c < NPW; c++) red[warp][c] = acc[c];
    __syncthreads();
    if (lane == 0 && part == 0)
      for (int c = 0; c < NPW; c++) {
        float s = 0;
        for (int q = 0; q < WPR; q++) s += red[warp + q][c];
        if (n0 + c < N) y[n0 + c] = (T)s;
      }
  } else if (lane == 0) {
    for (int c = 0; c < NPW; c++) if (n0 + c < N) y[n0 + c] = (T)acc[c];
  }
}


// the timeline: 6 words a kernel of the chain (%globaltimer ns): earliest and latest block start, earliest and latest
// wait release (thread 0 of each block), earliest and latest warp end
#define TLW 6
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// ordered after the memory operations before it (the stores of bt_sink that wait for the registers they store)
__device__ __forceinline__ unsigned long long gtimer_m() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
  return t;
}
// per-block records (BT variants): block start, wait release, weights in registers, dot products done, end
#define BTW 5
#define BT_MAXB 512
__device__ volatile unsigned bt_sink;
__device__ volatile float bt_sinkf;
__device__ __forceinline__ void tl_released(unsigned long long *tl, unsigned long long t_start) {
  if (!tl || threadIdx.x) return;
  const unsigned long long t = gtimer();
  atomicMin(&tl[0], t_start); atomicMax(&tl[1], t_start);
  atomicMin(&tl[2], t); atomicMax(&tl[3], t);
}
__device__ __forceinline__ void tl_end(unsigned long long *tl) {
  if (!tl) return;
  __syncwarp();
  const unsigned long long t = gtimer();
  if ((threadIdx.x & 31) == 0) { atomicMin(&tl[4], t); atomicMax(&tl[5], t); }
}

// register-resident (session 6): a warp owns C adjacent columns, each lane L 16-byte vectors of each (K = L * 32 *
// VEC exactly), all loaded before griddepcontrol.wait when PRE (safe only when no kernel still running writes W);
// TRIG 0 lets the next kernel launch at entry, 1 only after this one's wait (then at most one kernel runs ahead).
// Few warps holding many weights each, so the next kernel's blocks fit beside this one's and load meanwhile.
__device__ __forceinline__ uint4 ld_nc(const void *p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
// XS 6: all of x loaded into registers before the first FMA; XS 7: the same, forced by a dependency;
// XS 8: x into shared memory by one bulk copy (TMA) a block after the release;
// XS 3: x through the non-coherent path (ld.global.nc: x is settled once the wait returns);
// XS 4: XREP copies of x XREP_STRIDE elements apart, block b reading copy b % XREP (harness only: spreads x's
// lines over more L2 slices; the writer would have to write them all); XS 5: x staged by warp 0 alone;
// XS 1: x staged once a block through shared memory (every warp reading all of x from L2 makes its few lines hot);
// XS 2: x read before the wait (wrong in a real chain, where the kernel before writes x; the harness never writes
// x, so this measures what reading x after the release costs)
// NA: partial sums a column (independent FMA chains: after the release the dot product is on the critical path)
__device__ __forceinline__ void mbar_wait0(unsigned bar) {
  unsigned done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(bar), "r"(0u) : "memory");
}
#define XREP 16
#define XREP_STRIDE 8192
// BT: tl is this kernel's per-block record instead (BTW words a block, see bt_note)
// PROG: block 0 publishes its progress for side_pf (a volatile store after the wait: ptxas keeps the x loads behind
// it, so only the side-branch variants have it)
// DL: a block waits DL ns from its start before loading its weights (kernel k's blocks exit and the next kernel's
// blocks start and load at once, just when kernel k+1 fetches x: does that burst delay x?); SP: the weight loads
// spread evenly over SP ns from the block's start (slice u of L at u * SP / L) instead of issued at once, so the
// memory system never holds a whole kernel's weights in its queues; PH: each warp's slices offset by a phase of
// its own (warp index over PH), so the grid's loads leave evenly rather than L bursts
template <typename T, int C, int L, int PRE, int TRIG, int LB = 128, int XS = 0, int NA = 1, int BT = 0, int PROG = 0, int DL = 0, int SP = 0, int PH = 0>
__global__ void __launch_bounds__(LB) gemv_r(const T *__restrict__ x, const T *__restrict__ W, T *__restrict__ y, int N, int K,
                                              const char *pf, long long pf_bytes, unsigned long long *tl,
                                              int *prog, int idx) {
  // the timeline (tl, 3 words a kernel: earliest block start, earliest wait release, latest block end; %globaltimer ns)
  unsigned long long t_start = 0;
  if (tl && threadIdx.x == 0) t_start = gtimer();
  constexpr int VEC = 16 / sizeof(T);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long n0 = ((long long)blockIdx.x * (blockDim.x >> 5) + warp) * C;
  if (XS == 4) x += (blockIdx.x % XREP) * (long long)XREP_STRIDE;   // this block's copy of x
  if (TRIG == 0) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  uint4 wv[C][L];
  const T *w0 = W + lane * VEC;
  if (DL) {
    const unsigned long long t0 = gtimer();
    while (gtimer() - t0 < (unsigned long long)DL) __nanosleep(64);
  }
  if (PRE && SP) {
    const unsigned long long t0 = gtimer();
    const int ph = PH ? (int)((blockIdx.x * (blockDim.x >> 5) + warp) % PH) : 0;
#pragma unroll
    for (int u = 0; u < L; u++) {
      const unsigned long long at = PH ? (unsigned long long)SP * (u * PH + ph) / (L * PH) : (unsigned long long)SP * u / L;
      if (at) while (gtimer() - t0 < at) __nanosleep(32);
#pragma unroll
      for (int c = 0; c < C; c++) wv[c][u] = ld_nc(w0 + (n0 + c < N ? n0 + c : N - 1) * (long long)K + u * 32 * VEC);
    }
  } else if (PRE) {
#pragma unroll
    for (int c = 0; c < C; c++) {
      const T *w = w0 + (n0 + c < N ? n0 + c : N - 1) * (long long)K;
#pragma unroll
      for (int u = 0; u < L; u++) wv[c][u] = ld_nc(w + u * 32 * VEC);
    }
  }
  if (pf && threadIdx.x == 0) {   // a later kernel's weight into L2: this block's slice, one bulk prefetch
    long long chunk = (pf_bytes + gridDim.x - 1) / gridDim.x;
    chunk = (chunk + 15) & ~15LL;
    long long b0 = chunk * blockIdx.x, n = pf_bytes - b0 < chunk ? pf_bytes - b0 : chunk;
    if (n > 0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(pf + b0), "r"((unsigned)n) : "memory");
  }
  __shared__ __align__(128) uint4 xtma[XS == 8 ? L * 32 : 1];
  __shared__ __align__(8) unsigned long long xbar;
  const unsigned sxbar = (unsigned)__cvta_generic_to_shared(&xbar);
  if (XS == 8) {   // the barrier x's bulk copy completes, ready before the release
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sxbar));
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
  }
  uint4 xpre[XS == 2 ? L : 1];
  if (XS == 2) {
#pragma unroll
    for (int u = 0; u < L; u++) xpre[u] = *(const uint4 *)(x + lane * VEC + u * 32 * VEC);
  }
  if (TRIG == 2) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned long long t_rel = 0, t_w = 0, t_c = 0;
  if (BT) {
    if (threadIdx.x == 0) {   // the release, then the moment this warp's weights are in its registers
      t_rel = gtimer_m();
      unsigned dep = 0;
#pragma unroll
      for (int c = 0; c < C; c++)
#pragma unroll
        for (int u = 0; u < L; u++) dep ^= wv[c][u].x ^ wv[c][u].y ^ wv[c][u].z ^ wv[c][u].w;
      bt_sink = dep;
      t_w = gtimer_m();
    }
  } else
    tl_released(tl, t_start);
  if (PROG && prog && blockIdx.x == 0 && threadIdx.x == 0) *(volatile int *)prog = idx;   // paces side_pf
  if (TRIG == 1) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (!PRE) {
#pragma unroll
    for (int c = 0; c < C; c++) {
      const T *w = w0 + (n0 + c < N ? n0 + c : N - 1) * (long long)K;
#pragma unroll
      for (int u = 0; u < L; u++) wv[c][u] = ld_nc(w + u * 32 * VEC);
    }
  }
  __shared__ uint4 xsh[XS == 1 || XS == 5 ? L * 32 : 1];
  if (XS == 1) {
    for (int i = threadIdx.x; i < L * 32; i += blockDim.x) xsh[i] = ((const uint4 *)x)[i];
    __syncthreads();
  }
  if (XS == 8) {   // x into shared memory by one bulk copy a block (the copy engine: one request for all of x)
    if (threadIdx.x == 0) {
      const unsigned bytes = L * 32 * 16;
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sxbar), "r"(bytes) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   :: "r"((unsigned)__cvta_generic_to_shared(xtma)), "l"(x), "r"(bytes), "r"(sxbar) : "memory");
    }
    mbar_wait0(sxbar);
  }
  if (XS == 5) {   // warp 0 alone loads x for the block: one request a line a block
    if (warp == 0) {
      uint4 t[L];
#pragma unroll
      for (int u = 0; u < L; u++) t[u] = ((const uint4 *)x)[lane + u * 32];
#pragma unroll
      for (int u = 0; u < L; u++) xsh[lane + u * 32] = t[u];
    }
    __syncthreads();
  }
  uint4 xall[XS == 6 || XS == 7 ? L : 1];
  float init = 0.f;
  if (XS == 6 || XS == 7) {   // every x load issued before the first FMA (one round trip for all of x)
#pragma unroll
    for (int u = 0; u < L; u++) xall[u] = *(const uint4 *)(x + lane * VEC + u * 32 * VEC);
  }
  if (XS == 7) {
    // ptxas otherwise reuses x's registers, issuing later loads only after earlier ones came back and their FMAs
    // ran: the sums start from min(OR of all x words, N >> 31) = 0, a value it cannot know, so every load is
    // issued before the first FMA
    unsigned any = 0;
#pragma unroll
    for (int u = 0; u < L; u++) any |= xall[u].x | xall[u].y | xall[u].z | xall[u].w;
    unsigned z;
    asm("min.u32 %0, %1, %2;" : "=r"(z) : "r"(any), "r"((unsigned)N >> 31));
    init = __uint_as_float(z);
  }
  float pa[C][NA];
#pragma unroll
  for (int c = 0; c < C; c++)
#pragma unroll
    for (int q = 0; q < NA; q++) pa[c][q] = init;
#pragma unroll
  for (int u = 0; u < L; u++) {
    uint4 xv = XS == 8 ? xtma[lane + u * 32] : XS == 1 || XS == 5 ? xsh[lane + u * 32] : XS == 2 ? xpre[u] : XS == 6 || XS == 7 ? xall[u] : XS == 3 ? ld_nc(x + lane * VEC + u * 32 * VEC)
             : *(const uint4 *)(x + lane * VEC + u * 32 * VEC);
    float xf[VEC];
    unpack<T>(xv, xf);
#pragma unroll
    for (int c = 0; c < C; c++) {
      float wf[VEC];
      unpack<T>(wv[c][u], wf);
#pragma unroll
      for (int j = 0; j < VEC; j++) pa[c][j % NA] += xf[j] * wf[j];
    }
  }
  float acc[C];
#pragma unroll
  for (int c = 0; c < C; c++) {
    acc[c] = pa[c][0];
#pragma unroll
    for (int q = 1; q < NA; q++) acc[c] += pa[c][q];
  }
  if (BT && threadIdx.x == 0) {   // this lane's dot products done (x in, FMAs run)
    bt_sinkf = acc[0];
    t_c = gtimer_m();
  }
#pragma unroll
  for (int c = 0; c < C; c++)
    for (int o = 16; o; o >>= 1) acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], o);
  if (lane < C && n0 + lane < N) {
    float v = acc[0];
#pragma unroll
    for (int c = 1; c < C; c++) if (lane == c) v = acc[c];
    y[n0 + lane] = (T)v;
  }
  if (BT) {
    if (tl && threadIdx.x == 0) {
      unsigned long long *r = tl + BTW * blockIdx.x;
      r[0] = t_start; r[1] = t_rel; r[2] = t_w; r[3] = t_c; r[4] = gtimer_m();
    }
  } else
    tl_end(tl);
}

// A side branch of the graph beside the chain: block b bulk-prefetches slice b of weight j into L2 once the chain
// has reached kernel j - ahead (prog holds the index of the last kernel past its wait; -1 at the replay's start).
// The chain never waits for it, so it cannot deadlock; if it starts late it only prefetches late.
__global__ void side_pf(const char *const *ws, const long long *bytes, const int *prog, int n, int ahead) {
  if (threadIdx.x) return;
  for (int j = 0; j < n; j++) {
    while (*(const volatile int *)prog < j - ahead) __nanosleep(64);
    long long chunk = ((bytes[j] + gridDim.x - 1) / gridDim.x + 15) & ~15LL;
    long long b0 = chunk * blockIdx.x, m = bytes[j] - b0 < chunk ? bytes[j] - b0 : chunk;
    for (long long o = 0; o < m; o += 1 << 20) {
      long long c = m - o < (1 << 20) ? m - o : (1 << 20);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(ws[j] + b0 + o), "r"((unsigned)c) : "memory");
    }
  }
}

// TMA bulk (session 7): a block's rows of W are one contiguous run of memory; thread 0 copies them into shared memory
// with cp.async.bulk (the copy engine: one instruction a 32 KB piece, no load-unit queue held by waiting warps) before
// the trigger and the wait; then the warps read x, wait on the mbarrier and take dot products from shared memory, a
// row a warp at a time. rpb rows a block; K = L * 32 * VEC.
template <typename T, int L>
__global__ void __launch_bounds__(512) gemv_t(const T *__restrict__ x, const T *__restrict__ W, T *__restrict__ y, int N, int K,
                                               int rpb, unsigned long long *tl) {
  extern __shared__ __align__(128) uint4 sw[];
  __shared__ __align__(8) unsigned long long bar;
  unsigned long long t_start = 0;
  if (tl && threadIdx.x == 0) t_start = gtimer();
  constexpr int VEC = 16 / sizeof(T);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const long long n0 = (long long)blockIdx.x * rpb;
  const int rows = (int)(N - n0 < rpb ? N - n0 : rpb);
  const unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar), ssw = (unsigned)__cvta_generic_to_shared(sw);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sbar));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    const unsigned bytes = (unsigned)rows * (unsigned)K * (unsigned)sizeof(T);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sbar), "r"(bytes) : "memory");
    const char *src = (const char *)(W + n0 * K);
    for (unsigned o = 0; o < bytes; o += 32768) {
      const unsigned c = bytes - o < 32768 ? bytes - o : 32768;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   :: "r"(ssw + o), "l"(src + o), "r"(c), "r"(sbar) : "memory");
    }
  }
  __syncthreads();   // the mbarrier initialised before any thread waits on it
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  tl_released(tl, t_start);
  uint4 xv[L];
#pragma unroll
  for (int u = 0; u < L; u++) xv[u] = *(const uint4 *)(x + lane * VEC + u * 32 * VEC);
  mbar_wait0(sbar);
  for (int r = warp; r < rows; r += nw) {
    const uint4 *row = sw + (long long)r * (K / VEC);
    float acc = 0.f;
#pragma unroll
    for (int u = 0; u < L; u++) {
      float xf[VEC], wf[VEC];
      unpack<T>(xv[u], xf);
      unpack<T>(row[lane + u * 32], wf);
#pragma unroll
      for (int j = 0; j < VEC; j++) acc += xf[j] * wf[j];
    }
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[n0 + r] = (T)acc;
  }
  tl_end(tl);
}

// A real chain (each GEMV reads the one before's output) handed over by flags instead of kernel boundaries (session
// 7, not run yet). The "LL" format of NCCL's low-latency protocol: each value travels in one 64-bit word with a tag
// in its high half (unique to the writing kernel and the replay), written and read as single 64-bit accesses, so a
// reader that sees the tag sees the value. A kernel with LL_IN does not wait for the kernel before to end (no
// griddepcontrol.wait): it polls its x until every word carries the tag it wants. What this measures: how much of a chain's per-kernel cost is the kernel
// boundary (grid end, flush, release: 0.55 us empty) against the handover of the data itself. Not deadlock-prone:
// a kernel starts only when every block of the one before has triggered, so the oldest unfinished kernel is always
// resident and waits on nothing. Values are fp32 in the words; y = scale * W x keeps their size along the chain.
__device__ __forceinline__ void ll_load2(const unsigned long long *p, unsigned long long &a, unsigned long long &b) {
  asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(a), "=l"(b) : "l"(p));
}
__device__ __forceinline__ void ll_store(unsigned long long *p, float v, unsigned tag) {
  const unsigned long long w = ((unsigned long long)tag << 32) | __float_as_uint(v);
  asm volatile("st.volatile.global.u64 [%0], %1;" :: "l"(p), "l"(w) : "memory");
}
template <typename T, int C, int L, int LL_IN, int BO>   // BO: ns slept between polls (0: none)
__global__ void __launch_bounds__(128) gemv_ll(const T *__restrict__ x, const unsigned long long *xl,
                                               const T *__restrict__ W, unsigned long long *yl, int N, int K,
                                               unsigned want, unsigned tag, float scale) {
  constexpr int VEC = 16 / sizeof(T);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long n0 = ((long long)blockIdx.x * (blockDim.x >> 5) + warp) * C;
  uint4 wv[C][L];
  const T *w0 = W + lane * VEC;
#pragma unroll
  for (int c = 0; c < C; c++) {
    const T *w = w0 + (n0 + c < N ? n0 + c : N - 1) * (long long)K;
#pragma unroll
    for (int u = 0; u < L; u++) wv[c][u] = ld_nc(w + u * 32 * VEC);
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  float xf[L][VEC];
  if (LL_IN) {
    // the block's 128 threads take K / 128 words each (pairs, coalesced), all loaded at once and again until every
    // one carries the wanted tag; then x goes through shared memory to the warps (registers for all of x a lane would
    // be 2 a value: 192 at K 3072)
    constexpr int WPT = L * VEC / 4;
    __shared__ float xsm[L * 32 * VEC];
    unsigned long long v[WPT];
    bool ready;
    int polls = 0;   // bounded: a wrong tag scheme shows as a failed check, not a hung device
    do {
#pragma unroll
      for (int i = 0; i < WPT / 2; i++) ll_load2(xl + 2 * (i * 128 + threadIdx.x), v[2 * i], v[2 * i + 1]);
      ready = true;
#pragma unroll
      for (int i = 0; i < WPT; i++) ready &= (unsigned)(v[i] >> 32) == want;
      if (BO && !ready) __nanosleep(BO);
    } while (!ready && ++polls < (1 << 14));
#pragma unroll
    for (int i = 0; i < WPT; i++) xsm[2 * ((i / 2) * 128 + threadIdx.x) + (i & 1)] = __uint_as_float((unsigned)v[i]);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < L; u++)
#pragma unroll
      for (int j = 0; j < VEC; j++) xf[u][j] = xsm[lane * VEC + u * 32 * VEC + j];
  } else {
    asm volatile("griddepcontrol.wait;" ::: "memory");
#pragma unroll
    for (int u = 0; u < L; u++) unpack<T>(*(const uint4 *)(x + lane * VEC + u * 32 * VEC), xf[u]);
  }
  float acc[C];
#pragma unroll
  for (int c = 0; c < C; c++) {
    acc[c] = 0.f;
#pragma unroll
    for (int u = 0; u < L; u++) {
      float wf[VEC];
      unpack<T>(wv[c][u], wf);
#pragma unroll
      for (int j = 0; j < VEC; j++) acc[c] += xf[u][j] * wf[j];
    }
    for (int o = 16; o; o >>= 1) acc[c] += __shfl_xor_sync(0xffffffffu, acc[c], o);
  }
  if (lane < C && n0 + lane < N) {
    float r = acc[0];
#pragma unroll
    for (int c = 1; c < C; c++) if (lane == c) r = acc[c];
    ll_store(yl + n0 + lane, r * scale, tag);
  }
}

// the floor of a chain of dependent kernels in a graph: 132 blocks that trigger, wait and (WORK) read x, write y
template <int WORK>
__global__ void __launch_bounds__(128) hop(const float *x, float *y, unsigned long long *tl) {
  const unsigned long long t_start = tl ? gtimer() : 0;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  tl_released(tl, t_start);
  if (WORK) {
    float v = x[threadIdx.x];
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) y[(blockIdx.x * 4 + (threadIdx.x >> 5)) % 528] = v;
  }
  tl_end(tl);
}

// A variant: enqueues y = W x (W [N, K]) on a stream.
typedef std::function<void(cudaStream_t, const void *, const void *, void *, int, int)> Gemv;

// random fill (a hash of the index, in [-1, 1)) and a plain reference GEMV in double, to check every variant
template <typename T> __global__ void fill(T *p, long long n, unsigned seed) {
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
    unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = (T)((float)(h & 0xffffff) / 8388608.0f - 1.0f);
  }
}
template <typename T> __global__ void ref_gemv(const T *x, const T *W, float *y, int N, int K) {
  int n = blockIdx.x * 256 + threadIdx.x;
  if (n >= N) return;
  double s = 0;
  for (int k = 0; k < K; k++) s += (double)(float)x[k] * (double)(float)W[(long long)n * K + k];
  y[n] = (float)s;
}
template <typename T> static void fill_rand(void *p, long long n, unsigned seed) {
  fill<T><<<1024, 256>>>((T *)p, n, seed);
  CK(cudaGetLastError());
}
// largest |y - ref| / (largest |ref|) of one launch per shape
template <typename T> static double check(const Gemv &g, void **ws, void **xs, void **ys) {
  double worst = 0;
  float *ref;
  CK(cudaMalloc(&ref, 4096 * sizeof(float)));
  for (int i = 0; i < 4; i++) {
    const int N = i == 0 ? 2304 : i == 2 ? 3072 : 768, K = i == 3 ? 3072 : 768;
    CK(cudaMemset(ys[i], 0xff, 4096 * sizeof(T)));   // NaN-poisoned: an unwritten output fails
    g(0, xs[i], ws[i], ys[i], N, K);
    ref_gemv<T><<<(N + 255) / 256, 256>>>((const T *)xs[i], (const T *)ws[i], ref, N, K);
    CK(cudaDeviceSynchronize());
    std::vector<T> got(N);
    std::vector<float> want(N);
    CK(cudaMemcpy(got.data(), ys[i], N * sizeof(T), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(want.data(), ref, N * sizeof(float), cudaMemcpyDeviceToHost));
    double mx = 0, err = 0;
    for (int n = 0; n < N; n++) {
      mx = std::max(mx, (double)std::fabs(want[n]));
      double e = std::fabs((double)(float)got[n] - want[n]);
      if (!(e <= 1e30)) e = 1e30;
      err = std::max(err, e);
    }
    worst = std::max(worst, err / mx);
  }
  CK(cudaFree(ref));
  return worst;
}

struct Shape { int K, N; };
static const Shape shapes[4] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};   // GPT-2's per layer

// One launch (128-thread blocks unless told), the programmatic-serialization attribute on request.
static void launch_any(cudaStream_t s, const void *fn, unsigned grid, bool pdl, void **args, unsigned threads = 128,
                       size_t smem = 0) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  if (smem > 48 * 1024) CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelExC(&cfg, fn, args));
}


template <typename T, int WPR, int UNR, int NPW, int MODE> static Gemv plain(bool pdl) {
  return [pdl](cudaStream_t s, const void *x, const void *W, void *y, int N, int K) {
    int cpb = 4 / WPR * NPW;
    void *args[] = {&x, &W, &y, &N, &K};
    launch_any(s, (const void *)gemv<T, WPR, UNR, NPW, MODE>, (N + cpb - 1) / cpb, pdl, args);
  };
}
// gemv_r for the shape at hand: C columns a warp (2 for K 768, 1 for K 3072), L from K; other K are refused
// the decode chain's weights in launch order, for the variants that prefetch a later kernel's weight (pf_ahead);
// g_tl: where the timeline variants write (3 words a kernel of the chain)
static void **g_ws;
static int g_call;
static unsigned long long *g_tl;
static unsigned long long *g_bt;
static std::map<const void *, const void *> g_rep;   // XS 4: each x buffer's XREP copies   // BT variants: BT_MAXB records of BTW words for each of the 48 kernels
static int *g_prog;           // side_pf's pacing word, when the variant runs one (g_side_ahead >= 0)
static int g_side_ahead = -1, g_side_blocks = 16;
static bool g_one_layer;      // every layer reads layer 0's weights (14 MB bf16: L2-resident after the first)
static const long long g_bytes[4] = {768LL * 2304, 768LL * 768, 768LL * 3072, 3072LL * 768};
// per_sm > 0: shared memory (unused) sized so that at most per_sm blocks fit an SM: with one block an SM a kernel
// (G 132), at most per_sm kernels of the chain hold SMs and issue their weight loads at once;
// grid 0: blocks of 4 warps; grid G > 0: about G blocks, each with as many warps as that takes (one block an SM at
// G 132: fewer blocks to schedule and retire per kernel). c768: columns a warp at K 768 (2 or 4; at K 3072 half that,
// at least 1; fp32 at K 3072 stays at 1, its registers would spill)
template <typename T, int PRE, int TRIG, int XS = 0, int NA = 1, int BT = 0, int PROG = 0, int DL = 0, int SP = 0, int PH = 0> static Gemv regs(bool pdl, int pf_ahead = 0, bool timeline = false,
                                                                      int grid = 0, int c768 = 2, int per_sm = 0) {
  return [=](cudaStream_t s, const void *x, const void *W, void *y, int N, int K) {
    constexpr int VEC = 16 / sizeof(T), L768 = 768 / (32 * VEC), L3072 = 3072 / (32 * VEC);
    const char *pf = nullptr;
    long long pfb = 0;
    unsigned long long *tl = nullptr;
    const int call = g_ws ? g_call++ : 0;
    if (pf_ahead && g_ws) {
      int at = (call + pf_ahead) % 48;
      pf = (const char *)g_ws[at];
      pfb = g_bytes[at % 4] * (long long)sizeof(T);
    }
    if (timeline && g_ws && g_tl) tl = g_tl + TLW * (call % 48);
    if (BT && g_ws && g_bt) tl = g_bt + (size_t)BTW * BT_MAXB * (call % 48);
    int *prog = g_side_ahead >= 0 ? g_prog : nullptr;
    int idx = call % 48;
    if (XS == 4) x = g_rep.at(x);
    void *args[] = {&x, &W, &y, &N, &K, &pf, &pfb, &tl, &prog, &idx};
    const int C = K == 768 ? c768 : (c768 == 2 || sizeof(T) == 4) ? 1 : 2;
    const int warps = (N + C - 1) / C;
    const int wpb = grid ? (warps + grid - 1) / grid : 4;
    const int lb = wpb * 32 <= 256 ? 256 : wpb * 32 <= 512 ? 512 : 1024;   // the launch bound: registers a thread
#define PICK(c, l) (lb == 256 ? (const void *)gemv_r<T, c, l, PRE, TRIG, 256, XS, NA, BT, PROG, DL, SP, PH> : \
                    lb == 512 ? (const void *)gemv_r<T, c, l, PRE, TRIG, 512, XS, NA, BT, PROG, DL, SP, PH> : (const void *)gemv_r<T, c, l, PRE, TRIG, 1024, XS, NA, BT, PROG, DL, SP, PH>)
    const void *fn = K == 768 ? (C == 2 ? PICK(2, L768) : PICK(4, L768))
                   : (C == 1 ? PICK(1, L3072) : sizeof(T) == 2 ? PICK(2, L3072) : nullptr);
#undef PICK
    if (!fn || (K != 768 && K != 3072) || (K == 3072 && lb == 1024) || wpb > 32) { printf("gemv_r: K %d, %d warps a block: not built\n", K, wpb); exit(1); }
    launch_any(s, fn, (unsigned)((warps + wpb - 1) / wpb), pdl, args, 32u * wpb, per_sm ? 230000 / per_sm - 2048 : 0);
  };
}
// gemv_t at about `grid` blocks of `warps` warps (rows split evenly; shared memory rows * K * sizeof(T))
template <typename T> static Gemv tma(int grid, int warps, bool timeline = false, bool pdl = true) {
  return [=](cudaStream_t s, const void *x, const void *W, void *y, int N, int K) {
    constexpr int VEC = 16 / sizeof(T);
    unsigned long long *tl = nullptr;
    const int call = g_ws ? g_call++ : 0;
    if (timeline && g_ws && g_tl) tl = g_tl + TLW * (call % 48);
    int rpb = (N + grid - 1) / grid;
    const void *fn = K == 768 ? (const void *)gemv_t<T, 768 / (32 * VEC)> : K == 3072 ? (const void *)gemv_t<T, 3072 / (32 * VEC)> : nullptr;
    if (!fn) { printf("gemv_t: K %d not built\n", K); exit(1); }
    const size_t smem = (size_t)rpb * K * sizeof(T);
    if (smem > 200 * 1024) { printf("gemv_t: %zu bytes of shared memory a block\n", smem); exit(1); }
    void *args[] = {&x, &W, &y, &N, &K, &rpb, &tl};
    launch_any(s, fn, (unsigned)((N + rpb - 1) / rpb), pdl, args, 32u * warps, smem);
  };
}
template <int WORK> static Gemv hops(bool pdl, unsigned blocks = 132, bool timeline = false) {
  return [=](cudaStream_t s, const void *x, const void *, void *y, int, int) {
    const int call = g_ws ? g_call++ : 0;
    unsigned long long *tl = timeline && g_ws && g_tl ? g_tl + TLW * (call % 48) : nullptr;
    void *args[] = {&x, &y, &tl};
    launch_any(s, (const void *)hop<WORK>, blocks, pdl, args);
  };
}
// grace's generated kernels (gemv_grace_gen.cuh): one parameter struct, the layout every variant shares
struct GP { const void *A, *B; void *C; float *WS; long long w[19]; };
static Gemv grace_kernel(const void *fn, int wpr) {
  return [=](cudaStream_t s, const void *x, const void *W, void *y, int N, int K) {
    GP p = {x, W, y, nullptr, {1, N, K, 1, 1, 1, 1, K, 1, 0, 0, 0, 1, K, 0, 0, 0, 1, K}};
    void *args[] = {&p};
    launch_any(s, fn, (N + 4 / wpr - 1) / (4 / wpr), true, args);
  };
}

// grace's GEMV_RW (4-warp blocks, rc columns a warp, as gpu/gpu_matmul.c launches it)
template <typename T> static Gemv grace_rw() {
  return [](cudaStream_t s, const void *x, const void *W, void *y, int N, int K) {
    const bool f32 = sizeof(T) == 4;
    const void *fn = K == 768 ? (f32 ? (const void *)GRACE_GEMV_RW_F32_K768 : (const void *)GRACE_GEMV_RW_BF16_K768)
                              : (f32 ? (const void *)GRACE_GEMV_RW_F32_K3072 : (const void *)GRACE_GEMV_RW_BF16_K3072);
    const int rc = K == 768 ? (f32 ? GRACE_GEMV_RW_F32_K768_RC : GRACE_GEMV_RW_BF16_K768_RC)
                            : (f32 ? GRACE_GEMV_RW_F32_K3072_RC : GRACE_GEMV_RW_BF16_K3072_RC);
    GP p = {x, W, y, nullptr, {1, N, K, 1, 1, 1, 1, K, 1, 0, 0, 0, 1, K, 0, 0, 0, 1, K}};
    void *args[] = {&p};
    launch_any(s, fn, (N + 4 * rc - 1) / (4 * rc), true, args);
  };
}

// Median us of a call of work(i) (enqueued on s; i counts every call from 0) over 30 samples of `per` calls each,
// after `warm` calls. Graphs are timed 10 replays back to back: one replay alone also counts the time the host takes
// to submit it (the stream idle after the first event).
static float median_us(cudaStream_t s, int warm, int per, const std::function<void(int)> &work) {
  for (int i = 0; i < warm; i++) work(i);
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < 30; r++) {
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < per; i++) work(warm + r * per + i);
    CK(cudaEventRecord(b, s)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms / per);
  }
  CK(cudaEventDestroy(a)); CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2] * 1000.f;
}
// The per-block records of one replay (BT variants), per shape averaged over kernels 4-47, in us: the wait's
// release after the last block of the kernel before ended; how long blocks waited (release - start: median, and
// the least: the block that came last); weights not yet in registers at the release (median and 90th percentile
// of w - rel over blocks, share of blocks > 0.1 us); dot products done after the weights (c - w: x's load and the
// FMAs); the kernel's span from first release to last end; its last block's end after the last dot product.
static double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(size_t)(q * (v.size() - 1))];
}
static void bt_report(const std::vector<unsigned long long> &h) {
  const char *col[9] = {"rel-end(k-1)", "wait med", "wait min", "w late med", "w late p90", "late>0.1", "c-w med",
                        "span", "end-lastc"};
  double m[4][9] = {{0}};
  int cnt[4] = {0};
  double t0 = 0, t1 = 0;
  auto rec = [&](int k, int b, int f) { return (double)h[((size_t)k * BT_MAXB + b) * BTW + f] / 1e3; };
  for (int k = 0; k < 48; k++) {
    std::vector<double> wait, late, cw;
    double rel0 = 1e300, end1 = 0, c1 = 0, pend1 = 0, lt = 0;
    int nb = 0;
    for (int b = 0; b < BT_MAXB; b++) {
      if (!h[((size_t)k * BT_MAXB + b) * BTW]) continue;
      nb++;
      const double st = rec(k, b, 0), rel = rec(k, b, 1), w = rec(k, b, 2), c = rec(k, b, 3), e = rec(k, b, 4);
      wait.push_back(rel - st);
      late.push_back(w - rel);
      lt += w - rel > 0.1;
      cw.push_back(c - w);
      rel0 = std::min(rel0, rel); end1 = std::max(end1, e); c1 = std::max(c1, c);
      if (k == 0 && (t0 == 0 || st < t0)) t0 = st;
    }
    if (k == 47) t1 = end1;
    if (k > 0)
      for (int b = 0; b < BT_MAXB; b++)
        if (h[((size_t)(k - 1) * BT_MAXB + b) * BTW]) pend1 = std::max(pend1, rec(k - 1, b, 4));
    if (k < 4 || !nb) continue;
    const double d[9] = {rel0 - pend1, pct(wait, 0.5), pct(wait, 0), pct(late, 0.5), pct(late, 0.9), lt / nb,
                         pct(cw, 0.5), end1 - rel0, end1 - c1};
    for (int j = 0; j < 9; j++) m[k % 4][j] += d[j];
    cnt[k % 4]++;
  }
  printf("      block records, us, mean over kernels 4-47 of each shape (48 kernels in %.1f us):\n", t1 - t0);
  printf("      %-10s", "shape");
  for (int j = 0; j < 9; j++) printf(" %12s", col[j]);
  printf("\n");
  for (int i = 0; i < 4; i++) {
    printf("      %4dx%-5d", shapes[i].K, shapes[i].N);
    for (int j = 0; j < 9; j++) printf(" %12.2f", m[i][j] / cnt[i]);
    printf("\n");
  }
}

// Median us of the 48 decode GEMVs (12 layers x the 4 shapes) captured in one graph.
static void bt_report(const std::vector<unsigned long long> &h);
static float decode_us(const Gemv &g, void **ws, void **xs, void **ys, int esz, bool timeline = false, bool bt = false) {
  g_ws = ws;
  g_call = 0;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t gr;
  cudaGraphExec_t ge;
  cudaStream_t s2 = nullptr;
  cudaEvent_t fork, join;
  const char **dws = nullptr;
  long long *dbytes = nullptr;
  if (g_side_ahead >= 0) {   // the weight table side_pf walks, in chain order
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming)); CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    CK(cudaMalloc(&dws, 48 * sizeof(char *))); CK(cudaMalloc(&dbytes, 48 * sizeof(long long)));
    const char *hw[48];
    long long hb[48];
    for (int j = 0; j < 48; j++) { hw[j] = (const char *)ws[(g_one_layer ? 0 : j / 4) * 4 + j % 4]; hb[j] = g_bytes[j % 4] * esz; }
    CK(cudaMemcpy(dws, hw, sizeof hw, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dbytes, hb, sizeof hb, cudaMemcpyHostToDevice));
  }
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  if (g_side_ahead >= 0) {
    CK(cudaMemsetAsync(g_prog, 0xff, sizeof(int), s));
    CK(cudaEventRecord(fork, s));
    CK(cudaStreamWaitEvent(s2, fork, 0));
    int n = 48, ahead = g_side_ahead;
    void *args[] = {&dws, &dbytes, &g_prog, &n, &ahead};
    CK(cudaLaunchKernel((const void *)side_pf, dim3(g_side_blocks), dim3(32), args, 0, s2));
    CK(cudaEventRecord(join, s2));
  }
  for (int l = 0; l < 12; l++)
    for (int i = 0; i < 4; i++) g(s, xs[i], ws[(g_one_layer ? 0 : l) * 4 + i], ys[i], shapes[i].N, shapes[i].K);
  if (g_side_ahead >= 0) CK(cudaStreamWaitEvent(s, join, 0));
  CK(cudaStreamEndCapture(s, &gr));
  CK(cudaGraphInstantiate(&ge, gr, 0));
  const float us = median_us(s, 5, 10, [&](int) { CK(cudaGraphLaunch(ge, s)); });
  if (timeline) {   // one more replay with the timeline zeroed: per kernel, when it started, left its wait, ended
    std::vector<unsigned long long> h(TLW * 48);
    for (int k = 0; k < 48; k++)
      for (int f = 0; f < TLW; f++) h[TLW * k + f] = f % 2 ? 0 : ~0ull;
    CK(cudaMemcpy(g_tl, h.data(), h.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(h.data(), g_tl, h.size() * 8, cudaMemcpyDeviceToHost));
    // per kernel k, us: the first release after k-1's last end; the spread of releases; first and last end after the
    // first release; the last block's start against k-1's last end (> 0: a block came in late) and the first start
    auto at = [&](int k, int f) { return (double)h[TLW * k + f] / 1e3; };
    const char *col[7] = {"rel-end(k-1)", "rel spread", "end0-rel", "end1-rel", "start1-end(k-1)", "start0-end(k-1)", "start1-start0"};
    double m[7] = {0};
    printf("      timeline, mean of kernels 4-47 (us):");
    for (int k = 4; k < 48; k++) {
      const double e1 = at(k - 1, 5), r0 = at(k, 2);
      const double d[7] = {r0 - e1, at(k, 3) - r0, at(k, 4) - r0, at(k, 5) - r0, at(k, 1) - e1, at(k, 0) - e1, at(k, 1) - at(k, 0)};
      for (int j = 0; j < 7; j++) m[j] += d[j] / 44;
    }
    for (int j = 0; j < 7; j++) printf(" %s %.2f", col[j], m[j]);
    printf("  (48 kernels in %.2f us)\n", at(47, 5) - at(0, 0));
  }
  if (bt) {   // one more replay with the per-block records zeroed
    const size_t words = (size_t)BTW * BT_MAXB * 48;
    CK(cudaMemset(g_bt, 0, words * 8));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    std::vector<unsigned long long> h(words);
    CK(cudaMemcpy(h.data(), g_bt, words * 8, cudaMemcpyDeviceToHost));
    bt_report(h);
  }
  if (s2) {
    CK(cudaStreamDestroy(s2)); CK(cudaEventDestroy(fork)); CK(cudaEventDestroy(join));
    CK(cudaFree(dws)); CK(cudaFree(dbytes));
  }
  CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(gr)); CK(cudaStreamDestroy(s));
  g_ws = nullptr;
  return us;
}
// The LL kernel for a chain GEMV of K 768 (2 columns a warp; the first of the chain reads x as T) or 3072, polls
// BO ns apart.
template <typename T, int BO> static const void *ll_kernel(int K, bool first) {
  constexpr int VEC = 16 / sizeof(T);
  if (K != 768) return (const void *)gemv_ll<T, 1, 3072 / (32 * VEC), 1, BO>;
  return first ? (const void *)gemv_ll<T, 2, 768 / (32 * VEC), 0, BO> : (const void *)gemv_ll<T, 2, 768 / (32 * VEC), 1, BO>;
}
// The 48 GEMVs as a real chain: kernel j reads the first K values of kernel j-1's output (the first reads xs[0]).
// ll 0: grace's way (GEMV_RW, T buffers, each kernel waits for the one before to end); ll 1-3: the LL handover above
// (2, 3: polls 100 / 500 ns apart), two graphs replayed in turn, kernel j of graph e tagging its words 1 + 64 e + j
// (a ring of 4 buffers holds words of this replay's kernel j - 4 and of the other graph's replay before: neither tag
// is the one awaited).
// With ll, the last output is checked against the chain computed on the host in double.
template <typename T> static float chain_us(int ll, void **ws, void **xs, double *err) {
  void *buf[4];
  for (int i = 0; i < 4; i++) { CK(cudaMalloc(&buf[i], 3072 * 8)); CK(cudaMemset(buf[i], 0, 3072 * 8)); }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const Gemv plain_rw = ll == 4 ? regs<T, 1, 2, 8>(true) : regs<T, 1, 2>(true);
  cudaGraphExec_t ge[2];
  for (int e = 0; e < 2; e++) {
    cudaGraph_t gr;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    for (int j = 0; j < 48; j++) {
      const Shape sh = shapes[j % 4];
      int N = sh.N, K = sh.K;
      if (!ll || ll == 4) { plain_rw(s, j ? buf[(j - 1) % 4] : xs[0], ws[j], buf[j % 4], N, K); continue; }
      const T *x = (const T *)xs[0];
      const unsigned long long *xl = j ? (const unsigned long long *)buf[(j - 1) % 4] : nullptr;
      unsigned long long *yl = (unsigned long long *)buf[j % 4];
      const void *W = ws[j];
      unsigned tag = 1u + 64u * (unsigned)e + (unsigned)j, want = tag - 1;
      float scale = sqrtf(3.0f / (float)K);
      void *args[] = {&x, &xl, &W, &yl, &N, &K, &want, &tag, &scale};
      const void *fn = ll == 1 ? ll_kernel<T, 0>(K, j == 0) : ll == 2 ? ll_kernel<T, 100>(K, j == 0)
                                                                   : ll_kernel<T, 500>(K, j == 0);
      const int C = K == 768 ? 2 : 1;
      launch_any(s, fn, (unsigned)((N + 4 * C - 1) / (4 * C)), true, args);
    }
    CK(cudaStreamEndCapture(s, &gr));
    CK(cudaGraphInstantiate(&ge[e], gr, 0));
    CK(cudaGraphDestroy(gr));
  }
  const float us = median_us(s, 6, 10, [&](int i) { CK(cudaGraphLaunch(ge[i % 2], s)); });
  *err = -1;
  if (ll && ll != 4) {   // the last replay ran graph 1 (call 305): its last output, tag 1 + 64 + 47, against the host's chain in double
    std::vector<unsigned long long> got(768);
    CK(cudaMemcpy(got.data(), buf[47 % 4], 768 * 8, cudaMemcpyDeviceToHost));
    std::vector<T> hx(768);
    CK(cudaMemcpy(hx.data(), xs[0], 768 * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<double> x(3072), y(3072);
    for (int k = 0; k < 768; k++) x[k] = (double)(float)hx[k];
    for (int j = 0; j < 48; j++) {
      const Shape sh = shapes[j % 4];
      std::vector<T> w((size_t)sh.N * sh.K);
      CK(cudaMemcpy(w.data(), ws[j], w.size() * sizeof(T), cudaMemcpyDeviceToHost));
      const double sc = (double)sqrtf(3.0f / (float)sh.K);
      for (int n = 0; n < sh.N; n++) {
        double acc = 0;
        for (int k = 0; k < sh.K; k++) acc += (double)(float)w[(size_t)n * sh.K + k] * x[k];
        y[n] = acc * sc;
      }
      x = y;
    }
    double mx = 0, worst = 0;
    for (int n = 0; n < 768; n++) mx = std::max(mx, std::fabs(y[n]));
    for (int n = 0; n < 768; n++) {
      const bool fresh = (unsigned)(got[n] >> 32) == 1u + 64u + 47u;
      double e = fresh ? std::fabs((double)__uint_as_float_host((unsigned)got[n]) - y[n]) / mx : 1e30;
      if (!(e <= worst)) worst = e;
    }
    *err = worst;
  }
  for (int e = 0; e < 2; e++) CK(cudaGraphExecDestroy(ge[e]));
  CK(cudaStreamDestroy(s));
  for (int i = 0; i < 4; i++) CK(cudaFree(buf[i]));
  return us;
}

// Median us of one LM-head GEMV (768 x 50257), 10 launched back to back.
static float lm_us(const Gemv &g, const void *x, const void *W, void *y) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const float us = median_us(s, 5, 10, [&](int) { g(s, x, W, y, 50257, 768); });
  CK(cudaStreamDestroy(s));
  return us;
}

template <typename T> static void all(const char *name, double copy_bw) {
  void *ws[48], *xs[4], *ys[4];
  double bytes = 0;
  for (int l = 0; l < 12; l++)
    for (int i = 0; i < 4; i++) {
      size_t n = (size_t)shapes[i].K * shapes[i].N;
      CK(cudaMalloc(&ws[l * 4 + i], n * sizeof(T)));
      fill_rand<T>(ws[l * 4 + i], (long long)n, 17u + l * 4 + i);
      bytes += n * sizeof(T);
    }
  for (int i = 0; i < 4; i++) {
    CK(cudaMalloc(&xs[i], 4096 * sizeof(T))); fill_rand<T>(xs[i], 4096, 99u + i);
    CK(cudaMalloc(&ys[i], 4096 * sizeof(T)));
  }
  CK(cudaMalloc(&g_tl, TLW * 48 * sizeof(unsigned long long)));
  CK(cudaMalloc(&g_bt, (size_t)BTW * BT_MAXB * 48 * sizeof(unsigned long long)));
  void *rep[4];
  for (int i = 0; i < 4; i++) {   // XS 4's copies of each x
    CK(cudaMalloc(&rep[i], (size_t)XREP * XREP_STRIDE * sizeof(T)));
    for (int r = 0; r < XREP; r++)
      CK(cudaMemcpy((T *)rep[i] + (size_t)r * XREP_STRIDE, xs[i], 4096 * sizeof(T), cudaMemcpyDeviceToDevice));
    g_rep[xs[i]] = rep[i];
  }
  CK(cudaMalloc(&g_prog, sizeof(int)));
  void *W, *x, *y;
  CK(cudaMalloc(&W, (size_t)50257 * 768 * sizeof(T))); fill_rand<T>(W, 50257LL * 768, 5u);
  CK(cudaMalloc(&x, 768 * sizeof(T))); fill_rand<T>(x, 768, 6u);
  CK(cudaMalloc(&y, 50257 * sizeof(T)));
  double lb = 50257.0 * 768 * sizeof(T);
  const bool f32 = sizeof(T) == 4;
  // one_layer: all layers read layer 0's weights; side_blocks > 0: side_pf beside the chain, side_ahead kernels ahead
  // bt: per-block records of one more replay (bt_report)
  const struct { const char *what; Gemv g; bool decode, lm, one_layer; int side_blocks, side_ahead; bool bt; } v[] = {
    {"phased spread 1000 ns", regs<T, 1, 2, 0, 1, 0, 0, 0, 1000, 16>(true), true, false},
    {"phased spread 2000 ns, trigger at entry", regs<T, 1, 0, 0, 1, 0, 0, 0, 2000, 16>(true), true, false},
    {"phased spread 3000 ns, trigger at entry", regs<T, 1, 0, 0, 1, 0, 0, 0, 3000, 16>(true), true, false},
    {"phased spread 4000 ns, trigger at entry", regs<T, 1, 0, 0, 1, 0, 0, 0, 4000, 16>(true), true, false},
    {"phased spread 5000 ns, trigger at entry", regs<T, 1, 0, 0, 1, 0, 0, 0, 5000, 16>(true), true, false},
    {"phased spread 3000 ns, trigger at entry, 4 partial sums", regs<T, 1, 0, 0, 4, 0, 0, 0, 3000, 16>(true), true, false},
    {"phased spread 3000 ns, trigger at entry, x loads forced", regs<T, 1, 0, 7, 1, 0, 0, 0, 3000, 16>(true), true, false},
    {"phased spread 3000 ns, trigger at entry, 66 blocks", regs<T, 1, 0, 0, 1, 0, 0, 0, 3000, 16>(true, 0, false, 66), true, false},
    {"block records: phased spread 3000 ns, trigger at entry", regs<T, 1, 0, 0, 1, 1, 0, 0, 3000, 16>(true), true, false, false, 0, 0, true},
    {"spread 1000 ns", regs<T, 1, 2, 0, 1, 0, 0, 0, 1000>(true), true, false},
    {"spread 2000 ns", regs<T, 1, 2, 0, 1, 0, 0, 0, 2000>(true), true, false},
    {"spread 4000 ns", regs<T, 1, 2, 0, 1, 0, 0, 0, 4000>(true), true, false},
    {"spread 2000 ns, trigger at entry", regs<T, 1, 0, 0, 1, 0, 0, 0, 2000>(true), true, false},
    {"spread 4000 ns, trigger at entry", regs<T, 1, 0, 0, 1, 0, 0, 0, 4000>(true), true, false},
    {"spread 6000 ns, trigger at entry", regs<T, 1, 0, 0, 1, 0, 0, 0, 6000>(true), true, false},
    {"block records: spread 4000 ns, trigger at entry", regs<T, 1, 0, 0, 1, 1, 0, 0, 4000>(true), true, false, false, 0, 0, true},
    {"delay 300 ns before the weight loads", regs<T, 1, 2, 0, 1, 0, 0, 300>(true), true, false},
    {"delay 600 ns before the weight loads", regs<T, 1, 2, 0, 1, 0, 0, 600>(true), true, false},
    {"delay 1000 ns before the weight loads", regs<T, 1, 2, 0, 1, 0, 0, 1000>(true), true, false},
    {"delay 1600 ns before the weight loads", regs<T, 1, 2, 0, 1, 0, 0, 1600>(true), true, false},
    {"delay 2500 ns before the weight loads", regs<T, 1, 2, 0, 1, 0, 0, 2500>(true), true, false},
    {"delay 1000 ns, trigger at entry", regs<T, 1, 0, 0, 1, 0, 0, 1000>(true), true, false},
    {"delay 1600 ns, trigger at entry", regs<T, 1, 0, 0, 1, 0, 0, 1600>(true), true, false},
    {"trigger at entry, no delay", regs<T, 1, 0>(true), true, false},
    {"block records: delay 1000 ns before the weight loads", regs<T, 1, 2, 0, 1, 1, 0, 1000>(true), true, false, false, 0, 0, true},
    {"block records: registers, x after the wait", regs<T, 1, 2, 0, 1, 1>(true), true, false, false, 0, 0, true},
    {"block records: x read before the wait (harness only)", regs<T, 1, 2, 2, 1, 1>(true), true, false, false, 0, 0, true},
    {"block records: x after the wait, layer 0's weights", regs<T, 1, 2, 0, 1, 1>(true), true, false, true, 0, 0, true},
    {"block records: x through ld.global.nc", regs<T, 1, 2, 3, 1, 1>(true), true, false, false, 0, 0, true},
    {"block records: x in 16 copies (harness only)", regs<T, 1, 2, 4, 1, 1>(true), true, false, false, 0, 0, true},
    {"block records: x staged by warp 0", regs<T, 1, 2, 5, 1, 1>(true), true, false, false, 0, 0, true},
    {"block records: 4 columns a warp at K 768, 2 at 3072", regs<T, 1, 2, 0, 1, 1>(true, 0, false, 0, 4), true, false, false, 0, 0, true},
    {"block records: x loaded whole before the FMAs", regs<T, 1, 2, 6, 1, 1>(true), true, false, false, 0, 0, true},
    {"x loaded whole before the FMAs", regs<T, 1, 2, 6>(true), true, false},
    {"block records: x loads forced before the FMAs", regs<T, 1, 2, 7, 1, 1>(true), true, false, false, 0, 0, true},
    {"x loads forced before the FMAs", regs<T, 1, 2, 7>(true), true, false},
    {"x loads forced before the FMAs, 4 columns a warp at K 768", regs<T, 1, 2, 7>(true, 0, false, 0, 4), true, false},
    {"block records: x by one bulk copy a block", regs<T, 1, 2, 8, 1, 1>(true), true, false, false, 0, 0, true},
    {"x by one bulk copy a block", regs<T, 1, 2, 8>(true), true, false},
    {"x by one bulk copy a block, 132 blocks", regs<T, 1, 2, 8>(true, 0, false, 132), true, false},
    {"block records: x by one bulk copy a block, 132 blocks", regs<T, 1, 2, 8, 1, 1>(true, 0, false, 132), true, false, false, 0, 0, true},
    {"x by one bulk copy a block, 66 blocks", regs<T, 1, 2, 8>(true, 0, false, 66), true, false},
    // kernels on disjoint halves (thirds) of the SMs: a block fills an SM's shared memory, so kernel k+1's blocks
    // land on the SMs kernel k leaves free and stream their weights there while k fetches x on its own SMs
    {"SM halves: 66 blocks, one an SM", regs<T, 1, 2>(true, 0, false, 66, 2, 1), true, false},
    {"block records: SM halves: 66 blocks, one an SM", regs<T, 1, 2, 0, 1, 1>(true, 0, false, 66, 2, 1), true, false, false, 0, 0, true},
    {"SM thirds: 48 blocks, one an SM", regs<T, 1, 2>(true, 0, false, 48, 2, 1), true, false},
    {"SM halves, x loads forced", regs<T, 1, 2, 7>(true, 0, false, 66, 2, 1), true, false},
    {"x through ld.global.nc", regs<T, 1, 2, 3>(true), true, false},
    {"x in 16 copies (harness only)", regs<T, 1, 2, 4>(true), true, false},
    {"x staged by warp 0", regs<T, 1, 2, 5>(true), true, false},
    {"4 columns a warp at K 768, 2 at 3072", regs<T, 1, 2>(true, 0, false, 0, 4), true, false},
    {"warp/column, no prefetch, PDL", plain<T, 1, 4, 1, 2>(true), false, true},
    {"registers: all K before the wait, trigger after the loads", regs<T, 1, 2>(true), true, true},
    {"timeline: the same", regs<T, 1, 2>(true, 0, true), true, false},
    {"the same, every layer reading layer 0's weights", regs<T, 1, 2>(true), true, false, true},
    {"x read before the wait (harness only)", regs<T, 1, 2, 2>(true), true, false},
    {"x read before the wait, every layer on layer 0's", regs<T, 1, 2, 2>(true), true, false, true},
    {"132 blocks (one an SM)", regs<T, 1, 2>(true, 0, false, 132), true, false},
    {"66 blocks", regs<T, 1, 2>(true, 0, false, 66), true, false},
    {"264 blocks", regs<T, 1, 2>(true, 0, false, 264), true, false},
    {"132 blocks, at most 2 kernels an SM (shared memory)", regs<T, 1, 2>(true, 0, false, 132, 2, 2), true, false},
    {"132 blocks, at most 3 kernels an SM", regs<T, 1, 2>(true, 0, false, 132, 2, 3), true, false},
    {"132 blocks, at most 4 kernels an SM", regs<T, 1, 2>(true, 0, false, 132, 2, 4), true, false},
    {"132 blocks, at most 6 kernels an SM", regs<T, 1, 2>(true, 0, false, 132, 2, 6), true, false},
    {"132 blocks, trigger after the wait", regs<T, 1, 1>(true, 0, false, 132), true, false},
    {"registers, L2 prefetch 1 kernel ahead", regs<T, 1, 2>(true, 1), true, false},
    {"registers, L2 prefetch 2 kernels ahead", regs<T, 1, 2>(true, 2), true, false},
    {"registers, L2 prefetch 3 kernels ahead", regs<T, 1, 2>(true, 3), true, false},
    {"registers, L2 prefetch 4 kernels ahead", regs<T, 1, 2>(true, 4), true, false},
    {"registers, L2 prefetch 6 kernels ahead", regs<T, 1, 2>(true, 6), true, false},
    {"registers, side branch prefetching 3 ahead, 4 blocks", regs<T, 1, 2, 0, 1, 0, 1>(true), true, false, false, 4, 3},
    {"registers, side branch prefetching 3 ahead, 16 blocks", regs<T, 1, 2, 0, 1, 0, 1>(true), true, false, false, 16, 3},
    {"registers, side branch prefetching 3 ahead, 64 blocks", regs<T, 1, 2, 0, 1, 0, 1>(true), true, false, false, 64, 3},
    {"TMA bulk into shared memory, 132 blocks of 8 warps", tma<T>(132, 8), true, false},
    {"TMA bulk, 264 blocks of 8 warps", tma<T>(264, 8), true, false},
    {"x through shared memory", regs<T, 1, 2, 1>(true), true, false},
    {"2 partial sums a column", regs<T, 1, 2, 0, 2>(true), true, false},
    {"4 partial sums a column", regs<T, 1, 2, 0, 4>(true), true, false},
    {"grace's GEMV_RW, same harness", grace_rw<T>(), true, false},
    {"grace's GEMV_RW, every layer on layer 0's", grace_rw<T>(), true, false, true},
    {"floor: 48 empty kernels (132 blocks), PDL", hops<0>(true), true, false},
    {"floor: 48 kernels reading x, writing y, PDL", hops<1>(true), true, false},
    {"timeline: floor, 48 kernels reading x, writing y", hops<1>(true, 132, true), true, false},
    {"floor: the same with 66 blocks", hops<1>(true, 66), true, false},
    {"floor: the same with 264 blocks", hops<1>(true, 264), true, false},
    {"floor: the same with 384 blocks (GEMV_RW's grid at N 3072)", hops<1>(true, 384), true, false},
    {"grace, 2 warps/column, prefetch",
     grace_kernel(f32 ? (const void *)GRACE_GEMV_F32_W2_P1 : (const void *)GRACE_GEMV_BF16_W2_P1, 2), true, false},
  };
  const char *only = getenv("GEMV_ONLY");   // '|'-separated pieces of the variants' names to run (unset: all)
  auto wanted = [&](const char *what) {
    if (!only || !*only) return true;
    std::string o(only);
    size_t a = 0;
    while (a <= o.size()) {
      size_t b = o.find('|', a);
      if (b == std::string::npos) b = o.size();
      if (b > a && strstr(what, o.substr(a, b - a).c_str())) return true;
      a = b + 1;
    }
    return false;
  };
  for (const auto &e : v) {
    if (!wanted(e.what)) continue;
    g_one_layer = e.one_layer;
    g_side_ahead = e.side_blocks ? e.side_ahead : -1;
    g_side_blocks = e.side_blocks;
    if (e.decode && !strstr(e.what, "floor")) printf("%-5s check         %-62s max err %.2e of max|y|\n", name, e.what, check<T>(e.g, ws, xs, ys));
    if (e.decode) {
      float us = decode_us(e.g, ws, xs, ys, (int)sizeof(T), !strncmp(e.what, "timeline", 8), e.bt);
      printf("%-5s decode graph  %-62s %7.1f us %5.1f%%\n", name, e.what, us, 100.0 * bytes / (us * 1e-6) / copy_bw);
    }
    if (e.lm) {
      float us = lm_us(e.g, x, W, y);
      printf("%-5s LM head       %-62s %7.1f us %5.1f%%\n", name, e.what, us, 100.0 * lb / (us * 1e-6) / copy_bw);
    }
  }
  g_one_layer = false;
  g_side_ahead = -1;
  static const char *const chain_what[] = {"GEMV_RW, each kernel waiting for the one before",
    "LL handover (flags in the data, no kernel wait)", "LL handover, polls 100 ns apart", "LL handover, polls 500 ns apart",
    "GEMV_RW, x by one bulk copy a block"};
  for (int ll = 0; ll < 5; ll++) {   // the real chain: grace's handover against the LL one
    if (!wanted(chain_what[ll])) continue;
    double err;
    float us = chain_us<T>(ll, ws, xs, &err);
    printf("%-5s real chain    %-62s %7.1f us %5.1f%%", name, chain_what[ll], us, 100.0 * bytes / (us * 1e-6) / copy_bw);
    if (ll && ll != 4) printf("  last output's max err %.2e of max|y|", err);
    printf("\n");
  }
  for (int i = 0; i < 48; i++) cudaFree(ws[i]);
  for (int i = 0; i < 4; i++) { cudaFree(xs[i]); cudaFree(ys[i]); }
  cudaFree(W); cudaFree(x); cudaFree(y); cudaFree(g_tl); cudaFree(g_prog); cudaFree(g_bt);
  for (int i = 0; i < 4; i++) cudaFree(rep[i]);
  g_rep.clear();
  g_tl = nullptr;
  g_bt = nullptr;
}

int main() {
  // copy bandwidth reference: 1 GiB device to device, read + write
  size_t n = 1ull << 30;
  void *a, *b;
  CK(cudaMalloc(&a, n)); CK(cudaMalloc(&b, n));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e0));
  for (int i = 0; i < 5; i++) CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
  float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
  double bw = 2.0 * n * 5 / (ms * 1e-3);
  printf("copy 1 GiB: %.0f GB/s\n", bw / 1e9);
  cudaFree(a); cudaFree(b);
  all<float>("f32", bw);
  all<__nv_bfloat16>("bf16", bw);
  return 0;
}
