// cg_ops.cuh: fixed text of the single-op kernels (cg_ops.c): the helpers every one starts with and the larger
// fixed pieces of their bodies. A piece uses the kernel's roles (D_t, S_ld, ... emitted per dtype by cg_ops.c),
// its parameter struct p and the names the generated text before it declares. Format: see cg_prelude.cuh.

// Bit conversions (the same arithmetic as base/base.h's), saturating float -> int64, Philox4x32-10 (base/base_rng.c).
//@ ops_common
typedef unsigned long long cgo_u64;
__device__ __forceinline__ unsigned cgo_saddr(const void *p) {
  unsigned r; asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p)); return r;
}
#define CGO_LOOP(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
__device__ __forceinline__ float cgo_h2f(unsigned short h) {
  unsigned int sign = (unsigned int)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (ex == 0) {
    if (man == 0) bits = sign;
    else { ex = 127 - 15 + 1; while (!(man & 0x400u)) { man <<= 1; ex--; } man &= 0x3ffu; bits = sign | (ex << 23) | (man << 13); }
  } else if (ex == 31) bits = sign | 0x7f800000u | (man << 13);
  else bits = sign | ((ex + 127 - 15) << 23) | (man << 13);
  return __uint_as_float(bits);
}
__device__ __forceinline__ unsigned short cgo_f2h(float f) {
  unsigned int x = __float_as_uint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (ax < 0x38800000u) return (unsigned short)(sign | __float2uint_rn(__fmul_rn(__uint_as_float(ax), 16777216.0f)));
  unsigned int r = ax + 0xfffu + ((ax >> 13) & 1u);
  return (unsigned short)(sign | ((r - 0x38000000u) >> 13));
}
__device__ __forceinline__ float cgo_b2f(unsigned short h) { return __uint_as_float((unsigned int)h << 16); }
__device__ __forceinline__ unsigned short cgo_f2b(float f) {
  unsigned int x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ long long cgo_d2ll(double v) {
  return v != v ? 0LL : v >= 9.2233720368547758e18 ? 0x7fffffffffffffffLL : v <= -9.2233720368547758e18 ? (-0x7fffffffffffffffLL - 1) : (long long)v;
}
__device__ __forceinline__ void cgo_philox(cgo_u64 seed, cgo_u64 offset, cgo_u64 index, unsigned int out[4]) {
  unsigned int c0 = (unsigned int)index, c1 = (unsigned int)(index >> 32), c2 = (unsigned int)offset, c3 = (unsigned int)(offset >> 32);
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    cgo_u64 p0 = (cgo_u64)0xD2511F53u * c0, p1 = (cgo_u64)0xCD9E8D57u * c2;
    unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
    c1 = (unsigned int)p1; c3 = (unsigned int)p0; c0 = n0; c2 = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

// ATTN with CGO_ATTN_SPLIT: a cluster's barrier and loads of a peer's shared memory
//@ ops_cluster
__device__ __forceinline__ void cgo_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ float cgo_cluster_ld(const float *p, int rank) {
  unsigned a = cgo_saddr(p), r; float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(r) : "memory");
  return v;
}

// NORM: a block's sum; every thread returns the same total, the partials added in one order
//@ ops_block_sum
__device__ double cgo_block_sum(double v, double *sh) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  double t = 0;
  for (unsigned w = 0; w < (blockDim.x >> 5); w++) t += sh[w];
  return t;
}

// SORT: the CPU's sort key of a float (cpu_reduce_scan.c): unsigned order = value order, -0 == +0, NaN largest
//@ ops_sort_key_float
__device__ __forceinline__ cgo_u64 cgo_key(const X_t *p) {
  double d = X_ld(p);
  if (d != d) return ~0ULL;
  if (d == 0) d = 0;
  cgo_u64 u = (cgo_u64)__double_as_longlong(d);
  return (u >> 63) ? ~u : u | 0x8000000000000000ULL;
}

// IMOVE: the loop over l after the offsets so, dof, io of element i (cg_ops.c body_imove)
// checked before the launch, or (in a CUDA graph) by a check node whose flag is read after it: a
// bad index is skipped here so that it never reads or writes out of bounds
//@ ops_imove_loop
    for (long long l = 0; l < p.len; l++) {
      long long q = I_ldi(idx + io + l * p.lis) - p.base;
      if ((unsigned long long)q >= (unsigned long long)p.bound) continue;
      cgo_conv(dst + dof + l * p.lds + q * p.dq, src + so + l * p.lss + q * p.sq);
    }
  }

// CUMSUM of integers over one row (after its offsets xo, oo): wraps as the CPU's uint64 accumulator
//@ ops_cumsum_int
    cgo_u64 acc = 0;
    for (long long l = 0; l < p.L; l++) {
      acc += (cgo_u64)S_ldi(x + xo + l * p.xl);
      D_sti(out + oo + l * p.ol, (long long)acc);
    }

// CUMSUM of floats over one row (after its offsets xo, oo), rounded step by step as the CPU
//@ ops_cumsum_float
    double acc = 0;
    for (long long l = 0; l < p.L; l++) {
      acc = __dadd_rn(acc, S_ld(x + xo + l * p.xl));
      D_st(out + oo + l * p.ol, acc);
    }

// SORT with selection (cg_ops.c body_select): one row after its offsets xo, oo, k block-wide minimum rounds
//@ ops_select_row
    cgo_u64 lk = 0;
    long long li = -1;
    for (long long j = 0; j < p.k; j++) {
      cgo_u64 bk = ~0ULL;
      long long bi = 0x7fffffffffffffffLL;
      for (long long i = threadIdx.x; i < p.L; i += blockDim.x) {
        cgo_u64 kk = cgo_key(x + xo + i * p.xl) ^ flip;
        bool after = li < 0 || kk > lk || (kk == lk && i > li);
        if (after && (kk < bk || (kk == bk && i < bi))) { bk = kk; bi = i; }
      }
      for (int o = 16; o; o >>= 1) {
        cgo_u64 ok = __shfl_xor_sync(0xffffffffu, bk, o);
        long long oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ok < bk || (ok == bk && oi < bi)) { bk = ok; bi = oi; }
      }
      if ((threadIdx.x & 31) == 0) { sk[threadIdx.x >> 5] = bk; si[threadIdx.x >> 5] = bi; }
      __syncthreads();
      for (unsigned w = 0; w < (blockDim.x >> 5); w++)
        if (sk[w] < bk || (sk[w] == bk && si[w] < bi)) { bk = sk[w]; bi = si[w]; }
      __syncthreads();
      lk = bk; li = bi;
      if (threadIdx.x == 0) {
        vals[oo + j * p.ol] = x[xo + bi * p.xl];
        if (p.has_idx) idx[oo + j * p.ol] = bi + p.base;
      }
    }
  }

// SORT (cg_ops.c body_sort): one row after its offsets xo, oo, a bitonic sort of (key, index) pairs in shared memory
//@ ops_sort_row
    for (long long i = threadIdx.x; i < p.P; i += blockDim.x) {
      if (i < p.L) { keys[i] = cgo_key(x + xo + i * p.xl) ^ flip; ids[i] = (int)i; }
      else { keys[i] = ~0ULL; ids[i] = 0x7fffffff; }
    }
    __syncthreads();
    for (long long k = 2; k <= p.P; k <<= 1)
      for (long long j = k >> 1; j > 0; j >>= 1) {
        for (long long i = threadIdx.x; i < p.P; i += blockDim.x) {
          long long l = i ^ j;
          if (l <= i) continue;
          cgo_u64 ka = keys[i], kb = keys[l];
          int ia = ids[i], ib = ids[l];
          bool gt = ka > kb || (ka == kb && ia > ib);
          if (gt == ((i & k) == 0)) { keys[i] = kb; keys[l] = ka; ids[i] = ib; ids[l] = ia; }
        }
        __syncthreads();
      }
    for (long long j = threadIdx.x; j < p.k; j += blockDim.x) {
      int src = ids[j];
      vals[oo + j * p.ol] = x[xo + (long long)src * p.xl];
      if (p.has_idx) idx[oo + j * p.ol] = (long long)src + p.base;
    }
    __syncthreads();
  }
