/* vm_auto.c: branches on values read on the host become cond regions (the automatic form of grace.cond). A host
 * that reads one value of a tensor during a trace or a replay (item()) says how it used it (grace_trace_branch): in
 * one comparison with a constant deciding a branch, or in a way that cannot be recorded (the reason, with its
 * place). The trace keeps that on the break the read made (ir_break: the value, the comparison, the outcome this
 * path took); a replay keeps it per call and hands it to a path it records. Once a function's recorded paths hold
 * both outcomes of such a break, and each runs to its end without another, ir_merge makes them one program; the
 * next replayed call lets the host build the guards of that program (its captured tensors, those of both branches),
 * and from then on the entry runs the program like any other: no host code, no sync at the branch. A branch whose
 * other outcome never comes but whose code for it is an early return gets that path recorded ahead (fn_auto_ahead,
 * at the end of this file). */
#include <stdio.h>
#include <string.h>
#include "vm/vm_fn.h"
#include "vm/vm_trace.h"

/* The break a read at the current point of a replay passes: the lead path's break after the last matched
 * instruction (-1: none). */
static int replay_break(const vm_trace *tr) {
  const grace_ir *p = tr->paths[tr->lead];
  for (int b = 0; b < p->nbreak; b++) if (p->breaks[b].after == tr->cursor - 1) return b;
  return -1;
}

void vm_auto_read(grace_vm *vm, const char *how) {
  vm_trace *tr = vm->trace;
  /* a recording counts reads on the break itself (ir_add_break); in a replay, version counters and data pointers
   * are read by the matching itself, which the recording never saw */
  if (!tr->replay || !how || !strstr(how, "element")) return;
  int b = replay_break(tr);
  if (b < 0 || b >= VM_SEEN) return;
  ir_break *s = &tr->seen[b];
  if (!s->nread) *s = (ir_break){.kind = IR_BRK_READ, .cmp = -1, .value = -1, .why = -1};
  s->nread++;
}

/* Notes on break b what the host did with the value v it read there (why and seen_why: where the reason goes). */
static void note(ir_break *b, grace_value v, grace_cmp cmp, double k, int taken, const char *why, char *out, size_t n) {
  const char *reason = NULL;
  if (b->nread != 1) reason = "several values are read on the host at this point";
  else if (cmp == GRACE_CMP_NONE) reason = why && *why ? why : "the value read is used on the host";
  else if (v < 0) reason = "the value read is not computed by the function (a captured tensor)";
  if (reason) {
    b->kind = IR_BRK_WHY;
    snprintf(out, n, "%s", reason);
    for (char *q = out; *q; q++) if (*q == '"' || *q == '\n') *q = '\'';   /* it prints inside quotes, on one line */
    return;
  }
  b->kind = IR_BRK_PRED;
  b->value = v;
  b->cmp = (int8_t)cmp;
  b->k = k;
  b->taken = (int8_t)(taken != 0);
}

grace_status grace_trace_branch(grace_vm *vm, const grace_tensor *t, grace_cmp cmp, double k, int taken, const char *why) {
  if (!vm) return GRACE_EARG;
  if (!t) return vm_err(vm, GRACE_EARG, "trace: branch: the tensor read is NULL");
  if (cmp < GRACE_CMP_NONE || cmp > GRACE_CMP_TRUTH) return vm_err(vm, GRACE_EARG, "trace: branch: unknown comparison %d", (int)cmp);
  vm_trace *tr = vm->trace;
  if (!tr || tr->paused || tr->parent) return GRACE_OK;
  trace_slot *s = tr->used ? tr_find(tr, t) : NULL;
  grace_value v = s && s->t && s->v >= 0 ? s->v : -1;
  char reason[200] = "";
  if (tr->replay) {
    int b = replay_break(tr);
    if (b < 0 || b >= VM_SEEN || !tr->seen[b].nread) return GRACE_OK;
    note(&tr->seen[b], v, cmp, k, taken, why, reason, sizeof reason);
    snprintf(tr->seen_why[b], sizeof tr->seen_why[b], "%s", reason);
    return GRACE_OK;
  }
  grace_ir *ir = tr->ir;
  if (!ir->nbreak || ir->breaks[ir->nbreak - 1].after != ir->ninst - 1) return GRACE_OK;   /* no break made here */
  ir_break *b = &ir->breaks[ir->nbreak - 1];
  note(b, v, cmp, k, taken, why, reason, sizeof reason);
  if (reason[0] && (b->why = ir_intern(ir, reason)) < 0) return vm_err(vm, GRACE_ENOMEM, "trace: out of host memory");
  return GRACE_OK;
}

grace_status grace_trace_branch_ahead(grace_vm *vm, const char *why) {
  if (!vm) return GRACE_EARG;
  vm_trace *tr = vm->trace;
  if (!tr || tr->paused || tr->parent) return GRACE_OK;
  if (tr->replay) {
    int b = replay_break(tr);
    if (b < 0 || b >= VM_SEEN || tr->seen[b].kind != IR_BRK_PRED) return GRACE_OK;
    tr->seen[b].ahead = why ? 2 : 1;
    snprintf(tr->seen_ahead[b], sizeof tr->seen_ahead[b], "%s", why ? why : "");
    return GRACE_OK;
  }
  grace_ir *ir = tr->ir;
  ir_break *b = ir->nbreak ? &ir->breaks[ir->nbreak - 1] : NULL;
  if (!b || b->after != ir->ninst - 1 || b->kind != IR_BRK_PRED) return GRACE_OK;   /* no predicate made here */
  if (why && (b->ahead_why = ir_intern(ir, why)) < 0) return vm_err(vm, GRACE_ENOMEM, "trace: out of host memory");
  b->ahead = why ? 2 : 1;
  return GRACE_OK;
}

int grace_trace_forced(grace_vm *vm, const grace_tensor *t) {
  vm_trace *tr = vm ? vm->trace : NULL;
  if (!t || !tr || !tr->replay || tr->paused || !tr->ahead_on || tr->ahead_forced) return -1;
  int b = replay_break(tr);
  if (b < 0 || tr->paths[tr->lead]->breaks[b].after != tr->ahead_after) return -1;
  tr->ahead_forced = 1;
  return tr->ahead_outcome;
}

grace_status vm_auto_copy_break(grace_vm *vm, grace_ir *dst, int bi) {
  vm_trace *tr = vm->trace;
  ir_break *d = &dst->breaks[dst->nbreak - 1];
  if (bi >= VM_SEEN || !tr->seen[bi].nread) {   /* not passed by this call: a plain break */
    d->nread = 0;
    return GRACE_OK;
  }
  int32_t after = d->after, loc = d->loc;
  *d = tr->seen[bi];
  d->after = after;
  d->loc = loc;
  d->why = -1;
  if (d->kind == IR_BRK_WHY && (d->why = ir_intern(dst, tr->seen_why[bi])) < 0)
    return vm_err(vm, GRACE_ENOMEM, "replay: out of host memory");
  if (d->ahead == 2 && (d->ahead_why = ir_intern(dst, tr->seen_ahead[bi])) < 0) {
    d->ahead = 0;
    return vm_err(vm, GRACE_ENOMEM, "replay: out of host memory");
  }
  return GRACE_OK;
}

/* ---- compiled functions: merging an entry's paths (vm_fn.c calls these around its replays) ---- */
#define RET_DIFF (-1000)   /* a result that is no tensor and differs from the first path's */

struct fn_auto {
  int nret[FN_MAXPATHS];                /* per path: its results (-1: not known, it cannot merge) */
  int ret[FN_MAXPATHS][FN_MAXARGS];     /* as fn_entry.ret_output, or RET_DIFF */
  int rec_nret, rec_ret[FN_MAXARGS];    /* those of the path the call in progress records */
  grace_ir *prog;                       /* a merged program waiting for its guards */
  int ret_prog[FN_MAXARGS];             /* the entry's ret_output once it runs prog */
  int merged;
  int blocked;                          /* a replayed path changed Lua state: never merged */
  int watched;                          /* replays watched since the last new path */
  int side;                             /* the outcome the call in progress took at the branch (-1: none known) */
  uint64_t kept[2];                     /* the host's guards of the last watched call taking each outcome: a merged
                                           program is guarded by both (a global only one branch reads) */
  int have[2];                          /* kept[s] is known (a handle of 0: nothing to guard) */
  int last, same;                       /* the outcome of the latest calls, and how many in a row took it */
  int ahead_free;                       /* the latest call's host code of the other outcome is an early return */
  int ahead_tried;                      /* the other outcome was recorded ahead, or that was given up */
  char ahead_why[400];                  /* why the other outcome is not recorded ahead ("" none known) */
  grace_ir *watch;                      /* tree[0] without its breaks (watch_ir) */
  char why[600];
};

/* Replays watched for the other outcome of a branch (each under the host's trace, which costs a guard walk) before
 * the merge is given up: a check that never fires (a NaN guard, an early exit for blown-up values) would otherwise
 * make every call pay for it. */
enum { AUTO_WATCH = 16 };
/* Calls taking the same outcome (the trace's included) before the other one is recorded ahead, where its code is
 * an early return: a branch that goes both ways usually shows it within the first calls. */
enum { AUTO_AHEAD = 3 };

int fn_auto_merged(const fn_entry *e) { return e->autos && e->autos->merged; }
const char *fn_auto_why(const fn_entry *e) {
  const struct fn_auto *a = e->autos;
  return !a ? "" : a->why[0] || a->merged || !a->ahead_tried ? a->why : a->ahead_why;
}

void fn_auto_free(grace_fn *fn, fn_entry *e) {
  if (!e->autos) return;
  for (int s = 0; s < 2; s++)
    if (e->autos->kept[s] && fn->host.release) fn->host.release(fn->ud, e->autos->kept[s]);
  grace_ir_free(e->autos->prog);
  grace_ir_free(e->autos->watch);
  grace_realloc(fn->vm, e->autos, sizeof *e->autos, 0);
  e->autos = NULL;
}

/* The outcome the trace's own call took at its branch (tree[0]'s predicate break), -1 when none. */
static int trace_side(const fn_entry *e) {
  const grace_ir *t = e->ntree ? e->tree[0] : NULL;
  for (int b = 0; t && b < t->nbreak; b++)
    if (t->breaks[b].kind == IR_BRK_PRED) return t->breaks[b].taken != 0;
  return -1;
}

static struct fn_auto *autos_of(grace_fn *fn, fn_entry *e) {
  if (e->autos) return e->autos;
  struct fn_auto *a = grace_realloc(fn->vm, NULL, 0, sizeof *a);
  if (!a) return NULL;
  memset(a, 0, sizeof *a);
  for (int p = 0; p < FN_MAXPATHS; p++) a->nret[p] = -1;
  a->rec_nret = -1;
  a->nret[0] = e->nret <= FN_MAXARGS ? e->nret : -1;   /* the first path: the trace's own results */
  memcpy(a->ret[0], e->ret_output, sizeof a->ret[0]);
  a->last = trace_side(e);
  a->same = a->last >= 0;
  return e->autos = a;
}

/* A replayed call that ended right after a branch whose other outcome the lead path recorded (an early return):
 * the matched prefix becomes a path of its own. */
static void record_early_end(grace_vm *vm) {
  vm_trace *tr = vm->trace;
  const grace_ir *p = tr->paths[tr->lead];
  int b = replay_break(tr);
  if (tr->cursor >= p->ninst || b < 0 || b >= VM_SEEN || tr->npending) return;
  const ir_break *seen = &tr->seen[b], *rec = &p->breaks[b];
  if (seen->kind != IR_BRK_PRED || rec->kind != IR_BRK_PRED || seen->taken == rec->taken) return;
  for (int q = 0; q < tr->npaths; q++)   /* a path recorded ending here already */
    if ((tr->alive >> q & 1) && tr->paths[q]->ninst == tr->cursor) return;
  vm_replay_diverge(vm);
}

void fn_auto_call_end(grace_fn *fn, fn_entry *e, int nargs, const grace_arg *args, int nres, const grace_arg *res) {
  grace_vm *vm = fn->vm;
  vm_trace *tr = vm->trace;
  struct fn_auto *a = autos_of(fn, e);
  if (!tr || !a) return;
  a->rec_nret = -1;
  a->side = -1;   /* a replay's notes, or (a call recording a new path) the path's own break */
  for (int b = 0; tr->replay && b < VM_SEEN && a->side < 0; b++) {
    const ir_break *s = &tr->seen[b];
    if (!s->nread || s->kind != IR_BRK_PRED) continue;
    a->side = s->taken != 0;
    if (tr->ahead_on) break;   /* a call recording ahead: not one of the function's own */
    a->same = a->side == a->last ? a->same + 1 : 1;
    a->last = a->side;
    if (a->ahead_tried) break;   /* its reason stays */
    a->ahead_free = s->ahead == 1;
    snprintf(a->ahead_why, sizeof a->ahead_why, "%s", s->ahead == 2 ? tr->seen_ahead[b] : "");
  }
  for (int b = 0; !tr->replay && tr->ir && b < tr->ir->nbreak && a->side < 0; b++)
    if (tr->ir->breaks[b].kind == IR_BRK_PRED) a->side = tr->ir->breaks[b].taken != 0;
  if (tr->replay) record_early_end(vm);
  if (tr->replay || !tr->owns_ir || nres != e->nret || nres > FN_MAXARGS) return;
  int nout = 0;
  for (int j = 0; j < nres; j++) {
    const grace_arg *r = &res[j];
    if (r->kind != GRACE_ARG_TENSOR || !r->t) {
      a->rec_ret[j] = e->ret_output[j] == -1 && fn_same_const(fn, r, &e->ret_const[j]) ? -1 : RET_DIFF;
      continue;
    }
    int argk = -1;
    for (int i = 0; i < nargs && argk < 0; i++) if (args[i].kind == GRACE_ARG_TENSOR && args[i].t == r->t) argk = i;
    if (argk >= 0) { a->rec_ret[j] = -2 - argk; continue; }
    grace_value v;
    if (grace_trace_value(vm, r->t, &v) != GRACE_OK || v < 0 || grace_ir_output(tr->ir, v) != GRACE_OK) return;
    a->rec_ret[j] = nout++;
  }
  a->rec_nret = nres;
}

/* The value of path p that result code c stands for (-1: none). */
static int32_t result_value(const fn_entry *e, const grace_ir *p, int c) {
  if (c >= 0) return c < p->nout ? p->outputs[c] : -1;
  int arg = -2 - c, idx = -1;
  for (int k = 0; k < e->ninput && idx < 0; k++) if (e->input_arg[k] == arg) idx = k;
  int32_t v = idx >= 0 ? ir_input_value(p, idx) : -1;
  /* the argument itself is returned: where the path wrote it in place, its contents are the value written back, not
     the one it came in with */
  for (int w = 0; w < p->nwrite && v >= 0; w++)
    if (p->writes[w].target == v) return p->writes[w].value;
  return v;
}

/* Paths p (then) and q (else): what each returns, as values of its own, into tout/eout; 0 and a->why if they do not
 * return alike (a tensor where the other returns a number, numbers that differ). */
static int results_alike(fn_entry *e, int p, int q, int32_t *tout, int32_t *eout, int *nt) {
  struct fn_auto *a = e->autos;
  *nt = 0;
  if (a->nret[p] < 0 || a->nret[q] < 0 || a->nret[p] != a->nret[q]) {
    snprintf(a->why, sizeof a->why, "the paths' results are not known alike (more than %d, or not recorded)", FN_MAXARGS);
    return 0;
  }
  for (int j = 0; j < a->nret[p]; j++) {
    int cp = a->ret[p][j], cq = a->ret[q][j], tp = cp >= 0 || (cp <= -2 && cp != RET_DIFF),
        tq = cq >= 0 || (cq <= -2 && cq != RET_DIFF);
    if (cp == RET_DIFF || cq == RET_DIFF || tp != tq) {
      snprintf(a->why, sizeof a->why, "result %d is not a tensor in both paths, or a number that differs", j + 1);
      return 0;
    }
    a->ret_prog[j] = -1;
    if (!tp) continue;
    tout[*nt] = result_value(e, e->tree[p], cp);
    eout[*nt] = result_value(e, e->tree[q], cq);
    if (tout[*nt] < 0 || eout[*nt] < 0) {
      snprintf(a->why, sizeof a->why, "result %d is not a value of its path", j + 1);
      return 0;
    }
    a->ret_prog[j] = (*nt)++;
  }
  return 1;
}

/* Merges paths p and q of e when they take the two outcomes of their one break: a->prog. */
static void try_pair(grace_fn *fn, fn_entry *e, int p, int q) {
  struct fn_auto *a = e->autos;
  grace_ir *P = e->tree[p], *Q = e->tree[q];
  if (P->nbreak != 1 || Q->nbreak != 1 || P->breaks[0].kind != IR_BRK_PRED || Q->breaks[0].kind != IR_BRK_PRED ||
      P->breaks[0].taken == Q->breaks[0].taken)
    return;
  if (!P->breaks[0].taken) { int s = p; p = q; q = s; grace_ir *t = P; P = Q; Q = t; }
  int32_t tout[FN_MAXARGS], eout[FN_MAXARGS];
  int nt;
  if (!results_alike(e, p, q, tout, eout, &nt)) return;
  grace_ir *m = NULL;
  char why[500];
  grace_status st = ir_merge(P, Q, 0, nt, tout, eout, &m, why, sizeof why);
  if (st != GRACE_OK) {
    snprintf(a->why, sizeof a->why, "%s", st == GRACE_EUNSUPPORTED ? why : grace_last_error(fn->vm));
    return;
  }
  grace_ir *opt = NULL;
  if (grace_ir_pass(m, FN_COMPILE_PASSES, &opt) == GRACE_OK) {
    grace_ir_free(m);
    m = opt;
  }
  a->prog = m;
  a->why[0] = 0;
  if (fn_log_topic("ir")) {
    const char *text = grace_ir_text(m);
    fprintf(stderr, "grace: %s: two paths merged into one program:\n%s", fn->name, text ? text : "(no text)\n");
  }
}

void fn_auto_path_added(grace_fn *fn, fn_entry *e) {
  struct fn_auto *a = autos_of(fn, e);
  if (!a) return;
  int q = e->ntree - 1;
  a->nret[q] = a->rec_nret;
  memcpy(a->ret[q], a->rec_ret, sizeof a->ret[q]);
  a->rec_nret = -1;
  a->watched = 0;
  for (int p = 0; p < q && !a->prog && !a->merged && !a->blocked; p++) try_pair(fn, e, p, q);
  if (a->prog && (!fn->host.trace_begin || !fn->host.trace_end)) fn_auto_guard_end(fn, e, 1);   /* no host guards */
}

/* A replayed call runs under the host's trace_begin/trace_end while the entry may still merge: a trace checks
 * that the function has no effect on Lua state a compiled call would not repeat, and the paths a replay records
 * need the same check before a program stands for them; a call with a merged program waiting builds its guards. */
/* Keeps g as the guard of the outcome the call in progress took (replacing an older one). */
static void keep_side(grace_fn *fn, struct fn_auto *a, uint64_t g) {
  if (a->kept[a->side] && fn->host.release) fn->host.release(fn->ud, a->kept[a->side]);
  a->kept[a->side] = g;
  a->have[a->side] = 1;
}

/* What a watched call's Lua code is checked against: tree[0] without its breaks, as for a program that runs without
 * that code (then a table it changes counts even where the function does not read it back: an append to a log). */
static grace_ir *watch_ir(fn_entry *e) {
  struct fn_auto *a = e->autos;
  if (!a->watch && (a->watch = ir_clone(e->tree[0]))) a->watch->nbreak = 0;
  return a->watch ? a->watch : e->tree[0];
}

int fn_auto_guard_begin(grace_fn *fn, fn_entry *e) {
  struct fn_auto *a = e->autos;
  if (fn->no_auto || e->ir || !fn->host.trace_begin || !fn->host.trace_end || (a && (a->blocked || a->merged))) return 0;
  int watch = a && a->prog;
  for (int p = 0; p < e->ntree && !watch; p++)
    for (int b = 0; b < e->tree[p]->nbreak && !watch; b++) watch = e->tree[p]->breaks[b].kind == IR_BRK_PRED;
  if (watch) {
    if (!(a = autos_of(fn, e))) return 0;
    if (a->watched >= AUTO_WATCH) {
      a->blocked = 1;
      snprintf(a->why, sizeof a->why, "the branch's other outcome did not come in %d replayed calls (each watched "
               "for effects on Lua state): the paths stay replayed%s%.400s", AUTO_WATCH,
               a->ahead_why[0] ? "; " : "", a->ahead_why);
      grace_ir_free(a->prog);
      a->prog = NULL;
      return 0;
    }
    a->watched++;
  }
  if (watch) fn->host.trace_begin(fn->ud);
  return watch;
}

void fn_auto_guard_end(grace_fn *fn, fn_entry *e, int ok) {
  struct fn_auto *a = autos_of(fn, e);
  uint64_t g = 0;
  int ng = 0;
  char why[1024] = "";
  grace_ir *check = a && a->prog ? a->prog : a ? watch_ir(e) : e->tree[0];
  if (fn->host.trace_end) fn->host.trace_end(fn->ud, ok && a ? check : NULL, &g, &ng, why, sizeof why);
  if (!ok || !a || !a->prog) {   /* a failed call builds nothing; a watched one may block the merge */
    if (ok && a && why[0]) {
      a->blocked = 1;
      snprintf(a->why, sizeof a->why, "a replayed call cannot be compiled: %.500s", why);
    }
    if (ok && a && !why[0] && a->side >= 0) keep_side(fn, a, g);   /* what this outcome's Lua code read */
    else if (g && fn->host.release) fn->host.release(fn->ud, g);
    return;
  }
  /* the other outcome's guard: a watched call's, or the trace's own (e->guard) when the trace took it */
  int known = a->side >= 0 && a->have[!a->side], from_trace = 0;
  uint64_t other = known ? a->kept[!a->side] : 0;
  if (!known && a->side >= 0 && trace_side(e) == !a->side) { other = e->guard; known = from_trace = 1; }
  if (!why[0] && !known) {   /* wait for a call that takes it (the watch bounds the wait) */
    if (a->side >= 0) keep_side(fn, a, g);
    else if (g && fn->host.release) fn->host.release(fn->ud, g);
    return;
  }
  e->ir = a->prog;
  a->prog = NULL;
  if (!why[0] && fn_place_rewrite(fn->vm, e) != GRACE_OK) snprintf(why, sizeof why, "placement: %.900s", grace_last_error(fn->vm));
  if (why[0]) {
    snprintf(a->why, sizeof a->why, "the merged program cannot be guarded: %.500s", why);
    grace_ir_free(e->ir);
    e->ir = NULL;
    fn_moves_free(fn->vm, e->moves);
    e->moves = NULL;
    if (g && fn->host.release) fn->host.release(fn->ud, g);
    return;
  }
  /* the other branch's guard is checked on every call too, unless this call's checks all it does */
  int covered = other && g && fn->host.guard_covers && fn->host.guard_covers(fn->ud, g, other);
  if (e->guard && !from_trace && fn->host.release) fn->host.release(fn->ud, e->guard);
  e->guard = g;
  e->guard2 = covered ? 0 : other;
  if (covered && fn->host.release) fn->host.release(fn->ud, other);
  if (!from_trace) { a->kept[!a->side] = 0; a->have[!a->side] = 0; }
  e->nguarded = ng;
  memcpy(e->ret_output, a->ret_prog, sizeof e->ret_output);
  a->merged = 1;
}

/* ---- recording a branch's other outcome ahead ---- */
/* A check that never fires (an early exit for blown-up values) would never give its second path, and every call
 * would stop at the branch. Where the host says the other outcome's code only returns values already computed
 * (grace_trace_branch_ahead), that path is the prefix the calls replay, then the return: after a call that went the
 * usual way, grace calls the function once more on the same arguments with the read forced the other way, records
 * that path and drops the results. Running the prefix again must leave no trace: it may not write in place to
 * arguments or captured tensors nor draw random numbers (checked on the recorded ops), the Lua code is watched for
 * effects as in any watched call, and the call may neither leave the path nor run an op after the branch. */

/* Whether in-place op k of p writes into an argument or a captured tensor: its target, followed back through views
 * and earlier in-place writes, is one. */
static int writes_outside(const grace_ir *p, const ir_inst *k) {
  int32_t v = k->nin ? p->args[k->first_arg] : -1;
  for (int n = 0; v >= 0 && n < p->ninst; n++) {
    const ir_inst *d = &p->insts[p->vals[v].inst];
    if (d->op == IR_OP_INPUT || d->op == IR_OP_CONST) return 1;
    if (d->op >= GRACE_NOPS || d->nin < 1) return 0;
    grace_opkind kind = grace_op_kind((grace_op)d->op);
    if (kind != GRACE_KIND_VIEW && kind != GRACE_KIND_INPLACE) return 0;
    v = p->args[d->first_arg];
  }
  return v >= 0;
}

const char *fn_auto_prefix_effects(const grace_ir *p, int after, char *buf, size_t n) {
  for (int i = 0; i <= after && i < p->ninst; i++) {
    const ir_inst *k = &p->insts[i];
    const char *what = NULL;
    if (ir_inst_random(p, i))
      what = "draws random numbers";
    else if (k->op < GRACE_NOPS && grace_op_kind((grace_op)k->op) == GRACE_KIND_INPLACE && writes_outside(p, k))
      what = "writes in place to an argument or a captured tensor";
    for (int r = 0; r < k->nout && !what; r++)
      if (p->vals[k->first_result + r].root >= 0) what = "writes in place to an argument or a captured tensor";
    if (what) {
      snprintf(buf, n, "the code before the branch %s (%s at %s), which a second run would repeat", what,
               grace_op_name((grace_op)k->op), k->loc >= 0 ? p->locs[k->loc] : "an unknown place");
      return buf;
    }
  }
  return NULL;
}

/* The call recording ahead (path p took the usual outcome, seen): NULL when its path joined e's, else why not. */
static const char *run_ahead(grace_fn *fn, fn_entry *e, int p, int nargs, const grace_arg *args, char *buf, size_t n) {
  grace_vm *vm = fn->vm;
  struct fn_auto *a = e->autos;
  int seen = a->side, after = e->tree[p]->breaks[0].after;
  uint64_t seed, off, seed2, off2, ver[FN_MAXARGS];
  grace_rng_state(vm, &seed, &off);
  for (int i = 0; i < nargs; i++) ver[i] = args[i].kind == GRACE_ARG_TENSOR && args[i].t ? grace_tensor_version(args[i].t) : 0;
  if (fn_replay_begin(fn, e, args) != GRACE_OK) {
    snprintf(buf, n, "its replay failed: %.300s", grace_last_error(vm));
    return buf;
  }
  vm_trace *tr = vm->trace;
  tr->ahead_on = 1;
  tr->ahead_after = after;
  tr->ahead_outcome = !seen;
  fn->host.trace_begin(fn->ud);
  grace_arg res[FN_MAXARGS];
  int nres = 0;
  char err[300], before[VM_ERRLEN];   /* the VM's message, put back after: this call is not the user's */
  grace_status before_st = vm->status;
  snprintf(before, sizeof before, "%s", grace_last_error(vm));
  grace_set_error(vm, GRACE_OK, "%s", "");
  grace_status st = fn->host.call(fn->ud, nargs, args, &nres, res, FN_MAXARGS);
  int nw = nres < FN_MAXARGS ? nres : FN_MAXARGS, forced = tr->ahead_forced;
  snprintf(err, sizeof err, "the host function failed%s%.250s", *grace_last_error(vm) ? ": " : "", grace_last_error(vm));
  if (st == GRACE_OK) fn_auto_call_end(fn, e, nargs, args, nw, res);
  grace_ir *rec = NULL;
  grace_status rs = grace_replay_end(vm, &rec);
  if (rs != GRACE_OK) snprintf(err, sizeof err, "%s", grace_last_error(vm));
  uint64_t g = 0;
  int ng = 0, changed = 0;
  char lua[1024] = "";
  fn->host.trace_end(fn->ud, st == GRACE_OK && rs == GRACE_OK ? watch_ir(e) : NULL, &g, &ng, lua, sizeof lua);
  if (st == GRACE_OK) fn_release_results(fn, nw, res);
  grace_rng_state(vm, &seed2, &off2);
  if (seed2 != seed || off2 != off) grace_set_rng_state(vm, seed, off);
  for (int i = 0; i < nargs; i++)
    changed |= args[i].kind == GRACE_ARG_TENSOR && args[i].t && grace_tensor_version(args[i].t) != ver[i];
  int verified = rec && grace_ir_verify(rec) == GRACE_OK;
  char bad_ir[300];
  snprintf(bad_ir, sizeof bad_ir, "%s", grace_last_error(vm));
  grace_set_error(vm, before_st, "%s", before);
  const ir_break *b = rec && rec->nbreak == 1 ? &rec->breaks[0] : NULL;
  const char *why = st != GRACE_OK || rs != GRACE_OK ? err
                  : !forced ? "the value read at the branch was not forced"
                  : !b || b->kind != IR_BRK_PRED || b->taken == seen || rec->ninst != b->after + 1
                      ? "the call did not return right after the branch"
                  : lua[0] ? lua
                  : seed2 != seed || off2 != off ? "it drew random numbers"
                  : changed ? "it wrote in place to an argument"
                  : e->ntree >= FN_MAXPATHS ? "the function has too many paths"
                  : !verified ? bad_ir : NULL;
  if (why) {
    snprintf(buf, n, "the call recording it failed: %.300s", why);
    grace_ir_free(rec);
    if (g && fn->host.release) fn->host.release(fn->ud, g);
    a->side = seen;
    return buf;
  }
  a->side = !seen;
  keep_side(fn, a, g);   /* what that outcome's Lua code read */
  e->tree[e->ntree++] = rec;
  fn->aheads++;
  fn_auto_path_added(fn, e);
  return NULL;
}

void fn_auto_ahead(grace_fn *fn, fn_entry *e, int nargs, const grace_arg *args) {
  struct fn_auto *a = e->autos;
  if (!a || a->ahead_tried || a->merged || a->blocked || a->prog || a->side < 0 || a->same < AUTO_AHEAD ||
      !fn->host.trace_begin || !fn->host.trace_end)
    return;
  int p = -1;
  for (int q = 0; q < e->ntree; q++) {   /* one path has the usual outcome, none the other */
    const grace_ir *t = e->tree[q];
    if (t->nbreak != 1 || t->breaks[0].kind != IR_BRK_PRED) continue;
    if (t->breaks[0].taken != a->side) return;
    if (p < 0) p = q;
  }
  if (p < 0) return;
  a->ahead_tried = 1;
  const grace_ir *P = e->tree[p];
  const char *where = P->breaks[0].loc >= 0 ? P->locs[P->breaks[0].loc] : "(unknown place)";
  char buf[400];
  const char *why = a->ahead_free ? fn_auto_prefix_effects(P, P->breaks[0].after, buf, sizeof buf) : NULL;
  if (a->ahead_free && !why) why = run_ahead(fn, e, p, nargs, args, buf, sizeof buf);
  if (!a->ahead_free) {   /* the host's reason says where already */
    if (!a->ahead_why[0])
      snprintf(a->ahead_why, sizeof a->ahead_why, "%s: the branch's other way is not recorded before a call takes it: "
               "the host does not say that its code is free of effects", where);
  } else if (why)
    snprintf(a->ahead_why, sizeof a->ahead_why, "%s: the branch's other way is not recorded before a call takes it: "
             "%.250s", where, why);
  else
    a->ahead_why[0] = 0;
  why = a->ahead_why[0] ? a->ahead_why : NULL;
  if (fn_log_topic("regions"))
    fprintf(stderr, "grace: regions of %s: %s\n", fn->name, why ? why : "the other way of the branch was recorded "
            "before a call took it (its code only returns values already computed)");
}
