/* cpu_pointwise.c: the CPU backend's pointwise ops (unary, binary, compare, ternary), casts, copies and fills.
 * Each op's scalar expression per compute type is its row of ir/ir_pointwise.h, the kernels generated from it
 * below; the engine runs blocks of elements: gather each input's block into a compute-type buffer (honouring
 * strides and broadcasting), run the op's loop over the buffers (written so gcc vectorizes it), store the block.
 * Inputs already laid out like the output in the compute type are read in place, with no gather. */
#include <math.h>
#include <stdatomic.h>
#include "cpu/cpu_fused.h"
#include "cpu/cpu_kernels.h"
#include "ir/ir.h"
#include "ir/ir_check.h"
#include "cpu/cpu_pointwise_math.h"
#include "ir/ir_pointwise.h"

enum {
  PW_BLOCK = 512,       /* elements per gathered block: the buffers stay in L1 */
  PW_GRAIN = 32768,     /* elements per thread chunk at least */
  PW_MAXOP = 4          /* output + 3 inputs */
};

/* Buffer kinds, the compute types: float32 (also for float16/bfloat16), float64, int64 (all integers and
 * bool), and b8, a 0/1 byte for truth values (conditions, masks, logical ops, compare results). */
typedef enum { K_F32, K_F64, K_I64, K_B8 } pw_kind;
static const size_t kind_size[] = {4, 8, 8, 1};
static const grace_dtype kind_dtype[] = {GRACE_FLOAT32, GRACE_FLOAT64, GRACE_INT64, GRACE_BOOL};

enum { PW_ERR_DIVZERO = 1, PW_ERR_NEGPOW = 2 };

typedef struct pw_args {
  double lo, hi;        /* clamp bounds for the float kinds (-inf/inf when absent) */
  int64_t ilo, ihi;     /* clamp bounds for int64 */
  int flag;             /* gelu: tanh approximation */
  atomic_int err;       /* PW_ERR_* raised by integer kernels (any thread) */
} pw_args;

typedef void (*pw_kernel)(int64_t n, const void *const *in, void *out, pw_args *p);

/* ---- scalar helpers the table's CPU columns call ---- */
static inline int64_t pw_irem(int64_t a, int64_t b, int *bad) {
  if (b == 0) { *bad = PW_ERR_DIVZERO; return 0; }
  if (b == -1) return 0;   /* INT64_MIN % -1 traps on x86 */
  int64_t r = a % b;
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
static inline float pw_remf(float a, float b) {
  float r = fmodf(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
static inline double pw_rem(double a, double b) {
  double r = fmod(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
/* Exact integer power by repeated squaring, wrapping modulo 2^64 (stores then wrap to the dtype). */
static inline int64_t pw_ipow(int64_t a, int64_t b, int *bad) {
  if (b < 0) { *bad = PW_ERR_NEGPOW; return 0; }
  uint64_t r = 1, x = (uint64_t)a;
  while (b) {
    if (b & 1) r *= x;
    x *= x;
    b >>= 1;
  }
  return (int64_t)r;
}
/* min first, then max: with lo > hi everything becomes hi, as PyTorch; NaN passes through. */
static inline float pw_clampf(float x, float lo, float hi) { float t = x < lo ? lo : x; return t > hi ? hi : t; }
static inline double pw_clamp(double x, double lo, double hi) { double t = x < lo ? lo : x; return t > hi ? hi : t; }
static inline int64_t pw_iclamp(int64_t x, int64_t lo, int64_t hi) { int64_t t = x < lo ? lo : x; return t > hi ? hi : t; }
#define PW_INEG(x) ((int64_t)(0 - (uint64_t)(x)))
#define PW_IWRAP(op, a, b) ((int64_t)((uint64_t)(a) op (uint64_t)(b)))

/* ---- kernels generated from the table ---- */
/* The math kernels are compute bound: on x86-64 gcc also builds AVX2 and AVX-512 copies, picked at load
 * time by the CPU (results are the same: ISO C mode does not contract a*b+c into an FMA). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define PW_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PW_SIMD_CLONES
#endif

#define PW_LOCALS(T) \
  const T lo = (T)p->lo, hi = (T)p->hi; const int flag = p->flag; int bad = 0; \
  (void)lo; (void)hi; (void)flag;
#define PW_LOCALS_I64 \
  const int64_t lo = p->ilo, hi = p->ihi; const int flag = p->flag; int bad = 0; \
  (void)lo; (void)hi; (void)flag;
#define PW_EPILOGUE if (bad) atomic_store(&p->err, bad);

#define PW_DEF_UNARY(NAME, T, LOCALS, EXPR) \
  static void NAME(int64_t n, const void *const *in, void *out, pw_args *p) { \
    const T *restrict xs = in[0]; T *restrict o = out; LOCALS \
    for (int64_t i = 0; i < n; i++) { T x = xs[i]; o[i] = (EXPR); } \
    PW_EPILOGUE }
#define PW_DEF_BINARY(NAME, T, OT, LOCALS, EXPR) \
  static void NAME(int64_t n, const void *const *in, void *out, pw_args *p) { \
    const T *restrict as = in[0], *restrict bs = in[1]; OT *restrict o = out; LOCALS \
    for (int64_t i = 0; i < n; i++) { T a = as[i], b = bs[i]; (void)a; (void)b; o[i] = (OT)(EXPR); } \
    PW_EPILOGUE }

#define PW_GEN_UNARY_SAME(OP, EF, ED, EI) \
  PW_DEF_UNARY(k_##OP##_f32, float, PW_LOCALS(float), EF) \
  PW_DEF_UNARY(k_##OP##_f64, double, PW_LOCALS(double), ED) \
  PW_DEF_UNARY(k_##OP##_i64, int64_t, PW_LOCALS_I64, EI)
/* The float math kernels read flag (gelu's variant) as a constant in two copies of the loop, so each
 * copy vectorizes on its own. */
#define PW_DEF_UNARY_FLAG(NAME, T, EXPR) \
  PW_SIMD_CLONES static void NAME(int64_t n, const void *const *in, void *out, pw_args *p) { \
    const T *restrict xs = in[0]; T *restrict o = out; \
    if (p->flag) { const int flag = 1; (void)flag; for (int64_t i = 0; i < n; i++) { T x = xs[i]; o[i] = (EXPR); } } \
    else { const int flag = 0; (void)flag; for (int64_t i = 0; i < n; i++) { T x = xs[i]; o[i] = (EXPR); } } }
#define PW_GEN_UNARY_FLOAT(OP, EF, ED, EI) \
  PW_DEF_UNARY_FLAG(k_##OP##_f32, float, EF) \
  PW_DEF_UNARY_FLAG(k_##OP##_f64, double, ED)
#define PW_GEN_UNARY_LOGIC(OP, EF, ED, EI) PW_DEF_UNARY(k_##OP##_b8, uint8_t, PW_LOCALS_I64, EI)
#define PW_GEN_BINARY_PROMOTE(OP, EF, ED, EI) \
  PW_DEF_BINARY(k_##OP##_f32, float, float, PW_LOCALS(float), EF) \
  PW_DEF_BINARY(k_##OP##_f64, double, double, PW_LOCALS(double), ED) \
  PW_DEF_BINARY(k_##OP##_i64, int64_t, int64_t, PW_LOCALS_I64, EI)
#define PW_GEN_BINARY_DIV PW_GEN_BINARY_PROMOTE
#define PW_GEN_BINARY_COMPARE(OP, EF, ED, EI) \
  PW_DEF_BINARY(k_##OP##_f32, float, uint8_t, PW_LOCALS(float), EF) \
  PW_DEF_BINARY(k_##OP##_f64, double, uint8_t, PW_LOCALS(double), ED) \
  PW_DEF_BINARY(k_##OP##_i64, int64_t, uint8_t, PW_LOCALS_I64, EI)
#define PW_GEN_BINARY_LOGIC(OP, EF, ED, EI) PW_DEF_BINARY(k_##OP##_b8, uint8_t, uint8_t, PW_LOCALS_I64, EI)

/* The CPU columns of ir/ir_pointwise.h, one set of kernels per row by its rule. */
#define PW_GEN_U(OP, RULE, EF, ED, EI, ...) PW_GEN_UNARY_##RULE(GRACE_OP_##OP, EF, ED, EI)
#define PW_GEN_B(OP, RULE, EF, ED, EI, ...) PW_GEN_BINARY_##RULE(GRACE_OP_##OP, EF, ED, EI)
GRACE_PW_UNARY(PW_GEN_U)
GRACE_PW_BINARY(PW_GEN_B)

/* where(cond, a, b) and masked_fill(x, mask, value): truth bytes select between two values (both loaded
 * first, so the select vectorizes). */
#define PW_DEF_SELECT(T, SUF) \
  static void k_where_##SUF(int64_t n, const void *const *in, void *out, pw_args *p) { \
    const uint8_t *restrict c = in[0]; const T *restrict a = in[1], *restrict b = in[2]; T *restrict o = out; \
    (void)p; for (int64_t i = 0; i < n; i++) { T av = a[i], bv = b[i]; o[i] = c[i] ? av : bv; } } \
  static void k_masked_fill_##SUF(int64_t n, const void *const *in, void *out, pw_args *p) { \
    const T *restrict x = in[0], *restrict v = in[2]; const uint8_t *restrict m = in[1]; T *restrict o = out; \
    (void)p; for (int64_t i = 0; i < n; i++) { T xv = x[i], vv = v[i]; o[i] = m[i] ? vv : xv; } }
PW_DEF_SELECT(float, f32)
PW_DEF_SELECT(double, f64)
PW_DEF_SELECT(int64_t, i64)

/* Kernels by op and by the kind of their (value) inputs. */
#define PW_ROW_SAME(OP) [OP] = {k_##OP##_f32, k_##OP##_f64, k_##OP##_i64, NULL},
#define PW_ROW_PROMOTE PW_ROW_SAME
#define PW_ROW_DIV PW_ROW_SAME
#define PW_ROW_COMPARE PW_ROW_SAME
#define PW_ROW_FLOAT(OP) [OP] = {k_##OP##_f32, k_##OP##_f64, NULL, NULL},
#define PW_ROW_LOGIC(OP) [OP] = {NULL, NULL, NULL, k_##OP##_b8},
#define PW_ROW(OP, RULE, ...) PW_ROW_##RULE(GRACE_OP_##OP)
static const pw_kernel pw_kernels[GRACE_NOPS][4] = {
  GRACE_PW_UNARY(PW_ROW)
  GRACE_PW_BINARY(PW_ROW)
  [GRACE_OP_WHERE] = {k_where_f32, k_where_f64, k_where_i64, NULL},
  [GRACE_OP_MASKED_FILL] = {k_masked_fill_f32, k_masked_fill_f64, k_masked_fill_i64, NULL},
};

/* ---- loads and stores between a dtype (strided) and a kind buffer (contiguous) ---- */
#define PW_LOAD(IT, OT, CONV) do { \
    const IT *s = (const IT *)p; OT *o = out; \
    if (stride == 1) for (int64_t i = 0; i < n; i++) { IT v = s[i]; o[i] = (CONV); } \
    else for (int64_t i = 0; i < n; i++) { IT v = s[i * stride]; o[i] = (CONV); } \
  } while (0)
/* INT converts an integer load: a value for arithmetic kinds, a truth (v != 0) for truth bytes. */
#define PW_LOAD_ALL(OT, F16, BF16, FLT, INT) \
  switch (dt) { \
  case GRACE_FLOAT32: PW_LOAD(float, OT, FLT); break; \
  case GRACE_FLOAT64: PW_LOAD(double, OT, FLT); break; \
  case GRACE_FLOAT16: PW_LOAD(uint16_t, OT, F16); break; \
  case GRACE_BFLOAT16: PW_LOAD(uint16_t, OT, BF16); break; \
  case GRACE_INT32: PW_LOAD(int32_t, OT, INT); break; \
  case GRACE_INT64: PW_LOAD(int64_t, OT, INT); break; \
  case GRACE_UINT8: PW_LOAD(uint8_t, OT, INT); break; \
  case GRACE_BOOL: PW_LOAD(uint8_t, OT, (OT)(v != 0)); break; \
  default: break; \
  }

/* Float to integer as vm_load_i64: truncation toward zero, NaN to 0, saturating. */
static inline int64_t pw_f2i(double v) {
  return v != v ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v;
}

static void pw_load(pw_kind k, grace_dtype dt, const char *p, int64_t stride, int64_t n, void *out) {
  switch (k) {
  case K_F32: PW_LOAD_ALL(float, vm_half_to_float(v), vm_bf16_to_float(v), (float)v, (float)v) break;
  case K_F64: PW_LOAD_ALL(double, vm_half_to_float(v), vm_bf16_to_float(v), (double)v, (double)v) break;
  case K_I64: PW_LOAD_ALL(int64_t, pw_f2i(vm_half_to_float(v)), pw_f2i(vm_bf16_to_float(v)), pw_f2i(v), (int64_t)v) break;
  case K_B8: PW_LOAD_ALL(uint8_t, (v & 0x7fff) != 0, (v & 0x7fff) != 0, v != 0, (uint8_t)(v != 0)) break;
  }
}

/* Rounds a loaded operand to the dtype the op computes in, where that is narrower than the kind
 * (an int64 number added to a uint8 tensor wraps to uint8 first, a float64 one to float16 rounds). */
static void pw_narrow(pw_kind k, grace_dtype cdt, void *buf, int64_t n) {
  if (k == K_F32) {
    float *f = buf;
    if (cdt == GRACE_FLOAT16) for (int64_t i = 0; i < n; i++) f[i] = vm_half_to_float(vm_float_to_half(f[i]));
    else if (cdt == GRACE_BFLOAT16) for (int64_t i = 0; i < n; i++) f[i] = vm_bf16_to_float(vm_float_to_bf16(f[i]));
  } else if (k == K_I64) {
    int64_t *v = buf;
    if (cdt == GRACE_INT32) for (int64_t i = 0; i < n; i++) v[i] = (int32_t)(uint32_t)(uint64_t)v[i];
    else if (cdt == GRACE_UINT8) for (int64_t i = 0; i < n; i++) v[i] = (uint8_t)(uint64_t)v[i];
    else if (cdt == GRACE_BOOL) for (int64_t i = 0; i < n; i++) v[i] = v[i] != 0;
  }
}

#define PW_STORE(OT, IT, CONV) do { \
    OT *d = (OT *)p; const IT *s = in; \
    if (stride == 1) for (int64_t i = 0; i < n; i++) { IT v = s[i]; d[i] = (CONV); } \
    else for (int64_t i = 0; i < n; i++) { IT v = s[i]; d[i * stride] = (CONV); } \
  } while (0)
/* Float to integer dtypes go through vm_store_f64 (truncation, saturation) element by element. */
#define PW_STORE_F2I(IT) do { \
    const IT *s = in; size_t es = grace_dtype_size(dt); \
    for (int64_t i = 0; i < n; i++) vm_store_f64(dt, p + i * stride * (int64_t)es, (double)s[i]); \
  } while (0)

static void pw_store(pw_kind k, grace_dtype dt, char *p, int64_t stride, int64_t n, const void *in) {
  switch (k) {
  case K_F32:
    switch (dt) {
    case GRACE_FLOAT32: PW_STORE(float, float, v); break;
    case GRACE_FLOAT64: PW_STORE(double, float, v); break;
    case GRACE_FLOAT16: PW_STORE(uint16_t, float, vm_float_to_half(v)); break;
    case GRACE_BFLOAT16: PW_STORE(uint16_t, float, vm_float_to_bf16(v)); break;
    case GRACE_BOOL: PW_STORE(uint8_t, float, v != 0); break;
    default: PW_STORE_F2I(float); break;
    }
    break;
  case K_F64:
    switch (dt) {
    case GRACE_FLOAT32: PW_STORE(float, double, (float)v); break;
    case GRACE_FLOAT64: PW_STORE(double, double, v); break;
    case GRACE_FLOAT16: PW_STORE(uint16_t, double, vm_float_to_half((float)v)); break;
    case GRACE_BFLOAT16: PW_STORE(uint16_t, double, vm_float_to_bf16((float)v)); break;
    case GRACE_BOOL: PW_STORE(uint8_t, double, v != 0); break;
    default: PW_STORE_F2I(double); break;
    }
    break;
  case K_I64: case K_B8:
#define PW_STORE_INT(IT) \
    switch (dt) { \
    case GRACE_FLOAT32: PW_STORE(float, IT, (float)v); break; \
    case GRACE_FLOAT64: PW_STORE(double, IT, (double)v); break; \
    case GRACE_FLOAT16: PW_STORE(uint16_t, IT, vm_float_to_half((float)v)); break; \
    case GRACE_BFLOAT16: PW_STORE(uint16_t, IT, vm_float_to_bf16((float)v)); break; \
    case GRACE_INT32: PW_STORE(int32_t, IT, (int32_t)(uint32_t)(uint64_t)v); break; \
    case GRACE_INT64: PW_STORE(int64_t, IT, (int64_t)v); break; \
    case GRACE_UINT8: PW_STORE(uint8_t, IT, (uint8_t)(uint64_t)v); break; \
    case GRACE_BOOL: PW_STORE(uint8_t, IT, v != 0); break; \
    default: break; \
    }
    if (k == K_I64) { PW_STORE_INT(int64_t) } else { PW_STORE_INT(uint8_t) }
#undef PW_STORE_INT
    break;
  }
}

/* ---- iteration over a broadcast shape ---- */
/* Operand 0 is the output. Dims are coalesced: size-1 dims dropped, neighbours merged where every
 * operand steps through them as through one dim. At least one dim remains. */
typedef struct pw_iter {
  int ndim, nop;
  int64_t numel;
  int64_t sizes[GRACE_MAX_DIMS];
  int64_t st[PW_MAXOP][GRACE_MAX_DIMS];   /* element strides, 0 on broadcast dims */
  char *ptr[PW_MAXOP];
  grace_dtype dt[PW_MAXOP];
} pw_iter;

static void pw_iter_coalesce(pw_iter *it) {
  int nd = 0;
  for (int d = 0; d < it->ndim; d++) {
    if (it->sizes[d] == 1) continue;
    it->sizes[nd] = it->sizes[d];
    for (int k = 0; k < it->nop; k++) it->st[k][nd] = it->st[k][d];
    nd++;
  }
  if (nd == 0) {
    it->sizes[0] = 1;
    for (int k = 0; k < it->nop; k++) it->st[k][0] = 0;
    it->ndim = 1;
    return;
  }
  int o = 0;
  for (int d = 1; d < nd; d++) {
    int merge = 1;
    for (int k = 0; k < it->nop; k++) merge &= it->st[k][o] == it->st[k][d] * it->sizes[d];
    if (merge) it->sizes[o] *= it->sizes[d];
    else it->sizes[++o] = it->sizes[d];
    for (int k = 0; k < it->nop; k++) it->st[k][o] = it->st[k][d];
  }
  it->ndim = o + 1;
}

/* Builds the iteration of out (any strides) over its shape, inputs broadcast to it. */
static void pw_iter_init(pw_iter *it, grace_tensor *out, int nin, grace_tensor *const *in) {
  it->ndim = out->ndim;
  it->nop = 1 + nin;
  it->numel = vm_numel(out->ndim, out->sizes);
  for (int d = 0; d < out->ndim; d++) { it->sizes[d] = out->sizes[d]; it->st[0][d] = out->strides[d]; }
  it->ptr[0] = vm_ptr(out);
  it->dt[0] = out->dtype;
  for (int k = 0; k < nin; k++) {
    vm_broadcast_strides(in[k], out->ndim, out->sizes, it->st[k + 1]);
    it->ptr[k + 1] = vm_ptr(in[k]);
    it->dt[k + 1] = in[k]->dtype;
  }
  pw_iter_coalesce(it);
}

/* Operand k's element offset at flat index s, and its multi-index. */
static int64_t pw_locate(const pw_iter *it, int k, int64_t s, int64_t *idx) {
  int64_t off = 0;
  for (int d = it->ndim - 1; d >= 0; d--) {
    idx[d] = s % it->sizes[d];
    s /= it->sizes[d];
    off += idx[d] * it->st[k][d];
  }
  return off;
}

/* Steps the multi-index past the end of the inner row it just finished; returns the new offset. */
static inline int64_t pw_carry(const pw_iter *it, int k, int64_t *idx, int64_t off) {
  for (int d = it->ndim - 1; d > 0 && idx[d] >= it->sizes[d]; d--) {
    off -= idx[d] * it->st[k][d];
    idx[d] = 0;
    idx[d - 1]++;
    off += it->st[k][d - 1];
  }
  return off;
}

/* Moves elements [s, s+n) of operand k between the tensor and a kind buffer (load or store). */
static void pw_transfer(const pw_iter *it, int k, pw_kind kind, int64_t s, int64_t n, void *buf, int store) {
  int64_t idx[GRACE_MAX_DIMS];
  int64_t off = pw_locate(it, k, s, idx);
  int last = it->ndim - 1;
  int64_t inner = it->st[k][last];
  size_t es = grace_dtype_size(it->dt[k]), ks = kind_size[kind];
  for (int64_t done = 0; done < n;) {
    int64_t run = it->sizes[last] - idx[last];
    if (run > n - done) run = n - done;
    char *p = it->ptr[k] + off * (int64_t)es;
    char *b = (char *)buf + done * (int64_t)ks;
    if (store) pw_store(kind, it->dt[k], p, inner, run, b);
    else pw_load(kind, it->dt[k], p, inner, run, b);
    done += run;
    idx[last] += run;
    off += run * inner;
    off = pw_carry(it, k, idx, off);
  }
}

/* Whether operand k's offsets equal the flat index (it can be read or written in place). */
static int pw_flat(const pw_iter *it, int k) {
  int64_t s = 1;
  for (int d = it->ndim - 1; d >= 0; d--) {
    if (it->st[k][d] != s) return 0;
    s *= it->sizes[d];
  }
  return 1;
}
static int pw_constant(const pw_iter *it, int k) {
  for (int d = 0; d < it->ndim; d++) if (it->st[k][d] != 0) return 0;
  return 1;
}

/* ---- the block engine ---- */
typedef struct pw_job {
  pw_iter it;
  int nin;
  pw_kind kin[PW_MAXOP - 1], kout;
  grace_dtype cdt;              /* the dtype the op computes in: inputs are first rounded to it */
  pw_kernel fn;                 /* NULL: a conversion copy of input 0 */
  pw_args args;
  int direct[PW_MAXOP];         /* read or written in place */
  int constant[PW_MAXOP];       /* one value over the whole iteration: gathered once per chunk */
  int narrow[PW_MAXOP];
} pw_job;

static void pw_splat(pw_kind k, void *buf, int64_t n) {
  size_t ks = kind_size[k];
  for (int64_t i = 1; i < n; i++) memcpy((char *)buf + i * (int64_t)ks, buf, ks);
}

static void pw_chunk(void *ctx, int64_t b, int64_t e) {
  pw_job *j = ctx;
  const pw_iter *it = &j->it;
  _Alignas(64) char bufs[PW_MAXOP][PW_BLOCK * 8];
  const void *in[PW_MAXOP - 1];
  int all_direct = j->direct[0];
  for (int k = 1; k <= j->nin; k++) {
    all_direct &= j->direct[k];
    if (j->constant[k]) {
      pw_transfer(it, k, j->kin[k - 1], 0, 1, bufs[k], 0);
      if (j->narrow[k]) pw_narrow(j->kin[k - 1], j->cdt, bufs[k], 1);
      pw_splat(j->kin[k - 1], bufs[k], PW_BLOCK);
    }
  }
  int64_t blk = all_direct ? e - b : PW_BLOCK;
  size_t es0 = grace_dtype_size(it->dt[0]);
  for (int64_t s = b; s < e; s += blk) {
    int64_t n = e - s < blk ? e - s : blk;
    for (int k = 1; k <= j->nin; k++) {
      pw_kind kk = j->kin[k - 1];
      if (j->direct[k]) in[k - 1] = it->ptr[k] + s * (int64_t)grace_dtype_size(it->dt[k]);
      else {
        if (!j->constant[k]) {
          pw_transfer(it, k, kk, s, n, bufs[k], 0);
          if (j->narrow[k]) pw_narrow(kk, j->cdt, bufs[k], n);
        }
        in[k - 1] = bufs[k];
      }
    }
    void *out = j->direct[0] ? it->ptr[0] + s * (int64_t)es0 : bufs[0];
    if (j->fn) j->fn(n, in, out, &j->args);
    else out = (void *)in[0];
    if (!j->direct[0] || !j->fn) pw_transfer(it, 0, j->kout, s, n, out, 1);
  }
}

/* Runs fn elementwise: out (any strides) from inputs broadcast to its shape, inputs loaded as kin[k]
 * and rounded to cdt, results of kind kout stored converted to out's dtype. */
static grace_status pw_run(grace_vm *vm, const char *name, grace_tensor *out, int nin, grace_tensor *const *in,
                           const pw_kind *kin, pw_kind kout, grace_dtype cdt, pw_kernel fn, const pw_args *args) {
  pw_job job, *j = &job;   /* on this thread's stack: the workers use it only inside vm_parallel_for */
  memset(j, 0, sizeof *j);
  pw_iter_init(&j->it, out, nin, in);
  j->nin = nin;
  j->kout = kout;
  j->cdt = cdt;
  j->fn = fn;
  j->args.lo = args->lo; j->args.hi = args->hi;
  j->args.ilo = args->ilo; j->args.ihi = args->ihi;
  j->args.flag = args->flag;
  atomic_init(&j->args.err, 0);
  j->direct[0] = fn && out->dtype == kind_dtype[kout] && pw_flat(&j->it, 0);
  for (int k = 1; k <= nin; k++) {
    grace_dtype dt = j->it.dt[k];
    j->kin[k - 1] = kin[k - 1];
    j->narrow[k] = kin[k - 1] != K_B8 && dt != cdt;
    j->constant[k] = pw_constant(&j->it, k) && j->it.numel > 1;
    j->direct[k] = !j->constant[k] && dt == kind_dtype[kin[k - 1]] && !j->narrow[k] && pw_flat(&j->it, k);
  }
  vm_parallel_for(vm, j->it.numel, PW_GRAIN, pw_chunk, j);
  int err = atomic_load(&j->args.err);
  if (err == PW_ERR_DIVZERO) return vm_err(vm, GRACE_EARG, "%s: integer division by zero", name);
  if (err == PW_ERR_NEGPOW) return vm_err(vm, GRACE_EARG, "%s: integers to negative integer powers are not allowed", name);
  return GRACE_OK;
}

/* ---- raw copies (same dtype) and fills ---- */
typedef struct { pw_iter it; size_t es; } raw_job;

static void raw_chunk(void *ctx, int64_t b, int64_t e) {
  const raw_job *j = ctx;
  const pw_iter *it = &j->it;
  int64_t di[GRACE_MAX_DIMS], si[GRACE_MAX_DIMS];
  int64_t doff = pw_locate(it, 0, b, di), soff = pw_locate(it, 1, b, si);
  int last = it->ndim - 1;
  int64_t ds = it->st[0][last], ss = it->st[1][last], es = (int64_t)j->es;
  for (int64_t s = b; s < e;) {
    int64_t run = it->sizes[last] - di[last];
    if (run > e - s) run = e - s;
    char *d = it->ptr[0] + doff * es;
    const char *src = it->ptr[1] + soff * es;
    if (ds == 1 && ss == 1) memmove(d, src, (size_t)(run * es));
    else if (ds == 1 && ss == 0) {   /* fills and broadcast rows: a loop gcc vectorizes */
#define RAW_FILL(T) { T v; memcpy(&v, src, sizeof v); for (int64_t i = 0; i < run; i++) ((T *)d)[i] = v; } break;
      switch (es) {
      case 1: RAW_FILL(uint8_t)
      case 2: RAW_FILL(uint16_t)
      case 4: RAW_FILL(uint32_t)
      default: RAW_FILL(uint64_t)
      }
#undef RAW_FILL
    } else {
#define RAW_LOOP(T) for (int64_t i = 0; i < run; i++) ((T *)d)[i * ds] = ((const T *)src)[i * ss]; break;
      switch (es) {
      case 1: RAW_LOOP(uint8_t)
      case 2: RAW_LOOP(uint16_t)
      case 4: RAW_LOOP(uint32_t)
      default: RAW_LOOP(uint64_t)
      }
#undef RAW_LOOP
    }
    s += run;
    di[last] += run; si[last] += run;
    doff = pw_carry(it, 0, di, doff + run * ds);
    soff = pw_carry(it, 1, si, soff + run * ss);
  }
}

/* dst <- src elementwise where both have dst's dtype; src_strides are broadcast ones (0: repeat). */
static void raw_copy(grace_vm *vm, grace_tensor *dst, char *src, const int64_t *src_strides) {
  raw_job job, *j = &job;
  pw_iter *it = &j->it;
  it->ndim = dst->ndim;
  it->nop = 2;
  it->numel = vm_numel(dst->ndim, dst->sizes);
  for (int d = 0; d < dst->ndim; d++) {
    it->sizes[d] = dst->sizes[d];
    it->st[0][d] = dst->strides[d];
    it->st[1][d] = src_strides[d];
  }
  it->ptr[0] = vm_ptr(dst);
  it->ptr[1] = src;
  it->dt[0] = it->dt[1] = dst->dtype;
  pw_iter_coalesce(it);
  j->es = grace_dtype_size(dst->dtype);
  vm_parallel_for(vm, it->numel, PW_GRAIN, raw_chunk, j);
}



/* The kind a conversion copy between two dtypes goes through. */
static pw_kind copy_kind(grace_dtype from, grace_dtype to) {
  if (grace_dtype_is_int(from) && grace_dtype_is_int(to)) return K_I64;
  if (from == GRACE_FLOAT64 || to == GRACE_FLOAT64) return K_F64;
  return K_F32;
}

static grace_status pw_clone(grace_vm *vm, const char *name, grace_tensor *src, grace_tensor **out);

grace_status cpu_copy_into(grace_vm *vm, const char *op, grace_tensor *dst, const grace_tensor *src) {
  int empty, overlap;
  grace_status st = vm_check_copy(vm, op, dst, src, &empty, &overlap);
  if (st != GRACE_OK || empty) return st;
  if (overlap) {   /* read from a copy */
    grace_tensor *tmp = NULL;
    if ((st = pw_clone(vm, op, (grace_tensor *)src, &tmp)) != GRACE_OK) return st;
    st = cpu_copy_into(vm, op, dst, tmp);
    grace_tensor_release(tmp);
    return st;
  }
  if (src->dtype == dst->dtype) {
    int64_t bst[GRACE_MAX_DIMS];
    vm_broadcast_strides(src, dst->ndim, dst->sizes, bst);
    raw_copy(vm, dst, vm_ptr(src), bst);
    return GRACE_OK;
  }
  pw_kind k = copy_kind(src->dtype, dst->dtype);
  pw_args args = {0};
  grace_tensor *s = (grace_tensor *)src;
  return pw_run(vm, op, dst, 1, &s, &k, k, src->dtype, NULL, &args);
}

static grace_status pw_clone(grace_vm *vm, const char *name, grace_tensor *src, grace_tensor **out) {
  grace_tensor *t = vm_tensor_new(vm, name, src->dtype, GRACE_CPU, src->ndim, src->sizes);
  if (!t) return vm->status;
  grace_status st = cpu_copy_into(vm, name, t, src);
  if (st != GRACE_OK) { grace_tensor_release(t); return st; }
  *out = t;
  return GRACE_OK;
}

grace_status cpu_contiguous(grace_vm *vm, const char *op, grace_tensor *src, grace_tensor **out) {
  if (vm_is_contiguous(src)) {
    grace_tensor_retain(src);
    *out = src;
    return GRACE_OK;
  }
  return pw_clone(vm, op, src, out);
}

static grace_status fill(grace_vm *vm, grace_tensor *dst, const grace_attrs *a) {
  grace_status st = vm_check_writable(vm, "fill_", dst);
  if (st != GRACE_OK) return st;
  _Alignas(8) char value[8];
  if (grace_dtype_is_int(dst->dtype) && ((a->exact & 1) || a->a == floor(a->a))) vm_store_i64(dst->dtype, value, vm_attr_int(a, 0));
  else vm_store_f64(dst->dtype, value, a->a);
  int64_t zero[GRACE_MAX_DIMS] = {0};
  if (vm_numel(dst->ndim, dst->sizes) > 0) raw_copy(vm, dst, value, zero);
  vm_bump_version(dst);
  return GRACE_OK;
}

/* ---- the ops ---- */
static pw_kind kind_of(grace_dtype dt) {
  return dt == GRACE_FLOAT64 ? K_F64 : grace_dtype_is_float(dt) ? K_F32 : K_I64;
}

/* Clamp bounds into the kernels' arguments (the checks and the result dtype are ir_infer's). */
static void clamp_setup(const grace_attrs *a, pw_args *args) {
  args->lo = a->has_a ? a->a : -INFINITY;
  args->hi = a->has_b ? a->b : INFINITY;
  args->ilo = !a->has_a ? INT64_MIN : (a->exact & 1) ? a->ia : pw_f2i(a->a);
  args->ihi = !a->has_b ? INT64_MAX : (a->exact & 2) ? a->ib : pw_f2i(a->b);
}

/* The argument checks, result dtype and shape are inference's (vm_infer_tensors), as on the device and in the
 * IR; what is left here is the compute dtype and the kinds of the buffers. */
static grace_status pointwise(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                              grace_tensor **out) {
  const char *name = grace_op_name(op);
  ir_pw_rule rule = ir_pw_rule_of(op);
  pw_args args = {0};
  pw_kind kin[3], kout;
  ir_type ty;
  grace_status st = vm_infer_tensors(vm, op, nin, in, a, 1, &ty);
  if (st != GRACE_OK) return st;
  grace_dtype odt = ty.dtype, cdt = odt;
  args.flag = a->flag;
  if (op == GRACE_OP_CLAMP) clamp_setup(a, &args);
  switch (rule) {
  case IR_PW_SAME: case IR_PW_FLOAT: case IR_PW_PROMOTE: case IR_PW_DIV:
    kin[0] = kin[1] = kout = kind_of(cdt);
    break;
  case IR_PW_LOGIC:
    kin[0] = kin[1] = kout = K_B8;
    break;
  case IR_PW_COMPARE:
    cdt = vm_result_type(2, in);   /* the operands compare in their promoted dtype */
    kin[0] = kin[1] = kind_of(cdt);
    kout = K_B8;
    break;
  case IR_PW_SELECT:   /* the truth operand: where's first, masked_fill's second */
    kin[0] = kin[1] = kin[2] = kout = kind_of(cdt);
    kin[op == GRACE_OP_WHERE ? 0 : 1] = K_B8;
    break;
  default:
    return vm_err(vm, GRACE_EINTERNAL, "%s: not a pointwise op", name);
  }
  pw_kernel fn = pw_kernels[op][nin == 3 ? kin[2] : kin[0]];   /* by the kind of the values */
  if (!fn) return vm_err(vm, GRACE_EINTERNAL, "%s: no CPU kernel for %s", name, grace_dtype_name(cdt));
  grace_tensor *o = vm_tensor_new(vm, name, odt, GRACE_CPU, ty.ndim, ty.sizes);
  if (!o) return vm->status;
  if (vm_numel(ty.ndim, ty.sizes) > 0 && (st = pw_run(vm, name, o, nin, in, kin, kout, cdt, fn, &args)) != GRACE_OK) {
    grace_tensor_release(o);
    return st;
  }
  *out = o;
  return GRACE_OK;
}

grace_status cpu_pointwise_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                               int nout, grace_tensor **out) {
  grace_status st;
  switch (op) {
  case GRACE_OP_COPY_:
    if ((st = cpu_copy_into(vm, "copy_", in[0], in[1])) != GRACE_OK) return st;
    vm_bump_version(in[0]);
    return GRACE_OK;
  case GRACE_OP_FILL_:
    return fill(vm, in[0], a);
  case GRACE_OP_CONTIGUOUS:
    return cpu_contiguous(vm, "contiguous", in[0], out);
  case GRACE_OP_CLONE:
    return pw_clone(vm, "clone", in[0], out);
  case GRACE_OP_CAST: {
    ir_type ty;
    if ((st = vm_infer_tensors(vm, op, 1, in, a, 1, &ty)) != GRACE_OK) return st;   /* infer_unary: the dtype */
    grace_tensor *t = vm_tensor_new(vm, "cast", a->dtype, GRACE_CPU, in[0]->ndim, in[0]->sizes);
    if (!t) return vm->status;
    if ((st = cpu_copy_into(vm, "cast", t, in[0])) != GRACE_OK) { grace_tensor_release(t); return st; }
    *out = t;
    return GRACE_OK;
  }
  default:
    break;
  }
  switch (grace_op_kind(op)) {
  case GRACE_KIND_UNARY: case GRACE_KIND_BINARY: case GRACE_KIND_COMPARE: case GRACE_KIND_TERNARY:
    return pointwise(vm, op, nin, in, a, out);
  default:
    return vm_err(vm, GRACE_EINTERNAL, "%s: not a pointwise op", grace_op_name(op));
  }
}

/* ---- one float32 kernel over contiguous buffers, for the fused executor (cpu_fused.c) ---- */
grace_status cpu_pw_block_f32(grace_op op, const grace_attrs *attrs, int64_t n, const void *const *in, void *out) {
  pw_kernel fn = (unsigned)op < GRACE_NOPS ? pw_kernels[op][K_F32] : NULL;
  if (!fn) return GRACE_EUNSUPPORTED;
  pw_args args = {0};
  if (attrs) args.flag = attrs->flag;
  if (op == GRACE_OP_CLAMP) {   /* the bounds as eager clamp has them */
    if (!attrs || (!attrs->has_a && !attrs->has_b)) return GRACE_EARG;
    clamp_setup(attrs, &args);
  }
  if (n > 0) fn(n, in, out, &args);
  return GRACE_OK;
}
