// cg_ops.cuh: the single-op kernels of cg_ops.c that move, copy and create elements, and the helpers every
// single-op kernel starts with. A kernel body runs inside the generated entry, which declares the kernel's
// pointers (dst, src, ...) and scalars from its parameter struct p; it uses the kernel's roles (D_t, D_st, S_ld, ...
// emitted per dtype by cg_ops.c) and is specialised by the #defines cg_ops.c writes before it (CGO_CONTIG, ...).
// The row kernels are in cg_ops_rows.cuh, attention in cg_ops_attn.cuh. Format: see cg_prelude.cuh.

// Bit conversions (the same arithmetic as base/base.h's), saturating float -> int64, Philox4x32-10 (base/base_rng.c).
//@ ops_common
typedef unsigned long long cgo_u64;
__device__ __forceinline__ unsigned cgo_saddr(const void *p) {
  unsigned r; asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p)); return r;
}
#define CGO_LOOP(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
/* flat index r unravelled over p.size[0..p.nd): ADD runs for each dim d with coordinate c (adds c * stride) */
#define CGO_UNRAVEL(r, ADD) \
  { long long rr = (r); \
    for (int d = (int)p.nd - 1; d >= 0; d--) { \
      long long c = rr % p.size[d]; rr /= p.size[d]; \
      ADD; \
    } }
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

// COPY: element i of the iteration converted into dst (cgo_conv); with CGO_CONTIG both sides are contiguous
//@ ops_copy
#if CGO_CONTIG
  CGO_LOOP(i, p.n) cgo_conv(dst + i, src + i);
#else
  CGO_LOOP(i, p.n) {
    long long so = 0, dof = 0;
    CGO_UNRAVEL(i, so += c * p.ss[d]; dof += c * p.ds[d]);
    cgo_conv(dst + dof, src + so);
  }
#endif

// CAT: a thread per element of the pieces' flat iteration; the piece is the last whose start it has reached. The
// sources s0 .. s7 are spelled out: CGO_CAT_MAX is 8 (a _Static_assert in cg_ops.c)
//@ ops_cat
  CGO_LOOP(i, p.n) {
    int t = 0;
#pragma unroll
    for (int u = 1; u < CGO_CAT_MAX; u++) if (u < p.k && i >= p.start[u]) t = u;
    long long r = i - p.start[t], so = 0, dof = p.base[t];
    for (int d = (int)p.nd[t] - 1; d >= 0; d--) {
      long long c = r % p.size[t][d]; r /= p.size[t][d];
      so += c * p.ss[t][d]; dof += c * p.ds[t][d];
    }
    const S_t *src = s0;
    if (t == 1) src = s1;
    if (t == 2) src = s2;
    if (t == 3) src = s3;
    if (t == 4) src = s4;
    if (t == 5) src = s5;
    if (t == 6) src = s6;
    if (t == 7) src = s7;
    cgo_conv(dst + dof, src + so);
  }

// FILL: the value's bits (the scalar word) stored in every element
//@ ops_fill
  union { long long w; D_t v; } u; u.w = value;
  const D_t val = u.v;
  CGO_LOOP(i, p.n) {
    long long dof = 0;
    CGO_UNRAVEL(i, dof += c * p.ds[d]);
    dst[dof] = val;
  }

// TRI (triu, tril in place): the elements beyond diagonal k zeroed
//@ ops_tri
  CGO_LOOP(i, p.n) {
    long long j = i % p.cols, r = (i / p.cols) % p.rows, dl = j - r;
    if (p.upper ? dl < p.k : dl > p.k) x[i] = (D_t)0;
  }

// ICHECK: the first index out of [base, base + bound) recorded in the flag word
//@ ops_icheck
  CGO_LOOP(i, p.n) {
    long long io = 0;
    CGO_UNRAVEL(i, io += c * p.is[d]);
    long long q = I_ldi(idx + io) - p.base;
    if (q < 0 || q >= p.bound) atomicMin(flag, i);
  }

// IMOVE (gather, scatter, index_copy): element i's offsets, then the loop over the indexed dim l in order (the last
// write wins). The indices were checked before the launch, or (in a CUDA graph) by a check node whose flag is read
// after it: a bad index is skipped here so that it never reads or writes out of bounds
//@ ops_imove
  CGO_LOOP(i, p.n) {
    long long so = 0, dof = 0, io = 0;
    CGO_UNRAVEL(i, so += c * p.ss[d]; dof += c * p.ds[d]; io += c * p.is[d]);
    for (long long l = 0; l < p.len; l++) {
      long long q = I_ldi(idx + io + l * p.lis) - p.base;
      if ((unsigned long long)q >= (unsigned long long)p.bound) continue;
      cgo_conv(dst + dof + l * p.lds + q * p.dq, src + so + l * p.lss + q * p.sq);
    }
  }

// NZ: compaction of m's nonzero elements by one block, in row-major order as the CPU's: each thread counts a
// contiguous run, thread 0 scans the counts in shared memory in order, then each thread writes its run from its
// offset. One block keeps the order without a grid-wide scan: nonzero and masked_select read their size back on
// the host, so they are not the ops to make fast. CGO_NZ_COUNT_ONLY: the count alone; CGO_NZ_POSITIONS: out holds
// the positions (+ base), [count, nd]; otherwise the elements of x there.
//@ ops_nz
  __shared__ long long part[CGO_NZ_THREADS];
  const long long T = blockDim.x, t = threadIdx.x, per = (p.n + T - 1) / T;
  const long long lo = t * per < p.n ? t * per : p.n, hi = lo + per < p.n ? lo + per : p.n;
  long long k = 0;
  for (long long i = lo; i < hi; i++) {
    long long mo = 0;
    CGO_UNRAVEL(i, mo += c * p.ms[d]);
    k += M_ld(m + mo) != 0.0;
  }
  part[t] = k;
  __syncthreads();
  if (t == 0) {
    long long sum = 0;
    for (long long u = 0; u < T; u++) { long long v = part[u]; part[u] = sum; sum += v; }
    cnt[0] = sum;
  }
  __syncthreads();
#if !CGO_NZ_COUNT_ONLY
  k = part[t];
  for (long long i = lo; i < hi; i++) {
    long long mo = 0, xo = 0;
    CGO_UNRAVEL(i, mo += c * p.ms[d]; xo += c * p.xs[d]);
    if (M_ld(m + mo) == 0.0) continue;
#if CGO_NZ_POSITIONS
    long long rr = i;
    for (int d = (int)p.nd - 1; d >= 0; d--) {
      out[k * p.nd + d] = (D_t)(rr % p.size[d] + p.base); rr /= p.size[d];
    }
#else
    cgo_conv(out + k, x + xo);
#endif
    k++;
  }
#endif

// IADD: index_put_ with accumulate: a thread per element of the selection, adding atomically (repeated positions
// add up; the order of float additions is the hardware's). dst float32, float64, int32 or int64.
//@ ops_iadd
  CGO_LOOP(i, p.n) {
    long long so = 0, dof = 0, io = 0;
    CGO_UNRAVEL(i, so += c * p.ss[d]; dof += c * p.ds[d]; io += c * p.is[d]);
    D_t *d = dst + dof + I_ldi(off + io);
#if CGO_D_F32
    atomicAdd(d, S_ldf(src + so));
#elif CGO_D_F64
    atomicAdd(d, S_ld(src + so));
#elif CGO_D_I32
    atomicAdd(d, (int)S_ldi(src + so));
#else
    atomicAdd((unsigned long long *)d, (unsigned long long)S_ldi(src + so));
#endif
  }

// CREATE: element i of a new contiguous tensor; the kind is the one CGO_<kind> defined (CGO_ARANGE_F, ...; cg_ops.h
// says what the words hold). Sums and products are rounded one by one (__dadd_rn, ...) as the CPU computes them.
// Random numbers: Philox of (seed, offset, i); uniform floats from the top bits of the first words, the CPU's
// scaling per dtype (CGO_D_F64, CGO_D_F16, CGO_D_BF16; else float32); normals by Box-Muller in double, u1 in (0, 1]
//@ ops_create
  CGO_LOOP(i, p.n) {
    D_t *o = out + i;
#if defined(CGO_ARANGE_F)
    D_st(o, __dadd_rn(__longlong_as_double(p.w0), __dmul_rn((double)i, __longlong_as_double(p.w1))));
#elif defined(CGO_ARANGE_I)
    D_sti(o, (long long)((cgo_u64)p.w0 + (cgo_u64)i * (cgo_u64)p.w1));
#elif defined(CGO_LINSPACE)
    double a = __longlong_as_double(p.w0), e = __longlong_as_double(p.w1), st = __longlong_as_double(p.w2);
    D_st(o, p.n == 1 ? a : i < p.n / 2 ? __dadd_rn(a, __dmul_rn(st, (double)i)) : __dsub_rn(e, __dmul_rn(st, (double)(p.n - 1 - i))));
#elif defined(CGO_EYE)
    D_st(o, i / p.w0 == i % p.w0 ? 1.0 : 0.0);
#else
    unsigned int r[4];
    cgo_philox((cgo_u64)seed, (cgo_u64)offset, (cgo_u64)i, r);
#if defined(CGO_RANDINT)
    cgo_u64 u = ((cgo_u64)r[1] << 32) | r[0];
    D_sti(o, (long long)((cgo_u64)p.w0 + u % (cgo_u64)p.w1));
#elif defined(CGO_RANDN)
    double u1 = __dmul_rn((double)r[0] + 1.0, 2.3283064365386962890625e-10);
    double u2 = __dmul_rn((double)r[1], 2.3283064365386962890625e-10);
    D_st(o, __dmul_rn(sqrt(__dmul_rn(-2.0, log(u1))), cos(__dmul_rn(6.283185307179586, u2))));
#elif CGO_D_F64
    D_st(o, (double)((((cgo_u64)r[0] << 32) | r[1]) >> 11) * 1.1102230246251565404236316680908203125e-16);
#elif CGO_D_F16
    D_st(o, (double)(r[0] >> 21) * 0.00048828125);
#elif CGO_D_BF16
    D_st(o, (double)(r[0] >> 24) * 0.00390625);
#else
    D_st(o, (double)(r[0] >> 8) * 5.9604644775390625e-08);
#endif
#endif
  }
