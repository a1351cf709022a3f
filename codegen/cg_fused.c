/* cg_fused.c: CUDA source for fused POINTWISE and ROW groups (see cg_fused.h). Every member op is emitted as
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
#include "codegen/cg_fused.h"
#include "codegen/cg_templates.h"
#include "ir/ir_pointwise.h"

/* Expressions are built from register names and constants into fixed buffers far larger than any of them;
 * gcc cannot see that bound. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

enum { SP_NONE = 0, SP_FULL = 1, SP_ROW = 2 };

/* The analysis of one group shared by plan and generate. */
typedef struct grp {
  grace_vm *vm;
  const grace_ir *ir;
  const ir_fusion *f;
  int g, n;
  const int32_t *mem;
  int row;
  const ir_type *dom, *red;   /* ROW: the reductions' input shape and first result shape */
  uint32_t dims;              /* ROW: reduced dims of dom */
  int keep;                   /* ROW: red has dom's rank */
  int64_t pdom[GRACE_MAX_DIMS];  /* POINTWISE: the broadcast iteration shape */
  int pnd;
  uint8_t *space;             /* per value */
  int32_t *level;             /* per value: reduction depth it depends on */
  int32_t *alias;             /* per value: the member value it stands for (views of reduction results) */
  int maxlevel;
} grp;

static int is_member(const grp *G, int32_t v) {
  if (v < 0) return 0;
  int i = G->ir->vals[v].inst;
  return G->f->inst_group[i] == G->g;
}
static int op_kind(int op) { return op < GRACE_NOPS ? (int)grace_op_kind((grace_op)op) : -1; }
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
    if (op_kind(in->op) == GRACE_KIND_REDUCE && !G->red) {
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
    int kind = op_kind(in->op);
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

static int red_fields(const grp *G);

grace_status cg_fused_plan(grace_vm *vm, const grace_ir *ir, const ir_fusion *f, int g, const cg_group_io *io,
                           const cg_tensor *ext, int indirect, int sms, cg_fused_spec *spec, cg_fused_geom *geom) {
  grp G;
  grace_status st = grp_init(vm, ir, f, g, &G);
  if (st != GRACE_OK) return st;
  memset(spec, 0, sizeof *spec);
  memset(geom, 0, sizeof *geom);
  spec->indirect = indirect ? 1 : 0;
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
      int sp = op_kind(in->op) == GRACE_KIND_REDUCE ? SP_FULL : G.space[in->first_result];
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
    int full_store = 0, nfield = red_fields(&G);
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
typedef char cg_expr[768];

static int is_f(grace_dtype dt) { return dt == GRACE_FLOAT32 || dt == GRACE_FLOAT16 || dt == GRACE_BFLOAT16; }
static int is_fl(grace_dtype dt) { return is_f(dt) || dt == GRACE_FLOAT64; }
static const char *rtype(grace_dtype dt) { return is_f(dt) ? "float" : dt == GRACE_FLOAT64 ? "double" : "long long"; }

/* A register of dtype `from` as a register of dtype `to` (narrowed: wrapped, rounded, 0/1). */
static void conv(cg_expr out, grace_dtype from, grace_dtype to, const char *x) {
  if (from == to) { snprintf(out, sizeof(cg_expr), "%s", x); return; }
  if (to == GRACE_BOOL) { snprintf(out, sizeof(cg_expr), "(long long)((%s) != 0)", x); return; }
  if (to == GRACE_FLOAT32) {   /* f16/bf16 registers hold exact float values */
    if (is_f(from)) snprintf(out, sizeof(cg_expr), "%s", x);
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
  if (is_fl(from)) snprintf(i, sizeof i, "grace_d2ll((double)(%s))", x);
  else snprintf(i, sizeof i, "(%s)", x);
  if (to == GRACE_INT32) snprintf(out, sizeof(cg_expr), "(long long)(int)(unsigned)%s", i);
  else if (to == GRACE_UINT8) snprintf(out, sizeof(cg_expr), "(long long)(unsigned char)%s", i);
  else snprintf(out, sizeof(cg_expr), "%s", i);
}

static void load_expr(cg_expr out, grace_dtype dt, const char *lv) {
  switch (dt) {
  case GRACE_FLOAT16: snprintf(out, sizeof(cg_expr), "grace_h2f(%s)", lv); break;
  case GRACE_BFLOAT16: snprintf(out, sizeof(cg_expr), "grace_bf2f(%s)", lv); break;
  case GRACE_FLOAT32: case GRACE_FLOAT64: snprintf(out, sizeof(cg_expr), "%s", lv); break;
  case GRACE_BOOL: snprintf(out, sizeof(cg_expr), "(long long)(%s != 0)", lv); break;
  default: snprintf(out, sizeof(cg_expr), "(long long)%s", lv); break;
  }
}
static void store_expr(cg_expr out, grace_dtype dt, const char *x) {
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
static void operand(const grp *G, int32_t a, cg_expr out, grace_dtype *dt, const int32_t *ext, int next) {
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
      if (is_f(*dt)) snprintf(out, sizeof(cg_expr), "((float)%s)", d);
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
  if (op_kind(op) == GRACE_KIND_COMPARE) {
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
    operand(G, ir->args[in->first_arg + j], raw, &dts[j], ext, next);
    int truth = (op == GRACE_OP_WHERE && j == 0) || (op == GRACE_OP_MASKED_FILL && j == 1);
    if (truth) snprintf(x[j], sizeof x[j], "((%s) != 0)", raw);
    else conv(x[j], dts[j], cdt, raw);
  }
  int fl = is_fl(cdt);
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
  if (op == GRACE_OP_CAST) conv(e, cdt, at->dtype, x[0]);
  else if (!tmpl)
    return grace_set_error(G->vm, GRACE_EUNSUPPORTED, "fused kernel: no CUDA lowering of %s", ir_op_name(op));
  else if (!cg_pw_expand(e, sizeof e, tmpl, args, 3, is_f(cdt), is_f(cdt) ? "float" : "double"))
    return grace_set_error(G->vm, GRACE_EUNSUPPORTED, "fused kernel: the expression of %s is too long", ir_op_name(op));
  /* the op's result narrowed to its own dtype (round, wrap, 0/1) once, as the CPU's store does */
  grace_dtype src = op_kind(op) == GRACE_KIND_COMPARE ? GRACE_BOOL : op == GRACE_OP_CAST ? at->dtype
                  : is_f(cdt) ? GRACE_FLOAT32 : cdt == GRACE_FLOAT64 ? GRACE_FLOAT64 : GRACE_INT64;
  if (op == GRACE_OP_WHERE || op == GRACE_OP_MASKED_FILL) src = cdt;
  cg_expr paren, fin;
  snprintf(paren, sizeof paren, "(%s)(%s)", rtype(src), e);
  conv(fin, src, odt, paren);
  cg_printf(b, "      %s v%d = %s;\n", rtype(odt), v, fin);
  return GRACE_OK;
}


/* ---- kernels ---- */
static const char *vec_type(int bytes) {
  return bytes == 16 ? "uint4" : bytes == 8 ? "uint2" : bytes == 4 ? "unsigned" : bytes == 2 ? "unsigned short" : "unsigned char";
}

/* The parameter struct and the pointer prologue shared by both kinds. */
static void emit_params(cg_buf *b, const grace_ir *ir, const cg_group_io *io, const cg_fused_spec *spec, int nwords) {
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
    cg_printf(b, "  %s%s *__restrict__ a%d = %sp.a%d;\n", out ? "" : "const ", cg_ctype(dt), k, spec->indirect ? "*" : "", k);
  }
  if (cg_fused_split(spec)) cg_printf(b, "  unsigned long long *ws = %sp.ws;\n", spec->indirect ? "*" : "");
}

/* Members of space sp (and level <= maxlvl) in program order. */
static grace_status emit_members(cg_buf *b, const grp *G, const cg_group_io *io, int sp, int minlvl, int maxlvl) {
  for (int i = 0; i < G->n; i++) {
    const ir_inst *in = &G->ir->insts[G->mem[i]];
    if (op_kind(in->op) == GRACE_KIND_REDUCE) continue;
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
  emit_params(b, ir, io, spec, 1 + nd + (nstr + npart) * nd);
  const char *I = spec->wide ? "long long" : "unsigned";
  cg_printf(b, "  typedef %s IDX;\n  const IDX n = (IDX)p.w[0];\n", I);
  cg_puts(b, "  const IDX tid = (IDX)blockIdx.x * blockDim.x + threadIdx.x, nth = (IDX)gridDim.x * blockDim.x;\n");
  for (int k = 0; k < io->next; k++) {
    grace_dtype dt = ir->vals[io->ext[k]].type.dtype;
    cg_expr e;
    if (spec->layout[k] != CG_SCALAR) continue;
    char lv[64];
    snprintf(lv, sizeof lv, "a%d[0]", k);
    load_expr(e, dt, lv);
    cg_printf(b, "  const %s e%d = %s;\n", rtype(dt), k, e);
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
        cg_printf(b, "      *(%s *)b%d = __ldg((const %s *)(a%d + (grace_u64)q * %d));\n", vec_type(bytes), k, vec_type(bytes), k, V);
    }
    cg_printf(b, "#pragma unroll\n      for (int u = 0; u < %d; u++) {\n", V);
    for (int k = 0; k < io->next; k++) {
      if (spec->layout[k] != CG_LINEAR) continue;
      grace_dtype dt = ir->vals[io->ext[k]].type.dtype;
      char lv[32];
      cg_expr e;
      snprintf(lv, sizeof lv, "b%d[u]", k);
      load_expr(e, dt, lv);
      cg_printf(b, "      const %s e%d = %s;\n", rtype(dt), k, e);
    }
    if ((st = emit_members(b, G, io, SP_FULL, 0, 1 << 30)) != GRACE_OK) return st;
    for (int s = 0; s < io->nstore; s++) {
      cg_expr e;
      char x[32];
      snprintf(x, sizeof x, "v%d", io->store[s]);
      store_expr(e, ir->vals[io->store[s]].type.dtype, x);
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
    load_expr(e, dt, lv);
    cg_printf(b, "    const %s e%d = %s;\n", rtype(dt), k, e);
  }
  if ((st = emit_members(b, G, io, SP_FULL, 0, 1 << 30)) != GRACE_OK) return st;
  for (int s = 0, pi = 0; s < io->nstore; s++) {
    cg_expr e;
    char x[32];
    snprintf(x, sizeof x, "v%d", io->store[s]);
    store_expr(e, ir->vals[io->store[s]].type.dtype, x);
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

/* ---- ROW ---- */
/* One reduction's state: up to three fields of types ft[], their start values, and code fragments. */
typedef struct red_state {
  int nf;
  const char *ft[3];
  char init[3][96];
  grace_dtype adt;            /* the dtype the input is converted to */
} red_state;

static void red_setup(const grp *G, const ir_inst *in, red_state *r) {
  grace_dtype xd = G->ir->vals[G->ir->args[in->first_arg]].type.dtype;
  r->adt = xd == GRACE_FLOAT64 ? GRACE_FLOAT64 : is_f(xd) ? GRACE_FLOAT32 : GRACE_INT64;
  const char *A = rtype(r->adt);
  int fl = is_fl(r->adt);
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
static int red_fields(const grp *G) {
  int n = 0;
  for (int i = 0; i < G->n; i++) {
    const ir_inst *in = &G->ir->insts[G->mem[i]];
    if (op_kind(in->op) != GRACE_KIND_REDUCE) continue;
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
  conv(cx, xd, r->adt, x);
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
    conv(e, r->adt == GRACE_INT64 ? GRACE_FLOAT64 : r->adt, odt, x);
    break;
  case GRACE_OP_VAR: case GRACE_OP_STD:
    snprintf(x, sizeof x, "%s(r%d_0 == 0 ? __longlong_as_double(0x7ff8000000000000LL) : r%d_2 / (r%d_0 - %d.0))",
             in->op == GRACE_OP_STD ? "sqrt" : "", id, id, id, in->attrs.flag ? 1 : 0);
    conv(e, GRACE_FLOAT64, odt, x);
    break;
  case GRACE_OP_LOGSUMEXP:
    snprintf(x, sizeof x, "((r%d_0 != r%d_0 || isinf(r%d_0)) ? r%d_0 : r%d_0 + log(r%d_1))", id, id, id, id, id, id);
    conv(e, r->adt, odt, x);
    break;
  case GRACE_OP_ARGMAX: case GRACE_OP_ARGMIN:
    snprintf(x, sizeof x, "(r%d_1 + %d)", id, grace_index_base(G->vm));
    conv(e, GRACE_INT64, odt, x);
    break;
  case GRACE_OP_ALL: case GRACE_OP_ANY: conv(e, GRACE_BOOL, odt, f0); break;
  default: conv(e, r->adt, odt, f0); break;   /* sum, prod, max/min values */
  }
  cg_printf(b, "    const %s v%d = %s;\n", rtype(odt), v, e);
  if (in->nout == 2) {
    snprintf(x, sizeof x, "(r%d_1 + %d)", id, grace_index_base(G->vm));
    conv(e, GRACE_INT64, ir->vals[v + 1].type.dtype, x);
    cg_printf(b, "    const %s v%d = %s;\n", rtype(ir->vals[v + 1].type.dtype), v + 1, e);
  }
}

static int ext_use(const grp *G, const cg_group_io *io, int k) {
  int use = 0;
  for (int i = 0; i < G->n; i++) {
    const ir_inst *in = &G->ir->insts[G->mem[i]];
    int sp = op_kind(in->op) == GRACE_KIND_REDUCE ? SP_FULL : G->space[in->first_result];
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
    load_expr(e, dt, lv);
    cg_printf(b, "      const %s e%d = %s;\n", rtype(dt), k, e);
  }
}

/* The members and reductions of pass L (0: the stores over the row) at row position j. */
static grace_status emit_row_step(cg_buf *b, const grp *G, const cg_group_io *io, const cg_fused_spec *spec, int L,
                                  int nr, const int *ids, const red_state *rs) {
  const grace_ir *ir = G->ir;
  int nd = spec->ndim, nk = spec->nkept, wext = 2 + nd, wst = 2 + nd + io->next * nd;
  emit_inner_loads(b, G, io, spec, wext);
  grace_status st = emit_members(b, G, io, SP_FULL, 0, L ? L - 1 : 1 << 30);
  if (st != GRACE_OK) return st;
  for (int r = 0; r < nr; r++) {
    const ir_inst *in = &ir->insts[G->mem[ids[r]]];
    cg_expr x;
    grace_dtype xd;
    operand(G, ir->args[in->first_arg], x, &xd, io->ext, io->next);
    emit_accumulate(b, in, ids[r], &rs[r], xd, x);
  }
  for (int s = 0; !L && s < io->nstore; s++) {
    if (G->space[io->store[s]] != SP_FULL) continue;
    cg_printf(b, "      { long long so = so%d", s);
    for (int d = nk; d < nd; d++) cg_printf(b, " + j%d * p.w[%d]", d, wst + s * nd + d);
    cg_expr e;
    char x[32];
    snprintf(x, sizeof x, "v%d", io->store[s]);
    store_expr(e, ir->vals[io->store[s]].type.dtype, x);
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

static grace_status gen_row(cg_buf *b, const grp *G, const cg_group_io *io, const cg_fused_spec *spec) {
  const grace_ir *ir = G->ir;
  int nd = spec->ndim, nk = spec->nkept;
  int wext = 2 + nd, wst = 2 + nd + io->next * nd;
  int split = cg_fused_split(spec), sync = spec->strategy == CG_ROW_SYNC;
  emit_params(b, ir, io, spec, wst + io->nstore * nd + split);
  grace_status st;
  cg_puts(b, "  const long long rows = p.w[0], inner = p.w[1];\n  const int lane = threadIdx.x & 31;\n");
  if (spec->strategy == CG_ROW_WARP)
    cg_printf(b, "  const long long row0 = (long long)blockIdx.x * %d + (threadIdx.x >> 5), rstep = (long long)gridDim.x * %d;\n"
              "  const int t0 = lane, tstep = 32;\n", spec->block / 32, spec->block / 32);
  else cg_puts(b, "  const long long row0 = blockIdx.x, rstep = gridDim.x;\n  const int t0 = threadIdx.x, tstep = blockDim.x;\n");
  int nfield = red_fields(G);   /* a split row's fields a chunk, each level's after the level before's */
  if (split) {
    /* block b takes chunk b % nchunk of row b / nchunk (CG_ROW_SYNC: exactly one, the grid is rows x nchunk) */
    cg_printf(b, "  const long long nchunk = p.w[%d], csize = (inner + nchunk - 1) / nchunk;\n", wst + io->nstore * nd);
    if (!sync) cg_puts(b, "  __shared__ int cgf_last;\n");
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
    load_expr(e, dt, lv);
    cg_printf(b, "    const %s e%d = %s;\n", rtype(dt), k, e);
  }
  if ((st = emit_members(b, G, io, SP_ROW, 0, 0)) != GRACE_OK) return st;
  for (int L = 1, off = 0; L <= G->maxlevel; L++) {
    red_state rs[CG_MAX_ARGS];
    int ids[CG_MAX_ARGS], nr = 0;
    for (int i = 0; i < G->n && nr < CG_MAX_ARGS; i++) {
      const ir_inst *in = &ir->insts[G->mem[i]];
      if (op_kind(in->op) != GRACE_KIND_REDUCE || G->level[in->first_result] != L) continue;
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
        cg_puts(b, "      __threadfence();\n"
                   "      cgf_last = atomicAdd(&ws[row], 1ULL) == (unsigned long long)(nchunk - 1);\n    }\n"
                   "    __syncthreads();\n    if (cgf_last) {\n    __threadfence();\n");
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
    if ((st = emit_members(b, G, io, SP_ROW, L, L)) != GRACE_OK) return st;
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
    store_expr(e, ir->vals[io->store[s]].type.dtype, x);
    cg_printf(b, "    if (t0 == 0%s) a%d[row] = %s;\n", sync ? " && chunk == 0" : "", io->next + s, e);
  }
  if (split && !sync) cg_puts(b, "    }\n");
  if (spec->strategy != CG_ROW_WARP) cg_puts(b, "    __syncthreads();\n");
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
  st = G.row ? gen_row(&body, &G, io, spec) : gen_pointwise(&body, &G, io, spec);
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
