/* cpu_reduce_math.h: the float32 inner loops shared by the reductions, softmax and the norms: a branch-free
 * expf the compiler can vectorize, and sums/maxima written with many independent accumulators so that they
 * vectorize without -ffast-math (the compiler may not reassociate a single running sum) and stay accurate. */
#ifndef GRACE_CPU_REDUCE_MATH_H
#define GRACE_CPU_REDUCE_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Compute-bound row kernels (softmax's exp) get an AVX2+FMA clone next to the baseline SSE2 one, picked at
 * load time by the CPU (GCC's function multiversioning): twice the exp throughput where AVX2 exists, and the
 * binary still runs everywhere. Memory-bound loops (sums) gain nothing from it and stay single. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define RM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define RM_CLONES
#endif

/* Elements summed in float before the partial goes into a double: bounds the float rounding error to a
 * short run, so million-element sums are accurate to ~1e-7 relative while the loop stays float-wide. */
#define RM_SPAN 1024

/* expf within ~1 ulp: Cody-Waite reduction x = n ln2 + r, Cephes' degree-6 polynomial for e^r, and 2^n built
 * from exponent bits in two halves so n can reach 128 (exp(88.7)) and -150 (subnormal results) without
 * overflowing the exponent field. Rounding to n uses the 1.5*2^23 trick instead of a float->int conversion,
 * which keeps NaN inputs well defined (they propagate through the polynomial). */
static inline float rm_expf(float x) {
  const float hi = 88.72283935546875f, lo = -103.972084045410f;
  float xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  float t = xc * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  uint32_t tb;
  memcpy(&tb, &t, 4);
  int32_t ni = (int32_t)(tb - 0x4b400000u);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t h1 = ni >> 1, h2 = ni - h1;
  uint32_t b1 = (uint32_t)(h1 + 127) << 23, b2 = (uint32_t)(h2 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, 4);
  memcpy(&s2, &b2, 4);
  y = y * s1 * s2;
  y = x < lo ? 0.0f : y;
  y = x > hi ? INFINITY : y;
  return y;
}

/* Sum of x[0..n) (float32) as a double: 16 float lanes per RM_SPAN run, runs added in double. */
static inline double rm_sum_f32(const float *x, int64_t n) {
  double tot = 0;
  if (n < 16) {   /* short rows (many small reductions): skip the lane setup */
    for (int64_t i = 0; i < n; i++) tot += x[i];
    return tot;
  }
  while (n > 0) {
    int64_t m = n < RM_SPAN ? n : RM_SPAN, i = 0;
    float a[16] = {0};
    for (; i + 16 <= m; i += 16)
      for (int k = 0; k < 16; k++) a[k] += x[i + k];
    double part = 0;
    for (; i < m; i++) part += x[i];
    for (int k = 0; k < 16; k++) part += a[k];
    tot += part;
    x += m;
    n -= m;
  }
  return tot;
}

/* Sum of (x - c)^2 (float32) as a double, as rm_sum_f32. */
static inline double rm_sqdev_f32(const float *x, int64_t n, float c) {
  double tot = 0;
  while (n > 0) {
    int64_t m = n < RM_SPAN ? n : RM_SPAN, i = 0;
    float a[16] = {0};
    for (; i + 16 <= m; i += 16)
      for (int k = 0; k < 16; k++) { float d = x[i + k] - c; a[k] += d * d; }
    double part = 0;
    for (; i < m; i++) { double d = (double)x[i] - c; part += d * d; }
    for (int k = 0; k < 16; k++) part += a[k];
    tot += part;
    x += m;
    n -= m;
  }
  return tot;
}

/* Double-precision sums, 8 lanes per run. */
static inline double rm_sum_f64(const double *x, int64_t n) {
  double tot = 0;
  while (n > 0) {
    int64_t m = n < RM_SPAN ? n : RM_SPAN, i = 0;
    double a[8] = {0};
    for (; i + 8 <= m; i += 8)
      for (int k = 0; k < 8; k++) a[k] += x[i + k];
    double part = 0;
    for (; i < m; i++) part += x[i];
    for (int k = 0; k < 8; k++) part += a[k];
    tot += part;
    x += m;
    n -= m;
  }
  return tot;
}

static inline double rm_sqdev_f64(const double *x, int64_t n, double c) {
  double tot = 0;
  while (n > 0) {
    int64_t m = n < RM_SPAN ? n : RM_SPAN, i = 0;
    double a[8] = {0};
    for (; i + 8 <= m; i += 8)
      for (int k = 0; k < 8; k++) { double d = x[i + k] - c; a[k] += d * d; }
    double part = 0;
    for (; i < m; i++) { double d = x[i] - c; part += d * d; }
    for (int k = 0; k < 8; k++) part += a[k];
    tot += part;
    x += m;
    n -= m;
  }
  return tot;
}

/* Max (want_max) or min of x[0..n), n >= 1; NaN if any element is NaN (NaN wins, as PyTorch). Written with
 * GCC vector extensions: the compiler does not if-convert a float select whose condition includes a NaN
 * test, while "take v where v beats a or v is NaN" as mask arithmetic is plain compare/and/or vector code,
 * NaN sticky per lane. */
typedef float rm_v4f __attribute__((vector_size(16)));
typedef int32_t rm_v4i __attribute__((vector_size(16)));
typedef double rm_v2d __attribute__((vector_size(16)));
typedef int64_t rm_v2l __attribute__((vector_size(16)));

static inline float rm_best_f32(const float *x, int64_t n, int want_max) {
  rm_v4f a[4];
  int64_t i = 0;
  for (int k = 0; k < 4; k++) a[k] = (rm_v4f){x[0], x[0], x[0], x[0]};
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 4; k++) {
      rm_v4f v;
      memcpy(&v, x + i + 4 * k, sizeof v);
      rm_v4i take = (want_max ? v > a[k] : v < a[k]) | (v != v);
      a[k] = (rm_v4f)(((rm_v4i)v & take) | ((rm_v4i)a[k] & ~take));
    }
  float r = x[0];
  for (int k = 0; k < 16; k++) { float v = a[k / 4][k % 4]; r = ((want_max ? v > r : v < r) || v != v) ? v : r; }
  for (; i < n; i++) { float v = x[i]; r = ((want_max ? v > r : v < r) || v != v) ? v : r; }
  return r;
}

static inline double rm_best_f64(const double *x, int64_t n, int want_max) {
  rm_v2d a[4];
  int64_t i = 0;
  for (int k = 0; k < 4; k++) a[k] = (rm_v2d){x[0], x[0]};
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 4; k++) {
      rm_v2d v;
      memcpy(&v, x + i + 2 * k, sizeof v);
      rm_v2l take = (want_max ? v > a[k] : v < a[k]) | (v != v);
      a[k] = (rm_v2d)(((rm_v2l)v & take) | ((rm_v2l)a[k] & ~take));
    }
  double r = x[0];
  for (int k = 0; k < 8; k++) { double v = a[k / 2][k % 2]; r = ((want_max ? v > r : v < r) || v != v) ? v : r; }
  for (; i < n; i++) { double v = x[i]; r = ((want_max ? v > r : v < r) || v != v) ? v : r; }
  return r;
}

#endif
