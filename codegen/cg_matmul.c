/* cg_matmul.c: CUDA sources of the matrix-product kernels (see cg_matmul.h). Each kernel is a fixed template
 * specialised by #defines (dtype, layout, vector width, rows per pass, split-K) plus a generated epilogue:
 * the preprocessor does the specialisation, so the templates read as plain CUDA and stay checkable. The fixed
 * text (helpers, bodies) is in cg_matmul.cuh and cg_matmul_gemm.cuh. Sources include no header; f16/bf16
 * conversions come from cg_prelude. */
#include <stdio.h>
#include <string.h>
#include "codegen/cg_matmul.h"
#include "codegen/cg_templates.h"
#include "ir/ir_pointwise.h"

/* ---- the generator ---- */
static int tc_stages(const cg_mm_desc *d) { return d->tile ? 4 : 3; }
static int tc_threads(const cg_mm_desc *d) { return d->tile ? 128 : 256; }

static const char *const form_names[] = {"gemv_nt", "gemv_nn", "gemm_tc", "gemm_simt", "splitk", "gemv_rw", "gemm_wg"};

static const char *dt_short(grace_dtype dt) {
  return dt == GRACE_FLOAT32 ? "f32" : dt == GRACE_FLOAT16 ? "f16" : dt == GRACE_BFLOAT16 ? "bf16" : "x";
}
static int is_mm_float(grace_dtype dt) {
  return dt == GRACE_FLOAT32 || dt == GRACE_FLOAT16 || dt == GRACE_BFLOAT16;
}
static const char *load_fn(grace_dtype dt) {
  return dt == GRACE_FLOAT16 ? "grace_h2f" : dt == GRACE_BFLOAT16 ? "grace_bf2f" : "(float)";
}
static const char *store_fn(grace_dtype dt) {
  return dt == GRACE_FLOAT16 ? "grace_f2h" : dt == GRACE_BFLOAT16 ? "grace_f2bf" : "(float)";
}

/* FNV-1a over the fields that shape the source (not the struct bytes: padding is not deterministic). */
static uint32_t desc_hash(const cg_mm_desc *d) {
  int64_t f[24 + CG_MM_MAX_OPS + 5 * CG_MM_MAX_EPI];
  int n = 0;
  int64_t eps;
  memcpy(&eps, &d->eps, sizeof eps);
  f[n++] = d->norm; f[n++] = d->norm_w; f[n++] = d->norm_b; f[n++] = d->norm ? eps : 0;
  f[n++] = d->form; f[n++] = d->dt; f[n++] = d->out_dt; f[n++] = d->a_kmajor; f[n++] = d->b_kmajor;
  f[n++] = d->vec; f[n++] = d->a_vec; f[n++] = d->mtile; f[n++] = d->wpr; f[n++] = d->tile; f[n++] = d->split; f[n++] = d->indirect;
  f[n++] = d->pred;
  f[n++] = d->prefetch; f[n++] = d->rl; f[n++] = d->rc; f[n++] = d->rw_late;
  f[n++] = d->nop; f[n++] = d->nscalar; f[n++] = d->nepi;
  for (int i = 0; i < d->nop; i++) f[n++] = d->op_dtypes[i];
  for (int i = 0; i < d->nepi; i++) {
    const cg_epi_step *s = &d->epi[i];
    f[n++] = s->op; f[n++] = s->operand; f[n++] = s->dtype; f[n++] = s->flag; f[n++] = s->reversed;
  }
  uint32_t h = 2166136261u;
  for (int i = 0; i < n; i++)
    for (int b = 0; b < 8; b++) { h ^= (uint8_t)((uint64_t)f[i] >> (8 * b)); h *= 16777619u; }
  return h;
}

/* Rounds the float `e_` to dt when dt is a 16-bit type (the CPU rounds every op's result to its dtype). */
static void emit_round(cg_buf *b, grace_dtype dt) {
  if (dt == GRACE_FLOAT16) cg_puts(b, " e_ = grace_h2f(grace_f2h(e_));");
  else if (dt == GRACE_BFLOAT16) cg_puts(b, " e_ = grace_bf2f(grace_f2bf(e_));");
}

/* A binary step's other operand: scalar S<i>_ or element (m_, n_) of tensor operand i. */
static void operand_expr(char *out, size_t n, int operand) {
  if (operand < 0) snprintf(out, n, "S%d_", -1 - operand);
  else snprintf(out, n, "MM_LDE%d(E%d_[oE%d + (m_) * p.w[%d] + (n_) * p.w[%d]])", operand, operand, operand,
                CG_MM_NWORDS + operand * CG_MM_OPWORDS, CG_MM_NWORDS + operand * CG_MM_OPWORDS + 1);
}

/* MM_EPI(v, m, n): the epilogue chain on one accumulator and the store into C. */
static void emit_epilogue(cg_buf *b, const cg_mm_desc *d) {
  cg_puts(b, "#define MM_EPV(v, m, n, o) do { float e_ = (v); const long long m_ = (m), n_ = (n); (void)m_; (void)n_;");
  if (d->nepi > 0) emit_round(b, d->dt);   /* the product itself is stored in the inputs' dtype first */
  for (int i = 0; i < d->nepi; i++) {
    const cg_epi_step *s = &d->epi[i];
    cg_puts(b, " \\\n  ");
    const char *tmpl = ir_pw_epilogue(s->op, s->flag);
    if (tmpl) {   /* checked by cg_matmul_source; the expression as the pointwise table spells it */
      char opnd[160], e[512];
      operand_expr(opnd, sizeof opnd, s->operand);
      const char *args[2] = {s->reversed ? opnd : "e_", s->reversed ? "e_" : opnd};
      if (!cg_pw_expand(e, sizeof e, tmpl, args, 2, 1, "float")) b->oom = 1;
      else cg_printf(b, "e_ = %s;", e);
    }
    emit_round(b, s->dtype);
  }
  cg_puts(b, " \\\n  o = e_; } while (0)\n");
  cg_puts(b, "#define MM_EPI(v, m, n) do { float o_; MM_EPV(v, m, n, o_); C_[(bi * M + (m)) * N + (n)] = MM_STO(o_); } while (0)\n");
}

grace_status cg_matmul_source(grace_vm *vm, const cg_mm_desc *d, cg_kernel *k) {
  memset(k, 0, sizeof *k);
  if (!is_mm_float(d->dt) || !is_mm_float(d->out_dt) || d->nop < 0 || d->nop > CG_MM_MAX_OPS ||
      d->nscalar < 0 || d->nscalar > CG_MM_MAX_SCALARS || d->nepi < 0 || d->nepi > CG_MM_MAX_EPI)
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: unsupported dtypes or epilogue size");
  if (d->form == CG_MM_GEMM_TC && d->dt == GRACE_FLOAT32)
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: the tensor-core kernel takes f16/bf16 only");
  int vec = d->vec < 1 ? 1 : d->vec, mt = d->mtile < 1 ? 1 : d->mtile, wpr = d->wpr < 1 ? 1 : d->wpr;
  if (wpr != 1 && wpr != 2 && wpr != 4)
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: %d warps per column", wpr);
  if ((d->form == CG_MM_GEMV_NT || d->form == CG_MM_GEMV_NN) &&
      ((vec != 1 && vec * (int)grace_dtype_size(d->dt) != 16) || mt > 16 || mt * vec > 64))
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: bad GEMV vector width %d / rows %d", vec, mt);
  if (d->form == CG_MM_GEMM_WG && (d->dt == GRACE_FLOAT32 || !d->a_kmajor || d->indirect))
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: the Hopper GEMM takes f16/bf16 operands, A k-major, "
                           "its tensor maps hold their pointers (no indirection)");
  if (d->form == CG_MM_GEMV_RW && (vec * (int)grace_dtype_size(d->dt) != 16 || !d->b_kmajor || d->split ||
                                   d->rl < 1 || d->rc < 1 || d->rc > 4 || d->rl * d->rc > CG_MM_RW_MAX_VECS))
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: GEMV_RW of %d x %d vectors of %d", d->rc, d->rl, vec);
  if (d->norm && ((d->form != CG_MM_GEMV_NT && d->form != CG_MM_GEMV_RW && d->form != CG_MM_SPLITK) ||
                  d->norm < CG_MM_NORM_LAYER || d->norm > CG_MM_NORM_RMS || !(d->eps >= 0)))
    return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: a norm prologue runs in GEMV_NT and GEMV_RW only");
  for (int i = 0; i < d->nop; i++)
    if (!is_mm_float(d->op_dtypes[i]))
      return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: epilogue operand dtype %s",
                             grace_dtype_name(d->op_dtypes[i]));
  for (int i = 0; i < d->nepi; i++) {
    int o = d->epi[i].operand;
    int op = d->epi[i].op;
    if (op != GRACE_OP_CAST && !ir_pw_epilogue(op, d->epi[i].flag))
      return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: %s has no epilogue form",
                             (unsigned)op < GRACE_NOPS ? grace_op_name((grace_op)op) : "?");
    int binary = op != GRACE_OP_CAST && grace_op_kind((grace_op)op) == GRACE_KIND_BINARY;
    if (binary && (o >= d->nop || -1 - o >= d->nscalar))
      return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: epilogue step %d names a missing operand", i);
    if (!is_mm_float(d->epi[i].dtype))
      return grace_set_error(vm, GRACE_EUNSUPPORTED, "matmul codegen: epilogue dtype %s",
                             grace_dtype_name(d->epi[i].dtype));
  }

  snprintf(k->name, sizeof k->name, "gmm_%s_%s_%08x", form_names[d->form], dt_short(d->dt), desc_hash(d));
  k->kind = CG_MATMUL;
  k->indirect = d->indirect;
  k->variant = (int)d->form;
  k->nscalar = d->nscalar;
  const char *nm = k->name;
  const char *T = cg_ctype(d->dt), *OT = cg_ctype(d->out_dt);

  cg_buf b;
  cg_buf_init(&b, vm);
  if (d->form == CG_MM_GEMM_WG) cg_puts(&b, "#define GRACE_ARCH_SPECIFIC 1\n");   /* wgmma: sm_90a (cuda_nvrtc.c) */
  cg_prelude(&b);
  cg_puts(&b, cg_src_matmul_helpers);
  if (d->form == CG_MM_GEMM_WG) {
    /* a product stored as it is (no epilogue, 16-bit out): pairs converted by the hardware */
    int plain = d->nepi == 0 && d->out_dt != GRACE_FLOAT32;
    cg_printf(&b, "#define MM_PLAIN %d\n#define MM_STORE2F mm_store2_%s\n#define MM_WGT \"%s\"\n", plain,
              d->out_dt == GRACE_FLOAT16 ? "f16" : "bf16", d->dt == GRACE_FLOAT16 ? "f16" : "bf16");
    cg_puts(&b, cg_src_matmul_helpers_wg);
    cg_puts(&b, cg_src_matmul_wgmma);
  }
  cg_printf(&b, "/* %s: %s, %s -> %s, A %s-major, B %s-major */\n", nm, form_names[d->form], dt_short(d->dt),
            dt_short(d->out_dt), d->a_kmajor ? "k" : "m", d->b_kmajor ? "k" : "n");
  cg_printf(&b, "#define MM_T %s\n#define MM_OT %s\n#define MM_LD(x) %s(x)\n#define MM_STO(x) %s(x)\n", T, OT,
            load_fn(d->dt), store_fn(d->out_dt));
  cg_printf(&b, "#define MM_VEC %d\n#define MM_MT %d\n#define MM_AK %d\n#define MM_BK %d\n#define MM_STAGES %d\n", vec,
            mt, d->a_kmajor ? 1 : 0, d->b_kmajor ? 1 : 0, tc_stages(d));
  cg_printf(&b, "#define MM_TCW %d\n#define MM_TCNJ %d\n#define MM_TCT %d\n", d->tile ? 2 : 4, d->tile ? 8 : 4,
            tc_threads(d));
  cg_printf(&b, "#define MM_UNPACK(u, f) mm_unpack_%s(u, f)\n#define MM_WPR %d\n#define MM_PREFETCH %d\n", dt_short(d->dt),
            wpr, d->prefetch ? 1 : 0);
  cg_printf(&b, "#define MM_RL %d\n#define MM_RC %d\n#define MM_RWLATE %d\n#define MM_AV %d\n#define MM_WGS %d\n", d->rl,
            d->rc, d->rw_late ? 1 : 0, d->a_vec ? 1 : 0, CG_MM_WG_STAGES);
  cg_printf(&b, "#define MM_MMA(c, a, b0, b1) mm_mma_%s(c, a, b0, b1)\n", d->dt == GRACE_FLOAT16 ? "f16" : "bf16");
  for (int i = 0; i < d->nop; i++) cg_printf(&b, "#define MM_LDE%d(x) %s(x)\n", i, load_fn(d->op_dtypes[i]));
  if (d->norm) {
    cg_printf(&b, "#define MM_NORM %d\n#define MM_NWP %d\n#define MM_NBP %d\n#define MM_EPS %.9ef\n", d->norm,
              d->norm_w ? 1 : 0, d->norm_b ? 1 : 0, d->eps);
    cg_printf(&b, "#define MM_RND(v) %s\n", d->dt == GRACE_FLOAT16 ? "grace_h2f(grace_f2h(v))"
                                          : d->dt == GRACE_BFLOAT16 ? "grace_bf2f(grace_f2bf(v))" : "(v)");
    cg_puts(&b, cg_src_matmul_norm);
  } else {
    cg_puts(&b, "#define MM_NORM 0\n#define MM_AX(i, k, v) (v)\n");
  }
  /* one 16-byte vector of B against MM_MT rows of A (GEMV_NT) */
  if (d->a_vec)
    cg_puts(&b, cg_src_matmul_dot_avec);
  else
    cg_puts(&b, cg_src_matmul_dot);

  /* the parameter struct */
  const char *ind = d->indirect ? "*" : "";
  cg_printf(&b, "struct %s_p {\n  const MM_T *%sA;\n  const MM_T *%sB;\n  MM_OT *%sC;\n  float *%sWS;\n", nm, ind, ind,
            ind, ind);
  for (int i = 0; i < d->nop; i++) cg_printf(&b, "  const %s *%sE%d;\n", cg_ctype(d->op_dtypes[i]), ind, i);
  if (d->norm) cg_printf(&b, "  const MM_T *%sNW;\n  const MM_T *%sNB;\n", ind, ind);
  cg_printf(&b, "  long long w[%d];\n", CG_MM_NWORDS + d->nop * CG_MM_OPWORDS);
  for (int i = 0; i < d->nscalar; i++) cg_printf(&b, "  const double %ss%d;\n", d->indirect ? "*" : "", i);
  if (d->form == CG_MM_GEMM_WG) cg_puts(&b, "  mm_tmap ta, tb;   /* A [M, K], B [N, K] or [K, N] (cg_matmul_wg_maps) */\n");
  cg_puts(&b, "};\n");
  emit_epilogue(&b, d);
  if (d->split) cg_puts(&b, "#define MM_OUT(v, m, n) WS_[(((long long)blockIdx.y * NB + bi) * M + (m)) * N + (n)] = (v)\n");
  else cg_puts(&b, "#define MM_OUT(v, m, n) MM_EPI(v, m, n)\n");

  static const int threads[] = {CG_MM_NT_WARPS * 32, CG_MM_NN_COLS * CG_MM_NN_KSLICES, 0,
                                CG_MM_SIMT_THREADS, 256, CG_MM_NT_WARPS * 32, CG_MM_WG_THREADS};
  cg_printf(&b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(const %s%s_p p%s) {\n",
            d->form == CG_MM_GEMM_TC ? tc_threads(d) : threads[d->form], nm,
            d->form == CG_MM_GEMM_WG ? "__grid_constant__ " : "", nm, cg_pred_params(d->pred));
  cg_pred_enter(&b, d->pred);   /* before the GEMVs' early weight loads too */
  /* the GEMVs place their own wait: after their weights start streaming */
  if (!cg_matmul_waits_late(d)) cg_pdl_enter(&b);
  const char *deref = d->indirect ? "*" : "";
  cg_printf(&b, "  const MM_T *A_ = %sp.A; const MM_T *B_ = %sp.B; MM_OT *C_ = %sp.C; float *WS_ = %sp.WS;\n", deref,
            deref, deref, deref);
  cg_puts(&b, "  (void)A_; (void)B_; (void)C_; (void)WS_;\n");
  for (int i = 0; i < d->nop; i++) cg_printf(&b, "  const %s *E%d_ = %sp.E%d;\n", cg_ctype(d->op_dtypes[i]), i, deref, i);
  if (d->norm) cg_printf(&b, "  const MM_T *NW_ = %sp.NW; const MM_T *NB_ = %sp.NB; (void)NW_; (void)NB_;\n", deref, deref);
  for (int i = 0; i < d->nscalar; i++) cg_printf(&b, "  const float S%d_ = (float)%sp.s%d;\n", i, deref, i);
  static const char *const wnames[CG_MM_NWORDS] = {"M", "N", "K", "NB", "BD0", "BD1", "BD2", "A_SM", "A_SK", "A_B0",
                                                   "A_B1", "A_B2", "B_SK", "B_SN", "B_B0", "B_B1", "B_B2", "SPLITS",
                                                   "KCHUNK"};
  for (int i = 0; i < CG_MM_NWORDS; i++) cg_printf(&b, "  const long long %s = p.w[%d]; (void)%s;\n", wnames[i], i, wnames[i]);
  /* the batch index's coordinates: no divisions for the first (or only) matrix. Every thread runs this before
   * its first load, and a bf16 GEMV thread has only a few loads, so three divisions are a large share of its life
   * (a suspected cause of the bf16 LM head's gap to a kernel without them) */
  cg_puts(&b, "  const long long bi = blockIdx.z;\n  long long i0 = 0, i1 = 0, i2 = 0;\n"
              "  if (bi) { i0 = bi / (BD1 * BD2); i1 = bi / BD2 % BD1; i2 = bi % BD2; }\n");
  cg_puts(&b, "  const long long offA = i0 * A_B0 + i1 * A_B1 + i2 * A_B2, offB = i0 * B_B0 + i1 * B_B1 + i2 * B_B2;\n");
  cg_puts(&b, "  (void)offA; (void)offB;\n");
  for (int i = 0; i < d->nop; i++) {
    int w0 = CG_MM_NWORDS + i * CG_MM_OPWORDS;
    cg_printf(&b, "  const long long oE%d = i0 * p.w[%d] + i1 * p.w[%d] + i2 * p.w[%d];\n", i, w0 + 2, w0 + 3, w0 + 4);
  }
  static const char *const bodies[] = {cg_src_matmul_gemv_nt, cg_src_matmul_gemv_nn, cg_src_matmul_gemm_tc,
                                       cg_src_matmul_gemm_simt, cg_src_matmul_splitk, cg_src_matmul_gemv_rw,
                                       cg_src_matmul_gemm_wg};
  cg_puts(&b, bodies[d->form]);
  cg_puts(&b, cg_src_matmul_end);
  for (int i = 0; i < d->nop; i++) cg_printf(&b, "#undef MM_LDE%d\n", i);
  k->src = cg_buf_take(&b, &k->src_len);
  if (!k->src) return grace_set_error(vm, GRACE_ENOMEM, "matmul codegen: out of memory");
  return GRACE_OK;
}

int cg_matmul_wg_maps(int nwords) { return (nwords + 7) / 8 * 8; }

unsigned cg_matmul_tc_smem(const cg_mm_desc *d) {
  unsigned a = d->a_kmajor ? 128 * 40 : 32 * 136, b = d->b_kmajor ? 128 * 40 : 32 * 136;
  return (unsigned)tc_stages(d) * (a + b) * 2u;
}

static unsigned cdiv(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

void cg_matmul_geometry(const cg_mm_desc *d, cg_launch *l) {
  int64_t M = (int64_t)l->words[CG_MM_M], N = (int64_t)l->words[CG_MM_N];
  int64_t nb = (int64_t)l->words[CG_MM_NB], splits = (int64_t)l->words[CG_MM_SPLITS];
  int vec = d->vec < 1 ? 1 : d->vec;
  l->grid[2] = (unsigned)(nb > 0 ? nb : 1);
  l->grid[1] = 1;
  l->block[1] = l->block[2] = 1;
  l->smem = 0;
  switch (d->form) {
  case CG_MM_GEMV_NT:
    l->block[0] = CG_MM_NT_WARPS * 32; l->grid[0] = cdiv(N, CG_MM_NT_WARPS / (d->wpr > 1 ? d->wpr : 1));
    l->grid[1] = (unsigned)splits; break;
  case CG_MM_GEMV_NN:
    l->block[0] = CG_MM_NN_COLS; l->block[1] = CG_MM_NN_KSLICES; l->grid[0] = cdiv(N, CG_MM_NN_COLS * vec);
    l->grid[1] = (unsigned)splits; break;
  case CG_MM_GEMM_TC:
    l->block[0] = (unsigned)tc_threads(d); l->grid[0] = cdiv(N, CG_MM_TC_BN); l->grid[1] = cdiv(M, CG_MM_TC_BM);
    l->smem = cg_matmul_tc_smem(d); break;
  case CG_MM_GEMM_SIMT:
    l->block[0] = CG_MM_SIMT_THREADS; l->grid[0] = cdiv(N, CG_MM_SIMT_BN); l->grid[1] = cdiv(M, CG_MM_SIMT_BM); break;
  case CG_MM_SPLITK:
    l->block[0] = 256; l->grid[0] = cdiv(M * N, 256); break;
  case CG_MM_GEMM_WG:
    l->block[0] = CG_MM_WG_THREADS; l->grid[0] = cdiv(N, 128); l->grid[1] = cdiv(M, 128);
    l->smem = CG_MM_WG_SMEM; break;
  case CG_MM_GEMV_RW:
    l->block[0] = CG_MM_NT_WARPS * 32; l->grid[0] = cdiv(N, CG_MM_NT_WARPS * (d->rc > 0 ? d->rc : 1)); break;
  }
  if (l->grid[0] == 0) l->grid[0] = 1;
  if (l->grid[1] == 0) l->grid[1] = 1;
}
