/* gpu_kernels.c: kernel-level figures of grace's CUDA back end on the GPU machine: copy bandwidth, the GEMV
 * kernels (GPT-2's LM head and its decode layers replayed as one CUDA graph), the fused attention against its
 * three unfused kernels (12 calls in one graph), the tensor-core GEMM against cuBLASLt. Prints "name | value | target | pass" rows; appends nothing (the lead copies them to RESULTS.md).
 * Times are CUDA events, the median of >= 20 samples after warm-up.
 *
 * Build (from the repo root, after `make` has built build/libgrace.a; add the DEPS_PREFIX library dir with an
 * rpath when mimalloc comes from .deps):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -I. -o build/gpu_kernels bench/gpu_kernels.c build/libgrace.a \
 *      -L"$root/usr/lib/x86_64-linux-gnu" -Wl,-rpath,"$root/usr/lib/x86_64-linux-gnu" -lmimalloc -lm -ldl -lpthread
 *   build/gpu_kernels */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "cuda/cuda_api.h"
#include "gpu/gpu_matmul.h"
#include "base/base.h"

#define REPS 21

static grace_vm *vm;
static cuda_ctx *cx;
static double copy_bw;   /* bytes/s, read + write, 1 GiB */

static void row(const char *name, const char *value, const char *target, int pass) {
  printf("%-52s | %-22s | %-12s | %s\n", name, value, target, pass < 0 ? "-" : pass ? "yes" : "NO");
}
static void die(const char *what) {
  printf("FAILED: %s: %s\n", what, grace_last_error(vm));
  exit(1);
}
static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Median milliseconds per call of fn over REPS samples of `batch` back-to-back calls, after 3 warm-ups. */
typedef grace_status (*bench_fn)(void *);
static float time_ms(bench_fn fn, void *arg, int batch) {
  CUevent e0, e1;
  if (cuda_event_new(cx, &e0) || cuda_event_new(cx, &e1)) die("events");
  for (int i = 0; i < 3; i++) if (fn(arg)) die("warm-up");
  float s[REPS];
  for (int r = 0; r < REPS; r++) {
    cuda_event_record(cx, e0);
    for (int i = 0; i < batch; i++) if (fn(arg)) die("run");
    cuda_event_record(cx, e1);
    if (cuda_event_elapsed(cx, e0, e1, &s[r])) die("elapsed");
    s[r] /= (float)batch;
  }
  cuda_event_free(cx, e0);
  cuda_event_free(cx, e1);
  qsort(s, REPS, sizeof s[0], cmpf);
  return s[REPS / 2];
}

/* ---- 1. device-to-device copies ---- */
typedef struct copy_arg { CUdeviceptr a, b; size_t n; } copy_arg;
static grace_status do_copy(void *p) { copy_arg *c = p; return cuda_copy_device(cx, c->b, c->a, c->n); }

static void bench_copy(void) {
  size_t sizes[2] = {(size_t)64 << 20, (size_t)1 << 30};
  const char *names[2] = {"copy DtoD 64 MB (read+write)", "copy DtoD 1 GiB (read+write)"};
  for (int i = 0; i < 2; i++) {
    copy_arg c = {0, 0, sizes[i]};
    if (cuda_malloc(cx, c.n, &c.a) || cuda_malloc(cx, c.n, &c.b)) die("copy buffers");
    float ms = time_ms(do_copy, &c, 1);
    double bw = 2.0 * (double)c.n / (ms * 1e-3);
    if (i == 1) copy_bw = bw;
    char v[64];
    snprintf(v, sizeof v, "%.0f GB/s", bw / 1e9);
    row(names[i], v, "-", -1);
    cuda_release(cx, c.a, c.n);
    cuda_release(cx, c.b, c.n);
  }
}

/* ---- matmul helpers ---- */
static grace_tensor *dev_rand(grace_dtype dt, int nd, const int64_t *sz) {
  int64_t n = vm_numel(nd, sz);
  float *buf = malloc(sizeof(float) * (size_t)n);
  uint64_t r = 88172645463325252ull;
  for (int64_t i = 0; i < n; i++) {
    r ^= r << 13; r ^= r >> 7; r ^= r << 17;
    buf[i] = (float)((r >> 40) / 16777216.0) - 0.5f;
  }
  grace_tensor *h = NULL, *d = NULL;
  if (grace_tensor_from_data(vm, dt, nd, sz, GRACE_FLOAT32, buf, &h)) die("host tensor");
  free(buf);
  grace_attrs a = {0};
  a.device = GRACE_CUDA;
  if (grace_run(vm, GRACE_OP_TO_DEVICE, 1, &h, &a, 1, &d)) die("to device");
  grace_tensor_release(h);
  return d;
}
static grace_tensor *transposed(grace_tensor *t) {
  grace_attrs a = {0};
  a.ndims = 2; a.dims[0] = 0; a.dims[1] = 1;
  grace_tensor *o = NULL;
  if (grace_run(vm, GRACE_OP_TRANSPOSE, 1, &t, &a, 1, &o)) die("transpose");
  return o;
}

typedef struct mm_arg { gpu_slot *slot; grace_tensor *x, *w, *o; gpu_mm_choice how; } mm_arg;
static grace_status do_mm(void *p) {
  mm_arg *m = p;
  return gpu_matmul_tensors(vm, m->slot, m->x, m->w, m->o, m->how);
}

/* ---- 2. the LM head: x[1,768] @ W^T with W stored [50257,768] (nn.Linear), and W stored [768,50257] ---- */
static void bench_lm_head(gpu_slot *slot) {
  grace_dtype dts[2] = {GRACE_FLOAT32, GRACE_BFLOAT16};
  for (int t = 0; t < 2; t++)
    for (int lay = 0; lay < 2; lay++) {
      grace_dtype dt = dts[t];
      int64_t xs[2] = {1, 768}, wsz[2] = {50257, 768}, os[2] = {1, 50257};
      if (lay) { wsz[0] = 768; wsz[1] = 50257; }
      grace_tensor *x = dev_rand(dt, 2, xs), *w = dev_rand(dt, 2, wsz), *wv = lay ? w : transposed(w), *o = NULL;
      if (grace_tensor_empty(vm, dt, GRACE_CUDA, 2, os, &o)) die("output");
      mm_arg m = {slot, x, wv, o, GPU_MM_OWN};
      float ms = time_ms(do_mm, &m, 10);
      double bytes = 768.0 * 50257.0 * (double)grace_dtype_size(dt), bw = bytes / (ms * 1e-3), pct = 100.0 * bw / copy_bw;
      char name[96], v[64];
      snprintf(name, sizeof name, "GEMV LM head 768x50257 %s, W %s (%s)", grace_dtype_name(dt),
               lay ? "[K,N]" : "[N,K]", gpu_matmul_last_kernel(slot));
      snprintf(v, sizeof v, "%.1f us %.0f GB/s %.0f%%", ms * 1e3, bw / 1e9, pct);
      row(name, v, lay ? "-" : ">= 85%", lay ? -1 : pct >= 85.0);
      grace_tensor_release(x); grace_tensor_release(w); grace_tensor_release(o);
      if (!lay) grace_tensor_release(wv);
    }
}

/* ---- 3. twelve decode layers' GEMVs (48 kernels) as one CUDA graph ---- */
typedef struct graph_api {
  CUresult (*begin)(CUstream, int);
  CUresult (*end)(CUstream, CUgraph *);
  CUresult (*inst)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*launch)(CUgraphExec, CUstream);
  CUresult (*exec_destroy)(CUgraphExec);
  CUresult (*destroy)(CUgraph);
} graph_api;
typedef struct graph_arg { const graph_api *g; CUgraphExec exec; } graph_arg;
static grace_status do_graph(void *p) {
  graph_arg *a = p;
  return cuda_check(vm, a->g->launch(a->exec, cuda_stream(cx)), "cuGraphLaunch");
}

static void *graph_api_load(graph_api *gp) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  graph_api g = {0};
  if (lib) {
    g.begin = (CUresult(*)(CUstream, int))dlsym(lib, "cuStreamBeginCapture_v2");
    g.end = (CUresult(*)(CUstream, CUgraph *))dlsym(lib, "cuStreamEndCapture");
    g.inst = (CUresult(*)(CUgraphExec *, CUgraph, unsigned long long))dlsym(lib, "cuGraphInstantiateWithFlags");
    g.launch = (CUresult(*)(CUgraphExec, CUstream))dlsym(lib, "cuGraphLaunch");
    g.exec_destroy = (CUresult(*)(CUgraphExec))dlsym(lib, "cuGraphExecDestroy");
    g.destroy = (CUresult(*)(CUgraph))dlsym(lib, "cuGraphDestroy");
  }
  *gp = g;
  return g.begin && g.end && g.inst && g.launch && g.exec_destroy && g.destroy ? lib : NULL;
}

static void bench_decode_graph(gpu_slot *slot, const graph_api *gp) {
  const graph_api g = *gp;
  static const int64_t shapes[4][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};   /* in, out */
  grace_dtype dts[2] = {GRACE_FLOAT32, GRACE_BFLOAT16};
  for (int t = 0; t < 2; t++)
    for (int wpr = 0; wpr <= 4; wpr = wpr ? wpr * 2 : 1) {
    grace_dtype dt = dts[t];
    gpu_matmul_force(vm, slot, -1, wpr);
    enum { NL = 12 };
    grace_tensor *ws[NL][4], *wv[NL][4], *xs[4], *os[4];
    double bytes = 0;
    for (int s = 0; s < 4; s++) {
      int64_t xsz[2] = {1, shapes[s][0]}, osz[2] = {1, shapes[s][1]};
      xs[s] = dev_rand(dt, 2, xsz);
      if (grace_tensor_empty(vm, dt, GRACE_CUDA, 2, osz, &os[s])) die("output");
    }
    for (int l = 0; l < NL; l++)
      for (int s = 0; s < 4; s++) {
        int64_t wsz[2] = {shapes[s][1], shapes[s][0]};   /* nn.Linear: [out, in], used as x @ W:t() */
        ws[l][s] = dev_rand(dt, 2, wsz);
        wv[l][s] = transposed(ws[l][s]);
        bytes += (double)(wsz[0] * wsz[1]) * (double)grace_dtype_size(dt);
      }
    /* the weights are written by nothing in the graph: the figure row runs what a compiled decode step captures
     * (GEMV_RW, weights loaded before each kernel's wait); the forced warps-per-column rows the streaming GEMV */
    gpu_mm_choice how = wpr ? GPU_MM_OWN : GPU_MM_OWN_SETTLED;
    /* compile and warm every kernel outside the capture */
    for (int l = 0; l < NL; l++)
      for (int s = 0; s < 4; s++)
        if (gpu_matmul_tensors(vm, slot, xs[s], wv[l][s], os[s], how)) die("decode warm-up");
    if (cuda_sync(cx)) die("sync");
    CUgraph graph = NULL;
    graph_arg ga = {&g, NULL};
    if (cuda_check(vm, g.begin(cuda_stream(cx), 2 /* relaxed */), "cuStreamBeginCapture_v2")) die("capture");
    for (int l = 0; l < NL; l++)
      for (int s = 0; s < 4; s++)
        if (gpu_matmul_tensors(vm, slot, xs[s], wv[l][s], os[s], how)) die("decode capture");
    if (cuda_check(vm, g.end(cuda_stream(cx), &graph), "cuStreamEndCapture")) die("capture end");
    if (cuda_check(vm, g.inst(&ga.exec, graph, 0), "cuGraphInstantiateWithFlags")) die("instantiate");
    /* replayed back to back: 10 replays a sample (a replay alone also counts the host's submission of it, the
     * stream idle after the first event: printed beside) */
    float ms = time_ms(do_graph, &ga, 10), alone = time_ms(do_graph, &ga, 1);
    double bw = bytes / (ms * 1e-3), pct = 100.0 * bw / copy_bw;
    char name[96], v[64];
    if (wpr) snprintf(name, sizeof name, "  decode graph %s, gemv_nt, %d warps per column", grace_dtype_name(dt), wpr);
    else snprintf(name, sizeof name, "decode GEMVs 12 layers x 4 %s, one graph (%s)", grace_dtype_name(dt),
                  gpu_matmul_last_kernel(slot));
    snprintf(v, sizeof v, "%.1f us %.0f GB/s %.0f%% (alone %.1f us)", ms * 1e3, bw / 1e9, pct, alone * 1e3);
    row(name, v, wpr ? "-" : ">= 65%", wpr ? -1 : pct >= 65.0);
    /* the same 48 launched one by one, for comparison */
    float single = 0;
    for (int s = 0; s < 4 && !wpr; s++) {
      mm_arg m = {slot, xs[s], wv[0][s], os[s], GPU_MM_OWN};
      float one = time_ms(do_mm, &m, 1);
      single += one * NL;
      snprintf(name, sizeof name, "  GEMV %lldx%lld %s (%s), eager", (long long)shapes[s][0], (long long)shapes[s][1],
               grace_dtype_name(dt), gpu_matmul_last_kernel(slot));
      double b1 = (double)(shapes[s][0] * shapes[s][1]) * (double)grace_dtype_size(dt);
      snprintf(v, sizeof v, "%.1f us %.0f%%", one * 1e3, 100.0 * b1 / (one * 1e-3) / copy_bw);
      row(name, v, "-", -1);
    }
    snprintf(v, sizeof v, "%.1f us", single * 1e3);
    if (!wpr) row("  the 48 GEMVs eager (sum of medians)", v, "-", -1);
    g.exec_destroy(ga.exec);
    g.destroy(graph);
    for (int l = 0; l < NL; l++)
      for (int s = 0; s < 4; s++) { grace_tensor_release(ws[l][s]); grace_tensor_release(wv[l][s]); }
    for (int s = 0; s < 4; s++) { grace_tensor_release(xs[s]); grace_tensor_release(os[s]); }
  }
  gpu_matmul_force(vm, slot, -1, 0);
}

/* ---- 4. few rows (batched decode): GPT-2's products at 1..16 rows, grace's kernels against cuBLASLt ---- */
static void bench_rows(gpu_slot *slot) {
  static const int64_t shapes[5][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50257}};
  static const int64_t rows[5] = {1, 2, 4, 8, 16};
  grace_dtype dts[2] = {GRACE_BFLOAT16, GRACE_FLOAT32};
  printf("# few rows: x[M,K] @ W^T, W [N,K] not settled; us a product (10 back to back), the kernel\n");
  for (int t = 0; t < 2; t++)
    for (int s = 0; s < 5; s++) {
      grace_dtype dt = dts[t];
      int64_t K = shapes[s][0], N = shapes[s][1], wsz[2] = {N, K};
      grace_tensor *w = dev_rand(dt, 2, wsz), *wv = transposed(w);
      for (int r = 0; r < 5; r++) {
        int64_t xs[2] = {rows[r], K}, os[2] = {rows[r], N};
        grace_tensor *x = dev_rand(dt, 2, xs), *o = NULL;
        if (grace_tensor_empty(vm, dt, GRACE_CUDA, 2, os, &o)) die("output");
        char line[256];
        int n = snprintf(line, sizeof line, "rows %s %lldx%lld M %2lld:", grace_dtype_name(dt), (long long)K,
                         (long long)N, (long long)rows[r]);
        double bytes = (double)(K * N) * (double)grace_dtype_size(dt);
        for (int v = 0; v < 2; v++) {
          mm_arg m = {slot, x, wv, o, v ? GPU_MM_BLAS : GPU_MM_OWN};
          float ms = time_ms(do_mm, &m, 10);
          n += snprintf(line + n, sizeof line - (size_t)n, "  %s %.1f us %.0f GB/s (%s)", v ? "cuBLASLt" : "grace",
                        ms * 1e3, bytes / (ms * 1e-3) / 1e9, gpu_matmul_last_kernel(slot));
        }
        printf("%s\n", line);
        grace_tensor_release(x); grace_tensor_release(o);
      }
      grace_tensor_release(w); grace_tensor_release(wv);
    }
}

/* ---- 5. attention: the fused op against matmul, softmax, matmul (12 calls in one CUDA graph each) ---- */
typedef struct attn_arg { grace_tensor *q, *kt, *v, *sc; int fused; } attn_arg;
static grace_status do_attn(void *p) {
  attn_arg *a = p;
  grace_tensor *o = NULL, *s = NULL, *pr = NULL;
  grace_attrs none = {0}, last = {0};
  last.ndims = 1; last.dims[0] = -1;
  grace_status st;
  if (a->fused) {
    st = grace_run(vm, GRACE_OP_ATTENTION, 5, (grace_tensor *[]){a->q, a->kt, a->v, a->sc, NULL}, &none, 1, &o);
  } else {
    st = grace_run(vm, GRACE_OP_MATMUL, 2, (grace_tensor *[]){a->q, a->kt}, &none, 1, &s);
    if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_SOFTMAX, 1, &s, &last, 1, &pr);
    if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MATMUL, 2, (grace_tensor *[]){pr, a->v}, &none, 1, &o);
  }
  grace_tensor_release(s); grace_tensor_release(pr); grace_tensor_release(o);
  return st;
}
static void bench_attention(const graph_api *g) {
  static const struct { const char *name; int64_t q[4], k[4]; } shapes[4] = {
    {"decode [1,12,1,64] x 129 keys", {1, 12, 1, 64}, {1, 12, 129, 64}},
    {"short [1,8,64,64] x 64 keys", {1, 8, 64, 64}, {1, 8, 64, 64}},
    {"decode [1,12,1,64] x 1025 keys", {1, 12, 1, 64}, {1, 12, 1025, 64}},
    {"decode [1,12,1,64] x 4097 keys", {1, 12, 1, 64}, {1, 12, 4097, 64}}};
  grace_dtype dts[2] = {GRACE_FLOAT32, GRACE_BFLOAT16};
  for (int t = 0; t < 2; t++)
    for (int sh = 0; sh < 4; sh++) {
      grace_dtype dt = dts[t];
      grace_tensor *q = dev_rand(dt, 4, shapes[sh].q), *k = dev_rand(dt, 4, shapes[sh].k), *v = dev_rand(dt, 4, shapes[sh].k);
      grace_tensor *kt = NULL, *sc = NULL;
      grace_attrs tr = {0};
      tr.ndims = 2; tr.dims[0] = 2; tr.dims[1] = 3;
      if (grace_run(vm, GRACE_OP_TRANSPOSE, 1, &k, &tr, 1, &kt)) die("transpose");
      float one = 0.125f;
      if (grace_tensor_from_data(vm, dt, 0, NULL, GRACE_FLOAT32, &one, &sc)) die("scale");
      float us[2];
      for (int fused = 0; fused < 2; fused++) {
        attn_arg a = {q, kt, v, sc, fused};
        for (int i = 0; i < 3; i++) if (do_attn(&a)) die("attention warm-up");
        if (cuda_sync(cx)) die("sync");
        CUgraph graph = NULL;
        graph_arg ga = {g, NULL};
        if (cuda_check(vm, g->begin(cuda_stream(cx), 2), "cuStreamBeginCapture_v2")) die("capture");
        for (int i = 0; i < 12; i++) if (do_attn(&a)) die("attention capture");
        if (cuda_check(vm, g->end(cuda_stream(cx), &graph), "cuStreamEndCapture")) die("capture end");
        if (cuda_check(vm, g->inst(&ga.exec, graph, 0), "cuGraphInstantiateWithFlags")) die("instantiate");
        us[fused] = time_ms(do_graph, &ga, 1) * 1e3f / 12.0f;
        g->exec_destroy(ga.exec);
        g->destroy(graph);
      }
      char name[96], v2[64];
      snprintf(name, sizeof name, "attention %s %s, per call in a graph", shapes[sh].name, grace_dtype_name(dt));
      snprintf(v2, sizeof v2, "%.2f us (unfused %.2f)", us[1], us[0]);
      row(name, v2, "< unfused", us[1] < us[0]);
      grace_tensor_release(q); grace_tensor_release(k); grace_tensor_release(v);
      grace_tensor_release(kt); grace_tensor_release(sc);
    }
}

/* ---- 4. GEMM: ours against cuBLASLt ---- */
static void bench_gemm(gpu_slot *slot, grace_dtype dt, int64_t n, int wt, double target) {
  int64_t sz[2] = {n, n};
  grace_tensor *x = dev_rand(dt, 2, sz), *w = dev_rand(dt, 2, sz), *wv = wt ? transposed(w) : w, *o = NULL;
  if (grace_tensor_empty(vm, dt, GRACE_CUDA, 2, sz, &o)) die("output");
  mm_arg own = {slot, x, wv, o, GPU_MM_OWN}, blas = {slot, x, wv, o, GPU_MM_BLAS};
  /* 5 calls back to back a sample: the kernel's time, not the host's planning (tensor maps, cuBLASLt's) before it */
  enum { GEMM_BATCH = 5 };
  float t_own = time_ms(do_mm, &own, GEMM_BATCH);
  char kname[32];
  snprintf(kname, sizeof kname, "%s", gpu_matmul_last_kernel(slot));
  if (dt != GRACE_FLOAT32) {   /* both tensor-core tile variants; the faster one counts */
    for (int tile = 0; tile < 2; tile++) {
      gpu_matmul_force(vm, slot, tile, 0);
      float t = time_ms(do_mm, &own, GEMM_BATCH);
      char name[96], v[64];
      snprintf(name, sizeof name, "  GEMM %lld^3 %s%s: %s", (long long)n, grace_dtype_name(dt), wt ? " x W^T" : "",
               gpu_matmul_last_kernel(slot));
      snprintf(v, sizeof v, "%.1f TFLOP/s", 2.0 * (double)n * (double)n * (double)n / (t * 1e-3) / 1e12);
      row(name, v, "-", -1);
      if (t < t_own) { t_own = t; snprintf(kname, sizeof kname, "%s", gpu_matmul_last_kernel(slot)); }
    }
    gpu_matmul_force(vm, slot, -1, 0);
  }
  float t_blas = time_ms(do_mm, &blas, GEMM_BATCH);
  double fl = 2.0 * (double)n * (double)n * (double)n;
  double tf_own = fl / (t_own * 1e-3) / 1e12, tf_blas = fl / (t_blas * 1e-3) / 1e12, ratio = tf_own / tf_blas;
  char name[96], v[64], tg[32];
  snprintf(name, sizeof name, "GEMM %lld^3 %s%s: ours (%s)", (long long)n, grace_dtype_name(dt), wt ? " x W^T" : "", kname);
  snprintf(v, sizeof v, "%.1f TFLOP/s", tf_own);
  row(name, v, "-", -1);
  snprintf(name, sizeof name, "GEMM %lld^3 %s%s: cuBLASLt", (long long)n, grace_dtype_name(dt), wt ? " x W^T" : "");
  snprintf(v, sizeof v, "%.1f TFLOP/s", tf_blas);
  row(name, v, "-", -1);
  snprintf(name, sizeof name, "GEMM %lld^3 %s%s: ours / cuBLASLt", (long long)n, grace_dtype_name(dt), wt ? " x W^T" : "");
  snprintf(v, sizeof v, "%.0f%%", 100.0 * ratio);
  if (target > 0) snprintf(tg, sizeof tg, ">= %.0f%%", 100.0 * target);
  else snprintf(tg, sizeof tg, "-");
  row(name, v, tg, target > 0 ? ratio >= target : -1);
  grace_tensor_release(x); grace_tensor_release(w); grace_tensor_release(o);
  if (wt) grace_tensor_release(wv);
}

/* usage: gpu_kernels [section ...]   (lmhead, decode, attention, gemm; none: all; the copy, every percentage's
 * reference, always runs) */
static int argc_, want_all;
static char **argv_;
static int want(const char *section) {
  if (want_all) return 1;
  for (int i = 1; i < argc_; i++) if (!strcmp(argv_[i], section)) return 1;
  return 0;
}

int main(int argc, char **argv) {
  argc_ = argc; argv_ = argv; want_all = argc < 2;
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cuda"}, err, sizeof err);
  if (!vm) { printf("no VM: %s\n", err); return 1; }
  if (!(cx = cuda_get(vm))) { printf("no CUDA device: %s\n", grace_last_error(vm)); return 1; }
  printf("# %s\n", cuda_describe(vm));
  row("name", "value", "target", -1);
  gpu_slot slot = {0};
  bench_copy();   /* the reference of every percentage */
  if (want("lmhead")) bench_lm_head(&slot);
  if (want("rows")) bench_rows(&slot);
  graph_api g;
  void *lib = graph_api_load(&g);
  if (lib) {
    if (want("decode")) bench_decode_graph(&slot, &g);
    if (want("attention")) bench_attention(&g);
    dlclose(lib);
  } else {
    row("decode graph, attention", "graph API missing", "-", 0);
  }
  if (want("gemm")) {
    bench_gemm(&slot, GRACE_BFLOAT16, 4096, 0, 0.70);
    bench_gemm(&slot, GRACE_BFLOAT16, 4096, 1, 0.70);
    bench_gemm(&slot, GRACE_FLOAT32, 1024, 0, 0);
  }
  /* 5. the fused pointwise kernel at 64 MB is timed by bench/cg_fused_bench.c (same device.sh stage), which
   * drives the generator through its own API */
  row("fused pointwise 64 MB", "see cg_fused_bench", ">= 85%", -1);
  if (slot.free) slot.free(vm, slot.p);
  grace_vm_free(vm);
  return 0;
}
