/* cpu_matmul.c: the CPU backend's matrix products (NumPy/PyTorch matmul semantics: 1-D operands, batch
 * broadcasting). float32/float16/bfloat16 run a packed, register-blocked GEMM in float32 (AVX-512 or AVX2+FMA
 * micro-kernels chosen at run time, all summing each element the same way, portable fallback otherwise);
 * float32 matrix-vector products take a bandwidth-bound path that reads the matrix once; float64 and integers
 * run a simple blocked loop. Compiled programs (cpu_fused.c) run the same float32 GEMM on a right operand
 * packed once, with an epilogue per finished block of rows. */
#include <stdatomic.h>
#include "ir/ir.h"
#include "ir/ir_check.h"
#include "cpu/cpu_kernels.h"
#include "cpu/cpu_fused.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MM_X86 1
#endif

/* Micro-tile MR x NR (6x16 keeps 12 ymm accumulators + 2 B vectors + 1 broadcast in 16 registers);
 * KC x NR panels of B stay in L1, an MC x KC block of A in L2. */
enum { MR = 6, NR = 16, KC = 256, MC = 96, NC = 512 };

/* ---- the plan: A as [batch..., M, K], B as [batch..., K, N], C contiguous [batch..., M, N] ---- */
typedef struct mm_plan {
  grace_dtype dt;
  int64_t M, N, K, nb;
  int nbd;
  int64_t bsizes[GRACE_MAX_DIMS], bstr_a[GRACE_MAX_DIMS], bstr_b[GRACE_MAX_DIMS];
  const char *pa, *pb;            /* element 0 of A and B */
  int64_t ars, acs, brs, bcs;     /* element strides */
} mm_plan;

static void batch_offsets(const mm_plan *p, int64_t b, int64_t *oa, int64_t *ob) {
  int64_t a = 0, c = 0;
  for (int d = p->nbd - 1; d >= 0; d--) {
    int64_t i = b % p->bsizes[d];
    b /= p->bsizes[d];
    a += i * p->bstr_a[d];
    c += i * p->bstr_b[d];
  }
  *oa = a; *ob = c;
}

/* ---- slots: per-thread scratch for the packed panels, taken by whichever thread runs a chunk ---- */
typedef struct mm_slots {
  int n;
  size_t each;                    /* floats per slot */
  float *buf;
  atomic_int busy[64];
} mm_slots;

static int slot_acquire(mm_slots *s) {
  for (;;)
    for (int i = 0; i < s->n; i++)
      if (!atomic_exchange(&s->busy[i], 1)) return i;
}
static void slot_release(mm_slots *s, int i) { atomic_store(&s->busy[i], 0); }

/* ---- packing (converting to float32 on the way): A into MR-row panels, B into NR-column panels ---- */
#define DEF_PACK(SUF, T, CVT)                                                                                   \
  static void pack_a_##SUF(const T *A, int64_t ars, int64_t acs, int64_t mc, int64_t kc, float *Ap) {          \
    for (int64_t ir = 0; ir < mc; ir += MR, Ap += MR * kc) {                                                    \
      int64_t mr = mc - ir < MR ? mc - ir : MR;                                                                 \
      for (int64_t r = 0; r < MR; r++) {                                                                        \
        if (r >= mr) { for (int64_t k = 0; k < kc; k++) Ap[k * MR + r] = 0; continue; }                         \
        const T *row = A + (ir + r) * ars;                                                                      \
        if (acs == 1) for (int64_t k = 0; k < kc; k++) Ap[k * MR + r] = CVT(row[k]);                            \
        else for (int64_t k = 0; k < kc; k++) Ap[k * MR + r] = CVT(row[k * acs]);                               \
      }                                                                                                         \
    }                                                                                                           \
  }                                                                                                             \
  static void pack_b_##SUF(const T *B, int64_t brs, int64_t bcs, int64_t kc, int64_t nc, float *Bp) {          \
    for (int64_t jr = 0; jr < nc; jr += NR, Bp += NR * kc) {                                                    \
      int64_t nr = nc - jr < NR ? nc - jr : NR;                                                                 \
      if (bcs == 1) {                                                                                           \
        for (int64_t k = 0; k < kc; k++) {                                                                      \
          const T *row = B + k * brs + jr;                                                                      \
          int64_t j = 0;                                                                                        \
          for (; j < nr; j++) Bp[k * NR + j] = CVT(row[j]);                                                     \
          for (; j < NR; j++) Bp[k * NR + j] = 0;                                                               \
        }                                                                                                       \
      } else {                                                                                                  \
        for (int64_t j = 0; j < NR; j++) {                                                                      \
          if (j >= nr) { for (int64_t k = 0; k < kc; k++) Bp[k * NR + j] = 0; continue; }                       \
          const T *col = B + (jr + j) * bcs;                                                                    \
          for (int64_t k = 0; k < kc; k++) Bp[k * NR + j] = CVT(col[k * brs]);                                  \
        }                                                                                                       \
      }                                                                                                         \
    }                                                                                                           \
  }
#define CVT_F32(x) (x)
DEF_PACK(f32, float, CVT_F32)
DEF_PACK(f16, uint16_t, vm_half_to_float)
DEF_PACK(bf16, uint16_t, vm_bf16_to_float)

static void pack_a(grace_dtype dt, const char *A, int64_t ars, int64_t acs, int64_t mc, int64_t kc, float *Ap) {
  if (dt == GRACE_FLOAT32) pack_a_f32((const float *)A, ars, acs, mc, kc, Ap);
  else if (dt == GRACE_FLOAT16) pack_a_f16((const uint16_t *)A, ars, acs, mc, kc, Ap);
  else pack_a_bf16((const uint16_t *)A, ars, acs, mc, kc, Ap);
}

static int have_avx2(void) {
#ifdef MM_X86
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return 0;
#endif
}

#ifdef MM_X86
/* B stored transposed (x @ w:t(): columns contiguous in k) packs through 8x8 register transposes; the
 * scalar loop would move one float per cycle and dominate products with few rows. */
__attribute__((target("avx2,fma")))
static void pack_bt_panel_avx2(const float *B, int64_t bcs, int64_t kc, float *Bp) {
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8)
    for (int h = 0; h < NR; h += 8) {
      const float *c = B + h * bcs + k;
      __m256 r0 = _mm256_loadu_ps(c), r1 = _mm256_loadu_ps(c + bcs), r2 = _mm256_loadu_ps(c + 2 * bcs);
      __m256 r3 = _mm256_loadu_ps(c + 3 * bcs), r4 = _mm256_loadu_ps(c + 4 * bcs), r5 = _mm256_loadu_ps(c + 5 * bcs);
      __m256 r6 = _mm256_loadu_ps(c + 6 * bcs), r7 = _mm256_loadu_ps(c + 7 * bcs);
      __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
      __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
      __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
      __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
      __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
      __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
      __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
      __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
      float *o = Bp + k * NR + h;
      _mm256_storeu_ps(o + 0 * NR, _mm256_permute2f128_ps(s0, s4, 0x20));
      _mm256_storeu_ps(o + 1 * NR, _mm256_permute2f128_ps(s1, s5, 0x20));
      _mm256_storeu_ps(o + 2 * NR, _mm256_permute2f128_ps(s2, s6, 0x20));
      _mm256_storeu_ps(o + 3 * NR, _mm256_permute2f128_ps(s3, s7, 0x20));
      _mm256_storeu_ps(o + 4 * NR, _mm256_permute2f128_ps(s0, s4, 0x31));
      _mm256_storeu_ps(o + 5 * NR, _mm256_permute2f128_ps(s1, s5, 0x31));
      _mm256_storeu_ps(o + 6 * NR, _mm256_permute2f128_ps(s2, s6, 0x31));
      _mm256_storeu_ps(o + 7 * NR, _mm256_permute2f128_ps(s3, s7, 0x31));
    }
  for (; k < kc; k++)
    for (int j = 0; j < NR; j++) Bp[k * NR + j] = B[j * bcs + k];
}
#endif

static void pack_b(grace_dtype dt, const char *B, int64_t brs, int64_t bcs, int64_t kc, int64_t nc, float *Bp) {
#ifdef MM_X86
  if (dt == GRACE_FLOAT32 && brs == 1 && bcs != 1 && have_avx2()) {
    const float *b = (const float *)B;
    for (int64_t jr = 0; jr < nc; jr += NR) {
      if (nc - jr >= NR) pack_bt_panel_avx2(b + jr * bcs, bcs, kc, Bp + jr * kc);
      else pack_b_f32(b + jr * bcs, brs, bcs, kc, nc - jr, Bp + jr * kc);
    }
    return;
  }
#endif
  if (dt == GRACE_FLOAT32) pack_b_f32((const float *)B, brs, bcs, kc, nc, Bp);
  else if (dt == GRACE_FLOAT16) pack_b_f16((const uint16_t *)B, brs, bcs, kc, nc, Bp);
  else pack_b_bf16((const uint16_t *)B, brs, bcs, kc, nc, Bp);
}

/* ---- micro-kernels: c[MR x NR] (row stride ldc) = (acc ? c : 0) + a-panel x b-panel over kc ---- */
typedef void (*mm_kernel_fn)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int acc);

/* Portable: GNU vector extensions (SSE2 on any x86-64), in two 8-column halves so the 12 accumulators
 * fit in 16 vector registers. */
typedef float v4f __attribute__((vector_size(16)));
static void kernel_generic(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c,
                           int64_t ldc, int acc) {
  for (int h = 0; h < NR; h += 8) {
    v4f t[MR][2];
    memset(t, 0, sizeof t);
    const float *ap = a, *bp = b + h;
    for (int64_t k = 0; k < kc; k++, ap += MR, bp += NR) {
      v4f b0, b1;
      memcpy(&b0, bp, sizeof b0);
      memcpy(&b1, bp + 4, sizeof b1);
      for (int r = 0; r < MR; r++) {
        v4f x = {ap[r], ap[r], ap[r], ap[r]};
        t[r][0] += x * b0;
        t[r][1] += x * b1;
      }
    }
    for (int r = 0; r < MR; r++) {
      float v[8], *cr = c + r * ldc + h;
      memcpy(v, t[r], sizeof v);
      for (int j = 0; j < 8; j++) cr[j] = acc ? cr[j] + v[j] : v[j];
    }
  }
}

#ifdef MM_X86
__attribute__((target("avx2,fma")))
static void kernel_avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int acc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t k = 0; k < kc; k++, a += MR, b += NR) {
    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), x;
    x = _mm256_broadcast_ss(a + 0); c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1); c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2); c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3); c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4); c40 = _mm256_fmadd_ps(x, b0, c40); c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5); c50 = _mm256_fmadd_ps(x, b0, c50); c51 = _mm256_fmadd_ps(x, b1, c51);
  }
  __m256 acc_rows[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int r = 0; r < MR; r++) {
    float *cr = c + r * ldc;
    __m256 v0 = acc_rows[r][0], v1 = acc_rows[r][1];
    if (acc) { v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cr)); v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cr + 8)); }
    _mm256_storeu_ps(cr, v0);
    _mm256_storeu_ps(cr + 8, v1);
  }
}
/* The same sums for fewer than MR rows (a matrix's last row panel): each element is the same chain of FMAs
 * in k order as kernel_avx2 computes, then added to C (or to 0) as gemm_block adds its edge tiles, so results
 * are bit for bit eager's, without the FMAs of the zero rows (a product with 8 rows would otherwise compute 12). */
#define DEF_KROWS(R)                                                                                            \
  __attribute__((target("avx2,fma")))                                                                           \
  static void kernel_avx2_r##R(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int acc) {    \
    __m256 s[R][2];                                                                                             \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) s[r][0] = s[r][1] = _mm256_setzero_ps();               \
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR) {                                                        \
      __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);                                              \
      _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                                     \
        __m256 x = _mm256_broadcast_ss(a + r);                                                                  \
        s[r][0] = _mm256_fmadd_ps(x, b0, s[r][0]);                                                              \
        s[r][1] = _mm256_fmadd_ps(x, b1, s[r][1]);                                                              \
      }                                                                                                         \
    }                                                                                                           \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                                       \
      float *cr = c + r * ldc;                                                                                  \
      __m256 v0 = s[r][0], v1 = s[r][1];                                                                        \
      __m256 c0 = acc ? _mm256_loadu_ps(cr) : _mm256_setzero_ps(), c1 = acc ? _mm256_loadu_ps(cr + 8) : c0;      \
      v0 = _mm256_add_ps(v0, c0);   /* as gemm_block's edge tiles: 0 + s, so a sum of -0 stores +0 */        \
      v1 = _mm256_add_ps(v1, c1);                                                                               \
      _mm256_storeu_ps(cr, v0);                                                                                 \
      _mm256_storeu_ps(cr + 8, v1);                                                                             \
    }                                                                                                           \
  }
DEF_KROWS(1)
DEF_KROWS(2)
DEF_KROWS(3)
DEF_KROWS(4)
DEF_KROWS(5)

/* AVX-512: a panel row of NR = 16 floats is one register, so R rows take R accumulators, one load of B and R
 * broadcasts per k. Each lane runs the same FMA chain in k order as the AVX2 kernel's lanes, so the sums are
 * bit for bit the same; the wider FMAs about double the throughput where the CPU has them. R = MR is the
 * full tile (stored as kernel_avx2 stores it), R < MR the last row panel (stored as gemm_block's edge tiles). */
#define DEF_K512(NAME, R, EDGE)                                                                                 \
  __attribute__((target("avx512f")))                                                                            \
  static void NAME(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int acc) {                \
    __m512 s[R];                                                                                                \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) s[r] = _mm512_setzero_ps();                            \
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR) {                                                        \
      __m512 b0 = _mm512_loadu_ps(b);                                                                           \
      _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) s[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r]), b0, s[r]); \
    }                                                                                                           \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                                       \
      float *cr = c + r * ldc;                                                                                  \
      __m512 v = s[r];                                                                                          \
      if (acc) v = _mm512_add_ps(v, _mm512_loadu_ps(cr));                                                       \
      else if (EDGE) v = _mm512_add_ps(v, _mm512_setzero_ps());   /* 0 + s: a sum of -0 stores +0 */           \
      _mm512_storeu_ps(cr, v);                                                                                  \
    }                                                                                                           \
  }
DEF_K512(kernel_avx512, MR, 0)
DEF_K512(kernel_avx512_r1, 1, 1)
DEF_K512(kernel_avx512_r2, 2, 1)
DEF_K512(kernel_avx512_r3, 3, 1)
DEF_K512(kernel_avx512_r4, 4, 1)
DEF_K512(kernel_avx512_r5, 5, 1)

/* Two row panels at once (the second one's packed rows follow the first's at a + MR kc): 6 + R2 independent
 * FMA chains instead of 6 hide the FMA latency, and each B load serves both panels. The first panel is a
 * full tile, the second a full tile (R2 = MR) or the last, partial one. */
#define DEF_K512_PAIR(R2)                                                                                       \
  __attribute__((target("avx512f")))                                                                            \
  static void kernel_avx512_p##R2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int acc) { \
    __m512 s[MR + R2];                                                                                          \
    const float *a2 = a + MR * kc;                                                                              \
    _Pragma("GCC unroll 12") for (int r = 0; r < MR + R2; r++) s[r] = _mm512_setzero_ps();                     \
    for (int64_t k = 0; k < kc; k++, a += MR, a2 += MR, b += NR) {                                              \
      __m512 b0 = _mm512_loadu_ps(b);                                                                           \
      _Pragma("GCC unroll 6") for (int r = 0; r < MR; r++) s[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r]), b0, s[r]); \
      _Pragma("GCC unroll 6") for (int r = 0; r < R2; r++)                                                     \
        s[MR + r] = _mm512_fmadd_ps(_mm512_set1_ps(a2[r]), b0, s[MR + r]);                                      \
    }                                                                                                           \
    _Pragma("GCC unroll 12") for (int r = 0; r < MR + R2; r++) {                                               \
      float *cr = c + r * ldc;                                                                                  \
      __m512 v = s[r];                                                                                          \
      if (acc) v = _mm512_add_ps(v, _mm512_loadu_ps(cr));                                                       \
      else if (r >= MR && R2 < MR) v = _mm512_add_ps(v, _mm512_setzero_ps());   /* an edge tile's 0 + s */    \
      _mm512_storeu_ps(cr, v);                                                                                  \
    }                                                                                                           \
  }
DEF_K512_PAIR(1)
DEF_K512_PAIR(2)
DEF_K512_PAIR(3)
DEF_K512_PAIR(4)
DEF_K512_PAIR(5)
DEF_K512_PAIR(6)

static int have_avx512(void) { return __builtin_cpu_supports("avx512f"); }
#endif


/* The kernels one machine uses: a full tile, fewer rows (NULL: through a full-size buffer), two row panels at
 * once (pair[r2]: the second panel's rows; NULL: one panel at a time). Every choice sums each element the same
 * way, so which of them runs a tile never changes a result. */
typedef struct mm_kset {
  mm_kernel_fn full, rows[MR], pair[MR + 1];
} mm_kset;

static const mm_kset kset_generic = {.full = kernel_generic};
#ifdef MM_X86
static const mm_kset kset_avx2 = {.full = kernel_avx2, .rows = {NULL, kernel_avx2_r1, kernel_avx2_r2, kernel_avx2_r3,
                                  kernel_avx2_r4, kernel_avx2_r5}};
static const mm_kset kset_avx512 = {
  .full = kernel_avx512,
  .rows = {NULL, kernel_avx512_r1, kernel_avx512_r2, kernel_avx512_r3, kernel_avx512_r4, kernel_avx512_r5},
  .pair = {NULL, kernel_avx512_p1, kernel_avx512_p2, kernel_avx512_p3, kernel_avx512_p4, kernel_avx512_p5, kernel_avx512_p6}};
#endif

static const mm_kset *pick_kernels(void) {
#ifdef MM_X86
  if (have_avx2() && have_avx512()) return &kset_avx512;
  if (have_avx2()) return &kset_avx2;
#endif
  return &kset_generic;
}

/* Rows [0, mc) of packed A (panels of MR rows) times one packed NR-column panel of B (nr columns used) into c
 * (row stride ldc), added to c when acc. */
static void run_column(const mm_kset *ks, int64_t kc, const float *Ap, const float *bp, float *c, int64_t ldc,
                       int64_t mc, int64_t nr, int acc) {
  float tmp[MR * NR];
  int64_t ir = 0, np = (mc + MR - 1) / MR;
  if (nr == NR && ks->pair[1]) {
    if (np % 2 == 1 && mc >= MR) { ks->full(kc, Ap, bp, c, ldc, acc); ir = MR; }   /* odd count: one alone first */
    for (; ir + MR < mc; ir += 2 * MR) {
      int64_t r2 = mc - ir - MR < MR ? mc - ir - MR : MR;
      ks->pair[r2](kc, Ap + ir * kc, bp, c + ir * ldc, ldc, acc);
    }
  }
  for (; ir < mc; ir += MR) {
    int64_t mr = mc - ir < MR ? mc - ir : MR;
    float *cc = c + ir * ldc;
    if (nr == NR && mr == MR) { ks->full(kc, Ap + ir * kc, bp, cc, ldc, acc); continue; }
    if (nr == NR && ks->rows[mr]) { ks->rows[mr](kc, Ap + ir * kc, bp, cc, ldc, acc); continue; }
    ks->full(kc, Ap + ir * kc, bp, tmp, NR, 0);   /* edge tile: through a full-size buffer */
    for (int64_t r = 0; r < mr; r++)
      for (int64_t j = 0; j < nr; j++) cc[r * ldc + j] = (acc ? cc[r * ldc + j] : 0) + tmp[r * NR + j];
  }
}

/* ---- the packed GEMM: tasks are (batch, row group, column group) rectangles of C ---- */
typedef struct gemm_ctx {
  const mm_plan *p;
  float *C;                        /* float32 result, [nb, M, N] */
  int64_t rg, cg, rp, cp;          /* groups and MR/NR panels along rows and columns */
  size_t bp_floats;                /* the packed-B part of a slot */
  mm_slots *slots;
  const mm_kset *ks;
} gemm_ctx;

static void gemm_block(const gemm_ctx *x, int64_t b, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float *Bp,
                       float *Ap) {
  const mm_plan *p = x->p;
  int64_t oa, ob, es = (int64_t)grace_dtype_size(p->dt), N = p->N, K = p->K;
  batch_offsets(p, b, &oa, &ob);
  const char *A = p->pa + oa * es, *B = p->pb + ob * es;
  float *C = x->C + b * p->M * N;
  for (int64_t jc = n0; jc < n1; jc += NC) {
    int64_t nc = n1 - jc < NC ? n1 - jc : NC;
    for (int64_t pc = 0; pc < K; pc += KC) {
      int64_t kc = K - pc < KC ? K - pc : KC;
      pack_b(p->dt, B + (pc * p->brs + jc * p->bcs) * es, p->brs, p->bcs, kc, nc, Bp);
      for (int64_t ic = m0; ic < m1; ic += MC) {
        int64_t mc = m1 - ic < MC ? m1 - ic : MC;
        pack_a(p->dt, A + (ic * p->ars + pc * p->acs) * es, p->ars, p->acs, mc, kc, Ap);
        for (int64_t jr = 0; jr < nc; jr += NR)
          run_column(x->ks, kc, Ap, Bp + jr * kc, C + ic * N + jc + jr, N, mc, nc - jr < NR ? nc - jr : NR, pc > 0);
      }
    }
  }
}

static void gemm_tasks(void *vctx, int64_t begin, int64_t end) {
  const gemm_ctx *x = vctx;
  int s = slot_acquire(x->slots);
  float *Bp = x->slots->buf + (size_t)s * x->slots->each, *Ap = Bp + x->bp_floats;
  for (int64_t t = begin; t < end; t++) {
    int64_t b = t / (x->rg * x->cg), r = t / x->cg % x->rg, c = t % x->cg;
    int64_t m0 = r * x->rp / x->rg * MR, m1 = (r + 1) * x->rp / x->rg * MR;
    int64_t n0 = c * x->cp / x->cg * NR, n1 = (c + 1) * x->cp / x->cg * NR;
    if (m1 > x->p->M) m1 = x->p->M;
    if (n1 > x->p->N) n1 = x->p->N;
    if (m0 < m1 && n0 < n1) gemm_block(x, b, m0, m1, n0, n1, Bp, Ap);
  }
  slot_release(x->slots, s);
}

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

static grace_status gemm_f32(grace_vm *vm, const mm_plan *p, float *C) {
  int64_t M = p->M, N = p->N, rp = (M + MR - 1) / MR, cp = (N + NR - 1) / NR, rg = 1, cg = 1;
  double work = (double)p->nb * (double)M * (double)N * (double)p->K;
  int threads = vm->threads < 64 ? vm->threads : 64, parallel = threads > 1 && work >= 262144.0;
  if (parallel && p->nb < 2 * threads) {
    /* Too few batches to keep every thread busy: split the matrices. Each row group packs all of its
     * columns of B, so rows are split only while groups keep at least MC rows; columns take the rest. */
    int64_t s = (2 * threads + p->nb - 1) / p->nb, rmax = M / MC > 1 ? M / MC : 1;
    rg = s < rmax ? s : rmax;
    if (rg < s) { cg = (s + rg - 1) / rg; if (cg > cp) cg = cp; }
  }
  int64_t ntasks = p->nb * rg * cg;
  mm_slots slots = {.n = parallel ? (int)(ntasks < threads ? ntasks : threads) : 1};
  size_t bp = (size_t)(KC * (N < NC ? round_up(N, NR) : NC)), ap = (size_t)(MC < M ? MC : round_up(M, MR)) * KC;
  slots.each = round_up((int64_t)(bp + ap), 16);
  size_t bytes = slots.each * (size_t)slots.n * sizeof(float);
  slots.buf = vm_alloc(vm, bytes);
  if (!slots.buf) return vm_err(vm, GRACE_ENOMEM, "matmul: out of host memory for %zu bytes of packing buffers", bytes);
  for (int i = 0; i < slots.n; i++) atomic_init(&slots.busy[i], 0);
  gemm_ctx x = {.p = p, .C = C, .rg = rg, .cg = cg, .rp = rp, .cp = cp, .bp_floats = bp, .slots = &slots,
                .ks = pick_kernels()};
  if (parallel) vm_parallel_for(vm, ntasks, 1, gemm_tasks, &x);
  else gemm_tasks(&x, 0, ntasks);
  vm_free(vm, slots.buf, bytes);
  return GRACE_OK;
}

/* ---- float32 matrix-vector: y[i] = sum_k mat[i, k] v[k]; one pass over the matrix ---- */
typedef struct gemv_ctx {
  const mm_plan *p;
  int mat_is_b;                    /* M == 1: the matrix is B transposed; else (N == 1) it is A */
  int64_t rows, K, ms_i, ms_k, vs, rpc, nchunks;
  const float *vbuf;               /* contiguous copies of the vectors (nb x K), or NULL */
  float *C;
  int avx2;
} gemv_ctx;

#define DEF_GEMV_AXPY(SUF, ATTR)                                                                                \
  ATTR static void gemv_axpy_##SUF(const float *mat, int64_t ms_k, const float *v, int64_t vs, int64_t K,       \
                                   float *restrict y, int64_t rows) {                                          \
    for (int64_t i = 0; i < rows; i++) y[i] = 0;                                                                \
    for (int64_t k = 0; k < K; k++) {                                                                           \
      const float *restrict col = mat + k * ms_k;                                                              \
      float vk = v[k * vs];                                                                                     \
      for (int64_t i = 0; i < rows; i++) y[i] += vk * col[i];                                                   \
    }                                                                                                           \
  }
DEF_GEMV_AXPY(generic, )

static void gemv_dot_generic(const float *mat, int64_t ms, const float *v, int64_t K, float *y, int64_t rows) {
  for (int64_t i = 0; i < rows; i++) {
    const float *r = mat + i * ms;
    float acc[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
      for (int j = 0; j < 8; j++) acc[j] += r[k + j] * v[k + j];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; k < K; k++) s += r[k] * v[k];
    y[i] = s;
  }
}

#ifdef MM_X86
DEF_GEMV_AXPY(avx2, __attribute__((target("avx2,fma"))))

__attribute__((target("avx2,fma"))) static inline float hsum_avx2(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

/* Four rows at a time: each v load feeds four FMAs, so the loop stays bound by reading the matrix. */
__attribute__((target("avx2,fma")))
static void gemv_dot_avx2(const float *mat, int64_t ms, const float *v, int64_t K, float *y, int64_t rows) {
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4) {
    const float *r0 = mat + i * ms, *r1 = r0 + ms, *r2 = r1 + ms, *r3 = r2 + ms;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      __m256 vv = _mm256_loadu_ps(v + k);
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + k), vv, s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + k), vv, s1);
      s2 = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + k), vv, s2);
      s3 = _mm256_fmadd_ps(_mm256_loadu_ps(r3 + k), vv, s3);
    }
    float t0 = hsum_avx2(s0), t1 = hsum_avx2(s1), t2 = hsum_avx2(s2), t3 = hsum_avx2(s3);
    for (; k < K; k++) { t0 += r0[k] * v[k]; t1 += r1[k] * v[k]; t2 += r2[k] * v[k]; t3 += r3[k] * v[k]; }
    y[i] = t0; y[i + 1] = t1; y[i + 2] = t2; y[i + 3] = t3;
  }
  for (; i < rows; i++) {
    const float *r = mat + i * ms;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(r + k), _mm256_loadu_ps(v + k), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(r + k + 8), _mm256_loadu_ps(v + k + 8), s1);
    }
    float t = hsum_avx2(_mm256_add_ps(s0, s1));
    for (; k < K; k++) t += r[k] * v[k];
    y[i] = t;
  }
}
#endif

static void gemv_tasks(void *vctx, int64_t begin, int64_t end) {
  const gemv_ctx *x = vctx;
  const mm_plan *p = x->p;
  for (int64_t t = begin; t < end; t++) {
    int64_t b = t / x->nchunks, i0 = t % x->nchunks * x->rpc, n = x->rows - i0 < x->rpc ? x->rows - i0 : x->rpc;
    int64_t oa, ob;
    batch_offsets(p, b, &oa, &ob);
    const float *A = (const float *)p->pa + oa, *B = (const float *)p->pb + ob;
    const float *mat = x->mat_is_b ? B : A, *v = x->mat_is_b ? A : B;
    float *y = x->C + b * x->rows + i0;
    mat += i0 * x->ms_i;
    if (x->ms_k == 1) {
      if (x->vbuf) v = x->vbuf + b * x->K;
#ifdef MM_X86
      if (x->avx2) { gemv_dot_avx2(mat, x->ms_i, v, x->K, y, n); continue; }
#endif
      gemv_dot_generic(mat, x->ms_i, v, x->K, y, n);
    } else {
#ifdef MM_X86
      if (x->avx2) { gemv_axpy_avx2(mat, x->ms_k, v, x->vs, x->K, y, n); continue; }
#endif
      gemv_axpy_generic(mat, x->ms_k, v, x->vs, x->K, y, n);
    }
  }
}

/* Returns 0 (and does nothing) when neither the matrix's rows nor its columns are contiguous. */
static int gemv_f32(grace_vm *vm, const mm_plan *p, float *C, grace_status *st) {
  gemv_ctx x = {.p = p, .mat_is_b = p->M == 1, .K = p->K, .C = C, .avx2 = have_avx2()};
  if (x.mat_is_b) { x.rows = p->N; x.ms_i = p->bcs; x.ms_k = p->brs; x.vs = p->acs; }
  else { x.rows = p->M; x.ms_i = p->ars; x.ms_k = p->acs; x.vs = p->brs; }
  if (x.rows == 1) x.ms_i = 1;   /* one row: its stride is never used */
  if (p->K == 1) x.ms_k = 1;
  if (x.ms_k != 1 && x.ms_i != 1) return 0;
  float *vbuf = NULL;
  size_t vbytes = 0;
  if (x.ms_k == 1 && x.vs != 1) {   /* the dot form wants contiguous vectors: gather them once */
    vbytes = (size_t)(p->nb * p->K) * sizeof(float);
    if (!(vbuf = vm_alloc_data(vm, "matmul", (size_t)(p->nb * p->K), sizeof(float)))) {
      *st = vm->status;
      return 1;
    }
    for (int64_t b = 0; b < p->nb; b++) {
      int64_t oa, ob;
      batch_offsets(p, b, &oa, &ob);
      const float *v = x.mat_is_b ? (const float *)p->pa + oa : (const float *)p->pb + ob;
      for (int64_t k = 0; k < p->K; k++) vbuf[b * p->K + k] = v[k * x.vs];
    }
    x.vbuf = vbuf;
  }
  /* dot form: a chunk is ~32K matrix elements; axpy form: 512 outputs, so each k reads a 2 KB run */
  x.rpc = x.ms_k == 1 ? round_up(p->K >= 4096 ? 8 : 32768 / p->K, 8) : 512;
  if (x.rpc > x.rows) x.rpc = x.rows;
  x.nchunks = (x.rows + x.rpc - 1) / x.rpc;
  int64_t ntasks = p->nb * x.nchunks;
  double work = (double)p->nb * (double)x.rows * (double)p->K;
  vm_parallel_for(vm, ntasks, work < 65536.0 ? ntasks : 1, gemv_tasks, &x);
  vm_free(vm, vbuf, vbytes);
  *st = GRACE_OK;
  return 1;
}

/* ---- float64 and integers (as uint64, so overflow wraps as in PyTorch): blocked loop, B rows contiguous ---- */
typedef struct gen_ctx {
  const mm_plan *p;
  void *C;
  int64_t rpc, nchunks;
} gen_ctx;

#define DEF_GEN(T, SUF)                                                                                         \
  static void gen_tasks_##SUF(void *vctx, int64_t begin, int64_t end) {                                        \
    const gen_ctx *x = vctx;                                                                                    \
    const mm_plan *p = x->p;                                                                                    \
    int64_t M = p->M, N = p->N, K = p->K;                                                                       \
    for (int64_t t = begin; t < end; t++) {                                                                     \
      int64_t b = t / x->nchunks, i0 = t % x->nchunks * x->rpc, i1 = i0 + x->rpc < M ? i0 + x->rpc : M, oa, ob; \
      batch_offsets(p, b, &oa, &ob);                                                                            \
      const T *A = (const T *)p->pa + oa, *B = (const T *)p->pb + ob;                                           \
      T *C = (T *)x->C + b * M * N;                                                                             \
      for (int64_t i = i0; i < i1; i++)                                                                         \
        for (int64_t j = 0; j < N; j++) C[i * N + j] = 0;                                                       \
      for (int64_t jb = 0; jb < N; jb += 512) {                                                                 \
        int64_t nj = N - jb < 512 ? N - jb : 512;                                                               \
        for (int64_t kb = 0; kb < K; kb += 128) {                                                               \
          int64_t nk = K - kb < 128 ? K - kb : 128;                                                             \
          for (int64_t i = i0; i < i1; i++) {                                                                   \
            T *restrict crow = C + i * N + jb;                                                                  \
            const T *arow = A + i * p->ars + kb * p->acs;                                                       \
            for (int64_t k = 0; k < nk; k++) {                                                                  \
              T aik = arow[k * p->acs];                                                                         \
              const T *restrict brow = B + (kb + k) * p->brs + jb;                                              \
              for (int64_t j = 0; j < nj; j++) crow[j] += aik * brow[j];                                        \
            }                                                                                                   \
          }                                                                                                     \
        }                                                                                                       \
      }                                                                                                         \
    }                                                                                                           \
  }
DEF_GEN(double, f64)
DEF_GEN(uint64_t, u64)

static void gen_run(grace_vm *vm, const mm_plan *p, void *C, vm_range_fn fn) {
  gen_ctx x = {.p = p, .C = C};
  x.rpc = p->N * p->K >= 65536 ? 4 : 65536 / (p->N * p->K > 0 ? p->N * p->K : 1);
  if (x.rpc > p->M) x.rpc = p->M;
  x.nchunks = (p->M + x.rpc - 1) / x.rpc;
  double work = (double)p->nb * (double)p->M * (double)p->N * (double)p->K;
  int64_t ntasks = p->nb * x.nchunks;
  vm_parallel_for(vm, ntasks, work < 65536.0 ? ntasks : 1, fn, &x);
}

/* A contiguous copy of t's elements as T (double or uint64), for the generic loop. */
static grace_tensor *as_contig(grace_vm *vm, const grace_tensor *t, grace_dtype as) {
  grace_tensor *c = vm_tensor_new(vm, "matmul", as, GRACE_CPU, t->ndim, t->sizes);
  if (!c) return NULL;
  int64_t n = vm_numel(t->ndim, t->sizes);
  if (n == 0) return c;
  size_t es = grace_dtype_size(t->dtype);
  const char *src = vm_ptr(t);
  vm_counter ctr;
  vm_counter_init(&ctr, t->ndim, t->sizes);
  for (int64_t i = 0;; i++) {
    const char *e = src + vm_offset(t->ndim, ctr.idx, t->strides) * (int64_t)es;
    if (as == GRACE_FLOAT64) ((double *)vm_ptr(c))[i] = vm_load_f64(t->dtype, e);
    else ((int64_t *)vm_ptr(c))[i] = vm_load_i64(t->dtype, e);
    if (!vm_counter_next(&ctr)) break;
  }
  return c;
}

/* ---- shapes, dispatch ---- */
static void plan_sides(mm_plan *p, const grace_tensor *x, const grace_tensor *y) {
  p->pa = vm_ptr(x);
  p->pb = vm_ptr(y);
  if (x->ndim == 1) { p->ars = 0; p->acs = x->strides[0]; }
  else { p->ars = x->strides[x->ndim - 2]; p->acs = x->strides[x->ndim - 1]; }
  if (y->ndim == 1) { p->brs = y->strides[0]; p->bcs = 1; }
  else { p->brs = y->strides[y->ndim - 2]; p->bcs = y->strides[y->ndim - 1]; }
  if (p->N == 1) p->bcs = 1;   /* a stride along a dim of size 1 is never used */
  if (p->M == 1) p->ars = 0;
  /* each operand's batch dims: all but its last 2 (1 for a vector) */
  vm_broadcast_dims(x->ndim - (x->ndim >= 2 ? 2 : 1), x->sizes, x->strides, p->nbd, p->bsizes, p->bstr_a);
  vm_broadcast_dims(y->ndim - (y->ndim >= 2 ? 2 : 1), y->sizes, y->strides, p->nbd, p->bsizes, p->bstr_b);
}

/* When B is the same matrix for every batch and A's batch and row dims form one strided run, the
 * batched product is a single (nb*M) x K by K x N product (as PyTorch folds x @ w for linear layers). */
static void fold_batch(mm_plan *p) {
  if (p->nbd == 0) return;
  for (int d = 0; d < p->nbd; d++) if (p->bstr_b[d] != 0 && p->bsizes[d] != 1) return;
  int64_t sz[GRACE_MAX_DIMS + 1], st[GRACE_MAX_DIMS + 1];
  int n = 0;
  for (int d = 0; d < p->nbd; d++)
    if (p->bsizes[d] != 1) { sz[n] = p->bsizes[d]; st[n++] = p->bstr_a[d]; }
  if (p->M != 1) { sz[n] = p->M; st[n++] = p->ars; }
  for (int i = 0; i + 1 < n; i++) if (st[i] != st[i + 1] * sz[i + 1]) return;
  p->M *= p->nb;
  if (n > 0) p->ars = st[n - 1];
  if (p->M == 1) p->ars = 0;
  p->nb = 1;
  p->nbd = 0;
}

/* Fills o (contiguous [batch..., M, N] in p's dtype) with x @ y. */
static grace_status compute(grace_vm *vm, mm_plan *p, grace_tensor *x, grace_tensor *y, grace_tensor *o) {
  int64_t numel = p->nb * p->M * p->N;
  if (numel == 0) return GRACE_OK;
  if (p->K == 0) { memset(vm_ptr(o), 0, (size_t)numel * grace_dtype_size(p->dt)); return GRACE_OK; }
  grace_status st = GRACE_OK;
  if (p->dt == GRACE_FLOAT32 || p->dt == GRACE_FLOAT16 || p->dt == GRACE_BFLOAT16) {
    plan_sides(p, x, y);
    fold_batch(p);
    if (p->dt == GRACE_FLOAT32) {
      if ((p->M == 1 || p->N == 1) && gemv_f32(vm, p, (float *)vm_ptr(o), &st)) return st;
      return gemm_f32(vm, p, (float *)vm_ptr(o));
    }
    size_t bytes = (size_t)numel * sizeof(float);
    float *c = vm_alloc_data(vm, "matmul", (size_t)numel, sizeof(float));
    if (!c) return vm->status;
    if ((st = gemm_f32(vm, p, c)) == GRACE_OK) {
      uint16_t *d = (uint16_t *)vm_ptr(o);
      if (p->dt == GRACE_FLOAT16) for (int64_t i = 0; i < numel; i++) d[i] = vm_float_to_half(c[i]);
      else for (int64_t i = 0; i < numel; i++) d[i] = vm_float_to_bf16(c[i]);
    }
    vm_free(vm, c, bytes);
    return st;
  }

  /* float64 runs on the inputs unless B's rows are strided; integers run on int64 copies. */
  int is_f64 = p->dt == GRACE_FLOAT64;
  grace_tensor *xa = x, *yb_t = y, *cx = NULL, *cy = NULL, *cc = NULL;
  int64_t bcs = y->ndim == 1 || p->N == 1 ? 1 : y->strides[y->ndim - 1];
  if (!is_f64 && !(cx = xa = as_contig(vm, x, GRACE_INT64))) return vm->status;
  if ((!is_f64 || bcs != 1) && !(cy = yb_t = as_contig(vm, y, is_f64 ? GRACE_FLOAT64 : GRACE_INT64))) {
    grace_tensor_release(cx);
    return vm->status;
  }
  plan_sides(p, xa, yb_t);
  fold_batch(p);
  void *C = vm_ptr(o);
  if (!is_f64 && p->dt != GRACE_INT64) {
    if (!(cc = vm_tensor_new(vm, "matmul", GRACE_INT64, GRACE_CPU, o->ndim, o->sizes))) st = vm->status;
    else C = vm_ptr(cc);
  }
  if (st == GRACE_OK) {
    gen_run(vm, p, C, is_f64 ? gen_tasks_f64 : gen_tasks_u64);
    if (cc) {
      const int64_t *s = (const int64_t *)vm_ptr(cc);
      char *d = vm_ptr(o);
      size_t es = grace_dtype_size(p->dt);
      for (int64_t i = 0; i < numel; i++) vm_store_i64(p->dt, d + (size_t)i * es, s[i]);
    }
  }
  grace_tensor_release(cx);
  grace_tensor_release(cy);
  grace_tensor_release(cc);
  return st;
}

grace_status cpu_matmul_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                            int nout, grace_tensor **out) {
  grace_tensor *x = in[0], *y = in[1];
  ir_type ot;
  /* the checks are ir_infer's (infer_matmul), which the IR and the device share */
  grace_status cs = vm_infer_tensors(vm, op, 2, in, a, 1, &ot);
  if (cs != GRACE_OK) return cs;
  mm_plan p = {.dt = x->dtype};
  p.M = x->ndim == 1 ? 1 : x->sizes[x->ndim - 2];
  p.K = x->sizes[x->ndim - 1];
  p.N = y->ndim == 1 ? 1 : y->sizes[y->ndim - 1];
  int xb = x->ndim > 2 ? x->ndim - 2 : 0, yb = y->ndim > 2 ? y->ndim - 2 : 0;
  p.nbd = xb > yb ? xb : yb;
  p.nb = 1;
  for (int d = 0; d < p.nbd; d++) {
    int dx = d - (p.nbd - xb), dy = d - (p.nbd - yb);
    int64_t sx = dx < 0 ? 1 : x->sizes[dx], sy = dy < 0 ? 1 : y->sizes[dy];
    p.bsizes[d] = sx == 1 ? sy : sx;
    p.nb *= p.bsizes[d];
  }
  int64_t osz[GRACE_MAX_DIMS];
  int ond = p.nbd;
  memcpy(osz, p.bsizes, sizeof(int64_t) * (size_t)p.nbd);
  if (x->ndim >= 2) osz[ond++] = p.M;
  if (y->ndim >= 2) osz[ond++] = p.N;
  grace_tensor *o = vm_tensor_new(vm, "matmul", p.dt, GRACE_CPU, ond, osz);
  if (!o) return vm->status;
  grace_status st = compute(vm, &p, x, y, o);
  if (st != GRACE_OK) { grace_tensor_release(o); return st; }
  *out = o;
  return GRACE_OK;
}

/* ---- compiled programs: B packed once (a captured weight), the product with an epilogue per finished block ----
 * The packed layout is what pack_b makes for all N columns, one KC block of k after another: block pc holds
 * npad/NR panels of kc x NR floats at data + pc * npad. Each element is summed exactly as gemm_f32 sums it
 * (KC blocks in order, a chain of FMAs in k order inside a block), so results are bit for bit eager's. */
grace_status cpu_mm_pack_b(grace_vm *vm, const grace_tensor *b, cpu_mm_pack *pk) {
  memset(pk, 0, sizeof *pk);
  if (b->dtype != GRACE_FLOAT32 || b->ndim != 2 || b->storage->device != GRACE_CPU)
    return vm_err(vm, GRACE_EUNSUPPORTED, "matmul: only a 2-d float32 CPU matrix is packed ahead");
  int64_t K = b->sizes[0], N = b->sizes[1], npad = round_up(N, NR);
  size_t bytes = (size_t)(K * npad) * sizeof(float);
  float *d = vm_alloc_data(vm, "matmul", bytes ? bytes : 64, 1);   /* an expanded weight packs to its full size */
  if (!d) return vm->status;
  const char *B = vm_ptr(b);
  int64_t brs = N == 1 ? 1 : b->strides[0], bcs = N == 1 ? 1 : b->strides[1];
  if (K == 1) brs = 1;
  for (int64_t pc = 0; pc < K; pc += KC) {
    int64_t kc = K - pc < KC ? K - pc : KC;
    pack_b(GRACE_FLOAT32, B + pc * brs * (int64_t)sizeof(float), brs, bcs, kc, N, d + pc * npad);
  }
  *pk = (cpu_mm_pack){.K = K, .N = N, .npad = npad, .data = d, .bytes = bytes ? bytes : 64};
  return GRACE_OK;
}

void cpu_mm_pack_free(grace_vm *vm, cpu_mm_pack *pk) {
  if (pk->data) vm_free(vm, pk->data, pk->bytes);
  memset(pk, 0, sizeof *pk);
}

typedef struct pk_ctx {
  const cpu_mm_pack *pk;
  const float *A;
  int64_t M, ars, acs;
  float *C;                        /* [M, N] contiguous */
  int64_t rg, cg, rp, cp;
  mm_slots *slots;
  const mm_kset *ks;
  cpu_mm_epi_fn epi;
  void *ectx;
} pk_ctx;

/* Rows [m0, m1) x columns [n0, n1) of C (n0 a multiple of NR); the epilogue runs on each MC block of rows as soon
 * as its last KC block is summed, while those rows are still in cache. */
static void pk_block(const pk_ctx *x, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float *Ap) {
  const cpu_mm_pack *pk = x->pk;
  int64_t N = pk->N, K = pk->K;
  for (int64_t ic = m0; ic < m1; ic += MC) {
    int64_t mc = m1 - ic < MC ? m1 - ic : MC;
    for (int64_t pc = 0; pc < K; pc += KC) {
      int64_t kc = K - pc < KC ? K - pc : KC;
      pack_a_f32(x->A + ic * x->ars + pc * x->acs, x->ars, x->acs, mc, kc, Ap);
      const float *Bk = pk->data + pc * pk->npad;
      for (int64_t jr = n0; jr < n1; jr += NR)
        run_column(x->ks, kc, Ap, Bk + jr / NR * kc * NR, x->C + ic * N + jr, N, mc, n1 - jr < NR ? n1 - jr : NR, pc > 0);
    }
    if (x->epi) x->epi(x->ectx, ic, ic + mc, n0, n1);
  }
}

static void pk_tasks(void *vctx, int64_t begin, int64_t end) {
  const pk_ctx *x = vctx;
  int s = slot_acquire(x->slots);
  float *Ap = x->slots->buf + (size_t)s * x->slots->each;
  for (int64_t t = begin; t < end; t++) {
    int64_t r = t / x->cg, c = t % x->cg;
    int64_t m0 = r * x->rp / x->rg * MR, m1 = (r + 1) * x->rp / x->rg * MR;
    int64_t n0 = c * x->cp / x->cg * NR, n1 = (c + 1) * x->cp / x->cg * NR;
    if (m1 > x->M) m1 = x->M;
    if (n1 > x->pk->N) n1 = x->pk->N;
    if (m0 < m1 && n0 < n1) pk_block(x, m0, m1, n0, n1, Ap);
  }
  slot_release(x->slots, s);
}

grace_status cpu_mm_packed_run(grace_vm *vm, const grace_tensor *a, const cpu_mm_pack *pk, float *C, cpu_mm_epi_fn epi,
                               void *ectx) {
  if (a->dtype != GRACE_FLOAT32 || a->ndim < 2 || a->storage->device != GRACE_CPU || a->sizes[a->ndim - 1] != pk->K)
    return GRACE_EUNSUPPORTED;
  /* A's batch and row dims as one run of rows, as fold_batch folds them for eager */
  mm_plan p = {.dt = GRACE_FLOAT32, .M = a->sizes[a->ndim - 2], .K = pk->K, .N = pk->N, .nb = 1, .nbd = a->ndim - 2};
  for (int d = 0; d < p.nbd; d++) { p.bsizes[d] = a->sizes[d]; p.nb *= a->sizes[d]; p.bstr_a[d] = a->strides[d]; }
  p.ars = a->strides[a->ndim - 2];
  p.acs = a->strides[a->ndim - 1];
  if (p.M == 1) p.ars = 0;
  fold_batch(&p);
  /* eager takes other paths here (matrix-vector sums, a zero fill): the caller runs eager's matmul instead */
  if (p.nb != 1 || p.M <= 1 || p.N <= 1 || p.K == 0) return GRACE_EUNSUPPORTED;
  int64_t M = p.M, N = p.N, rp = (M + MR - 1) / MR, cp = (N + NR - 1) / NR, rg = 1, cg = 1;
  double work = (double)M * (double)N * (double)p.K;
  int threads = vm->threads < 64 ? vm->threads : 64, parallel = threads > 1 && work >= CPU_MM_PACKED_PAR_WORK;
  if (parallel) {
    /* B needs no packing per task, so columns split freely; rows split too when there are few column panels */
    int64_t want = 2 * (int64_t)threads;
    cg = cp < want ? cp : want;
    rg = (want + cg - 1) / cg;
    if (rg > rp) rg = rp;
  }
  int64_t ntasks = rg * cg;
  mm_slots slots = {.n = parallel ? (int)(ntasks < threads ? ntasks : threads) : 1};
  slots.each = (size_t)round_up((MC < M ? MC : round_up(M, MR)) * KC, 16);
  size_t bytes = slots.each * (size_t)slots.n * sizeof(float);
  slots.buf = vm_alloc(vm, bytes);
  if (!slots.buf) return vm_err(vm, GRACE_ENOMEM, "matmul: out of host memory for %zu bytes of packing buffers", bytes);
  for (int i = 0; i < slots.n; i++) atomic_init(&slots.busy[i], 0);
  pk_ctx x = {.pk = pk, .A = (const float *)vm_ptr(a), .M = M, .ars = p.ars, .acs = p.acs, .C = C, .rg = rg, .cg = cg,
              .rp = rp, .cp = cp, .slots = &slots, .ks = pick_kernels(), .epi = epi, .ectx = ectx};
  if (parallel) vm_parallel_for(vm, ntasks, 1, pk_tasks, &x);
  else pk_tasks(&x, 0, ntasks);
  vm_free(vm, slots.buf, bytes);
  return GRACE_OK;
}
