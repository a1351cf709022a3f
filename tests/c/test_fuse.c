/* test_fuse.c: the fusion grouping (grace_ir_fuse_report). IR written by hand (or built through the builder for the
 * transformer block), decomposed where the program has softmax/layer_norm/gelu, then grouped; the expected
 * groupings are written out here by hand: a 40-op pointwise chain is one kernel, matmul+bias+gelu layers one kernel
 * each, softmax and layer_norm one row kernel each, a break splits a chain, a value read by two reductions is
 * computed once, and a transformer block fits in 9 kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm;

/* Parses src, optionally decomposes, and writes the report into buf; returns the kernel count (-1: failed). */
static int report(const char *src, int decompose, char *buf, size_t n, const char *what) {
  grace_ir *ir = NULL, *dec = NULL;
  int nk = -1;
  if (!ok(grace_ir_parse(vm, src, &ir) == GRACE_OK, "%s: parses", what)) { printf("# %s\n", grace_last_error(vm)); return -1; }
  if (decompose && grace_ir_pass(ir, "decompose", &dec) != GRACE_OK) {
    ok(0, "%s: decompose: %s", what, grace_last_error(vm));
    grace_ir_free(ir);
    return -1;
  }
  grace_status st = grace_ir_fuse_report(dec ? dec : ir, buf, n, &nk);
  if (!ok(st == GRACE_OK, "%s: report", what)) printf("# %s\n", grace_last_error(vm));
  grace_ir_free(dec);
  grace_ir_free(ir);
  return st == GRACE_OK ? nk : -1;
}

/* An equation-of-state style polynomial over temperature t, salinity s and pressure p: Horner steps that
 * alternate the inputs, a sqrt(s) branch and a p*p branch that start as groups of their own and must merge into
 * the chain where they meet it (sibling fusion), and a division. 40 ops, literals aside. */
static void test_chain(void) {
  size_t cap = 1 << 16;
  char *src = malloc(cap), *buf = malloc(cap);
  if (!src || !buf) { free(src); free(buf); printf("Bail out! out of memory\n"); exit(1); }
  size_t len = 0;
  int v = 3, nops = 0, acc;
  const char *T = "f32[1048576]";
#define EMIT(...) (len += (size_t)snprintf(src + len, cap - len, __VA_ARGS__))
  EMIT("func @eos {\n  %%0 = input #0 : %s\n  %%1 = input #1 : %s\n  %%2 = input #2 : %s\n", T, T, T);
  EMIT("  %%%d = mul %%0, %%0 : %s\n", v, T); int t2 = v++; nops++;
  EMIT("  %%%d = sqrt %%1 : %s\n", v, T); int sq = v++; nops++;
  EMIT("  %%%d = add %%%d, %%%d : %s\n", v, t2, sq, T); acc = v++; nops++;
  for (int i = 0; nops < 37; i++) {
    EMIT("  %%%d = literal %.6g : f64[]\n", v, 1.0 + 0.125 * i); int lit = v++;
    EMIT("  %%%d = mul %%%d, %%%d : %s\n", v, acc, lit, T); acc = v++; nops++;
    EMIT("  %%%d = add %%%d, %%%d : %s\n", v, acc, i % 3, T); acc = v++; nops++;
  }
  EMIT("  %%%d = mul %%2, %%2 : %s\n", v, T); int pp = v++; nops++;
  EMIT("  %%%d = div %%%d, %%%d : %s\n", v, acc, pp, T); acc = v++; nops++;
  EMIT("  %%%d = sqrt %%%d : %s\n", v, acc, T); acc = v++; nops++;
  EMIT("  return %%%d\n}\n", acc);
#undef EMIT
  is_int(nops, 40, "eos: the program has 40 ops");
  int nk = report(src, 0, buf, cap, "eos");
  is_int(nk, 1, "eos: 40 pointwise ops over one shape are one kernel");
  ok(!strncmp(buf, "kernel 0 pointwise: %3 %4 %5 ", 29), "eos: a pointwise kernel starting with the sibling chains");
  char tail[64];
  snprintf(tail, sizeof tail, "div sqrt; stores %%%d\n", acc);
  size_t bl = strlen(buf), tl = strlen(tail);
  ok(bl > tl && !strcmp(buf + bl - tl, tail), "eos: only the result is stored (nothing in between is materialized)");
  int members = 0;
  for (const char *q = buf; *q && *q != '='; q++) members += *q == '%';
  is_int(members, 40, "eos: all 40 ops are in the kernel");
  /* a report that does not fit is an error, and a NULL buffer counts only */
  char small[16];
  grace_ir *ir = NULL;
  if (grace_ir_parse(vm, src, &ir) == GRACE_OK) {
    ok(grace_ir_fuse_report(ir, small, sizeof small, &nk) == GRACE_EARG && strlen(small) == sizeof small - 1,
       "eos: a short buffer gives GRACE_EARG and a truncated, terminated report");
    nk = 0;
    ok(grace_ir_fuse_report(ir, NULL, 0, &nk) == GRACE_OK && nk == 1, "eos: a NULL buffer counts the kernels");
  }
  grace_ir_free(ir);
  free(src);
  free(buf);
}

/* 8 layers h = gelu(h @ W + b): the bias add and the decomposed gelu are each matmul's epilogue. Each matmul
 * reads the previous layer's result, so none may be grouped horizontally. */
static void test_mlp(void) {
  char src[8192], buf[8192];
  size_t len = 0;
#define EMIT(...) (len += (size_t)snprintf(src + len, sizeof src - len, __VA_ARGS__))
  EMIT("func @mlp {\n  %%0 = input #0 : f32[8,1024]\n");
  int v = 1, h = 0;
  for (int i = 0; i < 8; i++) {
    EMIT("  %%%d = input #%d : f32[1024,1024]\n", v, 1 + 2 * i); int w = v++;
    EMIT("  %%%d = input #%d : f32[1024]\n", v, 2 + 2 * i); int b = v++;
    EMIT("  %%%d = matmul %%%d, %%%d : f32[8,1024]\n", v, h, w); int m = v++;
    EMIT("  %%%d = add %%%d, %%%d : f32[8,1024]\n", v, m, b); int a = v++;
    EMIT("  %%%d = gelu %%%d : f32[8,1024]\n", v, a); h = v++;
  }
  EMIT("  return %%%d\n}\n", h);
#undef EMIT
  int nk = report(src, 1, buf, sizeof buf, "mlp");
  is_int(nk, 8, "mlp: 8 x (matmul + bias + gelu) are 8 kernels");
  int good = 0;
  for (const char *l = buf; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
    char head[32];
    snprintf(head, sizeof head, "kernel %d matmul:", good);
    const char *e = strchr(l, '\n'), *m = strstr(l, "= matmul add mul erf add mul mul; stores");
    if (!strncmp(l, head, strlen(head)) && m && e && m < e) good++;
  }
  is_int(good, 8, "mlp: each kernel is a matmul with bias add and erf-gelu as its epilogue");
  if (good != 8) printf("# %s", buf);
}

static void test_rows(void) {
  char buf[4096];
  int nk = report("func @sm {\n"
                  "  %0 = input #0 : f32[4,16]\n"
                  "  %1 = softmax %0 {dims=[-1]} : f32[4,16]\n"
                  "  return %1\n"
                  "}\n", 1, buf, sizeof buf, "softmax");
  is_int(nk, 1, "softmax: one row kernel");
  is_str(buf, "kernel 0 reduction: %1 %2 %3 %4 %5 = max sub exp sum div; stores %5\n", "softmax: max, x-max, exp, sum, div");

  nk = report("func @ln {\n"
              "  %0 = input #0 : f32[4,16]\n"
              "  %1 = input #1 : f32[16]\n"
              "  %2 = input #2 : f32[16]\n"
              "  %3 = layer_norm %0, %1, %2 {a=1e-05} : f32[4,16]\n"
              "  return %3\n"
              "}\n", 1, buf, sizeof buf, "layer_norm");
  is_int(nk, 1, "layer_norm: one row kernel");
  is_str(buf, "kernel 0 reduction: %3 %4 %5 %6 %8 %9 %10 %11 %12 = mean sub mul mean add rsqrt mul mul add; stores %12\n",
         "layer_norm: both means, the centring, rsqrt and the affine in one kernel (the eps literal is free)");
}

/* A float64 bias of a float32 layer_norm is cast by the decomposition: the cast (a pointwise op reading only an
 * input) has one reader, the row kernel, so it runs inside it rather than as a kernel of its own. */
static void test_cast_prologue(void) {
  char buf[1024];
  int nk = report("func @lnc {\n"
                  "  %0 = input #0 : f32[2,8]\n"
                  "  %1 = input #1 : f32[8]\n"
                  "  %2 = input #2 : f64[8]\n"
                  "  %3 = layer_norm %0, %1, %2 {a=1e-05} : f32[2,8]\n"
                  "  return %3\n"
                  "}\n", 1, buf, sizeof buf, "layer_norm, f64 bias");
  is_int(nk, 1, "layer_norm with a cast bias: one kernel");
  is_str(buf, "kernel 0 reduction: %3 %4 %5 %6 %8 %9 %10 %11 %12 %13 = mean sub mul mean add rsqrt mul mul cast add; "
              "stores %13\n", "layer_norm with a cast bias: the cast is part of the row kernel");
}

static void test_break(void) {
  char buf[1024];
  int nk = report("func @br {\n"
                  "  %0 = input #0 : f32[64]\n"
                  "  %1 = exp %0 : f32[64]\n"
                  "  %2 = neg %1 : f32[64]\n"
                  "  break\n"
                  "  %3 = mul %2, %2 : f32[64]\n"
                  "  %4 = sqrt %3 : f32[64]\n"
                  "  return %4\n"
                  "}\n", 0, buf, sizeof buf, "break");
  is_int(nk, 2, "break: a break in a pointwise chain gives 2 kernels");
  is_str(buf, "kernel 0 pointwise (partition 0): %1 %2 = exp neg; stores %2\n"
              "kernel 1 pointwise (partition 1): %3 %4 = mul sqrt; stores %4\n", "break: split where the host reads");
}

/* One pointwise value read by two reductions. The choice: it is computed once, by the first row kernel (its
 * prologue), and materialized when the second reduction cannot share that kernel (other dims); recomputing it in
 * both would double its reads of x and is not done. Reductions over the same dims share one kernel. */
static void test_shared(void) {
  char buf[1024];
  int nk = report("func @two {\n"
                  "  %0 = input #0 : f32[32,64]\n"
                  "  %1 = exp %0 : f32[32,64]\n"
                  "  %2 = sum %1 {dims=[1], keepdim=1} : f32[32,1]\n"
                  "  %3 = sum %1 {dims=[0], keepdim=1} : f32[1,64]\n"
                  "  return %2, %3\n"
                  "}\n", 0, buf, sizeof buf, "two reductions, other dims");
  is_int(nk, 2, "two reductions over other dims: 2 kernels");
  is_str(buf, "kernel 0 reduction: %1 %2 = exp sum; stores %1 %2\n"
              "kernel 1 reduction: %3 = sum; stores %3\n",
         "two reductions over other dims: exp is in one kernel only, stored for the other");
  nk = report("func @same {\n"
              "  %0 = input #0 : f32[32,64]\n"
              "  %1 = exp %0 : f32[32,64]\n"
              "  %2 = sum %1 {dims=[1], keepdim=1} : f32[32,1]\n"
              "  %3 = max %1 {dims=[-1], keepdim=1} : f32[32,1]\n"
              "  %4 = div %2, %3 : f32[32,1]\n"
              "  return %4\n"
              "}\n", 0, buf, sizeof buf, "two reductions, same rows");
  is_int(nk, 1, "two reductions over the same rows: 1 kernel");
  is_str(buf, "kernel 0 reduction: %1 %2 %3 %4 = exp sum max div; stores %4\n",
         "two reductions over the same rows: exp computed once, never stored");
}

/* copy_ of a pointwise value is that kernel's store; a matmul is never a pointwise prologue's consumer. */
static void test_store(void) {
  char buf[1024];
  int nk = report("func @st {\n"
                  "  %0 = input #0 : f32[8]\n"
                  "  %1 = input #1 : f32[8]\n"
                  "  %2 = exp %1 : f32[8]\n"
                  "  %3 = copy_ %0, %2 : f32[8]\n"
                  "  write %0, %3\n"
                  "  return %2\n"
                  "}\n", 0, buf, sizeof buf, "copy_");
  is_int(nk, 1, "copy_: fused as the store of the exp kernel");
  is_str(buf, "kernel 0 pointwise: %2 %3 = exp copy_; stores %2 %3\n", "copy_: one kernel");
  /* an optimizer's step counter, written in place, feeds its weight's update: in the weight's kernel every thread
   * would write the counter (and read what others wrote), so the counter keeps a kernel of its own */
  nk = report("func @ctr {\n"
              "  %0 = input #0 : f32[64]\n"
              "  %1 = input #1 : f32[]\n"
              "  %2 = literal 1 : f64[]\n"
              "  %3 = add %1, %2 : f32[]\n"
              "  %4 = copy_ %1, %3 : f32[]\n"
              "  %5 = mul %0, %4 : f32[64]\n"
              "  %6 = copy_ %0, %5 : f32[64]\n"
              "  write %1, %4\n"
              "  write %0, %6\n"
              "  return %5\n"
              "}\n", 0, buf, sizeof buf, "copy_ counter");
  is_int(nk, 2, "copy_: a 0-d counter written in place stays out of the 64-element kernel");
  is_str(buf, "kernel 0 pointwise: %3 %4 = add copy_; stores %4\nkernel 1 pointwise: %5 %6 = mul copy_; stores %5 %6\n",
         "copy_: each write in a kernel of its destination's shape");
  /* exp is read by a scan and by the add that also reads the scan: the add joining exp's kernel would make
   * that kernel wait for the scan, which waits for it, so the add is a kernel of its own */
  nk = report("func @cyc {\n"
              "  %0 = input #0 : f32[8,8]\n"
              "  %1 = exp %0 : f32[8,8]\n"
              "  %2 = cumsum %1 {dims=[1]} : f32[8,8]\n"
              "  %3 = add %1, %2 : f32[8,8]\n"
              "  return %3\n"
              "}\n", 0, buf, sizeof buf, "cycle");
  is_int(nk, 3, "cycle: 3 kernels");
  is_str(buf, "kernel 0 pointwise: %1 = exp; stores %1\n"
              "kernel 1 scan: %2 = cumsum; stores %2\n"
              "kernel 2 pointwise: %3 = add; stores %3\n", "cycle: the add does not join exp's kernel");
  nk = report("func @pro {\n"
              "  %0 = input #0 : f32[8,8]\n"
              "  %1 = neg %0 : f32[8,8]\n"
              "  %2 = matmul %1, %0 : f32[8,8]\n"
              "  %3 = cumsum %2 {dims=[1]} : f32[8,8]\n"
              "  %4 = exp %3 : f32[8,8]\n"
              "  return %4\n"
              "}\n", 0, buf, sizeof buf, "prologue");
  is_int(nk, 4, "matmul prologue and scan: 4 kernels");
  is_str(buf, "kernel 0 pointwise: %1 = neg; stores %1\n"
              "kernel 1 matmul: %2 = matmul; stores %2\n"
              "kernel 2 scan: %3 = cumsum; stores %3\n"
              "kernel 3 pointwise: %4 = exp; stores %4\n", "prologue: neg before the matmul, cumsum alone");
  /* an epilogue op read by one other kernel through a view stays in the matmul's kernel: a kernel cannot read a
   * view of a value it computes itself (found by review: moving it broke the reduction's kernel) */
  nk = report("func @tailview {\n"
              "  %0 = input #0 : f32[16,64]\n"
              "  %1 = input #1 : f32[64,64]\n"
              "  %2 = matmul %0, %1 : f32[16,64]\n"
              "  %3 = exp %2 : f32[16,64]\n"
              "  %4 = sum %2 {dims=[0]} : f32[64]\n"
              "  %5 = select %3 {dims=[0], i0=3} : f32[64]\n"
              "  %6 = add %4, %5 : f32[64]\n"
              "  return %6\n"
              "}\n", 0, buf, sizeof buf, "epilogue tail read through a view");
  is_str(buf, "kernel 0 matmul: %2 %3 = matmul exp; stores %2 %3\n"
              "kernel 1 reduction: %4 %6 = sum add; stores %6\n", "epilogue tail read through a view: not moved");
}

/* A pre-norm transformer block (one head, T=16 tokens, D=64), built through the builder. Expected kernels after
 * the attention pass and decomposition:
 *  0 ln1: mean, centring, var, rsqrt, affine: one row kernel
 *  1 q/k/v projections: matmuls of the same ln1 output: one horizontal group
 *  2 attention: scores q @ k^T (the transpose is a free view), the scale, the causal where, the softmax and the
 *    product with v in one op (ir/ir_attention.c; without that pass: three kernels, scores with the scale and
 *    mask as epilogue, the softmax rows, the product)
 *  3 out projection with the residual add as epilogue
 *  4 ln2: a row kernel (it reduces the residual sum, which the matmul kernel stores)
 *  5 mlp up projection with bias and gelu as epilogue
 *  6 mlp down projection with the second residual add as epilogue
 * The same in bfloat16: its layer_norm and gelu are written out in float32 between casts (ir_decompose.c), so
 * they group the same way, the casts inside the groups. */
static void test_block(grace_dtype dt) {
  enum { T = 16, D = 64 };
  grace_ir *ir = grace_ir_new(vm, "block"), *dec = NULL;
  const char *what = dt == GRACE_FLOAT32 ? "block" : "bf16 block";
  if (!ir) { ok(0, "%s: new", what); return; }
  grace_status st = GRACE_OK;
  grace_value x, w1, b1, wq, wk, wv, wo, mask, w2, b2, wu, bu, wd, v[32];
#define IN(out, dt, ...) do { int64_t s_[] = {__VA_ARGS__}; \
    if (st == GRACE_OK) st = grace_ir_input(ir, dt, GRACE_CPU, (int)(sizeof s_ / sizeof *s_), s_, &out); } while (0)
#define OP(out, op, a, n, ...) do { grace_value in_[] = {__VA_ARGS__}; \
    if (st == GRACE_OK) st = grace_ir_op(ir, op, n, in_, a, 1, &out); } while (0)
  IN(x, dt, T, D); IN(w1, dt, D); IN(b1, dt, D);
  IN(wq, dt, D, D); IN(wk, dt, D, D); IN(wv, dt, D, D); IN(wo, dt, D, D);
  IN(mask, GRACE_BOOL, T, T);
  IN(w2, dt, D); IN(b2, dt, D);
  IN(wu, dt, D, 4 * D); IN(bu, dt, 4 * D); IN(wd, dt, 4 * D, D);
  grace_attrs eps = {.a = 1e-5, .has_a = 1}, last = {.ndims = 1, .dims = {-1}}, tr = {.ndims = 2, .dims = {0, 1}};
  grace_value scale = -1, ninf = -1;
  if (st == GRACE_OK) st = grace_ir_literal(ir, 0.125, 0, &scale);
  if (st == GRACE_OK) st = grace_ir_literal(ir, -INFINITY, 0, &ninf);
  OP(v[0], GRACE_OP_LAYER_NORM, &eps, 3, x, w1, b1);
  OP(v[1], GRACE_OP_MATMUL, NULL, 2, v[0], wq);
  OP(v[2], GRACE_OP_MATMUL, NULL, 2, v[0], wk);
  OP(v[3], GRACE_OP_MATMUL, NULL, 2, v[0], wv);
  OP(v[4], GRACE_OP_TRANSPOSE, &tr, 1, v[2]);
  OP(v[5], GRACE_OP_MATMUL, NULL, 2, v[1], v[4]);
  OP(v[6], GRACE_OP_MUL, NULL, 2, v[5], scale);
  OP(v[7], GRACE_OP_WHERE, NULL, 3, mask, v[6], ninf);
  OP(v[8], GRACE_OP_SOFTMAX, &last, 1, v[7]);
  OP(v[9], GRACE_OP_MATMUL, NULL, 2, v[8], v[3]);
  OP(v[10], GRACE_OP_MATMUL, NULL, 2, v[9], wo);
  OP(v[11], GRACE_OP_ADD, NULL, 2, x, v[10]);
  OP(v[12], GRACE_OP_LAYER_NORM, &eps, 3, v[11], w2, b2);
  OP(v[13], GRACE_OP_MATMUL, NULL, 2, v[12], wu);
  OP(v[14], GRACE_OP_ADD, NULL, 2, v[13], bu);
  OP(v[15], GRACE_OP_GELU, NULL, 1, v[14]);
  OP(v[16], GRACE_OP_MATMUL, NULL, 2, v[15], wd);
  OP(v[17], GRACE_OP_ADD, NULL, 2, v[11], v[16]);
#undef IN
#undef OP
  if (st == GRACE_OK) st = grace_ir_output(ir, v[17]);
  if (!ok(st == GRACE_OK, "%s: built", what)) { printf("# %s\n", grace_last_error(vm)); grace_ir_free(ir); return; }
  if (!ok(grace_ir_pass(ir, "attention,decompose", &dec) == GRACE_OK, "%s: attention fused, decomposed", what)) {
    printf("# %s\n", grace_last_error(vm));
    grace_ir_free(ir);
    return;
  }
  char buf[8192];
  int nk = -1;
  st = grace_ir_fuse_report(dec, buf, sizeof buf, &nk);
  ok(st == GRACE_OK, "%s: report", what);
  ok(nk <= 8, "%s: at most 8 kernels, the bound fusion must meet (got %d)", what, nk);
  is_int(nk, 7, "%s: 7 kernels, as listed in the comment", what);
  static const char *kinds[] = {"reduction:", "matmul horizontal:", "scan:", "matmul:", "reduction:", "matmul:",
                                "matmul:"};
  int good = 0, i = 0;
  for (const char *l = buf; *l && i < 7; i++) {
    char head[48];
    snprintf(head, sizeof head, "kernel %d %s", i, kinds[i]);
    good += !strncmp(l, head, strlen(head));
    const char *e = strchr(l, '\n');
    if (!e) break;
    l = e + 1;
  }
  is_int(good, 7, "%s: kernels of the kinds listed, in that order", what);
  ok(strstr(buf, "= matmul matmul matmul;") != NULL, "%s: q, k, v grouped horizontally", what);
  ok(strstr(buf, "= attention;") != NULL, "%s: scores, scale, mask, softmax and product are one attention op", what);
  /* gelu(h) = 0.5 h (1 + erf(h / sqrt 2)): mul erf add mul mul; bfloat16 casts h up first and the result down */
  const char *epi = dt == GRACE_FLOAT32 ? "= matmul add mul erf add mul mul;" : "= matmul add cast mul erf add mul mul cast;";
  ok(strstr(buf, epi) != NULL, "%s: bias and gelu are the up projection's epilogue (%s)", what, epi + 2);
  /* both layer_norms are one row kernel each; in bfloat16 the second one's float32 cast of the residual sum is
     computed there, not stored by the out projection beside the sum itself (one store, not two) */
  const char *ln = dt == GRACE_FLOAT32 ? "= mean sub mul mean add rsqrt mul mul add; stores"
                                       : "= cast mean sub mul mean add rsqrt mul mul add cast; stores";
  int nln = 0;
  for (const char *q = strstr(buf, ln); q; q = strstr(q + 1, ln)) nln++;
  is_int(nln, 2, "%s: both layer_norms are row kernels of that form", what);
  const char *k3 = strstr(buf, "kernel 3 matmul: "), *st3 = k3 ? strstr(k3, "= matmul add; stores ") : NULL;
  const char *eol = k3 ? strchr(k3, '\n') : NULL;
  int stores = 0;
  for (const char *q = st3; q && q < eol; q++) stores += *q == '%';
  ok(st3 && eol && st3 < eol && stores == 1, "%s: the out projection with the residual add stores the sum alone", what);
  printf("# %s report:\n", what);
  for (const char *l = buf; *l;) {
    const char *e = strchr(l, '\n');
    int n = e ? (int)(e - l) : (int)strlen(l);
    printf("#   %.*s\n", n, l);
    l += n + (e != NULL);
  }
  grace_ir_free(dec);
  grace_ir_free(ir);
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  test_chain();
  test_mlp();
  test_rows();
  test_cast_prologue();
  test_break();
  test_shared();
  test_store();
  test_block(GRACE_FLOAT32);
  test_block(GRACE_BFLOAT16);
  grace_vm_free(vm);
  return tap_done();
}
