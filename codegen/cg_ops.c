/* cg_ops.c: the CUDA source of the single-op kernels (see cg_ops.h for each template's parameter words).
 * Every dtype difference lives in a few "role" helpers emitted per kernel (R_t, R_ld, R_st, ...) that load
 * and store exactly as base/base.h's vm_load_* / vm_store_* do, so one body text serves every dtype. Float sums
 * that the CPU rounds step by step use __fadd_rn-style intrinsics so NVRTC cannot contract them into FMAs
 * the CPU does not use (random normals, linspace, norms would otherwise differ in the last bit). The kernel
 * bodies are CUDA in cg_ops.cuh (moves, copies, creation), cg_ops_rows.cuh (row kernels) and cg_ops_attn.cuh
 * (attention); this file writes what varies per instance (the roles, the parameter struct and entry) and the
 * #defines that specialise a body (variant bits, dtype facts, sizes), then pastes the body's section. */
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

/* The tiled kernel's shared memory (the layout of cg_ops_attn.cuh's ops_attn_tiled), bytes. */
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

/* ---- the defines that specialise a template's body (the .cuh sections test them) ---- */

static void define(cg_buf *b, const char *name, int v) { cg_printf(b, "#define %s %d\n", name, v ? 1 : 0); }

static const char *const create_names[CGO_NCREATE] = {"ARANGE_F", "ARANGE_I", "LINSPACE", "EYE", "RAND", "RANDN",
                                                      "RANDINT"};

/* The attention kernels' variant bits and sizes. */
static void define_attn(cg_buf *b, const cgo_spec *s) {
  static const struct { const char *name; int bit; } bits[] = {
    {"CGO_ATTN_SCALE", CGO_ATTN_SCALE}, {"CGO_ATTN_DIV", CGO_ATTN_DIV}, {"CGO_ATTN_MASK", CGO_ATTN_MASK},
    {"CGO_ATTN_KEEP", CGO_ATTN_KEEP}, {"CGO_ATTN_F64", CGO_ATTN_F64}, {"CGO_ATTN_SVAL", CGO_ATTN_SVAL},
    {"CGO_ATTN_SPLIT", CGO_ATTN_SPLIT}};
  for (size_t i = 0; i < sizeof bits / sizeof *bits; i++) define(b, bits[i].name, s->variant & bits[i].bit);
  if (s->variant & CGO_ATTN_DECODE)   /* lanes a key row and a value row, as log2 in the variant */
    cg_printf(b, "#define CGO_ATTN_LK %d\n#define CGO_ATTN_LV %d\n#define CGO_ATTN_DECODE_WARPS %d\n",
              1 << ((s->variant >> CGO_ATTN_LK_SHIFT) & 7), 1 << ((s->variant >> CGO_ATTN_LV_SHIFT) & 7),
              CGO_ATTN_DECODE_WARPS);
  else if (s->variant & CGO_ATTN_TILED) {
    cg_printf(b, "#define CGO_ATTN_ACC %d\n#define CGO_ATTN_MAXS %d\n", CGO_ATTN_ACC, CGO_ATTN_MAXS);
    define(b, "CGO_ATTN_KV_F32", s->dt[1] == GRACE_FLOAT32);   /* keys and values staged by cp.async */
  }
}

/* The #defines of template s (operand dtypes dts), written before its helpers and body. */
static void emit_defines(cg_buf *b, const cgo_spec *s, const grace_dtype *dts) {
  int v = s->variant;
  switch (s->tmpl) {
  case CGO_COPY: define(b, "CGO_CONTIG", v == 1); break;
  case CGO_CAT: cg_printf(b, "#define CGO_CAT_MAX %d\n", CGO_CAT_MAX); break;
  case CGO_CREATE:
    if ((unsigned)v < CGO_NCREATE) cg_printf(b, "#define CGO_%s 1\n", create_names[v]);
    define(b, "CGO_D_F64", dts[0] == GRACE_FLOAT64);
    define(b, "CGO_D_F16", dts[0] == GRACE_FLOAT16);
    define(b, "CGO_D_BF16", dts[0] == GRACE_BFLOAT16);
    break;
  case CGO_CUMSUM: define(b, "CGO_INT_SUM", !is_float_dt(dts[0])); break;
  case CGO_SOFTMAX: define(b, "CGO_LOG", v & 1); define(b, "CGO_F64", v & 2); define(b, "CGO_BLOCK", v & 4); break;
  case CGO_NORM:
    define(b, "CGO_HAS_W", v & 1); define(b, "CGO_HAS_B", v & 2); define(b, "CGO_RMS", v & 4);
    define(b, "CGO_F64", v & 8); define(b, "CGO_NORM_REGS", v & CGO_NORM_REGS);
    cg_printf(b, "#define CGO_NORM_REG %d\n", CGO_NORM_REG);
    break;
  case CGO_SORT: define(b, "CGO_DESCENDING", v & 1); define(b, "CGO_X_FLOAT", is_float_dt(dts[2])); break;
  case CGO_ATTN: define_attn(b, s); break;
  case CGO_NZ:
    cg_printf(b, "#define CGO_NZ_THREADS %d\n", CGO_NZ_THREADS);
    define(b, "CGO_NZ_COUNT_ONLY", v == CGO_NZ_COUNT); define(b, "CGO_NZ_POSITIONS", v == CGO_NZ_POS);
    break;
  case CGO_IADD:   /* the atomic add of dst's dtype (cg_ops_source refuses the others) */
    define(b, "CGO_D_F32", dts[0] == GRACE_FLOAT32); define(b, "CGO_D_F64", dts[0] == GRACE_FLOAT64);
    define(b, "CGO_D_I32", dts[0] == GRACE_INT32);
    break;
  default: break;
  }
}

/* Pastes ops_attn_stage for one operand of the tiled kernel: its role, pointer, offset, dims, strides (dims, keys),
 * contiguity word, and the shared rows it goes to with their length. */
static void emit_attn_stage(cg_buf *b, const char *role, const char *ptr, const char *base, const char *dims,
                            const char *sd, const char *sj, const char *vec, const char *dst, const char *ld) {
  cg_printf(b, "#define CGO_S_T %s_t\n#define CGO_S_LDF %s_ldf\n#define CGO_S_PTR %s\n#define CGO_S_BASE %s\n"
               "#define CGO_S_DIMS %s\n#define CGO_S_SD %s\n#define CGO_S_SJ %s\n#define CGO_S_VEC %s\n"
               "#define CGO_S_DST %s\n#define CGO_S_LD %s\n", role, role, ptr, base, dims, sd, sj, vec, dst, ld);
  cg_puts(b, cg_src_ops_attn_stage);
}

/* The kernel body of template s: its .cuh section(s). */
static void emit_body(cg_buf *b, const cgo_spec *s) {
  static const char *const bodies[CGO_NTMPL] = {
    [CGO_COPY] = cg_src_ops_copy, [CGO_FILL] = cg_src_ops_fill, [CGO_TRI] = cg_src_ops_tri,
    [CGO_ICHECK] = cg_src_ops_icheck, [CGO_IMOVE] = cg_src_ops_imove, [CGO_CREATE] = cg_src_ops_create,
    [CGO_CUMSUM] = cg_src_ops_cumsum, [CGO_SOFTMAX] = cg_src_ops_softmax, [CGO_NORM] = cg_src_ops_norm,
    [CGO_CAT] = cg_src_ops_cat, [CGO_NZ] = cg_src_ops_nz, [CGO_IADD] = cg_src_ops_iadd};
  if (s->tmpl == CGO_SORT)   /* rows longer than shared memory holds (topk): k selection rounds */
    cg_puts(b, s->variant & 2 ? cg_src_ops_select : cg_src_ops_sort);
  else if (s->tmpl == CGO_ATTN && (s->variant & CGO_ATTN_DECODE))
    cg_puts(b, cg_src_ops_attn_decode);
  else if (s->tmpl == CGO_ATTN && (s->variant & CGO_ATTN_TILED)) {
    cg_puts(b, cg_src_ops_attn_tiled);
    emit_attn_stage(b, "K", "kt", "ko", "nD", "p.kd", "p.kn", "p.kvec", "ks", "KP");
    emit_attn_stage(b, "V", "v", "vo", "nDv", "p.vd", "p.vn", "p.vvec", "vs", "nDv");
    cg_puts(b, cg_src_ops_attn_tiled_tail);
  } else if (s->tmpl == CGO_ATTN)
    cg_puts(b, cg_src_ops_attn_rows);
  else if (bodies[s->tmpl])
    cg_puts(b, bodies[s->tmpl]);
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
  grace_dtype d0 = s->dt[0];   /* dst's dtype */
  if (s->tmpl == CGO_IADD && !cg_ops_iadd_dtype(d0))
    return grace_set_error(vm, GRACE_EARG, "cg_ops: no atomic add for %s", grace_dtype_name(d0));
  int n = snprintf(k->name, sizeof k->name, "cgo_%s", tmpl_names[s->tmpl]);
  for (int i = 0; i < td->nptr && n < (int)sizeof k->name; i++)   /* a role named again (CAT's sources) is one dtype */
    if (i == 0 || strcmp(td->roles[i], td->roles[i - 1])) n += snprintf(k->name + n, sizeof k->name - (size_t)n, "_%s", dt_short[dts[i]]);
  if (n < (int)sizeof k->name) snprintf(k->name + n, sizeof k->name - (size_t)n, "_v%d%s%s", s->variant, s->indirect ? "_ind" : "",
                                        s->pred ? "_pred" : "");
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
  emit_defines(&b, s, dts);
  if (s->tmpl == CGO_SORT) cg_puts(&b, cg_src_ops_sort_key);
  if (s->tmpl == CGO_ATTN && (s->variant & CGO_ATTN_SPLIT))   /* a cluster's barrier and loads of a peer's shared memory */
    cg_puts(&b, cg_src_ops_cluster);
  if (s->tmpl == CGO_ATTN) cg_puts(&b, cg_src_ops_attn_common);
  if (s->tmpl == CGO_NORM)   /* every thread returns the same total: the partials are added in one order */
    cg_puts(&b, cg_src_ops_block_sum);
  const char *ind = s->indirect ? "*" : "";
  cg_printf(&b, "struct %s_p {\n", k->name);
  for (int i = 0; i < td->nptr; i++) cg_printf(&b, "  %s_t *%sP_%s;\n", td->roles[i], ind, td->ptrs[i]);
  cg_printf(&b, "  long long %s;\n", td->words);
  for (int i = 0; i < td->nscalar; i++) cg_printf(&b, "  long long %sS_%s;\n", ind, td->scalars[i]);
  cg_printf(&b, "};\nextern \"C\" __global__ void %s(const struct %s_p p%s) {\n", k->name, k->name,
            cg_pred_params(s->pred));
  cg_pred_enter(&b, s->pred);
  cg_pdl_enter(&b);
  for (int i = 0; i < td->nptr; i++) cg_printf(&b, "  %s_t *%s = %sp.P_%s;\n", td->roles[i], td->ptrs[i], ind, td->ptrs[i]);
  for (int i = 0; i < td->nscalar; i++) cg_printf(&b, "  const long long %s = %sp.S_%s;\n", td->scalars[i], ind, td->scalars[i]);
  emit_body(&b, s);
  cg_puts(&b, "}\n");
  k->src = cg_buf_take(&b, &k->src_len);
  if (!k->src) return grace_set_error(vm, GRACE_ENOMEM, "cg_ops: out of memory generating %s", k->name);
  return GRACE_OK;
}
