/* vm_part.c: the partitions of a function with graph breaks as programs (DESIGN: "Partitions, shapes and state").
 * Replay defers the ops of a call between two breaks; at the break they run. The first time a partition is met it
 * becomes an IR program of its own, built from the recorded path: the values it reads from before it (inputs of the
 * function, tensors earlier partitions computed, captured tensors, numbers) are its inputs, captures and literals,
 * every tensor it hands to the host is an output, and an in-place write to a tensor from before it is a write-back.
 * The program goes through the whole-program passes, fusion and code generation, and its device backend makes its
 * own launch decision (eager, graph+copies, graph+indirection), as a straight-line compiled function's program does.
 * Later calls run it with the tensors of this call: a partition reads its parent's outputs as inputs, by pointer.
 * Views of tensors from before the partition are made first, outside it (a view computes nothing, and an output
 * that is a view of an input cannot be fresh memory of a graph). Partitions are keyed by their span of the path
 * and the path they were recorded on, so the paths of the tree share the partitions of their common prefix.
 *
 * Outputs. A partition hands back only what is read after it: by a later instruction of any path that shares it, as
 * a path's result, or as the value its break compares (the item() of a branch); a partition that writes into
 * arguments or captured tensors, or draws random numbers, or ends at a break whose read is not known, hands back
 * every tensor. Everything else stays inside its program (fused away, or a temporary of its arena). Lua code does
 * run between partitions in a replay (the function's own code, on every call), and it holds every tensor it made:
 * it may read one at a break the recording did not see, use it in an op no path recorded (the call then leaves
 * the paths and is traced), or keep it in a table past the call. So a value kept internal is not lost: its tensor
 * stays pending with a recipe (vm_lazy: the partition's program with every value an output, and the inputs this
 * run read, their versions checked), and asking for it (vm_lazy_compute, through the materialize hook) runs that
 * program once more. Paths recorded after a partition was built are checked against its outputs when they first
 * meet it; one that reads more rebuilds it. */
#include <stdio.h>
#include "vm/vm_trace.h"
#include "vm/vm_fn.h"
#include "ir/ir_place.h"

/* Most outputs a partition prunes (more: all handed back), so what it keeps fits arrays on the stack. */
enum { PART_MAX_OUTS = 512 };

/* A partition's program with every tensor it made an output, as built (before the passes): how a value kept
 * internal is computed again. Shared by the partition and by each run whose values wait on it. */
typedef struct vm_recipe {
  int refs;
  grace_ir *full;
} vm_recipe;

/* One run of a partition that kept values internal: the inputs it read (references) and their versions then, and
 * the tensors still waiting on it (t[j] for output j of the recipe, NULL once computed or dead: not references). */
struct vm_lazy {
  int refs;
  vm_recipe *rc;
  int nin;
  grace_tensor **in;
  uint64_t *ver;
  grace_tensor **t;
  int nt;
};

typedef struct vm_seg {
  int start, end, n;      /* the path's instructions start..end, n of them deferred (consts and literals are not) */
  int path;               /* the path it was recorded on: it serves a call while that path still matches */
  int index;              /* partitions of the path before it (the breaks before start) */
  grace_ir *prog;         /* NULL: runs op by op (why says why) */
  int32_t *pre;           /* views of tensors from before the partition, made before the program runs */
  int npre;
  int32_t *ins;           /* per program input: the path value whose tensor it takes */
  int32_t *outs;          /* per program output: the path value whose tensor takes it */
  int nin, nout;
  vm_recipe *rc;          /* NULL: every tensor the partition makes is an output */
  int32_t *all;           /* per output of rc->full: the path value whose tensor it is */
  int8_t *keep;           /* ... and whether prog hands it back */
  int nall;
  uint64_t checked;       /* paths whose reads after the partition its outputs are known to cover */
  long runs;
  char why[160];
} vm_seg;

struct vm_parts {
  vm_seg *s;
  int n, cap;
  long runs;              /* calls of a partition that ran its program */
};

vm_parts *vm_parts_new(grace_vm *vm) { return vm_calloc(vm, sizeof(vm_parts)); }

static void recipe_unref(grace_vm *vm, vm_recipe *rc) {
  if (!rc || --rc->refs > 0) return;
  grace_ir_free(rc->full);
  vm_free(vm, rc, sizeof *rc);
}

static void seg_free(grace_vm *vm, vm_seg *s) {
  grace_ir_free(s->prog);
  recipe_unref(vm, s->rc);
  vm_free(vm, s->all, sizeof *s->all * (size_t)(s->nall ? s->nall : 1));
  vm_free(vm, s->keep, (size_t)(s->nall ? s->nall : 1));
  vm_free(vm, s->pre, sizeof *s->pre * (size_t)(s->n ? s->n : 1));   /* room for every deferred op */
  vm_free(vm, s->ins, sizeof *s->ins * (size_t)(s->nin ? s->nin : 1));
  vm_free(vm, s->outs, sizeof *s->outs * (size_t)(s->nout ? s->nout : 1));
}

void vm_parts_free(grace_vm *vm, vm_parts *p) {
  if (!p) return;
  for (int i = 0; i < p->n; i++) seg_free(vm, &p->s[i]);
  vm_free(vm, p->s, sizeof *p->s * (size_t)p->cap);
  vm_free(vm, p, sizeof *p);
}

int vm_parts_count(const vm_parts *p) {
  int n = 0;
  for (int i = 0; p && i < p->n; i++) n += p->s[i].prog != NULL;
  return n;
}

long vm_parts_runs(const vm_parts *p) { return p ? p->runs : 0; }

void vm_parts_outputs(const vm_parts *p, long *outputs, long *internal) {
  for (int i = 0; p && i < p->n; i++) {
    if (!p->s[i].prog) continue;
    *outputs += p->s[i].nout;
    *internal += p->s[i].rc ? p->s[i].nall - p->s[i].nout : 0;
  }
}

int vm_parts_internal(const vm_parts *p, int k) {
  for (int i = 0; p && i < p->n; i++)
    if (p->s[i].prog && !k--) return p->s[i].rc ? p->s[i].nall - p->s[i].nout : 0;
  return 0;
}

grace_ir *vm_parts_prog(const vm_parts *p, int k, int *path, int *index) {
  for (int i = 0; p && i < p->n; i++) {
    if (!p->s[i].prog || k--) continue;
    if (path) *path = p->s[i].path;
    if (index) *index = p->s[i].index;
    return p->s[i].prog;
  }
  return NULL;
}

/* ---- building a partition's program from the path ---- */
typedef struct builder {
  grace_vm *vm;
  vm_trace *tr;
  const grace_ir *path;
  grace_ir *ir;
  int32_t *map;           /* per path value: its value in ir, -1 none */
  int8_t *inside;         /* per path value: made by an op of the program */
  /* per tensor from before the partition or made in it: its latest value in ir, and its in-place writes */
  grace_tensor **tens;
  int32_t *last, *root, *writes, *def;
  int ntens;
} builder;

static int tensor_slot(builder *b, grace_tensor *t) {
  for (int i = 0; i < b->ntens; i++) if (b->tens[i] == t) return i;
  return -1;
}

/* Path value v, from before the program: a literal, a capture, or an input bound to its tensor of this call. */
static grace_status outside_value(builder *b, int32_t v, int32_t *out) {
  const ir_inst *k = &b->path->insts[b->path->vals[v].inst];
  const ir_type *ty = &b->path->vals[v].type;
  grace_tensor *t = b->tr->val[v];
  if (k->op == IR_OP_LITERAL) {
    int32_t r = ir_append(b->ir, IR_OP_LITERAL, 0, NULL, NULL, 1, ty);
    if (r < 0) return vm_err(b->vm, GRACE_ENOMEM, "partition: out of host memory");
    b->ir->insts[b->ir->ninst - 1].literal = k->literal;
    b->ir->insts[b->ir->ninst - 1].iliteral = k->iliteral;
    *out = r;
    return GRACE_OK;
  }
  if (!t) return vm_err(b->vm, GRACE_EUNSUPPORTED, "partition: value %%%d has no tensor", v);
  int s = tensor_slot(b, t);
  if (s >= 0) { *out = b->last[s]; return GRACE_OK; }
  grace_value r;
  grace_status st = k->op == IR_OP_CONST && !b->path->consts[k->input_index].local
                        ? grace_ir_const(b->ir, t, &r)   /* a captured tensor: by identity and version */
                        : grace_ir_input(b->ir, ty->dtype, ty->device, ty->ndim, ty->sizes, &r);
  if (st != GRACE_OK) return st;
  s = b->ntens++;
  b->tens[s] = t;
  b->last[s] = b->root[s] = r;
  b->writes[s] = 0;
  b->def[s] = v;
  *out = r;
  return GRACE_OK;
}

/* Instruction j of the path, appended to the program with its arguments mapped. */
static grace_status add_inst(builder *b, int j) {
  const grace_ir *p = b->path;
  const ir_inst *k = &p->insts[j];
  int32_t args[64];
  grace_status st = GRACE_OK;
  if (k->nin > 64) return vm_err(b->vm, GRACE_EUNSUPPORTED, "partition: an op with %d inputs", k->nin);
  for (int i = 0; i < k->nin && st == GRACE_OK; i++) {
    int32_t v = p->args[k->first_arg + i];
    if (v < 0) args[i] = -1;
    else if (b->inside[v]) args[i] = b->map[v];
    else st = outside_value(b, v, &args[i]);
  }
  if (st != GRACE_OK) return st;
  ir_type types[4];
  for (int r = 0; r < k->nout && r < 4; r++) types[r] = p->vals[k->first_result + r].type;
  grace_ir_set_location(b->ir, k->loc >= 0 ? p->locs[k->loc] : NULL);
  int32_t r0 = ir_append(b->ir, k->op, k->nin, args, &k->attrs, k->nout, types);
  if (r0 < 0) return vm_err(b->vm, GRACE_ENOMEM, "partition: out of host memory");
  for (int r = 0; r < k->nout; r++) b->map[k->first_result + r] = r0 + r;
  if (grace_op_kind((grace_op)k->op) != GRACE_KIND_INPLACE) {
    for (int r = 0; r < k->nout; r++) {   /* a tensor the host gets: an output (its latest value) */
      grace_tensor *t = b->tr->val[k->first_result + r];
      int s = b->ntens++;
      b->tens[s] = t;
      b->last[s] = r0 + r;
      b->root[s] = -1;
      b->writes[s] = 0;
      b->def[s] = k->first_result + r;
    }
    return GRACE_OK;
  }
  /* in place: the written tensor's new value; for a tensor from before the partition, a write-back */
  int s = tensor_slot(b, b->tr->val[k->first_result]);
  if (s < 0) return vm_err(b->vm, GRACE_EINTERNAL, "partition: an in-place write to a tensor not seen");
  b->last[s] = r0;
  b->writes[s]++;
  if (b->root[s] >= 0) {
    b->ir->vals[r0].root = b->root[s];
    b->ir->vals[r0].nwrites = b->writes[s];
  }
  return GRACE_OK;
}

/* ---- what a partition hands back ---- */
typedef struct needs {
  grace_tensor **t;       /* this call's tensors read after the partition */
  int n, cap;
  int all;                /* a read after it that is not known: every tensor is handed back */
} needs;

static void need(needs *nd, grace_tensor *t) {
  if (!t || nd->all) return;
  for (int i = 0; i < nd->n; i++) if (nd->t[i] == t) return;
  if (nd->n == nd->cap) nd->all = 1;   /* more than room for: keep everything, as before */
  else nd->t[nd->n++] = t;
}

/* What the paths in the mask read, after instruction end, of the values made up to it (this call's tensors for them):
 * the arguments of later instructions (views made before a later partition included), the path's results, the value
 * its next break compares; a path that records no results, or whose next break reads a value not known, reads all. */
static void reads_after(const vm_trace *tr, uint64_t paths, int end, needs *nd) {
  for (int q = 0; q < tr->npaths && !nd->all; q++) {
    if (!(paths >> q & 1)) continue;
    const grace_ir *p = tr->paths[q];
#define BEFORE(w) ((w) >= 0 && (w) < p->nval && (w) < tr->nval && p->vals[w].inst <= end)
    if (!p->nout) nd->all = 1;
    for (int i = end + 1; i < p->ninst && !nd->all; i++) {
      const ir_inst *k = &p->insts[i];
      for (int a = 0; a < k->nin; a++) {
        int32_t w = p->args[k->first_arg + a];
        if (BEFORE(w)) need(nd, tr->val[w]);
      }
    }
    for (int o = 0; o < p->nout; o++) if (BEFORE(p->outputs[o])) need(nd, tr->val[p->outputs[o]]);
    for (int k = 0; k < p->nbreak; k++) {
      const ir_break *br = &p->breaks[k];
      if (br->after < end) continue;
      if (br->kind == IR_BRK_PRED && BEFORE(br->value)) need(nd, tr->val[br->value]);
      else if (br->kind != IR_BRK_PRED) nd->all = 1;
      break;   /* the break this partition ends at (or the next one) */
    }
#undef BEFORE
  }
}

/* A program that can run again for a value it kept internal: it writes no argument or captured tensor and draws
 * no random numbers (a second run would repeat either). Stricter than fn_auto_prefix_effects (the same question
 * for a merge's run ahead), it refuses every region, even one whose bodies draw nothing: recipes are made only for
 * programs without regions, and a partition holding one keeps every value an output, as before recipes. */
static int can_rerun(const grace_ir *ir) {
  if (ir->nwrite) return 0;
  for (int i = 0; i < ir->ninst; i++) if (ir_inst_random(ir, i) || ir_is_region(ir->insts[i].op)) return 0;
  return 1;
}

/* Which of seg's outputs (seg->all) the paths in the mask read after instruction end, into seg->keep; how many.
 * Values sharing storage (a value and its views) are kept or left inside together: a write through one must show in
 * the others, so a tensor handed back and one computed again later cannot stand for them. */
static int mark_kept(const vm_trace *tr, uint64_t paths, int end, vm_seg *seg) {
  grace_tensor *room[PART_MAX_OUTS];
  int32_t root[PART_MAX_OUTS];
  needs nd = {room, 0, PART_MAX_OUTS, seg->nall > PART_MAX_OUTS};   /* more: all handed back (finish) */
  reads_after(tr, paths, end, &nd);
  for (int j = 0; j < seg->nall; j++) {
    int k = nd.all;
    for (int i = 0; i < nd.n && !k; i++) k = nd.t[i] == tr->val[seg->all[j]];
    seg->keep[j] = (int8_t)k;
    if (!nd.all) root[j] = ir_view_base(tr->paths[tr->lead], seg->all[j]);   /* views share its storage */
  }
  int m = 0;
  for (int j = 0; j < seg->nall; j++) {
    for (int i = 0; i < seg->nall && !seg->keep[j]; i++)
      if (seg->keep[i] == 1 && root[i] == root[j]) seg->keep[j] = 2;   /* 2: kept for an alias */
    m += seg->keep[j] != 0;
  }
  for (int j = 0; j < seg->nall; j++) seg->keep[j] = seg->keep[j] != 0;
  return m;
}

/* Whether seg's outputs cover what the paths in the mask read after it (seg ends at instruction end). */
static int covers(grace_vm *vm, const vm_trace *tr, uint64_t paths, int end, vm_seg *seg) {
  int8_t *was = vm_alloc(vm, (size_t)seg->nall);
  if (!was) return 0;
  memcpy(was, seg->keep, (size_t)seg->nall);
  int ok = 1;
  mark_kept(tr, paths, end, seg);
  for (int j = 0; j < seg->nall; j++) ok &= !seg->keep[j] || was[j];
  memcpy(seg->keep, was, (size_t)seg->nall);
  vm_free(vm, was, (size_t)seg->nall);
  return ok;
}

/* The program a partition runs: host work between its device ops moved onto the device (vm/vm_place.c does the same
 * for a whole program, and says so; a function with breaks has the reasons said of its first path). */
static grace_ir *placed(grace_vm *vm, grace_ir *ir) {
  grace_ir *opt = NULL;
  if (!vm->cuda || !ir_place_round_trips(ir, 1, NULL, 0)) return ir;
  if (grace_ir_pass(ir, "dce", &opt) != GRACE_OK) return ir;   /* the copies stay, unread: harmless */
  grace_ir_free(ir);
  return opt;
}

/* Built program *irp (every tensor an output, seg->outs) into seg->prog: the passes, over the outputs the paths in the
 * mask read after instruction end; *irp kept as the recipe where some stay internal (NULL then). */
static grace_status finish(grace_vm *vm, vm_trace *tr, int end, uint64_t paths, vm_seg *seg, grace_ir **irp) {
  grace_ir *ir = *irp, *opt = NULL;
  int m = -1, nall = seg->nout;
  if (can_rerun(ir) && nall > 0) {
    seg->nall = nall;
    seg->keep = vm_alloc(vm, (size_t)nall);
    if (!seg->keep) return vm_err(vm, GRACE_ENOMEM, "partition: out of host memory");
    seg->all = seg->outs;
    seg->outs = NULL;
    m = mark_kept(tr, paths, end, seg);
  }
  if (m > 0 && m < nall && nall <= PART_MAX_OUTS) {   /* the program over the outputs read after it; the recipe keeps all */
    int32_t saved[PART_MAX_OUTS];
    memcpy(saved, ir->outputs, sizeof *saved * (size_t)nall);
    for (int j = 0, o = 0; j < nall; j++) if (seg->keep[j]) ir->outputs[o++] = saved[j];
    ir->nout = m;
    if (grace_ir_pass(ir, FN_COMPILE_PASSES, &opt) != GRACE_OK) opt = NULL;   /* then every output, below */
    memcpy(ir->outputs, saved, sizeof *saved * (size_t)nall);
    ir->nout = nall;
    if (opt) {
      seg->outs = vm_alloc(vm, sizeof *seg->outs * (size_t)m);
      seg->rc = vm_calloc(vm, sizeof *seg->rc);
      seg->nout = m;
      if (!seg->outs || !seg->rc) {
        grace_ir_free(opt);
        vm_free(vm, seg->rc, sizeof *seg->rc);
        seg->rc = NULL;
        return vm_err(vm, GRACE_ENOMEM, "partition: out of host memory");   /* seg_free frees the rest */
      }
      for (int j = 0, o = 0; j < nall; j++) if (seg->keep[j]) seg->outs[o++] = seg->all[j];
      *seg->rc = (vm_recipe){1, ir};
      seg->prog = placed(vm, opt);
      seg->checked = paths;
      *irp = NULL;
      return GRACE_OK;
    }
  }
  if (seg->all) {   /* every tensor an output */
    vm_free(vm, seg->keep, (size_t)nall);
    seg->outs = seg->all;
    seg->all = NULL;
    seg->keep = NULL;
    seg->nall = 0;
    seg->nout = nall;
  }
  if (grace_ir_pass(ir, FN_COMPILE_PASSES, &opt) == GRACE_OK) { grace_ir_free(ir); ir = opt; }
  seg->prog = placed(vm, ir);
  seg->checked = ~0ull;   /* hands back everything: any path is covered */
  *irp = NULL;
  return GRACE_OK;
}

/* The program of the deferred instructions list[0..n) into seg (seg->prog NULL and why set where it cannot be one),
 * handing back what the paths in the mask read after it. */
static grace_status build(grace_vm *vm, vm_trace *tr, const int32_t *list, int n, uint64_t paths, vm_seg *seg) {
  const grace_ir *p = tr->paths[tr->lead];
  size_t nv = (size_t)(p->nval ? p->nval : 1), nt = (size_t)(2 * n + 2 * p->nval + 1);
  builder b = {vm, tr, p, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
  b.map = vm_alloc(vm, sizeof *b.map * nv);
  b.inside = vm_calloc(vm, nv);
  b.tens = vm_alloc(vm, sizeof *b.tens * nt);
  b.last = vm_alloc(vm, sizeof *b.last * nt * 4);
  seg->pre = vm_alloc(vm, sizeof *seg->pre * (size_t)(n ? n : 1));
  grace_status st = b.map && b.inside && b.tens && b.last && seg->pre ? GRACE_OK
                    : vm_err(vm, GRACE_ENOMEM, "partition: out of host memory");
  if (st == GRACE_OK) {
    b.root = b.last + nt; b.writes = b.root + nt; b.def = b.writes + nt;
    char name[80];
    int index = 0;
    while (index < p->nbreak && p->breaks[index].after < list[0]) index++;
    seg->index = index;
    snprintf(name, sizeof name, "%.48s_part%d", p->name, index % 1000000 + 1);
    if (!(b.ir = grace_ir_new(vm, name))) st = vm->status;
  }
  /* views of tensors from before the partition (transitively) are made before it; everything else is the program */
  for (int i = 0; i < n && st == GRACE_OK; i++) {
    const ir_inst *k = &p->insts[list[i]];
    int outside = grace_op_kind((grace_op)k->op) == GRACE_KIND_VIEW;
    for (int a = 0; a < k->nin && outside; a++) {
      int32_t v = p->args[k->first_arg + a];
      outside = v < 0 || !b.inside[v];
    }
    for (int r = 0; r < k->nout; r++) b.inside[k->first_result + r] = (int8_t)!outside;
    if (outside) seg->pre[seg->npre++] = list[i];
    else st = add_inst(&b, list[i]);
  }
  for (int s = 0; s < b.ntens && st == GRACE_OK; s++) {
    if (b.root[s] < 0) st = grace_ir_output(b.ir, b.last[s]), seg->nout++;
    else if (b.writes[s]) {
      st = grace_ir_write(b.ir, b.root[s], b.last[s]);
      if (st == GRACE_OK) b.ir->writes[b.ir->nwrite - 1].bumps = b.writes[s];
    }
  }
  if (st == GRACE_OK) {
    seg->nin = b.ir->ninputs;
    seg->ins = vm_alloc(vm, sizeof *seg->ins * (size_t)(seg->nin ? seg->nin : 1));
    seg->outs = vm_alloc(vm, sizeof *seg->outs * (size_t)(seg->nout ? seg->nout : 1));
    if (!seg->ins || !seg->outs) st = vm_err(vm, GRACE_ENOMEM, "partition: out of host memory");
  }
  for (int s = 0, ni = 0, no = 0; s < b.ntens && st == GRACE_OK; s++) {
    if (b.root[s] < 0) seg->outs[no++] = b.def[s];
    else if (b.ir->insts[b.ir->vals[b.root[s]].inst].op == IR_OP_INPUT) seg->ins[ni++] = b.def[s];
  }
  if (st == GRACE_OK && seg->npre == n) snprintf(seg->why, sizeof seg->why, "views only: nothing to compute");
  else if (st == GRACE_OK) st = grace_ir_verify(b.ir);
  if (st == GRACE_OK && !seg->why[0]) st = finish(vm, tr, list[n - 1], paths, seg, &b.ir);
  else if (st != GRACE_OK) {
    snprintf(seg->why, sizeof seg->why, "%.159s", vm->err);
    st = st == GRACE_ENOMEM ? st : GRACE_OK;   /* not a program: it runs op by op */
  }
  grace_ir_free(b.ir);
  vm_free(vm, b.map, sizeof *b.map * nv);
  vm_free(vm, b.inside, nv);
  vm_free(vm, b.tens, sizeof *b.tens * nt);
  vm_free(vm, b.last, sizeof *b.last * nt * 4);
  return st;
}

/* ---- running ---- */
static int fits(const ir_type *ty, const grace_tensor *t) {
  if (!t || t->pending || ty->dtype != t->dtype || ty->ndim != t->ndim || ty->device != t->storage->device) return 0;
  for (int d = 0; d < t->ndim; d++) if (ty->sizes[d] != t->sizes[d]) return 0;
  return 1;
}

/* ---- values kept internal, computed again when asked for ---- */
static void lazy_unref(grace_vm *vm, struct vm_lazy *L) {
  if (!L || --L->refs > 0) return;
  size_t n = (size_t)(L->nin ? L->nin : 1);
  for (int i = 0; i < L->nin; i++) grace_tensor_release(L->in[i]);
  vm_free(vm, L->in, sizeof *L->in * n);
  vm_free(vm, L->ver, sizeof *L->ver * n);
  vm_free(vm, L->t, sizeof *L->t * (size_t)L->nt);
  recipe_unref(vm, L->rc);
  vm_free(vm, L, sizeof *L);
}

/* The tensors of values seg kept internal in this run wait on a recipe: its inputs in[] and their versions. */
static grace_status wait_on(grace_vm *vm, vm_trace *tr, vm_seg *seg, grace_tensor *const *in) {
  struct vm_lazy *L = NULL;
  for (int j = 0; j < seg->nall; j++) {
    grace_tensor *t = tr->val[seg->all[j]];
    if (seg->keep[j] || !t || !t->pending || t->lazy) continue;
    if (!L) {
      L = vm_calloc(vm, sizeof *L);
      size_t n = (size_t)(seg->nin ? seg->nin : 1);
      if (L) {
        L->in = vm_alloc(vm, sizeof *L->in * n);
        L->ver = vm_alloc(vm, sizeof *L->ver * n);
        L->t = vm_calloc(vm, sizeof *L->t * (size_t)seg->nall);
      }
      if (!L || !L->in || !L->ver || !L->t) {
        if (L) {
          vm_free(vm, L->in, sizeof *L->in * n);
          vm_free(vm, L->ver, sizeof *L->ver * n);
          vm_free(vm, L->t, sizeof *L->t * (size_t)seg->nall);
        }
        vm_free(vm, L, sizeof *L);
        return vm_err(vm, GRACE_ENOMEM, "partition: out of host memory");
      }
      L->rc = seg->rc;
      seg->rc->refs++;
      L->nin = seg->nin;
      L->nt = seg->nall;
      for (int i = 0; i < seg->nin; i++) {
        L->in[i] = in[i];
        grace_tensor_retain(in[i]);
        L->ver[i] = in[i]->storage->version;
      }
    }
    L->refs++;
    L->t[j] = t;
    t->lazy = L;
    t->lazy_out = j;
  }
  return GRACE_OK;
}

void vm_lazy_drop(grace_tensor *t) {
  struct vm_lazy *L = t->lazy;
  t->lazy = NULL;
  if (L && t->lazy_out >= 0 && t->lazy_out < L->nt && L->t[t->lazy_out] == t) L->t[t->lazy_out] = NULL;
  lazy_unref(t->vm, L);
}

/* t and every other tensor still waiting on the same run get their values from one run of the recipe: values that
 * share storage (a value and its views) share it again. */
grace_status vm_lazy_compute(grace_vm *vm, grace_tensor *t) {
  struct vm_lazy *L = t->lazy;
  grace_ir *full = L->rc->full;
  grace_tensor *out[PART_MAX_OUTS];
  for (int i = 0; i < L->nin; i++)
    if (L->in[i]->pending || L->in[i]->storage->version != L->ver[i])
      return vm_err(vm, GRACE_EARG, "%s: a value the compiled function computed inside this partition (and did not keep) "
                    "is asked for after input %d of the partition was written in place; it cannot be computed again",
                    full->name, i + 1);
  if (!grace_ir_consts_current(full))
    return vm_err(vm, GRACE_EARG, "%s: a value the compiled function computed inside this partition (and did not keep) "
                  "is asked for after a tensor it captured was written in place; it cannot be computed again", full->name);
  int nout = full->nout;
  if (nout > PART_MAX_OUTS || nout != L->nt)
    return vm_err(vm, GRACE_EINTERNAL, "%s: a recipe of %d values for %d waiting", full->name, nout, L->nt);
  grace_status st = grace_ir_run(full, L->nin, L->in, nout, out);
  if (st != GRACE_OK) return st;
  L->refs++;   /* held while its tensors stop waiting on it (each drops a reference) */
  for (int j = 0; j < nout && st == GRACE_OK; j++) {
    grace_tensor *w = L->t[j], *r = out[j];
    if (!w || !w->pending) continue;
    if (r->dtype != w->dtype || r->ndim != w->ndim || memcmp(r->sizes, w->sizes, sizeof(int64_t) * (size_t)w->ndim))
      st = vm_err(vm, GRACE_EINTERNAL, "%s: a value computed again is %s, recorded %s", full->name, VM_SHAPE(r),
                  VM_SHAPE(w));
    else vm_replay_become(w, r);
  }
  lazy_unref(vm, L);   /* perhaps the last reference to full */
  for (int j = 0; j < nout; j++) grace_tensor_release(out[j]);
  return st;
}

/* Runs seg's program on this call's tensors; *ran 0 when they do not fit it (nothing ran then). */
static grace_status run_seg(grace_vm *vm, vm_trace *tr, vm_parts *P, vm_seg *seg, int *ran) {
  grace_ir *ir = seg->prog;
  grace_tensor *in[256], *out[256];
  *ran = 0;
  if (seg->nin > 256 || seg->nout > 256) return GRACE_OK;
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    if (k->op != IR_OP_INPUT) continue;
    in[k->input_index] = tr->val[seg->ins[k->input_index]];
    grace_status cs = in[k->input_index] && in[k->input_index]->lazy ? vm_computed(vm, in[k->input_index]) : GRACE_OK;
    if (cs != GRACE_OK) return cs;   /* kept inside another call's partition, and it cannot be computed again */
    if (!fits(&ir->vals[k->first_result].type, in[k->input_index])) return GRACE_OK;
  }
  /* a program that writes in place into one input must not find another input sharing its storage */
  for (int i = 0; i < seg->nin && ir->nwrite; i++)
    for (int j = 0; j < i; j++) if (in[i]->storage == in[j]->storage) return GRACE_OK;
  if (!grace_ir_consts_current(ir)) grace_ir_recapture(ir);   /* a captured tensor an earlier partition wrote */
  *ran = 1;
  grace_status st = grace_ir_run(ir, seg->nin, in, seg->nout, out);
  if (st != GRACE_OK) return st;
  for (int j = 0; j < seg->nout; j++) {
    grace_tensor *s = tr->val[seg->outs[j]];
    if (st == GRACE_OK && s->pending) {
      if (!fits(&tr->paths[tr->lead]->vals[seg->outs[j]].type, out[j]))
        st = vm_err(vm, GRACE_EINTERNAL, "partition %s: output %d is %s, recorded %s", ir->name, j + 1, VM_SHAPE(out[j]),
                    VM_SHAPE(s));
      else vm_replay_become(s, out[j]);
    }
    grace_tensor_release(out[j]);
  }
  if (st == GRACE_OK && seg->rc) st = wait_on(vm, tr, seg, in);
  seg->runs++;
  P->runs++;
  return st;
}

static vm_seg *find(vm_parts *P, const vm_trace *tr, const int32_t *list, int n) {
  for (int i = 0; i < P->n; i++) {
    vm_seg *s = &P->s[i];
    if (s->start == list[0] && s->end == list[n - 1] && s->n == n && (tr->alive >> s->path & 1)) return s;
  }
  return NULL;
}

grace_status vm_part_flush(grace_vm *vm, const int32_t *list, int n) {
  vm_trace *tr = vm->trace;
  vm_parts *P = tr->parts;
  vm_seg *seg = find(P, tr, list, n);
  if (!seg) {
    if (P->n == P->cap) {
      int nc = P->cap ? 2 * P->cap : 8;
      vm_seg *ns = vm->alloc(vm->alloc_ud, P->s, sizeof *ns * (size_t)P->cap, sizeof *ns * (size_t)nc, VM_ALIGN);
      if (!ns) return vm_err(vm, GRACE_ENOMEM, "partition: out of host memory");
      P->s = ns;
      P->cap = nc;
    }
    seg = &P->s[P->n];
    memset(seg, 0, sizeof *seg);
    *seg = (vm_seg){.start = list[0], .end = list[n - 1], .n = n, .path = tr->lead};
    grace_status st = build(vm, tr, list, n, tr->alive, seg);
    if (st != GRACE_OK) { seg_free(vm, seg); return st; }
    P->n++;
  } else if (seg->prog && (tr->alive & ~seg->checked)) {   /* paths recorded since it was built */
    uint64_t paths = seg->checked | tr->alive;
    if (covers(vm, tr, tr->alive & ~seg->checked, list[n - 1], seg)) seg->checked = paths;
    else {   /* one reads a value it keeps internal: built again, handing back what all of them read */
      vm_seg old = *seg;
      *seg = (vm_seg){.start = list[0], .end = list[n - 1], .n = n, .path = tr->lead};
      grace_status st = build(vm, tr, list, n, paths, seg);
      if (st != GRACE_OK) { seg_free(vm, seg); *seg = old; return st; }
      seg->runs = old.runs;
      seg_free(vm, &old);
    }
  }
  if (!seg->prog) return vm_replay_run_ops(vm, list, n);
  grace_status st = vm_replay_run_ops(vm, seg->pre, seg->npre);
  int ran = 0;
  if (st == GRACE_OK) st = run_seg(vm, tr, P, seg, &ran);
  if (st == GRACE_OK && !ran) {   /* this call's tensors do not fit the program: op by op, all but the views made */
    for (int i = 0, m = 0; i < n; i++) {
      int made = 0;
      for (int j = 0; j < seg->npre && !made; j++) made = seg->pre[j] == list[i];
      if (!made) tr->pending[m++] = list[i];
    }
    st = vm_replay_run_ops(vm, tr->pending, n - seg->npre);
  }
  return st;
}
