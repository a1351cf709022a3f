/* gpu_pred.c: cond regions lowered by predication, the third lowering beside conditional nodes (gpu_cond.c) and the
 * host branch (ir/ir_region.c). The graph's structure does not change: both bodies' kernels are captured straight
 * into it, one after the other, and each returns at entry unless the predicate picks its body. So a replay launches
 * every kernel of both bodies, and the ones of the body not taken end at once; what it saves against a conditional
 * node is the node (the costs of both are in docs/lua_api.md), so which is faster depends on the program, and the
 * launch measurement of gpu_graph.c decides.
 *
 * While gpu_graph.c captures a program with predication, the group executor hands each cond instruction here:
 *   1. the results are made before the bodies (fresh tensors both bodies write: what follows reads one place);
 *   2. a small kernel (codegen/cg_cond.c, grace_pred_set) turns the 0-d predicate into a 32-bit word: 1 then,
 *      2 else, 0 neither (a cond nested in a body not taken: it reads the enclosing word first, so a nested
 *      region's word is the conjunction of the enclosing decisions with its own);
 *   3. each body's sub-program runs with the word set on the CUDA context (cuda_pred_set) and the value it wants:
 *      every kernel launched meanwhile is generated predicated (codegen's pred flag: two parameters after its
 *      struct, the check at entry, cg_pred_enter) and so is the copy of each body result into the region's result
 *      (a kernel, never a driver copy: a body that returns its argument as it is still fills the result).
 * What cannot be skipped so refuses, and the capture fails with the reason (the measurement then drops this
 * lowering for the program, and the report says why): cuBLASLt's kernels (a library cannot read the word),
 * device-to-device driver copies, random numbers (the generator's offset would advance by both bodies), while loops
 * (a predicate skips a body once, it cannot repeat it). Predicated kernels are compiled when first launched:
 * gpu_pred_warm launches them once outside any capture, after the first host branch, with a word no body wants
 * (each returns at once); a layout first seen later compiles them in its capture (relaxed: drivers from CUDA 12.3
 * load modules there; an older one fails the capture, and the measurement keeps another lowering). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/cg_cond.h"
#include "gpu/gpu_exec.h"
#include "gpu/gpu_graph.h"
#include "ir/ir_exec.h"

static const char *const mode_names[] = {"host", "nodes", "pred"};

/* -1 auto (also for NULL or ""), a grace_region_lowering, or -2 for a name that is none of these. */
static int parse_mode(const char *e) {
  if (!e || !*e || !strcmp(e, "auto")) return -1;
  for (int m = 0; m < 3; m++) if (!strcmp(e, mode_names[m])) return m;
  return -2;
}

grace_status grace_set_regions(grace_vm *vm, const char *mode) {
  if (!vm) return GRACE_EARG;
  if (!mode) { vm->region_mode = 0; return GRACE_OK; }
  int m = parse_mode(mode);
  if (m == -2) return vm_err(vm, GRACE_EARG, "regions: unknown mode '%s' (auto, host, nodes or pred)", mode);
  vm->region_mode = m + 2;
  return GRACE_OK;
}

int gpu_region_mode(grace_vm *vm) {
  if (vm->region_mode) return vm->region_mode - 2;
  int m = parse_mode(getenv("GRACE_REGIONS"));
  return m == -2 ? -1 : m;
}

/* The word kernel (compiled once, then found in the module cache). */
static grace_status word_kernel(cuda_ctx *c, CUfunction *f) {
  cuda_module *m = NULL;
  grace_status st = cuda_module_get(c, cg_pred_source(), &m);
  return st == GRACE_OK ? cuda_module_function(c, m, CG_PRED_KERNEL, f) : st;
}

int gpu_pred_available(grace_ir *ir, char *why, size_t n) {
  grace_vm *vm = ir->vm;
  cuda_ctx *c = gpu_ctx(vm);
  why[0] = 0;
  if (!c) snprintf(why, n, "no CUDA device");
  else gpu_region_why(ir, 1, why, n);
  CUfunction f = NULL;
  if (!why[0] && word_kernel(c, &f) != GRACE_OK) snprintf(why, n, "the predicate word's kernel: %.200s", vm->err);
  return !why[0];
}

/* Launches the kernel that writes word from 0-d device value v and the enclosing word outer (0: none), which must
 * hold want. Not predicated itself: it must write 0 when the enclosing body is not taken. */
static grace_status set_word(grace_vm *vm, cuda_ctx *c, const grace_tensor *v, CUdeviceptr outer, unsigned want,
                             const grace_tensor *word) {
  if (!v || v->ndim != 0 || v->storage->device != GRACE_CUDA)
    return vm_err(vm, GRACE_EUNSUPPORTED, "predication: the predicate is not a 0-d device value");
  CUfunction f = NULL;
  grace_status st = word_kernel(c, &f);
  if (st != GRACE_OK) return st;
  uint64_t w[CG_PRED_WORDS];
  cg_pred_pack(w, gpu_ptr(v), v->dtype, outer, want, gpu_ptr(word));
  return cuda_launch(c, f, (unsigned[]){1, 1, 1}, (unsigned[]){1, 1, 1}, 0, w, sizeof w);
}

grace_status gpu_pred_lower(grace_ir *ir, int i, grace_tensor **val) {
  grace_vm *vm = ir->vm;
  const ir_inst *k = &ir->insts[i];
  cuda_ctx *c = gpu_ctx(vm);
  if (k->op != IR_OP_COND) return vm_err(vm, GRACE_EINTERNAL, "predication: only a cond region is predicated");
  if (k->nin > 64 || k->nout > 64 || !c) return vm_err(vm, GRACE_EINTERNAL, "predication: too many values");
  grace_tensor *in[64];
  for (int j = 0; j < k->nin; j++) in[j] = val[ir->args[k->first_arg + j]];
  grace_tensor **res = &val[k->first_result];
  unsigned want = 0;
  CUdeviceptr outer = cuda_pred_word(c, &want);
  grace_tensor *word = vm_tensor_new(vm, "cond", GRACE_INT32, GRACE_CUDA, 0, NULL);
  if (!word) return vm->status;
  grace_status st = gpu_region_fresh(ir, k->first_result, k->nout, res);
  cuda_pred_set(c, 0, 0);
  if (st == GRACE_OK) st = set_word(vm, c, in[0], outer, want, word);
  for (int b = 0; b < 2 && st == GRACE_OK; b++) {
    cuda_pred_set(c, gpu_ptr(word), b == 0 ? CG_PRED_THEN : CG_PRED_ELSE);
    st = gpu_region_body(ir->subs[k->sub + b], k->nin - 1, in + 1, k->nout, res);
  }
  cuda_pred_set(c, outer, want);
  grace_tensor_release(word);   /* the bodies' kernels, captured before anything reuses its memory, read it */
  if (st != GRACE_OK)
    for (int j = 0; j < k->nout; j++) { grace_tensor_release(res[j]); res[j] = NULL; }
  return st;
}

void gpu_pred_warm(grace_ir *ir, int i, grace_tensor **val) {
  grace_vm *vm = ir->vm;
  const ir_inst *k = &ir->insts[i];
  cuda_ctx *c = gpu_ctx(vm);
  if (k->op != IR_OP_COND || k->nin > 64 || k->nout > 64 || !c) return;
  grace_tensor *in[64], *out[64];
  for (int j = 0; j < k->nin; j++) in[j] = val[ir->args[k->first_arg + j]];
  grace_tensor *word = vm_tensor_new(vm, "cond", GRACE_INT32, GRACE_CUDA, 0, NULL);
  if (!word) return;
  unsigned want = 0;
  CUdeviceptr outer = cuda_pred_word(c, &want);
  for (int b = 0; b < 2 && cuda_memset(c, gpu_ptr(word), 0, 4) == GRACE_OK; b++) {
    cuda_pred_set(c, gpu_ptr(word), b == 0 ? CG_PRED_THEN : CG_PRED_ELSE);
    /* results dropped, and so is an error (a host read of a value no kernel wrote, a copy the predicate refuses) */
    if (ir_exec_sub(ir->subs[k->sub + b], k->nin - 1, in + 1, k->nout, out) == GRACE_OK)
      for (int j = 0; j < k->nout; j++) grace_tensor_release(out[j]);
  }
  cuda_pred_set(c, outer, want);
  grace_tensor_release(word);
}
