/* ir_merge.c: two recorded paths of one function that part at a host branch become one program with a cond region
 * (the automatic form of grace.cond). A function with a graph break is replayed as a tree of paths (vm/vm_replay.c);
 * where the host only compared one value it read with a constant (`if x:max():item() > 1e9 then`), and both
 * outcomes were recorded, nothing the host did depends on the value but the choice of path. So the prefix the paths
 * share runs as it is, the comparison becomes ops on the device (a 0-d predicate, compared in float64, or exactly in
 * int64 for integers, as Lua compares the number), and each path's rest becomes one branch of a cond region: a
 * sub-program taking, as explicit inputs, the prefix values and captured tensors it reads (as grace.cond records
 * them), returning what the path returns. A tensor either path writes back (an argument or a captured tensor
 * updated in place) is a further result of the region, each branch returning its contents as that path leaves them,
 * copied into the tensor once after the region (as grace.cond's writes). Dynamic scalars, symbolic sizes and further
 * breaks keep the paths apart: the caller keeps replaying them. Pure IR: no tensor runs here. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "ir/ir.h"
#include "base/base.h"

#define MAXREG 63   /* values a region passes (cond: the predicate and up to 63 arguments) */

#define MAXW 32      /* tensors the paths write back */

typedef struct merge {
  grace_ir *dst, *src[2];        /* the merged program; the then path and the else path */
  int after;                     /* the prefix is instructions 0..after */
  int32_t *map[2];               /* per source value: its value in dst (prefix values and hoisted consts), else -1 */
  int32_t args[MAXREG];          /* dst values passed to the region */
  int nargs;
  int32_t wt[MAXW];              /* the dst values (inputs, consts) either path writes back */
  int nw;
  char *why;
  size_t n;
} merge;

static grace_status refuse(merge *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static grace_status refuse(merge *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->why, m->n, fmt, ap);
  va_end(ap);
  return GRACE_EUNSUPPORTED;
}

static int is_prefix(const merge *m, const grace_ir *p, int32_t v) { return v >= 0 && p->vals[v].inst <= m->after; }

/* Instruction i of a and of b is the same call on the same values (their value numbering agrees up to i). */
static int same_inst(const grace_ir *a, const grace_ir *b, int i) {
  const ir_inst *x = &a->insts[i], *y = &b->insts[i];
  if (x->op != y->op || x->nin != y->nin || x->nout != y->nout || x->first_result != y->first_result ||
      !ir_attrs_equal(&x->attrs, &y->attrs) || x->input_index != y->input_index ||
      memcmp(&x->literal, &y->literal, sizeof x->literal) || x->iliteral != y->iliteral)
    return 0;
  for (int j = 0; j < x->nin; j++) if (a->args[x->first_arg + j] != b->args[y->first_arg + j]) return 0;
  for (int r = 0; r < x->nout; r++)
    if (!ir_type_equal(&a->vals[x->first_result + r].type, &b->vals[y->first_result + r].type, 1)) return 0;
  if (x->op == IR_OP_CONST) return a->consts[x->input_index].t == b->consts[y->input_index].t;
  return 1;
}

/* The paths' shapes allow a merge at break b (m->why says why not). */
static grace_status check_paths(merge *m, int b, int nout, const int32_t *const *outs) {
  grace_ir *t = m->src[0], *e = m->src[1];
  for (int s = 0; s < 2; s++) {
    grace_ir *p = m->src[s];
    if (b < 0 || b >= p->nbreak || p->nbreak != 1)
      return refuse(m, "the paths break more than once (only one branch read on the host can become a region)");
    if (p->nscalars || p->nsyms) return refuse(m, "a path has dynamic scalars or symbolic sizes");
    if (ir_has_region(p)) return refuse(m, "a path holds a cond or while_loop already");
  }
  const ir_break *bt = &t->breaks[b], *be = &e->breaks[b];
  if (bt->kind != IR_BRK_PRED || be->kind != IR_BRK_PRED || bt->nread != 1 || be->nread != 1)
    return refuse(m, "the host read there is no single comparison deciding a branch");
  if (bt->after != be->after || bt->value != be->value || bt->cmp != be->cmp || memcmp(&bt->k, &be->k, sizeof bt->k) ||
      bt->taken != 1 || be->taken != 0)
    return refuse(m, "the two paths do not take the two outcomes of one comparison");
  m->after = bt->after;
  for (int i = 0; i <= m->after; i++)
    if (!same_inst(t, e, i)) return refuse(m, "the paths differ before the break");
  if (nout < 1) return refuse(m, "the function returns no tensor computed by the paths");
  char a[160], c[160];
  for (int r = 0; r < nout; r++) {
    const ir_type *x = &t->vals[outs[0][r]].type, *y = &e->vals[outs[1][r]].type;
    if (!ir_type_equal(x, y, 0))
      return refuse(m, "result %d is %s when the branch is taken and %s when not", r + 1, ir_type_str(x, a, sizeof a),
                    ir_type_str(y, c, sizeof c));
  }
  /* an in-place op of a branch on a value from before it is functional in each path (its own new value): only what
     the paths write back, and return, leaves the region */
  for (int s = 0; s < 2; s++) {
    grace_ir *p = m->src[s];
    for (int i = m->after + 1; i < p->ninst; i++) {
      const ir_inst *k = &p->insts[i];
      if (k->op == IR_OP_INPUT || k->op == IR_OP_SCALAR) return refuse(m, "a path declares an input after the break");
    }
  }
  return GRACE_OK;
}

/* Copies instruction k of p into dst (a const as a capture of dst with the version it was recorded at); the first
 * result's value in dst, or -1. */
static int32_t copy_inst(grace_ir *dst, const grace_ir *p, const ir_inst *k, const int32_t *map) {
  grace_ir_set_location(dst, k->loc >= 0 ? p->locs[k->loc] : NULL);
  if (k->op == IR_OP_CONST) {
    const ir_const *c = &p->consts[k->input_index];
    /* a tensor both branches read is captured once; the paths were recorded at different calls, so one a path
       writes back may have other versions in them: the later one is expected (the prefix's consts match by tensor
       too) */
    for (int j = 0; j < dst->nconst; j++)
      if (dst->consts[j].t == c->t)
        for (int i = 0; i < dst->ninst; i++)
          if (dst->insts[i].op == IR_OP_CONST && dst->insts[i].input_index == j) {
            if (c->version > dst->consts[j].version) dst->consts[j].version = c->version;
            return dst->insts[i].first_result;
          }
    grace_value v;
    if (grace_ir_const(dst, c->t, &v) != GRACE_OK) return -1;
    dst->consts[dst->nconst - 1].version = c->version;
    dst->consts[dst->nconst - 1].local = c->local;
    return v;
  }
  int32_t in[64];
  ir_type types[4];
  for (int j = 0; j < k->nin && j < 64; j++) {
    int32_t v = p->args[k->first_arg + j];
    in[j] = v < 0 ? -1 : map[v];
  }
  for (int r = 0; r < k->nout && r < 4; r++) types[r] = p->vals[k->first_result + r].type;
  int32_t v = ir_append(dst, k->op, k->nin, in, &k->attrs, k->nout, types);
  if (v < 0) return -1;
  ir_inst *n = &dst->insts[dst->ninst - 1];
  n->literal = k->literal;
  n->iliteral = k->iliteral;
  n->input_index = k->input_index;
  if (k->op == IR_OP_INPUT) dst->ninputs++;
  return v;
}

static grace_status add_arg(merge *m, int32_t v) {
  for (int j = 0; j < m->nargs; j++) if (m->args[j] == v) return GRACE_OK;
  if (m->nargs == MAXREG) return refuse(m, "the branches read more than %d values from before the branch", MAXREG);
  m->args[m->nargs++] = v;
  return GRACE_OK;
}

/* The prefix into dst (both paths' values mapped), then what each rest reads from outside it: prefix values
 * (literals aside: each branch makes its own) and captured tensors, hoisted into dst, become region arguments. */
static grace_status build_outer(merge *m, int nout, const int32_t *const *outs) {
  grace_ir *t = m->src[0];
  for (int i = 0; i <= m->after; i++) {
    const ir_inst *k = &t->insts[i];
    int32_t v = copy_inst(m->dst, t, k, m->map[0]);
    if (v < 0) return GRACE_ENOMEM;
    for (int r = 0; r < k->nout; r++) m->map[0][k->first_result + r] = m->map[1][k->first_result + r] = v + r;
  }
  grace_status st = GRACE_OK;
  for (int s = 0; s < 2 && st == GRACE_OK; s++) {
    grace_ir *p = m->src[s];
    for (int i = m->after + 1; i < p->ninst && st == GRACE_OK; i++) {
      const ir_inst *k = &p->insts[i];
      if (k->op == IR_OP_CONST) {
        int32_t v = copy_inst(m->dst, p, k, m->map[s]);
        if (v < 0) return GRACE_ENOMEM;
        m->map[s][k->first_result] = v;
        st = add_arg(m, v);
        continue;
      }
      for (int j = 0; j < k->nin && st == GRACE_OK; j++) {
        int32_t v = p->args[k->first_arg + j];
        if (is_prefix(m, p, v) && p->insts[p->vals[v].inst].op != IR_OP_LITERAL) st = add_arg(m, m->map[s][v]);
      }
    }
    for (int r = 0; r < nout && st == GRACE_OK; r++)
      if (is_prefix(m, p, outs[s][r])) st = add_arg(m, m->map[s][outs[s][r]]);
  }
  return st;
}

/* The tensors the paths write back, as dst values (after build_outer mapped the inputs and consts), each passed to
 * the region, with the value each path leaves in it passed too where that was computed before the branch. */
static grace_status collect_writes(merge *m) {
  grace_status st = GRACE_OK;
  for (int s = 0; s < 2 && st == GRACE_OK; s++) {
    grace_ir *p = m->src[s];
    for (int i = 0; i < p->nwrite && st == GRACE_OK; i++) {
      int32_t d = m->map[s][p->writes[i].target], k = 0;
      if (d < 0) return refuse(m, "a path writes back a tensor the merged program does not hold");
      while (k < m->nw && m->wt[k] != d) k++;
      if (k == m->nw) {
        if (m->nw == MAXW) return refuse(m, "the paths write back more than %d tensors", MAXW);
        m->wt[m->nw++] = d;
        st = add_arg(m, d);
      }
      if (st == GRACE_OK && is_prefix(m, p, p->writes[i].value)) st = add_arg(m, m->map[s][p->writes[i].value]);
    }
  }
  return st;
}

/* `value cmp k` as a 0-d bool of dst, as Lua compares the number item() gives: in float64, or in int64 for an
 * integer tensor and an integral k (exact past 2^53). */
static grace_status predicate(merge *m, const ir_break *b, grace_value *pred) {
  grace_ir *d = m->dst;
  grace_value v = m->map[0][b->value];
  const ir_type *ty = &d->vals[v].type;
  grace_dtype dt = ty->dtype;
  if (ir_type_numel(ty) != 1) return refuse(m, "the value read at the branch has %lld elements", (long long)ir_type_numel(ty));
  grace_status st = GRACE_OK;
  if (ty->ndim > 0) {
    grace_attrs a = {0};   /* reshape to [] */
    if ((st = grace_ir_op(d, GRACE_OP_RESHAPE, 1, &v, &a, 1, &v)) != GRACE_OK) return st;
  }
  if (b->cmp == GRACE_CMP_TRUTH) {
    if (dt != GRACE_BOOL) return refuse(m, "the branch tests the truth of a number, which Lua always takes as true");
    *pred = v;
    return GRACE_OK;
  }
  if (dt == GRACE_BOOL) return refuse(m, "the branch compares a boolean with a number");
  static const grace_op ops[] = {GRACE_OP_LT, GRACE_OP_LE, GRACE_OP_GT, GRACE_OP_GE, GRACE_OP_EQ, GRACE_OP_NE};
  int exact = !grace_dtype_is_float(dt) && b->k == (double)(int64_t)b->k && b->k > -9.2e18 && b->k < 9.2e18;
  grace_attrs cast = {.has_dtype = 1, .dtype = exact ? GRACE_INT64 : GRACE_FLOAT64};
  grace_value lit, in[2];
  if (dt != cast.dtype && (st = grace_ir_op(d, GRACE_OP_CAST, 1, &v, &cast, 1, &v)) != GRACE_OK) return st;
  st = exact ? grace_ir_literal_int(d, (int64_t)b->k, &lit) : grace_ir_literal(d, b->k, 0, &lit);
  in[0] = v;
  in[1] = lit;
  if (st == GRACE_OK) st = grace_ir_op(d, ops[b->cmp], 2, in, NULL, 1, pred);
  return st;
}

/* Sub-program of side s: the region's arguments as inputs, then the path's rest with its literals made inside; it
 * returns the path's results, then each tensor the paths write back (m->wt) as this path leaves it. */
static grace_ir *build_sub(merge *m, int s, int nout, const int32_t *out) {
  grace_ir *p = m->src[s], *d = m->dst;
  char name[80];
  snprintf(name, sizeof name, "%.60s_%s", d->name, s ? "else" : "then");
  grace_ir *sub = grace_ir_new(d->vm, name);
  int32_t *map = sub ? grace_realloc(d->vm, NULL, 0, sizeof *map * (size_t)p->nval) : NULL;
  grace_status st = map ? GRACE_OK : GRACE_ENOMEM;
  for (int32_t v = 0; map && v < p->nval; v++) map[v] = -1;
  for (int j = 0; j < m->nargs && st == GRACE_OK; j++) {
    const ir_type *ty = &d->vals[m->args[j]].type;
    grace_value in;
    if ((st = grace_ir_input(sub, ty->dtype, ty->device, ty->ndim, ty->sizes, &in)) != GRACE_OK) break;
    for (int32_t v = 0; v < p->nval; v++)   /* the source values this argument stands for */
      if (m->map[s][v] == m->args[j] && (is_prefix(m, p, v) || p->insts[p->vals[v].inst].op == IR_OP_CONST)) map[v] = in;
  }
  for (int i = 0; i <= m->after && st == GRACE_OK; i++)   /* literals of the prefix the rest reads */
    if (p->insts[i].op == IR_OP_LITERAL) {
      int32_t v = copy_inst(sub, p, &p->insts[i], map);
      if (v < 0) st = GRACE_ENOMEM;
      else map[p->insts[i].first_result] = v;
    }
  for (int i = m->after + 1; i < p->ninst && st == GRACE_OK; i++) {
    const ir_inst *k = &p->insts[i];
    if (k->op == IR_OP_CONST) continue;   /* an argument */
    int32_t v = copy_inst(sub, p, k, map);
    if (v < 0) st = GRACE_ENOMEM;
    for (int r = 0; r < k->nout && v >= 0; r++) map[k->first_result + r] = v + r;
  }
  for (int r = 0; r < nout && st == GRACE_OK; r++) st = grace_ir_output(sub, map[out[r]]);
  for (int k = 0; k < m->nw && st == GRACE_OK; k++) {   /* each written tensor as this path leaves it */
    int32_t v = -1, wrote = 0;
    for (int i = 0; i < p->nwrite; i++)
      if (m->map[s][p->writes[i].target] == m->wt[k]) { v = map[p->writes[i].value]; wrote = 1; }
    for (int j = 0; j < m->nargs && v < 0 && !wrote; j++)   /* untouched by this path: the tensor as it came in */
      if (m->args[j] == m->wt[k]) v = ir_input_value(sub, j);
    /* a write whose value this sub-program lacks must not pass for no write (the tensor would keep its contents) */
    st = v >= 0 ? grace_ir_output(sub, v) : grace_set_error(d->vm, GRACE_EARG, "merge: a written tensor has no value");
  }
  if (map) grace_realloc(d->vm, map, sizeof *map * (size_t)p->nval, 0);
  if (st != GRACE_OK) { grace_ir_free(sub); return NULL; }
  return sub;
}

grace_status ir_merge(grace_ir *t, grace_ir *e, int b, int nout, const int32_t *tout, const int32_t *eout, grace_ir **out,
                      char *why, size_t n) {
  if (!t || !e) return GRACE_EARG;
  grace_vm *vm = t->vm;
  if (!out || !why || !n || nout < 0 || (nout && (!tout || !eout)) || nout > 64)
    return grace_set_error(vm, GRACE_EARG, "merge: bad arguments");
  *out = NULL;
  why[0] = 0;
  merge m = {.src = {t, e}, .why = why, .n = n};
  const int32_t *outs[2] = {tout, eout};
  for (int r = 0; r < nout; r++)
    if (tout[r] < 0 || tout[r] >= t->nval || eout[r] < 0 || eout[r] >= e->nval)
      return grace_set_error(vm, GRACE_EARG, "merge: result %d is no value of its path", r);
  grace_status st = check_paths(&m, b, nout, outs);
  if (st != GRACE_OK) return st;
  m.map[0] = grace_realloc(vm, NULL, 0, sizeof(int32_t) * (size_t)t->nval);
  m.map[1] = grace_realloc(vm, NULL, 0, sizeof(int32_t) * (size_t)e->nval);
  m.dst = grace_ir_new(vm, t->name);
  if (!m.map[0] || !m.map[1] || !m.dst) st = grace_set_error(vm, GRACE_ENOMEM, "merge: out of host memory");
  for (int s = 0; s < 2 && st == GRACE_OK; s++)
    for (int32_t v = 0; v < m.src[s]->nval; v++) m.map[s][v] = -1;
  if (st == GRACE_OK) st = build_outer(&m, nout, outs);
  if (st == GRACE_OK) st = collect_writes(&m);
  grace_value pred = -1, res[64 + MAXW];
  if (st == GRACE_OK) {
    grace_ir_set_location(m.dst, t->breaks[b].loc >= 0 ? t->locs[t->breaks[b].loc] : NULL);
    st = predicate(&m, &t->breaks[b], &pred);
  }
  grace_ir *sub[2] = {NULL, NULL};
  for (int s = 0; s < 2 && st == GRACE_OK; s++)
    if (!(sub[s] = build_sub(&m, s, nout, outs[s]))) st = grace_set_error(vm, GRACE_ENOMEM, "merge: out of host memory");
  if (st == GRACE_OK) st = grace_ir_cond(m.dst, pred, m.nargs, m.args, sub[0], sub[1], nout + m.nw, res);
  if (st != GRACE_OK) {   /* grace_ir_cond takes the sub-programs only when it succeeds; one may be built alone */
    grace_ir_free(sub[0]);
    grace_ir_free(sub[1]);
  }
  for (int r = 0; r < nout && st == GRACE_OK; r++) st = grace_ir_output(m.dst, res[r]);
  /* written back once, after the region: the version advances by one a call, as grace.cond's writes do (the paths'
     own counts differ, and a count the CPU and the graphs apply alike is one) */
  for (int k = 0; k < m.nw && st == GRACE_OK; k++) {
    grace_value c;
    if ((st = grace_ir_op(m.dst, GRACE_OP_COPY_, 2, (grace_value[]){m.wt[k], res[nout + k]}, NULL, 1, &c)) == GRACE_OK)
      st = grace_ir_write(m.dst, m.wt[k], c);
  }
  if (st == GRACE_OK && (st = grace_ir_verify(m.dst)) != GRACE_OK)   /* a case this file missed: keep replaying */
    st = refuse(&m, "the merged program does not verify: %.300s", grace_last_error(vm));
  if (m.map[0]) grace_realloc(vm, m.map[0], sizeof(int32_t) * (size_t)t->nval, 0);
  if (m.map[1]) grace_realloc(vm, m.map[1], sizeof(int32_t) * (size_t)e->nval, 0);
  if (st != GRACE_OK) { grace_ir_free(m.dst); return st; }
  *out = m.dst;
  return GRACE_OK;
}
