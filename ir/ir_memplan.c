/* ir_memplan.c: the static memory planner. Steps, each a loop over the IR:
 *   1. storage: a view shares its input's storage, so each value gets the base that owns its bytes;
 *   2. what is planned: results of non-view ops that are neither returned nor the base of a returned view
 *      (outputs are allocated per call so a later replay never overwrites what the caller holds);
 *      inputs, captures, scalars and literals are owned outside;
 *   3. lifetimes: from the defining instruction to the last use of the value or of any view of it; a value
 *      written back to an input or capture lives through a virtual step `ninst` after the last instruction;
 *   4. in-place reuse: an elementwise result may take the slot of an input that dies at that instruction
 *      (same element count and element size, no view of it anywhere): the two form one slot;
 *   5. placement: slots sorted by size, largest first, each put in the smallest gap left by the already placed
 *      slots whose lifetimes overlap it (best fit over the interval graph), else on top;
 *   6. the peak of live slot bytes over all steps: the lower bound any placement must reach.
 * Sizes of symbolic dims are planned at their hints. Graph breaks are not split points: the whole function
 * is one arena. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ir/ir_memplan.h"

enum { F_PLANNED = 1, F_HAS_VIEW = 2, F_OUTPUT = 4, F_CANDIDATE = 8 };

typedef struct { int64_t size; int32_t start, id; } slot_key;
typedef struct { int64_t off, size; } span;

/* Largest slot first (the big ones are hardest to fit); then earliest, then by id, so the plan is deterministic. */
static int by_size(const void *x, const void *y) {
  const slot_key *a = x, *b = y;
  if (a->size != b->size) return a->size > b->size ? -1 : 1;
  if (a->start != b->start) return a->start < b->start ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

static int by_offset(const void *x, const void *y) {
  const span *a = x, *b = y;
  return (a->off > b->off) - (a->off < b->off);
}

static int is_view(int op) { return op < GRACE_NOPS && grace_op_kind((grace_op)op) == GRACE_KIND_VIEW; }

/* Ops whose result element i depends only on input element i (same index after broadcasting): writing the
 * result over an input of the same element count never clobbers an element still to be read. CAST and
 * CLAMP are UNARY in the op table, so they are covered. */
static int is_elementwise(int op) {
  if (op >= GRACE_NOPS) return 0;
  grace_opkind k = grace_op_kind((grace_op)op);
  return k == GRACE_KIND_UNARY || k == GRACE_KIND_BINARY || k == GRACE_KIND_COMPARE || k == GRACE_KIND_TERNARY;
}

/* Element count at the sizes' hints; -1 on overflow (a program no arena could hold). */
static int64_t numel(const ir_type *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (t->sizes[d] < 0) return -1;
    if (t->sizes[d] && n > INT64_MAX / t->sizes[d]) return -1;
    n *= t->sizes[d];
  }
  return n;
}

void ir_memplan_free(grace_vm *vm, ir_memplan *p) {
  if (p->block) grace_realloc(vm, p->block, p->block_size, 0);
  memset(p, 0, sizeof *p);
}

/* Scratch of one build, freed before it returns. */
typedef struct {
  uint8_t *flags;
  int32_t *grp;       /* slot of a planned value: the value at the head of its in-place chain */
  int32_t *cend;      /* per chain head: the chain's last step */
  slot_key *keys;
  span *spans;
  int64_t *diff;      /* slot bytes starting (+) and ending (-) per step, for the peak */
  void *block;
  size_t size;
} scratch;

grace_status ir_memplan_build(grace_ir *ir, ir_memplan *p) {
  memset(p, 0, sizeof *p);
  grace_vm *vm = ir->vm;
  int nval = ir->nval, ninst = ir->ninst;
  p->nval = nval;
  p->ninst = ninst;
  size_t nv = (size_t)(nval ? nval : 1);
  p->block_size = nv * (2 * sizeof(int64_t) + 4 * sizeof(int32_t));
  p->block = grace_realloc(vm, NULL, 0, p->block_size);
  scratch s = {0};
  s.size = nv * (sizeof(slot_key) + sizeof(span) + 2 * sizeof(int32_t) + 1) + sizeof(int64_t) * ((size_t)ninst + 2) + 16;
  s.block = grace_realloc(vm, NULL, 0, s.size);
  if (!p->block || !s.block) {
    if (s.block) grace_realloc(vm, s.block, s.size, 0);
    ir_memplan_free(vm, p);
    return grace_set_error(vm, GRACE_ENOMEM, "memplan: out of host memory planning '%s'", ir->name);
  }
  /* carve the arrays, 8-byte members first so every one stays aligned */
  p->offset = p->block;
  p->bytes = p->offset + nv;
  p->base = (int32_t *)(p->bytes + nv);
  p->start = p->base + nv;
  p->end = p->start + nv;
  p->reuse = p->end + nv;
  s.keys = s.block;
  s.spans = (span *)(s.keys + nv);
  s.diff = (int64_t *)(s.spans + nv);
  s.grp = (int32_t *)(s.diff + ninst + 2);
  s.cend = s.grp + nv;
  s.flags = (uint8_t *)(s.cend + nv);
  memset(s.flags, 0, nv);
  memset(s.diff, 0, sizeof(int64_t) * ((size_t)ninst + 2));

  grace_status st = GRACE_OK;
  /* 1. storage owners; arguments are checked here so the later loops may trust them */
  for (int v = 0; v < nval; v++) {
    p->offset[v] = -1; p->bytes[v] = 0; p->base[v] = v; p->start[v] = -1; p->end[v] = -1; p->reuse[v] = -1;
  }
  for (int k = 0; k < ninst && st == GRACE_OK; k++) {
    const ir_inst *in = &ir->insts[k];
    for (int j = 0; j < in->nin; j++) {
      int32_t a = ir->args[in->first_arg + j];
      if (a < -1 || a >= in->first_result) {
        st = grace_set_error(vm, GRACE_EARG, "memplan: '%s' instruction %d uses %%%d before it is defined", ir->name, k, (int)a);
        break;
      }
    }
    if (st != GRACE_OK) break;
    for (int r = 0; r < in->nout; r++) {
      int32_t v = in->first_result + r;
      p->start[v] = k;
      if (is_view(in->op)) {
        int32_t a = in->nin > 0 ? ir->args[in->first_arg] : -1;
        if (a < 0) { st = grace_set_error(vm, GRACE_EARG, "memplan: '%s' instruction %d: a view of nothing", ir->name, k); break; }
        p->base[v] = p->base[a];           /* a's base is already final: chains collapse as they are built */
        s.flags[p->base[v]] |= F_HAS_VIEW;
      } else if (in->op < GRACE_NOPS) s.flags[v] |= F_CANDIDATE;
    }
  }
  /* 2. outputs and whatever they view are the caller's, not the arena's */
  for (int i = 0; i < ir->nout && st == GRACE_OK; i++) {
    int32_t o = ir->outputs[i];
    if (o < 0 || o >= nval) st = grace_set_error(vm, GRACE_EARG, "memplan: '%s' returns %%%d, not a value", ir->name, (int)o);
    else s.flags[p->base[o]] |= F_OUTPUT;
  }
  /* 3. lifetimes, on the bases: a use of a view is a use of the bytes it shares */
  for (int k = 0; k < ninst && st == GRACE_OK; k++) {
    const ir_inst *in = &ir->insts[k];
    for (int j = 0; j < in->nin; j++) {
      int32_t a = ir->args[in->first_arg + j];
      if (a >= 0 && p->end[p->base[a]] < k) p->end[p->base[a]] = k;
    }
  }
  for (int i = 0; i < ir->nwrite && st == GRACE_OK; i++) {
    int32_t v = ir->writes[i].value;
    if (v < 0 || v >= nval) st = grace_set_error(vm, GRACE_EARG, "memplan: '%s' writes %%%d, not a value", ir->name, (int)v);
    else p->end[p->base[v]] = ninst;       /* read by the write-back after the last instruction */
  }
  for (int v = 0; v < nval && st == GRACE_OK; v++) {
    if ((s.flags[v] & (F_CANDIDATE | F_OUTPUT)) == (F_CANDIDATE | F_OUTPUT)) { p->noutside++; continue; }
    if (!(s.flags[v] & F_CANDIDATE)) continue;
    int64_t n = numel(&ir->vals[v].type), es = (int64_t)grace_dtype_size(ir->vals[v].type.dtype);
    if (n < 0 || (n && n > (INT64_MAX - IR_MEMPLAN_ALIGN) / es)) {
      st = grace_set_error(vm, GRACE_EARG, "memplan: '%s' value %%%d is too large to plan", ir->name, v);
      break;
    }
    if (n == 0) continue;                  /* no bytes: any address will do, so it takes none of the arena */
    p->bytes[v] = (n * es + IR_MEMPLAN_ALIGN - 1) / IR_MEMPLAN_ALIGN * IR_MEMPLAN_ALIGN;
    if (p->end[v] < p->start[v]) p->end[v] = p->start[v];   /* unused: it still is written at its definition */
    s.flags[v] |= F_PLANNED;
    p->nplanned++;
  }
  if (st != GRACE_OK) {
    grace_realloc(vm, s.block, s.size, 0);
    ir_memplan_free(vm, p);
    return st;
  }

  /* 4. in-place reuse; s.grp maps each planned value to the head of its chain, the head's end to the chain's */
  for (int v = 0; v < nval; v++) s.grp[v] = v;
  for (int k = 0; k < ninst; k++) {
    const ir_inst *in = &ir->insts[k];
    int32_t r = in->first_result;
    if (!is_elementwise(in->op) || in->nout != 1 || !(s.flags[r] & F_PLANNED)) continue;
    const ir_type *rt = &ir->vals[r].type;
    for (int j = 0; j < in->nin; j++) {
      int32_t a = ir->args[in->first_arg + j];
      if (a < 0) continue;
      const ir_type *at = &ir->vals[a].type;
      /* a view of a anywhere could be read here or could be what a's bytes are reached through: leave it */
      if ((s.flags[a] & (F_PLANNED | F_HAS_VIEW)) != F_PLANNED || p->end[a] != k) continue;
      if (p->bytes[a] != p->bytes[r] || numel(at) != numel(rt) ||
          grace_dtype_size(at->dtype) != grace_dtype_size(rt->dtype) || at->device != rt->device)
        continue;
      p->reuse[r] = a;
      s.grp[r] = s.grp[a];
      p->nreused++;
      break;
    }
  }
  /* a chain's lifetime runs from its head's definition to the last end among its members */
  for (int v = 0; v < nval; v++) {
    if (!(s.flags[v] & F_PLANNED)) continue;
    int32_t g = s.grp[v];
    if (g == v || s.cend[g] < p->end[v]) s.cend[g] = p->end[v];
  }
  int nslot = 0;
  for (int v = 0; v < nval; v++)
    if ((s.flags[v] & F_PLANNED) && s.grp[v] == v) s.keys[nslot++] = (slot_key){p->bytes[v], p->start[v], v};

  /* 5. best-fit placement, largest slot first */
  qsort(s.keys, (size_t)nslot, sizeof *s.keys, by_size);
  for (int i = 0; i < nslot; i++) {
    int32_t id = s.keys[i].id;
    int64_t size = s.keys[i].size;
    int32_t lo = s.keys[i].start, hi = s.cend[id];
    int nspan = 0;
    for (int j = 0; j < i; j++) {          /* the placed slots live at some step this one is live */
      int32_t o = s.keys[j].id;
      if (s.keys[j].start <= hi && lo <= s.cend[o]) s.spans[nspan++] = (span){p->offset[o], s.keys[j].size};
    }
    qsort(s.spans, (size_t)nspan, sizeof *s.spans, by_offset);
    int64_t top = 0, best = -1, best_gap = INT64_MAX;
    for (int j = 0; j < nspan; j++) {
      int64_t gap = s.spans[j].off - top;
      if (gap >= size && gap < best_gap) { best = top; best_gap = gap; }
      if (s.spans[j].off + s.spans[j].size > top) top = s.spans[j].off + s.spans[j].size;
    }
    if (best < 0) best = top;              /* no gap fits: on top of everything it overlaps */
    p->offset[id] = best;
    if (best + size > p->arena_bytes) p->arena_bytes = best + size;
    s.diff[lo] += size;
    s.diff[hi + 1] -= size;
  }
  /* members share their head's slot; heads come first in value order, so one pass suffices */
  for (int v = 0; v < nval; v++)
    if ((s.flags[v] & F_PLANNED) && s.grp[v] != v) p->offset[v] = p->offset[s.grp[v]];

  /* 6. peak live slot bytes over steps 0..ninst (the write-back step included) */
  int64_t live = 0;
  for (int k = 0; k <= ninst; k++) {
    live += s.diff[k];
    if (live > p->peak_live_bytes) p->peak_live_bytes = live;
  }

  grace_realloc(vm, s.block, s.size, 0);
  return GRACE_OK;
}

void ir_memplan_report(const grace_ir *ir, const ir_memplan *p, char *buf, size_t n) {
  if (!buf || !n) return;
  double over = p->peak_live_bytes ? 100.0 * (double)(p->arena_bytes - p->peak_live_bytes) / (double)p->peak_live_bytes : 0;
  snprintf(buf, n,
           "memplan @%s: arena %lld bytes, peak live %lld bytes (arena %.1f%% over that lower bound)\n"
           "  %d values planned in %d-byte aligned slots, %d reused an input's slot in place\n"
           "  %d result(s) allocated per call outside the arena (outputs and the bases of returned views)\n",
           ir->name, (long long)p->arena_bytes, (long long)p->peak_live_bytes, over, p->nplanned, IR_MEMPLAN_ALIGN,
           p->nreused, p->noutside);
}

grace_status grace_ir_memplan(grace_ir *ir, int64_t *offsets, int64_t *arena_bytes, int64_t *peak_live_bytes,
                              char *report, size_t n) {
  if (!ir) return GRACE_EARG;              /* no VM to carry a message */
  ir_memplan p;
  grace_status st = ir_memplan_build(ir, &p);
  if (st != GRACE_OK) return st;
  if (offsets) memcpy(offsets, p.offset, sizeof *offsets * (size_t)p.nval);
  if (arena_bytes) *arena_bytes = p.arena_bytes;
  if (peak_live_bytes) *peak_live_bytes = p.peak_live_bytes;
  ir_memplan_report(ir, &p, report, n);
  ir_memplan_free(ir->vm, &p);
  return GRACE_OK;
}
