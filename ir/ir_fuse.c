/* ir_fuse.c: the fusion scheduler's grouping analysis (Inductor-style). One greedy sweep in program order puts
 * each instruction into a group (a future kernel), joining the groups of its producers where the kernel stays
 * one loop nest: pointwise ops fuse vertically and merge sibling pointwise groups; a reduction takes its
 * pointwise producers as a prologue and its row-shaped pointwise consumers as an epilogue (one row kernel for a
 * decomposed softmax or layer_norm); a matmul takes its pointwise consumers as an epilogue, and matmuls sharing
 * a left input are grouped horizontally. Every join is refused when it would make the group graph cyclic (a
 * kernel that waits for itself), and where a member would read a value of its own kernel as no kernel can (a view
 * of it, a per-row value across rows: ir_fuse.h), so the generators lower every group. Groups never cross a
 * break or a region (cond, while: a kernel of its own, its sub-programs grouped when they run). A matmul epilogue's last pointwise op that only one other kernel reads, its operands stored anyway, then
 * moves into that kernel; a device norm read only by matmuls of few rows joins their group as the GEMVs' prologue
 * (ir_fuse.h); a pointwise group read by only one other group (a weight cast) moves into that group; and the groups
 * are ordered topologically.
 * A value read by two groups is materialized (stored by the one kernel that computes it), never computed in
 * both: the report names stored values, so duplication cannot happen silently. Also grace_ir_fuse_report. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/base.h"
#include "ir/ir_fuse.h"

typedef struct gstate {
  ir_fuse_kind kind;
  int horizontal, part;
  int parent;          /* union-find: merged groups point at the surviving one */
  int head, tail;      /* member list through fctx.next (not in program order after a merge) */
  int last;            /* largest member index: the most recently extended group is preferred */
  const ir_type *dom;  /* POINTWISE: the broadcast shape; ROW: the shape the reductions read; MATMUL: the result */
  const ir_type *red;  /* ROW: the first reduction's result shape (its keepdim=0 form fits too) */
  uint32_t dims;       /* ROW: the reduced dims of dom, as bits */
} gstate;

typedef struct fctx {
  grace_ir *ir;
  gstate *g;
  int ng;
  int32_t *group;      /* instruction -> group (follow parents), -1: free */
  int32_t *next;       /* member lists */
  int32_t *mark;       /* DFS visit stamps, per group */
  int32_t *stack;
  int32_t stamp;
  int trial;           /* a merge is being tried (find must not compress paths through it) */
} fctx;

static int is_free(int op) { return !ir_is_region(op) && (op >= GRACE_NOPS || grace_op_kind((grace_op)op) == GRACE_KIND_VIEW); }
static int is_pointwise(int op) {
  if (op >= GRACE_NOPS) return 0;
  grace_opkind k = grace_op_kind((grace_op)op);
  return k == GRACE_KIND_UNARY || k == GRACE_KIND_BINARY || k == GRACE_KIND_COMPARE || k == GRACE_KIND_TERNARY;
}
/* Producers whose group a consumer may join: the ones a kernel computes in registers. */
static int joinable_producer(int op) {
  if (is_pointwise(op)) return 1;
  if (op >= GRACE_NOPS) return 0;
  grace_opkind k = grace_op_kind((grace_op)op);
  return k == GRACE_KIND_REDUCE || k == GRACE_KIND_MATMUL;
}

/* The instruction computing what v reads, -1 when that is free (an input, capture, scalar or literal). */
static int base_inst(const grace_ir *ir, int32_t v) {
  v = ir_view_base(ir, v);
  if (v < 0) return -1;
  int i = ir->vals[v].inst;
  return is_free(ir->insts[i].op) ? -1 : i;
}

static int find(fctx *c, int g) {
  if (c->trial) {   /* a merge being tried may be undone: leave the parents as they are */
    while (c->g[g].parent != g) g = c->g[g].parent;
    return g;
  }
  while (c->g[g].parent != g) { c->g[g].parent = c->g[c->g[g].parent].parent; g = c->g[g].parent; }
  return g;
}
static int group_of(fctx *c, int inst) { return c->group[inst] < 0 ? -1 : find(c, c->group[inst]); }

static int same_shape(const ir_type *a, const ir_type *b) {
  if (a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->sizes[d] != b->sizes[d] || a->sym[d] != b->sym[d]) return 0;
  return 1;
}
/* Whether a broadcasts (NumPy rules) to exactly b's shape. */
static int bcast_into(const ir_type *a, const ir_type *b) {
  if (a->ndim > b->ndim) return 0;
  for (int d = 1; d <= a->ndim; d++) {
    const int64_t sa = a->sizes[a->ndim - d], sb = b->sizes[b->ndim - d];
    const int32_t ya = a->sym[a->ndim - d], yb = b->sym[b->ndim - d];
    if (!(sa == 1 && ya == 0) && (sa != sb || ya != yb)) return 0;
  }
  return 1;
}

int ir_view_keeps_order(const grace_ir *ir, int32_t v) {
  while (v >= 0) {
    const ir_inst *k = &ir->insts[ir->vals[v].inst];
    if (k->op >= GRACE_NOPS || grace_op_kind((grace_op)k->op) != GRACE_KIND_VIEW) return 1;
    if (k->op != GRACE_OP_RESHAPE && k->op != GRACE_OP_VIEW && k->op != GRACE_OP_SQUEEZE && k->op != GRACE_OP_UNSQUEEZE)
      return 0;
    v = ir->args[k->first_arg];
  }
  return 1;
}

int ir_row_lines_up(const ir_type *t, const ir_type *dom, uint32_t dims) {
  if (t->ndim > dom->ndim) return 0;
  for (int d = 0; d < dom->ndim; d++) {
    int td = d - (dom->ndim - t->ndim);
    if ((td < 0 ? 1 : t->sizes[td]) != ((dims >> d & 1) ? 1 : dom->sizes[d])) return 0;
  }
  return 1;
}

/* Whether a pointwise computation over shape t can run inside group g's loop nest. */
static int fits(fctx *c, int g, const ir_type *t) {
  const gstate *G = &c->g[g];
  switch (G->kind) {
  case IR_FUSE_POINTWISE: return bcast_into(t, G->dom) || bcast_into(G->dom, t);
  case IR_FUSE_ROW: return bcast_into(t, G->dom) || same_shape(t, G->red);
  case IR_FUSE_MATMUL: return bcast_into(t, G->dom);
  default: return 0;
  }
}

/* Whether group `from` depends on group `to` (through the values its members read). With min2, only paths
 * through some third group count: a direct edge is what a merge absorbs. */
static int reaches(fctx *c, int from, int to, int min2) {
  const grace_ir *ir = c->ir;
  int sp = 0;
  c->stamp++;
  c->stack[sp++] = from;
  c->mark[from] = c->stamp;
  while (sp) {
    int g = c->stack[--sp];
    for (int m = c->g[g].head; m >= 0; m = c->next[m]) {
      const ir_inst *k = &ir->insts[m];
      for (int j = 0; j < k->nin; j++) {
        int b = base_inst(ir, ir->args[k->first_arg + j]);
        if (b < 0) continue;
        int h = group_of(c, b);
        if (h < 0 || h == g) continue;
        if (h == to) {
          if (!(min2 && g == from)) return 1;
          continue;
        }
        if (c->mark[h] != c->stamp) { c->mark[h] = c->stamp; c->stack[sp++] = h; }
      }
    }
  }
  return 0;
}

/* Whether an instruction reading the groups prods may join g: none of them may itself wait for g. */
static int join_ok(fctx *c, int g, const int *prods, int np) {
  for (int i = 0; i < np; i++) {
    int h = find(c, prods[i]);
    if (h != g && reaches(c, h, g, 0)) return 0;
  }
  return 1;
}

/* Whether a matmul of group m reads a value of group p directly (p would be a prologue, which a GEMM with an
 * epilogue cannot run). */
static int feeds_matmul(fctx *c, int p, int m) {
  for (int i = c->g[m].head; i >= 0; i = c->next[i]) {
    const ir_inst *k = &c->ir->insts[i];
    if (k->op != GRACE_OP_MATMUL) continue;
    for (int j = 0; j < k->nin; j++) {
      int b = base_inst(c->ir, c->ir->args[k->first_arg + j]);
      if (b >= 0 && group_of(c, b) == p) return 1;
    }
  }
  return 0;
}

/* Whether value v of row group g is a per-row value (a register per row, as codegen/cg_fused.c places it): a
 * reduction's result, or a pointwise op of the reduced shape over such values and operands of that shape. -1:
 * not known (more than 16 pointwise ops deep: the walk is not memoized, and shared operands would make it
 * exponential), which read_ok takes as a no. */
static int row_value(fctx *c, int g, int32_t v, int depth) {
  const grace_ir *ir = c->ir;
  const ir_inst *in = &ir->insts[ir->vals[v].inst];
  if (in->op < GRACE_NOPS && grace_op_kind((grace_op)in->op) == GRACE_KIND_REDUCE) return 1;
  if (!is_pointwise(in->op) || !same_shape(&ir->vals[v].type, c->g[g].red)) return 0;
  if (depth > 16) return -1;
  for (int j = 0; j < in->nin; j++) {
    int32_t a = ir->args[in->first_arg + j];
    if (a < 0) continue;
    int b = base_inst(ir, a);
    if (b >= 0 && group_of(c, b) == g) {
      int r = row_value(c, g, ir_view_base(ir, a), depth + 1);
      if (r != 1) return r;
    } else if (!same_shape(&ir->vals[a].type, c->g[g].red) && ir_type_numel(&ir->vals[a].type) > 1) return 0;
  }
  return 1;
}

/* Whether member m of group g can read a (a value of g itself, or a view of one) in registers: a pointwise kernel
 * only directly; a row kernel also an order-keeping view of a per-row value, and a per-row value read over the base
 * shape must line up with the kept dims. */
static int read_ok(fctx *c, int g, int m, int32_t a) {
  const grace_ir *ir = c->ir;
  const gstate *K = &c->g[g];
  int32_t b = ir_view_base(ir, a);
  if (K->kind == IR_FUSE_POINTWISE) return a == b;
  if (K->kind != IR_FUSE_ROW) return 1;
  int rv = row_value(c, g, b, 0), rm = rv == 1 ? row_value(c, g, ir->insts[m].first_result, 0) : 0;
  if (rv < 0 || rm < 0) return 0;
  if (a != b && !(rv && ir_view_keeps_order(ir, a) && ir_type_numel(&ir->vals[a].type) == ir_type_numel(&ir->vals[b].type)))
    return 0;
  return !rv || rm || ir_row_lines_up(&ir->vals[a].type, K->dom, K->dims);
}

/* Whether instruction k, joining group g, reads g's values as g's kernel can. */
static int reads_ok(fctx *c, int g, int k) {
  const grace_ir *ir = c->ir;
  const ir_inst *in = &ir->insts[k];
  for (int j = 0; j < in->nin; j++) {
    int32_t a = ir->args[in->first_arg + j];
    int b = base_inst(ir, a);
    if (b >= 0 && group_of(c, b) == g && !read_ok(c, g, k, a)) return 0;
  }
  return 1;
}

/* Adds the tensors instruction m reads from outside group g to seen[*n] (distinct); 0 past IR_FUSE_MAX_OPERANDS. */
static int count_operands(fctx *c, int g, int m, int32_t *seen, int *n) {
  const grace_ir *ir = c->ir;
  const ir_inst *in = &ir->insts[m];
  for (int j = 0; j < in->nin; j++) {
    int32_t a = ir->args[in->first_arg + j];
    if (a < 0 || ir->insts[ir->vals[a].inst].op == IR_OP_LITERAL) continue;
    int b = base_inst(ir, a);
    if (b >= 0 && group_of(c, b) == g) continue;
    int dup = 0;
    for (int i = 0; i < *n && !dup; i++) dup = seen[i] == a;
    if (dup) continue;
    if (*n == IR_FUSE_MAX_OPERANDS) return 0;
    seen[(*n)++] = a;
  }
  return 1;
}
/* Whether the tensors that group g's kernel reads from outside (with instruction k's, k >= 0 joining it) are at
 * most IR_FUSE_MAX_OPERANDS: views and tensors counted apart, literals not, as the generators pass them. */
static int operands_fit(fctx *c, int g, int k) {
  if (c->g[g].kind != IR_FUSE_POINTWISE && c->g[g].kind != IR_FUSE_ROW) return 1;
  int32_t seen[IR_FUSE_MAX_OPERANDS];
  int n = 0;
  for (int m = c->g[g].head; m >= 0; m = c->next[m])
    if (!count_operands(c, g, m, seen, &n)) return 0;
  return k < 0 || count_operands(c, g, k, seen, &n);
}

/* A copy_ in a kernel stores where its destination lives, so every thread must write the elements it alone reads:
 * a group holding one stays a pointwise kernel over exactly the destination's shape (an optimizer's step counter
 * joining the update of its weight would be written by every thread of it). */
static int inplace_fits(fctx *c, int g, ir_fuse_kind kind, const ir_type *dom) {
  for (int m = c->g[g].head; m >= 0; m = c->next[m])
    if (c->ir->insts[m].op == GRACE_OP_COPY_ &&
        (kind != IR_FUSE_POINTWISE || !same_shape(&c->ir->vals[c->ir->insts[m].first_result].type, dom)))
      return 0;
  return 1;
}

/* Whether group g's kernel can be generated: its copy_ members fit its kernel (inplace_fits), every member reads
 * the group's own values as it can (read_ok), and its operands (with instruction k's, k >= 0 joining it) fit. */
static int group_ok(fctx *c, int g, int k) {
  if (!inplace_fits(c, g, c->g[g].kind, c->g[g].dom)) return 0;
  for (int m = c->g[g].head; m >= 0; m = c->next[m])
    if (!reads_ok(c, g, m)) return 0;
  return operands_fit(c, g, k);
}

static int new_group(fctx *c, int k, ir_fuse_kind kind, int part, const ir_type *dom) {
  int g = c->ng++;
  c->g[g] = (gstate){.kind = kind, .part = part, .parent = g, .head = k, .tail = k, .last = k, .dom = dom, .red = dom};
  c->next[k] = -1;
  c->group[k] = g;
  return g;
}
static void add(fctx *c, int g, int k) {
  c->next[c->g[g].tail] = k;
  c->next[k] = -1;
  c->g[g].tail = k;
  c->g[g].last = k;
  c->group[k] = g;
}

/* Adds pointwise instruction k to group g; a pointwise group's domain grows to k's shape where that is larger. */
static void add_pointwise(fctx *c, int g, int k) {
  add(c, g, k);
  const ir_type *t = &c->ir->vals[c->ir->insts[k].first_result].type;
  if (c->g[g].kind == IR_FUSE_POINTWISE && !bcast_into(t, c->g[g].dom)) c->g[g].dom = t;
}

/* Merges group h into g when one kernel can run both and the graph stays acyclic; returns whether it did. */
static int try_merge(fctx *c, int g, int h) {
  gstate *G = &c->g[g], *H = &c->g[h];
  if (G->part != H->part) return 0;
  int gp = G->kind == IR_FUSE_POINTWISE, hp = H->kind == IR_FUSE_POINTWISE;
  const gstate *keep;                        /* the group whose kind and domain the merge has */
  if (gp && hp) keep = bcast_into(H->dom, G->dom) ? G : bcast_into(G->dom, H->dom) ? H : NULL;
  else if (hp) keep = fits(c, g, H->dom) && !(G->kind == IR_FUSE_MATMUL && feeds_matmul(c, h, g)) ? G : NULL;
  else if (gp) keep = fits(c, h, G->dom) && !(H->kind == IR_FUSE_MATMUL && feeds_matmul(c, g, h)) ? H : NULL;
  else keep = G->kind == IR_FUSE_ROW && H->kind == IR_FUSE_ROW && same_shape(G->dom, H->dom) && G->dims == H->dims &&
              same_shape(G->red, H->red) ? G : NULL;
  if (!keep || reaches(c, g, h, 1) || reaches(c, h, g, 1)) return 0;
  const gstate g0 = *G, h0 = *H;
  gstate k = *keep;
  k.parent = g;
  k.part = G->part;
  k.horizontal = G->horizontal || H->horizontal;
  k.head = G->head;
  k.tail = H->tail;
  k.last = G->last > H->last ? G->last : H->last;
  c->next[G->tail] = H->head;
  *G = k;
  H->parent = g;
  c->trial = 1;
  int ok = group_ok(c, g, -1);
  c->trial = 0;
  if (ok) return 1;
  c->next[g0.tail] = -1;   /* one group reads the other's values as no kernel can: undone */
  *G = g0;
  *H = h0;
  return 0;
}

/* The reduced dims of a reduction over a value of type t, as bits (no dims given: all). */
static uint32_t reduced_dims(const ir_type *t, const grace_attrs *a) {
  uint32_t m = 0;
  if (!a->ndims) return t->ndim ? (1u << t->ndim) - 1 : 0;
  for (int i = 0; i < a->ndims; i++) {
    int64_t d = a->dims[i] < 0 ? a->dims[i] + t->ndim : a->dims[i];
    if (d >= 0 && d < GRACE_MAX_DIMS) m |= 1u << d;
  }
  return m;
}

/* Places instruction k (its producers are placed already). */
static void place(fctx *c, int k, int part) {
  grace_ir *ir = c->ir;
  const ir_inst *in = &ir->insts[k];
  const ir_type *t = &ir->vals[in->first_result].type;
  int prods[64], np = 0, cands[64], nc = 0;
  if (ir_is_region(in->op)) { new_group(c, k, IR_FUSE_SINGLE, part, t); return; }   /* its sub-programs fuse apart */
  for (int j = 0; j < in->nin && j < 64; j++) {
    int b = base_inst(ir, ir->args[in->first_arg + j]);
    if (b < 0) continue;
    int h = group_of(c, b), seen = 0;
    for (int i = 0; i < np; i++) seen |= prods[i] == h;
    if (seen) continue;
    prods[np++] = h;
    if (c->g[h].part == part && joinable_producer(ir->insts[b].op)) cands[nc++] = h;
  }
  grace_opkind kind = grace_op_kind((grace_op)in->op);
  if (is_pointwise(in->op)) {
    /* the most recently extended producer first: that is where the data just was */
    for (int i = 1; i < nc; i++)
      for (int j = i; j > 0 && c->g[cands[j]].last > c->g[cands[j - 1]].last; j--) {
        int s = cands[j]; cands[j] = cands[j - 1]; cands[j - 1] = s;
      }
    int g = -1;
    for (int i = 0; i < nc && g < 0; i++)
      if (fits(c, cands[i], t) && reads_ok(c, cands[i], k) && operands_fit(c, cands[i], k) && join_ok(c, cands[i], prods, np) &&
          (bcast_into(t, c->g[cands[i]].dom) || inplace_fits(c, cands[i], IR_FUSE_POINTWISE, t)))
        g = cands[i];
    if (g < 0) { new_group(c, k, IR_FUSE_POINTWISE, part, t); return; }
    add_pointwise(c, g, k);
    /* the other producer groups become part of this kernel where they can (sibling chains meeting here) */
    for (int i = 0; i < nc; i++) {
      int h = find(c, cands[i]);
      if (h != g) try_merge(c, g, h);
    }
    return;
  }
  if (kind == GRACE_KIND_REDUCE) {
    const ir_type *x = &ir->vals[ir->args[in->first_arg]].type;
    uint32_t dims = reduced_dims(x, &in->attrs);
    int b = base_inst(ir, ir->args[in->first_arg]);
    int h = b >= 0 ? group_of(c, b) : -1, isc = 0;
    for (int i = 0; i < nc; i++) isc |= cands[i] == h;
    if (isc && same_shape(c->g[h].dom, x) && reads_ok(c, h, k) && operands_fit(c, h, k) && join_ok(c, h, prods, np)) {
      gstate *H = &c->g[h];
      if (H->kind == IR_FUSE_POINTWISE) {      /* the producers become the row kernel's prologue */
        const gstate h0 = *H;
        H->kind = IR_FUSE_ROW;
        H->dom = x;
        H->red = t;
        H->dims = dims;
        /* where a producer of the reduced shape is read over the base shape across rows, it stays apart */
        if (group_ok(c, h, -1)) { add(c, h, k); return; }
        *H = h0;
      }
      /* the same keepdim too: the kernel lays every per-row value out one way */
      if (H->kind == IR_FUSE_ROW && H->dims == dims && same_shape(t, H->red)) { add(c, h, k); return; }
    }
    int g = new_group(c, k, IR_FUSE_ROW, part, x);
    c->g[g].red = t;
    c->g[g].dims = dims;
    return;
  }
  if (kind == GRACE_KIND_MATMUL) {
    int g = new_group(c, k, IR_FUSE_MATMUL, part, t);
    /* horizontal: an earlier matmul of this partition reading the same left input with a right operand and
     * result of the same shapes (q/k/v projections) runs as one grouped GEMM, unless one waits for the other */
    int32_t a = ir->args[in->first_arg];
    const ir_type *bt = &ir->vals[ir->args[in->first_arg + 1]].type;
    for (int m = k - 1; m >= 0; m--) {
      const ir_inst *o = &ir->insts[m];
      if (o->op != GRACE_OP_MATMUL || ir->args[o->first_arg] != a) continue;
      int h = group_of(c, m);
      if (h == g || c->g[h].part != part || c->g[h].kind != IR_FUSE_MATMUL) continue;
      if (!same_shape(&ir->vals[ir->args[o->first_arg + 1]].type, bt) || !same_shape(&ir->vals[o->first_result].type, t))
        continue;
      if (reaches(c, g, h, 0) || reaches(c, h, g, 0)) continue;
      c->g[h].horizontal = 1;
      c->g[h].last = k;
      add(c, h, k);            /* k is alone in g: move it over and retire g */
      c->g[g].parent = h;
      c->g[g].head = c->g[g].tail = -1;
      return;
    }
    return;
  }
  if (in->op == GRACE_OP_COPY_ && in->nin == 2) {
    /* copy_ of a pointwise value: the producing kernel stores straight into the destination */
    int b = base_inst(ir, ir->args[in->first_arg + 1]);
    int h = b >= 0 && is_pointwise(ir->insts[b].op) ? group_of(c, b) : -1, isc = 0;
    for (int i = 0; i < nc; i++) isc |= cands[i] == h;
    if (isc && c->g[h].kind == IR_FUSE_POINTWISE && same_shape(t, c->g[h].dom) && reads_ok(c, h, k) &&
        operands_fit(c, h, k) && join_ok(c, h, prods, np)) {
      add(c, h, k);
      return;
    }
  }
  new_group(c, k, IR_FUSE_SINGLE, part, t);
}

/* A pointwise group whose values only one other group reads (a weight cast, a mask built from inputs) is
 * computed inside that group's kernel instead of being stored and read back: it is that kernel's prologue (or a
 * broadcast operand of its epilogue). cons is scratch, one entry per group. */
static void absorb_prologues(fctx *c, int32_t *cons) {
  const grace_ir *ir = c->ir;
  for (int g = 0; g < c->ng; g++) cons[g] = -1;          /* -1: no reader yet, -2: several */
  for (int k = 0; k < ir->ninst; k++) {
    int gk = group_of(c, k);
    if (gk < 0) continue;
    const ir_inst *in = &ir->insts[k];
    for (int j = 0; j < in->nin; j++) {
      int b = base_inst(ir, ir->args[in->first_arg + j]);
      int gb = b >= 0 ? group_of(c, b) : -1;
      if (gb < 0 || gb == gk) continue;
      cons[gb] = cons[gb] == -1 || cons[gb] == gk ? gk : -2;
    }
  }
  for (int g = 0; g < c->ng; g++) {
    if (c->g[g].parent != g || c->g[g].head < 0 || c->g[g].kind != IR_FUSE_POINTWISE || cons[g] < 0) continue;
    int to = find(c, cons[g]);
    if (to != g) try_merge(c, to, g);    /* refused where the kernels do not fit or a cycle would form */
  }
}

/* ---- norms as matmul prologues ---- */
int ir_norm_prologue_on(grace_vm *vm) {
  if (!vm->norm_prologue) {
    const char *e = getenv("GRACE_NORM_PROLOGUE");
    vm->norm_prologue = e && !strcmp(e, "0") ? 2 : 1;
  }
  return vm->norm_prologue == 1;
}

grace_status grace_set_norm_prologue(grace_vm *vm, int on) {
  if (!vm) return GRACE_EARG;
  vm->norm_prologue = on < 0 ? 0 : on ? 1 : 2;
  return GRACE_OK;
}

int ir_norm_feeds_matmul(const grace_ir *ir, int k) {
  const ir_inst *in = &ir->insts[k];
  if ((in->op != GRACE_OP_LAYER_NORM && in->op != GRACE_OP_RMS_NORM) || in->nout != 1 || in->nin < 1 ||
      ir->args[in->first_arg] < 0 || !ir_norm_prologue_on(ir->vm))
    return 0;
  const ir_type *x = &ir->vals[ir->args[in->first_arg]].type;
  grace_dtype dt = x->dtype;
  if (x->device != GRACE_CUDA || x->ndim < 1 || x->wrapped ||
      (dt != GRACE_FLOAT32 && dt != GRACE_FLOAT16 && dt != GRACE_BFLOAT16))
    return 0;
  const int64_t K = x->sizes[x->ndim - 1];
  if (x->sym[x->ndim - 1] || K < 1 || K > IR_NORM_PROLOGUE_K) return 0;
  int64_t rows = 1;   /* a symbolic row count is left to the run, which normalises apart where rows are many */
  for (int d = 0; d + 1 < x->ndim; d++) if (!x->sym[d]) rows *= x->sizes[d];
  if (rows > IR_NORM_PROLOGUE_ROWS) return 0;
  for (int i = 1; i < in->nin; i++) {   /* weight and bias: [K] vectors of x's dtype, or absent */
    int32_t a = ir->args[in->first_arg + i];
    if (a < 0) continue;
    const ir_type *t = &ir->vals[a].type;
    if (t->dtype != dt || t->device != GRACE_CUDA || t->ndim != 1 || t->sizes[0] != K || t->sym[0]) return 0;
  }
  const int32_t r = in->first_result;
  for (int o = 0; o < ir->nout; o++) if (ir->outputs[o] == r) return 0;
  for (int w = 0; w < ir->nwrite; w++) if (ir->writes[w].value == r) return 0;
  int readers = 0;
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *m = &ir->insts[i];
    for (int j = 0; j < m->nin; j++) {
      if (ir->args[m->first_arg + j] != r) continue;
      if (m->op != GRACE_OP_MATMUL || j != 0) return 0;
      readers++;
    }
  }
  return readers > 0;
}

/* A norm that only matmuls read (ir_norm_feeds_matmul) joins their group as its prologue. Matmuls of several groups
 * (q, k and v projections of other shapes: grouped-query attention) become one group first, where none waits for
 * another: the group runs its products one after another, each normalising the rows as it reads them. */
enum { NORM_MAX_GROUPS = 8 };
static void absorb_norms(fctx *c) {
  const grace_ir *ir = c->ir;
  for (int k = 0; k < ir->ninst; k++) {
    int gn = group_of(c, k);
    if (gn < 0 || c->g[gn].kind != IR_FUSE_SINGLE || c->g[gn].head != k || c->g[gn].tail != k ||
        !ir_norm_feeds_matmul(ir, k))
      continue;
    int to[NORM_MAX_GROUPS], nto = 0, ok = 1;
    for (int i = k + 1; i < ir->ninst && ok; i++) {
      const ir_inst *m = &ir->insts[i];
      if (m->op != GRACE_OP_MATMUL || ir->args[m->first_arg] != ir->insts[k].first_result) continue;
      int gm = group_of(c, i), seen = 0;
      for (int j = 0; j < nto; j++) seen |= to[j] == gm;
      ok = c->g[gm].kind == IR_FUSE_MATMUL && c->g[gm].part == c->g[gn].part && (seen || nto < NORM_MAX_GROUPS);
      if (ok && !seen) to[nto++] = gm;
    }
    /* no group may wait for another of them; the norm may not wait for them, nor they for it through a third */
    for (int a = 0; a < nto && ok; a++) {
      ok = !reaches(c, gn, to[a], 0) && !reaches(c, to[a], gn, 1);
      for (int b = 0; b < nto && ok; b++) ok = a == b || !reaches(c, to[a], to[b], 0);
    }
    if (!ok || nto == 0) continue;
    gstate *G = &c->g[to[0]];
    for (int a = 1; a < nto; a++) {
      gstate *H = &c->g[to[a]];
      c->next[G->tail] = H->head;
      G->tail = H->tail;
      if (H->last > G->last) G->last = H->last;
      G->horizontal = 1;
      H->parent = to[0];
      H->head = H->tail = -1;
    }
    c->g[gn].parent = to[0];
    c->g[gn].head = c->g[gn].tail = -1;
    add(c, to[0], k);
  }
}

/* Whether instruction b's result is returned (itself or through views). */
static int returned(const grace_ir *ir, int b) {
  for (int o = 0; o < ir->nout; o++) if (base_inst(ir, ir->outputs[o]) == b) return 1;
  return 0;
}

/* The one group that reads instruction p's result, -1 when it is read by none, by several, by p's own group,
 * through a view (a kernel cannot read a view of a value it computes itself) or returned. */
static int sole_reader(fctx *c, int p) {
  const grace_ir *ir = c->ir;
  if (returned(ir, p)) return -1;
  int g = group_of(c, p), r = -1;
  for (int k = 0; k < ir->ninst; k++) {
    const ir_inst *in = &ir->insts[k];
    int gk = group_of(c, k);
    if (gk < 0) continue;
    for (int j = 0; j < in->nin; j++) {
      int32_t v = ir->args[in->first_arg + j];
      if (base_inst(ir, v) != p) continue;
      if (gk == g || (r >= 0 && r != gk) || v != ir->insts[p].first_result) return -1;
      r = gk;
    }
  }
  return r;
}

/* Whether instruction b's result is stored whatever happens to instruction p: read outside group g by another
 * instruction, or returned. */
static int stored_anyway(fctx *c, int b, int p, int g) {
  const grace_ir *ir = c->ir;
  if (returned(ir, b)) return 1;
  for (int k = 0; k < ir->ninst; k++) {
    if (k == p || group_of(c, k) < 0 || group_of(c, k) == g) continue;
    const ir_inst *in = &ir->insts[k];
    for (int j = 0; j < in->nin; j++) if (base_inst(ir, ir->args[in->first_arg + j]) == b) return 1;
  }
  return 0;
}

/* A matmul's epilogue may end in a pointwise op that only one other, pointwise or row, kernel reads (the float32
 * cast of a residual sum that a decomposed bfloat16 layer_norm reduces). Where what that op reads from the matmul's
 * kernel is stored anyway, storing its result as well only adds traffic: it moves into the reading kernel, which
 * computes it from the stored operands. */
static void sink_epilogue_tails(fctx *c) {
  const grace_ir *ir = c->ir;
  for (int p = ir->ninst - 1; p >= 0; p--) {
    int g = group_of(c, p);
    const ir_inst *in = &ir->insts[p];
    if (g < 0 || c->g[g].kind != IR_FUSE_MATMUL || !is_pointwise(in->op)) continue;
    int to = sole_reader(c, p);
    if (to < 0 || (c->g[to].kind != IR_FUSE_POINTWISE && c->g[to].kind != IR_FUSE_ROW) || c->g[to].part != c->g[g].part ||
        !fits(c, to, &ir->vals[in->first_result].type))
      continue;
    int movable = 1;
    for (int j = 0; j < in->nin && movable; j++) {
      int b = base_inst(ir, ir->args[in->first_arg + j]);
      movable = b < 0 || (group_of(c, b) == g && stored_anyway(c, b, p, g));
    }
    c->group[p] = to;   /* its readers there must read it as that kernel can */
    movable = movable && group_ok(c, to, p);
    c->group[p] = g;
    if (!movable) continue;
    int prev = -1;   /* unlink p from g's member list, then append it to the reader's */
    for (int m = c->g[g].head; m >= 0 && m != p; m = c->next[m]) prev = m;
    if (prev < 0) c->g[g].head = c->next[p];
    else c->next[prev] = c->next[p];
    if (c->g[g].tail == p) c->g[g].tail = prev;
    add_pointwise(c, to, p);
  }
}

static void *alloc(grace_vm *vm, size_t n) { return grace_realloc(vm, NULL, 0, n ? n : 1); }
static void dealloc(grace_vm *vm, void *p, size_t n) { if (p) grace_realloc(vm, p, n ? n : 1, 0); }

void ir_fuse_free(grace_ir *ir, ir_fusion *f) {
  size_t n = (size_t)f->ninst;
  dealloc(ir->vm, f->groups, sizeof *f->groups * n);
  dealloc(ir->vm, f->members, sizeof *f->members * n);
  dealloc(ir->vm, f->inst_group, sizeof *f->inst_group * n);
  memset(f, 0, sizeof *f);
}

/* Orders the final groups topologically (ties: the one whose first instruction comes first) and fills f. */
static grace_status order(fctx *c, ir_fusion *f, int32_t *idx, int32_t *first, int32_t *indeg, int32_t *done,
                          int32_t *start, int32_t *edges) {
  grace_ir *ir = c->ir;
  int n = ir->ninst, ng = 0;
  for (int g = 0; g < c->ng; g++) idx[g] = -1;
  for (int k = 0; k < n; k++) {
    int g = group_of(c, k);
    if (g >= 0 && idx[g] < 0) { idx[g] = ng; first[ng] = k; indeg[ng] = 0; done[ng] = 0; ng++; }
  }
  /* edges producer -> consumer in CSR form: count, then fill */
  for (int i = 0; i <= ng; i++) start[i] = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (int k = 0; k < n; k++) {
      int gk = group_of(c, k);
      if (gk < 0) continue;
      const ir_inst *in = &ir->insts[k];
      for (int j = 0; j < in->nin; j++) {
        int b = base_inst(ir, ir->args[in->first_arg + j]);
        if (b < 0 || group_of(c, b) == gk) continue;
        int p = idx[group_of(c, b)];
        if (pass == 0) { start[p + 1]++; indeg[idx[gk]]++; }
        else edges[start[p]++] = idx[gk];
      }
    }
    if (pass == 0) for (int i = 0; i < ng; i++) start[i + 1] += start[i];
    else for (int i = ng; i > 0; i--) start[i] = start[i - 1];
    if (pass == 1) start[0] = 0;
  }
  int32_t *pos = done;       /* done[g] doubles as the group's position (+1) once placed */
  for (int o = 0; o < ng; o++) {
    int best = -1;
    for (int g = 0; g < ng; g++)
      if (!pos[g] && indeg[g] == 0 && (best < 0 || first[g] < first[best])) best = g;
    if (best < 0) return grace_set_error(ir->vm, GRACE_EINTERNAL, "fuse: the kernel graph of '%s' has a cycle", ir->name);
    pos[best] = o + 1;
    for (int e = start[best]; e < start[best + 1]; e++) indeg[edges[e]]--;
  }
  f->ngroup = ng;
  for (int k = 0; k < n; k++) {
    int g = group_of(c, k);
    f->inst_group[k] = g < 0 ? -1 : pos[idx[g]] - 1;
  }
  for (int g = 0; g < ng; g++) f->groups[g].n = 0;
  for (int k = 0; k < n; k++) if (f->inst_group[k] >= 0) f->groups[f->inst_group[k]].n++;
  int at = 0;
  for (int g = 0; g < ng; g++) { f->groups[g].first = at; at += f->groups[g].n; f->groups[g].n = 0; }
  for (int k = 0, nb = 0; k < n; k++) {
    for (; nb < ir->nbreak && ir->breaks[nb].after < k; nb++) {}
    int o = f->inst_group[k];
    if (o < 0) continue;
    ir_fuse_group *G = &f->groups[o];
    const gstate *s = &c->g[group_of(c, k)];
    G->kind = s->kind;
    G->horizontal = s->horizontal;
    G->partition = nb;   /* the breaks before it (s->part counts regions as well) */
    f->members[G->first + G->n++] = k;
  }
  return GRACE_OK;
}

grace_status ir_fuse(grace_ir *ir, ir_fusion *f) {
  grace_vm *vm = ir->vm;
  int n = ir->ninst;
  size_t sz = (size_t)(n + 1);
  memset(f, 0, sizeof *f);
  fctx c = {.ir = ir};
  c.g = alloc(vm, sizeof *c.g * sz);
  int32_t *ints = alloc(vm, sizeof *ints * sz * 8);    /* every per-instruction scratch array, in one block */
  f->ninst = n;
  f->groups = alloc(vm, sizeof *f->groups * (size_t)f->ninst);
  f->members = alloc(vm, sizeof *f->members * (size_t)f->ninst);
  f->inst_group = alloc(vm, sizeof *f->inst_group * (size_t)f->ninst);
  grace_status st = GRACE_OK;
  if (!c.g || !ints || !f->groups || !f->members || !f->inst_group)
    st = grace_set_error(vm, GRACE_ENOMEM, "fuse: out of host memory grouping '%s'", ir->name);
  if (st == GRACE_OK) {
    c.group = ints; c.next = ints + sz; c.mark = ints + 2 * sz; c.stack = ints + 3 * sz;
    memset(c.mark, 0, sizeof *c.mark * sz);
    int part = 0, nb = 0;
    for (int k = 0; k < n; k++) {
      for (; nb < ir->nbreak && ir->breaks[nb].after < k; nb++) part++;
      c.group[k] = -1;
      /* a region is a barrier: what comes before it and what comes after never share a kernel (joins and merges
       * need one partition), so the region runs between whole kernels */
      int region = ir_is_region(ir->insts[k].op);
      if (region) part++;
      if (!is_free(ir->insts[k].op)) place(&c, k, part);
      if (region) part++;
    }
    sink_epilogue_tails(&c);
    absorb_norms(&c);
    absorb_prologues(&c, ints + 4 * sz);   /* scratch that order() takes over afterwards */
    int32_t *e = ints + 4 * sz;
    int32_t *edges = alloc(vm, sizeof *edges * (size_t)(ir->narg + 1));   /* at most one edge per argument */
    if (!edges) st = grace_set_error(vm, GRACE_ENOMEM, "fuse: out of host memory grouping '%s'", ir->name);
    else st = order(&c, f, e, e + sz, e + 2 * sz, e + 3 * sz, c.mark, edges);
    dealloc(vm, edges, sizeof *edges * (size_t)(ir->narg + 1));
  }
  dealloc(vm, c.g, sizeof *c.g * sz);
  dealloc(vm, ints, sizeof *ints * sz * 8);
  if (st != GRACE_OK) ir_fuse_free(ir, f);
  return st;
}

/* ---- the report ---- */
typedef struct { char *buf; size_t n, len; } rbuf;
static void rput(rbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rput(rbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(b->buf && b->len < b->n ? b->buf + b->len : NULL, b->buf && b->len < b->n ? b->n - b->len : 0, fmt, ap);
  va_end(ap);
  if (w > 0) b->len += (size_t)w;
}

static const char *kind_name(const grace_ir *ir, const ir_fuse_group *g, const int32_t *members) {
  switch (g->kind) {
  case IR_FUSE_POINTWISE: return "pointwise";
  case IR_FUSE_ROW: return "reduction";
  case IR_FUSE_MATMUL: return g->horizontal ? "matmul horizontal" : "matmul";
  default: break;
  }
  if (ir_is_region(ir->insts[members[g->first]].op)) return "region";
  switch (grace_op_kind((grace_op)ir->insts[members[g->first]].op)) {
  case GRACE_KIND_MOVE: return "move";
  case GRACE_KIND_SCAN: return "scan";
  case GRACE_KIND_NORM: return "norm";
  case GRACE_KIND_CREATE: return "create";
  case GRACE_KIND_INPLACE: return "inplace";
  default: return "single";
  }
}

grace_status grace_ir_fuse_report(grace_ir *ir, char *buf, size_t n, int *nkernels) {
  if (nkernels) *nkernels = 0;
  if (buf && n) buf[0] = 0;
  if (!ir) return GRACE_EARG;
  grace_status st = grace_ir_verify(ir);
  if (st != GRACE_OK) return st;
  ir_fusion f;
  if ((st = ir_fuse(ir, &f)) != GRACE_OK) return st;
  /* a value read outside its group (or returned, or written back) is stored by its kernel */
  uint8_t *stored = alloc(ir->vm, (size_t)ir->nval);
  if (!stored) { ir_fuse_free(ir, &f); return grace_set_error(ir->vm, GRACE_ENOMEM, "fuse: out of host memory"); }
  memset(stored, 0, (size_t)(ir->nval ? ir->nval : 1));
  for (int k = 0; k < ir->ninst; k++) {
    const ir_inst *in = &ir->insts[k];
    if (f.inst_group[k] < 0) continue;
    for (int j = 0; j < in->nin; j++) {
      int32_t v = ir_view_base(ir, ir->args[in->first_arg + j]);
      if (v >= 0 && f.inst_group[ir->vals[v].inst] >= 0 && f.inst_group[ir->vals[v].inst] != f.inst_group[k]) stored[v] = 1;
    }
  }
  for (int i = 0; i < ir->nout; i++) { int32_t v = ir_view_base(ir, ir->outputs[i]); if (v >= 0) stored[v] = 1; }
  for (int i = 0; i < ir->nwrite; i++) { int32_t v = ir_view_base(ir, ir->writes[i].value); if (v >= 0) stored[v] = 1; }
  rbuf b = {buf, n, 0};
  for (int g = 0; g < f.ngroup; g++) {
    const ir_fuse_group *G = &f.groups[g];
    rput(&b, "kernel %d %s", g, kind_name(ir, G, f.members));
    if (ir->nbreak) rput(&b, " (partition %d)", G->partition);
    rput(&b, ":");
    for (int i = 0; i < G->n; i++) rput(&b, " %%%d", ir->insts[f.members[G->first + i]].first_result);
    rput(&b, " =");
    for (int i = 0; i < G->n; i++) rput(&b, " %s", ir_op_name(ir->insts[f.members[G->first + i]].op));
    int ns = 0;
    for (int i = 0; i < G->n; i++) {
      const ir_inst *in = &ir->insts[f.members[G->first + i]];
      for (int r = 0; r < in->nout; r++)
        if (stored[in->first_result + r]) rput(&b, ns++ ? " %%%d" : "; stores %%%d", in->first_result + r);
    }
    rput(&b, "\n");
  }
  if (nkernels) *nkernels = f.ngroup;
  dealloc(ir->vm, stored, (size_t)ir->nval);
  ir_fuse_free(ir, &f);
  if (buf && b.len >= n)
    return grace_set_error(ir->vm, GRACE_EARG, "fuse report: %zu bytes of buffer, the report of '%s' needs %zu", n, ir->name,
                           b.len + 1);
  return GRACE_OK;
}
