/* ir_pass.c: the rewriter every pass builds its output with, the pass registry behind grace_ir_pass,
 * and dead-code elimination. */
#include <stdio.h>
#include <string.h>
#include "ir/ir_pass.h"
#include "ir/ir_sym.h"

grace_status ir_rw_begin(ir_rewriter *rw, grace_ir *src) {
  memset(rw, 0, sizeof *rw);
  rw->src = src;
  rw->dst = grace_ir_new(src->vm, src->name);
  if (!rw->dst) return GRACE_ENOMEM;
  if (ir_sym_copy(rw->dst, src) != GRACE_OK) {
    grace_ir_free(rw->dst);
    rw->dst = NULL;
    return GRACE_ENOMEM;
  }
  rw->nmap = src->nval;
  rw->map = grace_realloc(src->vm, NULL, 0, sizeof *rw->map * (size_t)(rw->nmap ? rw->nmap : 1));
  if (!rw->map) {
    grace_ir_free(rw->dst);
    rw->dst = NULL;   /* callers abort when dst is set: it must not be freed twice */
    return grace_set_error(src->vm, GRACE_ENOMEM, "pass: out of host memory");
  }
  for (int i = 0; i < rw->nmap; i++) rw->map[i] = -1;
  return GRACE_OK;
}

void ir_rw_abort(ir_rewriter *rw) {
  grace_ir_free(rw->dst);
  grace_realloc(rw->src->vm, rw->map, sizeof *rw->map * (size_t)(rw->nmap ? rw->nmap : 1), 0);
  rw->dst = NULL;
  rw->map = NULL;
}

static void set_loc(ir_rewriter *rw, int k) {
  const grace_ir *s = rw->src;
  grace_ir_set_location(rw->dst, k >= 0 && s->insts[k].loc >= 0 ? s->locs[s->insts[k].loc] : NULL);
}

/* Breaks of src that come before instruction k (k = ninst: all) go after what dst has so far. */
static grace_status carry_breaks(ir_rewriter *rw, int k) {
  const grace_ir *s = rw->src;
  for (; rw->nbreak < s->nbreak && s->breaks[rw->nbreak].after < k; rw->nbreak++) {
    const ir_break *b = &s->breaks[rw->nbreak];
    grace_ir_set_location(rw->dst, b->loc >= 0 ? s->locs[b->loc] : NULL);
    grace_status st = ir_add_break(rw->dst);
    if (st != GRACE_OK) return st;
  }
  return GRACE_OK;
}

grace_status ir_rw_copy(ir_rewriter *rw, int k) {
  grace_ir *s = rw->src, *d = rw->dst;
  const ir_inst *in = &s->insts[k];
  grace_status st = carry_breaks(rw, k);
  if (st != GRACE_OK) return st;
  set_loc(rw, k);
  int32_t args[64];
  ir_type types[64];   /* a region has up to 64 results (a cond's own and the tensors its branches write) */
  for (int i = 0; i < in->nin && i < 64; i++) args[i] = ir_rw_value(rw, s->args[in->first_arg + i]);
  for (int r = 0; r < in->nout && r < 64; r++) types[r] = s->vals[in->first_result + r].type;
  if (in->op == IR_OP_CONST) {   /* a capture keeps its tensor, version and kind */
    const ir_const *c = &s->consts[in->input_index];
    if (d->nconst == d->cap_const) {
      int nc = d->cap_const ? d->cap_const * 2 : 8;
      ir_const *p = grace_realloc(d->vm, d->consts, sizeof *p * (size_t)d->cap_const, sizeof *p * (size_t)nc);
      if (!p) return grace_set_error(d->vm, GRACE_ENOMEM, "pass: out of host memory");
      d->consts = p;
      d->cap_const = nc;
    }
    grace_tensor_retain(c->t);
    d->consts[d->nconst] = *c;
  }
  int32_t sub = -1;
  if (ir_is_region(in->op)) {   /* a region owns its sub-programs: dst gets copies of its own */
    grace_ir *c0 = ir_clone(s->subs[in->sub]), *c1 = c0 ? ir_clone(s->subs[in->sub + 1]) : NULL;
    if (c1) sub = ir_add_sub(d, c0);
    if (sub >= 0 && ir_add_sub(d, c1) < 0) { d->nsub--; sub = -1; }
    if (sub < 0) { grace_ir_free(c0); grace_ir_free(c1); return s->vm->status ? s->vm->status : GRACE_ENOMEM; }
  }
  int32_t v = ir_append(d, in->op, in->nin, args, &in->attrs, in->nout, types);
  if (v < 0) return GRACE_ENOMEM;
  ir_inst *n = &d->insts[d->ninst - 1];
  n->sub = sub;
  n->literal = in->literal;
  n->iliteral = in->iliteral;
  if (in->op == IR_OP_INPUT) { n->input_index = in->input_index; d->ninputs++; }
  else if (in->op == IR_OP_SCALAR) { n->input_index = in->input_index; d->nscalars++; }
  else if (in->op == IR_OP_CONST) n->input_index = d->nconst++;
  for (int r = 0; r < in->nout; r++) {
    d->vals[v + r].root = ir_rw_value(rw, s->vals[in->first_result + r].root);
    d->vals[v + r].nwrites = s->vals[in->first_result + r].nwrites;
    rw->map[in->first_result + r] = v + r;
  }
  return GRACE_OK;
}

grace_status ir_rw_op(ir_rewriter *rw, int k, grace_op op, int nin, const int32_t *in, const grace_attrs *a, int nout,
                      int32_t *out) {
  grace_status st = carry_breaks(rw, k < 0 ? 0 : k);
  if (st != GRACE_OK) return st;
  set_loc(rw, k);
  return grace_ir_op(rw->dst, op, nin, in, a, nout, out);
}

grace_status ir_rw_literal(ir_rewriter *rw, int k, double v, int is_int, int64_t iv, int32_t *out) {
  grace_status st = carry_breaks(rw, k < 0 ? 0 : k);
  if (st != GRACE_OK) return st;
  set_loc(rw, k);
  return is_int ? grace_ir_literal_int(rw->dst, iv, out) : grace_ir_literal(rw->dst, v, 0, out);
}

grace_status ir_rw_finish(ir_rewriter *rw, grace_ir **out) {
  grace_ir *s = rw->src, *d = rw->dst;
  grace_status st = carry_breaks(rw, s->ninst);
  for (int i = 0; i < s->nout && st == GRACE_OK; i++) {
    int32_t v = ir_rw_value(rw, s->outputs[i]);
    st = v >= 0 ? grace_ir_output(d, v) : grace_set_error(s->vm, GRACE_EINTERNAL, "pass: output %d was dropped", i);
  }
  for (int i = 0; i < s->nwrite && st == GRACE_OK; i++) {
    int32_t t = ir_rw_value(rw, s->writes[i].target), v = ir_rw_value(rw, s->writes[i].value);
    st = t >= 0 && v >= 0 ? grace_ir_write(d, t, v) : grace_set_error(s->vm, GRACE_EINTERNAL, "pass: write %d was dropped", i);
    if (st == GRACE_OK) d->writes[d->nwrite - 1].bumps = s->writes[i].bumps;
  }
  if (st == GRACE_OK) st = grace_ir_verify(d);
  if (st != GRACE_OK) { ir_rw_abort(rw); return st; }
  grace_realloc(s->vm, rw->map, sizeof *rw->map * (size_t)(rw->nmap ? rw->nmap : 1), 0);
  rw->map = NULL;
  *out = d;
  rw->dst = NULL;
  return GRACE_OK;
}

int32_t *ir_count_uses(grace_ir *ir) {
  int32_t *uses = grace_realloc(ir->vm, NULL, 0, sizeof *uses * (size_t)(ir->nval ? ir->nval : 1));
  if (!uses) { grace_set_error(ir->vm, GRACE_ENOMEM, "pass: out of host memory"); return NULL; }
  memset(uses, 0, sizeof *uses * (size_t)(ir->nval ? ir->nval : 1));
  for (int i = 0; i < ir->narg; i++) if (ir->args[i] >= 0) uses[ir->args[i]]++;
  for (int i = 0; i < ir->nout; i++) uses[ir->outputs[i]]++;
  for (int i = 0; i < ir->nwrite; i++) { uses[ir->writes[i].target]++; uses[ir->writes[i].value]++; }
  return uses;
}

/* ---- dead-code elimination: drops what no output or write needs. Inputs and scalars stay (they are the
 * program's interface), and so do random ops, since each advances the generator as eager execution did. */
static int keeps_alive(int op) {
  return op == IR_OP_INPUT || op == IR_OP_SCALAR || op == GRACE_OP_RAND || op == GRACE_OP_RANDN || op == GRACE_OP_RANDINT;
}

grace_status ir_pass_dce(grace_ir *src, grace_ir **out) {
  grace_vm *vm = src->vm;
  size_t n = (size_t)(src->ninst ? src->ninst : 1);
  char *live = grace_realloc(vm, NULL, 0, n);
  char *need = grace_realloc(vm, NULL, 0, (size_t)(src->nval ? src->nval : 1));
  if (!live || !need) {
    grace_realloc(vm, live, n, 0);
    grace_realloc(vm, need, (size_t)(src->nval ? src->nval : 1), 0);
    return grace_set_error(vm, GRACE_ENOMEM, "dce: out of host memory");
  }
  memset(need, 0, (size_t)(src->nval ? src->nval : 1));
  for (int i = 0; i < src->nout; i++) need[src->outputs[i]] = 1;
  for (int i = 0; i < src->nwrite; i++) need[src->writes[i].target] = need[src->writes[i].value] = 1;
  for (int k = src->ninst - 1; k >= 0; k--) {   /* values are defined before use: one backward sweep */
    const ir_inst *in = &src->insts[k];
    live[k] = (char)(keeps_alive(in->op) || (ir_is_region(in->op) && ir_region_random(src, k)));
    for (int r = 0; r < in->nout; r++) live[k] |= need[in->first_result + r];
    if (live[k])
      for (int j = 0; j < in->nin; j++) if (src->args[in->first_arg + j] >= 0) need[src->args[in->first_arg + j]] = 1;
  }
  ir_rewriter rw;
  grace_status st = ir_rw_begin(&rw, src);
  for (int k = 0; k < src->ninst && st == GRACE_OK; k++)
    if (live[k]) st = ir_rw_copy(&rw, k);
  grace_realloc(vm, live, n, 0);
  grace_realloc(vm, need, (size_t)(src->nval ? src->nval : 1), 0);
  if (st != GRACE_OK) { if (rw.dst) ir_rw_abort(&rw); return st; }
  return ir_rw_finish(&rw, out);
}

/* ---- the registry ---- */
static const struct { const char *name; ir_pass_fn fn; } passes[] = {
#define IR_PASS_ENTRY(name, fn) {#name, fn},
  IR_PASSES(IR_PASS_ENTRY)
#undef IR_PASS_ENTRY
};

/* The same pass over every sub-program of ir's regions (theirs too, recursively), each replaced by its result: a
 * sub-program is a whole program. hoist is left out there: it turns work into captured tensors, which a
 * sub-program cannot hold (it captures nothing). */
static grace_status pass_subs(grace_ir *ir, const char *name, ir_pass_fn fn) {
  if (!strcmp(name, "hoist")) return GRACE_OK;
  for (int i = 0; i < ir->nsub; i++) {
    grace_ir *next = NULL;
    grace_status st = fn(ir->subs[i], &next);
    if (st == GRACE_OK) st = pass_subs(next, name, fn);
    if (st != GRACE_OK) { grace_ir_free(next); return st; }
    grace_ir_free(ir->subs[i]);
    ir->subs[i] = next;
  }
  return GRACE_OK;
}

grace_status grace_ir_pass(grace_ir *ir, const char *names, grace_ir **out) {
  if (!ir) return GRACE_EARG;
  if (!out) return grace_set_error(ir->vm, GRACE_EARG, "pass: a NULL argument");   /* names NULL: "default" */
  *out = NULL;
  const int npass = (int)(sizeof passes / sizeof *passes);
  char list[256];
  if (!names || !strcmp(names, "default")) {
    size_t k = 0;
    for (int i = 0; i < npass; i++) k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? "," : "", passes[i].name);
  } else
    snprintf(list, sizeof list, "%s", names);
  grace_ir *cur = ir;
  for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
    int i = 0;
    while (i < npass && strcmp(passes[i].name, tok)) i++;
    if (i == npass) {
      if (cur != ir) grace_ir_free(cur);
      return grace_set_error(ir->vm, GRACE_EARG, "pass: no pass named '%s'", tok);
    }
    grace_ir *next = NULL;
    grace_status st = passes[i].fn(cur, &next);
    if (cur != ir) grace_ir_free(cur);
    if (st == GRACE_OK) st = pass_subs(next, passes[i].name, passes[i].fn);
    if (st != GRACE_OK) { grace_ir_free(next); return st; }
    cur = next;
  }
  if (cur == ir) return grace_set_error(ir->vm, GRACE_EARG, "pass: no pass named in '%s'", names);
  *out = cur;
  return GRACE_OK;
}
