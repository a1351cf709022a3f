/* test_inplace_fake.c: on the fake driver (fake_cuda.h: kernels do nothing, NVRTC compiles them for real), a fused
 * kernel whose members write tensors in place (copy_, as an optimizer step does for each weight and moment) runs as
 * one kernel storing straight into the written tensors: counted launches, the store pointers among the kernel's
 * parameters, the versions advanced once per copy_ as eagerly. Where threads would read elements other threads
 * write (a transposed read of the written tensor), the group runs an op at a time and the report says why. An
 * empty update launches nothing and still advances the version. The
 * values are checked on a GPU by tests/lua/test_gpu_train_steps.lua (compiled steps equal eager ones). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "cuda/cuda_graph.h"
#include "cuda/cuda_internal.h"
#include "tap.h"

#include "c/fake_cuda.h"

/* The parameter words of the last kernel launched (the generated kernels take one struct: pointers first). */
static uint64_t last_words[16];
static CUresult hook_launch(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
                            unsigned smem, CUstream s, void **p, void **x) {
  if (p && p[0]) memcpy(last_words, p[0], sizeof last_words);
  return f_launch(f, a, b, c, d, e, g, smem, s, p, x);
}
static CUresult hook_launch_ex(const void *cfg, CUfunction f, void **p, void **x) {
  if (p && p[0]) memcpy(last_words, p[0], sizeof last_words);
  return f_launch_ex(cfg, f, p, x);
}

static int count_word(uint64_t w, int n) {
  int c = 0;
  for (int i = 0; i < n && i < 16; i++) c += last_words[i] == w;
  return c;
}

/* m = 0.9 m + g; w = 0.9 w; w = w - m: three copy_ (two into w), one kernel. */
static void optimizer_like(grace_vm *vm) {
  const char *text =
    "func @step {\n"
    "  %0 = input #0 : f32[1024] cuda\n"
    "  %1 = input #1 : f32[1024] cuda\n"
    "  %2 = input #2 : f32[1024] cuda\n"
    "  %3 = literal 0.9 : f64[]\n"
    "  %4 = mul %2, %3 : f32[1024] cuda\n"
    "  %5 = add %4, %1 : f32[1024] cuda\n"
    "  %6 = copy_ %2, %5 : f32[1024] cuda\n"
    "  %7 = mul %0, %3 : f32[1024] cuda\n"
    "  %8 = copy_ %0, %7 : f32[1024] cuda\n"
    "  %9 = sub %8, %6 : f32[1024] cuda\n"
    "  %10 = copy_ %8, %9 : f32[1024] cuda\n"
    "  write %0, %10 bumps=2\n"
    "  write %2, %6\n"
    "  return %9\n"
    "}\n";
  grace_ir *ir = NULL;
  grace_status st = grace_ir_parse(vm, text, &ir);
  if (!ok(st == GRACE_OK, "step: parses")) { printf("# %s\n", grace_last_error(vm)); return; }
  int nk = -1;
  char rep[2048];
  st = grace_ir_fuse_report(ir, rep, sizeof rep, &nk);
  ok(st == GRACE_OK && nk == 1, "step: the update of both tensors is one group (%d)", nk);
  int64_t n = 1024;
  grace_tensor *t[3] = {0};
  for (int i = 0; i < 3 && st == GRACE_OK; i++) st = grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &t[i]);
  uint64_t vw = grace_tensor_version(t[0]), vm0 = grace_tensor_version(t[2]);
  long launches = kernel_launches;
  grace_tensor *r = NULL;
  for (int i = 0; i < 3 && st == GRACE_OK; i++) { grace_tensor_release(r); r = NULL; st = grace_ir_run(ir, 3, t, 1, &r); }
  if (!ok(st == GRACE_OK, "step: three runs")) printf("# %s\n", grace_last_error(vm));
  is_int(kernel_launches - launches, 3, "step: one kernel a run");
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.unfused == 0, "step: no group an op at a time (%s)", gi.unfused ? gi.unfused_why : "");
  /* operands m, g, w (the destinations are read by the mul members), then the stores: the returned value, w and m
     themselves */
  uint64_t pw = (uint64_t)(uintptr_t)vm_ptr(t[0]), pm = (uint64_t)(uintptr_t)vm_ptr(t[2]);
  ok(count_word(pw, 6) == 2 && count_word(pm, 6) == 2,
     "step: the kernel stores into w and m themselves, no new tensor to copy back (%d, %d)", count_word(pw, 6),
     count_word(pm, 6));
  is_int((long)(grace_tensor_version(t[0]) - vw), 6, "step: w's version advanced twice a run, once per copy_");
  is_int((long)(grace_tensor_version(t[2]) - vm0), 3, "step: m's version advanced once a run");
  grace_tensor_release(r);
  for (int i = 0; i < 3; i++) grace_tensor_release(t[i]);
  grace_ir_free(ir);
}

/* x = x + x^T read through a view of x itself: thread (i, j) would read (j, i), which another thread writes. */
static void transposed(grace_vm *vm) {
  const char *text =
    "func @tr {\n"
    "  %0 = input #0 : f32[32,32] cuda\n"
    "  %1 = transpose %0 {dims=[0,1]} : f32[32,32] cuda\n"
    "  %2 = add %0, %1 : f32[32,32] cuda\n"
    "  %3 = copy_ %0, %2 : f32[32,32] cuda\n"
    "  write %0, %3\n"
    "  return %2\n"
    "}\n";
  grace_ir *ir = NULL;
  grace_status st = grace_ir_parse(vm, text, &ir);
  if (!ok(st == GRACE_OK, "transposed: parses")) { printf("# %s\n", grace_last_error(vm)); return; }
  grace_tensor *x = NULL;
  st = grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 2, (int64_t[]){32, 32}, &x);
  uint64_t v0 = grace_tensor_version(x);
  grace_tensor *r = NULL;
  for (int i = 0; i < 2 && st == GRACE_OK; i++) { grace_tensor_release(r); r = NULL; st = grace_ir_run(ir, 1, &x, 1, &r); }
  grace_tensor_release(r);
  if (!ok(st == GRACE_OK, "transposed: two runs")) printf("# %s\n", grace_last_error(vm));
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.unfused == 1 && strstr(gi.unfused_why, "in place"),
     "transposed: the group runs an op at a time, and the report says why (%d: %s)", gi.unfused, gi.unfused_why);
  is_int((long)(grace_tensor_version(x) - v0), 2, "transposed: the version advanced once a run");
  grace_tensor_release(x);
  grace_ir_free(ir);
}

/* An empty update (a parameter with no elements): no kernel runs, but the version advances once per copy_, as eagerly. */
static void empty(grace_vm *vm) {
  const char *text =
    "func @empty {\n"
    "  %0 = input #0 : f32[0] cuda\n"
    "  %1 = input #1 : f32[0] cuda\n"
    "  %2 = add %0, %1 : f32[0] cuda\n"
    "  %3 = copy_ %0, %2 : f32[0] cuda\n"
    "  write %0, %3\n"
    "  return %2\n"
    "}\n";
  grace_ir *ir = NULL;
  grace_status st = grace_ir_parse(vm, text, &ir);
  if (!ok(st == GRACE_OK, "empty: parses")) { printf("# %s\n", grace_last_error(vm)); return; }
  int64_t n = 0;
  grace_tensor *t[2] = {0};
  for (int i = 0; i < 2 && st == GRACE_OK; i++) st = grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, 1, &n, &t[i]);
  uint64_t v0 = grace_tensor_version(t[0]);
  grace_tensor *r = NULL;
  for (int i = 0; i < 2 && st == GRACE_OK; i++) { grace_tensor_release(r); r = NULL; st = grace_ir_run(ir, 2, t, 1, &r); }
  if (!ok(st == GRACE_OK, "empty: two runs")) printf("# %s\n", grace_last_error(vm));
  grace_graph_info gi;
  grace_ir_graph_info(ir, &gi);
  ok(gi.unfused == 0, "empty: the group runs fused (%s)", gi.unfused ? gi.unfused_why : "");
  is_int((long)(grace_tensor_version(t[0]) - v0), 2, "empty: the version advanced once a run");
  grace_tensor_release(r);
  for (int i = 0; i < 2; i++) grace_tensor_release(t[i]);
  grace_ir_free(ir);
}

int main(void) {
  char dir[] = "/tmp/grace-inplacefake-XXXXXX";
  int rc = 0;
  grace_vm *vm = fake_vm_new(dir, &rc);
  if (!vm) return rc;
  cuda_ctx *fake = install_fake(vm);
  fake->fn.cuLaunchKernel = hook_launch;
  if (fake->fn.cuLaunchKernelEx) fake->fn.cuLaunchKernelEx = hook_launch_ex;
  grace_set_graphs(vm, "off");
  optimizer_like(vm);
  transposed(vm);
  empty(vm);
  fake_vm_free(vm, dir);
  return tap_done();
}
