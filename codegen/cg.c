/* cg.c: what every kernel generator shares (codegen/cg.h): the growable string builder sources are written
 * into, the C type names of dtypes in generated code, and the prelude of device helpers (f16/bf16 bit
 * conversions with the CPU backend's rounding, float->int conversion as the CPU does it, Philox, warp and
 * block reductions) that every generated source starts with. */
#include <stdio.h>
#include <string.h>
#include "codegen/cg.h"

void cg_buf_init(cg_buf *b, grace_vm *vm) {
  b->vm = vm;
  b->s = NULL;
  b->len = b->cap = 0;
  b->oom = 0;
}

/* Room for n more characters plus the terminator; sets oom (sticky) when the allocator fails. */
static int cg_reserve(cg_buf *b, size_t n) {
  if (b->oom) return 0;
  if (b->len + n + 1 <= b->cap) return 1;
  size_t cap = b->cap ? b->cap : 1024;
  while (cap < b->len + n + 1) cap *= 2;
  char *s = grace_realloc(b->vm, b->s, b->cap, cap);
  if (!s) { b->oom = 1; return 0; }
  b->s = s;
  b->cap = cap;
  return 1;
}

void cg_puts(cg_buf *b, const char *s) {
  size_t n = strlen(s);
  if (!cg_reserve(b, n)) return;
  memcpy(b->s + b->len, s, n + 1);
  b->len += n;
}

void cg_printf(cg_buf *b, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) { b->oom = 1; return; }
  if ((size_t)n < sizeof small) { cg_puts(b, small); return; }
  if (!cg_reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

char *cg_buf_take(cg_buf *b, size_t *n) {
  if (b->oom || !cg_reserve(b, 0)) { cg_buf_free(b); if (n) *n = 0; return NULL; }
  /* shrink to len + 1 so the caller can free with the size it knows */
  char *s = grace_realloc(b->vm, b->s, b->cap, b->len + 1);
  if (!s) { cg_buf_free(b); if (n) *n = 0; return NULL; }
  if (n) *n = b->len;
  b->s = NULL;
  b->len = b->cap = 0;
  return s;
}

void cg_buf_free(cg_buf *b) {
  if (b->s) grace_realloc(b->vm, b->s, b->cap, 0);
  b->s = NULL;
  b->len = b->cap = 0;
}

const char *cg_ctype(grace_dtype dt) {
  switch (dt) {
  case GRACE_FLOAT32: return "float";
  case GRACE_FLOAT64: return "double";
  case GRACE_FLOAT16: case GRACE_BFLOAT16: return "unsigned short";
  case GRACE_INT32: return "int";
  case GRACE_INT64: return "long long";
  case GRACE_UINT8: case GRACE_BOOL: return "unsigned char";
  default: return "void";
  }
}

const char *cg_calc_type(grace_dtype dt) {
  switch (dt) {
  case GRACE_FLOAT32: case GRACE_FLOAT16: case GRACE_BFLOAT16: return "float";
  case GRACE_FLOAT64: return "double";
  case GRACE_INT32: case GRACE_UINT8: return "int";
  case GRACE_INT64: return "long long";
  case GRACE_BOOL: return "unsigned char";
  default: return "void";
  }
}

/* The conversions give base/base.h's vm_float_to_half / vm_float_to_bf16 bit for bit (NaN payloads included), so a
 * value stored on the device reads back as the CPU would have stored it. */
static const char prelude[] =
  "/* grace prelude */\n"
  "typedef unsigned long long grace_u64;\n"
  "__device__ __forceinline__ float grace_h2f(unsigned short h) {\n"
  "  float f; asm(\"{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }\" : \"=f\"(f) : \"h\"(h)); return f;\n"
  "}\n"
  "/* the hardware's round-to-nearest-even conversion; NaN gets the CPU's quiet NaN (sign | 0x7e00) */\n"
  "__device__ __forceinline__ unsigned short grace_f2h(float f) {\n"
  "  unsigned short h; asm(\"{ .reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }\" : \"=h\"(h) : \"f\"(f));\n"
  "  return f != f ? (unsigned short)(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u) : h;\n"
  "}\n"
  "__device__ __forceinline__ float grace_bf2f(unsigned short h) { return __uint_as_float((unsigned)h << 16); }\n"
  "__device__ __forceinline__ unsigned short grace_f2bf(float f) {\n"
  "  unsigned x = __float_as_uint(f);\n"
  "  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);\n"
  "  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);\n"
  "}\n"
  "/* float -> integer as the CPU: truncation toward zero, saturating, NaN -> 0 */\n"
  "__device__ __forceinline__ long long grace_d2ll(double v) {\n"
  "  return v != v ? 0LL : v >= 9.2233720368547758e18 ? 0x7fffffffffffffffLL\n"
  "       : v <= -9.2233720368547758e18 ? (long long)(-0x7fffffffffffffffLL - 1) : (long long)v;\n"
  "}\n"
  "/* Philox4x32-10 as base/base_rng.c's vm_philox */\n"
  "__device__ __forceinline__ void grace_philox(grace_u64 seed, grace_u64 offset, grace_u64 index, unsigned out[4]) {\n"
  "  unsigned c0 = (unsigned)index, c1 = (unsigned)(index >> 32), c2 = (unsigned)offset, c3 = (unsigned)(offset >> 32);\n"
  "  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);\n"
  "  for (int r = 0; r < 10; r++) {\n"
  "    unsigned lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);\n"
  "    unsigned lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);\n"
  "    unsigned n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;\n"
  "    c1 = lo1; c3 = lo0; c0 = n0; c2 = n2;\n"
  "    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;\n"
  "  }\n"
  "  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;\n"
  "}\n"
  "/* warp reductions (all 32 lanes active); the block versions reduce through shared memory `sh` of\n"
  "   blockDim.x / 32 slots and give every thread the result */\n"
  "#define GRACE_WARP_REDUCE(T, NAME, OP) \\\n"
  "  __device__ __forceinline__ T NAME(T v) { \\\n"
  "    for (int o = 16; o > 0; o >>= 1) { T w = __shfl_xor_sync(0xffffffffu, v, o); v = OP; } return v; }\n"
  "GRACE_WARP_REDUCE(float, grace_warp_sum_f, v + w)\n"
  "GRACE_WARP_REDUCE(double, grace_warp_sum_d, v + w)\n"
  "GRACE_WARP_REDUCE(long long, grace_warp_sum_ll, (long long)((grace_u64)v + (grace_u64)w))\n"
  "GRACE_WARP_REDUCE(float, grace_warp_max_f, (w > v || w != w) ? w : v)\n"
  "GRACE_WARP_REDUCE(float, grace_warp_min_f, (w < v || w != w) ? w : v)\n"
  "#define GRACE_BLOCK_REDUCE(T, NAME, WARP, PAD) \\\n"
  "  __device__ __forceinline__ T NAME(T v, T *sh) { \\\n"
  "    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5; \\\n"
  "    v = WARP(v); __syncthreads(); if (lane == 0) sh[wid] = v; __syncthreads(); \\\n"
  "    if (wid == 0) { v = lane < nw ? sh[lane] : (PAD); v = WARP(v); if (lane == 0) sh[0] = v; } \\\n"
  "    __syncthreads(); v = sh[0]; return v; }\n"
  "GRACE_BLOCK_REDUCE(float, grace_block_sum_f, grace_warp_sum_f, 0.0f)\n"
  "GRACE_BLOCK_REDUCE(double, grace_block_sum_d, grace_warp_sum_d, 0.0)\n"
  "GRACE_BLOCK_REDUCE(long long, grace_block_sum_ll, grace_warp_sum_ll, 0LL)\n"
  "GRACE_BLOCK_REDUCE(float, grace_block_max_f, grace_warp_max_f, sh[0])\n"
  "GRACE_BLOCK_REDUCE(float, grace_block_min_f, grace_warp_min_f, sh[0])\n"
  "/* end of prelude */\n";

void cg_prelude(cg_buf *b) { cg_puts(b, prelude); }

int cg_pw_expand(char *out, size_t n, const char *tmpl, const char *const *args, int nargs, int f32, const char *T) {
  size_t k = 0;
  for (const char *p = tmpl; *p; p++) {
    const char *ins = NULL;
    char one[2] = {*p, 0};
    if (p[0] == '$' && p[1] >= '0' && p[1] - '0' < nargs) ins = args[p[1] - '0'];
    else if (p[0] == '$' && p[1] == 'f') ins = f32 ? "f" : "";
    else if (p[0] == '$' && p[1] == 'T') ins = T;
    if (ins) p++;
    else ins = one;
    size_t l = strlen(ins);
    if (k + l >= n) return 0;
    memcpy(out + k, ins, l);
    k += l;
  }
  out[k] = 0;
  return 1;
}

void cg_kernel_free(grace_vm *vm, cg_kernel *k) {
  if (!k) return;
  if (k->src) grace_realloc(vm, k->src, k->src_len + 1, 0);
  k->src = NULL;
  k->src_len = 0;
}
