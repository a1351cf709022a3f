/* gpu_cond.c: regions (cond, while) lowered to CUDA conditional graph nodes, so that a program with data-dependent
 * control flow is captured as one CUDA graph and replays without the host reading the predicate (the other
 * lowering, the host branch of ir/ir_region.c, synchronizes for each decision and runs kernel by kernel).
 *
 * While gpu_graph.c captures a program, the group executor hands each region instruction here instead of to the
 * IR's host-branch execution:
 *   cond:  a kernel reads the 0-d predicate and sets the node's handle; an IF node with two bodies follows, each
 *          body the captured launches of one branch's sub-program, which ends by copying its results into result
 *          tensors made before the node (both branches write the same addresses, so what follows reads one place);
 *   while: the state is copied into state tensors made before the node; the cond sub-program runs and sets the
 *          handle; a WHILE node's body runs the body sub-program on the state, copies the next state over it (through
 *          clones where a next value is itself a state tensor, so one copy cannot clobber another's source), and
 *          runs the cond sub-program again to set the handle for the next round. With max_iters the kernel setting
 *          the handle counts iterations in a device word and stops the loop past the bound, marking the word; the
 *          word comes back after the replay with the index checks' flags (gpu_graph_defer_loop), and the next wait
 *          for the device raises the eager loop's error.
 * Sub-programs run through their own plans (their fused kernels), captured like the rest. Kernels are compiled and
 * matmuls tuned outside captures: a sub-program the host branch of the first calls never ran (the branch not taken,
 * the body of a loop that ran 0 times) runs once, its results dropped, right after (gpu_cond_warm). Which programs can take
 * this lowering, and why not, is gpu_cond_available's answer; the measured choice between it (a graph) and the
 * host branch (eager launches) is the graph strategy measurement of gpu_graph.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/cg_cond.h"
#include "cuda/cuda_cond.h"
#include "gpu/gpu_exec.h"
#include "gpu/gpu_graph.h"
#include "ir/ir_exec.h"

void gpu_region_why(const grace_ir *ir, int pred, char *why, size_t n) {
  for (int i = 0; i < ir->ninst && !why[0]; i++) {
    const ir_inst *k = &ir->insts[i];
    if (!ir_is_region(k->op)) continue;
    const char *op = k->op == IR_OP_COND ? "cond" : "while_loop";
    if (pred && k->op == IR_OP_WHILE)
      snprintf(why, n, "while_loop cannot be predicated (a predicate skips a body once; it cannot repeat it)");
    if (ir_region_random(ir, i))
      snprintf(why, n, "%s draws random numbers (the generator's offset would depend on what the device decides)", op);
    for (int r = 0; r < k->nout && !why[0]; r++)   /* results live at device addresses the bodies write */
      if (ir->vals[k->first_result + r].type.device != GRACE_CUDA)
        snprintf(why, n, "%s result %d is a host value", op, r + 1);
    for (int j = 0; j < k->nin && !why[0]; j++) {   /* host numbers are read from the graph's table; tensors not */
      const ir_type *t = &ir->vals[ir->args[k->first_arg + j]].type;
      if (t->device != GRACE_CUDA && t->ndim > 0) snprintf(why, n, "%s takes a host tensor (argument %d)", op, j + 1);
    }
    for (int j = 0; j < 2 && !why[0]; j++) {
      const grace_ir *sub = ir->subs[k->sub + j];
      if (ir_exec_device(sub) != GRACE_CUDA) snprintf(why, n, "a sub-program of %s runs on the CPU", op);
      else gpu_region_why(sub, pred, why, n);
    }
  }
}

/* The kernel that sets a handle (compiled and linked once, then found in the module cache). */
static grace_status setter(cuda_ctx *c, CUfunction *f) {
  cuda_module *m = NULL;
  grace_status st = cuda_module_get_linked(c, cg_cond_source(), &m);
  return st == GRACE_OK ? cuda_module_function(c, m, CG_COND_KERNEL, f) : st;
}

int gpu_cond_available(grace_ir *ir, char *why, size_t n) {
  grace_vm *vm = ir->vm;
  why[0] = 0;
  const char *env = getenv("GRACE_COND_NODES");
  cuda_ctx *c = gpu_ctx(vm);
  if (env && !strcmp(env, "0")) snprintf(why, n, "conditional nodes are off (GRACE_COND_NODES=0)");
  else if (!c) snprintf(why, n, "no CUDA device");
  else if (cuda_cond_supported(c, why, n)) {
    const char *lw = cuda_link_why(c);
    if (lw) snprintf(why, n, "the predicate kernel cannot be linked: %s", lw);
  }
  if (!why[0]) gpu_region_why(ir, 0, why, n);
  CUfunction f = NULL;
  if (!why[0] && setter(c, &f) != GRACE_OK)   /* compiled now, outside any capture */
    snprintf(why, n, "the predicate kernel: %.200s", vm->err);
  return !why[0];
}

/* sub's launches, captured where the stream captures to; host numbers among in[] may be table values of the graph. */
static grace_status run_sub(grace_ir *sub, int nin, grace_tensor *const *in, int nout, grace_tensor **out) {
  sub->host_numbers_lifted = 1;
  grace_status st = ir_exec_sub(sub, nin, in, nout, out);
  sub->host_numbers_lifted = 0;
  return st;
}

/* Launches the kernel that sets h from 0-d device value v (counting a bounded loop's iterations at count, 0: none). */
static grace_status set_handle(grace_vm *vm, cuda_ctx *c, const grace_tensor *v, CUgraphConditionalHandle h,
                               CUdeviceptr count, int64_t max) {
  if (!v || v->ndim != 0 || v->storage->device != GRACE_CUDA)
    return vm_err(vm, GRACE_EUNSUPPORTED, "conditional node: the predicate is not a 0-d device value");
  CUfunction f = NULL;
  grace_status st = setter(c, &f);
  if (st != GRACE_OK) return st;
  uint64_t w[CG_COND_WORDS];
  cg_cond_pack(w, gpu_ptr(v), v->dtype, h, count, max);
  return cuda_launch(c, f, (unsigned[]){1, 1, 1}, (unsigned[]){1, 1, 1}, 0, w, sizeof w);
}

static grace_status copy_into(grace_vm *vm, grace_tensor *dst, grace_tensor *src) {
  return gpu_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){dst, src}, &(grace_attrs){0}, 0, NULL);
}

grace_status gpu_region_fresh(grace_ir *ir, int32_t v0, int n, grace_tensor **out) {
  for (int j = 0; j < n; j++) out[j] = NULL;
  for (int j = 0; j < n; j++) {
    const ir_type *t = &ir->vals[v0 + j].type;
    if (!(out[j] = vm_tensor_new(ir->vm, "cond", t->dtype, GRACE_CUDA, t->ndim, t->sizes))) {
      for (int k = 0; k < j; k++) { grace_tensor_release(out[k]); out[k] = NULL; }
      return ir->vm->status;
    }
  }
  return GRACE_OK;
}

static void release_all(grace_tensor **t, int n) {
  for (int j = 0; j < n; j++) { grace_tensor_release(t[j]); t[j] = NULL; }
}

grace_status gpu_region_body(grace_ir *sub, int nin, grace_tensor *const *in, int nout, grace_tensor *const *dst) {
  grace_tensor *tmp[64] = {0};
  if (nout > 64) return vm_err(sub->vm, GRACE_EINTERNAL, "region: too many results");
  grace_status st = run_sub(sub, nin, in, nout, tmp);
  for (int j = 0; j < nout && st == GRACE_OK; j++) st = copy_into(sub->vm, dst[j], tmp[j]);
  release_all(tmp, nout);
  return st;
}

/* One body of a cond: sub's launches captured into body, its results copied into dst. */
static grace_status cond_body(cuda_ctx *c, CUgraph body, grace_ir *sub, int nin, grace_tensor *const *in, int nout,
                              grace_tensor *const *dst) {
  cuda_cond_saved sv;
  grace_status st = cuda_cond_body_begin(c, body, &sv);
  if (st != GRACE_OK) return st;
  return cuda_cond_body_end(c, &sv, gpu_region_body(sub, nin, in, nout, dst));
}

static grace_status lower_cond(grace_ir *ir, const ir_inst *k, grace_tensor *const *in, grace_tensor **res) {
  grace_vm *vm = ir->vm;
  cuda_ctx *c = gpu_ctx(vm);
  CUgraphConditionalHandle h = 0;
  CUgraph bodies[2] = {0};
  grace_status st = gpu_region_fresh(ir, k->first_result, k->nout, res);
  if (st == GRACE_OK) st = cuda_cond_handle(c, &h);
  if (st == GRACE_OK) st = set_handle(vm, c, in[0], h, 0, 0);
  if (st == GRACE_OK) st = cuda_cond_node(c, h, CU_GRAPH_COND_TYPE_IF, 2, bodies);
  if (st == GRACE_OK) gpu_graph_cond_added(vm);
  for (int b = 0; b < 2 && st == GRACE_OK; b++)
    st = cond_body(c, bodies[b], ir->subs[k->sub + b], k->nin - 1, in + 1, k->nout, res);
  return st;
}

/* The body of a while: next = body(state, inv), copied over the state, then the handle set from cond(state, inv). */
static grace_status while_body(grace_ir *ir, const ir_inst *k, grace_tensor *const *cur, CUgraphConditionalHandle h,
                               CUdeviceptr count) {
  grace_vm *vm = ir->vm;
  cuda_ctx *c = gpu_ctx(vm);
  grace_ir *cond = ir->subs[k->sub], *body = ir->subs[k->sub + 1];
  int n = k->nin, ns = k->nout;
  grace_tensor *next[64] = {0}, *p = NULL;
  grace_status st = run_sub(body, n, cur, ns, next);
  for (int j = 0; j < ns && st == GRACE_OK; j++) {   /* a next value that is a state tensor: cloned before any copy */
    int shared = 0;
    for (int s = 0; s < ns; s++) shared |= next[j]->storage == cur[s]->storage;
    grace_tensor *cl = NULL;
    if (shared && (st = gpu_run(vm, GRACE_OP_CLONE, 1, &next[j], &(grace_attrs){0}, 1, &cl)) == GRACE_OK) {
      grace_tensor_release(next[j]);
      next[j] = cl;
    }
  }
  for (int j = 0; j < ns && st == GRACE_OK; j++) st = copy_into(vm, cur[j], next[j]);
  release_all(next, ns);
  if (st == GRACE_OK) st = run_sub(cond, n, cur, 1, &p);
  if (st == GRACE_OK) st = set_handle(vm, c, p, h, count, k->attrs.i0);
  grace_tensor_release(p);
  return st;
}

/* A bounded loop's iteration count: zeroed in the graph before the loop, read after each replay (the graph owns it). */
static grace_status loop_counter(grace_vm *vm, cuda_ctx *c, int64_t max_iters, CUdeviceptr *count) {
  *count = 0;
  if (max_iters <= 0) return GRACE_OK;
  grace_status st = cuda_malloc(c, sizeof(int64_t), count);
  if (st == GRACE_OK) st = cuda_memset(c, *count, 0, sizeof(int64_t));
  if (st == GRACE_OK) st = gpu_graph_defer_loop(vm, *count, max_iters);
  if (st != GRACE_OK && *count) { cuda_release(c, *count, sizeof(int64_t)); *count = 0; }
  return st;
}

static grace_status lower_while(grace_ir *ir, const ir_inst *k, grace_tensor *const *in, grace_tensor **res) {
  grace_vm *vm = ir->vm;
  cuda_ctx *c = gpu_ctx(vm);
  int n = k->nin, ns = k->nout;
  grace_tensor *cur[64], *p = NULL;
  CUgraphConditionalHandle h = 0;
  CUgraph body = NULL;
  CUdeviceptr count = 0;
  grace_status st = gpu_region_fresh(ir, k->first_result, ns, res);   /* the state lives here, and is the result */
  if (st == GRACE_OK) st = loop_counter(vm, c, k->attrs.i0, &count);
  for (int j = 0; j < ns && st == GRACE_OK; j++) st = copy_into(vm, res[j], in[j]);
  for (int j = 0; j < n; j++) cur[j] = j < ns ? res[j] : in[j];
  if (st == GRACE_OK) st = run_sub(ir->subs[k->sub], n, cur, 1, &p);
  if (st == GRACE_OK) st = cuda_cond_handle(c, &h);
  if (st == GRACE_OK) st = set_handle(vm, c, p, h, count, k->attrs.i0);
  grace_tensor_release(p);
  if (st == GRACE_OK) st = cuda_cond_node(c, h, CU_GRAPH_COND_TYPE_WHILE, 1, &body);
  if (st == GRACE_OK) gpu_graph_cond_added(vm);
  if (st == GRACE_OK) {
    cuda_cond_saved sv;
    if ((st = cuda_cond_body_begin(c, body, &sv)) == GRACE_OK)
      st = cuda_cond_body_end(c, &sv, while_body(ir, k, cur, h, count));
  }
  return st;
}

void gpu_cond_warm(grace_ir *ir, int i, grace_tensor **val) {
  const ir_inst *k = &ir->insts[i];
  grace_tensor *in[64], *out[64];
  if (k->nin > 64 || k->nout > 64) return;
  for (int j = 0; j < k->nin; j++) in[j] = val[ir->args[k->first_arg + j]];
  if (k->op == IR_OP_WHILE)   /* the body on the final state (the cond ran at least once) */
    for (int j = 0; j < k->nout; j++) in[j] = val[k->first_result + j];
  for (int b = 0; b < 2; b++) {
    grace_ir *sub = ir->subs[k->sub + b];
    if (sub->exec || (k->op == IR_OP_WHILE && b == 0)) continue;
    int nin = k->op == IR_OP_COND ? k->nin - 1 : k->nin, nout = k->nout;
    /* its results are dropped, and so is an error (an index the untaken branch would never have read) */
    if (ir_exec_sub(sub, nin, k->op == IR_OP_COND ? in + 1 : in, nout, out) == GRACE_OK) release_all(out, nout);
  }
}

grace_status gpu_cond_lower(grace_ir *ir, int i, grace_tensor **val) {
  const ir_inst *k = &ir->insts[i];
  grace_tensor *in[64];
  if (k->nin > 64 || k->nout > 64) return vm_err(ir->vm, GRACE_EINTERNAL, "conditional node: too many values");
  for (int j = 0; j < k->nin; j++) in[j] = val[ir->args[k->first_arg + j]];
  grace_tensor **res = &val[k->first_result];
  grace_status st = k->op == IR_OP_COND ? lower_cond(ir, k, in, res) : lower_while(ir, k, in, res);
  if (st != GRACE_OK) release_all(res, k->nout);
  return st;
}
