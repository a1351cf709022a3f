/* test_fuse_norm.c: layer norm and RMS norm as the prologue of the GEMVs that read them. The grouping (the decompose
 * pass keeps such a norm whole and the fusion pass puts it into the matmul's kernel: no norm or row kernel of its
 * own), the cases that keep the norm apart (its result returned or read by something else, more than one row, a host
 * program, the switch off), and the generated GEMV sources: the prologue is there, it reads A only after
 * griddepcontrol.wait, and the sources compile with NVRTC where it loads. No GPU needed. */
#include <stdio.h>
#include <string.h>
#include "grace.h"
#include "tap.h"
#include "codegen/cg_matmul.h"
#include "cuda/cuda_api.h"

static grace_vm *vm;

/* Parses src, runs the default passes up to decompose (attention, decompose) and writes the fusion report into
 * buf; returns the kernel count (-1: failed). */
static int report(const char *src, char *buf, size_t n, const char *what) {
  grace_ir *ir = NULL, *dec = NULL;
  int nk = -1;
  if (!ok(grace_ir_parse(vm, src, &ir) == GRACE_OK, "%s: parses", what)) { printf("# %s\n", grace_last_error(vm)); return -1; }
  grace_status st = grace_ir_pass(ir, "attention,decompose", &dec);
  if (st == GRACE_OK) st = grace_ir_fuse_report(dec, buf, n, &nk);
  if (!ok(st == GRACE_OK, "%s: decomposed and grouped", what)) printf("# %s\n", grace_last_error(vm));
  grace_ir_free(dec);
  grace_ir_free(ir);
  return st == GRACE_OK ? nk : -1;
}

/* GPT-2's pattern in a decode step: h = layer_norm(x, w, b); h @ W:t() + bias, the weight [N, K]; DT and ROWS are
 * replaced, EXTRA (more returned values) too */
static const char *ln_linear =
    "func @lnl {\n"
    "  %0 = input #0 : DT[ROWS,768] cuda\n"
    "  %1 = input #1 : DT[768] cuda\n"
    "  %2 = input #2 : DT[768] cuda\n"
    "  %3 = input #3 : DT[2304,768] cuda\n"
    "  %4 = input #4 : DT[2304] cuda\n"
    "  %5 = layer_norm %0, %1, %2 {a=1e-05} : DT[ROWS,768] cuda\n"
    "  %6 = transpose %3 {dims=[0,1]} : DT[768,2304] cuda\n"
    "  %7 = matmul %5, %6 : DT[ROWS,2304] cuda\n"
    "  %8 = add %7, %4 : DT[ROWS,2304] cuda\n"
    "  return %8EXTRA\n"
    "}\n";

static int ln_report(const char *dt, int rows, const char *extra, char *buf, size_t n, const char *what) {
  char src[2048], r[16];
  size_t o = 0;
  snprintf(r, sizeof r, "%d", rows);
  for (const char *p = ln_linear; *p && o + 16 < sizeof src;) {
    const char *rep = !strncmp(p, "DT", 2) ? dt : !strncmp(p, "ROWS", 4) ? r : !strncmp(p, "EXTRA", 5) ? extra : NULL;
    if (!rep) { src[o++] = *p++; continue; }
    p += !strncmp(p, "DT", 2) ? 2 : !strncmp(p, "ROWS", 4) ? 4 : 5;
    for (; *rep && o + 16 < sizeof src; rep++) src[o++] = *rep;
  }
  src[o] = 0;
  return report(src, buf, n, what);
}

static void test_grouping(void) {
  char buf[4096];
  const char *dts[2] = {"f32", "bf16"};
  for (int t = 0; t < 2; t++) {
    char what[64];
    snprintf(what, sizeof what, "%s layer_norm -> linear, 1 row", dts[t]);
    int nk = ln_report(dts[t], 1, "", buf, sizeof buf, what);
    is_int(nk, 1, "%s: one kernel (the norm has none of its own)", what);
    is_str(buf, "kernel 0 matmul: %5 %7 %8 = layer_norm matmul add; stores %8\n",
           "%s: the norm is the matmul's prologue, the bias its epilogue", what);
    ok(!strstr(buf, "reduction") && !strstr(buf, "norm:"), "%s: no row kernel, no norm kernel", what);
  }
  /* 2 rows (and 17, no GEMV's): every warp would recompute each row's statistics; the norm is decomposed into its
     row kernel as before */
  for (int rows = 2; rows <= 17; rows += 15) {
    char what[64];
    snprintf(what, sizeof what, "%d rows", rows);
    int nk = ln_report("f32", rows, "", buf, sizeof buf, what);
    is_int(nk, 2, "%s: a row kernel and the matmul", what);
    ok(strstr(buf, "kernel 0 reduction:") && strstr(buf, "kernel 1 matmul: ") && !strstr(buf, "layer_norm"),
       "%s: the norm decomposed, as without the prologue", what);
  }
  int nk;
  /* the norm's result returned as well: it is stored, so its kernel stays */
  nk = ln_report("f32", 1, ", %5", buf, sizeof buf, "norm returned");
  is_int(nk, 2, "norm returned: its kernel stays beside the matmul");
  ok(strstr(buf, "kernel 0 reduction:") && !strstr(buf, "layer_norm"), "norm returned: decomposed into a row kernel");
  /* the switch off: the program of before */
  grace_set_norm_prologue(vm, 0);
  nk = ln_report("f32", 1, "", buf, sizeof buf, "switch off");
  is_int(nk, 2, "switch off: a row kernel and the matmul");
  ok(strstr(buf, "kernel 0 reduction:") != NULL, "switch off: the norm decomposed");
  grace_set_norm_prologue(vm, 1);
}

static void test_other_cases(void) {
  char buf[4096];
  /* q, k, v projections reading one norm: one horizontal group, the norm its prologue */
  int nk = report("func @qkv {\n"
                  "  %0 = input #0 : bf16[1,1,64] cuda\n"
                  "  %1 = input #1 : bf16[64] cuda\n"
                  "  %2 = input #2 : bf16[64] cuda\n"
                  "  %3 = input #3 : bf16[64,64] cuda\n"
                  "  %4 = input #4 : bf16[64,64] cuda\n"
                  "  %5 = input #5 : bf16[64,64] cuda\n"
                  "  %6 = layer_norm %0, %1, %2 {a=1e-05} : bf16[1,1,64] cuda\n"
                  "  %7 = matmul %6, %3 : bf16[1,1,64] cuda\n"
                  "  %8 = matmul %6, %4 : bf16[1,1,64] cuda\n"
                  "  %9 = matmul %6, %5 : bf16[1,1,64] cuda\n"
                  "  return %7, %8, %9\n"
                  "}\n", buf, sizeof buf, "q, k, v");
  is_int(nk, 1, "q, k, v: one kernel group");
  ok(strstr(buf, "matmul horizontal: %6 %7 %8 %9 = layer_norm matmul matmul matmul;") != NULL,
     "q, k, v: the norm is the prologue of the horizontal group");
  /* grouped-query attention: q [64 -> 64], k and v [64 -> 16] (grouped horizontally): one group of all three */
  nk = report("func @gqa {\n"
              "  %0 = input #0 : f32[1,64] cuda\n"
              "  %1 = input #1 : f32[64] cuda\n"
              "  %2 = input #2 : f32[64,64] cuda\n"
              "  %3 = input #3 : f32[16,64] cuda\n"
              "  %4 = input #4 : f32[16,64] cuda\n"
              "  %5 = rms_norm %0, %1 {a=1e-06} : f32[1,64] cuda\n"
              "  %6 = transpose %2 {dims=[0,1]} : f32[64,64] cuda\n"
              "  %7 = transpose %3 {dims=[0,1]} : f32[64,16] cuda\n"
              "  %8 = transpose %4 {dims=[0,1]} : f32[64,16] cuda\n"
              "  %9 = matmul %5, %6 : f32[1,64] cuda\n"
              "  %10 = matmul %5, %7 : f32[1,16] cuda\n"
              "  %11 = matmul %5, %8 : f32[1,16] cuda\n"
              "  %12 = relu %9 : f32[1,64] cuda\n"
              "  return %12, %10, %11\n"
              "}\n", buf, sizeof buf, "grouped-query q, k, v");
  is_int(nk, 1, "grouped-query q, k, v: one kernel group");
  is_str(buf, "kernel 0 matmul horizontal: %5 %9 %10 %11 %12 = rms_norm matmul matmul matmul relu; stores %10 %11 %12\n",
         "grouped-query q, k, v: the groups of other shapes joined, the norm their prologue, q's epilogue kept");
  /* two matmuls of the norm, the second's weight made from the first's product: not one kernel, and the norm,
     kept whole, runs as the norm kernel (as many kernels as its row kernel would be) */
  nk = report("func @dep {\n"
              "  %0 = input #0 : f32[1,64] cuda\n"
              "  %1 = input #1 : f32[64,64] cuda\n"
              "  %2 = layer_norm %0, _, _ {a=1e-05} : f32[1,64] cuda\n"
              "  %3 = matmul %2, %1 : f32[1,64] cuda\n"
              "  %4 = reshape %3 {shape=[64,1]} : f32[64,1] cuda\n"
              "  %5 = matmul %2, %4 : f32[1,1] cuda\n"
              "  return %5\n"
              "}\n", buf, sizeof buf, "a matmul of the norm waiting for another");
  is_int(nk, 3, "a matmul of the norm waiting for another: the norm, then each matmul");
  ok(strstr(buf, "kernel 0 norm: %2 = layer_norm;") != NULL, "the norm stays a kernel of its own");
  /* RMS norm without a weight */
  nk = report("func @rms {\n"
              "  %0 = input #0 : f32[1,128] cuda\n"
              "  %1 = input #1 : f32[128,32] cuda\n"
              "  %2 = rms_norm %0, _ {a=1e-06} : f32[1,128] cuda\n"
              "  %3 = matmul %2, %1 : f32[1,32] cuda\n"
              "  return %3\n"
              "}\n", buf, sizeof buf, "rms_norm");
  is_int(nk, 1, "rms_norm -> matmul: one kernel");
  is_str(buf, "kernel 0 matmul: %2 %3 = rms_norm matmul; stores %3\n", "rms_norm: the prologue of the matmul");
  /* read by a pointwise op as well: decomposed, one row kernel, as before */
  nk = report("func @two {\n"
              "  %0 = input #0 : f32[1,64] cuda\n"
              "  %1 = input #1 : f32[64,64] cuda\n"
              "  %2 = layer_norm %0, _, _ {a=1e-05} : f32[1,64] cuda\n"
              "  %3 = matmul %2, %1 : f32[1,64] cuda\n"
              "  %4 = add %3, %2 : f32[1,64] cuda\n"
              "  return %4\n"
              "}\n", buf, sizeof buf, "norm read by an add");
  ok(nk >= 2 && strstr(buf, "reduction:") && !strstr(buf, "layer_norm"), "norm read by an add: it keeps its kernel");
  /* a host program: unchanged (the CPU computes the norm as before) */
  nk = report("func @cpu {\n"
              "  %0 = input #0 : f32[1,64]\n"
              "  %1 = input #1 : f32[64,64]\n"
              "  %2 = layer_norm %0, _, _ {a=1e-05} : f32[1,64]\n"
              "  %3 = matmul %2, %1 : f32[1,64]\n"
              "  return %3\n"
              "}\n", buf, sizeof buf, "host program");
  ok(nk == 2 && strstr(buf, "kernel 0 reduction:") && !strstr(buf, "layer_norm"), "host program: decomposed as before");
}

/* The decode step of a GPT-2-like model in miniature (one token, d 64): ln_1 -> the q/k/v projection, the out
 * projection with its residual, ln_2 -> the MLP (gelu) with its residual, ln_f -> the LM head; attention stood in
 * for by the q slice. With the prologue the program has 3 kernels fewer, one a norm. */
static const char *decode_step =
    "func @step {\n"
    "  %0 = input #0 : DT[1,1,64] cuda\n"
    "  %1 = input #1 : DT[64] cuda\n"
    "  %2 = input #2 : DT[64] cuda\n"
    "  %3 = input #3 : DT[192,64] cuda\n"
    "  %4 = input #4 : DT[192] cuda\n"
    "  %5 = input #5 : DT[64,64] cuda\n"
    "  %6 = input #6 : DT[64] cuda\n"
    "  %7 = input #7 : DT[256,64] cuda\n"
    "  %8 = input #8 : DT[256] cuda\n"
    "  %9 = input #9 : DT[64,256] cuda\n"
    "  %10 = input #10 : DT[512,64] cuda\n"
    "  %11 = layer_norm %0, %1, %2 {a=1e-05} : DT[1,1,64] cuda\n"
    "  %12 = transpose %3 {dims=[0,1]} : DT[64,192] cuda\n"
    "  %13 = matmul %11, %12 : DT[1,1,192] cuda\n"
    "  %14 = add %13, %4 : DT[1,1,192] cuda\n"
    "  %15 = narrow %14 {dims=[2], i1=64} : DT[1,1,64] cuda\n"
    "  %16 = transpose %5 {dims=[0,1]} : DT[64,64] cuda\n"
    "  %17 = matmul %15, %16 : DT[1,1,64] cuda\n"
    "  %18 = add %17, %6 : DT[1,1,64] cuda\n"
    "  %19 = add %0, %18 : DT[1,1,64] cuda\n"
    "  %20 = layer_norm %19, %1, %2 {a=1e-05} : DT[1,1,64] cuda\n"
    "  %21 = transpose %7 {dims=[0,1]} : DT[64,256] cuda\n"
    "  %22 = matmul %20, %21 : DT[1,1,256] cuda\n"
    "  %23 = add %22, %8 : DT[1,1,256] cuda\n"
    "  %24 = gelu %23 {flag=1} : DT[1,1,256] cuda\n"
    "  %25 = transpose %9 {dims=[0,1]} : DT[256,64] cuda\n"
    "  %26 = matmul %24, %25 : DT[1,1,64] cuda\n"
    "  %27 = add %19, %26 : DT[1,1,64] cuda\n"
    "  %28 = layer_norm %27, %1, %2 {a=1e-05} : DT[1,1,64] cuda\n"
    "  %29 = transpose %10 {dims=[0,1]} : DT[64,512] cuda\n"
    "  %30 = matmul %28, %29 : DT[1,1,512] cuda\n"
    "  return %30\n"
    "}\n";

static void test_decode_step(void) {
  const char *dts[2] = {"f32", "bf16"};
  for (int t = 0; t < 2; t++) {
    char src[4096], buf[8192], what[64];
    size_t o = 0;
    for (const char *p = decode_step; *p && o + 8 < sizeof src;) {
      if (!strncmp(p, "DT", 2)) { for (const char *d = dts[t]; *d; d++) src[o++] = *d; p += 2; }
      else src[o++] = *p++;
    }
    src[o] = 0;
    snprintf(what, sizeof what, "%s decode step", dts[t]);
    int on = report(src, buf, sizeof buf, what);
    int norms_inside = 0;
    for (const char *q = strstr(buf, "= layer_norm matmul add"); q; q = strstr(q + 1, "= layer_norm matmul add")) norms_inside++;
    norms_inside += strstr(buf, "= layer_norm matmul;") != NULL;
    ok(!strstr(buf, "reduction:") && norms_inside == 3, "%s: no row kernel; the 3 norms open their GEMVs' groups", what);
    grace_set_norm_prologue(vm, 0);
    int off = report(src, buf, sizeof buf, what);
    grace_set_norm_prologue(vm, 1);
    is_int(off - on, 3, "%s: 3 kernels fewer with the prologue (%d -> %d)", what, off, on);
  }
}

/* ---- the generated sources ---- */
static cg_mm_desc gemv(cg_mm_form form, grace_dtype dt, int norm) {
  cg_mm_desc d;
  memset(&d, 0, sizeof d);
  d.form = form;
  d.dt = d.out_dt = dt;
  d.a_kmajor = d.b_kmajor = 1;
  d.vec = 16 / (int)grace_dtype_size(dt);
  d.mtile = 1;
  d.wpr = 1;
  d.a_vec = 1;
  if (form == CG_MM_GEMV_RW) { d.rl = 3; d.rc = 2; d.mtile = 2; }
  d.norm = norm;
  d.norm_w = 1;
  d.norm_b = norm == CG_MM_NORM_LAYER;
  d.eps = 1e-5;
  return d;
}

/* Whether, in the kernel body, every griddepcontrol.wait (also one that an #if leaves out) comes before the first
 * use of `what`: the statistics and the normalised reads read what the kernel before wrote. */
static int waits_before(const char *src, const char *what) {
  const char *g = strstr(src, "__global__"), *last = NULL;
  const char *u = g ? strstr(g, what) : NULL;
  for (const char *w = g ? strstr(g, "griddepcontrol.wait") : NULL; w; w = strstr(w + 1, "griddepcontrol.wait")) last = w;
  return last && u && last < u;
}

static void test_sources(void) {
  const char *why = cuda_nvrtc_why(vm);
  if (why) printf("# NVRTC cannot load: %s (sources checked, not compiled)\n", why);
  const cg_mm_form forms[2] = {CG_MM_GEMV_NT, CG_MM_GEMV_RW};
  const grace_dtype dts[3] = {GRACE_FLOAT32, GRACE_BFLOAT16, GRACE_FLOAT16};
  for (int f = 0; f < 2; f++)
    for (int t = 0; t < 3; t++)
      for (int norm = CG_MM_NORM_LAYER; norm <= CG_MM_NORM_RMS; norm++)
        for (int ind = 0; ind < 2; ind++) {
          cg_mm_desc d = gemv(forms[f], dts[t], norm);
          d.indirect = ind;
          /* the other variant: NT with scalar loads, 2 warps a column (shared sums), split K; RW with A read element
             by element, its weights loaded after the wait */
          if (f == 0 && ind) { d.wpr = 2; d.mtile = 4; d.a_vec = 0; d.split = 1; d.vec = 1; }
          if (f == 1 && ind) { d.a_vec = 0; d.rw_late = 1; }
          char what[128];
          snprintf(what, sizeof what, "%s %s %s norm prologue%s", f ? "GEMV_RW" : "GEMV_NT", grace_dtype_name(dts[t]),
                   norm == CG_MM_NORM_LAYER ? "layer" : "rms",
                   !ind ? "" : f ? ", indirect, A by elements, late weights" : ", indirect, scalar, 2 warps a column, split");
          cg_kernel k;
          if (cg_matmul_source(vm, &d, &k) != GRACE_OK) { ok(0, "%s: source: %s", what, grace_last_error(vm)); continue; }
          ok(strstr(k.src, "#define MM_NSTATS") && strstr(k.src, "const MM_T *NW_") && strstr(k.src, "MM_NSTATS("),
             "%s: the prologue is in the source", what);
          ok(waits_before(k.src, "MM_NSTATS(") && waits_before(k.src, "MM_AX(") && (f || waits_before(k.src, "MM_DOT(")),
             "%s: the row statistics and the normalised reads follow griddepcontrol.wait", what);
          if (!why) {
            char *out = NULL;
            size_t n = 0;
            grace_status st = cuda_nvrtc_compile(vm, k.src, 90, 1, &out, &n);
            ok(st == GRACE_OK && n > 0, "%s: compiles for sm_90", what);
            if (st != GRACE_OK) printf("# %s\n", grace_last_error(vm));
            if (out) grace_realloc(vm, out, n, 0);
          }
          cg_kernel_free(vm, &k);
        }
  /* the split-K finish of a GEMV with the prologue takes the same parameters (the norm's pointers among them) */
  for (int ind = 0; ind < 2; ind++) {
    cg_mm_desc d = gemv(CG_MM_SPLITK, GRACE_BFLOAT16, CG_MM_NORM_LAYER);
    d.indirect = ind;
    cg_kernel k;
    grace_status st = cg_matmul_source(vm, &d, &k);
    ok(st == GRACE_OK && strstr(k.src, "const MM_T *NW_"), "split-K finish%s: the norm's pointers in its parameters",
       ind ? ", indirect" : "");
    if (st == GRACE_OK && !why) {
      char *out = NULL;
      size_t n = 0;
      ok(cuda_nvrtc_compile(vm, k.src, 90, 1, &out, &n) == GRACE_OK && n > 0, "split-K finish%s: compiles for sm_90",
         ind ? ", indirect" : "");
      if (out) grace_realloc(vm, out, n, 0);
    }
    if (st == GRACE_OK) cg_kernel_free(vm, &k);
  }
  /* the plain kernel has none of it; the other forms refuse a norm */
  cg_mm_desc d = gemv(CG_MM_GEMV_NT, GRACE_FLOAT32, CG_MM_NORM_NONE);
  cg_kernel k;
  ok(cg_matmul_source(vm, &d, &k) == GRACE_OK && !strstr(k.src, "#define MM_NSTATS") && !strstr(k.src, "const MM_T *NW_"),
     "without a norm the GEMV has no prologue");
  cg_kernel_free(vm, &k);
  cg_mm_desc a = gemv(CG_MM_GEMV_NT, GRACE_FLOAT32, CG_MM_NORM_LAYER), b = a;
  b.eps = 1e-6;
  cg_kernel ka, kb;
  ok(cg_matmul_source(vm, &a, &ka) == GRACE_OK && cg_matmul_source(vm, &b, &kb) == GRACE_OK &&
         strcmp(ka.name, kb.name) != 0, "another epsilon is another kernel");
  cg_kernel_free(vm, &ka);
  cg_kernel_free(vm, &kb);
  d = gemv(CG_MM_GEMV_NN, GRACE_FLOAT32, CG_MM_NORM_LAYER);
  d.b_kmajor = 0;
  ok(cg_matmul_source(vm, &d, &k) == GRACE_EUNSUPPORTED && strstr(grace_last_error(vm), "norm prologue"),
     "GEMV_NN refuses a norm prologue, saying so");
  d = gemv(CG_MM_GEMV_NT, GRACE_FLOAT32, CG_MM_NORM_LAYER);
  d.eps = -1;
  ok(cg_matmul_source(vm, &d, &k) == GRACE_EUNSUPPORTED, "a negative epsilon is refused");
  ok(cg_matmul_nptrs(&d) == 6 && (d.norm = 0, cg_matmul_nptrs(&d) == 4), "a norm adds two pointers");
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  ok(grace_set_norm_prologue(NULL, 1) == GRACE_EARG, "grace_set_norm_prologue(NULL) is GRACE_EARG");
  grace_set_norm_prologue(vm, 1);   /* whatever $GRACE_NORM_PROLOGUE says */
  test_grouping();
  test_other_cases();
  test_decode_step();
  test_sources();
  grace_vm_free(vm);
  return tap_done();
}
