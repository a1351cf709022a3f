/* cg_fused_row.c: the ROW kernels of fused groups (reductions over the last dims and what reads them: softmax,
 * layer_norm written out): a row a warp, a row a block, or a row split over blocks (CG_ROW_SPLIT: the last block
 * of a row combines; CG_ROW_SYNC: every block of the row waits at each level), each reduction's state folded in
 * registers and combined across lanes, warps and blocks. The expressions of the members come from cg_fused.c. */
#include <stdio.h>
#include <string.h>
#include "codegen/cg_fused_int.h"
#include "codegen/cg_templates.h"

/* Expressions are built from register names and constants into fixed buffers far larger than any of them;
 * gcc cannot see that bound. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

/* One reduction's state: up to three fields of types ft[], their start values, and code fragments. */
typedef struct red_state {
  int nf;
  const char *ft[3];
  char init[3][96];
  grace_dtype adt;            /* the dtype the input is converted to */
} red_state;

static void red_setup(const grp *G, const ir_inst *in, red_state *r) {
  grace_dtype xd = G->ir->vals[G->ir->args[in->first_arg]].type.dtype;
  r->adt = xd == GRACE_FLOAT64 ? GRACE_FLOAT64 : cgf_is_f(xd) ? GRACE_FLOAT32 : GRACE_INT64;
  const char *A = cgf_rtype(r->adt);
  int fl = cgf_is_fl(r->adt);
  memset(r->init, 0, sizeof r->init);
  switch (in->op) {
  case GRACE_OP_SUM: case GRACE_OP_MEAN: r->nf = 1; r->ft[0] = A; snprintf(r->init[0], 96, "(%s)0", A); break;
  case GRACE_OP_PROD: r->nf = 1; r->ft[0] = A; snprintf(r->init[0], 96, "(%s)1", A); break;
  case GRACE_OP_ALL: r->nf = 1; r->ft[0] = "long long"; snprintf(r->init[0], 96, "1LL"); r->adt = GRACE_BOOL; break;
  case GRACE_OP_ANY: r->nf = 1; r->ft[0] = "long long"; snprintf(r->init[0], 96, "0LL"); r->adt = GRACE_BOOL; break;
  case GRACE_OP_VAR: case GRACE_OP_STD:
    r->nf = 3; r->ft[0] = r->ft[1] = r->ft[2] = "double"; r->adt = GRACE_FLOAT64;
    for (int k = 0; k < 3; k++) snprintf(r->init[k], 96, "0.0");
    break;
  case GRACE_OP_LOGSUMEXP:
    if (!fl) { r->adt = GRACE_FLOAT32; A = "float"; }
    r->nf = 2; r->ft[0] = r->ft[1] = A;
    snprintf(r->init[0], 96, "-(%s)__longlong_as_double(0x7ff0000000000000LL)", A);
    snprintf(r->init[1], 96, "(%s)0", A);
    break;
  default:   /* max, min, argmax, argmin: value and position */
    r->nf = 2; r->ft[0] = A; r->ft[1] = "long long";
    snprintf(r->init[0], 96, "(%s)0", A);
    snprintf(r->init[1], 96, "-1LL");
    break;
  }
}

/* The 8-byte fields of all the group's reduction states (a split row's workspace holds them a chunk). */
int cgf_red_fields(const grp *G) {
  int n = 0;
  for (int i = 0; i < G->n; i++) {
    const ir_inst *in = &G->ir->insts[G->mem[i]];
    if (cgf_op_kind(in->op) != GRACE_KIND_REDUCE) continue;
    red_state r;
    red_setup(G, in, &r);
    n += r.nf;
  }
  return n;
}

static int wants_max(int op) { return op == GRACE_OP_MAX || op == GRACE_OP_ARGMAX; }

/* Folds state o (fields o0..) into state r<id> (fields r<id>_0..). */
static void emit_combine(cg_buf *b, const ir_inst *in, int id, const red_state *r, const char *ind) {
  char f[3][32];
  for (int k = 0; k < 3; k++) snprintf(f[k], sizeof f[k], "r%d_%d", id, k);
  switch (in->op) {
  case GRACE_OP_SUM: case GRACE_OP_MEAN:
    if (r->adt == GRACE_INT64) cg_printf(b, "%s%s = (long long)((grace_u64)%s + (grace_u64)o0);\n", ind, f[0], f[0]);
    else cg_printf(b, "%s%s += o0;\n", ind, f[0]);
    break;
  case GRACE_OP_PROD:
    if (r->adt == GRACE_INT64) cg_printf(b, "%s%s = (long long)((grace_u64)%s * (grace_u64)o0);\n", ind, f[0], f[0]);
    else cg_printf(b, "%s%s *= o0;\n", ind, f[0]);
    break;
  case GRACE_OP_ALL: cg_printf(b, "%s%s &= o0;\n", ind, f[0]); break;
  case GRACE_OP_ANY: cg_printf(b, "%s%s |= o0;\n", ind, f[0]); break;
  case GRACE_OP_VAR: case GRACE_OP_STD:
    cg_printf(b, "%sif (o0 > 0) { if (%s == 0) { %s = o0; %s = o1; %s = o2; } else { double nn = %s + o0, dl = o1 - %s;"
              " %s += dl * o0 / nn; %s += o2 + dl * dl * %s * o0 / nn; %s = nn; } }\n",
              ind, f[0], f[0], f[1], f[2], f[0], f[1], f[1], f[2], f[0], f[0]);
    break;
  case GRACE_OP_LOGSUMEXP:
    cg_printf(b, "%sif (o0 != o0 || %s != %s) { %s = %s != %s ? %s : o0; }\n"
              "%selse if (o0 > %s) { %s = (%s == %s ? (%s)0 : %s * exp(%s - o0)) + o1; %s = o0; }\n"
              "%selse if (o0 != %s) { %s += o1 * exp(o0 - %s); }\n",
              ind, f[0], f[0], f[0], f[0], f[0], f[0],
              ind, f[0], f[1], f[0], r->init[0], r->ft[1], f[1], f[0], f[0],
              ind, r->init[0], f[1], f[0]);
    break;
  default:
    cg_printf(b, "%sif (cgf_better(o0, o1, %s, %s, %s)) { %s = o0; %s = o1; }\n", ind, f[0], f[1],
              wants_max(in->op) ? "true" : "false", f[0], f[1]);
    break;
  }
}

/* Folds element x (a register of the reduction's input dtype) at row position j into the state. */
static void emit_accumulate(cg_buf *b, const ir_inst *in, int id, const red_state *r, grace_dtype xd, const char *x) {
  cg_expr cx;
  cgf_conv(cx, xd, r->adt, x);
  switch (in->op) {
  case GRACE_OP_VAR: case GRACE_OP_STD:
    cg_printf(b, "      { const double o0 = 1.0, o1 = (double)(%s), o2 = 0.0;\n", cx);
    break;
  case GRACE_OP_LOGSUMEXP:
    cg_printf(b, "      { const %s o0 = %s, o1 = (%s)1;\n", r->ft[0], cx, r->ft[0]);
    break;
  case GRACE_OP_SUM: case GRACE_OP_MEAN: case GRACE_OP_PROD: case GRACE_OP_ALL: case GRACE_OP_ANY:
    cg_printf(b, "      { const %s o0 = %s;\n", r->ft[0], cx);
    break;
  default:
    cg_printf(b, "      { const %s o0 = %s; const long long o1 = j;\n", r->ft[0], cx);
    break;
  }
  emit_combine(b, in, id, r, "        ");
  cg_puts(b, "      }\n");
}

/* Combines the per-thread states of a row: a warp butterfly (then lane 0's result for all, so every lane
 * holds bit-identical values), and for a block per row, the warps' results through shared memory in a fixed
 * order. */
static void emit_cross(cg_buf *b, const ir_inst *in, int id, const red_state *r, const cg_fused_spec *spec) {
  cg_puts(b, "    for (int ofs = 16; ofs > 0; ofs >>= 1) {\n");
  for (int k = 0; k < r->nf; k++) cg_printf(b, "      const %s o%d = __shfl_xor_sync(0xffffffffu, r%d_%d, ofs);\n", r->ft[k], k, id, k);
  emit_combine(b, in, id, r, "      ");
  cg_puts(b, "    }\n");
  for (int k = 0; k < r->nf; k++) cg_printf(b, "    r%d_%d = __shfl_sync(0xffffffffu, r%d_%d, 0);\n", id, k, id, k);
  if (spec->strategy != CG_ROW_WARP) {
    int nw = spec->block / 32;
    for (int k = 0; k < r->nf; k++) cg_printf(b, "    __shared__ %s sh%d_%d[%d];\n", r->ft[k], id, k, nw);
    cg_puts(b, "    __syncthreads();\n    if (lane == 0) {");
    for (int k = 0; k < r->nf; k++) cg_printf(b, " sh%d_%d[threadIdx.x >> 5] = r%d_%d;", id, k, id, k);
    cg_puts(b, " }\n    __syncthreads();\n");
    for (int k = 0; k < r->nf; k++) cg_printf(b, "    r%d_%d = sh%d_%d[0];\n", id, k, id, k);
    cg_printf(b, "    for (int w = 1; w < %d; w++) {\n", nw);
    for (int k = 0; k < r->nf; k++) cg_printf(b, "      const %s o%d = sh%d_%d[w];\n", r->ft[k], k, id, k);
    emit_combine(b, in, id, r, "      ");
    cg_puts(b, "    }\n");
  }
}

/* The reduction's results from its state, as registers v<result>. */
static void emit_finish(cg_buf *b, const grp *G, const ir_inst *in, int id, const red_state *r) {
  const grace_ir *ir = G->ir;
  int32_t v = in->first_result;
  grace_dtype odt = ir->vals[v].type.dtype;
  cg_expr e, x;
  char f0[32];
  snprintf(f0, sizeof f0, "r%d_0", id);
  switch (in->op) {
  case GRACE_OP_MEAN:
    if (r->adt == GRACE_INT64) snprintf(x, sizeof x, "((double)r%d_0 / (double)inner)", id);
    else snprintf(x, sizeof x, "(r%d_0 / (%s)inner)", id, r->ft[0]);
    cgf_conv(e, r->adt == GRACE_INT64 ? GRACE_FLOAT64 : r->adt, odt, x);
    break;
  case GRACE_OP_VAR: case GRACE_OP_STD:
    snprintf(x, sizeof x, "%s(r%d_0 == 0 ? __longlong_as_double(0x7ff8000000000000LL) : r%d_2 / (r%d_0 - %d.0))",
             in->op == GRACE_OP_STD ? "sqrt" : "", id, id, id, in->attrs.flag ? 1 : 0);
    cgf_conv(e, GRACE_FLOAT64, odt, x);
    break;
  case GRACE_OP_LOGSUMEXP:
    snprintf(x, sizeof x, "((r%d_0 != r%d_0 || isinf(r%d_0)) ? r%d_0 : r%d_0 + log(r%d_1))", id, id, id, id, id, id);
    cgf_conv(e, r->adt, odt, x);
    break;
  case GRACE_OP_ARGMAX: case GRACE_OP_ARGMIN:
    snprintf(x, sizeof x, "(r%d_1 + %d)", id, grace_index_base(G->vm));
    cgf_conv(e, GRACE_INT64, odt, x);
    break;
  case GRACE_OP_ALL: case GRACE_OP_ANY: cgf_conv(e, GRACE_BOOL, odt, f0); break;
  default: cgf_conv(e, r->adt, odt, f0); break;   /* sum, prod, max/min values */
  }
  cg_printf(b, "    const %s v%d = %s;\n", cgf_rtype(odt), v, e);
  if (in->nout == 2) {
    snprintf(x, sizeof x, "(r%d_1 + %d)", id, grace_index_base(G->vm));
    cgf_conv(e, GRACE_INT64, ir->vals[v + 1].type.dtype, x);
    cg_printf(b, "    const %s v%d = %s;\n", cgf_rtype(ir->vals[v + 1].type.dtype), v + 1, e);
  }
}

static int ext_use(const grp *G, const cg_group_io *io, int k) {
  int use = 0;
  for (int i = 0; i < G->n; i++) {
    const ir_inst *in = &G->ir->insts[G->mem[i]];
    int sp = cgf_op_kind(in->op) == GRACE_KIND_REDUCE ? SP_FULL : G->space[in->first_result];
    for (int j = 0; j < in->nin; j++) if (G->ir->args[in->first_arg + j] == io->ext[k]) use |= sp;
  }
  return use;
}

/* Loads of the externals read per element at row position j (offsets: row part ro<k> + inner part). */
static void emit_inner_loads(cg_buf *b, const grp *G, const cg_group_io *io, const cg_fused_spec *spec, int wext) {
  int nd = spec->ndim, nk = spec->nkept;
  if (nd - nk > 1) {
    cg_puts(b, "      long long jr = j;\n");
    for (int d = nd - 1; d > nk; d--) cg_printf(b, "      const long long j%d = jr %% p.w[%d]; jr /= p.w[%d];\n", d, 2 + d, 2 + d);
    cg_printf(b, "      const long long j%d = jr;\n", nk);
  } else if (nd - nk == 1) cg_printf(b, "      const long long j%d = j;\n", nk);
  for (int k = 0; k < io->next; k++) {
    if (!(ext_use(G, io, k) & SP_FULL)) continue;
    cg_printf(b, "      long long o%d = ro%d", k, k);
    for (int d = nk; d < nd; d++) cg_printf(b, " + j%d * p.w[%d]", d, wext + k * nd + d);
    cg_puts(b, ";\n");
    char lv[32];
    cg_expr e;
    snprintf(lv, sizeof lv, "a%d[o%d]", k, k);
    grace_dtype dt = G->ir->vals[io->ext[k]].type.dtype;
    cgf_load_expr(e, dt, lv);
    cg_printf(b, "      const %s e%d = %s;\n", cgf_rtype(dt), k, e);
  }
}

/* The members and reductions of pass L (0: the stores over the row) at row position j. */
static grace_status emit_row_step(cg_buf *b, const grp *G, const cg_group_io *io, const cg_fused_spec *spec, int L,
                                  int nr, const int *ids, const red_state *rs) {
  const grace_ir *ir = G->ir;
  int nd = spec->ndim, nk = spec->nkept, wext = 2 + nd, wst = 2 + nd + io->next * nd;
  emit_inner_loads(b, G, io, spec, wext);
  grace_status st = cgf_emit_members(b, G, io, SP_FULL, 0, L ? L - 1 : 1 << 30);
  if (st != GRACE_OK) return st;
  for (int r = 0; r < nr; r++) {
    const ir_inst *in = &ir->insts[G->mem[ids[r]]];
    cg_expr x;
    grace_dtype xd;
    cgf_operand(G, ir->args[in->first_arg], x, &xd, io->ext, io->next);
    emit_accumulate(b, in, ids[r], &rs[r], xd, x);
  }
  for (int s = 0; !L && s < io->nstore; s++) {
    if (G->space[io->store[s]] != SP_FULL) continue;
    cg_printf(b, "      { long long so = so%d", s);
    for (int d = nk; d < nd; d++) cg_printf(b, " + j%d * p.w[%d]", d, wst + s * nd + d);
    cg_expr e;
    char x[32];
    snprintf(x, sizeof x, "v%d", io->store[s]);
    cgf_store_expr(e, ir->vals[io->store[s]].type.dtype, x);
    cg_puts(b, "; ");
    if (spec->layout[io->next + s] == CG_PARTIAL) {   /* once per element: from coordinate 0 of its broadcast dims */
      cg_printf(b, "if (on%d", s);
      for (int d = nk; d < nd; d++) cg_printf(b, " && (p.w[%d] != 0 || j%d == 0)", wst + s * nd + d, d);
      cg_puts(b, ") ");
    }
    cg_printf(b, "a%d[so] = %s; }\n", io->next + s, e);
  }
  return GRACE_OK;
}

/* A loop over the thread's positions of [jb, je): CG_ROW_UNROLL steps at once (their loads issued together;
 * the same positions in the same order as one at a time), the tail one by one. A warp's row (<= 1024 elements)
 * keeps the plain loop: unrolled, its softmax ran slower (bench/RESULTS.md, softmax [4096, 1024]). */
static grace_status emit_row_loop(cg_buf *b, const grp *G, const cg_group_io *io, const cg_fused_spec *spec, int L,
                                  int nr, const int *ids, const red_state *rs) {
  grace_status st;
  if (spec->strategy == CG_ROW_WARP) {
    cg_puts(b, "    for (long long j = jb + t0; j < je; j += tstep) {\n");
    if ((st = emit_row_step(b, G, io, spec, L, nr, ids, rs)) != GRACE_OK) return st;
    cg_puts(b, "    }\n");
    return GRACE_OK;
  }
  cg_printf(b, "    for (long long jn = jb + t0; jn < je; jn += %d * tstep) {\n"
               "     if (jn + %d * tstep < je) {\n#pragma unroll\n"
               "     for (int u = 0; u < %d; u++) {\n      const long long j = jn + u * tstep;\n",
            CG_ROW_UNROLL, CG_ROW_UNROLL - 1, CG_ROW_UNROLL);
  st = emit_row_step(b, G, io, spec, L, nr, ids, rs);
  if (st != GRACE_OK) return st;
  cg_puts(b, "     }\n     } else for (long long j = jn; j < je; j += tstep) {\n");
  if ((st = emit_row_step(b, G, io, spec, L, nr, ids, rs)) != GRACE_OK) return st;
  cg_puts(b, "     }\n    }\n");
  return GRACE_OK;
}

grace_status cgf_gen_row(cg_buf *b, const grp *G, const cg_group_io *io, const cg_fused_spec *spec) {
  const grace_ir *ir = G->ir;
  int nd = spec->ndim, nk = spec->nkept;
  int wext = 2 + nd, wst = 2 + nd + io->next * nd;
  int split = cg_fused_split(spec), sync = spec->strategy == CG_ROW_SYNC;
  cgf_emit_params(b, ir, io, spec, wst + io->nstore * nd + split);
  grace_status st;
  cg_puts(b, "  const long long rows = p.w[0], inner = p.w[1];\n  const int lane = threadIdx.x & 31;\n");
  if (spec->strategy == CG_ROW_WARP)
    cg_printf(b, "  const long long row0 = (long long)blockIdx.x * %d + (threadIdx.x >> 5), rstep = (long long)gridDim.x * %d;\n"
              "  const int t0 = lane, tstep = 32;\n", spec->block / 32, spec->block / 32);
  else cg_puts(b, "  const long long row0 = blockIdx.x, rstep = gridDim.x;\n  const int t0 = threadIdx.x, tstep = blockDim.x;\n");
  int nfield = cgf_red_fields(G);   /* a split row's fields a chunk, each level's after the level before's */
  if (split) {
    /* block b takes chunk b % nchunk of row b / nchunk (CG_ROW_SYNC: exactly one, the grid is rows x nchunk) */
    cg_printf(b, "  const long long nchunk = p.w[%d], csize = (inner + nchunk - 1) / nchunk;\n", wst + io->nstore * nd);
    cg_puts(b, "  for (long long blk = row0; blk < rows * nchunk; blk += rstep) {\n"
               "    const long long row = blk / nchunk, chunk = blk % nchunk;\n"
               "    const long long jb = chunk * csize, je = jb + csize < inner ? jb + csize : inner;\n");
  } else {
    cg_puts(b, "  for (long long row = row0; row < rows; row += rstep) {\n"
               "    const long long jb = 0, je = inner;\n");
  }
  /* the row's offsets in every operand */
  for (int k = 0; k < io->next; k++) cg_printf(b, "    long long ro%d = 0;\n", k);
  for (int s = 0; s < io->nstore; s++) {
    cg_printf(b, "    long long so%d = 0;\n", s);
    if (spec->layout[io->next + s] == CG_PARTIAL) cg_printf(b, "    int on%d = 1;\n", s);
  }
  if (nk > 0) {
    cg_puts(b, "    { long long q = row;\n");
    for (int d = nk - 1; d >= 0; d--) {
      cg_printf(b, "      { const long long i = q %% p.w[%d]; q /= p.w[%d];", 2 + d, 2 + d);
      for (int k = 0; k < io->next; k++) cg_printf(b, " ro%d += i * p.w[%d];", k, wext + k * nd + d);
      for (int s = 0; s < io->nstore; s++) {
        cg_printf(b, " so%d += i * p.w[%d];", s, wst + s * nd + d);
        if (spec->layout[io->next + s] == CG_PARTIAL) cg_printf(b, " on%d &= p.w[%d] != 0 || i == 0;", s, wst + s * nd + d);
      }
      cg_puts(b, " }\n");
    }
    cg_puts(b, "    }\n");
  }
  /* externals read per row */
  for (int k = 0; k < io->next; k++) {
    if (!(ext_use(G, io, k) & SP_ROW)) continue;
    char lv[32];
    cg_expr e;
    snprintf(lv, sizeof lv, "a%d[ro%d]", k, k);
    grace_dtype dt = ir->vals[io->ext[k]].type.dtype;
    cgf_load_expr(e, dt, lv);
    cg_printf(b, "    const %s e%d = %s;\n", cgf_rtype(dt), k, e);
  }
  if ((st = cgf_emit_members(b, G, io, SP_ROW, 0, 0)) != GRACE_OK) return st;
  for (int L = 1, off = 0; L <= G->maxlevel; L++) {
    red_state rs[CG_MAX_ARGS];
    int ids[CG_MAX_ARGS], nr = 0;
    for (int i = 0; i < G->n && nr < CG_MAX_ARGS; i++) {
      const ir_inst *in = &ir->insts[G->mem[i]];
      if (cgf_op_kind(in->op) != GRACE_KIND_REDUCE || G->level[in->first_result] != L) continue;
      ids[nr] = i;
      red_setup(G, in, &rs[nr]);
      for (int k = 0; k < rs[nr].nf; k++) cg_printf(b, "    %s r%d_%d = %s;\n", rs[nr].ft[k], i, k, rs[nr].init[k]);
      nr++;
    }
    cg_printf(b, "    /* pass %d */\n", L);
    if ((st = emit_row_loop(b, G, io, spec, L, nr, ids, rs)) != GRACE_OK) return st;
    for (int r = 0; r < nr; r++) emit_cross(b, &ir->insts[G->mem[ids[r]]], ids[r], &rs[r], spec);
    if (split) {
      /* publish this chunk's states; then (the last block, or every block once all have published) the row's
         states from all chunks: thread t folds chunks t, t + blockDim.x, ..., then the block's fixed-order cross */
      if (!sync) cg_puts(b, "    int cgf_mine = 0;\n");
      cg_printf(b, "    if (threadIdx.x == 0) {\n      unsigned long long *part = ws + rows + (row * nchunk + chunk) * %d + %d;\n",
                nfield, off);
      for (int r = 0, o = 0; r < nr; r++)
        for (int k = 0; k < rs[r].nf; k++, o++) cg_printf(b, "      *(%s *)&part[%d] = r%d_%d;\n", rs[r].ft[k], o, ids[r], k);
      if (sync)
        cg_printf(b, "      __threadfence();\n      atomicAdd(&ws[row], 1ULL);\n"
                     "      while (*(volatile unsigned long long *)&ws[row] < (unsigned long long)nchunk * %d) {\n"
                     "#if __CUDA_ARCH__ >= 700\n        __nanosleep(32);\n#endif\n      }\n"
                     "      __threadfence();\n    }\n    __syncthreads();\n    {\n", L);
      else
        /* whether this block is the row's last: thread 0 knows, and the barrier itself tells the others
           (__syncthreads_or), so no shared flag is left for the next row's thread 0 to overwrite */
        cg_puts(b, "      __threadfence();\n"
                   "      cgf_mine = atomicAdd(&ws[row], 1ULL) == (unsigned long long)(nchunk - 1);\n    }\n"
                   "    if (__syncthreads_or(cgf_mine)) {\n    __threadfence();\n");
      for (int r = 0; r < nr; r++)
        for (int k = 0; k < rs[r].nf; k++) cg_printf(b, "    r%d_%d = %s;\n", ids[r], k, rs[r].init[k]);
      cg_printf(b, "    for (long long c = threadIdx.x; c < nchunk; c += blockDim.x) {\n"
                   "      const unsigned long long *q = ws + rows + (row * nchunk + c) * %d + %d;\n", nfield, off);
      for (int r = 0, o = 0; r < nr; r++) {
        cg_puts(b, "      {");
        for (int k = 0; k < rs[r].nf; k++, o++)
          cg_printf(b, " const %s o%d = *(const volatile %s *)&q[%d];", rs[r].ft[k], k, rs[r].ft[k], o);
        cg_puts(b, "\n");
        emit_combine(b, &ir->insts[G->mem[ids[r]]], ids[r], &rs[r], "        ");
        cg_puts(b, "      }\n");
      }
      cg_puts(b, "    }\n");
      for (int r = 0; r < nr; r++) emit_cross(b, &ir->insts[G->mem[ids[r]]], ids[r], &rs[r], spec);
      if (sync) cg_puts(b, "    }\n");   /* the cross's shared arrays in their own scope */
      for (int r = 0; r < nr; r++) off += rs[r].nf;
    }
    for (int r = 0; r < nr; r++) emit_finish(b, G, &ir->insts[G->mem[ids[r]]], ids[r], &rs[r]);
    if ((st = cgf_emit_members(b, G, io, SP_ROW, L, L)) != GRACE_OK) return st;
  }
  int full_stores = 0;
  for (int s = 0; s < io->nstore; s++) full_stores |= G->space[io->store[s]] == SP_FULL;
  if (full_stores) {
    cg_puts(b, "    /* stores over the row */\n");
    if ((st = emit_row_loop(b, G, io, spec, 0, 0, NULL, NULL)) != GRACE_OK) return st;
  }
  for (int s = 0; s < io->nstore; s++) {
    if (G->space[io->store[s]] != SP_ROW) continue;
    cg_expr e;
    char x[32];
    snprintf(x, sizeof x, "v%d", io->store[s]);
    cgf_store_expr(e, ir->vals[io->store[s]].type.dtype, x);
    cg_printf(b, "    if (t0 == 0%s) a%d[row] = %s;\n", sync ? " && chunk == 0" : "", io->next + s, e);
  }
  if (split && !sync) cg_puts(b, "    }\n");
  if (spec->strategy != CG_ROW_WARP) cg_puts(b, "    __syncthreads();\n");
  cg_puts(b, "  }\n}\n");
  return GRACE_OK;
}
