/* vm_fn.c: compiled functions (grace_fn, include/grace.h), the host-independent part of a host's compile. A call
 * checks the guards of the cached entries and runs the first that passes (the host function does not run);
 * otherwise it traces the host function by running it once under a core trace and caches the IR with guards on
 * what the trace depended on: the arguments (tensor types, numbers and booleans by value, host values by identity),
 * their aliasing, and whatever the host's own guard checks (captured values it reads). Functions with graph breaks
 * are replayed, each partition between breaks a program of its own (vm_part.c); numbers that change may become dynamic scalars (fn_promote); what cannot be compiled runs eagerly,
 * and the host hears why once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vm/vm_fn.h"
#include "ir/ir.h"
#include "ir/ir_sym.h"
#include "vm/vm_trace.h"

/* ---- guards on arguments ---- */
static void tensor_guard(fn_guard *g, const grace_tensor *t) {
  g->kind = FG_TENSOR;
  memset(g->sym, 0, sizeof g->sym);
  g->dt = grace_tensor_dtype(t);
  g->dev = grace_tensor_device(t);
  g->ndim = grace_tensor_ndim(t);
  g->contiguous = grace_tensor_is_contiguous(t);
  memcpy(g->sizes, grace_tensor_sizes(t), sizeof(int64_t) * (size_t)g->ndim);
  memcpy(g->strides, grace_tensor_strides(t), sizeof(int64_t) * (size_t)g->ndim);
}

/* Two tensor guards accept the same tensors: dtype, device, sizes (symbolic ones aside), contiguity, and strides
 * when strided. */
static int same_tensor_guard(const fn_guard *a, const fn_guard *b) {
  if (a->dt != b->dt || a->dev != b->dev || a->ndim != b->ndim || a->contiguous != b->contiguous ||
      memcmp(a->sym, b->sym, sizeof(int32_t) * (size_t)a->ndim))
    return 0;
  for (int d = 0; d < a->ndim; d++) if (!a->sym[d] && a->sizes[d] != b->sizes[d]) return 0;
  return a->contiguous || !memcmp(a->strides, b->strides, sizeof(int64_t) * (size_t)a->ndim);
}

/* Guard g takes tensor t as far as its own facts go (symbolic sizes are the entry's to check: sym_miss). */
static int tensor_passes(const fn_guard *g, const grace_tensor *t) {
  fn_guard now;
  tensor_guard(&now, t);
  memcpy(now.sym, g->sym, sizeof now.sym);
  return same_tensor_guard(g, &now);
}

const char *fn_tensor_desc(const fn_guard *g, char *buf, size_t n) {
  char s[160];
  size_t k = (size_t)snprintf(s, sizeof s, "[");
  for (int d = 0; d < g->ndim && k < sizeof s; d++)
    k += g->sym[d] ? (size_t)snprintf(s + k, sizeof s - k, d ? ", s%d" : "s%d", (int)g->sym[d])
                   : (size_t)snprintf(s + k, sizeof s - k, d ? ", %lld" : "%lld", (long long)g->sizes[d]);
  if (k < sizeof s) snprintf(s + k, sizeof s - k, "]");
  snprintf(buf, n, "%s %s%s", grace_dtype_name(g->dt), s, g->contiguous ? "" : " (strided)");
  return buf;
}

static int same_host(grace_fn *fn, uint64_t a, uint64_t b) {
  return a == b || (fn->host.same && a && b && fn->host.same(fn->ud, a, b));
}

/* Why argument a fails guard g (NULL: it passes). */
static const char *arg_miss(grace_fn *fn, const fn_guard *g, const grace_arg *a, char *buf, size_t n) {
  switch (g->kind) {
  case FG_NIL: return a->kind == GRACE_ARG_NIL ? NULL : "is no longer nil";
  case FG_BOOL: return a->kind == GRACE_ARG_BOOL && a->i == g->i ? NULL : "boolean changed";
  case FG_INT:
    if (a->kind == GRACE_ARG_INT && a->i == g->i) return NULL;
    snprintf(buf, n, "number changed (%lld at trace time)", (long long)g->i);
    return buf;
  case FG_FLOAT:   /* bit for bit: -0.0 is not 0.0 (1/x tells them apart), and NaN is itself */
    if (a->kind == GRACE_ARG_FLOAT && !memcmp(&a->f, &g->f, sizeof a->f)) return NULL;
    snprintf(buf, n, "number changed (%.17g at trace time)", g->f);
    return buf;
  case FG_SCALAR:
    return (a->kind == GRACE_ARG_INT || a->kind == GRACE_ARG_FLOAT) && (a->kind == GRACE_ARG_INT) == g->scalar_int
               ? NULL : "number subtype changed";
  case FG_HOST:
    return a->kind == GRACE_ARG_HOST && same_host(fn, g->host, a->host)
               ? NULL : "a different value (strings by value, tables and functions by identity)";
  case FG_TENSOR: {
    if (a->kind != GRACE_ARG_TENSOR || !a->t) return "not a tensor";
    if (tensor_passes(g, a->t)) return NULL;
    fn_guard now;
    tensor_guard(&now, a->t);
    char want[200], got[200];
    snprintf(buf, n, "tensor %s, traced with %s", fn_tensor_desc(&now, got, sizeof got), fn_tensor_desc(g, want, sizeof want));
    return buf;
  }
  }
  return "unknown guard";
}

/* Which argument each tensor argument shares storage with (-1: none): aliasing changes what in-place writes do,
 * so the pattern is part of the guards. */
static void alias_pattern(int nargs, const grace_arg *args, int *alias) {
  const void *ids[FN_MAXARGS];
  for (int i = 0; i < nargs && i < FN_MAXARGS; i++) {
    grace_tensor *t = args[i].kind == GRACE_ARG_TENSOR ? args[i].t : NULL;
    ids[i] = t ? grace_tensor_storage_id(t) : NULL;
    alias[i] = -1;
    for (int j = 0; j < i && t; j++) if (ids[j] == ids[i]) { alias[i] = j; break; }
  }
}

/* Why the call's arguments alias differently from the trace, or overlap a captured tensor of a program that writes
 * in place (NULL: they do not). */
static const char *alias_miss(const fn_entry *e, int nargs, const grace_arg *args) {
  int now[FN_MAXARGS];
  alias_pattern(nargs, args, now);
  if (memcmp(now, e->alias, sizeof(int) * (size_t)nargs)) return "tensor arguments share storage differently than when traced";
  const grace_ir *ir = e->ir;
  if (!ir || !grace_ir_count(ir, "writes")) return NULL;
  int nc = grace_ir_count(ir, "consts");
  for (int i = 0; i < nargs; i++) {
    if (args[i].kind != GRACE_ARG_TENSOR || !args[i].t) continue;
    for (int k = 0; k < nc; k++) {
      grace_tensor *c = grace_ir_const_tensor(ir, k);
      if (c && grace_tensor_storage_id(c) == grace_tensor_storage_id(args[i].t))
        return "a tensor argument shares storage with a captured tensor of a program that writes in place";
    }
  }
  return NULL;
}

/* Why the symbolic sizes of the call's tensors break the bounds or relations of e's program (NULL: they do not). */
static const char *sym_miss(grace_fn *fn, const fn_entry *e, int nargs, const grace_arg *args, char *buf, size_t n) {
  const grace_ir *ir = e->ir;
  if (!ir || !ir->nsyms) return NULL;
  int64_t small[64], *vals = small;   /* per free symbol: the size this call gives it */
  size_t bytes = sizeof *vals * (size_t)(ir->nsyms + 1);
  if (ir->nsyms >= 64 && !(vals = grace_realloc(fn->vm, NULL, 0, bytes))) return "out of host memory checking sizes";
  memset(vals, 0, bytes);
  const char *miss = NULL;
  for (int i = 0; i < nargs && !miss; i++) {
    const fn_guard *g = &e->args[i];
    if (g->kind != FG_TENSOR) continue;
    const int64_t *sz = grace_tensor_sizes(args[i].t);
    for (int d = 0; d < g->ndim; d++) {
      if (!g->sym[d]) continue;
      int32_t r = ir_sym_root(ir, g->sym[d]);
      const ir_sym *s = &ir->syms[r - 1];
      if (sz[d] < s->min || (vals[r] && vals[r] != sz[d])) {
        char rel[96];
        if (sz[d] < s->min) ir_sym_str(ir, r, rel, sizeof rel);
        else snprintf(rel, sizeof rel, "sizes equal to s%d, which is %lld here", (int)r, (long long)vals[r]);
        snprintf(buf, n, "argument %d dim %d has size %lld, the program needs %s", i + 1, d + 1, (long long)sz[d], rel);
        miss = buf;
        break;
      }
      vals[r] = sz[d];
    }
  }
  if (vals != small) grace_realloc(fn->vm, vals, bytes, 0);
  return miss;
}

/* Why entry e does not take this call (NULL: it does); an argument's miss is also noted in fn->last_miss. */
static const char *entry_miss(grace_fn *fn, const fn_entry *e, int nargs, const grace_arg *args, char *buf, size_t n) {
  const char *miss = e->nargs == nargs ? NULL : "number of arguments changed";
  for (int i = 0; i < nargs && !miss; i++) {
    miss = arg_miss(fn, &e->args[i], &args[i], buf, n);
    if (miss) snprintf(fn->last_miss, sizeof fn->last_miss, "argument %d: %.370s", i + 1, miss);
  }
  if (!miss && (miss = sym_miss(fn, e, nargs, args, buf, n))) snprintf(fn->last_miss, sizeof fn->last_miss, "%.390s", miss);
  if (!miss) miss = alias_miss(e, nargs, args);
  if (!miss && e->guard && fn->host.guard_check && !fn->host.guard_check(fn->ud, e->guard, nargs, args, buf, n))
    miss = buf[0] ? buf : "a value the host guards changed";
  if (!miss && e->guard2 && fn->host.guard_check && !fn->host.guard_check(fn->ud, e->guard2, nargs, args, buf, n))
    miss = buf[0] ? buf : "a value the host guards changed";
  return miss;
}

/* ---- entries and results ---- */
void fn_release_results(grace_fn *fn, int nres, grace_arg *res) {
  for (int j = 0; j < nres; j++)
    if (res[j].kind == GRACE_ARG_TENSOR && res[j].t) { grace_tensor_release(res[j].t); res[j].t = NULL; }
}

static void release_handle(grace_fn *fn, uint64_t h) {
  if (h && fn->host.release) fn->host.release(fn->ud, h);
}

static uint64_t keep_handle(grace_fn *fn, uint64_t h) {
  return h && fn->host.keep ? fn->host.keep(fn->ud, h) : h;
}

void fn_entry_free(grace_fn *fn, fn_entry *e) {
  if (!e) return;
  grace_ir_free(e->ir);
  vm_parts_free(fn->vm, e->parts);
  fn_auto_free(fn, e);
  fn_moves_free(fn->vm, e->moves);
  for (int k = 0; k < e->ntree; k++) grace_ir_free(e->tree[k]);
  for (int i = 0; i < e->nargs && i < FN_MAXARGS; i++) if (e->args[i].kind == FG_HOST) release_handle(fn, e->args[i].host);
  for (int j = 0; j < e->nret && j < FN_MAXARGS; j++)
    if (e->ret_output[j] == -1 && e->ret_const[j].kind == GRACE_ARG_HOST) release_handle(fn, e->ret_const[j].host);
  release_handle(fn, e->guard);
  release_handle(fn, e->guard2);
  grace_realloc(fn->vm, e, sizeof *e, 0);
}

/* ---- tracing ---- */
/* The guards of the arguments into e, and their trace inputs; a tensor the trace refuses makes the entry eager. */
static void trace_args(grace_fn *fn, fn_entry *e, int nargs, const grace_arg *args, const unsigned *symdims) {
  for (int i = 0; i < nargs; i++) {
    const grace_arg *a = &args[i];
    fn_guard *g = &e->args[i];
    switch (a->kind) {
    case GRACE_ARG_NIL: g->kind = FG_NIL; break;
    case GRACE_ARG_BOOL: g->kind = FG_BOOL; g->i = a->i != 0; break;
    case GRACE_ARG_INT: g->kind = FG_INT; g->i = a->i; break;
    case GRACE_ARG_FLOAT: g->kind = FG_FLOAT; g->f = a->f; break;
    case GRACE_ARG_HOST: g->kind = FG_HOST; g->host = keep_handle(fn, a->host); break;
    case GRACE_ARG_TENSOR: {
      grace_value v;
      tensor_guard(g, a->t);
      if (grace_trace_input(fn->vm, a->t, &v) != GRACE_OK) {
        if (!e->why[0]) snprintf(e->why, sizeof e->why, "argument %d: %.900s", i + 1, grace_last_error(fn->vm));
      } else
        for (int d = 0; symdims && d < g->ndim; d++) {   /* a size that changes: a symbol of the program */
          if (!(symdims[i] >> d & 1u) || g->sizes[d] < 2) continue;
          int32_t k = ir_sym_new(e->ir, g->sizes[d]);
          if (!k) break;
          e->ir->vals[v].type.sym[d] = g->sym[d] = k;
        }
      e->input_arg[e->ninput++] = i;
      break;
    }
    }
  }
}

/* How each result of the trace comes back: an output of the program, an argument, or a constant. A failure to add
 * an output is returned (the trace is still active). */
static grace_status trace_results(grace_fn *fn, fn_entry *e, int nargs, const grace_arg *args, int n, grace_arg *res,
                                  int maxres) {
  int nouts = 0;
  e->nret = n;
  if (n > FN_MAXARGS && !e->why[0]) snprintf(e->why, sizeof e->why, "more than %d results", FN_MAXARGS);
  for (int j = 0; j < n && j < FN_MAXARGS && j < maxres; j++) {
    const grace_arg *r = &res[j];
    if (r->kind == GRACE_ARG_TENSOR && r->t) {
      int argk = -1;
      for (int i = 0; i < nargs && argk < 0; i++) if (args[i].kind == GRACE_ARG_TENSOR && args[i].t == r->t) argk = i;
      if (argk >= 0) { e->ret_output[j] = -2 - argk; continue; }
      grace_value v;
      grace_status st = grace_trace_value(fn->vm, r->t, &v);
      if (st == GRACE_OK && v >= 0) st = grace_ir_output(e->ir, v);
      if (st != GRACE_OK) return st;
      e->ret_output[j] = nouts++;   /* v < 0: a problem was noted, and the entry will run eagerly */
      continue;
    }
    if (r->kind == GRACE_ARG_HOST && r->is_mutable && !e->why[0])
      snprintf(e->why, sizeof e->why, "result %d is a table: return tensors and numbers directly", j + 1);
    e->ret_output[j] = -1;
    e->ret_const[j] = *r;
    e->ret_const[j].t = NULL;
    if (r->kind == GRACE_ARG_HOST) e->ret_const[j].host = keep_handle(fn, r->host);
  }
  return GRACE_OK;
}

/* After a clean trace: the whole-program passes (a recording stays as traced where they fail), or the recording as
 * the first path of a function with breaks; the logs $GRACE_LOG asks for. */
static void finish_program(grace_fn *fn, fn_entry *e) {
  grace_vm *vm = fn->vm;
  if (!e->why[0] && grace_ir_verify(e->ir) != GRACE_OK) snprintf(e->why, sizeof e->why, "internal: %.1000s", grace_last_error(vm));
  if (fn_log_topic("ir")) {
    if (e->why[0]) fprintf(stderr, "grace: %s: no IR, runs eagerly: %s\n", fn->name, e->why);
    else fprintf(stderr, "grace: %s traced:\n%s", fn->name, grace_ir_text(e->ir));
  }
  if (!e->why[0] && grace_ir_count(e->ir, "breaks") > 0) {
    e->tree[e->ntree++] = e->ir;
    e->ir = NULL;
    fn_place_explain(vm, e);
  } else if (!e->why[0]) {
    grace_ir *opt = NULL;
    if (grace_ir_pass(e->ir, FN_COMPILE_PASSES, &opt) == GRACE_OK) {
      grace_ir_free(e->ir);
      e->ir = opt;
      if (fn_place_rewrite(vm, e) != GRACE_OK)
        snprintf(e->why, sizeof e->why, "placement: %.1000s", grace_last_error(vm));
      if (fn_log_topic("ir")) {
        fprintf(stderr, "grace: after %s:\n%s", FN_COMPILE_PASSES, grace_ir_text(e->ir));
        fn_log_plan(vm, e->ir);
      }
    } else if (fn_log_topic("ir"))
      fprintf(stderr, "grace: %s: passes failed, the traced IR runs: %s\n", fn->name, grace_last_error(vm));
  }
  if (!e->why[0] && fn_log_topic("placement")) {
    char prefix[300];
    snprintf(prefix, sizeof prefix, "grace: placement of %s: ", fn->name);
    for (const char *p = fn_moves_text(e->moves), *q; *p; p = *q ? q + 1 : q) {   /* one line per decision */
      if (!(q = strchr(p, '\n'))) q = p + strlen(p);
      fprintf(stderr, "%s%.*s\n", prefix, (int)(q - p), p);
    }
    fn_log_placement(vm, e->ir ? e->ir : e->tree[e->ntree - 1], prefix);
  }
  if (!e->why[0] && e->ir && fn_log_topic("regions")) fn_log_regions(vm, fn->name, e->ir);
  if (e->why[0]) {
    grace_ir_free(e->ir);
    e->ir = NULL;
  }
}

/* Ends the host's part of a trace that failed: it undoes what trace_begin set up. */
static void host_abort(grace_fn *fn) {
  uint64_t g = 0;
  int ng = 0;
  char why[8];
  if (fn->host.trace_end) fn->host.trace_end(fn->ud, NULL, &g, &ng, why, sizeof why);
  release_handle(fn, g);
}

/* After the passes: what the program kept symbolic stays so in the guards; a size it had to specialise (the host read
 * it, an op needs exactly it) is guarded by value, and not tried symbolic again. A program with recorded paths or
 * regions runs at its traced sizes for now. */
static void settle_guards(grace_fn *fn, fn_entry *e) {
  grace_ir *ir = e->ir;
  if (ir && ir_has_region(ir)) ir_sym_pin_all(ir, "cond and while_loop run at traced sizes");
  for (int k = 0; k < e->ntree; k++) ir_sym_pin_all(e->tree[k], "a function with graph breaks runs at traced sizes");
  for (int i = 0; i < e->nargs; i++) {
    fn_guard *g = &e->args[i];
    if (g->kind != FG_TENSOR) continue;
    for (int d = 0; d < g->ndim; d++) {
      if (!g->sym[d]) continue;
      int32_t r = ir ? ir_sym_root(ir, g->sym[d]) : 0;
      if (r && !ir->syms[r - 1].pinned) continue;
      g->sym[d] = 0;
      if (ir || e->ntree) fn->pinned_dims[i] |= 1u << d;   /* (an entry that runs eagerly proved nothing) */
    }
  }
}

int fn_symbolic_dims(const grace_fn *fn, int nargs, const grace_arg *args, unsigned *out) {
  int any = 0;
  for (int i = 0; i < nargs && i < FN_MAXARGS; i++) {
    out[i] = 0;
    const grace_tensor *t = args[i].kind == GRACE_ARG_TENSOR ? args[i].t : NULL;
    if (!t) continue;
    for (int d = 0; d < grace_tensor_ndim(t) && d < 32; d++)
      if ((fn->sym_dims[i] >> d & 1u) && !(fn->pinned_dims[i] >> d & 1u) && grace_tensor_sizes(t)[d] >= 2) out[i] |= 1u << d;
    any |= out[i] != 0;
  }
  return any;
}

grace_status fn_trace(grace_fn *fn, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres,
                      fn_entry **out) {
  grace_vm *vm = fn->vm;
  unsigned symdims[FN_MAXARGS];
  int symbolic = fn_symbolic_dims(fn, nargs, args, symdims);
  *out = NULL;
  *nres = 0;
  fn_entry *e = grace_realloc(vm, NULL, 0, sizeof *e);
  if (!e) return grace_set_error(vm, GRACE_ENOMEM, "%s: out of memory for a compiled entry", fn->name);
  memset(e, 0, sizeof *e);
  e->nargs = nargs;
  alias_pattern(nargs, args, e->alias);
  grace_status st = GRACE_OK;
  if (!(e->ir = grace_ir_new(vm, fn->irname))) st = GRACE_ENOMEM;
  else st = grace_trace_begin(vm, e->ir, fn->host.where, fn->ud);
  if (st != GRACE_OK) { fn_entry_free(fn, e); return st; }
  if (fn->host.trace_begin) fn->host.trace_begin(fn->ud);
  trace_args(fn, e, nargs, args, symbolic ? symdims : NULL);
  int n = 0;
  st = fn->host.call(fn->ud, nargs, args, &n, res, maxres);
  if (st != GRACE_OK) {
    grace_trace_end(vm);
    host_abort(fn);
    fn_entry_free(fn, e);
    return st == GRACE_EHOST ? grace_set_error(vm, st, "%s: error in the host function", fn->name) : st;
  }
  int nw = n < maxres ? n : maxres;
  st = trace_results(fn, e, nargs, args, n, res, maxres);
  if (st != GRACE_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", grace_last_error(vm));
    grace_trace_end(vm);
    host_abort(fn);
    fn_entry_free(fn, e);
    fn_release_results(fn, nw, res);
    return grace_set_error(vm, st, "%s", msg);
  }
  char problems[1024];
  snprintf(problems, sizeof problems, "%s", grace_trace_problems(vm));
  if (grace_trace_end(vm) != GRACE_OK && !e->why[0]) {
    snprintf(e->why, sizeof e->why, "%s", problems[0] ? problems : grace_last_error(vm));
    size_t wl = strlen(e->why);
    while (wl && e->why[wl - 1] == '\n') e->why[--wl] = 0;   /* several problems stay one per line */
  }
  if (fn->host.trace_end) {
    char why[1024] = "";
    fn->host.trace_end(fn->ud, e->why[0] ? NULL : e->ir, &e->guard, &e->nguarded, why, sizeof why);
    if (!e->why[0] && why[0]) snprintf(e->why, sizeof e->why, "%s", why);
  }
  finish_program(fn, e);
  settle_guards(fn, e);
  *nres = n;
  *out = e;
  return GRACE_OK;
}

/* ---- running an entry ---- */
/* Runs entry e's program on the arguments; results into res. */
static grace_status run_entry(grace_fn *fn, fn_entry *e, const grace_arg *args, int *nres, grace_arg *res) {
  grace_vm *vm = fn->vm;
  grace_tensor *in[2 * FN_MAXARGS], *out[FN_MAXARGS], *scal[FN_MAXARGS], *staged[FN_MAXARGS];
  int n = 0, ns = 0;
  for (int k = 0; k < e->ninput; k++) in[n++] = args[e->input_arg[k]].t;
  grace_status st = fn_place_inputs(vm, e, in, staged);
  for (int k = 0; k < e->nscalar && st == GRACE_OK; k++) {
    const grace_arg *a = &args[e->scalar_arg[k]];
    scal[ns] = NULL;
    st = a->kind == GRACE_ARG_INT ? grace_tensor_scalar_int(vm, a->i, &scal[ns]) : grace_tensor_scalar(vm, a->f, 0, &scal[ns]);
    if (st == GRACE_OK) in[n++] = scal[ns++];
  }
  int nout = grace_ir_count(e->ir, "outputs");
  if (st == GRACE_OK) st = grace_ir_run(e->ir, n, in, nout, out);
  for (int k = 0; k < ns; k++) grace_tensor_release(scal[k]);
  for (int k = 0; k < e->ninput; k++) grace_tensor_release(staged[k]);
  if (st != GRACE_OK) return st;
  for (int j = 0; j < e->nret; j++) {
    int r = e->ret_output[j];
    if (r >= 0) {
      res[j] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = out[r]};
      grace_tensor_retain(out[r]);
    } else if (r <= -2) {
      res[j] = args[-2 - r];
      if (res[j].kind == GRACE_ARG_TENSOR && res[j].t) grace_tensor_retain(res[j].t);
    } else
      res[j] = e->ret_const[j];
  }
  for (int k = 0; k < nout; k++) grace_tensor_release(out[k]);
  *nres = e->nret;
  e->hits++;
  return GRACE_OK;
}

/* Results past the caller's room: what was written goes, and the call fails. */
static grace_status check_room(grace_fn *fn, int *nres, grace_arg *res, int maxres) {
  if (*nres <= maxres) return GRACE_OK;
  int n = *nres;
  fn_release_results(fn, maxres, res);
  *nres = 0;
  return grace_set_error(fn->vm, GRACE_EARG, "%s: the function returned %d results, room for %d", fn->name, n, maxres);
}

static grace_status call_eager(grace_fn *fn, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  fn->eager_calls++;
  grace_status st = fn->host.call(fn->ud, nargs, args, nres, res, maxres);
  if (st != GRACE_OK) {
    *nres = 0;
    return st == GRACE_EHOST ? grace_set_error(fn->vm, st, "%s: error in the host function", fn->name) : st;
  }
  return check_room(fn, nres, res, maxres);
}

/* A path the call records (it left the recorded ones) gets the tensors it returns as its outputs: what its partitions
 * must hand back (vm_auto.c does this, and more, where paths may merge). */
static void path_results(grace_fn *fn, int nargs, const grace_arg *args, int nres, const grace_arg *res) {
  vm_trace *tr = fn->vm->trace;
  if (!tr || tr->replay || !tr->owns_ir) return;
  for (int j = 0; j < nres; j++) {
    grace_value v;
    int arg = 0;
    for (int i = 0; i < nargs && !arg; i++) arg = args[i].kind == GRACE_ARG_TENSOR && args[i].t == res[j].t;
    if (res[j].kind == GRACE_ARG_TENSOR && res[j].t && !arg && grace_trace_value(fn->vm, res[j].t, &v) == GRACE_OK && v >= 0)
      grace_ir_output(tr->ir, v);
  }
}

/* A function with breaks: the host function runs with every op matched against the recorded paths and deferred
 * to the next break; a call that leaves the paths adds a new one. Results are those of the host function. */
grace_status fn_replay_begin(grace_fn *fn, fn_entry *e, const grace_arg *args) {
  grace_vm *vm = fn->vm;
  if (!e->parts && !(e->parts = vm_parts_new(vm))) return grace_set_error(vm, GRACE_ENOMEM, "%s: out of host memory", fn->name);
  grace_status st = vm_replay_begin(vm, e->tree, e->ntree, fn->host.where, fn->ud, e->parts);
  if (st != GRACE_OK) return st;
  for (int k = 0; k < e->ninput; k++) {
    grace_value v;
    if ((st = grace_trace_input(vm, args[e->input_arg[k]].t, &v)) != GRACE_OK) {
      grace_ir *none = NULL;
      char msg[512];
      snprintf(msg, sizeof msg, "%s", grace_last_error(vm));
      grace_replay_end(vm, &none);
      grace_ir_free(none);
      return grace_set_error(vm, st, "%s", msg);
    }
  }
  return GRACE_OK;
}

static grace_status run_replay(grace_fn *fn, fn_entry *e, int nargs, const grace_arg *args, int *nres, grace_arg *res,
                               int maxres) {
  grace_vm *vm = fn->vm;
  grace_status st = fn_replay_begin(fn, e, args);
  if (st != GRACE_OK) return st;
  int n = 0, guarding = fn_auto_guard_begin(fn, e);
  st = fn->host.call(fn->ud, nargs, args, &n, res, maxres);
  if (st == GRACE_OK && !fn->no_auto) fn_auto_call_end(fn, e, nargs, args, n < maxres ? n : maxres, res);
  else if (st == GRACE_OK) path_results(fn, nargs, args, n < maxres ? n : maxres, res);
  grace_ir *rec = NULL;
  grace_status rs = grace_replay_end(vm, &rec);
  if (guarding) fn_auto_guard_end(fn, e, st == GRACE_OK && rs == GRACE_OK);
  if (st != GRACE_OK) {
    grace_ir_free(rec);
    return st == GRACE_EHOST ? grace_set_error(vm, st, "%s: error in the host function", fn->name) : st;
  }
  *nres = n;
  if (rs != GRACE_OK && rs != GRACE_EUNSUPPORTED) {
    grace_ir_free(rec);
    fn_release_results(fn, n < maxres ? n : maxres, res);
    *nres = 0;
    return rs;
  }
  if (rec) {
    if (e->ntree < FN_MAXPATHS && grace_ir_verify(rec) == GRACE_OK) {
      e->tree[e->ntree++] = rec;
      if (!fn->no_auto) fn_auto_path_added(fn, e);
    } else
      grace_ir_free(rec);
    fn->traces++;
  } else if (!fn->no_auto)
    fn_auto_ahead(fn, e, nargs, args);
  fn->replays++;
  return check_room(fn, nres, res, maxres);
}

/* ---- promotion of changing numbers to dynamic scalars ---- */
int fn_same_const(grace_fn *fn, const grace_arg *a, const grace_arg *b) {
  if (a->kind != b->kind) return 0;
  switch (a->kind) {
  case GRACE_ARG_NIL: return 1;
  case GRACE_ARG_BOOL: case GRACE_ARG_INT: return a->i == b->i;
  case GRACE_ARG_FLOAT: return a->f == b->f;
  case GRACE_ARG_HOST: return same_host(fn, a->host, b->host);
  default: return 0;
  }
}

static int same_arg_guard(grace_fn *fn, const fn_guard *a, const fn_guard *b) {
  if (a->kind != b->kind) return 0;
  switch (a->kind) {
  case FG_NIL: return 1;
  case FG_BOOL: return a->i == b->i;
  case FG_TENSOR: return same_tensor_guard(a, b);
  case FG_HOST: return same_host(fn, a->host, b->host);
  default: return 0;
  }
}

/* The number argument's value as a literal of a program would hold it. */
static int literal_is_arg(const fn_guard *g, double v, int64_t iv, int is_int) {
  if (g->kind == FG_INT) return is_int && iv == g->i;
  return !is_int && !memcmp(&v, &g->f, sizeof v);
}

/* Whether e1 and e2 take the same calls but for numbers in some arguments (marked in differs), with the same
 * host guards and results. */
static int differ_in_numbers(grace_fn *fn, const fn_entry *e1, const fn_entry *e2, int *differs) {
  int nd = 0, ok = 1;
  for (int i = 0; i < e1->nargs && ok; i++) {
    const fn_guard *a = &e1->args[i], *b = &e2->args[i];
    if ((a->kind == FG_INT || a->kind == FG_FLOAT) && a->kind == b->kind) {
      int same = a->kind == FG_INT ? a->i == b->i : !memcmp(&a->f, &b->f, sizeof a->f);
      if (!same) {
        if (fn->allow_listed && !fn->allow_arg[i]) ok = 0;
        differs[i] = 1;
        nd++;
      }
    } else ok = same_arg_guard(fn, a, b);
  }
  if (!ok || !nd) return 0;
  for (int j = 0; j < e1->nret && ok; j++) ok = e1->ret_output[j] == e2->ret_output[j];
  for (int j = 0; j < e1->nret && ok; j++) if (e1->ret_output[j] == -1) ok = fn_same_const(fn, &e1->ret_const[j], &e2->ret_const[j]);
  if (ok && (fn_auto_merged(e1) || fn_auto_merged(e2))) ok = 0;   /* merged programs: never taken for one another */
  if (ok && (e1->guard || e2->guard))
    ok = e1->guard && e2->guard && fn->host.guard_same && fn->host.guard_same(fn->ud, e1->guard, e2->guard);
  return ok;
}

/* Two entries traced with different numbers in some arguments, whose programs differ only in literals that equal
 * those numbers in each: the later one becomes a single entry for any value of them (each a dynamic scalar input,
 * written per call), and the earlier one goes. Anything else that depends on the numbers (host arithmetic on them, a
 * branch, a size, a returned number) makes the programs differ, and the numbers stay guarded by value. Returns
 * whether it promoted. */
static int fn_promote(grace_fn *fn) {
  int n = fn->nentries;
  if (!fn->dynamic || n < 2) return 0;
  fn_entry *e2 = fn->entries[n - 1];
  if (!e2->ir || e2->nscalar) return 0;
  for (int k = n - 2; k >= 0; k--) {
    fn_entry *e1 = fn->entries[k];
    if (!e1->ir || e1->nscalar || e1->nargs != e2->nargs || e1->nret != e2->nret || e1->nguarded != e2->nguarded) continue;
    int differs[FN_MAXARGS] = {0};
    if (!differ_in_numbers(fn, e1, e2, differs)) continue;
    int lits[FN_MAXARGS * 4], lit_arg[FN_MAXARGS * 4], ok = 1;
    int nl = grace_ir_literal_diff(e1->ir, e2->ir, lits, FN_MAXARGS * 4);
    for (int l = 0; l < nl && ok; l++) {
      double v1, v2;
      int64_t i1, i2;
      int int1, int2;
      grace_ir_literal_value(e1->ir, lits[l], &v1, &i1, &int1);
      grace_ir_literal_value(e2->ir, lits[l], &v2, &i2, &int2);
      lit_arg[l] = -1;
      for (int i = 0; i < e1->nargs && lit_arg[l] < 0; i++)
        if (differs[i] && literal_is_arg(&e1->args[i], v1, i1, int1) && literal_is_arg(&e2->args[i], v2, i2, int2)) lit_arg[l] = i;
      ok = lit_arg[l] >= 0;
    }
    if (nl < 0 || !ok) continue;
    for (int l = 0; l < nl; l++) {
      grace_ir_literal_to_scalar(e2->ir, lits[l]);
      e2->scalar_arg[e2->nscalar++] = lit_arg[l];
    }
    for (int i = 0; i < e2->nargs; i++)
      if (differs[i]) {
        e2->args[i].scalar_int = e2->args[i].kind == FG_INT;
        e2->args[i].kind = FG_SCALAR;
        fn->dynamic_arg[i] = 1;
      }
    fn_entry_free(fn, e1);   /* the earlier entry goes */
    memmove(&fn->entries[k], &fn->entries[k + 1], sizeof *fn->entries * (size_t)(n - 1 - k));
    fn->nentries--;
    return 1;
  }
  return 0;
}

/* ---- the object ---- */
/* "model.lua" -> "model_lua": the name as an identifier, for the IR's text form. */
static void set_irname(grace_fn *fn, const char *src) {
  size_t k = 0;
  for (const char *p = src; *p && k + 1 < sizeof fn->irname; p++)
    fn->irname[k++] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ? *p : '_';
  fn->irname[k] = 0;
}

grace_status grace_fn_new(grace_vm *vm, const char *name, const grace_host *host, void *ud,
                          const grace_fn_options *opts, grace_fn **out) {
  if (!out) return vm ? grace_set_error(vm, GRACE_EARG, "grace_fn_new: out is NULL") : GRACE_EARG;
  *out = NULL;
  if (!vm) return GRACE_EARG;
  if (!host || !host->call) return grace_set_error(vm, GRACE_EARG, "grace_fn_new: a host with a call function is needed");
  grace_fn_options def = {.cache_limit = 8, .dynamic = 0};
  if (!opts) opts = &def;
  if (opts->cache_limit < 1) return grace_set_error(vm, GRACE_EARG, "compile: cache_limit must be at least 1");
  if (opts->nallow < 0 || (opts->nallow && !opts->allow))
    return grace_set_error(vm, GRACE_EARG, "grace_fn_new: nallow %d without an allow list", opts->nallow);
  grace_fn *fn = grace_realloc(vm, NULL, 0, sizeof *fn);
  if (!fn) return grace_set_error(vm, GRACE_ENOMEM, "grace_fn_new: out of memory");
  memset(fn, 0, sizeof *fn);
  fn->vm = vm;
  fn->host = *host;
  fn->ud = ud;
  fn->cache_limit = opts->cache_limit;
  fn->dynamic = opts->dynamic;
  fn->static_shapes = !opts->dynamic_shapes;
  fn->no_auto = opts->no_auto_regions;
  memcpy(fn->sym_dims, opts->dynamic_dims, sizeof fn->sym_dims);
  for (int k = 0; k < opts->nallow; k++) {
    if (opts->allow[k] >= 0 && opts->allow[k] < FN_MAXARGS) fn->allow_arg[opts->allow[k]] = 1;
    fn->allow_listed = 1;
  }
  snprintf(fn->name, sizeof fn->name, "%s", name ? name : "compiled function");
  set_irname(fn, opts->ir_name ? opts->ir_name : fn->name);
  *out = fn;
  return GRACE_OK;
}

void grace_fn_free(grace_fn *fn) {
  if (!fn) return;
  for (int k = 0; k < fn->nentries; k++) fn_entry_free(fn, fn->entries[k]);
  grace_realloc(fn->vm, fn->entries, sizeof *fn->entries * (size_t)fn->capentries, 0);
  grace_realloc(fn->vm, fn, sizeof *fn, 0);
}

/* Tells the host once why the function runs eagerly. */
static void say_once(grace_fn *fn, const char *what) {
  snprintf(fn->eager_reason, sizeof fn->eager_reason, "%s", what);
  if (fn->warned) return;
  fn->warned = 1;
  if (fn->host.eager) fn->host.eager(fn->ud, what);
}

static grace_status add_entry(grace_fn *fn, fn_entry *e) {
  if (fn->nentries == fn->capentries) {
    int cap = fn->capentries ? 2 * fn->capentries : 4;
    fn_entry **p = grace_realloc(fn->vm, fn->entries, sizeof *p * (size_t)fn->capentries, sizeof *p * (size_t)cap);
    if (!p) return grace_set_error(fn->vm, GRACE_ENOMEM, "%s: out of memory for the entry list", fn->name);
    fn->entries = p;
    fn->capentries = cap;
  }
  fn->entries[fn->nentries++] = e;
  return GRACE_OK;
}

/* Where entry e missed the call only on tensor sizes (every other guard passes), the dims whose size changed become
 * symbolic for the next traces (as a dynamic scalar is made where only a number changed). */
static void size_miss(grace_fn *fn, const fn_entry *e, int nargs, const grace_arg *args) {
  if (e->nargs != nargs || (!e->ir && !e->ntree)) return;
  unsigned changed[FN_MAXARGS] = {0};
  char buf[400];
  for (int i = 0; i < nargs; i++) {
    const fn_guard *g = &e->args[i];
    const grace_tensor *t = args[i].kind == GRACE_ARG_TENSOR ? args[i].t : NULL;
    if (g->kind != FG_TENSOR || !t) {
      if (arg_miss(fn, g, &args[i], buf, sizeof buf)) return;
      continue;
    }
    if (g->dt != grace_tensor_dtype(t) || g->dev != grace_tensor_device(t) || g->ndim != grace_tensor_ndim(t) ||
        !g->contiguous || !grace_tensor_is_contiguous(t))
      return;
    for (int d = 0; d < g->ndim && d < 32; d++)
      if (!g->sym[d] && g->sizes[d] != grace_tensor_sizes(t)[d]) changed[i] |= 1u << d;
  }
  if (alias_miss(e, nargs, args)) return;
  for (int i = 0; i < nargs; i++) fn->sym_dims[i] |= changed[i];
}

/* A miss on every entry: a new trace, or eagerly for good past the cache limit. */
static grace_status call_miss(grace_fn *fn, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  if (fn->nentries >= fn->cache_limit) {
    char msg[600];
    snprintf(msg, sizeof msg, "%d compiled versions reached the cache limit (last guard failure: %s); "
             "raise opts.cache_limit or make the changing argument a tensor", fn->nentries, fn->last_miss);
    say_once(fn, msg);
    fn->eager_forever = 1;
    return call_eager(fn, nargs, args, nres, res, maxres);
  }
  for (int k = 0; k < fn->nentries && !fn->static_shapes; k++) size_miss(fn, fn->entries[k], nargs, args);
  fn->traces++;
  fn_entry *e = NULL;
  grace_status st = fn_trace(fn, nargs, args, nres, res, maxres, &e);
  if (st != GRACE_OK) return st;
  int nw = *nres < maxres ? *nres : maxres;
  if ((st = add_entry(fn, e)) != GRACE_OK) {
    fn_entry_free(fn, e);
    fn_release_results(fn, nw, res);
    *nres = 0;
    return st;
  }
  if (fn_promote(fn) && fn_log_topic("ir"))
    fprintf(stderr, "grace: %s: numbers that changed became dynamic scalars:\n%s", fn->name, grace_ir_text(e->ir));
  if (!e->ir && !e->ntree) say_once(fn, e->why);
  return check_room(fn, nres, res, maxres);
}

grace_status grace_fn_call(grace_fn *fn, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  if (!fn) return GRACE_EARG;
  if (!nres || maxres < 0 || (maxres && !res) || nargs < 0 || (nargs && !args))
    return grace_set_error(fn->vm, GRACE_EARG, "grace_fn_call: bad arguments (nargs %d, args %s, nres %s, maxres %d)",
                           nargs, args ? "given" : "NULL", nres ? "given" : "NULL", maxres);
  *nres = 0;
  fn->calls++;
  /* more arguments than guards hold, or a call from inside a trace (its ops join that trace): the host function */
  if (fn->eager_forever || nargs > FN_MAXARGS || grace_trace_active(fn->vm))
    return call_eager(fn, nargs, args, nres, res, maxres);
  char buf[400];
  for (int k = 0; k < fn->nentries; k++) {
    fn_entry *e = fn->entries[k];
    buf[0] = 0;
    const char *miss = entry_miss(fn, e, nargs, args, buf, sizeof buf);
    if (miss) {
      if (!fn->last_miss[0] || strstr(miss, "captured")) snprintf(fn->last_miss, sizeof fn->last_miss, "%s", miss);
      continue;
    }
    fn->hits++;
    if (e->ir && !grace_ir_consts_current(e->ir)) {
      /* a captured tensor was written in place: nothing in the program was derived from its contents, so
       * re-recording means accepting its new version */
      grace_ir_recapture(e->ir);
      fn->recaptures++;
    }
    if (e->ntree && !e->ir) return run_replay(fn, e, nargs, args, nres, res, maxres);
    if (!e->ir) return call_eager(fn, nargs, args, nres, res, maxres);   /* this guard set runs eagerly */
    if (e->nret > maxres)
      return grace_set_error(fn->vm, GRACE_EARG, "%s: the function returns %d results, room for %d", fn->name, e->nret, maxres);
    return run_entry(fn, e, args, nres, res);
  }
  return call_miss(fn, nargs, args, nres, res, maxres);
}

/* ---- introspection ---- */
void grace_fn_get_stats(const grace_fn *fn, grace_fn_stats *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!fn) return;
  out->calls = fn->calls;
  out->hits = fn->hits;
  out->traces = fn->traces;
  out->eager_calls = fn->eager_calls;
  out->recaptures = fn->recaptures;
  out->replays = fn->replays;
  out->entries = fn->nentries;
  out->auto_why = "";
  out->ahead_paths = fn->aheads;
  for (int k = 0; k < fn->nentries; k++) {
    out->auto_regions += fn_auto_merged(fn->entries[k]);
    if (*fn_auto_why(fn->entries[k])) out->auto_why = fn_auto_why(fn->entries[k]);
    out->partitions += vm_parts_count(fn->entries[k]->parts);
    out->partition_runs += vm_parts_runs(fn->entries[k]->parts);
    vm_parts_outputs(fn->entries[k]->parts, &out->partition_outputs, &out->partition_internal);
    out->staged_bytes += (long)fn_moves_bytes(fn->entries[k]->moves);
  }
  out->eager = fn->eager_forever;
  out->name = fn->name;
  out->last_miss = fn->last_miss;
  out->eager_reason = fn->eager_reason;
  memcpy(out->dynamic, fn->dynamic_arg, sizeof out->dynamic);
  for (int k = 0; k < fn->nentries; k++) {
    const fn_entry *e = fn->entries[k];
    int sym = 0;
    for (int i = 0; i < e->nargs; i++)
      for (int d = 0; e->args[i].kind == FG_TENSOR && d < e->args[i].ndim && d < 32; d++)
        if (e->args[i].sym[d]) { out->dynamic_dims[i] |= 1u << d; sym = 1; }
    out->symbolic_entries += sym;
  }
}

int grace_fn_entry_count(const grace_fn *fn) { return fn ? fn->nentries : 0; }

grace_ir *grace_fn_entry_ir(const grace_fn *fn, int k, const char **why, grace_ir *const **paths, int *npaths) {
  if (why) *why = NULL;
  if (paths) *paths = NULL;
  if (npaths) *npaths = 0;
  if (!fn || k < 0 || k >= fn->nentries) return NULL;
  const fn_entry *e = fn->entries[k];
  if (why && e->why[0]) *why = e->why;
  if (paths) *paths = e->tree;
  if (npaths) *npaths = e->ir ? 0 : e->ntree;   /* paths merged into one program are history */
  return e->ir;
}

grace_ir *grace_fn_entry_partition(const grace_fn *fn, int k, int j, int *path, int *index) {
  if (path) *path = -1;
  if (index) *index = -1;
  if (!fn || k < 0 || k >= fn->nentries || j < 0) return NULL;
  return vm_parts_prog(fn->entries[k]->parts, j, path, index);
}

long grace_fn_entry_hits(const grace_fn *fn, int k) {
  return fn && k >= 0 && k < fn->nentries ? fn->entries[k]->hits : 0;
}
