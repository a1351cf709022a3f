/* cpu_interp.c: the CPU backend's executor of an IR program: the reference every compiled form is checked
 * against, and the executor for compiled functions on the host. Groups of the fusion analysis that qualify run fused
 * (cpu_fused.c: pointwise loops, matmuls with their epilogues on packed weights kept with the IR, row
 * reductions), everything else one op at a time. Sizes come from the tensors of each call, so a program with symbolic
 * sizes runs as any other once the call's sizes are bound (ir_sym_bind). Inputs are checked against their declared types, captured
 * tensors against their captured version; intermediates are released after their last use. */
#include <stdio.h>
#include <string.h>
#include "ir/ir.h"
#include "ir/ir_fuse.h"
#include "ir/ir_pass.h"
#include "ir/ir_sym.h"
#include "cpu/cpu_fused.h"
#include "base/base.h"
#include "ir/ir_exec.h"

/* The plan: groups of the fusion analysis whose members are used outside the group only through their last
 * member run together at that member: pointwise groups as one fused loop, a matmul with its pointwise epilogue
 * as one GEMM updating each finished block in place (a horizontal matmul group as one such group per matmul),
 * row groups as one pass per row. plan_members holds, per group, a count tagged with its kind (PLAN_MATMUL,
 * PLAN_ROW; neither: pointwise), then the members. Made once per IR; without it every instruction runs alone,
 * which is always right. */
enum { PLAN_MATMUL = 1 << 24, PLAN_ROW = 1 << 25, PLAN_COUNT = PLAN_MATMUL - 1 };

/* The right operand's base (through views) is a captured tensor: its packed panels can be kept. */
static int const_operand(const grace_ir *ir, int32_t v) {
  v = ir_view_base(ir, v);
  return v >= 0 && ir->insts[ir->vals[v].inst].op == IR_OP_CONST;
}

/* Whether instruction i gives one result that is read: a max/min over a dim also gives indices, fine while
 * nothing reads them. */
static int one_result(const grace_ir *ir, const int32_t *uses, int i) {
  const ir_inst *k = &ir->insts[i];
  return k->nout == 1 || (k->nout == 2 && (k->op == GRACE_OP_MAX || k->op == GRACE_OP_MIN) && uses[k->first_result + 1] == 0);
}

/* Whether members m[0..n) can run as one group at m[n-1]: each has one result that is read, and every result
 * but the last is read only inside the group (not returned, written back or read later, not even through a
 * view). */
static int closed_group(const grace_ir *ir, const int32_t *uses, const int32_t *m, int n) {
  if (!one_result(ir, uses, m[n - 1])) return 0;
  for (int j = 0; j < n - 1; j++) {
    if (!one_result(ir, uses, m[j])) return 0;
    int32_t v = ir->insts[m[j]].first_result, inside = 0;
    for (int j2 = 0; j2 < n; j2++) {
      const ir_inst *u = &ir->insts[m[j2]];
      for (int a = 0; a < u->nin; a++) inside += ir->args[u->first_arg + a] == v;
    }
    if (inside != uses[v]) return 0;
  }
  return 1;
}

/* Records group m[0..n) (kind tag) run at its last member. */
static void plan_group(grace_ir *ir, int *used, const int32_t *m, int n, int tag) {
  int root = m[n - 1];
  ir->plan[root] = -2 - *used;
  ir->plan_members[(*used)++] = n | tag;
  for (int j = 0; j < n; j++) {
    ir->plan_members[(*used)++] = m[j];
    if (m[j] != root) ir->plan[m[j]] = root;
  }
}

/* A matmul group: each matmul with the pointwise members that read it (directly or through one another),
 * planned when every pointwise member hangs off exactly one matmul and the fused loop runs it. A lone matmul
 * is planned only where its right operand is a captured matrix (the packed panels are kept). sub is scratch. */
static void plan_matmul(grace_ir *ir, const int32_t *uses, int *used, const int32_t *m, int n, int32_t *owner,
                        int32_t *sub) {
  for (int j = 0; j < n; j++) {
    const ir_inst *k = &ir->insts[m[j]];
    owner[j] = -1;
    if (k->op == GRACE_OP_MATMUL) { owner[j] = j; continue; }
    if (!cpu_fx_supported(ir, k)) return;
    for (int a = 0; a < k->nin; a++) {
      int32_t v = ir->args[k->first_arg + a];
      for (int i = 0; i < j; i++)
        if (v >= 0 && ir->insts[m[i]].first_result == v) {
          if (owner[j] >= 0 && owner[j] != owner[i]) return;   /* reads two matmuls */
          owner[j] = owner[i];
        }
    }
    if (owner[j] < 0) return;   /* reads no matmul of the group (a bias computed in it): left alone */
  }
  for (int j = 0; j < n; j++) {
    if (owner[j] != j) continue;
    int ns = 0;
    for (int i = j; i < n; i++) if (owner[i] == j) sub[ns++] = m[i];
    const ir_inst *k = &ir->insts[m[j]];
    if (ns == 1 && !const_operand(ir, ir->args[k->first_arg + 1])) continue;
    if (ir->vals[k->first_result].type.dtype != GRACE_FLOAT32 || !closed_group(ir, uses, sub, ns)) continue;
    plan_group(ir, used, sub, ns, PLAN_MATMUL);
  }
}

/* A row group runs fused when its reductions are sums, means, maxima or minima over the last dim (a max/min's
 * indices unread) and its other members are pointwise ops the fused loop runs; with one member it is a lone
 * reduction, which eager's kernel runs as well. */
static int row_group_ok(const grace_ir *ir, const int32_t *uses, const int32_t *m, int n) {
  if (n < 2) return 0;
  int nred = 0;
  for (int j = 0; j < n; j++) {
    const ir_inst *k = &ir->insts[m[j]];
    if (k->op < GRACE_NOPS && grace_op_kind((grace_op)k->op) == GRACE_KIND_REDUCE) {
      const ir_type *x = &ir->vals[ir->args[k->first_arg]].type;
      int64_t d = k->attrs.ndims == 1 ? k->attrs.dims[0] : -100;
      int op = k->op;
      if ((op != GRACE_OP_SUM && op != GRACE_OP_MEAN && op != GRACE_OP_MAX && op != GRACE_OP_MIN) ||
          (d != -1 && d != x->ndim - 1) || (k->nout == 2 && uses[k->first_result + 1] != 0) || k->nout > 2)
        return 0;
      nred++;
    } else if (!cpu_fx_supported(ir, k)) return 0;
  }
  return nred > 0;
}

static void make_plan(grace_ir *ir) {
  grace_vm *vm = ir->vm;
  ir->planned = 1;
  if (!ir->ninst) return;
  ir->plan = grace_realloc(vm, NULL, 0, sizeof *ir->plan * (size_t)ir->ninst);
  if (!ir->plan) return;
  for (int k = 0; k < ir->ninst; k++) ir->plan[k] = -1;
  ir_fusion f;
  int32_t *uses = ir_count_uses(ir);
  size_t sbytes = sizeof(int32_t) * (size_t)ir->ninst * 2;
  int32_t *scratch = grace_realloc(vm, NULL, 0, sbytes);
  if (!uses || !scratch || ir_fuse(ir, &f) != GRACE_OK) {
    if (uses) grace_realloc(vm, uses, sizeof *uses * (size_t)ir->nval, 0);
    if (scratch) grace_realloc(vm, scratch, sbytes, 0);
    return;
  }
  int cap = 0;
  for (int g = 0; g < f.ngroup; g++) cap += 2 * f.groups[g].n;   /* a horizontal group may split into n */
  ir->plan_members = grace_realloc(vm, NULL, 0, sizeof *ir->plan_members * (size_t)(cap ? cap : 1));
  ir->nplan_members = cap ? cap : 1;
  int used = 0;
  for (int g = 0; ir->plan_members && g < f.ngroup; g++) {
    const ir_fuse_group *gr = &f.groups[g];
    const int32_t *m = &f.members[gr->first];
    if (gr->kind == IR_FUSE_MATMUL) plan_matmul(ir, uses, &used, m, gr->n, scratch, scratch + ir->ninst);
    else if (gr->kind == IR_FUSE_POINTWISE && gr->n >= 2 && closed_group(ir, uses, m, gr->n))
      plan_group(ir, &used, m, gr->n, 0);
    else if (gr->kind == IR_FUSE_ROW && row_group_ok(ir, uses, m, gr->n) && closed_group(ir, uses, m, gr->n))
      plan_group(ir, &used, m, gr->n, PLAN_ROW);
  }
  ir_fuse_free(ir, &f);
  grace_realloc(vm, uses, sizeof *uses * (size_t)ir->nval, 0);
  grace_realloc(vm, scratch, sbytes, 0);
}

/* ---- packed right operands of matmuls reading a captured matrix, kept with the IR (ir->exec) ----
 * An entry is reused while the operand is the same view of the same storage at the same version; a captured
 * tensor written since (its version moved) is packed again. Weights beyond PACK_BUDGET bytes in all are not
 * kept (they are packed per call, as eager does). */
enum { PACK_BUDGET = 256 << 20 };

typedef struct cpu_pack_entry {
  int32_t inst;
  const void *data;
  grace_tensor *ref;              /* the operand, retained: its storage cannot be freed and its address reused */
  uint64_t version;
  int64_t sizes[2], strides[2];
  cpu_mm_pack pk;
} cpu_pack_entry;

typedef struct cpu_exec {
  cpu_pack_entry *e;
  int n, cap;
  size_t bytes;
} cpu_exec;

static void cpu_exec_free(grace_ir *ir) {
  cpu_exec *x = ir->exec;
  if (!x) return;
  for (int i = 0; i < x->n; i++) { cpu_mm_pack_free(ir->vm, &x->e[i].pk); grace_tensor_release(x->e[i].ref); }
  if (x->e) grace_realloc(ir->vm, x->e, sizeof *x->e * (size_t)x->cap, 0);
  grace_realloc(ir->vm, x, sizeof *x, 0);
  ir->exec = NULL;
}

/* The kept panels for matmul instruction k reading b, packed now if missing or stale; NULL when not kept. */
static const cpu_mm_pack *kept_pack(grace_ir *ir, int k, const grace_tensor *b) {
  grace_vm *vm = ir->vm;
  if (b->ndim != 2 || b->dtype != GRACE_FLOAT32 || b->sizes[1] <= 1) return NULL;
  if (ir->exec && ir->exec_free != cpu_exec_free) return NULL;   /* another executor owns it */
  if (!ir->exec) {
    cpu_exec *x = grace_realloc(vm, NULL, 0, sizeof *x);
    if (!x) return NULL;
    memset(x, 0, sizeof *x);
    ir->exec = x;
    ir->exec_free = cpu_exec_free;
  }
  cpu_exec *x = ir->exec;
  cpu_pack_entry *e = NULL;
  for (int i = 0; i < x->n && !e; i++) if (x->e[i].inst == k) e = &x->e[i];
  const void *data = vm_ptr(b);
  if (e && e->ref && e->data == data && e->ref->storage == b->storage && e->version == b->storage->version &&
      !memcmp(e->sizes, b->sizes, sizeof e->sizes) && !memcmp(e->strides, b->strides, sizeof e->strides))
    return &e->pk;
  if (e) {
    x->bytes -= e->pk.bytes;
    cpu_mm_pack_free(vm, &e->pk);
    grace_tensor_release(e->ref);
    e->ref = NULL;
  }
  else {
    size_t need = (size_t)b->sizes[0] * (size_t)b->sizes[1] * sizeof(float);
    if (x->bytes + need > PACK_BUDGET) return NULL;
    if (x->n == x->cap) {
      int nc = x->cap ? 2 * x->cap : 8;
      cpu_pack_entry *ne = grace_realloc(vm, x->e, sizeof *x->e * (size_t)x->cap, sizeof *x->e * (size_t)nc);
      if (!ne) return NULL;
      x->e = ne;
      x->cap = nc;
    }
    e = &x->e[x->n++];
    memset(e, 0, sizeof *e);
    e->inst = k;
  }
  if (cpu_mm_pack_b(vm, b, &e->pk) != GRACE_OK) return NULL;
  x->bytes += e->pk.bytes;
  e->data = data;
  grace_tensor_retain((grace_tensor *)b);
  e->ref = (grace_tensor *)b;
  e->version = b->storage->version;
  memcpy(e->sizes, b->sizes, sizeof e->sizes);
  memcpy(e->strides, b->strides, sizeof e->strides);
  return &e->pk;
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

grace_status cpu_ir_run(grace_ir *ir, int nin, grace_tensor *const *in, int nout, grace_tensor **out) {
  grace_vm *vm = ir->vm;
  if (ir->nsyms) {   /* symbolic sizes: this call's, checked against the program's bounds and relations */
    int64_t small[64], *vals = ir->nsyms < 64 ? small : vm_alloc(vm, sizeof *vals * (size_t)(ir->nsyms + 1));
    if (!vals) return vm_err(vm, GRACE_ENOMEM, "run: out of host memory");
    grace_status bs = ir_sym_bind(ir, nin, in, vals);
    if (vals != small) vm_free(vm, vals, sizeof *vals * (size_t)(ir->nsyms + 1));
    if (bs != GRACE_OK) return bs;
  }
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
      int n = ir->plan_members[-2 - p] & PLAN_COUNT, mm = ir->plan_members[-2 - p] & PLAN_MATMUL;
      int row = ir->plan_members[-2 - p] & PLAN_ROW;
      const ir_inst *k = &ir->insts[i];
      if (mm) {
        const ir_inst *mk = &ir->insts[m[0]];
        const grace_tensor *b = val[ir->args[mk->first_arg + 1]];
        const cpu_mm_pack *pk = b && const_operand(ir, ir->args[mk->first_arg + 1]) ? kept_pack(ir, m[0], b) : NULL;
        st = cpu_fused_matmul_run(vm, ir, m, n, val, pk, k->first_result, &val[k->first_result]);
      } else if (row)
        st = cpu_fused_row_run(vm, ir, m, n, val, k->first_result, &val[k->first_result]);
      else
        st = cpu_fused_run(vm, ir, m, n, val, k->first_result, &val[k->first_result]);
      if (st == GRACE_EUNSUPPORTED)
        for (int j = 0; j < n; j++) {
          if ((st = ir_exec_inst(ir, m[j], in, val)) != GRACE_OK) { at = m[j]; break; }
        }
      if (st == GRACE_OK) for (int j = 0; j < n; j++) release_after(ir, m[j], i, last, val);
    } else {
      st = ir_exec_inst(ir, i, in, val);
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
  st = ir_exec_write_back(ir, val, st);
  if (st == GRACE_OK)
    for (int i = 0; i < nout; i++) { out[i] = val[ir->outputs[i]]; grace_tensor_retain(out[i]); }
  for (int v = 0; v < ir->nval; v++) grace_tensor_release(val[v]);
  vm_free(vm, val, vbytes);
  vm_free(vm, last, lbytes);
  return st;
}

