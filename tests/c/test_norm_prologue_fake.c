/* test_norm_prologue_fake.c: device programs whose norm is the prologue of a GEMV (gpu/gpu_matmul.c), run on the
 * fake driver (tests/c/fake_cuda.h: kernels do nothing, NVRTC compiles them for real; without NVRTC the file
 * skips). No value is checked here (tests/lua/test_gpu_norm_prologue.lua does that on a GPU); what is checked is
 * what runs: layer_norm -> linear of one row launches one kernel a call where the program without the prologue
 * launches two, the same under a CUDA graph with parameter indirection (the norm's weight and bias pointers through
 * the argument table), and a product no GEMV with the prologue takes (a weight [K, N], n-contiguous) runs the norm
 * kernel first; a group that goes an op at a time after its first product keeps nothing its kernels made. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "cuda/cuda_internal.h"
#include "tap.h"

#include "c/fake_cuda.h"

/* Program src parsed and through the passes "attention,decompose" with the norm prologue on or off (on again after);
 * NULL, the message printed, when that fails. */
static grace_ir *decomposed(grace_vm *vm, const char *src, int on) {
  grace_ir *ir = NULL, *dec = NULL;
  grace_set_norm_prologue(vm, on);
  if (grace_ir_parse(vm, src, &ir) != GRACE_OK || grace_ir_pass(ir, "attention,decompose", &dec) != GRACE_OK)
    printf("# building the program: %s\n", grace_last_error(vm));
  grace_set_norm_prologue(vm, 1);
  grace_ir_free(ir);
  return dec;
}

/* layer_norm(x [rows, K]) @ W + bias, W [N, K] transposed (wt 1: GPT-2's linear) or W [K, N] (wt 0) */
static grace_ir *program(grace_vm *vm, int wt, int on, int N) {
  char src[2048];
  snprintf(src, sizeof src,
           "func @lnl {\n"
           "  %%0 = input #0 : f32[1,256] cuda\n"
           "  %%1 = input #1 : f32[256] cuda\n"
           "  %%2 = input #2 : f32[256] cuda\n"
           "  %%3 = input #3 : f32[%s] cuda\n"
           "  %%4 = input #4 : f32[%d] cuda\n"
           "  %%5 = layer_norm %%0, %%1, %%2 {a=1e-05} : f32[1,256] cuda\n"
           "  %%6 = %s : f32[256,%d] cuda\n"
           "  %%7 = matmul %%5, %%6 : f32[1,%d] cuda\n"
           "  %%8 = add %%7, %%4 : f32[1,%d] cuda\n"
           "  return %%8\n"
           "}\n",
           wt ? (N == 512 ? "512,256" : "2048,256") : (N == 512 ? "256,512" : "256,2048"), N,
           wt ? "transpose %3 {dims=[0,1]}" : N == 512 ? "reshape %3 {shape=[256,512]}" : "reshape %3 {shape=[256,2048]}",
           N, N, N);
  return decomposed(vm, src, on);
}

/* Kernels launched by `calls` calls of ir (graph launches counted apart in *graphs); -1 when a call failed. */
static long run(grace_vm *vm, grace_ir *ir, int wt, int N, int calls, long *graphs) {
  const int64_t szs[5][2] = {{1, 256}, {256, 0}, {256, 0}, {N, 256}, {N, 0}};
  grace_tensor *in[5] = {0}, *out = NULL;
  grace_status st = GRACE_OK;
  for (int i = 0; i < 5 && st == GRACE_OK; i++) {
    int64_t s[2] = {szs[i][0], szs[i][1]};
    if (i == 3 && !wt) { s[0] = 256; s[1] = N; }
    st = grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, s[1] ? 2 : 1, s, &in[i]);
  }
  long k0 = kernel_launches, g0 = graph_launches;
  for (int c = 0; c < calls && st == GRACE_OK; c++) {
    grace_tensor_release(out);
    out = NULL;
    st = grace_ir_run(ir, 5, in, 1, &out);
  }
  if (st != GRACE_OK) printf("# run: %s\n", grace_last_error(vm));
  grace_tensor_release(out);
  for (int i = 0; i < 5; i++) grace_tensor_release(in[i]);
  *graphs = graph_launches - g0;
  return st == GRACE_OK ? kernel_launches - k0 : -1;
}

/* N 2048: a GEMV of one kernel; N 512: few columns, K split over two kernels (the partial sums and their finish) */
static void kernel_counts(grace_vm *vm, int N) {
  grace_set_graphs(vm, "off");
  long g;
  int per = N == 512 ? 2 : 1;   /* the product's kernels */
  grace_ir *on = program(vm, 1, 1, N), *off = program(vm, 1, 0, N), *nn = program(vm, 0, 1, N);
  if (!ok(on && off && nn, "N %d: the programs build", N)) goto out;
  long k_on = run(vm, on, 1, N, 3, &g), k_off = run(vm, off, 1, N, 3, &g), k_nn = run(vm, nn, 0, N, 3, &g);
  is_int((int)k_on, 3 * per, "N %d: with the prologue: the product's kernels alone (the norm inside the GEMV, the bias "
         "its epilogue)", N);
  is_int((int)k_off, 3 * (per + 1), "N %d: without it: the norm's row kernel as well", N);
  /* GEMV_NN's blocks cover 32 x 4 columns: 16 or 4 of them split K, two kernels */
  is_int((int)k_nn, 9, "N %d: a weight [K, N] (no GEMV takes the prologue): the norm's kernel first, then the product's two",
         N);
  grace_graph_info gi;
  grace_ir_graph_info(nn, &gi);
  is_int(gi.unfused, 0, "N %d: a weight [K, N]: the group still runs as kernels, not an op at a time", N);
out:
  grace_ir_free(on);
  grace_ir_free(off);
  grace_ir_free(nn);
  grace_set_graphs(vm, NULL);
}

/* Grouped-query projections of one RMS norm: q [256 -> 2048], k and v [256 -> 512]; one group, each GEMV with the
 * norm as its prologue. */
static grace_ir *gqa(grace_vm *vm, int on) {
  const char *src = "func @gqa {\n"
                    "  %0 = input #0 : f32[1,256] cuda\n"
                    "  %1 = input #1 : f32[256] cuda\n"
                    "  %2 = input #2 : f32[2048,256] cuda\n"
                    "  %3 = input #3 : f32[512,256] cuda\n"
                    "  %4 = input #4 : f32[512,256] cuda\n"
                    "  %5 = rms_norm %0, %1 {a=1e-06} : f32[1,256] cuda\n"
                    "  %6 = transpose %2 {dims=[0,1]} : f32[256,2048] cuda\n"
                    "  %7 = transpose %3 {dims=[0,1]} : f32[256,512] cuda\n"
                    "  %8 = transpose %4 {dims=[0,1]} : f32[256,512] cuda\n"
                    "  %9 = matmul %5, %6 : f32[1,2048] cuda\n"
                    "  %10 = matmul %5, %7 : f32[1,512] cuda\n"
                    "  %11 = matmul %5, %8 : f32[1,512] cuda\n"
                    "  return %9, %10, %11\n"
                    "}\n";
  return decomposed(vm, src, on);
}

static void grouped_query(grace_vm *vm) {
  grace_set_graphs(vm, "off");
  static const int64_t szs[5][2] = {{1, 256}, {256, 0}, {2048, 256}, {512, 256}, {512, 256}};
  grace_tensor *in[5] = {0}, *out[3] = {0};
  grace_status st = GRACE_OK;
  for (int i = 0; i < 5 && st == GRACE_OK; i++)
    st = grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, szs[i][1] ? 2 : 1, szs[i], &in[i]);
  long n[2] = {-1, -1};
  for (int on = 0; on < 2 && st == GRACE_OK; on++) {
    grace_ir *ir = gqa(vm, on);
    long k0 = kernel_launches;
    st = ir ? grace_ir_run(ir, 5, in, 3, out) : GRACE_EINTERNAL;
    if (st != GRACE_OK) printf("# run: %s\n", grace_last_error(vm));
    n[on] = kernel_launches - k0;
    for (int o = 0; o < 3; o++) { grace_tensor_release(out[o]); out[o] = NULL; }
    grace_ir_free(ir);
  }
  ok(st == GRACE_OK && n[1] == n[0] - 1, "grouped-query q, k, v: the norm's kernel is gone (%ld -> %ld kernels)", n[0],
     n[1]);
  for (int i = 0; i < 5; i++) grace_tensor_release(in[i]);
  grace_set_graphs(vm, NULL);
}

/* Under a graph with indirection the GEMV's pointers (the norm's weight and bias too) are argument-table slots. */
static void graphed(grace_vm *vm) {
  grace_set_graphs(vm, "indirect");
  grace_ir *on = program(vm, 1, 1, 2048);
  long g = 0, k = on ? run(vm, on, 1, 2048, 4, &g) : -1;
  grace_graph_info gi;
  if (on) grace_ir_graph_info(on, &gi);
  ok(k >= 0 && g >= 2 && on && gi.unfused == 0,
     "indirect graphs: the program with the prologue is captured and replayed (%ld kernels launched, %ld graph "
     "launches)", k, g);
  grace_ir_free(on);
  grace_set_graphs(vm, NULL);
}

/* One norm read by two products, the second of which no kernel runs (its weight keeps 4 batch dims apart, none of
 * them mergeable): the group goes an op at a time after its first product ran, the product alone fails too, and
 * what the group's kernels computed before is given back. */
static void group_falls_back(grace_vm *vm) {
  grace_set_graphs(vm, "off");
  const char *src = "func @fb {\n"
                    "  %0 = input #0 : f32[1,256] cuda\n"
                    "  %1 = input #1 : f32[256] cuda\n"
                    "  %2 = input #2 : f32[64,256] cuda\n"
                    "  %3 = input #3 : f32[2,2,2,2,256,8] cuda\n"
                    "  %4 = rms_norm %0, %1 {a=1e-06} : f32[1,256] cuda\n"
                    "  %5 = transpose %2 {dims=[0,1]} : f32[256,64] cuda\n"
                    "  %6 = matmul %4, %5 : f32[1,64] cuda\n"
                    "  %7 = transpose %3 {dims=[0,2]} : f32[2,2,2,2,256,8] cuda\n"
                    "  %8 = matmul %4, %7 : f32[2,2,2,2,1,8] cuda\n"
                    "  return %6, %8\n"
                    "}\n";
  grace_ir *ir = NULL, *dec = NULL;
  grace_status st = grace_ir_parse(vm, src, &ir);
  if (st == GRACE_OK) st = grace_ir_pass(ir, "attention,decompose", &dec);
  grace_ir_free(ir);
  static const int64_t szs[4][6] = {{1, 256}, {256}, {64, 256}, {2, 2, 2, 2, 256, 8}};
  static const int nd[4] = {2, 1, 2, 6};
  grace_tensor *in[4] = {0}, *out[2] = {0};
  for (int i = 0; i < 4 && st == GRACE_OK; i++) st = grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CUDA, nd[i], szs[i], &in[i]);
  size_t before = grace_tensor_bytes(vm);
  if (st == GRACE_OK) st = grace_ir_run(dec, 4, in, 2, out);
  ok(st == GRACE_EUNSUPPORTED && strstr(grace_last_error(vm), "batch dims"),
     "a group that falls back: the product no kernel runs fails, saying why (%s)", grace_last_error(vm));
  grace_graph_info gi;
  if (dec) grace_ir_graph_info(dec, &gi);
  ok(dec && gi.unfused == 1, "a group that falls back: it ran an op at a time (%s)", dec ? gi.unfused_why : "");
  for (int o = 0; o < 2; o++) { grace_tensor_release(out[o]); out[o] = NULL; }
  is_int((long)grace_tensor_bytes(vm), (long)before, "a group that falls back: what its kernels made first is given "
         "back (the norm and the first product)");
  for (int i = 0; i < 4; i++) grace_tensor_release(in[i]);
  grace_ir_free(dec);
  grace_set_graphs(vm, NULL);
}

int main(void) {
  char dir[] = "/tmp/grace-fake-XXXXXX";
  int rc = 0;
  grace_vm *vm = fake_vm_new(dir, &rc);
  if (!vm) return rc;
  cuda_ctx *fake = install_fake(vm);
  install_fake_ex(fake);
  grace_set_matmul(vm, "grace");   /* cuBLASLt is a real library: the fake context is no place for it */
  kernel_counts(vm, 2048);
  kernel_counts(vm, 512);
  graphed(vm);
  grouped_query(vm);
  group_falls_back(vm);
  fake_vm_free(vm, dir);
  return tap_done();
}
