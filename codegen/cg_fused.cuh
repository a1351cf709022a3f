// cg_fused.cuh: the device helpers of the fused pointwise/row kernels (cg_fused.c), templated over the register
// types. Format: see cg_prelude.cuh.

// Device helpers of this generator, templated over the register types.
//@ fused_helpers
template <typename T> __device__ __forceinline__ T cgf_relu(T x) { return x < (T)0 ? (T)0 : x; }
__device__ __forceinline__ long long cgf_iabs(long long x) { return x < 0 ? (long long)(0ULL - (grace_u64)x) : x; }
template <typename T> __device__ __forceinline__ T cgf_sign(T x) { return x != x ? x : (T)((x > (T)0) - (x < (T)0)); }
template <typename T> __device__ __forceinline__ T cgf_clamp(T x, T lo, T hi) { T t = x < lo ? lo : x; return t > hi ? hi : t; }
template <typename T> __device__ __forceinline__ T cgf_maximum(T a, T b) { return (a > b || a != a) ? a : b; }
template <typename T> __device__ __forceinline__ T cgf_minimum(T a, T b) { return (a < b || a != a) ? a : b; }
__device__ __forceinline__ float cgf_rem(float a, float b) { float r = fmodf(a, b); return r != 0 && ((r < 0) != (b < 0)) ? r + b : r; }
__device__ __forceinline__ double cgf_rem(double a, double b) { double r = fmod(a, b); return r != 0 && ((r < 0) != (b < 0)) ? r + b : r; }
/* integer remainder: the CPU raises an error on a zero divisor; the device gives 0 */
__device__ __forceinline__ long long cgf_rem(long long a, long long b) {
  if (b == 0 || b == -1) return 0; long long r = a % b; return r != 0 && ((r < 0) != (b < 0)) ? r + b : r; }
__device__ __forceinline__ long long cgf_ipow(long long a, long long b) {
  if (b < 0) return 0; grace_u64 r = 1, x = (grace_u64)a; while (b) { if (b & 1) r *= x; x *= x; b >>= 1; } return (long long)r; }
__device__ __forceinline__ float cgf_sigmoid(float x) { float e = expf(x < 0 ? x : -x), s = 1.0f / (1.0f + e); return x < 0 ? e * s : s; }
__device__ __forceinline__ double cgf_sigmoid(double x) { return x < 0 ? exp(x) / (1.0 + exp(x)) : 1.0 / (1.0 + exp(-x)); }
__device__ __forceinline__ float cgf_silu(float x) { return x * cgf_sigmoid(x); }
__device__ __forceinline__ double cgf_silu(double x) { return x / (1.0 + exp(-x)); }
__device__ __forceinline__ float cgf_gelu(float x) { return 0.5f * x * erfcf(-x * 0.70710678118654752f); }
__device__ __forceinline__ double cgf_gelu(double x) { return 0.5 * x * erfc(-x * 0.70710678118654752); }
__device__ __forceinline__ float cgf_gelu_tanh(float x) { return x * cgf_sigmoid(1.5957691216057308f * (x + 0.044715f * x * x * x)); }
__device__ __forceinline__ double cgf_gelu_tanh(double x) { return x / (1.0 + exp(-1.5957691216057308 * (x + 0.044715 * x * x * x))); }
/* max/min with positions: NaN wins, ties keep the first position; m < 0 position: empty */
template <typename T> __device__ __forceinline__ bool cgf_better(T v, long long i, T m, long long mi, bool wmax) {
  if (i < 0) return false; if (mi < 0) return true;
  bool vn = v != v, mn = m != m;
  if (vn || mn) return vn && (!mn || i < mi);
  return wmax ? (v > m || (v == m && i < mi)) : (v < m || (v == m && i < mi)); }
