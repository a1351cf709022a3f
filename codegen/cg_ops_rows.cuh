// cg_ops_rows.cuh: the single-op kernels of cg_ops.c that work a row at a time: cumulative sums, softmax and
// log-softmax, layer and RMS norm, sort and topk. Each body runs inside the generated entry (pointers out, x, ...
// and the parameter struct p), uses the kernel's roles (S_ld, D_st, ...) and is specialised by the #defines cg_ops.c
// writes before it. A row's elements are l = 0 .. L-1 at stride xl (ol in the output); the row's own offsets xo, oo
// come from unravelling the row index over the other dims. Format: see cg_prelude.cuh.

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

// SORT: the CPU's sort key (cpu_reduce_scan.c): unsigned order = value order; floats (CGO_X_FLOAT): -0 == +0, NaN
// largest
//@ ops_sort_key
#if CGO_X_FLOAT
__device__ __forceinline__ cgo_u64 cgo_key(const X_t *p) {
  double d = X_ld(p);
  if (d != d) return ~0ULL;
  if (d == 0) d = 0;
  cgo_u64 u = (cgo_u64)__double_as_longlong(d);
  return (u >> 63) ? ~u : u | 0x8000000000000000ULL;
}
#else
__device__ __forceinline__ cgo_u64 cgo_key(const X_t *p) { return (cgo_u64)X_ldi(p) ^ 0x8000000000000000ULL; }
#endif

// CUMSUM: a thread per row. Integers (CGO_INT_SUM) wrap as the CPU's uint64 accumulator; floats are rounded step by
// step as the CPU adds them
//@ ops_cumsum
  CGO_LOOP(row, p.rows) {
    long long xo = 0, oo = 0;
    CGO_UNRAVEL(row, xo += c * p.xs[d]; oo += c * p.os[d]);
#if CGO_INT_SUM
    cgo_u64 acc = 0;
    for (long long l = 0; l < p.L; l++) {
      acc += (cgo_u64)S_ldi(x + xo + l * p.xl);
      D_sti(out + oo + l * p.ol, (long long)acc);
    }
#else
    double acc = 0;
    for (long long l = 0; l < p.L; l++) {
      acc = __dadd_rn(acc, S_ld(x + xo + l * p.xl));
      D_st(out + oo + l * p.ol, acc);
    }
#endif
  }

// SOFTMAX, log-softmax with CGO_LOG: a warp per row, or with CGO_BLOCK a block per row (the warps' partials combined
// through shared memory, every thread reading them in one order so all agree). Computed in double with CGO_F64, else
// in float with the sum of the exponentials in double
//@ ops_softmax
#if CGO_F64
  typedef double T;
#define CGO_SLD S_ld
#else
  typedef float T;
#define CGO_SLD S_ldf
#endif
#if CGO_BLOCK
  __shared__ T shm[32];
  __shared__ double shs[32];
  const long long lane = threadIdx.x, step = blockDim.x;
  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {
#else
  const long long lane = threadIdx.x & 31, step = 32;
  long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nwarp = ((long long)gridDim.x * blockDim.x) >> 5;
  for (long long row = warp; row < p.rows; row += nwarp) {
#endif
    long long xo = 0, oo = 0;
    CGO_UNRAVEL(row, xo += c * p.xs[d]; oo += c * p.os[d]);
    T m = CGO_SLD(x + xo);
    for (long long l = lane; l < p.L; l += step) { T v = CGO_SLD(x + xo + l * p.xl); if (v > m || v != v) m = v; }
    for (int o = 16; o; o >>= 1) { T v = __shfl_xor_sync(0xffffffffu, m, o); if (v > m || v != v) m = v; }
#if CGO_BLOCK
    __syncthreads();
    if ((threadIdx.x & 31) == 0) shm[threadIdx.x >> 5] = m;
    __syncthreads();
    for (unsigned w = 0; w < (blockDim.x >> 5); w++) if (shm[w] > m || shm[w] != shm[w]) m = shm[w];
#endif
    double s = 0;
#if CGO_F64
    for (long long l = lane; l < p.L; l += step) s += exp(S_ld(x + xo + l * p.xl) - m);
#else
    for (long long l = lane; l < p.L; l += step) s += (double)expf(__fsub_rn(S_ldf(x + xo + l * p.xl), m));
#endif
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
#if CGO_BLOCK
    if ((threadIdx.x & 31) == 0) shs[threadIdx.x >> 5] = s;
    __syncthreads();
    s = 0;
    for (unsigned w = 0; w < (blockDim.x >> 5); w++) s += shs[w];
#endif
#if CGO_F64
    double ls = log(s);
    for (long long l = lane; l < p.L; l += step) {
      double d = S_ld(x + xo + l * p.xl) - m;
#if CGO_LOG
      D_st(out + oo + l * p.ol, d - ls);
#else
      D_st(out + oo + l * p.ol, exp(d) / s);
#endif
    }
#else
#if CGO_LOG
    float c = (float)log(s);
#else
    float c = (float)(1.0 / s);
#endif
    for (long long l = lane; l < p.L; l += step) {
      float d = __fsub_rn(S_ldf(x + xo + l * p.xl), m);
#if CGO_LOG
      D_stf(out + oo + l * p.ol, __fsub_rn(d, c));
#else
      D_stf(out + oo + l * p.ol, __fmul_rn(expf(d), c));
#endif
    }
#endif
  }

// NORM: layer norm, or RMS norm with CGO_RMS (no mean), a block per row, times the weight w (CGO_HAS_W) plus the
// bias b (CGO_HAS_B); in double with CGO_F64, else float steps rounded one by one with the sums in double. With
// CGO_NORM_REGS the row is read once into registers (CGO_NORM_REG elements a thread, with the weight and bias: their
// loads overlap the row's, none waits for the statistics) and the mean, the variance and the output come from
// there; otherwise each of the three passes reads it again. Both visit the elements in the same order, so they give
// the same bits. A pass is `CGO_NORM_LOOP { CGO_NORM_L ... }` over the thread's elements l; CGO_X, CGO_W, CGO_B are
// element l of x, w, b
//@ ops_norm
#if CGO_F64
  typedef double T;
#define CGO_XLD X_ld
#define CGO_WLD W_ld
#define CGO_BLD B_ld
#else
  typedef float T;
#define CGO_XLD X_ldf
#define CGO_WLD W_ldf
#define CGO_BLD B_ldf
#endif
#if CGO_NORM_REGS
#define CGO_NORM_LOOP _Pragma("unroll") for (int t = 0; t < CGO_NORM_REG; t++)
#define CGO_NORM_L const long long l = threadIdx.x + t * blockDim.x; if (l >= p.D) break;
#define CGO_X xv[t]
#define CGO_W wv[t]
#define CGO_B bv[t]
#else
#define CGO_NORM_LOOP for (long long l = threadIdx.x; l < p.D; l += blockDim.x)
#define CGO_NORM_L
#define CGO_X CGO_XLD(x + xo + l * p.xl)
#define CGO_W CGO_WLD(w + l * p.wl)
#define CGO_B CGO_BLD(b + l * p.bl)
#endif
  __shared__ double sh[32];
  const double eps = __longlong_as_double(p.eps);
  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {
    long long xo = 0, oo = 0;
    CGO_UNRAVEL(row, xo += c * p.xs[d]);
    Y_t *yr = y + row * p.D;
#if CGO_NORM_REGS
    T xv[CGO_NORM_REG], wv[CGO_NORM_REG], bv[CGO_NORM_REG];
    CGO_NORM_LOOP { CGO_NORM_L
      xv[t] = CGO_XLD(x + xo + l * p.xl);
#if CGO_HAS_W
      wv[t] = CGO_WLD(w + l * p.wl);
#endif
#if CGO_HAS_B
      bv[t] = CGO_BLD(b + l * p.bl);
#endif
    }
#endif
#if CGO_F64
    double mean = 0, q = 0;
#if !CGO_RMS
    CGO_NORM_LOOP { CGO_NORM_L
      mean += CGO_X;
    }
    mean = cgo_block_sum(mean, sh) / (double)p.D;
#endif
    CGO_NORM_LOOP { CGO_NORM_L
      double d = CGO_X - mean; q += d * d;
    }
    double rstd = 1.0 / sqrt(cgo_block_sum(q, sh) / (double)p.D + eps);
    CGO_NORM_LOOP { CGO_NORM_L
      double v = __dmul_rn(CGO_X - mean, rstd);
#if CGO_HAS_W
      v = __dmul_rn(v, CGO_W);
#endif
#if CGO_HAS_B
      v = __dadd_rn(v, CGO_B);
#endif
      Y_st(yr + l, v);
    }
#else
    float mean = 0;
    double q = 0;
#if !CGO_RMS
    double sm = 0;
    CGO_NORM_LOOP { CGO_NORM_L
      sm += (double)CGO_X;
    }
    mean = (float)(cgo_block_sum(sm, sh) / (double)p.D);
#endif
    CGO_NORM_LOOP { CGO_NORM_L
      float d = __fsub_rn(CGO_X, mean); q += (double)__fmul_rn(d, d);
    }
    float rstd = (float)(1.0 / sqrt(cgo_block_sum(q, sh) / (double)p.D + eps));
    CGO_NORM_LOOP { CGO_NORM_L
      float v = __fmul_rn(__fsub_rn(CGO_X, mean), rstd);
#if CGO_HAS_W
      v = __fmul_rn(v, CGO_W);
#endif
#if CGO_HAS_B
      v = __fadd_rn(v, CGO_B);
#endif
      Y_stf(yr + l, v);
    }
#endif
  }

// SORT and topk (CGO_DESCENDING: keys inverted): a block per row, a bitonic sort of (key, index) pairs in shared
// memory (p.P, a power of two, slots); the index breaks ties, so the order is the stable one
//@ ops_sort
  extern __shared__ cgo_u64 cgo_smem[];
  cgo_u64 *keys = cgo_smem;
  int *ids = (int *)(cgo_smem + p.P);
  const cgo_u64 flip = CGO_DESCENDING ? ~0ULL : 0ULL;
  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {
    long long xo = 0, oo = 0;
    CGO_UNRAVEL(row, xo += c * p.xs[d]; oo += c * p.os[d]);
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

// SORT by selection, for rows too long for shared memory (topk only): k rounds, each a block-wide minimum of the
// (key, index) pairs after the previous round's; the same total order as the sort, so the same stable result
//@ ops_select
  __shared__ cgo_u64 sk[32];
  __shared__ long long si[32];
  const cgo_u64 flip = CGO_DESCENDING ? ~0ULL : 0ULL;
  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {
    long long xo = 0, oo = 0;
    CGO_UNRAVEL(row, xo += c * p.xs[d]; oo += c * p.os[d]);
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
