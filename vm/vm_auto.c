/* vm_auto.c: branches on values read on the host become cond regions (the automatic form of grace.cond). A host
 * that reads one value of a tensor during a trace or a replay (item()) says how it used it (grace_trace_branch): in
 * one comparison with a constant deciding a branch, or in a way that cannot be recorded (the reason, with its
 * place). The trace keeps that on the break the read made (ir_break: the value, the comparison, the outcome this
 * path took); a replay keeps it per call and hands it to a path it records. Once a function's recorded paths hold
 * both outcomes of such a break, and each runs to its end without another, ir_merge makes them one program; the
 * next replayed call lets the host build the guards of that program (its captured tensors, those of both branches),
 * and from then on the entry runs the program like any other: no host code, no sync at the branch. */
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

void vm_auto_read(grace_vm *vm) {
  vm_trace *tr = vm->trace;
  if (!tr->replay) return;   /* a recording counts reads on the break itself (ir_add_break) */
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
  return GRACE_OK;
}
