/* cg_fused.c: CUDA source for fused POINTWISE and ROW groups (see cg_fused.h): the group's analysis, its plan, the
 * expressions of its members and the POINTWISE kernel; ROW kernels are in cg_fused_row.c. Every member op is emitted as
 * one C expression with the CPU backend's semantics (cpu/cpu_pointwise.c, cpu/cpu_reduce.c): each op computes in
 * its compute dtype (inputs converted and narrowed to it: integers wrap, float16/bfloat16 round), its result is
 * narrowed to its own dtype, so a fused chain gives what the op-by-op CPU run gives. Registers: float for
 * f32/f16/bf16, double for f64, long long for every integer dtype and bool (0/1).
 * Loops evaluate every member they can and leave dead code to the compiler (unused loads are removed), which
 * keeps the emitter simple: a ROW kernel's passes re-evaluate the prologue instead of holding it. The device
 * helpers (cgf_*) are in cg_fused.cuh. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "codegen/cg_fused_int.h"
#include "codegen/cg_templates.h"
#include "ir/ir_pointwise.h"

/* Expressions are built from register names and constants into fixed buffers far larger than any of them;
 * gcc cannot see that bound. */
#pragma GCC diagnostic ignored "-Wformat-truncation"


static int is_member(const grp *G, int32_t v) {
  if (v < 0) return 0;
  int i = G->ir->vals[v].inst;
  return G->f->inst_group[i] == G->g;
}
int cgf_op_kind(int op) { return op < GRACE_NOPS ? (int)grace_op_kind((grace_op)op) : -1; }
static int same_sizes(const ir_type *a, const ir_type *b) {
  if (a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++) if (a->sizes[d] != b->sizes[d]) return 0;
  return 1;
}

static void grp_free(grp *G) {
  size_t nv = (size_t)G->ir->nval + 1;
  if (G->space) grace_realloc(G->vm, G->space, nv, 0);
  if (G->level) grace_realloc(G->vm, G->level, nv * 4, 0);
  if (G->alias) grace_realloc(G->vm, G->alias, nv * 4, 0);
  G->space = NULL; G->level = NULL; G->alias = NULL;
}

static grace_status unsupported(grace_vm *vm, const char *why, int v) {
  return grace_set_error(vm, GRACE_EUNSUPPORTED, "fused kernel: %s (value %%%d)", why, v);
}

/* Whether a value of type t broadcasts to sizes[nd] (each of its dims, right-aligned, 1 or the same size). */
static int bcast_fits(const ir_type *t, int nd, const int64_t *sizes) {
  if (t->ndim > nd) return 0;
  for (int d = 0; d < t->ndim; d++) {
    int64_t s = t->sizes[d], want = sizes[d + nd - t->ndim];
    if (s != 1 && s != want) return 0;
  }
  return 1;
}

static grace_status grp_init(grace_vm *vm, const grace_ir *ir, const ir_fusion *f, int g, grp *G) {
  memset(G, 0, sizeof *G);
  G->vm = vm; G->ir = ir; G->f = f; G->g = g;
  if (g < 0 || g >= f->ngroup) return grace_set_error(vm, GRACE_EINTERNAL, "fused kernel: no group %d", g);
  const ir_fuse_group *fg = &f->groups[g];
  if (fg->kind != IR_FUSE_POINTWISE && fg->kind != IR_FUSE_ROW)
    return grace_set_error(vm, GRACE_EINTERNAL, "fused kernel: group %d is not pointwise or row", g);
  G->n = fg->n;
  G->mem = f->members + fg->first;
  G->row = fg->kind == IR_FUSE_ROW;
  size_t nv = (size_t)ir->nval + 1;
  G->space = grace_realloc(vm, NULL, 0, nv);
  G->level = grace_realloc(vm, NULL, 0, nv * 4);
  G->alias = grace_realloc(vm, NULL, 0, nv * 4);
  if (!G->space || !G->level || !G->alias) { grp_free(G); return grace_set_error(vm, GRACE_ENOMEM, "fused kernel: out of host memory"); }
  memset(G->space, 0, nv);
  memset(G->level, 0, nv * 4);
  for (size_t v = 0; v < nv; v++) G->alias[v] = -1;
  /* the iteration domain */
  G->pnd = 0;
  for (int i = 0; i < G->n; i++) {
    const ir_inst *in = &ir->insts[G->mem[i]];
    if (cgf_op_kind(in->op) == GRACE_KIND_REDUCE && !G->red) {
      G->dom = &ir->vals[ir->args[in->first_arg]].type;
      G->red = &ir->vals[in->first_result].type;
      G->keep = G->red->ndim == G->dom->ndim;
      const grace_attrs *a = &in->attrs;
      if (!a->ndims) G->dims = G->dom->ndim ? (1u << G->dom->ndim) - 1 : 0;
      for (int k = 0; k < a->ndims; k++) {
        int64_t d = a->dims[k] < 0 ? a->dims[k] + G->dom->ndim : a->dims[k];
        if (d >= 0 && d < GRACE_MAX_DIMS) G->dims |= 1u << d;
      }
    }
    for (int r = 0; r < in->nout; r++) {
      const ir_type *t = &ir->vals[in->first_result + r].type;
      if (t->ndim > G->pnd) {
        for (int d = G->pnd - 1; d >= 0; d--) G->pdom[d + t->ndim - G->pnd] = G->pdom[d];
        for (int d = 0; d < t->ndim - G->pnd; d++) G->pdom[d] = 1;
        G->pnd = t->ndim;
      }
      for (int d = 0; d < t->ndim; d++) {
        int64_t *s = &G->pdom[d + G->pnd - t->ndim];
        if (*s == 1) *s = t->sizes[d];
      }
    }
  }
  if (G->row && !G->red) { grp_free(G); return grace_set_error(vm, GRACE_EINTERNAL, "fused kernel: row group without a reduction"); }
  /* spaces and levels, in program order */
  for (int i = 0; i < G->n; i++) {
    const ir_inst *in = &ir->insts[G->mem[i]];
    int kind = cgf_op_kind(in->op);
    int lvl = 0, full = 0;
    for (int j = 0; j < in->nin; j++) {
      int32_t a = ir->args[in->first_arg + j];
      if (a < 0) continue;
      int32_t b = ir_view_base(ir, a);
      if (b != a && is_member(G, b)) {
        /* a view of a member: only reshapes of a reduction's per-row result can be read in registers */
        if (!G->row || G->space[b] != SP_ROW || !ir_view_keeps_order(ir, a) ||
            ir_type_numel(&ir->vals[a].type) != ir_type_numel(&ir->vals[b].type)) {
          grp_free(G);
          return unsupported(vm, "a view of a value computed in the same kernel", a);
        }
        G->alias[a] = b;
        a = b;
      }
      if (is_member(G, a)) {
        if (G->level[a] > lvl) lvl = G->level[a];
        if (G->space[a] == SP_FULL) full = 1;
      } else if (G->row && kind != GRACE_KIND_REDUCE && !same_sizes(&ir->vals[a].type, G->red) &&
                 ir_type_numel(&ir->vals[a].type) > 1) {
        full = 1;   /* an external over the base shape */
      }
    }
    for (int r = 0; r < in->nout; r++) {
      int32_t v = in->first_result + r;
      if (kind == GRACE_KIND_REDUCE) { G->space[v] = SP_ROW; G->level[v] = lvl + 1; }
      else {
        G->level[v] = lvl;
        G->space[v] = !G->row ? SP_FULL : (full || !same_sizes(&ir->vals[v].type, G->red)) ? SP_FULL : SP_ROW;
      }
      if (G->level[v] > G->maxlevel) G->maxlevel = G->level[v];
    }
    if (G->row && kind != GRACE_KIND_REDUCE) {
      /* a per-row value read over the base shape must line up with the kept dims */
      for (int j = 0; j < in->nin; j++) {
        int32_t a = ir->args[in->first_arg + j], b = a >= 0 && G->alias[a] >= 0 ? G->alias[a] : a;
        if (b >= 0 && is_member(G, b) && G->space[b] == SP_ROW && G->space[in->first_result] == SP_FULL &&
            !ir_row_lines_up(&ir->vals[a].type, G->dom, G->dims)) {
          grp_free(G);
          return unsupported(vm, "a per-row value broadcast over the base shape across rows", a);
        }
      }
    }
    if (G->row && kind == GRACE_KIND_REDUCE) {
      int32_t x = ir->args[in->first_arg];
      if (!same_sizes(&ir->vals[x].type, G->dom)) { grp_free(G); return unsupported(vm, "reductions over different shapes", x); }
      if (!same_sizes(&ir->vals[in->first_result].type, G->red)) {
        grp_free(G);
        return unsupported(vm, "reductions with different keepdim", in->first_result);
      }
    }
  }
  return GRACE_OK;
}

/* ---- io ---- */
static int add_unique(int32_t *list, int *n, int32_t v) {
  for (int i = 0; i < *n; i++) if (list[i] == v) return 1;
  if (*n >= CG_MAX_ARGS) return 0;
  list[(*n)++] = v;
  return 1;
}

grace_status cg_fused_io(grace_vm *vm, const grace_ir *ir, const ir_fusion *f, int g, cg_group_io *io) {
  grp G;
  grace_status st = grp_init(vm, ir, f, g, &G);
  if (st != GRACE_OK) return st;
  memset(io, 0, sizeof *io);
  int ok = 1;
  for (int i = 0; i < G.n && ok; i++) {
    const ir_inst *in = &ir->insts[G.mem[i]];
    for (int j = 0; j < in->nin && ok; j++) {
      int32_t a = ir->args[in->first_arg + j];
      if (a < 0 || is_member(&G, a) || G.alias[a] >= 0) continue;
      if (ir->insts[ir->vals[a].inst].op == IR_OP_LITERAL) continue;
      if (in->op == GRACE_OP_COPY_ && j == 0) continue;   /* the destination is written, not read */
      ok = add_unique(io->ext, &io->next, a);
    }
  }
  for (int k = 0; k < ir->ninst && ok; k++) {
    const ir_inst *in = &ir->insts[k];
    int kg = f->inst_group[k];
    if (kg < 0 || kg == g) continue;
    for (int j = 0; j < in->nin && ok; j++) {
      int32_t v = ir_view_base(ir, ir->args[in->first_arg + j]);
      if (is_member(&G, v)) ok = add_unique(io->store, &io->nstore, v);
    }
  }
  for (int i = 0; i < ir->nout && ok; i++) {
    int32_t v = ir_view_base(ir, ir->outputs[i]);
    if (is_member(&G, v)) ok = add_unique(io->store, &io->nstore, v);
  }
  for (int i = 0; i < ir->nwrite && ok; i++) {
    int32_t v = ir_view_base(ir, ir->writes[i].value);
    if (is_member(&G, v)) ok = add_unique(io->store, &io->nstore, v);
  }
  if (ok && io->next + io->nstore > CG_MAX_ARGS) ok = 0;
  /* stored values broadcast into the iteration shape (POINTWISE) or the base shape (ROW), or are per-row values */
  for (int i = 0; i < io->nstore && ok; i++) {
    const ir_type *t = &ir->vals[io->store[i]].type;
    int fits;
    if (!G.row) fits = bcast_fits(t, G.pnd, G.pdom);
    else if (G.space[io->store[i]] == SP_ROW) fits = ir_type_numel(t) == ir_type_numel(G.red);
    else fits = bcast_fits(t, G.dom->ndim, G.dom->sizes);
    if (!fits) { grp_free(&G); return unsupported(vm, "a stored value that does not broadcast to the kernel's shape", io->store[i]); }
  }
  grp_free(&G);
  if (!ok) return grace_set_error(vm, GRACE_EUNSUPPORTED, "fused kernel: more than %d tensor operands", CG_MAX_ARGS);
  return GRACE_OK;
}

/* ---- plan ---- */
/* Strides of a tensor (sizes tsz, strides tst, rank tnd) broadcast to a shape of rank nd. */
static void bcast_strides(int tnd, const int64_t *tsz, const int64_t *tst, int nd, const int64_t *sizes, int64_t *out) {
  for (int d = 0; d < nd; d++) {
    int td = d - (nd - tnd);
    out[d] = td < 0 || tsz[td] == 1 || sizes[d] == 1 ? 0 : tst[td];
  }
}

/* Strides over sizes[nd] of a contiguous value of type t broadcast to it (0 where it is broadcast): where a stored
 * value's elements go. */
static void store_strides(const ir_type *t, int nd, const int64_t *sizes, int64_t *out) {
  int64_t cst[GRACE_MAX_DIMS], c = 1;
  for (int d = t->ndim - 1; d >= 0; d--) { cst[d] = c; c *= t->sizes[d]; }
  bcast_strides(t->ndim, t->sizes, cst, nd, sizes, out);
}


grace_status cg_fused_plan(grace_vm *vm, const grace_ir *ir, const ir_fusion *f, int g, const cg_group_io *io,
                           const cg_tensor *ext, int indirect, int sms, cg_fused_spec *spec, cg_fused_geom *geom) {
  grp G;
  grace_status st = grp_init(vm, ir, f, g, &G);
  if (st != GRACE_OK) return st;
  memset(spec, 0, sizeof *spec);
  memset(geom, 0, sizeof *geom);
  spec->indirect = indirect ? 1 : 0;
  for (int i = 0; i < G.n; i++) spec->inplace |= ir->insts[G.mem[i]].op == GRACE_OP_COPY_;
  if (!G.row) {
    spec->kind = CG_POINTWISE;
    int nd = G.pnd, nall = io->next + io->nstore;
    int64_t sizes[GRACE_MAX_DIMS], str[CG_MAX_ARGS][GRACE_MAX_DIMS];
    for (int d = 0; d < nd; d++) sizes[d] = G.pdom[d];
    for (int k = 0; k < io->next; k++) bcast_strides(ext[k].ndim, ext[k].sizes, ext[k].strides, nd, sizes, str[k]);
    for (int s = 0; s < io->nstore; s++) store_strides(&ir->vals[io->store[s]].type, nd, sizes, str[io->next + s]);
    /* coalesce: drop size-1 dims, merge neighbours every operand steps through as one */
    int m = 0;
    for (int d = 0; d < nd; d++) {
      if (sizes[d] == 1) continue;
      if (m > 0) {
        int merge = 1;
        for (int k = 0; k < nall; k++) merge &= str[k][m - 1] == str[k][d] * sizes[d];
        if (merge) {
          sizes[m - 1] *= sizes[d];
          for (int k = 0; k < nall; k++) str[k][m - 1] = str[k][d];
          continue;
        }
      }
      sizes[m] = sizes[d];
      for (int k = 0; k < nall; k++) str[k][m] = str[k][d];
      m++;
    }
    if (m == 0) { sizes[0] = 1; for (int k = 0; k < nall; k++) str[k][0] = 0; m = 1; }
    geom->ndim = spec->ndim = m;
    geom->n = 1;
    for (int d = 0; d < m; d++) { geom->sizes[d] = sizes[d]; geom->n *= sizes[d]; }
    int maxsz = 1, any_strided = 0;
    for (int s = 0; s < io->nstore; s++) {
      int64_t c = 1;
      int lin = 1;
      for (int d = m - 1; d >= 0; d--) { lin &= str[io->next + s][d] == c || sizes[d] == 1; c *= sizes[d]; }
      spec->layout[io->next + s] = lin ? CG_LINEAR : CG_PARTIAL;
      any_strided |= !lin;
      memcpy(geom->store_strides[s], str[io->next + s], sizeof str[0]);
    }
    for (int k = 0; k < io->next; k++) {
      int64_t c = 1;
      int lin = 1, zero = 1;
      for (int d = m - 1; d >= 0; d--) {
        lin &= str[k][d] == c || sizes[d] == 1;
        zero &= str[k][d] == 0;
        c *= sizes[d];
      }
      spec->layout[k] = zero ? CG_SCALAR : lin ? CG_LINEAR : CG_STRIDED;
      any_strided |= spec->layout[k] == CG_STRIDED;
      memcpy(geom->ext_strides[k], str[k], sizeof str[k]);
      int es = (int)grace_dtype_size(ext[k].dtype);
      if (spec->layout[k] == CG_LINEAR && es > maxsz) maxsz = es;
    }
    for (int s = 0; s < io->nstore; s++) {
      int es = (int)grace_dtype_size(ir->vals[io->store[s]].type.dtype);
      if (es > maxsz) maxsz = es;
    }
    spec->vec = any_strided || geom->n < 4096 ? 1 : 16 / maxsz;
    if (spec->vec < 1) spec->vec = 1;
    spec->wide = geom->n >= ((int64_t)1 << 31);
    spec->block = 256;
  } else {
    spec->kind = CG_ROW;
    const ir_type *dom = G.dom;
    int nd = dom->ndim, order[GRACE_MAX_DIMS], no = 0;
    for (int d = 0; d < nd; d++) if (!(G.dims >> d & 1)) order[no++] = d;
    spec->nkept = no;
    for (int d = 0; d < nd; d++) if (G.dims >> d & 1) order[no++] = d;
    geom->ndim = spec->ndim = nd;
    geom->rows = geom->inner = 1;
    for (int i = 0; i < nd; i++) {
      geom->sizes[i] = dom->sizes[order[i]];
      if (i < spec->nkept) geom->rows *= geom->sizes[i]; else geom->inner *= geom->sizes[i];
    }
    geom->n = geom->rows * geom->inner;
    /* where each external is read: over the base shape, per row, or both */
    int use[CG_MAX_ARGS] = {0};
    for (int i = 0; i < G.n; i++) {
      const ir_inst *in = &ir->insts[G.mem[i]];
      int sp = cgf_op_kind(in->op) == GRACE_KIND_REDUCE ? SP_FULL : G.space[in->first_result];
      for (int j = 0; j < in->nin; j++)
        for (int k = 0; k < io->next; k++) if (io->ext[k] == ir->args[in->first_arg + j]) use[k] |= sp;
    }
    int64_t dst[GRACE_MAX_DIMS];
    for (int k = 0; k < io->next; k++) {
      int64_t full[GRACE_MAX_DIMS], rowst[GRACE_MAX_DIMS];
      bcast_strides(ext[k].ndim, ext[k].sizes, ext[k].strides, nd, dom->sizes, full);
      if (G.keep) memcpy(rowst, full, sizeof full);
      else {
        int64_t rs[GRACE_MAX_DIMS];
        bcast_strides(ext[k].ndim, ext[k].sizes, ext[k].strides, G.red->ndim, G.red->sizes, rs);
        for (int d = 0, r = 0; d < nd; d++) rowst[d] = (G.dims >> d & 1) ? 0 : rs[r++];
      }
      for (int d = 0; d < nd; d++) if (G.dims >> d & 1) rowst[d] = 0;
      const int64_t *src = (use[k] & SP_FULL) ? full : rowst;
      if ((use[k] & SP_FULL) && (use[k] & SP_ROW) && memcmp(full, rowst, sizeof full)) {
        grp_free(&G);
        return unsupported(vm, "an operand read both per element and per row", io->ext[k]);
      }
      for (int i = 0; i < nd; i++) geom->ext_strides[k][i] = src[order[i]];
      spec->layout[k] = CG_STRIDED;
    }
    for (int s = 0; s < io->nstore; s++) {
      /* a per-row value is stored at the row index: these strides go unused */
      store_strides(G.space[io->store[s]] == SP_ROW ? dom : &ir->vals[io->store[s]].type, nd, dom->sizes, dst);
      int part = 0;
      for (int d = 0; d < nd; d++) part |= dst[d] == 0 && dom->sizes[d] > 1;
      spec->layout[io->next + s] = part ? CG_PARTIAL : CG_LINEAR;
      for (int i = 0; i < nd; i++) geom->store_strides[s][i] = dst[order[i]];
    }
    spec->strategy = geom->inner <= 1024 ? CG_ROW_WARP : CG_ROW_BLOCK;
    spec->block = spec->strategy == CG_ROW_WARP ? 256 : 512;
    /* few long rows: split over blocks; when every reduction reads the input directly (one level) and nothing
     * is stored over the base shape the row's last block finishes it, else all of them wait for each other */
    int full_store = 0, nfield = cgf_red_fields(&G);
    for (int s = 0; s < io->nstore; s++) full_store |= G.space[io->store[s]] == SP_FULL;
    if (sms < 1) sms = 1;
    if (cg_fused_few_long_rows(geom->rows, geom->inner, sms)) {
      int64_t want = (4 * (int64_t)sms + geom->rows - 1) / geom->rows, most = geom->inner / 8192;
      geom->nchunk = want < most ? want : most;
      if (geom->nchunk >= 2) {
        spec->strategy = G.maxlevel == 1 && !full_store ? CG_ROW_SPLIT : CG_ROW_SYNC;
        geom->ws_bytes = (size_t)(8 * (geom->rows + geom->rows * geom->nchunk * nfield));
      } else geom->nchunk = 0;
    }
    spec->wide = geom->n >= ((int64_t)1 << 31);
  }
  grp_free(&G);
  return GRACE_OK;
}

/* ---- expressions ---- */

int cgf_is_f(grace_dtype dt) { return dt == GRACE_FLOAT32 || dt == GRACE_FLOAT16 || dt == GRACE_BFLOAT16; }
int cgf_is_fl(grace_dtype dt) { return cgf_is_f(dt) || dt == GRACE_FLOAT64; }
const char *cgf_rtype(grace_dtype dt) { return cgf_is_f(dt) ? "float" : dt == GRACE_FLOAT64 ? "double" : "long long"; }

/* A register of dtype `from` as a register of dtype `to` (narrowed: wrapped, rounded, 0/1). */
void cgf_conv(cg_expr out, grace_dtype from, grace_dtype to, const char *x) {
  if (from == to) { snprintf(out, sizeof(cg_expr), "%s", x); return; }
  if (to == GRACE_BOOL) { snprintf(out, sizeof(cg_expr), "(long long)((%s) != 0)", x); return; }
  if (to == GRACE_FLOAT32) {   /* f16/bf16 registers hold exact float values */
    if (cgf_is_f(from)) snprintf(out, sizeof(cg_expr), "%s", x);
    else snprintf(out, sizeof(cg_expr), "(float)(%s)", x);
    return;
  }
  if (to == GRACE_FLOAT16 || to == GRACE_BFLOAT16) {
    const char *h = to == GRACE_FLOAT16 ? "h" : "bf";
    snprintf(out, sizeof(cg_expr), "grace_%s2f(grace_f2%s((float)(%s)))", h, h, x);
    return;
  }
  if (to == GRACE_FLOAT64) { snprintf(out, sizeof(cg_expr), "(double)(%s)", x); return; }
  cg_expr i;
  if (cgf_is_fl(from)) snprintf(i, sizeof i, "grace_d2ll((double)(%s))", x);
  else snprintf(i, sizeof i, "(%s)", x);
  if (to == GRACE_INT32) snprintf(out, sizeof(cg_expr), "(long long)(int)(unsigned)%s", i);
  else if (to == GRACE_UINT8) snprintf(out, sizeof(cg_expr), "(long long)(unsigned char)%s", i);
  else snprintf(out, sizeof(cg_expr), "%s", i);
}

void cgf_load_expr(cg_expr out, grace_dtype dt, const char *lv) {
  switch (dt) {
  case GRACE_FLOAT16: snprintf(out, sizeof(cg_expr), "grace_h2f(%s)", lv); break;
  case GRACE_BFLOAT16: snprintf(out, sizeof(cg_expr), "grace_bf2f(%s)", lv); break;
  case GRACE_FLOAT32: case GRACE_FLOAT64: snprintf(out, sizeof(cg_expr), "%s", lv); break;
  case GRACE_BOOL: snprintf(out, sizeof(cg_expr), "(long long)(%s != 0)", lv); break;
  default: snprintf(out, sizeof(cg_expr), "(long long)%s", lv); break;
  }
}
void cgf_store_expr(cg_expr out, grace_dtype dt, const char *x) {
  switch (dt) {
  case GRACE_FLOAT16: snprintf(out, sizeof(cg_expr), "grace_f2h(%s)", x); break;
  case GRACE_BFLOAT16: snprintf(out, sizeof(cg_expr), "grace_f2bf(%s)", x); break;
  case GRACE_FLOAT32: case GRACE_FLOAT64: case GRACE_INT64: snprintf(out, sizeof(cg_expr), "%s", x); break;
  case GRACE_INT32: snprintf(out, sizeof(cg_expr), "(int)%s", x); break;
  case GRACE_BOOL: snprintf(out, sizeof(cg_expr), "(unsigned char)(%s != 0)", x); break;
  default: snprintf(out, sizeof(cg_expr), "(unsigned char)%s", x); break;
  }
}

/* A double constant, exact (infinities and NaN included). */
static void dconst(cg_expr out, double v) {
  uint64_t bits;
  memcpy(&bits, &v, 8);
  if (isfinite(v) && v == (double)(long long)v && fabs(v) < 1e15) snprintf(out, sizeof(cg_expr), "%.1f", v);
  else snprintf(out, sizeof(cg_expr), "__longlong_as_double(0x%016llxLL)", (unsigned long long)bits);
}

static int64_t f2i(double v) {
  return v != v ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v;
}
static void illit(cg_expr out, int64_t v) {
  if (v == INT64_MIN) snprintf(out, sizeof(cg_expr), "(-9223372036854775807LL - 1)");
  else snprintf(out, sizeof(cg_expr), "(%lldLL)", (long long)v);
}

/* The name (or constant) of argument a of a member, and its dtype. */
void cgf_operand(const grp *G, int32_t a, cg_expr out, grace_dtype *dt, const int32_t *ext, int next) {
  const grace_ir *ir = G->ir;
  if (a >= 0 && G->alias[a] >= 0) a = G->alias[a];
  *dt = ir->vals[a].type.dtype;
  if (is_member(G, a)) { snprintf(out, sizeof(cg_expr), "v%d", a); return; }
  const ir_inst *in = &ir->insts[ir->vals[a].inst];
  if (in->op == IR_OP_LITERAL) {
    if (grace_dtype_is_int(*dt)) snprintf(out, sizeof(cg_expr), "(%lldLL)", (long long)in->iliteral);
    else {
      cg_expr d;
      dconst(d, in->literal);
      if (cgf_is_f(*dt)) snprintf(out, sizeof(cg_expr), "((float)%s)", d);
      else snprintf(out, sizeof(cg_expr), "%s", d);
    }
    return;
  }
  for (int k = 0; k < next; k++) if (ext[k] == a) { snprintf(out, sizeof(cg_expr), "e%d", k); return; }
  snprintf(out, sizeof(cg_expr), "0 /* missing %%%d */", a);
}

static grace_dtype compute_dtype(const grp *G, const ir_inst *in) {
  const grace_ir *ir = G->ir;
  grace_dtype odt = ir->vals[in->first_result].type.dtype;
  int op = in->op;
  if (op == GRACE_OP_LOGICAL_NOT || op == GRACE_OP_LOGICAL_AND || op == GRACE_OP_LOGICAL_OR) return GRACE_BOOL;
  if (cgf_op_kind(op) == GRACE_KIND_COMPARE) {
    grace_dtype dts[2];
    int tiers[2];
    for (int j = 0; j < 2; j++) {
      const ir_type *t = &ir->vals[ir->args[in->first_arg + j]].type;
      dts[j] = t->dtype;
      tiers[j] = t->wrapped ? 2 : t->ndim == 0 ? 1 : 0;
    }
    return grace_result_type(2, dts, tiers);
  }
  if (op == GRACE_OP_CAST) return ir->vals[ir->args[in->first_arg]].type.dtype;
  return odt;
}

/* Emits `R v<id> = <expr>;` for pointwise member in. */
static grace_status emit_pointwise(cg_buf *b, const grp *G, const ir_inst *in, const int32_t *ext, int next) {
  const grace_ir *ir = G->ir;
  int op = in->op;
  int32_t v = in->first_result;
  grace_dtype odt = ir->vals[v].type.dtype, cdt = compute_dtype(G, in);
  cg_expr x[3], raw, e;
  grace_dtype dts[3];
  for (int j = 0; j < in->nin && j < 3; j++) {
    if (op == GRACE_OP_COPY_ && j == 0) { x[0][0] = 0; continue; }   /* the destination: written, not read */
    cgf_operand(G, ir->args[in->first_arg + j], raw, &dts[j], ext, next);
    int truth = (op == GRACE_OP_WHERE && j == 0) || (op == GRACE_OP_MASKED_FILL && j == 1);
    if (truth) snprintf(x[j], sizeof x[j], "((%s) != 0)", raw);
    else cgf_conv(x[j], dts[j], cdt, raw);
  }
  int fl = cgf_is_fl(cdt);
  const grace_attrs *at = &in->attrs;
  const char *args[3] = {x[0], in->nin > 1 ? x[1] : "", in->nin > 2 ? x[2] : ""};
  cg_expr lo, hi;
  if (op == GRACE_OP_CLAMP) {   /* the bounds as clamp_setup (cpu_pointwise.c) gives them to the CPU kernels */
    if (fl) {
      if (at->has_a) dconst(lo, at->a); else snprintf(lo, sizeof lo, "-__longlong_as_double(0x7ff0000000000000LL)");
      if (at->has_b) dconst(hi, at->b); else snprintf(hi, sizeof hi, "__longlong_as_double(0x7ff0000000000000LL)");
    } else {
      illit(lo, !at->has_a ? INT64_MIN : (at->exact & 1) ? at->ia : f2i(at->a));
      illit(hi, !at->has_b ? INT64_MAX : (at->exact & 2) ? at->ib : f2i(at->b));
    }
    args[1] = lo;
    args[2] = hi;
  }
  const char *tmpl = ir_pw_cuda(op, at->flag, fl);
  if (op == GRACE_OP_CAST) cgf_conv(e, cdt, at->dtype, x[0]);
  else if (op == GRACE_OP_COPY_) snprintf(e, sizeof e, "%s", x[1]);   /* the source, as the destination's dtype */
  else if (!tmpl)
    return grace_set_error(G->vm, GRACE_EUNSUPPORTED, "fused kernel: no CUDA lowering of %s", ir_op_name(op));
  else if (!cg_pw_expand(e, sizeof e, tmpl, args, 3, cgf_is_f(cdt), cgf_is_f(cdt) ? "float" : "double"))
    return grace_set_error(G->vm, GRACE_EUNSUPPORTED, "fused kernel: the expression of %s is too long", ir_op_name(op));
  /* the op's result narrowed to its own dtype (round, wrap, 0/1) once, as the CPU's store does */
  grace_dtype src = cgf_op_kind(op) == GRACE_KIND_COMPARE ? GRACE_BOOL : op == GRACE_OP_CAST ? at->dtype
                  : cgf_is_f(cdt) ? GRACE_FLOAT32 : cdt == GRACE_FLOAT64 ? GRACE_FLOAT64 : GRACE_INT64;
  if (op == GRACE_OP_WHERE || op == GRACE_OP_MASKED_FILL) src = cdt;
  cg_expr paren, fin;
  snprintf(paren, sizeof paren, "(%s)(%s)", cgf_rtype(src), e);
  cgf_conv(fin, src, odt, paren);
  cg_printf(b, "      %s v%d = %s;\n", cgf_rtype(odt), v, fin);
  return GRACE_OK;
}


/* ---- kernels ---- */
static const char *vec_type(int bytes) {
  return bytes == 16 ? "uint4" : bytes == 8 ? "uint2" : bytes == 4 ? "unsigned" : bytes == 2 ? "unsigned short" : "unsigned char";
}

/* The parameter struct and the pointer prologue shared by both kinds. */
void cgf_emit_params(cg_buf *b, const grace_ir *ir, const cg_group_io *io, const cg_fused_spec *spec, int nwords) {
  cg_puts(b, "struct GRACE_KNAME_p {\n");
  for (int k = 0; k < io->next + io->nstore; k++) {
    int out = k >= io->next;
    grace_dtype dt = ir->vals[out ? io->store[k - io->next] : io->ext[k]].type.dtype;
    cg_printf(b, "  %s%s *%sa%d;\n", out ? "" : "const ", cg_ctype(dt), spec->indirect ? "const *" : "", k);
  }
  if (cg_fused_split(spec)) cg_printf(b, "  unsigned long long *%sws;\n", spec->indirect ? "const *" : "");
  cg_printf(b, "  long long w[%d];\n};\n", nwords > 0 ? nwords : 1);
  cg_printf(b, "extern \"C\" __global__ void __launch_bounds__(%d) GRACE_KNAME(const GRACE_KNAME_p p) {\n", spec->block);
  cg_pdl_enter(b);
  for (int k = 0; k < io->next + io->nstore; k++) {
    int out = k >= io->next;
    grace_dtype dt = ir->vals[out ? io->store[k - io->next] : io->ext[k]].type.dtype;
    cg_printf(b, "  %s%s *%s a%d = %sp.a%d;\n", out ? "" : "const ", cg_ctype(dt), spec->inplace ? "" : "__restrict__", k,
              spec->indirect ? "*" : "", k);
  }
  if (cg_fused_split(spec)) cg_printf(b, "  unsigned long long *ws = %sp.ws;\n", spec->indirect ? "*" : "");
}

/* Members of space sp (and level <= maxlvl) in program order. */
grace_status cgf_emit_members(cg_buf *b, const grp *G, const cg_group_io *io, int sp, int minlvl, int maxlvl) {
  for (int i = 0; i < G->n; i++) {
    const ir_inst *in = &G->ir->insts[G->mem[i]];
    if (cgf_op_kind(in->op) == GRACE_KIND_REDUCE) continue;
    int32_t v = in->first_result;
    if (G->space[v] != sp || G->level[v] < minlvl || G->level[v] > maxlvl) continue;
    grace_status st = emit_pointwise(b, G, in, io->ext, io->next);
    if (st != GRACE_OK) return st;
  }
  return GRACE_OK;
}

static grace_status gen_pointwise(cg_buf *b, const grp *G, const cg_group_io *io, const cg_fused_spec *spec) {
  const grace_ir *ir = G->ir;
  int nd = spec->ndim, V = spec->vec, nstr = 0, npart = 0;
  for (int k = 0; k < io->next; k++) nstr += spec->layout[k] == CG_STRIDED;
  for (int s = 0; s < io->nstore; s++) npart += spec->layout[io->next + s] == CG_PARTIAL;
  cgf_emit_params(b, ir, io, spec, 1 + nd + (nstr + npart) * nd);
  const char *I = spec->wide ? "long long" : "unsigned";
  cg_printf(b, "  typedef %s IDX;\n  const IDX n = (IDX)p.w[0];\n", I);
  cg_puts(b, "  const IDX tid = (IDX)blockIdx.x * blockDim.x + threadIdx.x, nth = (IDX)gridDim.x * blockDim.x;\n");
  for (int k = 0; k < io->next; k++) {
    grace_dtype dt = ir->vals[io->ext[k]].type.dtype;
    cg_expr e;
    if (spec->layout[k] != CG_SCALAR) continue;
    char lv[64];
    snprintf(lv, sizeof lv, "a%d[0]", k);
    cgf_load_expr(e, dt, lv);
    cg_printf(b, "  const %s e%d = %s;\n", cgf_rtype(dt), k, e);
  }
  cg_puts(b, "  IDX start = 0;\n");
  grace_status st;
  if (V > 1) {
    /* vector path: every operand linear or a scalar; taken when all linear pointers are aligned */
    cg_puts(b, "  if (((0ULL");
    for (int k = 0; k < io->next + io->nstore; k++) {
      if (k < io->next && spec->layout[k] != CG_LINEAR) continue;
      grace_dtype dt = ir->vals[k < io->next ? io->ext[k] : io->store[k - io->next]].type.dtype;
      cg_printf(b, " | ((grace_u64)a%d & %d)", k, (int)(V * grace_dtype_size(dt)) - 1);
    }
    cg_puts(b, ")) == 0) {\n");
    cg_printf(b, "    const IDX nv = n / %d;\n", V);
    cg_puts(b, "    for (IDX q = tid; q < nv; q += nth) {\n");
    for (int k = 0; k < io->next + io->nstore; k++) {
      if (k < io->next && spec->layout[k] != CG_LINEAR) continue;
      grace_dtype dt = ir->vals[k < io->next ? io->ext[k] : io->store[k - io->next]].type.dtype;
      int bytes = V * (int)grace_dtype_size(dt);
      cg_printf(b, "      __align__(16) %s b%d[%d];\n", cg_ctype(dt), k, V);
      if (k < io->next)
        cg_printf(b, "      *(%s *)b%d = %s((const %s *)(a%d + (grace_u64)q * %d));\n", vec_type(bytes), k,
                  spec->inplace ? "*" : "__ldg", vec_type(bytes), k, V);
    }
    cg_printf(b, "#pragma unroll\n      for (int u = 0; u < %d; u++) {\n", V);
    for (int k = 0; k < io->next; k++) {
      if (spec->layout[k] != CG_LINEAR) continue;
      grace_dtype dt = ir->vals[io->ext[k]].type.dtype;
      char lv[32];
      cg_expr e;
      snprintf(lv, sizeof lv, "b%d[u]", k);
      cgf_load_expr(e, dt, lv);
      cg_printf(b, "      const %s e%d = %s;\n", cgf_rtype(dt), k, e);
    }
    if ((st = cgf_emit_members(b, G, io, SP_FULL, 0, 1 << 30)) != GRACE_OK) return st;
    for (int s = 0; s < io->nstore; s++) {
      cg_expr e;
      char x[32];
      snprintf(x, sizeof x, "v%d", io->store[s]);
      cgf_store_expr(e, ir->vals[io->store[s]].type.dtype, x);
      cg_printf(b, "      b%d[u] = %s;\n", io->next + s, e);
    }
    cg_puts(b, "      }\n");
    for (int s = 0; s < io->nstore; s++) {
      int k = io->next + s;
      int bytes = V * (int)grace_dtype_size(ir->vals[io->store[s]].type.dtype);
      cg_printf(b, "      *(%s *)(a%d + (grace_u64)q * %d) = *(const %s *)b%d;\n", vec_type(bytes), k, V, vec_type(bytes), k);
    }
    cg_puts(b, "    }\n    start = nv * " );
    cg_printf(b, "%d;\n  }\n", V);
  }
  /* scalar path (and the vector path's tail) */
  cg_puts(b, "  for (IDX i = start + tid; i < n; i += nth) {\n");
  if (nstr || npart) {
    cg_puts(b, "    IDX r = i;\n");
    for (int d = nd - 1; d > 0; d--) cg_printf(b, "    const IDX i%d = r %% (IDX)p.w[%d]; r /= (IDX)p.w[%d];\n", d, 1 + d, 1 + d);
    cg_puts(b, "    const IDX i0 = r;\n");
  }
  int si = 0;
  for (int k = 0; k < io->next; k++) {
    grace_dtype dt = ir->vals[io->ext[k]].type.dtype;
    char lv[96];
    cg_expr e;
    if (spec->layout[k] == CG_SCALAR) continue;
    if (spec->layout[k] == CG_LINEAR) snprintf(lv, sizeof lv, "a%d[i]", k);
    else {
      cg_printf(b, "    long long o%d = 0;\n", k);
      for (int d = 0; d < nd; d++) cg_printf(b, "    o%d += (long long)i%d * p.w[%d];\n", k, d, 1 + nd + si * nd + d);
      snprintf(lv, sizeof lv, "a%d[o%d]", k, k);
      si++;
    }
    cgf_load_expr(e, dt, lv);
    cg_printf(b, "    const %s e%d = %s;\n", cgf_rtype(dt), k, e);
  }
  if ((st = cgf_emit_members(b, G, io, SP_FULL, 0, 1 << 30)) != GRACE_OK) return st;
  for (int s = 0, pi = 0; s < io->nstore; s++) {
    cg_expr e;
    char x[32];
    snprintf(x, sizeof x, "v%d", io->store[s]);
    cgf_store_expr(e, ir->vals[io->store[s]].type.dtype, x);
    if (spec->layout[io->next + s] != CG_PARTIAL) { cg_printf(b, "    a%d[i] = %s;\n", io->next + s, e); continue; }
    /* once per element of the value: from the elements at coordinate 0 of the dims it is broadcast over */
    const int w0 = 1 + nd + (nstr + pi++) * nd;
    cg_puts(b, "    if (");
    for (int d = 0; d < nd; d++) cg_printf(b, "%s(p.w[%d] != 0 || i%d == 0)", d ? " && " : "", w0 + d, d);
    cg_printf(b, ") a%d[", io->next + s);
    for (int d = 0; d < nd; d++) cg_printf(b, "%s(long long)i%d * p.w[%d]", d ? " + " : "", d, w0 + d);
    cg_printf(b, "] = %s;\n", e);
  }
  cg_puts(b, "  }\n}\n");
  return GRACE_OK;
}

/* ---- generate and pack ---- */
static uint64_t fnv(const char *s, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
  return h;
}

grace_status cg_fused_generate(grace_vm *vm, const grace_ir *ir, const ir_fusion *f, int g, const cg_group_io *io,
                               const cg_fused_spec *spec, cg_kernel *k) {
  grp G;
  grace_status st = grp_init(vm, ir, f, g, &G);
  if (st != GRACE_OK) return st;
  memset(k, 0, sizeof *k);
  cg_buf body;
  cg_buf_init(&body, vm);
  st = G.row ? cgf_gen_row(&body, &G, io, spec) : gen_pointwise(&body, &G, io, spec);
  grp_free(&G);
  if (st != GRACE_OK) { cg_buf_free(&body); return st; }
  if (body.oom) { cg_buf_free(&body); return grace_set_error(vm, GRACE_ENOMEM, "fused kernel: out of host memory"); }
  uint64_t h = fnv(body.s, body.len, 14695981039346656037ull);
  snprintf(k->name, sizeof k->name, "grace_%s_%016llx", G.row ? "row" : "pw", (unsigned long long)h);
  cg_buf src;
  cg_buf_init(&src, vm);
  cg_prelude(&src);
  cg_puts(&src, cg_src_fused_helpers);
  cg_printf(&src, "#define GRACE_KNAME %s\n", k->name);
  cg_puts(&src, body.s ? body.s : "");
  cg_buf_free(&body);
  k->src = cg_buf_take(&src, &k->src_len);
  if (!k->src) return grace_set_error(vm, GRACE_ENOMEM, "fused kernel: out of host memory");
  k->kind = G.row ? CG_ROW : CG_POINTWISE;
  k->indirect = spec->indirect;
  k->narg = io->next + io->nstore;
  for (int a = 0; a < k->narg; a++) {
    int out = a >= io->next;
    k->args[a].value = out ? io->store[a - io->next] : io->ext[a];
    k->args[a].dtype = ir->vals[k->args[a].value].type.dtype;
    k->args[a].output = out;
  }
  if (cg_fused_split(spec) && k->narg < CG_MAX_ARGS) {
    k->args[k->narg].value = -1;   /* the workspace */
    k->args[k->narg].dtype = GRACE_INT64;
    k->args[k->narg].output = 1;
    k->narg++;
  }
  k->ndim = spec->ndim;
  k->variant = spec->vec | spec->wide << 8 | spec->strategy << 9;
  return GRACE_OK;
}

grace_status cg_fused_pack(grace_vm *vm, const cg_kernel *k, const cg_fused_spec *spec, const cg_fused_geom *geom,
                           const uint64_t *ptrs, int sms, cg_launch *out) {
  memset(out, 0, sizeof *out);
  int nd = spec->ndim, nw = 0;
  uint64_t *w = out->words;
  for (int a = 0; a < k->narg; a++) w[nw++] = ptrs[a];
  int next = 0, nstore = 0;
  for (int a = 0; a < k->narg; a++) { if (k->args[a].value < 0) continue; if (k->args[a].output) nstore++; else next++; }
  int need = k->narg + (spec->kind == CG_POINTWISE ? 1 : 3) + nd + (next + nstore) * nd;
  if (need > CG_MAX_WORDS) return grace_set_error(vm, GRACE_EUNSUPPORTED, "fused kernel: %d parameter words", need);
  if (sms < 1) sms = 1;
  out->block[0] = (unsigned)spec->block;
  out->block[1] = out->block[2] = 1;
  out->grid[1] = out->grid[2] = 1;
  if (spec->kind == CG_POINTWISE) {
    w[nw++] = (uint64_t)geom->n;
    for (int d = 0; d < nd; d++) w[nw++] = (uint64_t)geom->sizes[d];
    for (int e = 0; e < next; e++)
      if (spec->layout[e] == CG_STRIDED) for (int d = 0; d < nd; d++) w[nw++] = (uint64_t)geom->ext_strides[e][d];
    for (int s = 0; s < nstore; s++)
      if (spec->layout[next + s] == CG_PARTIAL) for (int d = 0; d < nd; d++) w[nw++] = (uint64_t)geom->store_strides[s][d];
    int64_t per = (int64_t)spec->block * spec->vec;
    int64_t grid = (geom->n + per - 1) / per, cap = (int64_t)sms * 8;
    out->grid[0] = (unsigned)(grid < 1 ? 1 : grid > cap ? cap : grid);
  } else {
    w[nw++] = (uint64_t)geom->rows;
    w[nw++] = (uint64_t)geom->inner;
    for (int d = 0; d < nd; d++) w[nw++] = (uint64_t)geom->sizes[d];
    for (int e = 0; e < next; e++) for (int d = 0; d < nd; d++) w[nw++] = (uint64_t)geom->ext_strides[e][d];
    for (int s = 0; s < nstore; s++) for (int d = 0; d < nd; d++) w[nw++] = (uint64_t)geom->store_strides[s][d];
    int64_t rpb = spec->strategy == CG_ROW_WARP ? spec->block / 32 : 1;
    int64_t grid = (geom->rows + rpb - 1) / rpb, cap = (int64_t)sms * 32;
    if (cg_fused_split(spec)) {
      w[nw++] = (uint64_t)geom->nchunk;
      grid = geom->rows * geom->nchunk;
      cap = grid;
    }
    out->grid[0] = (unsigned)(grid < 1 ? 1 : grid > cap ? cap : grid);
  }
  out->nwords = nw;
  out->smem = 0;
  return GRACE_OK;
}
