/* test_node_update_gpu.c: re-pointing a real cuBLASLt kernel node in a real CUDA graph (cuda/cuda_graph_update.c),
 * below the launch strategy, so that what the driver and cuBLASLt do is seen directly. Skips without a GPU or
 * cuBLASLt. A float32 C = A B (256 x 384 x 512) is captured into a graph with cuBLASLt; the library node is found
 * with A, B and C as the ranges to re-point (or the reason it cannot be, printed: then the rest skips); the graph
 * is instantiated and replayed with the nodes pointed at new A2, B2, C2, and C2 is checked against the product
 * computed on the host (float64 sums; tolerance 1e-4 relative to the largest value), while the captured C, filled
 * with a sentinel before the replay, must be untouched (a node still writing the old output would change it) and
 * the product must follow A2 and B2 (the old A and B hold other values). Prints each re-pointed node's count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "cuda/cuda_blas.h"
#include "cuda/cuda_graph.h"
#include "cuda/cuda_graph_update.h"
#include "cuda/cuda_internal.h"
#include "tap.h"

enum { M = 256, N = 384, K = 512 };

static void fill(float *p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) p[i] = (float)((int)((i * 31 + (size_t)seed * 17) % 23) - 11) / 8.0f;
}

/* max |C - A B| / max |A B| over the row-major product */
static double rel_err(const float *C, const float *A, const float *B) {
  double worst = 0, big = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int l = 0; l < K; l++) s += (double)A[i * K + l] * B[l * N + j];
      worst = fmax(worst, fabs(C[i * N + j] - s));
      big = fmax(big, fabs(s));
    }
  return worst / (big > 0 ? big : 1);
}

int main(void) {
  grace_config cfg = {0};
  cfg.device = "cpu";
  char err[256];
  grace_vm *vm = grace_vm_new(&cfg, err, sizeof err);
  cuda_ctx *c = vm ? cuda_get(vm) : NULL;
  cuda_blas *b = NULL;
  if (!c || cuda_blas_load(vm, NULL, &b) != GRACE_OK) {
    printf("1..0 # SKIP %s\n", !c ? "no CUDA device" : "no cuBLASLt");
    grace_vm_free(vm);
    return 0;
  }
  size_t na = sizeof(float) * M * K, nb = sizeof(float) * K * N, nc = sizeof(float) * M * N;
  float *hA = malloc(na), *hB = malloc(nb), *hA2 = malloc(na), *hB2 = malloc(nb), *hC = malloc(nc);
  CUdeviceptr A = 0, B = 0, C = 0, A2 = 0, B2 = 0, C2 = 0;
  grace_status st = cuda_malloc(c, na, &A);
  if (!st) st = cuda_malloc(c, nb, &B);
  if (!st) st = cuda_malloc(c, nc, &C);
  if (!st) st = cuda_malloc(c, na, &A2);
  if (!st) st = cuda_malloc(c, nb, &B2);
  if (!st) st = cuda_malloc(c, nc, &C2);
  fill(hA, (size_t)M * K, 1); fill(hB, (size_t)K * N, 2); fill(hA2, (size_t)M * K, 3); fill(hB2, (size_t)K * N, 4);
  if (!st) st = cuda_copy_to_device(c, A, hA, na);
  if (!st) st = cuda_copy_to_device(c, B, hB, nb);
  if (!st) st = cuda_copy_to_device(c, A2, hA2, na);
  if (!st) st = cuda_copy_to_device(c, B2, hB2, nb);
  cuda_blas_gemm g = {.dt = GRACE_FLOAT32, .c_dt = GRACE_FLOAT32, .M = M, .N = N, .K = K, .batch = 1, .A = A, .B = B,
                      .C = C, .a_sm = K, .a_sk = 1, .b_sk = N, .b_sn = 1, .c_sb = (int64_t)M * N};
  /* eager first: the handle is made and the product checked outside any capture */
  if (!st) st = cuda_blas_matmul(vm, b, c, &g);
  if (!st) st = cuda_copy_to_host(c, hC, C, nc);
  ok(st == GRACE_OK && rel_err(hC, hA, hB) < 1e-4, "cuBLASLt eagerly: C = A B%s%s", st ? ": " : "", st ? grace_last_error(vm) : "");

  cuda_capture *cap = NULL;
  CUgraph graph = NULL;
  CUgraphExec x = NULL;
  if (!st) st = cuda_capture_open(c, 0, &cap);
  if (!st) st = cuda_capture_begin(c);
  if (!st) st = cuda_blas_matmul(vm, b, c, &g);
  if (cap) st = cuda_capture_close(c, st, &graph);
  ok(st == GRACE_OK && graph, "the product captured into a graph%s%s", st ? ": " : "", st ? grace_last_error(vm) : "");
  size_t nlib = 0;
  if (cap) cuda_capture_lib(cap, &nlib);
  is_int(nlib, 3, "cuBLASLt's three addresses noted as a library's");
  cuda_range r[3] = {{A, na}, {B, nb}, {C, nc}};
  cuda_node_updates *u = NULL;
  grace_status fs = graph ? cuda_graph_updates_find(c, cap, graph, r, 3, &u) : GRACE_EUNSUPPORTED;
  printf("# find: %s; %d library node(s) to re-point\n", fs ? grace_last_error(vm) : "ok", cuda_graph_updates_nodes(u));
  if (fs != GRACE_OK || !u) {
    skip(fs ? grace_last_error(vm) : "no node to re-point", 1);
    skip("not re-pointable here", 1);
  } else {
    int nk = 0, nset = 0;
    st = cuda_graph_instantiate(c, graph, &x, &nk);
    printf("# %d kernel node(s) in the graph\n", nk);
    if (!st) st = cuda_memset(c, C, 0x7f, nc);   /* a sentinel: no replay may write the captured output */
    CUdeviceptr base[3] = {A2, B2, C2};
    if (!st) st = cuda_graph_updates_apply(c, u, x, base, &nset);
    if (!st) st = cuda_graph_launch(c, x);
    if (!st) st = cuda_sync(c);
    float *hC2 = malloc(nc);
    unsigned char *old = malloc(nc);
    if (!st) st = cuda_copy_to_host(c, hC2, C2, nc);
    if (!st) st = cuda_copy_to_host(c, old, C, nc);
    int untouched = st == GRACE_OK;
    for (size_t i = 0; untouched && i < nc; i++) untouched = old[i] == 0x7f;
    double e = st ? 1 : rel_err(hC2, hA2, hB2);
    ok(st == GRACE_OK && nset >= 1 && e < 1e-4, "replayed with the node(s) re-pointed (%d): C2 = A2 B2 (rel err %g)%s%s",
       nset, e, st ? ": " : "", st ? grace_last_error(vm) : "");
    ok(untouched, "the captured output was not written by the replay");
    free(hC2);
    free(old);
  }
  cuda_graph_updates_free(c, u);
  cuda_graph_destroy(c, graph, x);
  cuda_capture_free(c, cap);
  CUdeviceptr all[6] = {A, B, C, A2, B2, C2};
  size_t sz[6] = {na, nb, nc, na, nb, nc};
  for (int i = 0; i < 6; i++) if (all[i]) cuda_release(c, all[i], sz[i]);
  free(hA); free(hB); free(hA2); free(hB2); free(hC);
  cuda_blas_free(vm, b);
  grace_vm_free(vm);
  return tap_done();
}
