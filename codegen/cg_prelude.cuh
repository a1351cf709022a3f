// cg_prelude.cuh: the device helpers every generated source starts with (cg_prelude in cg.c): f16/bf16 bit
// conversions with the CPU backend's rounding, float -> integer conversion as the CPU does it, Philox, warp and
// block reductions.
//
// Template file format (every codegen/*.cuh, embedded by tools/bin2c.c -s): a line `//@ name` starts a section,
// compiled into libgrace as the string `cg_src_name` (declared in codegen/cg_templates.h) and pasted verbatim into
// generated sources; lines beginning with `//` (like these) are for the reader and are not embedded, nor are blank
// lines ending a section. Sections are plain CUDA, some only a fragment of a kernel body that the generator surrounds
// with generated text.

// The conversions give base/base.h's vm_float_to_half / vm_float_to_bf16 bit for bit (NaN payloads included), so a
// value stored on the device reads back as the CPU would have stored it.
//@ prelude
/* grace prelude */
typedef unsigned long long grace_u64;
__device__ __forceinline__ float grace_h2f(unsigned short h) {
  float f; asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h)); return f;
}
/* the hardware's round-to-nearest-even conversion; NaN gets the CPU's quiet NaN (sign | 0x7e00) */
__device__ __forceinline__ unsigned short grace_f2h(float f) {
  unsigned short h; asm("{ .reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
  return f != f ? (unsigned short)(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u) : h;
}
__device__ __forceinline__ float grace_bf2f(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
__device__ __forceinline__ unsigned short grace_f2bf(float f) {
  unsigned x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
/* float -> integer as the CPU: truncation toward zero, saturating, NaN -> 0 */
__device__ __forceinline__ long long grace_d2ll(double v) {
  return v != v ? 0LL : v >= 9.2233720368547758e18 ? 0x7fffffffffffffffLL
       : v <= -9.2233720368547758e18 ? (long long)(-0x7fffffffffffffffLL - 1) : (long long)v;
}
/* Philox4x32-10 as base/base_rng.c's vm_philox */
__device__ __forceinline__ void grace_philox(grace_u64 seed, grace_u64 offset, grace_u64 index, unsigned out[4]) {
  unsigned c0 = (unsigned)index, c1 = (unsigned)(index >> 32), c2 = (unsigned)offset, c3 = (unsigned)(offset >> 32);
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    unsigned lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
    unsigned lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
    unsigned n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c1 = lo1; c3 = lo0; c0 = n0; c2 = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}
/* warp reductions (all 32 lanes active); the block versions reduce through shared memory `sh` of
   blockDim.x / 32 slots and give every thread the result */
#define GRACE_WARP_REDUCE(T, NAME, OP) \
  __device__ __forceinline__ T NAME(T v) { \
    for (int o = 16; o > 0; o >>= 1) { T w = __shfl_xor_sync(0xffffffffu, v, o); v = OP; } return v; }
GRACE_WARP_REDUCE(float, grace_warp_sum_f, v + w)
GRACE_WARP_REDUCE(double, grace_warp_sum_d, v + w)
GRACE_WARP_REDUCE(long long, grace_warp_sum_ll, (long long)((grace_u64)v + (grace_u64)w))
GRACE_WARP_REDUCE(float, grace_warp_max_f, (w > v || w != w) ? w : v)
GRACE_WARP_REDUCE(float, grace_warp_min_f, (w < v || w != w) ? w : v)
#define GRACE_BLOCK_REDUCE(T, NAME, WARP, PAD) \
  __device__ __forceinline__ T NAME(T v, T *sh) { \
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5; \
    v = WARP(v); __syncthreads(); if (lane == 0) sh[wid] = v; __syncthreads(); \
    if (wid == 0) { v = lane < nw ? sh[lane] : (PAD); v = WARP(v); if (lane == 0) sh[0] = v; } \
    __syncthreads(); v = sh[0]; return v; }
GRACE_BLOCK_REDUCE(float, grace_block_sum_f, grace_warp_sum_f, 0.0f)
GRACE_BLOCK_REDUCE(double, grace_block_sum_d, grace_warp_sum_d, 0.0)
GRACE_BLOCK_REDUCE(long long, grace_block_sum_ll, grace_warp_sum_ll, 0LL)
GRACE_BLOCK_REDUCE(float, grace_block_max_f, grace_warp_max_f, sh[0])
GRACE_BLOCK_REDUCE(float, grace_block_min_f, grace_warp_min_f, sh[0])
/* end of prelude */
