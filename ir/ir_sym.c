/* ir_sym.c: symbolic sizes (ir_sym.h). How a result's sizes become symbolic: inference runs on the traced sizes
 * (the program's types), then again twice with every free symbol the inputs use moved to other values, one trial
 * far above the traced sizes and one at the smallest allowed. A result dim that keeps its size in all three is
 * static; one that moves as c * s + b for a symbol s is that expression; one that moves otherwise, or an op that
 * fails at the moved sizes, means the op is valid only for some relation of the sizes. Then, in order: symbols of
 * equal traced size are related (s2 == s1: a broadcast or a matmul that needs them equal), the bound is raised to
 * the traced size (a narrow that needs at least that many rows), and at last the symbols are pinned (a reshape to
 * sizes the host computed). Each step only narrows the sizes a call may bring, so a guard failure retraces and a
 * program never runs at sizes its trace did not cover. No op needs a rule of its own: inference is the rule. */
#include <stdio.h>
#include <string.h>
#include "ir/ir_sym.h"
#include "ir/ir_pass.h"
#include "base/base.h"

enum { SYM_MAXROOTS = 16 };

static ir_sym *sym(const grace_ir *ir, int32_t k) { return &ir->syms[k - 1]; }

static int32_t add_sym(grace_ir *ir, ir_sym s) {
  if (ir->nsyms == ir->cap_sym) {
    int nc = ir->cap_sym ? 2 * ir->cap_sym : 8;
    ir_sym *p = grace_realloc(ir->vm, ir->syms, sizeof *p * (size_t)ir->cap_sym, sizeof *p * (size_t)nc);
    if (!p) { grace_set_error(ir->vm, GRACE_ENOMEM, "ir: out of host memory for a symbol"); return 0; }
    ir->syms = p;
    ir->cap_sym = nc;
  }
  ir->syms[ir->nsyms++] = s;
  return ir->nsyms;
}

int32_t ir_sym_new(grace_ir *ir, int64_t hint) {
  return add_sym(ir, (ir_sym){.hint = hint, .min = 2, .mul = 1});
}

static int32_t derived(grace_ir *ir, int32_t base, int64_t mul, int64_t add) {
  if (mul == 1 && add == 0) return base;
  for (int32_t k = 1; k <= ir->nsyms; k++) {
    const ir_sym *s = sym(ir, k);
    if (s->base == base && s->mul == mul && s->add == add) return k;
  }
  return add_sym(ir, (ir_sym){.hint = mul * sym(ir, base)->hint + add, .base = base, .mul = mul, .add = add});
}

int32_t ir_sym_root(const grace_ir *ir, int32_t k) {
  for (int n = 0; k > 0 && k <= ir->nsyms && n < 4 * ir->nsyms + 4; n++) {
    const ir_sym *s = sym(ir, k);
    if (s->base) k = s->base;
    else if (s->same) k = s->same;
    else return k;
  }
  return 0;
}

void ir_sym_pin(grace_ir *ir, int32_t k, const char *why) {
  int32_t r = ir_sym_root(ir, k);
  if (!r || sym(ir, r)->pinned) return;
  ir_sym *s = sym(ir, r);
  s->pinned = 1;
  const char *loc = ir->cur_loc >= 0 && ir->cur_loc < ir->nloc ? ir->locs[ir->cur_loc] : NULL;
  snprintf(s->why, sizeof s->why, "%.120s%s%.70s", why ? why : "", loc ? " at " : "", loc ? loc : "");
}

void ir_sym_pin_all(grace_ir *ir, const char *why) {
  for (int32_t k = 1; k <= ir->nsyms; k++) ir_sym_pin(ir, k, why);
}

int ir_sym_live(const grace_ir *ir) {
  for (int32_t k = 1; k <= ir->nsyms; k++) {
    int32_t r = ir_sym_root(ir, k);
    if (r && !sym(ir, r)->pinned) return 1;
  }
  return 0;
}

int64_t ir_sym_value(const grace_ir *ir, int32_t k, const int64_t *vals) {
  const ir_sym *s = sym(ir, k);
  if (s->base) return s->mul * ir_sym_value(ir, s->base, vals) + s->add;
  int32_t r = ir_sym_root(ir, k);
  return sym(ir, r)->pinned || !vals[r] ? sym(ir, r)->hint : vals[r];
}

grace_status ir_sym_copy(grace_ir *dst, const grace_ir *src) {
  for (int32_t k = 1; k <= src->nsyms; k++) {
    if (!add_sym(dst, *sym(src, k))) return GRACE_ENOMEM;
  }
  return GRACE_OK;
}

/* ---- settling a result's symbols ---- */
typedef struct trial {
  int64_t vals[SYM_MAXROOTS];   /* per root of the op's inputs */
  ir_type res[2];
} trial;

/* The value of s<k> in a trial where roots[j] has v[j] (a root not listed keeps its hint). */
static int64_t trial_value(const grace_ir *ir, int32_t k, const int32_t *roots, int nr, const int64_t *v) {
  const ir_sym *s = sym(ir, k);
  if (s->base) return s->mul * trial_value(ir, s->base, roots, nr, v) + s->add;
  int32_t r = ir_sym_root(ir, k);
  for (int j = 0; j < nr; j++) if (roots[j] == r) return v[j];
  return sym(ir, r)->hint;
}

/* Inference with the symbols moved; 1 when it accepts. The error it sets is the vm's no longer. */
static int infer_moved(grace_ir *ir, int op, int nin, const ir_type *const *in, const grace_attrs *a, int nout,
                       const int32_t *roots, int nr, trial *t) {
  grace_vm *vm = ir->vm;
  ir_type moved[64];
  const ir_type *mp[64];
  if (nin > 64) return 0;
  for (int i = 0; i < nin; i++) {
    if (!in[i]) { mp[i] = NULL; continue; }
    moved[i] = *in[i];
    for (int d = 0; d < in[i]->ndim; d++)
      if (in[i]->sym[d]) moved[i].sizes[d] = trial_value(ir, in[i]->sym[d], roots, nr, t->vals);
    mp[i] = &moved[i];
  }
  grace_status saved = vm->status;
  char msg[VM_ERRLEN];
  memcpy(msg, vm->err, sizeof msg);
  int ok = ir_infer(vm, op, nin, mp, a, nout, t->res) == GRACE_OK;
  vm->status = saved;
  memcpy(vm->err, msg, sizeof msg);
  return ok;
}

/* The symbol result dim size h0 (h1, h2 in the trials) stands for: 0 static, -1 none found. */
static int32_t match_dim(grace_ir *ir, int64_t h0, int64_t h1, int64_t h2, const int32_t *roots, int nr,
                         const trial *t1, const trial *t2) {
  if (h0 == h1 && h0 == h2) return 0;
  for (int j = 0; j < nr; j++) {
    int64_t x0 = sym(ir, roots[j])->hint, x1 = t1->vals[j], x2 = t2->vals[j];
    if (x1 == x0 || (h1 - h0) % (x1 - x0)) continue;
    int64_t c = (h1 - h0) / (x1 - x0), b = h0 - c * x0;
    if (c < 1 || c * x2 + b != h2 || c * 2 + b < 0) continue;
    int32_t k = derived(ir, roots[j], c, b);
    return k ? k : -1;
  }
  return -1;
}

/* Both trials accept, and every result dim is static or a symbol: the results get their symbols. */
static int try_settle(grace_ir *ir, int op, int nin, const ir_type *const *in, const grace_attrs *a, int nout,
                      ir_type *res, const int32_t *roots, int nr) {
  trial t1, t2;
  for (int j = 0; j < nr; j++) {
    const ir_sym *s = sym(ir, roots[j]);
    t1.vals[j] = (s->hint > s->min ? s->hint : s->min) + 1000 + 97 * j;
    t2.vals[j] = s->min + j;
  }
  if (!infer_moved(ir, op, nin, in, a, nout, roots, nr, &t1) || !infer_moved(ir, op, nin, in, a, nout, roots, nr, &t2))
    return 0;
  int32_t got[2][GRACE_MAX_DIMS];
  for (int r = 0; r < nout; r++) {
    if (t1.res[r].ndim != res[r].ndim || t2.res[r].ndim != res[r].ndim || t1.res[r].dtype != res[r].dtype) return 0;
    for (int d = 0; d < res[r].ndim; d++) {
      got[r][d] = match_dim(ir, res[r].sizes[d], t1.res[r].sizes[d], t2.res[r].sizes[d], roots, nr, &t1, &t2);
      if (got[r][d] < 0) return 0;
    }
  }
  for (int r = 0; r < nout; r++) memcpy(res[r].sym, got[r], sizeof(int32_t) * (size_t)res[r].ndim);
  return 1;
}

/* The free, unpinned symbols under the inputs' sizes; -1 when there are too many to try. */
static int input_roots(const grace_ir *ir, int nin, const ir_type *const *in, int32_t *roots) {
  int nr = 0;
  for (int i = 0; i < nin; i++) {
    if (!in[i]) continue;
    for (int d = 0; d < in[i]->ndim; d++) {
      int32_t r = in[i]->sym[d] ? ir_sym_root(ir, in[i]->sym[d]) : 0;
      if (!r || sym(ir, r)->pinned) continue;
      int seen = 0;
      for (int j = 0; j < nr; j++) seen |= roots[j] == r;
      if (seen) continue;
      if (nr == SYM_MAXROOTS) return -1;
      roots[nr++] = r;
    }
  }
  return nr;
}

grace_status ir_sym_settle(grace_ir *ir, int op, int nin, const ir_type *const *in, const grace_attrs *a, int nout,
                           ir_type *res) {
  for (int r = 0; r < nout; r++) memset(res[r].sym, 0, sizeof res[r].sym);
  if (!ir->nsyms) return GRACE_OK;
  int32_t roots[SYM_MAXROOTS];
  int nr = input_roots(ir, nin, in, roots);
  if (nr == 0) return GRACE_OK;
  const char *name = op < GRACE_NOPS ? grace_op_name((grace_op)op) : ir_op_name(op);
  if (nr > 0 && try_settle(ir, op, nin, in, a, nout, res, roots, nr)) return GRACE_OK;
  /* relate symbols of equal traced size, which the op may need equal */
  int related = 0;
  for (int i = 0; i < nr; i++)
    for (int j = i + 1; j < nr; j++) {
      int32_t ri = ir_sym_root(ir, roots[i]), rj = ir_sym_root(ir, roots[j]);
      if (ri != rj && sym(ir, ri)->hint == sym(ir, rj)->hint) {
        ir_sym *keep = sym(ir, rj > ri ? ri : rj), *gone = sym(ir, rj > ri ? rj : ri);
        gone->same = rj > ri ? ri : rj;
        if (gone->min > keep->min) keep->min = gone->min;   /* the root's bound is both's */
        related = 1;
      }
    }
  if (related) {
    nr = input_roots(ir, nin, in, roots);
    if (nr == 0) return GRACE_OK;
    if (nr > 0 && try_settle(ir, op, nin, in, a, nout, res, roots, nr)) return GRACE_OK;
  }
  /* at least the traced size */
  int raised = 0;
  for (int j = 0; j < nr; j++) {
    ir_sym *s = sym(ir, roots[j]);
    if (s->min < s->hint) { s->min = s->hint; raised = 1; }
  }
  if (raised && try_settle(ir, op, nin, in, a, nout, res, roots, nr)) return GRACE_OK;
  /* only the traced sizes */
  char why[48];
  snprintf(why, sizeof why, "%s", name);
  for (int i = 0; i < nin; i++)
    for (int d = 0; in[i] && d < in[i]->ndim; d++) if (in[i]->sym[d]) ir_sym_pin(ir, in[i]->sym[d], why);
  for (int r = 0; r < nout; r++) memset(res[r].sym, 0, sizeof res[r].sym);
  return GRACE_OK;
}

/* ---- binding a call's sizes ---- */
grace_status ir_sym_bind(const grace_ir *ir, int nin, grace_tensor *const *in, int64_t *vals) {
  grace_vm *vm = ir->vm;
  memset(vals, 0, sizeof *vals * (size_t)(ir->nsyms + 1));
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    if (k->op != IR_OP_INPUT || k->input_index < 0 || k->input_index >= nin || !in[k->input_index]) continue;
    const ir_type *t = &ir->vals[k->first_result].type;
    const grace_tensor *x = in[k->input_index];
    const int64_t *sz = grace_tensor_sizes(x);
    for (int d = 0; d < t->ndim && d < grace_tensor_ndim(x); d++) {
      if (!t->sym[d]) continue;
      int32_t r = ir_sym_root(ir, t->sym[d]);
      const ir_sym *s = sym(ir, r);
      char b[64];
      int idx = k->input_index + vm->index_base, dim = d + vm->index_base;
      if (s->pinned && sz[d] != s->hint)
        return vm_err(vm, GRACE_ESHAPE, "run: input %d dim %d has size %lld, the program was specialised to %lld (%s)",
                      idx, dim, (long long)sz[d], (long long)s->hint, ir_sym_str(ir, r, b, sizeof b));
      if (sz[d] < s->min)
        return vm_err(vm, GRACE_ESHAPE, "run: input %d dim %d has size %lld, the program needs %s", idx, dim,
                      (long long)sz[d], ir_sym_str(ir, r, b, sizeof b));
      if (vals[r] && vals[r] != sz[d])
        return vm_err(vm, GRACE_ESHAPE, "run: input %d dim %d has size %lld, but s%d is %lld in another input "
                      "(the program needs them equal)", idx, dim, (long long)sz[d], (int)r, (long long)vals[r]);
      vals[r] = sz[d];
    }
  }
  return GRACE_OK;
}

grace_status ir_sym_specialize(grace_ir *ir, const int64_t *vals, grace_ir **out) {
  *out = NULL;
  ir_rewriter rw;
  grace_status st = ir_rw_begin(&rw, ir);
  for (int k = 0; k < ir->ninst && st == GRACE_OK; k++) st = ir_rw_copy(&rw, k);
  if (st != GRACE_OK) { if (rw.dst) ir_rw_abort(&rw); return st; }
  grace_ir *d = rw.dst;
  for (int v = 0; v < d->nval; v++) {
    ir_type *t = &d->vals[v].type;
    for (int k = 0; k < t->ndim; k++)
      if (t->sym[k]) { t->sizes[k] = ir_sym_value(ir, t->sym[k], vals); t->sym[k] = 0; }
  }
  d->nsyms = 0;   /* the table stays allocated (freed with d); nothing refers to it */
  return ir_rw_finish(&rw, out);
}

const char *ir_sym_str(const grace_ir *ir, int32_t k, char *buf, size_t n) {
  if (k < 1 || k > ir->nsyms) { snprintf(buf, n, "s%d (unknown)", (int)k); return buf; }
  const ir_sym *s = sym(ir, k);
  if (s->base) {
    size_t m = (size_t)snprintf(buf, n, "s%d = ", (int)k);
    if (m < n && s->mul != 1) m += (size_t)snprintf(buf + m, n - m, "%lld*", (long long)s->mul);
    if (m < n) m += (size_t)snprintf(buf + m, n - m, "s%d", (int)s->base);
    if (m < n && s->add) snprintf(buf + m, n - m, " %c %lld", s->add < 0 ? '-' : '+', (long long)(s->add < 0 ? -s->add : s->add));
  } else if (s->same) snprintf(buf, n, "s%d == s%d", (int)k, (int)s->same);
  else if (s->pinned) snprintf(buf, n, "s%d == %lld (specialised: %s)", (int)k, (long long)s->hint, s->why);
  else snprintf(buf, n, "s%d >= %lld (traced at %lld)", (int)k, (long long)s->min, (long long)s->hint);
  return buf;
}
