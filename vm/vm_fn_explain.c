/* vm_fn_explain.c: what grace does with a compiled function, in words: grace_fn_explain's text (partitions, ops by
 * kind, graph breaks, placement, dynamic scalars, guards) and the reports $GRACE_LOG asks for on stderr (ir: the
 * the kernels it runs as; placement; launch: gpu/gpu_graph.c's decisions). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vm/vm_fn.h"
#include "vm/vm_trace.h"
#include "ir/ir.h"
#include "ir/ir_exec.h"
#include "ir/ir_sym.h"
#include "gpu/gpu_exec.h"

static const char *const log_topics[] = {"ir", "placement", "regions", "launch", NULL};

const char *const *grace_log_topics(void) { return log_topics; }

/* Whether $GRACE_LOG (a comma-separated list) names topic, one of log_topics. */
int fn_log_topic(const char *topic) {
  int known = 0;
  for (int i = 0; log_topics[i]; i++) known |= !strcmp(log_topics[i], topic);
  return known && vm_log_wants(topic);   /* a topic missing from the list would be one no host can tell users about */
}

void fn_log_plan(grace_vm *vm, grace_ir *ir) {
  const size_t n = 1 << 16;
  char *buf = grace_realloc(vm, NULL, 0, n);
  if (!buf) return;
  int nk = 0;   /* the grouping the executors run the program by */
  grace_status st = grace_ir_fuse_report(ir, buf, n, &nk);
  fprintf(stderr, "grace: runs as %d kernel%s%s:\n%s", nk, nk == 1 ? "" : "s", st == GRACE_OK ? "" : " (report cut)", buf);
  grace_realloc(vm, buf, n, 0);
}

/* A bounded text: what does not fit is cut (the buffer always ends in a NUL). */
typedef struct sbuf {
  char *p;
  size_t n, len;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...) {
  if (b->len + 1 >= b->n) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(b->p + b->len, b->n - b->len, fmt, ap);
  va_end(ap);
  if (k > 0) b->len = b->len + (size_t)k < b->n ? b->len + (size_t)k : b->n - 1;
}

/* ir's placement report, each line after prefix: to stderr (b NULL) or into b. A report longer than the buffer is
 * shown as far as it fits. */
static void place_lines(grace_vm *vm, grace_ir *ir, const char *prefix, sbuf *b) {
  const size_t n = 1 << 16;
  char *buf = grace_realloc(vm, NULL, 0, n);
  grace_status st = buf ? grace_ir_place_report(ir, buf, n, NULL) : GRACE_ENOMEM;
  if (buf && (st == GRACE_OK || (st == GRACE_EARG && buf[0]))) {
    for (const char *p = buf, *e; *p; p = *e ? e + 1 : e) {
      if (!(e = strchr(p, '\n'))) e = p + strlen(p);
      if (!b) fprintf(stderr, "%s%.*s\n", prefix, (int)(e - p), p);
      else sb_add(b, "%s%.*s\n", prefix, (int)(e - p), p);
    }
  } else if (b)
    sb_add(b, "%s(no placement report: %s)\n", prefix, grace_last_error(vm));
  else
    fprintf(stderr, "%s(no placement report: %s)\n", prefix, grace_last_error(vm));
  grace_realloc(vm, buf, n, 0);
}

void fn_log_placement(grace_vm *vm, grace_ir *ir, const char *prefix) { place_lines(vm, ir, prefix, NULL); }

/* A function with breaks: its partitions, each compiled into a program of its own when first replayed. */
static void explain_partitions(grace_ir *prog, sbuf *b) {
  int nb = grace_ir_count(prog, "breaks"), from = 0;
  sb_add(b, "  partitions (each becomes a program of its own the first time a call replays it: passes, fusion, kernels "
         "and its own launch decision; a partition reads what earlier ones computed without copies):\n");
  for (int k = 0; k <= nb; k++) {
    int after = prog->ninst - 1, ops = 0;
    const char *where = NULL;
    if (k < nb) grace_ir_break(prog, k, &after, &where);
    for (int i = from; i <= after && i < prog->ninst; i++) ops += prog->insts[i].op < GRACE_NOPS;
    sb_add(b, "    partition %d: %d op%s, %s%s\n", k + 1, ops, ops == 1 ? "" : "s", k < nb ? "ends at the break at " : "ends the call",
           k < nb ? (where ? where : "(unknown place)") : "");
    from = after + 1;
  }
}

/* How each region (cond, while_loop) of prog runs, one line each after prefix: on CUDA as conditional graph nodes
 * where gpu_cond_available says they can be, predicated where gpu_pred_available says a cond can be (the launch
 * measurement keeps the fastest of these and the host branch), else as host branches, with the reasons. */
static void explain_regions(grace_vm *vm, grace_ir *prog, const char *prefix, sbuf *b) {
  int nr = 0;
  for (int i = 0; i < prog->ninst; i++) nr += ir_is_region(prog->insts[i].op);
  if (!nr) return;
  char why[160] = "", pwhy[160] = "";
  int dev = ir_exec_device(prog) == GRACE_CUDA, cond = dev && gpu_cond_available(prog, why, sizeof why);
  int pred = dev && gpu_pred_available(prog, pwhy, sizeof pwhy), mode = dev ? gpu_region_mode(vm) : -1;
  if (mode == GRACE_REGION_HOST || mode == GRACE_REGION_PRED) cond = 0, snprintf(why, sizeof why, "forced off (GRACE_REGIONS)");
  if (mode == GRACE_REGION_HOST || mode == GRACE_REGION_NODES) pred = 0, snprintf(pwhy, sizeof pwhy, "forced off (GRACE_REGIONS)");
  for (int i = 0; i < prog->ninst; i++) {
    const ir_inst *k = &prog->insts[i];
    if (!ir_is_region(k->op)) continue;
    sb_add(b, "%s%s at %s: ", prefix, k->op == IR_OP_COND ? "cond" : "while_loop", k->loc >= 0 ? prog->locs[k->loc] : "(unknown place)");
    if (!dev) sb_add(b, "runs on the CPU (the interpreter branches on the host value)\n");
    else if (cond && pred)
      sb_add(b, "conditional node (IF with an else body) or predication (both bodies in the program's CUDA graph, "
             "each kernel returning at once unless the predicate picks its body): the predicate is read on the device, "
             "no host synchronisation; both measured against the host branch, the fastest kept (grace.report)\n");
    else if (cond)
      sb_add(b, "conditional node (%s) in the program's CUDA graph: the predicate is read on the device, no host "
             "synchronisation; measured against the host branch, the faster kept (grace.report); not predicated: %s\n",
             k->op == IR_OP_COND ? "IF with an else body" : "WHILE", pwhy);
    else if (pred)
      sb_add(b, "predication (both bodies in the program's CUDA graph, each kernel returning at once unless the "
             "predicate picks its body): no host synchronisation; measured against the host branch, the faster kept "
             "(grace.report); no conditional node: %s\n", why);
    else sb_add(b, "host branch (the predicate is read on the host, a synchronisation per decision): %s; not "
                "predicated: %s\n", why, pwhy);
  }
}

void fn_log_regions(grace_vm *vm, const char *name, grace_ir *ir) {
  char buf[4096], prefix[300];
  sbuf b = {buf, sizeof buf, 0};
  buf[0] = 0;
  snprintf(prefix, sizeof prefix, "grace: regions of %s: ", name);
  explain_regions(vm, ir, prefix, &b);
  fputs(buf, stderr);
}

/* The program's partitions, ops by kind, breaks, regions and placement. */
static void explain_program(grace_vm *vm, grace_ir *prog, sbuf *b) {
  const char *text = grace_ir_text(prog);
  int counts[GRACE_NOPKINDS] = {0}, total = 0, nb = grace_ir_count(prog, "breaks");
  for (const char *p = text; p && (p = strstr(p, " = ")); p += 3) {
    char name[32];
    if (sscanf(p + 3, "%31[a-z_0-9]", name) != 1) continue;
    grace_op op;
    if (grace_op_from_name(name, &op) == GRACE_OK) { counts[grace_op_kind(op)]++; total++; }
  }
  sb_add(b, "  %s %d partition%s of %d ops in all (%d inputs, %d captured tensors, %d writes back)\n",
         nb ? "replays" : "compiles to", nb + 1, nb ? "s" : "", total, grace_ir_count(prog, "inputs"),
         grace_ir_count(prog, "consts"), grace_ir_count(prog, "writes"));
  static const char *kinds[] = {
#define KIND_NAME(k) #k,
    GRACE_OPKINDS(KIND_NAME)
#undef KIND_NAME
  };
  sb_add(b, "  ops by kind:");
  for (int k = 0; k < GRACE_NOPKINDS; k++) if (counts[k]) sb_add(b, " %s %d", kinds[k], counts[k]);
  sb_add(b, "%s", nb ? "\n  graph breaks (the host reads a value there; its Lua code runs on every call, and the ops "
                       "between breaks are matched and run as one partition):\n" : "\n  graph breaks: none\n");
  for (int k = 0; k < nb; k++) {
    int after;
    const char *where;
    grace_ir_break(prog, k, &after, &where);
    const ir_break *br = &prog->breaks[k];
    where = where ? where : "(unknown place)";
    char pred[64];
    if (br->cmp == GRACE_CMP_TRUTH) snprintf(pred, sizeof pred, "truth");
    else snprintf(pred, sizeof pred, "%s %.17g", ir_cmp_name(br->cmp), br->k);
    char pre[400], other[700] = "";   /* whether its other way is recorded before a call takes it */
    const char *prefix = br->ahead == 1 ? fn_auto_prefix_effects(prog, br->after, pre, sizeof pre) : NULL;
    if (prefix) snprintf(other, sizeof other, "\n      its other way is not recorded before a call takes it: %s", prefix);
    else if (br->ahead == 1)
      snprintf(other, sizeof other, "; its other way only returns values already computed, so it is recorded after a "
               "few calls that go the same way, without waiting for one to take it");
    else if (br->ahead == 2)
      snprintf(other, sizeof other, "\n      %s", prog->locs[br->ahead_why]);
    if (br->kind == IR_BRK_PRED)
      sb_add(b, "    %s: a branch on a value read on the host (%s): once calls have taken both ways, the two paths "
             "become one program with a cond region (no Lua code runs then)%s\n", where, pred, other);
    else if (br->kind == IR_BRK_WHY && br->why >= 0)
      sb_add(b, "    %s: a value read on the host stays a graph break: %s\n", where, prog->locs[br->why]);
    else
      sb_add(b, "    %s: a tensor's value is read on the host (item, tolist, tostring, print); keep it a tensor "
             "(grace.where instead of if) to remove the break\n", where);
  }
  if (nb) explain_partitions(prog, b);
  if (ir_has_region(prog)) sb_add(b, "  regions:\n");
  explain_regions(vm, prog, "    ", b);
  sb_add(b, "  placement:\n");
  place_lines(vm, prog, "    ", b);
}

/* The program's symbolic sizes: where each comes from, its bound, the relations and derivations, and the sizes that
 * had to stay as traced (with the reason and the place). */
static void explain_symbols(const fn_entry *e, sbuf *b) {
  const grace_ir *ir = e->ir;
  if (!ir || !ir->nsyms) {
    sb_add(b, "  symbolic sizes: none (a size that changes retraces once with that dim symbolic)\n");
    return;
  }
  sb_add(b, "  symbolic sizes:\n");
  for (int32_t k = 1; k <= ir->nsyms; k++) {
    char s[320], from[64] = "";
    for (int i = 0; i < e->nargs && !from[0]; i++)
      for (int d = 0; e->args[i].kind == FG_TENSOR && d < e->args[i].ndim && !from[0]; d++)
        if (e->args[i].sym[d] == k) snprintf(from, sizeof from, ": argument %d dim %d", i + 1, d + 1);
    sb_add(b, "    %s%s\n", ir_sym_str(ir, k, s, sizeof s), from);
  }
}

static void explain_guards(grace_fn *fn, const fn_entry *e, sbuf *b) {
  int any = 0;
  for (int i = 0; i < FN_MAXARGS; i++)
    if (fn->dynamic_arg[i]) sb_add(b, "%s %d", any++ ? "," : "  dynamic scalars (numbers that change, passed per call): argument", i + 1);
  if (any) sb_add(b, "\n");
  sb_add(b, "  guards:\n");
  for (int i = 0; i < e->nargs; i++) {
    const fn_guard *g = &e->args[i];
    char d[200];
    switch (g->kind) {
    case FG_NIL: sb_add(b, "    argument %d is nil\n", i + 1); break;
    case FG_BOOL: sb_add(b, "    argument %d == %s\n", i + 1, g->i ? "true" : "false"); break;
    case FG_INT: sb_add(b, "    argument %d == %lld (becomes a dynamic scalar if it changes)\n", i + 1, (long long)g->i); break;
    case FG_FLOAT: sb_add(b, "    argument %d == %.17g (becomes a dynamic scalar if it changes)\n", i + 1, g->f); break;
    case FG_SCALAR: sb_add(b, "    argument %d is a dynamic scalar\n", i + 1); break;
    case FG_HOST: sb_add(b, "    argument %d is the same %s\n", i + 1, "value (identity)"); break;
    case FG_TENSOR: sb_add(b, "    argument %d is a tensor %s\n", i + 1, fn_tensor_desc(g, d, sizeof d)); break;
    }
  }
  sb_add(b, "    %d captured values (tensors by identity and version, upvalue and global numbers by value)\n", e->nguarded);
  explain_symbols(e, b);
}

/* The cached versions of fn whose paths became one program with a cond region, or stay replayed and why. */
static void explain_auto(grace_fn *fn, sbuf *b) {
  for (int k = 0; k < fn->nentries; k++) {
    const fn_entry *e = fn->entries[k];
    if (fn_auto_merged(e)) {
      sb_add(b, "  cached version %d: its paths became one program with a cond region (runs without Lua code):\n", k + 1);
      for (int i = 0; i < e->ir->ninst; i++)
        if (e->ir->insts[i].op == IR_OP_COND)
          sb_add(b, "    cond at %s\n", e->ir->insts[i].loc >= 0 ? e->ir->locs[e->ir->insts[i].loc] : "(unknown place)");
    } else if (*fn_auto_why(e))
      sb_add(b, "  cached version %d: its paths stay replayed: %s\n", k + 1, fn_auto_why(e));
    int path, index;
    grace_ir *part;
    for (int j = 0; (part = vm_parts_prog(e->parts, j, &path, &index)); j++)
      sb_add(b, "  cached version %d, partition %d of path %d: %d output%s handed back, %d tensor%s kept inside (computed "
             "again only if Lua reads one)\n", k + 1, index + 1, path + 1, part->nout, part->nout == 1 ? "" : "s",
             vm_parts_internal(e->parts, j), vm_parts_internal(e->parts, j) == 1 ? "" : "s");
  }
}

grace_status grace_fn_explain(grace_fn *fn, int nargs, const grace_arg *args, char *buf, size_t n) {
  if (!fn) return GRACE_EARG;
  if (!buf || !n || nargs < 0 || (nargs && !args) || nargs > FN_MAXARGS)
    return grace_set_error(fn->vm, GRACE_EARG, "grace_fn_explain: bad arguments (nargs %d of at most %d, buf %s)", nargs,
                           FN_MAXARGS, buf && n ? "given" : "missing");
  buf[0] = 0;
  grace_arg res[FN_MAXARGS];
  int nres = 0;
  fn_entry *e = NULL;
  grace_status st = fn_trace(fn, nargs, args, &nres, res, FN_MAXARGS, &e);
  if (st != GRACE_OK) return st;
  fn_release_results(fn, nres < FN_MAXARGS ? nres : FN_MAXARGS, res);
  sbuf b = {buf, n, 0};
  grace_ir *prog = e->ir ? e->ir : e->ntree ? e->tree[0] : NULL;
  if (prog) explain_program(fn->vm, prog, &b);
  else sb_add(&b, "  runs eagerly (no compiled partition):\n    %s\n", e->why);
  const char *moves = fn_moves_text(e->moves);
  if (*moves) sb_add(&b, "  placement rewrites (host tensors the program only moves to the device, host work between device ops):\n");
  for (const char *p = moves, *q; *p; p = *q ? q + 1 : q) {
    q = strchr(p, '\n');
    if (!q) q = p + strlen(p);
    sb_add(&b, "    %.*s\n", (int)(q - p), p);
  }
  explain_guards(fn, e, &b);
  fn_entry_free(fn, e);
  explain_auto(fn, &b);
  return GRACE_OK;
}
