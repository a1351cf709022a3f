/* cg_ops.c: the CUDA source of the single-op kernels (see cg_ops.h for each template's parameter words).
 * Every dtype difference lives in a few "role" helpers emitted per kernel (R_t, R_ld, R_st, ...) that load
 * and store exactly as base/base.h's vm_load_* / vm_store_* do, so one body text serves every dtype. Float sums
 * that the CPU rounds step by step use __fadd_rn-style intrinsics so NVRTC cannot contract them into FMAs
 * the CPU does not use (random normals, linspace, norms would otherwise differ in the last bit). The larger
 * fixed pieces of text are in cg_ops.cuh and cg_ops_attn.cuh. */
#include <stdio.h>
#include <string.h>
#include "codegen/cg_ops.h"
#include "codegen/cg_templates.h"

static const char *tmpl_names[CGO_NTMPL] = {"copy", "fill", "tri", "icheck", "imove", "create", "cumsum",
                                            "softmax", "norm", "sort", "attn", "cat", "nz", "iadd"};
static const char *dt_short[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"};

const char *cg_ops_tmpl_name(cgo_tmpl t) { return (unsigned)t < CGO_NTMPL ? tmpl_names[t] : "?"; }

int cg_ops_nptr(cgo_tmpl t) {
  switch (t) {
  case CGO_FILL: case CGO_TRI: case CGO_CREATE: return 1;
  case CGO_COPY: case CGO_ICHECK: case CGO_CUMSUM: case CGO_SOFTMAX: return 2;
  case CGO_IMOVE: case CGO_SORT: case CGO_IADD: return 3;
  case CGO_NORM: case CGO_NZ: return 4;
  case CGO_ATTN: return 6;
  case CGO_CAT: return 1 + CGO_CAT_MAX;
  default: return 0;
  }
}


static int is_float_dt(grace_dtype dt) {
  return dt == GRACE_FLOAT32 || dt == GRACE_FLOAT64 || dt == GRACE_FLOAT16 || dt == GRACE_BFLOAT16;
}

/* Loads and stores of one role R (a pointer of the kernel) with dtype dt, as vm_load_f64/i64, vm_store_f64/i64. */
static void emit_role(cg_buf *b, const char *R, grace_dtype dt) {
  cg_printf(b, "typedef %s %s_t;\n", cg_ctype(dt), R);
  const char *ld, *ldf, *st, *stf;
  switch (dt) {
  case GRACE_FLOAT32: ld = "(double)*p"; ldf = "*p"; st = "*p = (float)v;"; stf = "*p = v;"; break;
  case GRACE_FLOAT64: ld = "*p"; ldf = "(float)*p"; st = "*p = v;"; stf = "*p = (double)v;"; break;
  case GRACE_FLOAT16: ld = "(double)cgo_h2f(*p)"; ldf = "cgo_h2f(*p)"; st = "*p = cgo_f2h((float)v);";
    stf = "*p = cgo_f2h(v);"; break;
  case GRACE_BFLOAT16: ld = "(double)cgo_b2f(*p)"; ldf = "cgo_b2f(*p)"; st = "*p = cgo_f2b((float)v);";
    stf = "*p = cgo_f2b(v);"; break;
  case GRACE_INT32: ld = "(double)*p"; ldf = "(float)*p";
    st = "*p = v != v ? 0 : v >= 2147483647.0 ? 2147483647 : v <= -2147483648.0 ? (-2147483647 - 1) : (int)v;";
    stf = NULL; break;
  case GRACE_INT64: ld = "(double)*p"; ldf = "(float)*p"; st = "*p = cgo_d2ll(v);"; stf = NULL; break;
  case GRACE_UINT8: ld = "(double)*p"; ldf = "(float)*p";
    st = "*p = (unsigned char)(long long)(v != v ? 0.0 : v >= 9.2e18 || v <= -9.2e18 ? 0.0 : v);"; stf = NULL; break;
  default: ld = "(*p != 0 ? 1.0 : 0.0)"; ldf = "(*p != 0 ? 1.0f : 0.0f)"; st = "*p = v != 0;"; stf = NULL; break;
  }
  cg_printf(b, "__device__ __forceinline__ double %s_ld(const %s_t *p) { return %s; }\n", R, R, ld);
  cg_printf(b, "__device__ __forceinline__ float %s_ldf(const %s_t *p) { return %s; }\n", R, R, ldf);
  if (is_float_dt(dt)) cg_printf(b, "__device__ __forceinline__ long long %s_ldi(const %s_t *p) { return cgo_d2ll(%s_ld(p)); }\n", R, R, R);
  else if (dt == GRACE_BOOL) cg_printf(b, "__device__ __forceinline__ long long %s_ldi(const %s_t *p) { return *p != 0; }\n", R, R);
  else cg_printf(b, "__device__ __forceinline__ long long %s_ldi(const %s_t *p) { return (long long)*p; }\n", R, R);
  cg_printf(b, "__device__ __forceinline__ void %s_st(%s_t *p, double v) { %s }\n", R, R, st);
  if (stf) cg_printf(b, "__device__ __forceinline__ void %s_stf(%s_t *p, float v) { %s }\n", R, R, stf);
  else cg_printf(b, "__device__ __forceinline__ void %s_stf(%s_t *p, float v) { %s_st(p, (double)v); }\n", R, R, R);
  const char *sti;
  switch (dt) {
  case GRACE_INT32: sti = "*p = (int)(unsigned int)(cgo_u64)v;"; break;
  case GRACE_INT64: sti = "*p = v;"; break;
  case GRACE_UINT8: sti = "*p = (unsigned char)(cgo_u64)v;"; break;
  case GRACE_BOOL: sti = "*p = v != 0;"; break;
  default: sti = NULL; break;
  }
  if (sti) cg_printf(b, "__device__ __forceinline__ void %s_sti(%s_t *p, long long v) { %s }\n", R, R, sti);
  else cg_printf(b, "__device__ __forceinline__ void %s_sti(%s_t *p, long long v) { %s_st(p, (double)v); }\n", R, R, R);
}

/* cgo_conv(d, s): one element from role S to role D, converted as the CPU's strided copy converts. */
static void emit_conv(cg_buf *b, grace_dtype ddt, grace_dtype sdt) {
  const char *body = ddt == sdt ? "*d = *s;"
                     : !is_float_dt(ddt) && !is_float_dt(sdt) ? "D_sti(d, S_ldi(s));" : "D_st(d, S_ld(s));";
  cg_printf(b, "__device__ __forceinline__ void cgo_conv(D_t *d, const S_t *s) { %s }\n", body);
}

typedef struct tmpl_def {
  int nptr;
  const char *roles[1 + CGO_CAT_MAX];   /* role names of the pointers, in order */
  const char *ptrs[1 + CGO_CAT_MAX];    /* their names in the body */
  const char *words;         /* the word fields */
  int nscalar;
  const char *scalars[2];
} tmpl_def;

#define W16 "[16]"
static const tmpl_def defs[CGO_NTMPL] = {
  [CGO_COPY] = {2, {"D", "S"}, {"dst", "src"}, "n, nd, size" W16 ", ss" W16 ", ds" W16, 0, {0}},
  [CGO_FILL] = {1, {"D"}, {"dst"}, "n, nd, size" W16 ", ds" W16, 1, {"value"}},
  [CGO_TRI] = {1, {"D"}, {"x"}, "n, rows, cols, k, upper", 0, {0}},
  [CGO_ICHECK] = {2, {"I", "F"}, {"idx", "flag"}, "n, nd, size" W16 ", is" W16 ", bound, base", 0, {0}},
  [CGO_IMOVE] = {3, {"D", "S", "I"}, {"dst", "src", "idx"},
                 "n, nd, size" W16 ", ss" W16 ", ds" W16 ", is" W16 ", len, lss, lds, lis, sq, dq, base, bound", 0, {0}},
  [CGO_CREATE] = {1, {"D"}, {"out"}, "n, w0, w1, w2, w3", 2, {"seed", "offset"}},
  [CGO_CUMSUM] = {2, {"D", "S"}, {"out", "x"}, "rows, L, nd, size" W16 ", xs" W16 ", os" W16 ", xl, ol", 0, {0}},
  [CGO_SOFTMAX] = {2, {"D", "S"}, {"out", "x"}, "rows, L, nd, size" W16 ", xs" W16 ", os" W16 ", xl, ol", 0, {0}},
  [CGO_NORM] = {4, {"Y", "X", "W", "B"}, {"y", "x", "w", "b"}, "rows, D, nd, size" W16 ", xs" W16 ", xl, wl, bl, eps",
                0, {0}},
  [CGO_SORT] = {3, {"V", "I", "X"}, {"vals", "idx", "x"},
                "rows, L, P, k, nd, size" W16 ", xs" W16 ", os" W16 ", xl, ol, base, has_idx", 0, {0}},
  [CGO_ATTN] = {6, {"O", "Q", "K", "V", "M", "C"}, {"out", "q", "kt", "v", "mask", "sc"},
                "rows, M, N, D, Dv, nb, bs" W16 ", qb" W16 ", kb" W16 ", vb" W16 ", mb" W16
                ", qm, qd, kd, kn, vn, vd, mm, mn, fill, R, C, kvec, vvec, scv, S", 0, {0}},
  [CGO_CAT] = {1 + CGO_CAT_MAX, {"D", "S", "S", "S", "S", "S", "S", "S", "S"},
               {"dst", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"},
               "n, k, start[8], base[8], nd[8], size[8][8], ss[8][8], ds[8][8]", 0, {0}},
  [CGO_NZ] = {4, {"D", "M", "S", "C"}, {"out", "m", "x", "cnt"}, "n, nd, size" W16 ", ms" W16 ", xs" W16 ", base", 0, {0}},
  [CGO_IADD] = {3, {"D", "S", "I"}, {"dst", "src", "off"}, "n, nd, size" W16 ", ss" W16 ", ds" W16 ", is" W16, 0, {0}},
};
_Static_assert(CGO_CAT_MAX == 8 && CGO_CAT_MAXD == 8, "the CAT template's word fields spell out 8 pieces of 8 dims");

int cg_ops_nscalar(cgo_tmpl t) { return (unsigned)t < CGO_NTMPL ? defs[t].nscalar : 0; }

/* The tiled kernel's shared memory (body_attn_tiled's layout), bytes. */
static int64_t attn_smem(int64_t R, int64_t C, int64_t D, int64_t Dv) {
  int64_t KP = D % 4 == 0 && Dv % 4 == 0 ? D + 4 : D + 1;
  return 4 * (C * KP + C * Dv + R * D + R * C + 3 * R + CGO_ATTN_THREADS);
}

void cg_ops_attn_plan(int64_t rows, int64_t M, int64_t N, int64_t D, int64_t Dv, int f64, int64_t sms,
                      int64_t smem_limit, int clusters, cgo_attn_plan *out) {
  int64_t R = 16, batch = M > 0 ? rows / M : 0;
  while (R > 1 && (R > M || batch * ((M + R - 1) / R) < sms)) R /= 2;
  int64_t tiles = batch * ((M + R - 1) / R), S = 1;
  if (!f64 && clusters && tiles > 0 && 2 * tiles <= sms && R * Dv <= CGO_ATTN_THREADS) {
    S = sms / tiles < CGO_ATTN_MAXS ? sms / tiles : CGO_ATTN_MAXS;
    if (S > N / 16) S = N / 16;   /* at least 16 keys a block */
    if (S < 2) S = 1;
  }
  int64_t keys = (N + S - 1) / S, C = keys < 256 ? (keys + 7) / 8 * 8 : 256, smem = attn_smem(R, C, D, Dv);
  while (C > 16 && smem > smem_limit) smem = attn_smem(R, C /= 2, D, Dv);
  out->tiled = !f64 && smem <= smem_limit && R * Dv <= CGO_ATTN_THREADS * CGO_ATTN_ACC;
  out->R = R;
  out->S = out->tiled ? S : 1;
  out->C = C;
  out->tiles = tiles;
  out->smem = (unsigned)smem;
}

/* Unravels r over p.size[0..nd) adding coordinate * stride for each listed stride array. */
static void emit_unravel(cg_buf *b, const char *r, int n, const char *const *strides, const char *const *accs) {
  cg_printf(b, "    { long long rr = %s;\n      for (int d = (int)p.nd - 1; d >= 0; d--) {\n"
               "        long long c = rr %% p.size[d]; rr /= p.size[d];\n", r);
  for (int i = 0; i < n; i++) cg_printf(b, "        %s += c * p.%s[d];\n", accs[i], strides[i]);
  cg_puts(b, "      } }\n");
}

static void body_copy(cg_buf *b, const cgo_spec *s) {
  if (s->variant == 1) { cg_puts(b, "  CGO_LOOP(i, p.n) cgo_conv(dst + i, src + i);\n"); return; }
  cg_puts(b, "  CGO_LOOP(i, p.n) {\n    long long so = 0, dof = 0;\n");
  emit_unravel(b, "i", 2, (const char *[]){"ss", "ds"}, (const char *[]){"so", "dof"});
  cg_puts(b, "    cgo_conv(dst + dof, src + so);\n  }\n");
}

/* A thread per element of the pieces' flat iteration: the piece is the last whose start it has reached. */
static void body_cat(cg_buf *b) {
  cg_printf(b, "  CGO_LOOP(i, p.n) {\n    int t = 0;\n"
               "#pragma unroll\n    for (int u = 1; u < %d; u++) if (u < p.k && i >= p.start[u]) t = u;\n"
               "    long long r = i - p.start[t], so = 0, dof = p.base[t];\n"
               "    for (int d = (int)p.nd[t] - 1; d >= 0; d--) {\n"
               "      long long c = r %% p.size[t][d]; r /= p.size[t][d];\n"
               "      so += c * p.ss[t][d]; dof += c * p.ds[t][d];\n    }\n    const S_t *src = s0;\n", CGO_CAT_MAX);
  for (int u = 1; u < CGO_CAT_MAX; u++) cg_printf(b, "    if (t == %d) src = s%d;\n", u, u);
  cg_puts(b, "    cgo_conv(dst + dof, src + so);\n  }\n");
}

static void body_fill(cg_buf *b) {
  cg_puts(b, "  union { long long w; D_t v; } u; u.w = value;\n  const D_t val = u.v;\n"
             "  CGO_LOOP(i, p.n) {\n    long long dof = 0;\n");
  emit_unravel(b, "i", 1, (const char *[]){"ds"}, (const char *[]){"dof"});
  cg_puts(b, "    dst[dof] = val;\n  }\n");
}

static void body_tri(cg_buf *b) {
  cg_puts(b, "  CGO_LOOP(i, p.n) {\n"
             "    long long j = i % p.cols, r = (i / p.cols) % p.rows, dl = j - r;\n"
             "    if (p.upper ? dl < p.k : dl > p.k) x[i] = (D_t)0;\n  }\n");
}

static void body_icheck(cg_buf *b) {
  cg_puts(b, "  CGO_LOOP(i, p.n) {\n    long long io = 0;\n");
  emit_unravel(b, "i", 1, (const char *[]){"is"}, (const char *[]){"io"});
  cg_puts(b, "    long long q = I_ldi(idx + io) - p.base;\n"
             "    if (q < 0 || q >= p.bound) atomicMin(flag, i);\n  }\n");
}

static void body_imove(cg_buf *b) {
  cg_puts(b, "  CGO_LOOP(i, p.n) {\n    long long so = 0, dof = 0, io = 0;\n");
  emit_unravel(b, "i", 3, (const char *[]){"ss", "ds", "is"}, (const char *[]){"so", "dof", "io"});
  cg_puts(b, cg_src_ops_imove_loop);
}

static void body_create(cg_buf *b, const cgo_spec *s) {
  grace_dtype dt = s->dt[0];
  cg_puts(b, "  CGO_LOOP(i, p.n) {\n    D_t *o = out + i;\n");
  switch (s->variant) {
  case CGO_ARANGE_F:
    cg_puts(b, "    D_st(o, __dadd_rn(__longlong_as_double(p.w0), __dmul_rn((double)i, __longlong_as_double(p.w1))));\n");
    break;
  case CGO_ARANGE_I: cg_puts(b, "    D_sti(o, (long long)((cgo_u64)p.w0 + (cgo_u64)i * (cgo_u64)p.w1));\n"); break;
  case CGO_LINSPACE:
    cg_puts(b, "    double a = __longlong_as_double(p.w0), e = __longlong_as_double(p.w1), st = __longlong_as_double(p.w2);\n"
               "    D_st(o, p.n == 1 ? a : i < p.n / 2 ? __dadd_rn(a, __dmul_rn(st, (double)i))"
               " : __dsub_rn(e, __dmul_rn(st, (double)(p.n - 1 - i))));\n");
    break;
  case CGO_EYE: cg_puts(b, "    D_st(o, i / p.w0 == i % p.w0 ? 1.0 : 0.0);\n"); break;
  case CGO_RAND: case CGO_RANDN: case CGO_RANDINT:
    cg_puts(b, "    unsigned int r[4];\n    cgo_philox((cgo_u64)seed, (cgo_u64)offset, (cgo_u64)i, r);\n");
    if (s->variant == CGO_RANDINT)
      cg_puts(b, "    cgo_u64 u = ((cgo_u64)r[1] << 32) | r[0];\n"
                 "    D_sti(o, (long long)((cgo_u64)p.w0 + u % (cgo_u64)p.w1));\n");
    else if (s->variant == CGO_RANDN)   /* Box-Muller in double, u1 in (0, 1], as cpu_create.c */
      cg_puts(b, "    double u1 = __dmul_rn((double)r[0] + 1.0, 2.3283064365386962890625e-10);\n"
                 "    double u2 = __dmul_rn((double)r[1], 2.3283064365386962890625e-10);\n"
                 "    D_st(o, __dmul_rn(sqrt(__dmul_rn(-2.0, log(u1))), cos(__dmul_rn(6.283185307179586, u2))));\n");
    else if (dt == GRACE_FLOAT64)
      cg_puts(b, "    D_st(o, (double)((((cgo_u64)r[0] << 32) | r[1]) >> 11) * 1.1102230246251565404236316680908203125e-16);\n");
    else if (dt == GRACE_FLOAT16) cg_puts(b, "    D_st(o, (double)(r[0] >> 21) * 0.00048828125);\n");
    else if (dt == GRACE_BFLOAT16) cg_puts(b, "    D_st(o, (double)(r[0] >> 24) * 0.00390625);\n");
    else cg_puts(b, "    D_st(o, (double)(r[0] >> 8) * 5.9604644775390625e-08);\n");
    break;
  default: break;
  }
  cg_puts(b, "  }\n");
}

/* Row offsets: row r of x (xo) and of the output (oo) over the dims other than the row dim. */
static void emit_row_offsets(cg_buf *b, int with_out) {
  cg_puts(b, "    long long xo = 0, oo = 0;\n");
  if (with_out) emit_unravel(b, "row", 2, (const char *[]){"xs", "os"}, (const char *[]){"xo", "oo"});
  else emit_unravel(b, "row", 1, (const char *[]){"xs"}, (const char *[]){"xo"});
}

static void body_cumsum(cg_buf *b, const cgo_spec *s) {
  cg_puts(b, "  CGO_LOOP(row, p.rows) {\n");
  emit_row_offsets(b, 1);
  if (!is_float_dt(s->dt[0]))   /* wraps as the CPU's uint64 accumulator */
    cg_puts(b, cg_src_ops_cumsum_int);
  else
    cg_puts(b, cg_src_ops_cumsum_float);
  cg_puts(b, "  }\n");
}

/* Softmax rows: a warp per row, or with variant bit 4 a block per row (partials combined through shared
 * memory, every thread reading them in one order so all agree). */
static void body_softmax(cg_buf *b, const cgo_spec *s) {
  int logp = s->variant & 1, dbl = s->variant & 2, blk = s->variant & 4;
  const char *T = dbl ? "double" : "float", *LD = dbl ? "S_ld" : "S_ldf";
  if (blk)
    cg_printf(b, "  __shared__ %s shm[32];\n  __shared__ double shs[32];\n  const long long lane = threadIdx.x, step = blockDim.x;\n"
                 "  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {\n", T);
  else
    cg_puts(b, "  const long long lane = threadIdx.x & 31, step = 32;\n"
               "  long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5,"
               " nwarp = ((long long)gridDim.x * blockDim.x) >> 5;\n"
               "  for (long long row = warp; row < p.rows; row += nwarp) {\n");
  emit_row_offsets(b, 1);
  cg_printf(b, "    %s m = %s(x + xo);\n"
               "    for (long long l = lane; l < p.L; l += step) { %s v = %s(x + xo + l * p.xl); if (v > m || v != v) m = v; }\n"
               "    for (int o = 16; o; o >>= 1) { %s v = __shfl_xor_sync(0xffffffffu, m, o); if (v > m || v != v) m = v; }\n",
            T, LD, T, LD, T);
  if (blk)
    cg_puts(b, "    __syncthreads();\n    if ((threadIdx.x & 31) == 0) shm[threadIdx.x >> 5] = m;\n    __syncthreads();\n"
               "    for (unsigned w = 0; w < (blockDim.x >> 5); w++) if (shm[w] > m || shm[w] != shm[w]) m = shm[w];\n");
  cg_puts(b, "    double s = 0;\n");
  if (dbl) cg_puts(b, "    for (long long l = lane; l < p.L; l += step) s += exp(S_ld(x + xo + l * p.xl) - m);\n");
  else cg_puts(b, "    for (long long l = lane; l < p.L; l += step) s += (double)expf(__fsub_rn(S_ldf(x + xo + l * p.xl), m));\n");
  cg_puts(b, "    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);\n");
  if (blk)
    cg_puts(b, "    if ((threadIdx.x & 31) == 0) shs[threadIdx.x >> 5] = s;\n    __syncthreads();\n"
               "    s = 0;\n    for (unsigned w = 0; w < (blockDim.x >> 5); w++) s += shs[w];\n");
  if (dbl) {
    cg_puts(b, "    double ls = log(s);\n    for (long long l = lane; l < p.L; l += step) {\n"
               "      double d = S_ld(x + xo + l * p.xl) - m;\n");
    cg_printf(b, "      D_st(out + oo + l * p.ol, %s);\n    }\n", logp ? "d - ls" : "exp(d) / s");
  } else {
    cg_printf(b, "    float c = %s;\n    for (long long l = lane; l < p.L; l += step) {\n"
                 "      float d = __fsub_rn(S_ldf(x + xo + l * p.xl), m);\n", logp ? "(float)log(s)" : "(float)(1.0 / s)");
    cg_printf(b, "      D_stf(out + oo + l * p.ol, %s);\n    }\n", logp ? "__fsub_rn(d, c)" : "__fmul_rn(expf(d), c)");
  }
  cg_puts(b, "  }\n");
}

/* Norm rows, a block each. With CGO_NORM_REGS the row is read once into registers (CGO_NORM_REG elements a thread)
 * and the mean, the variance and the output come from there; otherwise each of the three passes reads it again.
 * Both visit the elements in the same order, so they give the same bits. */
static void body_norm(cg_buf *b, const cgo_spec *s) {
  int hw = s->variant & 1, hb = s->variant & 2, rms = s->variant & 4, dbl = s->variant & 8, regs = s->variant & CGO_NORM_REGS;
  const char *T = dbl ? "double" : "float", *LD = dbl ? "X_ld" : "X_ldf";
  const char *WL = dbl ? "W_ld" : "W_ldf", *BL = dbl ? "B_ld" : "B_ldf";
  char loop[160], xv[64], wv[64], bv[64];
  if (regs) {
    snprintf(loop, sizeof loop, "\n#pragma unroll\n    for (int t = 0; t < %d; t++) { const long long l = threadIdx.x + t * blockDim.x;"
             " if (l >= p.D) break;\n", CGO_NORM_REG);
    snprintf(xv, sizeof xv, "xv[t]");
    snprintf(wv, sizeof wv, "wv[t]");
    snprintf(bv, sizeof bv, "bv[t]");
  } else {
    snprintf(loop, sizeof loop, "    for (long long l = threadIdx.x; l < p.D; l += blockDim.x) {\n");
    snprintf(xv, sizeof xv, "%s(x + xo + l * p.xl)", LD);
    snprintf(wv, sizeof wv, "%s(w + l * p.wl)", WL);
    snprintf(bv, sizeof bv, "%s(b + l * p.bl)", BL);
  }
  cg_puts(b, "  __shared__ double sh[32];\n  const double eps = __longlong_as_double(p.eps);\n"
             "  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {\n");
  emit_row_offsets(b, 0);
  cg_puts(b, "    Y_t *yr = y + row * p.D;\n");
  if (regs) {   /* the weight and bias with the row: their loads overlap its (none waits for the statistics) */
    cg_printf(b, "    %s xv[%d], wv[%d], bv[%d];%s      xv[t] = %s(x + xo + l * p.xl);\n", T, CGO_NORM_REG, CGO_NORM_REG,
              CGO_NORM_REG, loop, LD);
    if (hw) cg_printf(b, "      wv[t] = %s(w + l * p.wl);\n", WL);
    if (hb) cg_printf(b, "      bv[t] = %s(b + l * p.bl);\n", BL);
    cg_puts(b, "    }\n");
  }
  if (dbl) {
    cg_puts(b, "    double mean = 0, q = 0;\n");
    if (!rms) cg_printf(b, "%s      mean += %s;\n    }\n    mean = cgo_block_sum(mean, sh) / (double)p.D;\n", loop, xv);
    cg_printf(b, "%s      double d = %s - mean; q += d * d;\n    }\n"
                 "    double rstd = 1.0 / sqrt(cgo_block_sum(q, sh) / (double)p.D + eps);\n"
                 "%s      double v = __dmul_rn(%s - mean, rstd);\n", loop, xv, loop, xv);
    if (hw) cg_printf(b, "      v = __dmul_rn(v, %s);\n", wv);
    if (hb) cg_printf(b, "      v = __dadd_rn(v, %s);\n", bv);
    cg_puts(b, "      Y_st(yr + l, v);\n    }\n");
  } else {
    cg_puts(b, "    float mean = 0;\n    double q = 0;\n");
    if (!rms)
      cg_printf(b, "    double sm = 0;\n%s      sm += (double)%s;\n    }\n"
                   "    mean = (float)(cgo_block_sum(sm, sh) / (double)p.D);\n", loop, xv);
    cg_printf(b, "%s      float d = __fsub_rn(%s, mean); q += (double)__fmul_rn(d, d);\n    }\n"
                 "    float rstd = (float)(1.0 / sqrt(cgo_block_sum(q, sh) / (double)p.D + eps));\n"
                 "%s      float v = __fmul_rn(__fsub_rn(%s, mean), rstd);\n", loop, xv, loop, xv);
    if (hw) cg_printf(b, "      v = __fmul_rn(v, %s);\n", wv);
    if (hb) cg_printf(b, "      v = __fadd_rn(v, %s);\n", bv);
    cg_puts(b, "      Y_stf(yr + l, v);\n    }\n");
  }
  cg_puts(b, "  }\n");
}

/* The CPU's sort keys (cpu_reduce_scan.c): unsigned order = value order, -0 == +0, NaN largest. */
static void emit_sort_key(cg_buf *b, grace_dtype dt) {
  if (is_float_dt(dt))
    cg_puts(b, cg_src_ops_sort_key_float);
  else
    cg_puts(b, "__device__ __forceinline__ cgo_u64 cgo_key(const X_t *p) { return (cgo_u64)X_ldi(p) ^ 0x8000000000000000ULL; }\n");
}

/* Rows too long for shared memory (topk only): k rounds, each a block-wide minimum of the (key, index) pairs
 * after the previous round's; the same total order as the sort, so the same stable result. */
static void body_select(cg_buf *b, const cgo_spec *s) {
  cg_printf(b, "  __shared__ cgo_u64 sk[32];\n  __shared__ long long si[32];\n  const cgo_u64 flip = %s;\n",
            (s->variant & 1) ? "~0ULL" : "0ULL");
  cg_puts(b, "  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {\n");
  emit_row_offsets(b, 1);
  cg_puts(b, cg_src_ops_select_row);
}

/* Bitonic sort of (key, index) pairs: the index breaks ties, so the order is the stable one. */
static void body_sort(cg_buf *b, const cgo_spec *s) {
  if (s->variant & 2) { body_select(b, s); return; }
  cg_printf(b, "  extern __shared__ cgo_u64 cgo_smem[];\n  cgo_u64 *keys = cgo_smem;\n  int *ids = (int *)(cgo_smem + p.P);\n"
               "  const cgo_u64 flip = %s;\n", (s->variant & 1) ? "~0ULL" : "0ULL");
  cg_puts(b, "  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {\n");
  emit_row_offsets(b, 1);
  cg_puts(b, cg_src_ops_sort_row);
}

/* The scale: read through the 0-d tensor's pointer, or the word scv (a host number passed by value). */
static void emit_attn_scale(cg_buf *b, const cgo_spec *s, const char *T, const char *L) {
  if (s->variant & CGO_ATTN_SVAL) cg_printf(b, "  const %s scale = (%s)__longlong_as_double(p.scv);\n", T, T);
  else if (s->variant & CGO_ATTN_SCALE) cg_printf(b, "  const %s scale = (%s)C%s(sc);\n", T, T, L);
}

/* Score v scaled (multiplied, or divided with CGO_ATTN_DIV) and masked: the mask element at index expression midx
 * replaces it with fill where false (CGO_ATTN_KEEP) or true. Each line begins with indent. */
static void emit_attn_score_fix(cg_buf *b, const cgo_spec *s, const char *indent, const char *v, const char *midx) {
  if (s->variant & (CGO_ATTN_SCALE | CGO_ATTN_SVAL))
    cg_printf(b, "%s%s = %s %s scale;\n", indent, v, v, s->variant & CGO_ATTN_DIV ? "/" : "*");
  if (s->variant & CGO_ATTN_MASK)
    cg_printf(b, "%sif (%s(mask[%s] != 0)) %s = fill;\n", indent, s->variant & CGO_ATTN_KEEP ? "!" : "", midx, v);
}

/* Loads keys j0 .. j0+nj of a [keys, dims] operand into shared rows of `ld` floats: 16-byte vectors along the
 * dims when they are contiguous and aligned and the shared rows are too (f4: row lengths multiples of 4 floats;
 * float32 goes by cp.async straight into shared memory, so every copy of the chunk is in flight at once), else
 * one element per thread, the stride-1 dim fastest. */
static void emit_attn_stage(cg_buf *b, grace_dtype dt, const char *role, const char *ptr, const char *base,
                            const char *dims, const char *sd, const char *sj, const char *vec, const char *dst,
                            const char *ld) {
  cg_printf(b,
    "    if (%s && f4 && ((unsigned long long)(%s + %s) & 15) == 0) {\n"
    "      const int V = 16 / (int)sizeof(%s_t), per = %s / V;\n"
    "#pragma unroll 8\n"
    "      for (int e = tid; e < nj * per; e += nt) {\n"
    "        const int j = e / per, c = e - j * per;\n"
    "        const %s_t *src = %s + %s + (j0 + j) * %s + (long long)c * V;\n",
    vec, ptr, base, role, dims, role, ptr, base, sj);
  if (dt == GRACE_FLOAT32)
    cg_printf(b, "#if __CUDA_ARCH__ >= 800\n"
                 "        asm volatile(\"cp.async.cg.shared.global [%%0], [%%1], 16;\" :: \"r\"(cgo_saddr(%s + j * %s + c * V)), \"l\"(src));\n"
                 "#else\n        *(float4 *)(%s + j * %s + c * V) = *(const float4 *)src;\n#endif\n",
              dst, ld, dst, ld);
  else
    cg_printf(b, "        union { uint4 u; %s_t x[16 / sizeof(%s_t)]; } w;\n        w.u = *(const uint4 *)src;\n"
                 "#pragma unroll\n"
                 "        for (int u = 0; u < V; u++) %s[j * %s + c * V + u] = %s_ldf(&w.x[u]);\n",
              role, role, dst, ld, role);
  cg_printf(b,
    "      }\n"
    "    } else if (%s == 1) {\n"
    "#pragma unroll 4\n"
    "      for (int e = tid; e < nj * %s; e += nt) { const int j = e %% nj, d = e / nj;\n"
    "        %s[j * %s + d] = %s_ldf(%s + %s + (long long)d * %s + (j0 + j)); }\n"
    "    } else {\n"
    "#pragma unroll 4\n"
    "      for (int e = tid; e < nj * %s; e += nt) { const int j = e / %s, d = e - j * %s;\n"
    "        %s[j * %s + d] = %s_ldf(%s + %s + (long long)d * %s + (j0 + j) * %s); }\n"
    "    }\n",
    sj, dims, dst, ld, role, ptr, base, sd,
    dims, dims, dims, dst, ld, role, ptr, base, sd, sj);
}

/* The tiled kernel (float compute): a block per R query rows of one batch index. Per chunk of C keys: keys and
 * values staged in shared memory, every score of the R x C tile from shared memory (key rows padded to D+4, read
 * as float4: 8 lanes of a quarter-warp hit 8 distinct 16-byte slots; D+1 when D is not a multiple of 4), the
 * rows' running maxima and sums updated by a warp each, then the outputs (row, dim) rescaled and accumulated.
 * When R*Dv is less than the block, G = block / (R*Dv) threads share an output, each over every G-th key, and add
 * up at the end (decode: one row of 64 dims, 4 threads each). Scores never reach global memory.
 * Shared memory (floats): keys C*KP, values C*Dv, q R*D, probabilities R*C, max/sum/rescale 3R, the groups'
 * sums CGO_ATTN_THREADS. */
static void body_attn_tiled(cg_buf *b, const cgo_spec *s) {
  cg_printf(b, "  extern __shared__ __align__(16) unsigned char cgo_sh[];\n"
               "  const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = nt >> 5;\n"
               "  const int nR = (int)p.R, nC = (int)p.C, nD = (int)p.D, nDv = (int)p.Dv;\n"
               "  const bool f4 = (nD & 3) == 0 && (nDv & 3) == 0;\n"
               "  const int KP = f4 ? nD + 4 : nD + 1, nO = nR * nDv, G = nO < nt ? nt / nO : 1;\n"
               "  const int grp = G > 1 ? tid / nO : 0, own = G > 1 ? tid - grp * nO : tid;\n"
               "  float *ks = (float *)cgo_sh, *vs = ks + nC * KP, *qs = vs + nC * nDv, *ps = qs + nR * nD;\n"
               "  float *ms = ps + nR * nC, *ls = ms + nR, *al = ls + nR, *red = al + nR;\n"
               "  const float fill = (float)__longlong_as_double(p.fill), ninf = __int_as_float((int)0xff800000u);\n"
               "  const long long tiles = (p.M + nR - 1) / nR, nblk = p.rows / p.M * tiles;\n"
               "  enum { CGO_ATTN_ACC = %d, CGO_ATTN_MAXS = %d };\n", CGO_ATTN_ACC, CGO_ATTN_MAXS);
  emit_attn_scale(b, s, "float", "_ldf");
  cg_puts(b, cg_src_ops_attn_tiled_rows);
  emit_attn_stage(b, s->dt[1], "K", "kt", "ko", "nD", "p.kd", "p.kn", "p.kvec", "ks", "KP");
  emit_attn_stage(b, s->dt[1], "V", "v", "vo", "nDv", "p.vd", "p.vn", "p.vvec", "vs", "nDv");
  if (s->dt[1] == GRACE_FLOAT32)
    cg_puts(b, "#if __CUDA_ARCH__ >= 800\n      asm volatile(\"cp.async.wait_all;\" ::: \"memory\");\n#endif\n");
  cg_puts(b, cg_src_ops_attn_tiled_scores);
  emit_attn_score_fix(b, s, "          ", "sc_", "mo + (i0 + r) * p.mm + (j0 + j) * p.mn");
  cg_puts(b, cg_src_ops_attn_tiled_softmax);
  if (s->variant & CGO_ATTN_SPLIT)   /* each block's maxima, sums and unnormalised outputs; rank 0 merges them */
    cg_puts(b, cg_src_ops_attn_tiled_split_end);
  else
    cg_puts(b, cg_src_ops_attn_tiled_end);
}

/* One query row against at most CGO_ATTN_DECODE_MAXN keys (decode): a block per row, warp w over the chunks of 32
 * keys w, w + nw, ... Each chunk's key and value rows are loaded first, all at once (16-byte vectors: LK lanes a
 * key row, KPW keys a step; a row not 16-byte aligned is read element by element), then the chunk's scores (a
 * lane per key after the LK lanes' sum), its running maximum and sum, and the values' products accumulated by LV
 * lanes a row. The warps' states merge in shared memory as the tiled kernel's blocks do. */
static void body_attn_decode(cg_buf *b, const cgo_spec *s) {
  int lk = 1 << ((s->variant >> CGO_ATTN_LK_SHIFT) & 7), lv = 1 << ((s->variant >> CGO_ATTN_LV_SHIFT) & 7);
  cg_printf(b, "  enum { LK = %d, KPW = 32 / LK, LV = %d, VPW = 32 / LV, KE = 16 / (int)sizeof(K_t), VE = 16 / (int)sizeof(V_t) };\n"
               "  __shared__ float sm_m[%d], sm_l[%d];\n"
               "  extern __shared__ __align__(16) unsigned char cgo_sh[];\n"
               "  float *sacc = (float *)cgo_sh;\n"
               "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;\n"
               "  const int kg = lane / LK, kc = lane %% LK, vg = lane / LV, vc = lane %% LV;\n"
               "  const float fill = (float)__longlong_as_double(p.fill), ninf = __int_as_float((int)0xff800000u);\n",
            lk, lv, CGO_ATTN_DECODE_WARPS, CGO_ATTN_DECODE_WARPS);
  emit_attn_scale(b, s, "float", "_ldf");
  cg_puts(b, cg_src_ops_attn_decode_rows);
  emit_attn_score_fix(b, s, "        ", "sc", "mo + jl * p.mn");
  cg_puts(b, cg_src_ops_attn_decode_end);
}

/* Online softmax per warp over chunks of 32 keys (chunk c of the row goes to warp c % nw): each lane scores one
 * key of the chunk (a dot product over D; the lanes' loads are independent, so they overlap), the chunk's
 * maximum rescales the running sum and accumulators, then the chunk's keys are added in order, each weight
 * broadcast from its lane (lane t of output chunk d0 holds dims d0 + lane + 32 t). The warps' states merge in
 * shared memory. A row whose keys are all masked gives 0 / 0, as softmax does. */
static void body_attn(cg_buf *b, const cgo_spec *s) {
  int dbl = s->variant & CGO_ATTN_F64;
  const char *L = dbl ? "_ld" : "_ldf", *E = dbl ? "exp" : "expf";
  cg_printf(b, "  typedef %s T;\n  extern __shared__ __align__(16) unsigned char cgo_sh[];\n  T *sw = (T *)cgo_sh;\n"
               "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;\n"
               "  const long long W = 258;\n"
               "  const T fill = (T)__longlong_as_double(p.fill), ninf = (T)__int_as_float((int)0xff800000u);\n",
            dbl ? "double" : "float");
  emit_attn_scale(b, s, "T", L);
  cg_puts(b, cg_src_ops_attn_rows);
  cg_printf(b, "#pragma unroll 8\n"
               "          for (long long d = 0; d < p.D; d++) s += Q%s(q + qo + d * p.qd) * K%s(kt + ko + d * p.kd + j * p.kn);\n",
            L, L);
  emit_attn_score_fix(b, s, "          ", "s", "mo + j * p.mn");
  cg_printf(b, "        }\n        T cm = s;\n"
               /* the lanes' maximum ignores NaN, so every lane has the same one and takes the same branch below */
               "        for (int o = 16; o; o >>= 1) { T x = __shfl_xor_sync(0xffffffffu, cm, o); if (x > cm || cm != cm) cm = x; }\n"
               "        if (cm == ninf && !__any_sync(0xffffffffu, s != s)) continue;\n"
               "        T nm = cm > m ? cm : m, r = %s(m - nm), e = s == ninf ? (T)0 : %s(s - nm), cs = e;\n"
               "        for (int o = 16; o; o >>= 1) cs += __shfl_xor_sync(0xffffffffu, cs, o);\n"
               "        l = l * r + cs;\n        for (int t = 0; t < 8; t++) acc[t] *= r;\n"
               "        const long long nj = p.N - j0 < 32 ? p.N - j0 : 32;\n"
               "        for (int jj = 0; jj < nj; jj++) {\n"
               "          const T ej = __shfl_sync(0xffffffffu, e, jj);\n"
               "          const long long vr = vo + (j0 + jj) * p.vn;\n"
               "#pragma unroll\n"
               "          for (int t = 0; t < 8; t++) {\n            long long dv = d0 + lane + 32 * t;\n"
               "            if (dv < p.Dv) acc[t] += ej * V%s(v + vr + dv * p.vd);\n          }\n        }\n"
               "        m = nm;\n      }\n", E, E, L);
  cg_printf(b, "      T *mine = sw + warp * W;\n      if (lane == 0) { mine[0] = m; mine[1] = l; }\n"
               "      for (int t = 0; t < 8; t++) mine[2 + lane + 32 * t] = acc[t];\n      __syncthreads();\n"
               "      T gm = ninf, gl = 0;\n"
               "      for (int w = 0; w < nw; w++) if (sw[w * W] > gm) gm = sw[w * W];\n"
               "      for (int w = 0; w < nw; w++) gl += sw[w * W + 1] * (sw[w * W] == ninf ? (T)0 : %s(sw[w * W] - gm));\n"
               "      for (long long t = threadIdx.x; t < 256 && d0 + t < p.Dv; t += blockDim.x) {\n        T o = 0;\n"
               "        for (int w = 0; w < nw; w++) o += sw[w * W + 2 + t] * (sw[w * W] == ninf ? (T)0 : %s(sw[w * W] - gm));\n"
               "        O_st%s(out + row * p.Dv + d0 + t, o / gl);\n      }\n      __syncthreads();\n    }\n  }\n",
            E, E, dbl ? "" : "f");
}

/* Compaction of m's nonzero elements by one block: each thread counts a contiguous run, the counts are scanned
 * in shared memory (thread 0, in order), then each thread writes its run from its offset; row-major order, as the
 * CPU's. One block keeps the order without a grid-wide scan; nonzero and masked_select are host-synchronous
 * (their size is read back) and are not the ops to make fast. */
static void body_nz(cg_buf *b, const cgo_spec *s) {
  cg_printf(b, "  __shared__ long long part[%d];\n"
               "  const long long T = blockDim.x, t = threadIdx.x, per = (p.n + T - 1) / T;\n"
               "  const long long lo = t * per < p.n ? t * per : p.n, hi = lo + per < p.n ? lo + per : p.n;\n"
               "  long long k = 0;\n  for (long long i = lo; i < hi; i++) {\n    long long mo = 0;\n", CGO_NZ_THREADS);
  emit_unravel(b, "i", 1, (const char *[]){"ms"}, (const char *[]){"mo"});
  cg_puts(b, "    k += M_ld(m + mo) != 0.0;\n  }\n  part[t] = k;\n  __syncthreads();\n"
             "  if (t == 0) {\n    long long sum = 0;\n"
             "    for (long long u = 0; u < T; u++) { long long v = part[u]; part[u] = sum; sum += v; }\n"
             "    cnt[0] = sum;\n  }\n  __syncthreads();\n");
  if (s->variant == CGO_NZ_COUNT) return;
  cg_puts(b, "  k = part[t];\n  for (long long i = lo; i < hi; i++) {\n    long long mo = 0, xo = 0;\n");
  emit_unravel(b, "i", 2, (const char *[]){"ms", "xs"}, (const char *[]){"mo", "xo"});
  cg_puts(b, "    if (M_ld(m + mo) == 0.0) continue;\n");
  if (s->variant == CGO_NZ_POS)
    cg_puts(b, "    long long rr = i;\n    for (int d = (int)p.nd - 1; d >= 0; d--) {\n"
               "      out[k * p.nd + d] = (D_t)(rr % p.size[d] + p.base); rr /= p.size[d];\n    }\n");
  else
    cg_puts(b, "    cgo_conv(out + k, x + xo);\n");
  cg_puts(b, "    k++;\n  }\n");
}

/* index_put_ with accumulate: a thread per element of the selection, adding atomically (repeated positions add
 * up; the order of float additions is the hardware's). */
static grace_status body_iadd(cg_buf *b, const cgo_spec *s) {
  const char *add;
  switch (s->dt[0]) {
  case GRACE_FLOAT32: add = "atomicAdd(d, S_ldf(src + so));"; break;
  case GRACE_FLOAT64: add = "atomicAdd(d, S_ld(src + so));"; break;
  case GRACE_INT32: add = "atomicAdd(d, (int)S_ldi(src + so));"; break;
  case GRACE_INT64: add = "atomicAdd((unsigned long long *)d, (unsigned long long)S_ldi(src + so));"; break;
  default: return GRACE_EARG;
  }
  cg_puts(b, "  CGO_LOOP(i, p.n) {\n    long long so = 0, dof = 0, io = 0;\n");
  emit_unravel(b, "i", 3, (const char *[]){"ss", "ds", "is"}, (const char *[]){"so", "dof", "io"});
  cg_printf(b, "    D_t *d = dst + dof + I_ldi(off + io);\n    %s\n  }\n", add);
  return GRACE_OK;
}

grace_status cg_ops_source(grace_vm *vm, const cgo_spec *s, cg_kernel *k) {
  memset(k, 0, sizeof *k);
  if ((unsigned)s->tmpl >= CGO_NTMPL) return grace_set_error(vm, GRACE_EARG, "cg_ops: invalid template %d", (int)s->tmpl);
  const tmpl_def *td = &defs[s->tmpl];
  grace_dtype dts[1 + CGO_CAT_MAX];
  for (int i = 0; i < td->nptr; i++) {
    grace_dtype dt = i < 3 ? s->dt[i] : s->dt[2];
    if (s->tmpl == CGO_ICHECK && i == 1) dt = GRACE_INT64;                 /* the flag */
    if (s->tmpl == CGO_SORT) dt = i == 1 ? GRACE_INT64 : s->dt[0];        /* values, indices, x */
    if (s->tmpl == CGO_NORM) dt = i <= 1 ? s->dt[0] : s->dt[i - 1];      /* y, x, w, b */
    if (s->tmpl == CGO_ATTN) dt = i == 0 ? s->dt[0] : i <= 3 ? s->dt[1] : i == 4 ? GRACE_BOOL : s->dt[2];
    if (s->tmpl == CGO_CAT) dt = i == 0 ? s->dt[0] : s->dt[1];            /* dst, the sources */
    if (s->tmpl == CGO_NZ) dt = i == 3 ? GRACE_INT64 : s->dt[i];          /* out, m, x, the count */
    if (s->tmpl == CGO_IADD && i == 2) dt = GRACE_INT64;                  /* the offsets */
    if ((unsigned)dt >= GRACE_NDTYPES) return grace_set_error(vm, GRACE_EARG, "cg_ops: invalid dtype %d", (int)dt);
    dts[i] = dt;
  }
  int n = snprintf(k->name, sizeof k->name, "cgo_%s", tmpl_names[s->tmpl]);
  for (int i = 0; i < td->nptr && n < (int)sizeof k->name; i++)   /* a role named again (CAT's sources) is one dtype */
    if (i == 0 || strcmp(td->roles[i], td->roles[i - 1])) n += snprintf(k->name + n, sizeof k->name - (size_t)n, "_%s", dt_short[dts[i]]);
  if (n < (int)sizeof k->name) snprintf(k->name + n, sizeof k->name - (size_t)n, "_v%d%s", s->variant, s->indirect ? "_ind" : "");
  k->kind = CG_OP;
  k->indirect = s->indirect;
  k->narg = td->nptr;
  for (int i = 0; i < td->nptr; i++) {
    k->args[i].value = -1;
    k->args[i].dtype = dts[i];
    k->args[i].output = i == 0 || (s->tmpl == CGO_ICHECK && i == 1) || (s->tmpl == CGO_SORT && i == 1) ||
                        (s->tmpl == CGO_NZ && i == 3);
  }
  k->nscalar = td->nscalar;
  for (int i = 0; i < td->nscalar; i++) { k->scalars[i] = -1; k->scalar_dtypes[i] = GRACE_INT64; }
  k->variant = s->variant;

  cg_buf b;
  cg_buf_init(&b, vm);
  cg_puts(&b, cg_src_ops_common);
  for (int i = 0; i < td->nptr; i++) if (i == 0 || strcmp(td->roles[i], td->roles[i - 1])) emit_role(&b, td->roles[i], dts[i]);
  if (s->tmpl == CGO_COPY || s->tmpl == CGO_IMOVE || s->tmpl == CGO_CAT) emit_conv(&b, dts[0], dts[1]);
  if (s->tmpl == CGO_NZ) emit_conv(&b, dts[0], dts[2]);
  if (s->tmpl == CGO_SORT) emit_sort_key(&b, dts[2]);
  if (s->tmpl == CGO_ATTN && (s->variant & CGO_ATTN_SPLIT))   /* a cluster's barrier and loads of a peer's shared memory */
    cg_puts(&b, cg_src_ops_cluster);
  if (s->tmpl == CGO_NORM)   /* every thread returns the same total: the partials are added in one order */
    cg_puts(&b, cg_src_ops_block_sum);
  const char *ind = s->indirect ? "*" : "";
  cg_printf(&b, "struct %s_p {\n", k->name);
  for (int i = 0; i < td->nptr; i++) cg_printf(&b, "  %s_t *%sP_%s;\n", td->roles[i], ind, td->ptrs[i]);
  cg_printf(&b, "  long long %s;\n", td->words);
  for (int i = 0; i < td->nscalar; i++) cg_printf(&b, "  long long %sS_%s;\n", ind, td->scalars[i]);
  cg_printf(&b, "};\nextern \"C\" __global__ void %s(const struct %s_p p) {\n", k->name, k->name);
  for (int i = 0; i < td->nptr; i++) cg_printf(&b, "  %s_t *%s = %sp.P_%s;\n", td->roles[i], td->ptrs[i], ind, td->ptrs[i]);
  for (int i = 0; i < td->nscalar; i++) cg_printf(&b, "  const long long %s = %sp.S_%s;\n", td->scalars[i], ind, td->scalars[i]);
  switch (s->tmpl) {
  case CGO_COPY: body_copy(&b, s); break;
  case CGO_CAT: body_cat(&b); break;
  case CGO_FILL: body_fill(&b); break;
  case CGO_TRI: body_tri(&b); break;
  case CGO_ICHECK: body_icheck(&b); break;
  case CGO_IMOVE: body_imove(&b); break;
  case CGO_CREATE: body_create(&b, s); break;
  case CGO_CUMSUM: body_cumsum(&b, s); break;
  case CGO_SOFTMAX: body_softmax(&b, s); break;
  case CGO_NORM: body_norm(&b, s); break;
  case CGO_SORT: body_sort(&b, s); break;
  case CGO_NZ: body_nz(&b, s); break;
  case CGO_IADD:
    if (body_iadd(&b, s) != GRACE_OK) {
      cg_buf_free(&b);
      return grace_set_error(vm, GRACE_EARG, "cg_ops: no atomic add for %s", grace_dtype_name(s->dt[0]));
    }
    break;
  case CGO_ATTN:
    if (s->variant & CGO_ATTN_DECODE) body_attn_decode(&b, s);
    else if (s->variant & CGO_ATTN_TILED) body_attn_tiled(&b, s);
    else body_attn(&b, s);
    break;
  default: break;
  }
  cg_puts(&b, "}\n");
  k->src = cg_buf_take(&b, &k->src_len);
  if (!k->src) return grace_set_error(vm, GRACE_ENOMEM, "cg_ops: out of memory generating %s", k->name);
  return GRACE_OK;
}
