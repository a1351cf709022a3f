/* vm_interp.c: runs an IR function on the CPU one op at a time through grace_run: the reference every
 * compiled form is checked against, and the executor for compiled functions until fused code exists.
 * Inputs are checked against their declared types, captured tensors against their captured version;
 * intermediates are released after their last use. */
#include <stdio.h>
#include "ir/ir.h"
#include "ir/ir_fuse.h"
#include "ir/ir_pass.h"
#include "vm/cpu_fused.h"
#include "vm/vm.h"
#include "vm/vm_interp.h"
#include "vm/gpu_exec.h"

static int type_matches(const ir_type *t, const grace_tensor *x) {
  if (t->dtype != x->dtype || t->ndim != x->ndim || t->device != x->storage->device) return 0;
  for (int d = 0; d < t->ndim; d++)
    if (t->sizes[d] != x->sizes[d]) return 0;
  return 1;
}

static grace_status input_error(grace_vm *vm, const char *what, int index, const ir_type *t, const grace_tensor *x) {
  char want[160];
  return vm_err(vm, GRACE_ESHAPE, "run: %s %d must be %s, got %s %s", what, index + vm->index_base,
                ir_type_str(t, want, sizeof want), grace_dtype_name(x->dtype), VM_SHAPE(x));
}

/* The plan: pointwise groups of the fusion analysis whose members are used outside the group only through
 * their last member run as one fused loop at that member. Made once per IR; without it every instruction
 * runs alone, which is always right. */
static void make_plan(grace_ir *ir) {
  grace_vm *vm = ir->vm;
  ir->planned = 1;
  if (!ir->ninst) return;
  ir->plan = grace_realloc(vm, NULL, 0, sizeof *ir->plan * (size_t)ir->ninst);
  if (!ir->plan) return;
  for (int k = 0; k < ir->ninst; k++) ir->plan[k] = -1;
  ir_fusion f;
  int32_t *uses = ir_count_uses(ir);
  if (!uses || ir_fuse(ir, &f) != GRACE_OK) { if (uses) grace_realloc(vm, uses, sizeof *uses * (size_t)ir->nval, 0); return; }
  int cap = 0;
  for (int g = 0; g < f.ngroup; g++) cap += f.groups[g].n + 1;
  ir->plan_members = grace_realloc(vm, NULL, 0, sizeof *ir->plan_members * (size_t)(cap ? cap : 1));
  ir->nplan_members = cap ? cap : 1;
  int used = 0;
  for (int g = 0; ir->plan_members && g < f.ngroup; g++) {
    const ir_fuse_group *gr = &f.groups[g];
    if (gr->kind != IR_FUSE_POINTWISE || gr->n < 2) continue;
    const int32_t *m = &f.members[gr->first];
    int root = m[gr->n - 1], ok = ir->insts[root].nout == 1;
    /* every other member's value is read only inside the group (not returned, written back or read later) */
    for (int j = 0; j < gr->n - 1 && ok; j++) {
      int32_t v = ir->insts[m[j]].first_result, inside = 0;
      ok = ir->insts[m[j]].nout == 1;
      for (int j2 = 0; j2 < gr->n && ok; j2++) {
        const ir_inst *u = &ir->insts[m[j2]];
        for (int a = 0; a < u->nin; a++) inside += ir->args[u->first_arg + a] == v;
      }
      ok = ok && inside == uses[v];
    }
    if (!ok) continue;
    ir->plan[root] = -2 - used;
    ir->plan_members[used++] = gr->n;
    for (int j = 0; j < gr->n; j++) {
      ir->plan_members[used++] = m[j];
      if (m[j] != root) ir->plan[m[j]] = root;
    }
  }
  ir_fuse_free(ir, &f);
  grace_realloc(vm, uses, sizeof *uses * (size_t)ir->nval, 0);
}

/* Runs instruction k alone into val[]. */
grace_status vm_ir_run_inst(grace_ir *ir, int i, grace_tensor *const *in, grace_tensor **val) {
  grace_vm *vm = ir->vm;
  const ir_inst *k = &ir->insts[i];
  const ir_type *t0 = &ir->vals[k->first_result].type;
  grace_tensor **res = &val[k->first_result];
  grace_status st = GRACE_OK;
  switch (k->op) {
  case IR_OP_INPUT: {
    grace_tensor *x = in[k->input_index];
    if (!x || !type_matches(t0, x))
      return x ? input_error(vm, "input", k->input_index, t0, x)
               : vm_err(vm, GRACE_EARG, "run: input %d is missing", k->input_index + vm->index_base);
    grace_tensor_retain(x);
    *res = x;
    return GRACE_OK;
  }
  case IR_OP_SCALAR: {
    grace_tensor *x = in[ir->ninputs + k->input_index];
    if (!x || x->ndim != 0) return vm_err(vm, GRACE_EARG, "run: scalar input %d must be a 0-d tensor", k->input_index + vm->index_base);
    if (x->dtype == t0->dtype) { grace_tensor_retain(x); *res = x; return GRACE_OK; }
    grace_attrs a = {.has_dtype = 1, .dtype = t0->dtype};
    return grace_run(vm, GRACE_OP_CAST, 1, &x, &a, 1, res);
  }
  case IR_OP_CONST:
    grace_tensor_retain(ir->consts[k->input_index].t);
    *res = ir->consts[k->input_index].t;
    return GRACE_OK;
  case IR_OP_LITERAL:
    return t0->dtype == GRACE_INT64 ? grace_tensor_scalar_int(vm, k->iliteral, res) : grace_tensor_scalar(vm, k->literal, 0, res);
  default: {
    grace_tensor *args[64];
    for (int j = 0; j < k->nin && j < 64; j++) {
      int32_t v = ir->args[k->first_arg + j];
      args[j] = v < 0 ? NULL : val[v];
    }
    if (grace_op_kind((grace_op)k->op) == GRACE_KIND_INPLACE) {
      /* functional form: the result is an updated copy; the caller writes it back where it belongs */
      grace_tensor *copy = NULL;
      st = grace_run(vm, GRACE_OP_CLONE, 1, &args[0], NULL, 1, &copy);
      if (st != GRACE_OK) return st;
      args[0] = copy;
      st = grace_run(vm, (grace_op)k->op, k->nin, args, &k->attrs, 0, NULL);
      if (st == GRACE_OK) *res = copy;
      else grace_tensor_release(copy);
      return st;
    }
    return grace_run(vm, (grace_op)k->op, k->nin, args, &k->attrs, k->nout, res);
  }
  }
}

/* After instruction (or fused group) at i: values whose last use was i are released. */
static void release_after(const grace_ir *ir, int k, int i, const int32_t *last, grace_tensor **val) {
  const ir_inst *in = &ir->insts[k];
  for (int j = 0; j < in->nin; j++) {
    int32_t v = ir->args[in->first_arg + j];
    if (v >= 0 && last[v] == i) { grace_tensor_release(val[v]); val[v] = NULL; }
  }
  for (int r = 0; r < in->nout; r++)
    if (last[in->first_result + r] == i) { grace_tensor_release(val[in->first_result + r]); val[in->first_result + r] = NULL; }
}

grace_status vm_ir_check_call(grace_ir *ir, int nin, int nout) {
  grace_vm *vm = ir->vm;
  if (nin != ir->ninputs + ir->nscalars)
    return vm_err(vm, GRACE_EARG, "run: '%s' takes %d tensor inputs and %d scalars, got %d values", ir->name, ir->ninputs,
                  ir->nscalars, nin);
  if (nout > ir->nout) return vm_err(vm, GRACE_EARG, "run: '%s' has %d outputs, %d requested", ir->name, ir->nout, nout);
  for (int i = 0; i < ir->nconst; i++) {
    const ir_const *c = &ir->consts[i];
    if (!c->t) return vm_err(vm, GRACE_EARG, "run: captured tensor %d of '%s' is not bound", i, ir->name);
    if (c->t->storage->version != c->version)
      return vm_err(vm, GRACE_EARG, "run: captured tensor %d of '%s' was modified since it was captured (stale: version %llu, "
                    "now %llu)", i, ir->name, (unsigned long long)c->version, (unsigned long long)c->t->storage->version);
  }
  return GRACE_OK;
}

/* Whether the program runs on the device: its inputs or captures live there. */
static int on_device(const grace_ir *ir) {
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    if ((k->op == IR_OP_INPUT || k->op == IR_OP_CONST) && ir->vals[k->first_result].type.device == GRACE_CUDA) return 1;
  }
  return 0;
}

grace_status grace_ir_run(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out) {
  grace_vm *vm = ir->vm;
  for (int i = 0; i < nout; i++) out[i] = NULL;
  grace_status cs = vm_ir_check_call(ir, nin, nout);
  if (cs != GRACE_OK) return cs;
  if (on_device(ir)) return gpu_ir_run(ir, nin, in, nout, out);
  size_t vbytes = sizeof(grace_tensor *) * (size_t)ir->nval, lbytes = sizeof(int32_t) * (size_t)ir->nval;
  grace_tensor **val = vm_calloc(vm, vbytes);
  int32_t *last = vm_alloc(vm, lbytes);
  if (!val || !last) {
    vm_free(vm, val, vbytes); vm_free(vm, last, lbytes);
    return vm_err(vm, GRACE_ENOMEM, "run: out of host memory");
  }
  if (!ir->planned) make_plan(ir);
  /* last use of each value: outputs live to the end; a fused member's uses count at its group's run */
#define AT(i) (ir->plan && ir->plan[i] >= 0 ? ir->plan[i] : (i))
  for (int v = 0; v < ir->nval; v++) last[v] = AT(ir->vals[v].inst);
  for (int i = 0; i < ir->ninst; i++) {
    const ir_inst *k = &ir->insts[i];
    for (int j = 0; j < k->nin; j++) {
      int32_t a = ir->args[k->first_arg + j];
      if (a >= 0 && AT(i) > last[a]) last[a] = AT(i);
    }
  }
#undef AT
  for (int i = 0; i < ir->nout; i++) last[ir->outputs[i]] = ir->ninst;
  for (int i = 0; i < ir->nwrite; i++) last[ir->writes[i].value] = last[ir->writes[i].target] = ir->ninst;
  for (int v = 0; v < ir->nval; v++) if (ir->vals[v].root >= 0) last[v] = ir->ninst;   /* for a failed run */

  grace_status st = GRACE_OK;
  for (int i = 0; i < ir->ninst && st == GRACE_OK; i++) {
    int p = ir->plan ? ir->plan[i] : -1, at = i;
    if (p >= 0) continue;   /* runs with its group */
    if (p <= -2) {          /* a fused group: one pass, or its members one by one where it cannot fuse */
      const int32_t *m = &ir->plan_members[-2 - p + 1];
      int n = ir->plan_members[-2 - p];
      const ir_inst *k = &ir->insts[i];
      st = cpu_fused_run(vm, ir, m, n, val, k->first_result, &val[k->first_result]);
      if (st == GRACE_EUNSUPPORTED)
        for (int j = 0; j < n; j++) {
          if ((st = vm_ir_run_inst(ir, m[j], in, val)) != GRACE_OK) { at = m[j]; break; }
        }
      if (st == GRACE_OK) for (int j = 0; j < n; j++) release_after(ir, m[j], i, last, val);
    } else {
      st = vm_ir_run_inst(ir, i, in, val);
      if (st == GRACE_OK) release_after(ir, i, i, last, val);
    }
    if (st != GRACE_OK) {
      const ir_inst *k = &ir->insts[at];
      if (k->loc >= 0) {
        char msg[VM_ERRLEN];
        snprintf(msg, sizeof msg, "%s", vm->err);
        vm_err(vm, st, "%s (traced at %s)", msg, ir->locs[k->loc]);
      }
    }
  }
  st = vm_ir_write_back(ir, val, st);
  if (st == GRACE_OK)
    for (int i = 0; i < nout; i++) { out[i] = val[ir->outputs[i]]; grace_tensor_retain(out[i]); }
  for (int v = 0; v < ir->nval; v++) grace_tensor_release(val[v]);
  vm_free(vm, val, vbytes);
  vm_free(vm, last, lbytes);
  return st;
}

/* Writes back in-place updates; a captured tensor's new version is the one the IR expects next time. A run
 * that failed part way (st) writes what eager execution would have written before the failing op. */
grace_status vm_ir_write_back(grace_ir *ir, grace_tensor **val, grace_status st) {
  grace_vm *vm = ir->vm;
  grace_status failed = st;
  char msg[VM_ERRLEN];
  if (failed != GRACE_OK) snprintf(msg, sizeof msg, "%s", vm->err);
  for (int i = 0; i < ir->nwrite; i++) {
    int32_t target = ir->writes[i].target, value = ir->writes[i].value, bumps = ir->writes[i].bumps;
    if (failed != GRACE_OK) {   /* the latest version of target computed before the failure */
      value = -1;
      for (int v = 0; v < ir->nval; v++)
        if (ir->vals[v].root == target && val[v] && (value < 0 || v > value)) value = v;
      if (value < 0) continue;
      bumps = ir->vals[value].nwrites;
    }
    grace_tensor *dst = val[target], *src = val[value];
    if (!dst || !src || dst == src) continue;
    grace_status ws = grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){dst, src}, NULL, 0, NULL);
    if (ws == GRACE_OK) dst->storage->version += (uint64_t)(bumps > 0 ? bumps - 1 : 0);   /* as many as eager made */
    const ir_inst *k = &ir->insts[ir->vals[target].inst];
    if (ws == GRACE_OK && k->op == IR_OP_CONST) ir->consts[k->input_index].version = dst->storage->version;
    if (st == GRACE_OK) st = ws;
  }
  if (failed != GRACE_OK) vm_err(vm, failed, "%s", msg);
  return st;
}
