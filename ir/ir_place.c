/* ir_place.c: CUDA-Graph-aware placement (see ir_place.h): which host values a device partition reads and how,
 * which device ops need the host and where they split the partition, and the partition count. An analysis, not a
 * rewrite: the device executor (gpu/gpu_exec.c, gpu/gpu_graph.c) already lifts host numbers into the graph's argument
 * table while capturing, so the IR needs no change for them; what this adds is the decision made visible and
 * explained per value (GRACE_LOG=placement, grace.explain), and the cases that still keep a partition from being a
 * graph named with their script line. The rules mirror the executor's; where it changes, this file follows. The
 * rewrites that move host tensors with dims out of a compiled program (staged arguments, device constants) are
 * vm/vm_place.c's; a compiled function's report is of its program after them. One rewrite lives here, as it is an IR
 * transformation with the same rules: round trips (ir_place_round_trips), host work on a device value's host copy
 * that the device can run, moved onto it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ir/ir_place.h"
#include "base/base.h"

enum { IR_PLACE_MAXIN = 64 };

/* What an instruction is, for placement. */
enum { C_FREE, C_HOST, C_HOST_VIEW, C_DEV_VIEW, C_KERNEL, C_NO_KERNEL, C_TO_HOST };

static const ir_type *vtype(const grace_ir *ir, int32_t v) { return &ir->vals[v].type; }
static int32_t arg(const grace_ir *ir, const ir_inst *k, int j) { return ir->args[k->first_arg + j]; }

/* Why the device back end has no kernel for device instruction k, the values marked in moved taken as device
 * values (vm_route then runs the op on the host through
 * copies and a synchronize), asked of the CUDA backend's table; NULL when it has one. */
static const char *no_kernel_as(const grace_ir *ir, const ir_inst *k, const int8_t *moved, char *buf, size_t n) {
  vm_meta m[IR_PLACE_MAXIN];
  if (k->nin > IR_PLACE_MAXIN) return NULL;
  for (int j = 0; j < k->nin; j++) {
    memset(&m[j], 0, sizeof m[j]);
    int32_t v = arg(ir, k, j);
    if (v < 0) { m[j].ndim = -1; continue; }
    const ir_type *t = vtype(ir, v);
    m[j].dtype = t->dtype;
    m[j].device = moved && moved[v] ? GRACE_CUDA : t->device;
    m[j].ndim = t->ndim;
    memcpy(m[j].sizes, t->sizes, sizeof m[j].sizes);
  }
  char why[200];
  const vm_backend *be = vm_backend_of(ir->vm, GRACE_CUDA);
  if (!be->supports || be->supports(ir->vm, (grace_op)k->op, k->nin, m, &k->attrs, why, sizeof why))
    return NULL;
  size_t w = strlen(why);
  snprintf(buf, n, "%.*s: it runs on the host through two copies and a synchronize", (int)(w < 140 ? w : 140), why);
  return buf;
}
static const char *no_kernel(const grace_ir *ir, const ir_inst *k, char *buf, size_t n) {
  return no_kernel_as(ir, k, NULL, buf, n);
}

static int classify(const grace_ir *ir, const ir_inst *k) {
  if (k->op >= GRACE_NOPS) return C_FREE;
  int dev_out = 0, dev_in = 0;
  for (int r = 0; r < k->nout; r++) dev_out |= vtype(ir, k->first_result + r)->device == GRACE_CUDA;
  for (int j = 0; j < k->nin; j++) if (arg(ir, k, j) >= 0) dev_in |= vtype(ir, arg(ir, k, j))->device == GRACE_CUDA;
  if (grace_op_kind((grace_op)k->op) == GRACE_KIND_VIEW) return dev_out ? C_DEV_VIEW : C_HOST_VIEW;
  if (!dev_out) return dev_in ? C_TO_HOST : C_HOST;   /* a device value read into a host result: a copy back */
  char why[8];
  return no_kernel(ir, k, why, sizeof why) ? C_NO_KERNEL : C_KERNEL;
}

static grace_status add(grace_vm *vm, ir_placement *p, ir_place_decision d) {
  if (p->nd == p->capd) {
    int nc = p->capd ? p->capd * 2 : 8;
    ir_place_decision *q = grace_realloc(vm, p->d, sizeof *q * (size_t)p->capd, sizeof *q * (size_t)nc);
    if (!q) return grace_set_error(vm, GRACE_ENOMEM, "placement: out of host memory");
    p->d = q;
    p->capd = nc;
  }
  p->d[p->nd++] = d;
  return GRACE_OK;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

void ir_place_free(grace_vm *vm, ir_placement *p) {
  grace_realloc(vm, p->d, sizeof *p->d * (size_t)p->capd, 0);
  grace_realloc(vm, p->partition, sizeof *p->partition * (size_t)(p->ninst ? p->ninst : 1), 0);
  memset(p, 0, sizeof *p);
}

/* Scratch arrays of one analysis, in one allocation. */
typedef struct scratch {
  int8_t *cls;         /* per instruction: C_* */
  int32_t *seg;        /* per instruction: breaks before it */
  int32_t *level;      /* per value: how many splitting host steps precede it in its segment */
  int8_t *need;        /* per value: a device kernel reads it, directly or through host work */
  int8_t *seen;        /* per value: decided (or walked) already */
  int32_t *stack;      /* per value: the walk back from a host number */
  int64_t *keys;       /* per instruction: (segment, level) of each kernel */
  void *block;
  size_t size;
} scratch;

/* The host number v read by device instruction at: walks back through host arithmetic on numbers to where it comes
 * from (an input, dynamic scalar or capture: lifted into the argument table; host work over tensors with dims: its
 * value is fixed when a graph is captured; a literal: a constant of the kernel). */
static grace_status walk_number(const grace_ir *ir, ir_placement *p, scratch *s, int32_t v, int at) {
  int sp = 0;
  int32_t via = ir->insts[ir->vals[v].inst].op < GRACE_NOPS ? ir->vals[v].inst : -1;
  if (!s->seen[v]) { s->seen[v] = 1; s->stack[sp++] = v; }
  while (sp > 0) {
    int32_t u = s->stack[--sp];
    const ir_inst *k = &ir->insts[ir->vals[u].inst];
    if (k->op == IR_OP_INPUT || k->op == IR_OP_SCALAR || k->op == IR_OP_CONST) {
      grace_status st = add(ir->vm, p, (ir_place_decision){IR_PLACE_SCALAR, u, at, via, 0, p->partition[at]});
      if (st != GRACE_OK) return st;
      continue;
    }
    if (k->op >= GRACE_NOPS) continue;   /* a literal */
    int dims = 0;
    for (int j = 0; j < k->nin; j++) if (arg(ir, k, j) >= 0) dims |= vtype(ir, arg(ir, k, j))->ndim > 0;
    if (dims) {
      grace_status st = add(ir->vm, p, (ir_place_decision){IR_PLACE_HOST_NUMBER, u, at, ir->vals[u].inst, 0,
                                                           p->partition[at]});
      if (st != GRACE_OK) return st;
      continue;
    }
    for (int j = 0; j < k->nin; j++) {
      int32_t w = arg(ir, k, j);
      if (w >= 0 && !s->seen[w]) { s->seen[w] = 1; s->stack[sp++] = w; }
    }
  }
  return GRACE_OK;
}

/* Device partitions: within a segment (the instructions between two graph breaks) a kernel's level is the number of
 * splitting host steps it depends on; kernels of one (segment, level) can run together, since nothing they need
 * waits on the host in between, so each distinct pair is one partition. Independent device work does not wait for
 * a split: the partition splits only where a dependence forces it. */
static void partitions(const grace_ir *ir, ir_placement *p, scratch *s) {
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    int32_t m = 0;
    for (int j = 0; j < k->nin; j++) {
      int32_t v = arg(ir, k, j);
      if (v >= 0 && s->seg[ir->vals[v].inst] == s->seg[i] && s->level[v] > m) m = s->level[v];
    }
    int split = s->cls[i] == C_NO_KERNEL || s->cls[i] == C_TO_HOST;
    for (int r = 0; r < k->nout; r++) s->level[k->first_result + r] = m + split;
    s->keys[i] = (int64_t)s->seg[i] * ((int64_t)ir->ninst + 2) + m;
  }
  int64_t *sorted = s->keys + ir->ninst;
  int n = 0;
  for (int i = 0; i < ir->ninst; i++) if (s->cls[i] == C_KERNEL) sorted[n++] = s->keys[i];
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_i64);
  int u = 0;
  for (int i = 0; i < n; i++) if (!u || sorted[u - 1] != sorted[i]) sorted[u++] = sorted[i];
  p->npartitions = u;
  /* partitions a graph break starts: one per segment with device work after the first */
  const int64_t per_seg = (int64_t)ir->ninst + 2;
  for (int i = 1; i < u; i++) p->break_bounds += sorted[i] / per_seg != sorted[i - 1] / per_seg;
  /* a split ends the partition of its own (segment, level), if device work is there */
  for (int i = 0; i < ir->ninst; i++) {
    p->partition[i] = -1;
    if (s->cls[i] != C_KERNEL && s->cls[i] != C_NO_KERNEL && s->cls[i] != C_TO_HOST) continue;
    int64_t *hit = bsearch(&s->keys[i], sorted, (size_t)u, sizeof *sorted, cmp_i64);
    if (hit) p->partition[i] = (int32_t)(hit - sorted);
  }
}

/* Why no partition of ir can be a CUDA graph today, as gpu/gpu_graph.c would find it (eligibility, and captures that
 * fail); "" when each is a candidate. */
static void graph_status(const grace_ir *ir, ir_placement *p) {
  char *w = p->no_graph;
  size_t n = sizeof p->no_graph;
  w[0] = 0;
  for (int i = 0; i < p->nd; i++) {
    const ir_place_decision *d = &p->d[i];
    const char *op = ir_op_name(ir->insts[d->at].op);
    switch (d->kind) {
    case IR_PLACE_HOST_COPY:
      snprintf(w, n, "host-to-device copy of %%%d (%s %%%d)", d->value, op, ir->insts[d->at].first_result);
      return;
    case IR_PLACE_HOST_INPUT: snprintf(w, n, "input %%%d is a host tensor with dims", d->value); return;
    case IR_PLACE_NO_KERNEL: snprintf(w, n, "%s %%%d runs on the host", op, d->value); return;
    case IR_PLACE_TO_HOST: snprintf(w, n, "%s %%%d copies to the host", op, d->value); return;
    default: break;
    }
  }
  ir_graph_eligibility(ir, w, n);
}

void ir_graph_eligibility(const grace_ir *ir, char *why, size_t n) {
  why[0] = 0;
  /* in-place writes do not stop a graph: they happen inside it, and each replay advances the versions */
  for (int i = 0; i < ir->nout; i++)
    if (vtype(ir, ir->outputs[i])->device != GRACE_CUDA) { snprintf(why, n, "output %d is a host tensor", i + 1); return; }
  /* random numbers do not stop a graph: with parameter indirection the generator's offset is a per-call word */
}

grace_status ir_place(grace_ir *ir, ir_placement *p) {
  grace_vm *vm = ir->vm;
  memset(p, 0, sizeof *p);
  size_t ni = (size_t)(ir->ninst ? ir->ninst : 1), nv = (size_t)(ir->nval ? ir->nval : 1);
  scratch s = {0};
  /* widest first, so each array stays aligned */
  s.size = sizeof(int64_t) * 2 * ni + sizeof(int32_t) * (ni + 2 * nv) + 2 * nv + ni;
  s.block = grace_realloc(vm, NULL, 0, s.size);
  p->ninst = ir->ninst;
  p->partition = grace_realloc(vm, NULL, 0, sizeof *p->partition * ni);
  if (!s.block || !p->partition) {
    grace_realloc(vm, s.block, s.size, 0);
    ir_place_free(vm, p);
    return grace_set_error(vm, GRACE_ENOMEM, "placement: out of host memory");
  }
  memset(s.block, 0, s.size);
  char *q = s.block;
  s.keys = (int64_t *)q; q += sizeof(int64_t) * 2 * ni;
  s.seg = (int32_t *)q; q += sizeof(int32_t) * ni;
  s.level = (int32_t *)q; q += sizeof(int32_t) * nv;
  s.stack = (int32_t *)q; q += sizeof(int32_t) * nv;
  s.need = (int8_t *)q; q += nv;
  s.seen = (int8_t *)q; q += nv;
  s.cls = (int8_t *)q;

  for (int i = 0, nb = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    while (nb < ir->nbreak && ir->breaks[nb].after < i) nb++;
    s.seg[i] = nb;
    s.cls[i] = (int8_t)classify(ir, k);
    if (s.cls[i] == C_KERNEL) p->kernels++;
    if ((k->op == IR_OP_INPUT || k->op == IR_OP_CONST) && vtype(ir, k->first_result)->device == GRACE_CUDA) p->on_device = 1;
  }
  /* which values device kernels need, through host work and earlier splits: a split with no device work after it
   * ends nothing */
  for (int i = ir->ninst - 1; i >= 0; i--) {
    const ir_inst *k = &ir->insts[i];
    int live = s.cls[i] == C_KERNEL;
    for (int r = 0; r < k->nout && !live; r++) live = s.need[k->first_result + r];
    if (live && s.cls[i] != C_FREE)
      for (int j = 0; j < k->nin; j++) if (arg(ir, k, j) >= 0) s.need[arg(ir, k, j)] = 1;
  }
  partitions(ir, p, &s);
  grace_status st = GRACE_OK;
  /* the decisions, in program order of where the host meets the device; a program that never reaches the device
   * executor (no CUDA input or capture: its device ops run one at a time) lifts nothing, so it gets none */
  for (int i = 0; i < ir->ninst && st == GRACE_OK && p->on_device; i++) {
    const ir_inst *k = &ir->insts[i];
    if (s.cls[i] != C_KERNEL && s.cls[i] != C_NO_KERNEL && s.cls[i] != C_TO_HOST) continue;
    for (int j = 0; j < k->nin && st == GRACE_OK; j++) {
      int32_t v = arg(ir, k, j);
      if (v < 0 || vtype(ir, v)->device != GRACE_CPU || s.seen[v]) continue;
      if (vtype(ir, v)->ndim == 0) { st = walk_number(ir, p, &s, v, i); continue; }
      s.seen[v] = 1;
      st = add(vm, p, (ir_place_decision){IR_PLACE_HOST_COPY, v, i, -1, 0, p->partition[i]});
    }
    if (st == GRACE_OK && (s.cls[i] == C_NO_KERNEL || s.cls[i] == C_TO_HOST)) {
      /* it splits a partition when device work is on both sides of it: before it at its level, and after it
       * depending on it */
      int splits = 0;
      for (int r = 0; r < k->nout; r++) splits |= s.need[k->first_result + r];
      splits &= p->partition[i] >= 0;
      p->nsplits += splits;
      st = add(vm, p, (ir_place_decision){s.cls[i] == C_NO_KERNEL ? IR_PLACE_NO_KERNEL : IR_PLACE_TO_HOST, k->first_result,
                                          i, -1, splits, p->partition[i]});
    }
  }
  /* a per-call host tensor with dims keeps any capture from starting (gpu/gpu_graph.c takes device tensors and host
   * numbers), whoever reads it */
  for (int i = 0; i < ir->ninst && st == GRACE_OK && p->on_device; i++) {
    const ir_inst *k = &ir->insts[i];
    const ir_type *t = vtype(ir, k->first_result);
    if (k->op == IR_OP_INPUT && t->device == GRACE_CPU && t->ndim > 0 && !s.seen[k->first_result]) {
      s.seen[k->first_result] = 1;
      st = add(vm, p, (ir_place_decision){IR_PLACE_HOST_INPUT, k->first_result, i, -1, 0, -1});
    }
  }
  grace_realloc(vm, s.block, s.size, 0);
  if (st != GRACE_OK) { ir_place_free(vm, p); return st; }
  graph_status(ir, p);
  return GRACE_OK;
}

/* ---- the report ---- */
typedef struct rbuf { char *buf; size_t n, len; } rbuf;

static void rput(rbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rput(rbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(b->buf && b->len < b->n ? b->buf + b->len : NULL, b->buf && b->len < b->n ? b->n - b->len : 0, fmt, ap);
  va_end(ap);
  if (k > 0) b->len += (size_t)k;
}

static const char *where(const grace_ir *ir, int inst) {
  int l = inst >= 0 ? ir->insts[inst].loc : -1;
  return l >= 0 ? ir->locs[l] : "(unknown place)";
}

/* "%3 (input #1, f32[])", "%7 (div, f32[4] cuda)" */
static void put_value(rbuf *b, const grace_ir *ir, int32_t v) {
  const ir_inst *k = &ir->insts[ir->vals[v].inst];
  char t[192];
  ir_type_str(vtype(ir, v), t, sizeof t);
  if (k->op == IR_OP_INPUT) rput(b, "%%%d (input #%d, %s)", v, k->input_index, t);
  else if (k->op == IR_OP_SCALAR) rput(b, "%%%d (dynamic scalar #%d, %s)", v, k->input_index, t);
  else if (k->op == IR_OP_CONST) rput(b, "%%%d (captured #%d, %s)", v, k->input_index, t);
  else rput(b, "%%%d (%s, %s)", v, ir_op_name(k->op), t);
}

static void put_decision(rbuf *b, const grace_ir *ir, const ir_place_decision *d) {
  const ir_inst *at = &ir->insts[d->at];
  const char *op = ir_op_name(at->op);
  int res = at->first_result;
  put_value(b, ir, d->value);
  switch (d->kind) {
  case IR_PLACE_SCALAR: {
    int kind = ir->insts[ir->vals[d->value].inst].op;
    rput(b, " -> device-resident scalar (argument table word, rewritten per call): %s read by %s %%%d on the device",
         kind == IR_OP_SCALAR ? "a dynamic scalar" : kind == IR_OP_CONST ? "a captured 0-d host tensor" : "a 0-d host tensor",
         op, res);
    if (d->via >= 0) rput(b, " (through %s %%%d on the host)", ir_op_name(ir->insts[d->via].op), ir->insts[d->via].first_result);
    rput(b, "; a capture reads it into the graph's argument table before each replay, so no copy stays in the partition");
    break;
  }
  case IR_PLACE_HOST_NUMBER:
    rput(b, " -> host-computed number, fixed in the argument table when captured: host work over a tensor with dims, "
         "read by %s %%%d on the device; a replay does not redo it (valid while the captured tensors it reads keep "
         "their versions)", op, res);
    break;
  case IR_PLACE_HOST_COPY:
    rput(b, " -> host-to-device copy inside the partition: the partition cannot be a CUDA graph; ");
    if (at->op == GRACE_OP_TO_DEVICE || at->op == GRACE_OP_COPY_) rput(b, "%s %%%d copies it", op, res);
    else rput(b, "read by %s %%%d on the device, it must be copied there", op, res);
    rput(b, " with a synchronous copy, which ends a capture, so the partition runs eagerly (a copy staged in front of "
         "the partition would remove it)");
    break;
  case IR_PLACE_HOST_INPUT:
    rput(b, " -> host tensor input: the partition cannot be a CUDA graph; a graph takes device tensors and host numbers "
         "as inputs, so every call runs eagerly");
    break;
  case IR_PLACE_NO_KERNEL: {
    char why[200];
    rput(b, " -> no device kernel: %s; %s", d->splits ? "the partition would split here" : "the program cannot be a CUDA graph",
         no_kernel(ir, at, why, sizeof why));
    if (d->splits) rput(b, ", and device work after it depends on it");
    break;
  }
  case IR_PLACE_TO_HOST:
    rput(b, " -> device-to-host copy: %s; %s %%%d copies a device value to the host synchronously, which ends a capture",
         d->splits ? "the partition would split here" : "the program cannot be a CUDA graph", op, res);
    if (d->splits) rput(b, ", and device work after it depends on it");
    break;
  }
  rput(b, "; at %s\n", where(ir, d->at));
}

size_t ir_place_report(const grace_ir *ir, const ir_placement *p, char *buf, size_t n) {
  rbuf b = {buf, n, 0};
  if (buf && n) buf[0] = 0;
  for (int i = 0; i < p->nd; i++) put_decision(&b, ir, &p->d[i]);
  int any_dev = 0;
  for (int v = 0; v < ir->nval; v++) any_dev |= vtype(ir, v)->device == GRACE_CUDA;
  if (!p->kernels && p->nd && p->on_device)
    rput(&b, "no device partition: no op of it runs on the device (its device ops run on the host)\n");
  else if (!p->kernels)
    rput(&b, "no device partition: %s\n", any_dev ? "no op runs on the device (views only)" : "every value is on the CPU");
  else if (!p->on_device)
    rput(&b, "no device partition: its %d device op%s run one at a time as eager programs (no CUDA input or captured "
         "tensor hands the program to the device executor)\n", p->kernels, p->kernels == 1 ? "" : "s");
  else {
    if (p->npartitions == 1) rput(&b, "one device partition");
    else {
      /* what starts each partition after the first: a graph break, or host work device ops depend on */
      int nb = p->break_bounds, ns = p->npartitions - 1 - p->break_bounds;
      rput(&b, "%d device partitions (", p->npartitions);
      if (nb) rput(&b, "%d at graph breaks%s", nb, ns ? ", " : "");
      if (ns) rput(&b, "%d after host work", ns);
      rput(&b, ")");
    }
    if (p->no_graph[0]) rput(&b, "; runs eagerly, not as a CUDA graph: %s\n", p->no_graph);
    else rput(&b, "; %s CUDA graph candidate (kept where it measures faster than eager launches)\n",
              p->npartitions == 1 ? "a" : "each a");
  }
  if (buf && n) buf[b.len < n ? b.len : n - 1] = 0;
  return b.len;
}

grace_status grace_ir_place_report(grace_ir *ir, char *buf, size_t n, int *npartitions) {
  if (npartitions) *npartitions = 0;
  if (buf && n) buf[0] = 0;
  if (!ir) return GRACE_EARG;
  grace_status st = grace_ir_verify(ir);
  if (st != GRACE_OK) return st;
  ir_placement p;
  if ((st = ir_place(ir, &p)) != GRACE_OK) return st;
  size_t need = ir_place_report(ir, &p, buf, n);
  if (npartitions) *npartitions = p.npartitions;
  ir_place_free(ir->vm, &p);
  if (buf && need >= n)
    return grace_set_error(ir->vm, GRACE_EARG, "placement report: %zu bytes of buffer, the report of '%s' needs %zu", n,
                           ir->name, need + 1);
  return GRACE_OK;
}

/* ---- round trips: a device value copied to the host, host work on it, the result copied back ---- */
enum { TRIP_MAX = 256 };

typedef struct trip {
  int8_t *in;                 /* per value: a host value of the round trip (its host work's, or a copy to the host) */
  int32_t list[TRIP_MAX];     /* its instructions: the host work and the copies to the host */
  int n, nops, ncopies;
  char why[240];              /* why it stays on the host ("" it can move) */
} trip;

static int is_copy_to_host(const grace_ir *ir, const ir_inst *k) {
  return k->op == GRACE_OP_TO_DEVICE && k->attrs.device == GRACE_CPU && vtype(ir, arg(ir, k, 0))->device == GRACE_CUDA;
}

/* A host number the device reads as an argument-table word (an input, a dynamic scalar, a capture, a literal). */
static int host_word(const grace_ir *ir, int32_t w) {
  int op = ir->insts[ir->vals[w].inst].op;
  return vtype(ir, w)->ndim == 0 && (op == IR_OP_INPUT || op == IR_OP_SCALAR || op == IR_OP_CONST || op == IR_OP_LITERAL);
}

/* The round trip whose result is host value z (read by a device op), walked back into t (the whole walk, so that a
 * reason found early still counts the copies to the host that make it a round trip). */
#define TRIP_WHY(...) do { if (!t->why[0]) snprintf(t->why, sizeof t->why, __VA_ARGS__); } while (0)
static void trip_collect(const grace_ir *ir, int32_t z, trip *t, int32_t *stack) {
  int sp = 0;
  t->in[z] = 1;
  stack[sp++] = z;
  while (sp) {
    int32_t u = stack[--sp];
    int i = ir->vals[u].inst;
    const ir_inst *k = &ir->insts[i];
    if (t->n == TRIP_MAX) { TRIP_WHY("more than %d host ops", TRIP_MAX); break; }
    if (is_copy_to_host(ir, k)) {
      if (vtype(ir, arg(ir, k, 0))->dtype != vtype(ir, u)->dtype) TRIP_WHY("the copy to the host %%%d changes the dtype", u);
      t->list[t->n++] = i;
      t->ncopies++;
      continue;
    }
    grace_op op = (grace_op)k->op;
    if (k->op >= GRACE_NOPS) {
      TRIP_WHY("it reads %%%d, a host tensor the function is given, not a device value", u);
      continue;
    }
    if (grace_op_kind(op) == GRACE_KIND_CREATE || grace_op_kind(op) == GRACE_KIND_INPLACE || op == GRACE_OP_TO_DEVICE)
      TRIP_WHY("%s %%%d %s", ir_op_name(k->op), u,
               grace_op_kind(op) == GRACE_KIND_INPLACE ? "writes in place" : "makes a host tensor from nothing on the device");
    t->list[t->n++] = i;
    t->nops++;
    for (int r = 0; r < k->nout; r++) t->in[k->first_result + r] = 1;
    for (int j = 0; j < k->nin; j++) {
      int32_t w = arg(ir, k, j);
      if (w < 0 || t->in[w] || vtype(ir, w)->device != GRACE_CPU || host_word(ir, w)) continue;
      t->in[w] = 1;
      stack[sp++] = w;
    }
  }
}
#undef TRIP_WHY

/* A device op: one whose results are device values (a copy to the host is not). */
static int device_op(const grace_ir *ir, const ir_inst *k) {
  return k->op < GRACE_NOPS && k->nout > 0 && vtype(ir, k->first_result)->device == GRACE_CUDA;
}

/* Whether round trip t, read by device op c, can move: its host values read by nothing but its own host work and
 * device ops, no break inside it, a device kernel for each op (why set where not). */
static void trip_check(const grace_ir *ir, int c, trip *t) {
  int first = c;
  for (int i = 0; i < t->n; i++) first = t->list[i] < first ? t->list[i] : first;
  for (int b = 0; b < ir->nbreak && !t->why[0]; b++)
    if (ir->breaks[b].after >= first && ir->breaks[b].after < c) {
      int l = ir->breaks[b].loc;
      snprintf(t->why, sizeof t->why, "the host reads a value in between (a graph break at %s: item(), print), so the "
               "host copy is needed", l >= 0 ? ir->locs[l] : "(unknown place)");
    }
  for (int j = 0; j < ir->ninst && !t->why[0]; j++) {
    const ir_inst *k = &ir->insts[j];
    int mine = device_op(ir, k);
    for (int i = 0; i < t->n && !mine; i++) mine = t->list[i] == j;
    for (int a = 0; a < k->nin && !mine && !t->why[0]; a++) {
      int32_t w = arg(ir, k, a);
      if (w >= 0 && t->in[w])
        snprintf(t->why, sizeof t->why, "its host value %%%d is also read by %s %%%d on the host", w, ir_op_name(k->op),
                 k->first_result);
    }
  }
  for (int o = 0; o < ir->nout && !t->why[0]; o++)
    if (t->in[ir->outputs[o]]) snprintf(t->why, sizeof t->why, "its host value %%%d is returned to Lua", ir->outputs[o]);
  for (int w = 0; w < ir->nwrite && !t->why[0]; w++)
    if (t->in[ir->writes[w].value]) snprintf(t->why, sizeof t->why, "its host value %%%d is written into state", ir->writes[w].value);
  for (int i = 0; i < t->n && !t->why[0]; i++) {
    const ir_inst *k = &ir->insts[t->list[i]];
    char buf[200];
    if (!is_copy_to_host(ir, k) && no_kernel_as(ir, k, t->in, buf, sizeof buf))
      snprintf(t->why, sizeof t->why, "%s %%%d %.200s", ir_op_name(k->op), k->first_result, buf);
  }
}

/* Moves round trip t onto the device: its values become device values, readers of each copy to the host read the
 * device value itself, and where device op c is a copy back (`:cuda()`), its readers read the moved result; the
 * copies are left to dce. */
/* Every use of copy k's result (arguments, results, write-backs) reads its source instead. */
static void bypass(grace_ir *ir, const ir_inst *k) {
  int32_t from = k->first_result, to = arg(ir, k, 0);
  for (int j = 0; j < ir->narg; j++) if (ir->args[j] == from) ir->args[j] = to;
  for (int o = 0; o < ir->nout; o++) if (ir->outputs[o] == from) ir->outputs[o] = to;
  for (int w = 0; w < ir->nwrite; w++) if (ir->writes[w].value == from) ir->writes[w].value = to;
}

static void trip_move(grace_ir *ir, int c, const trip *t) {
  for (int i = 0; i < t->n; i++) {
    const ir_inst *k = &ir->insts[t->list[i]];
    if (is_copy_to_host(ir, k)) bypass(ir, k);
    else for (int r = 0; r < k->nout; r++) ir->vals[k->first_result + r].type.device = GRACE_CUDA;
  }
  if (ir->insts[c].op == GRACE_OP_TO_DEVICE) bypass(ir, &ir->insts[c]);
}

/* One line for round trip t (z its result, read by device op c): moved or why not. */
static size_t trip_say(const grace_ir *ir, int c, int32_t z, const trip *t, char *text, size_t n) {
  const ir_inst *k = &ir->insts[c];
  const char *at = k->loc >= 0 ? ir->locs[k->loc] : "(unknown place)", *s = t->nops == 1 ? "" : "s";
  char what[160];
  if (k->op == GRACE_OP_TO_DEVICE)
    snprintf(what, sizeof what, "round trip %%%d (%d host op%s between a copy to the host and one back)", k->first_result,
             t->nops, s);
  else
    snprintf(what, sizeof what, "host work %%%d (%d host op%s on a device value copied to the host, read by %s %%%d on the "
             "device)", z, t->nops, s, ir_op_name(k->op), k->first_result);
  if (t->why[0]) return (size_t)snprintf(text, n, "%s -> stays on the host: %s; at %s\n", what, t->why, at);
  return (size_t)snprintf(text, n, "%s -> moved to the device: the ops run on the device value, no copy to the host "
                          "and back, no synchronize, so the program can stay a CUDA graph; at %s\n", what, at);
}

int ir_place_round_trips(grace_ir *ir, int rewrite, char *text, size_t n) {
  size_t nv = (size_t)(ir->nval ? ir->nval : 1), len = text && n ? strlen(text) : 0;
  trip t;
  int32_t *stack = grace_realloc(ir->vm, NULL, 0, sizeof *stack * nv);
  int8_t *done = grace_realloc(ir->vm, NULL, 0, nv);
  t.in = grace_realloc(ir->vm, NULL, 0, nv);
  int moved = 0;
  if (done) memset(done, 0, nv);
  for (int c = 0; c < ir->ninst && stack && t.in && done; c++) {
    const ir_inst *k = &ir->insts[c];
    if (!device_op(ir, k)) continue;
    for (int a = 0; a < k->nin; a++) {
      int32_t z = arg(ir, k, a);
      /* host work read by a device op (a copy of an input or capture is vm/vm_place.c's, a host number a word) */
      if (z < 0 || done[z] || vtype(ir, z)->device != GRACE_CPU || ir->insts[ir->vals[z].inst].op >= GRACE_NOPS) continue;
      memset(t.in, 0, nv);
      t.n = t.nops = t.ncopies = 0;
      t.why[0] = 0;
      trip_collect(ir, z, &t, stack);
      for (size_t v = 0; v < nv; v++) done[v] |= t.in[v];
      if (!t.ncopies) continue;   /* no device value went to the host: no round trip */
      if (k->op == GRACE_OP_TO_DEVICE && vtype(ir, k->first_result)->dtype != vtype(ir, z)->dtype)
        snprintf(t.why, sizeof t.why, "the copy back changes the dtype");
      if (!t.why[0]) trip_check(ir, c, &t);
      if (!t.why[0] && rewrite) trip_move(ir, c, &t);
      moved += !t.why[0];
      if (text && len < n) len += trip_say(ir, c, z, &t, text + len, n - len);
    }
  }
  grace_realloc(ir->vm, stack, sizeof *stack * nv, 0);
  grace_realloc(ir->vm, done, nv, 0);
  grace_realloc(ir->vm, t.in, nv, 0);
  return moved;
}
