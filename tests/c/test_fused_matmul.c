/* test_fused_matmul.c: matmul groups on the CPU (cpu/cpu_fused.c, the packed GEMM of cpu/cpu_matmul.c, the plan
 * of cpu/cpu_interp.c). Each program is a linear layer (x @ W^T + b, a captured weight) with a pointwise epilogue,
 * run by grace_ir_run (which fuses it) and by cpu_fused_matmul_run directly (right operand packed per call);
 * the reference is eager: the same ops one by one through grace_run, written out here, never the code under
 * test. Results must be bit for bit the reference. Covered: sizes that end in partial row and column panels,
 * K over one KC block (256), one row (matrix-vector: eager's path), one column, a transposed (strided) x, a
 * batched x that folds into rows and one that does not, a weight stored [K,N] (not transposed), tanh-GELU
 * and a residual read from another input, comparisons and where in the epilogue, the q/k/v projections as
 * one horizontal group, a weight changed in place between calls (the kept panels are packed again), the
 * large product that runs on the worker pool, and every GEMM micro-kernel variant (rows 2..26) against an
 * FMA-chain sum written out here. A diag line times a fused MLP layer against eager. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "ir/ir.h"
#include "cpu/cpu_fused.h"
#include "tap.h"
#include "c/ir_build.h"

static grace_vm *vm;
static ir_build bld;   /* bld.ir: the program being built */

#define F32_SEED 0x9E3779B97F4A7C15ull
#include "c/f32_data.h"

/* ---- eager: one grace_run per op (the reference) ---- */
static grace_tensor *e_op(grace_op op, int n, grace_tensor *a, grace_tensor *b, grace_tensor *c, const grace_attrs *at) {
  grace_tensor *in[3] = {a, b, c}, *o = NULL;
  if (grace_run(vm, op, n, in, at, 1, &o) != GRACE_OK) { printf("# eager %s: %s\n", grace_op_name(op), grace_last_error(vm)); return NULL; }
  return o;
}
static grace_tensor *e_t(grace_tensor *w) {   /* w:t() */
  grace_attrs tr = {.ndims = 2, .dims = {0, 1}};
  return e_op(GRACE_OP_TRANSPOSE, 1, w, NULL, NULL, &tr);
}
static grace_tensor *e_lit(double v) {
  grace_tensor *t = NULL;
  grace_tensor_scalar(vm, v, 0, &t);
  return t;
}

/* ---- the IR builder ---- */
static grace_value b_in(int ndim, const int64_t *sizes) { return irb_input(&bld, GRACE_FLOAT32, ndim, sizes); }
static grace_value b_const(grace_tensor *t) { return irb_const(&bld, t); }
static grace_value b_lit(double x) { return irb_lit(&bld, x, 0); }
static grace_value b_op(grace_op op, int n, grace_value a, grace_value b, grace_value c, const grace_attrs *at) {
  return irb_op(&bld, op, n, a, b, c, at, 1, NULL);
}
static grace_value b_t(grace_value w) {
  grace_attrs tr = {.ndims = 2, .dims = {0, 1}};
  return b_op(GRACE_OP_TRANSPOSE, 1, w, -1, -1, &tr);
}


/* The instructions of the matmul group ending at out_value: the matmul reading `mm`'s instruction and every
 * non-view instruction after it up to out_value's. */
static int group_insts(const grace_ir *ir, grace_value mm, grace_value out_value, int32_t *insts) {
  int n = 0;
  for (int i = ir->vals[mm].inst; i <= ir->vals[out_value].inst; i++) {
    int op = ir->insts[i].op;
    if (op < GRACE_NOPS && grace_op_kind((grace_op)op) != GRACE_KIND_VIEW) insts[n++] = i;
  }
  return n;
}

/* Runs bld.ir (inputs in) through grace_ir_run twice (the second call reuses the kept panels) and, where mm >= 0,
 * the group mm .. output 0 through cpu_fused_matmul_run; compares all with ref (output 0). */
static void check(const char *what, int nin, grace_tensor **in, grace_value mm, grace_tensor **ref, int nref) {
  char name[200];
  if (!ok(!bld.err && grace_ir_verify(bld.ir) == GRACE_OK, "%s: the program builds", what)) { printf("# %s\n", grace_last_error(vm)); return; }
  for (int call = 0; call < 2; call++) {
    grace_tensor *out[4] = {NULL};
    grace_status st = grace_ir_run(bld.ir, nin, in, nref, out);
    snprintf(name, sizeof name, "%s: grace_ir_run call %d", what, call + 1);
    if (!ok(st == GRACE_OK, "%s runs", name)) printf("# %s\n", grace_last_error(vm));
    /* the interpreter ran each output as the root of a fused group (plan < -1), not op by op */
    int fused = bld.ir->plan != NULL;
    for (int k = 0; k < nref && fused; k++) fused = bld.ir->plan[bld.ir->vals[bld.ir->outputs[k]].inst] <= -2;
    if (call == 0) ok(fused, "%s: each output is the root of a fused group in the plan", what);
    for (int k = 0; k < nref; k++) {
      char nk[240];
      snprintf(nk, sizeof nk, "%s output %d", name, k + 1);
      if (st == GRACE_OK) same_bits(nk, ref[k], out[k]);
      grace_tensor_release(out[k]);
    }
  }
  if (mm < 0) return;
  /* directly: the values the group reads are the program's inputs, captures and views of them */
  grace_tensor **vals = calloc((size_t)bld.ir->nval, sizeof *vals);
  int32_t *insts = calloc((size_t)bld.ir->ninst, sizeof *insts);
  grace_status st = vals && insts ? GRACE_OK : GRACE_ENOMEM;
  for (int i = 0; i < bld.ir->ninst && st == GRACE_OK; i++) {
    const ir_inst *k = &bld.ir->insts[i];
    int32_t r = k->first_result;
    if (k->op == IR_OP_INPUT) { vals[r] = in[k->input_index]; grace_tensor_retain(vals[r]); }
    else if (k->op == IR_OP_CONST) { vals[r] = bld.ir->consts[k->input_index].t; grace_tensor_retain(vals[r]); }
    else if (k->op < GRACE_NOPS && grace_op_kind((grace_op)k->op) == GRACE_KIND_VIEW)
      st = grace_run(vm, (grace_op)k->op, 1, &vals[bld.ir->args[k->first_arg]], &k->attrs, 1, &vals[r]);
  }
  grace_tensor *got = NULL;
  int n = group_insts(bld.ir, mm, bld.ir->outputs[0], insts);
  if (st == GRACE_OK) st = cpu_fused_matmul_run(vm, bld.ir, insts, n, vals, NULL, bld.ir->outputs[0], &got);
  snprintf(name, sizeof name, "%s: cpu_fused_matmul_run (%d instructions)", what, n);
  if (ok(st == GRACE_OK, "%s runs", name)) same_bits(name, ref[0], got);
  else printf("# %s\n", grace_last_error(vm));
  grace_tensor_release(got);
  for (int v = 0; vals && v < bld.ir->nval; v++) grace_tensor_release(vals[v]);
  free(vals);
  free(insts);
}

/* gelu(x @ W^T + b) (flag: tanh GELU) for x of shape xs (xnd dims, last K), W [N,K], b [N]; x is made as given
 * or, with xt, as the transpose of a [K, M] tensor (a strided view). */
static void test_linear(const char *what, int xnd, const int64_t *xs, int64_t N, int flag, int xt) {
  int64_t K = xs[xnd - 1], ws[2] = {N, K};
  grace_tensor *W = randt(2, ws, -0.2f, 0.2f), *bias = randt(1, &N, -1.0f, 1.0f), *x = NULL, *base = NULL;
  if (xt == 2) {   /* [bld.ir, M, K] as the transpose of [M, bld.ir, K]: batch and row dims do not fold into one run */
    int64_t bs[3] = {xs[1], xs[0], K};
    grace_attrs tr = {.ndims = 2, .dims = {0, 1}};
    base = randt(3, bs, -2.0f, 2.0f);
    x = base ? e_op(GRACE_OP_TRANSPOSE, 1, base, NULL, NULL, &tr) : NULL;
    ok(x && !grace_tensor_is_contiguous(x), "%s: x is a strided view", what);
  } else if (xt) {
    int64_t bs[2] = {K, xs[0]};
    base = randt(2, bs, -2.0f, 2.0f);
    x = base ? e_t(base) : NULL;
    ok(x && !grace_tensor_is_contiguous(x), "%s: x is a strided view", what);
  } else x = randt(xnd, xs, -2.0f, 2.0f);
  grace_attrs g = {.flag = flag};
  grace_tensor *wt = W ? e_t(W) : NULL, *mm = x && wt ? e_op(GRACE_OP_MATMUL, 2, x, wt, NULL, NULL) : NULL;
  grace_tensor *ad = mm ? e_op(GRACE_OP_ADD, 2, mm, bias, NULL, NULL) : NULL;
  grace_tensor *ref = ad ? e_op(GRACE_OP_GELU, 1, ad, NULL, NULL, &g) : NULL;
  bld.ir = grace_ir_new(vm, "linear");
  bld.err = !bld.ir || !ref;
  grace_value vx = b_in(xnd, xs), vm_ = b_op(GRACE_OP_MATMUL, 2, vx, b_t(b_const(W)), -1, NULL);
  grace_value y = b_op(GRACE_OP_GELU, 1, b_op(GRACE_OP_ADD, 2, vm_, b_const(bias), -1, NULL), -1, -1, &g);
  if (grace_ir_output(bld.ir, y) != GRACE_OK) bld.err = 1;
  check(what, 1, &x, vm_, &ref, 1);
  grace_ir_free(bld.ir);
  grace_tensor *all[] = {W, bias, x, base, wt, mm, ad, ref};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) grace_tensor_release(all[i]);
}

/* relu-like where, comparisons and a residual: where(h > 0, h, 0.1 h) + r with h = x @ W + b, W stored [K, N]. */
static void test_residual(int64_t M, int64_t K, int64_t N) {
  int64_t xs[2] = {M, K}, ws[2] = {K, N}, os[2] = {M, N};
  grace_tensor *x = randt(2, xs, -1.0f, 1.0f), *W = randt(2, ws, -0.3f, 0.3f), *bias = randt(1, &N, -0.5f, 0.5f);
  grace_tensor *r = randt(2, os, -1.0f, 1.0f), *zero = e_lit(0.0), *tenth = e_lit(0.1);
  grace_tensor *mm = e_op(GRACE_OP_MATMUL, 2, x, W, NULL, NULL), *h = mm ? e_op(GRACE_OP_ADD, 2, mm, bias, NULL, NULL) : NULL;
  grace_tensor *c = h ? e_op(GRACE_OP_GT, 2, h, zero, NULL, NULL) : NULL, *s = h ? e_op(GRACE_OP_MUL, 2, h, tenth, NULL, NULL) : NULL;
  grace_tensor *w = c && s ? e_op(GRACE_OP_WHERE, 3, c, h, s, NULL) : NULL, *ref = w ? e_op(GRACE_OP_ADD, 2, w, r, NULL, NULL) : NULL;
  bld.ir = grace_ir_new(vm, "residual");
  bld.err = !bld.ir || !ref;
  grace_value vx = b_in(2, xs), vr = b_in(2, os), vmm = b_op(GRACE_OP_MATMUL, 2, vx, b_const(W), -1, NULL);
  grace_value vh = b_op(GRACE_OP_ADD, 2, vmm, b_const(bias), -1, NULL);
  grace_value vw = b_op(GRACE_OP_WHERE, 3, b_op(GRACE_OP_GT, 2, vh, b_lit(0.0), -1, NULL), vh,
                        b_op(GRACE_OP_MUL, 2, vh, b_lit(0.1), -1, NULL), NULL);
  if (grace_ir_output(bld.ir, b_op(GRACE_OP_ADD, 2, vw, vr, -1, NULL)) != GRACE_OK) bld.err = 1;
  char what[120];
  snprintf(what, sizeof what, "where/compare epilogue with a residual, W stored [K,N], %lldx%lldx%lld", (long long)M,
           (long long)K, (long long)N);
  grace_tensor *in[2] = {x, r};
  check(what, 2, in, vmm, &ref, 1);
  grace_ir_free(bld.ir);
  grace_tensor *all[] = {x, W, bias, r, zero, tenth, mm, h, c, s, w, ref};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) grace_tensor_release(all[i]);
}

/* q, k, v = x @ Wq^T + bq, ...: one horizontal group, three outputs. */
static void test_horizontal(void) {
  int64_t xs[3] = {2, 9, 40}, ws[2] = {24, 40}, nb = 24;
  grace_tensor *x = randt(3, xs, -1.0f, 1.0f), *W[3], *bs[3], *ref[3];
  bld.ir = grace_ir_new(vm, "qkv");
  bld.err = !bld.ir;
  grace_value vx = b_in(3, xs);
  for (int i = 0; i < 3; i++) {
    W[i] = randt(2, ws, -0.5f, 0.5f);
    bs[i] = randt(1, &nb, -0.5f, 0.5f);
    grace_tensor *wt = e_t(W[i]), *mm = wt ? e_op(GRACE_OP_MATMUL, 2, x, wt, NULL, NULL) : NULL;
    ref[i] = mm ? e_op(GRACE_OP_ADD, 2, mm, bs[i], NULL, NULL) : NULL;
    if (!ref[i]) bld.err = 1;
    grace_tensor_release(wt); grace_tensor_release(mm);
    grace_value y = b_op(GRACE_OP_ADD, 2, b_op(GRACE_OP_MATMUL, 2, vx, b_t(b_const(W[i])), -1, NULL), b_const(bs[i]), -1, NULL);
    if (grace_ir_output(bld.ir, y) != GRACE_OK) bld.err = 1;
  }
  check("q/k/v projections (a horizontal group), x [2,9,40]", 1, &x, -1, ref, 3);
  grace_ir_free(bld.ir);
  grace_tensor_release(x);
  for (int i = 0; i < 3; i++) { grace_tensor_release(W[i]); grace_tensor_release(bs[i]); grace_tensor_release(ref[i]); }
}

/* A captured weight changed in place between calls: the kept panels must not be reused. */
static void test_weight_update(void) {
  int64_t xs[2] = {10, 70}, ws[2] = {33, 70}, N = 33;
  grace_tensor *x = randt(2, xs, -1.0f, 1.0f), *W = randt(2, ws, -0.5f, 0.5f), *bias = randt(1, &N, -0.5f, 0.5f);
  bld.ir = grace_ir_new(vm, "update");
  bld.err = !bld.ir;
  grace_value y = b_op(GRACE_OP_ADD, 2, b_op(GRACE_OP_MATMUL, 2, b_in(2, xs), b_t(b_const(W)), -1, NULL), b_const(bias), -1, NULL);
  if (grace_ir_output(bld.ir, y) != GRACE_OK) bld.err = 1;
  grace_tensor *out = NULL;
  ok(!bld.err && grace_ir_run(bld.ir, 1, &x, 1, &out) == GRACE_OK, "weight update: the first call runs (panels kept)");
  grace_tensor_release(out); out = NULL;
  /* W = -1.5 W, copied in place (its version moves): the program accepts the new contents, the panels are
   * packed again */
  grace_tensor *k = e_lit(-1.5), *scaled = e_op(GRACE_OP_MUL, 2, W, k, NULL, NULL);
  grace_tensor *args[2] = {W, scaled};
  ok(scaled && grace_run(vm, GRACE_OP_COPY_, 2, args, NULL, 0, NULL) == GRACE_OK, "weight update: W changed in place");
  grace_ir_recapture(bld.ir);
  grace_tensor *wt = e_t(W), *mm = wt ? e_op(GRACE_OP_MATMUL, 2, x, wt, NULL, NULL) : NULL;
  grace_tensor *ref = mm ? e_op(GRACE_OP_ADD, 2, mm, bias, NULL, NULL) : NULL;
  grace_status st = grace_ir_run(bld.ir, 1, &x, 1, &out);
  if (ok(st == GRACE_OK, "weight update: the call after the change runs")) same_bits("weight update: the new weight is used", ref, out);
  else printf("# %s\n", grace_last_error(vm));
  grace_tensor *all[] = {x, W, bias, out, k, scaled, wt, mm, ref};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) grace_tensor_release(all[i]);
  grace_ir_free(bld.ir);
}

/* Every micro-kernel variant (full tiles, fewer rows, two row panels at once, edge columns) against the sum
 * they all compute, written out here with fmaf: per 256-long block of k, a chain of FMAs in k order from 0,
 * blocks added in order. Compared as floats (a -0 sum may store +0). Where the CPU lacks FMA the portable
 * kernel rounds each product, so only closeness is checked there. Both eager's matmul and the fused group run. */
static void test_kernels(void) {
  int fma = 0;
#if defined(__x86_64__)
  fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  int bad = 0, badf = 0, cases = 0;
  double worst = 0;
  for (int64_t M = 2; M <= 26; M++)   /* one row is a matrix-vector product: another sum */
    for (int v = 0; v < 2; v++) {
      int64_t N = v ? 37 : 16, K = v ? 300 : 40, xs[2] = {M, K}, ws[2] = {N, K};
      grace_tensor *x = randt(2, xs, -1.0f, 1.0f), *W = randt(2, ws, -1.0f, 1.0f);
      float *a = malloc(sizeof(float) * (size_t)(M * K)), *w = malloc(sizeof(float) * (size_t)(N * K));
      float *got = malloc(sizeof(float) * (size_t)(M * N)), *gotf = malloc(sizeof(float) * (size_t)(M * N));
      grace_tensor *wt = W ? e_t(W) : NULL, *mm = x && wt ? e_op(GRACE_OP_MATMUL, 2, x, wt, NULL, NULL) : NULL, *fo = NULL;
      bld.ir = grace_ir_new(vm, "kernels");
      bld.err = !bld.ir;
      grace_value y = b_op(GRACE_OP_MATMUL, 2, b_in(2, xs), b_t(b_const(W)), -1, NULL);
      if (grace_ir_output(bld.ir, b_op(GRACE_OP_ADD, 2, y, b_lit(0.0), -1, NULL)) != GRACE_OK) bld.err = 1;
      if (!a || !w || !got || !gotf || !mm || bld.err || grace_ir_run(bld.ir, 1, &x, 1, &fo) != GRACE_OK ||
          grace_tensor_read(vm, x, GRACE_FLOAT32, a) != GRACE_OK || grace_tensor_read(vm, W, GRACE_FLOAT32, w) != GRACE_OK ||
          grace_tensor_read(vm, mm, GRACE_FLOAT32, got) != GRACE_OK || grace_tensor_read(vm, fo, GRACE_FLOAT32, gotf) != GRACE_OK)
        bad++;
      else
        for (int64_t i = 0; i < M; i++)
          for (int64_t j = 0; j < N; j++) {
            float c = 0;
            for (int64_t pc = 0; pc < K; pc += 256) {
              float s = 0;
              for (int64_t k = pc; k < K && k < pc + 256; k++) s = fmaf(a[i * K + k], w[j * K + k], s);
              c = pc ? c + s : s;
            }
            float g = got[i * N + j], gf = gotf[i * N + j] - 0.0f;   /* the program added 0 */
            double d = fabs((double)g - c);
            if (d > worst) worst = d;
            if (fma ? g != c : d > 1e-4) bad++;
            if (fma ? gf != c + 0.0f : fabs((double)gf - c) > 1e-4) {
              if (!badf) printf("# fused: M %lld N %lld K %lld at %lld,%lld: %a, the sum %a\n", (long long)M, (long long)N,
                                (long long)K, (long long)i, (long long)j, gf, c);
              badf++;
            }
          }
      cases++;
      grace_tensor *all[] = {x, W, wt, mm, fo};
      for (size_t i = 0; i < sizeof all / sizeof *all; i++) grace_tensor_release(all[i]);
      free(a); free(w); free(got); free(gotf);
      grace_ir_free(bld.ir);
    }
  ok(bad == 0, "GEMM kernels: eager matmul equals the FMA-chain sum%s for M = 2..26, N 16 and 37, K 40 and 300 (%d "
     "products, %d wrong, largest difference %g)", fma ? " exactly" : " to 1e-4", cases, bad, worst);
  ok(badf == 0, "GEMM kernels: the fused program (packed weight) equals it too (%d wrong)", badf);
}

static double now_ms(void) { return grace_clock() * 1e3; }

/* gelu(x @ W^T + b), x [8,256], W [256,256]: best of 200 calls fused (grace_ir_run) and eager (diag only). */
static void diag_time(void) {
  int64_t xs[2] = {8, 256}, ws[2] = {256, 256}, N = 256;
  grace_tensor *x = randt(2, xs, -1.0f, 1.0f), *W = randt(2, ws, -0.1f, 0.1f), *bias = randt(1, &N, -0.5f, 0.5f);
  bld.ir = grace_ir_new(vm, "time");
  bld.err = !bld.ir || !x || !W || !bias;
  grace_value y = b_op(GRACE_OP_GELU, 1, b_op(GRACE_OP_ADD, 2, b_op(GRACE_OP_MATMUL, 2, b_in(2, xs), b_t(b_const(W)), -1, NULL),
                                               b_const(bias), -1, NULL), -1, -1, NULL);
  if (grace_ir_output(bld.ir, y) != GRACE_OK) bld.err = 1;
  double bf = 1e30, be = 1e30;
  for (int r = 0; r < 200 && !bld.err; r++) {
    grace_tensor *o = NULL;
    double t0 = now_ms();
    grace_ir_run(bld.ir, 1, &x, 1, &o);
    double t1 = now_ms();
    grace_tensor *wt = e_t(W), *mm = e_op(GRACE_OP_MATMUL, 2, x, wt, NULL, NULL), *ad = e_op(GRACE_OP_ADD, 2, mm, bias, NULL, NULL);
    grace_tensor *g = e_op(GRACE_OP_GELU, 1, ad, NULL, NULL, NULL);
    double t2 = now_ms();
    if (t1 - t0 < bf) bf = t1 - t0;
    if (t2 - t1 < be) be = t2 - t1;
    grace_tensor *all[] = {o, wt, mm, ad, g};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) grace_tensor_release(all[i]);
  }
  printf("# diag: gelu(x @ W^T + b), x [8,256], W [256,256]: eager %.1f us, fused %.1f us (%.2fx)\n", be * 1e3, bf * 1e3,
         bf > 0 ? be / bf : 0.0);
  grace_tensor_release(x); grace_tensor_release(W); grace_tensor_release(bias);
  grace_ir_free(bld.ir);
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  bld.vm = vm;
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  test_linear("linear+gelu 8x256x256 (the MLP layer)", 2, (int64_t[]){8, 256}, 256, 0, 0);
  test_linear("linear+gelu 7x300x37 (partial row and column panels)", 2, (int64_t[]){7, 300}, 37, 0, 0);
  test_linear("linear+tanh-gelu 13x520x50 (three KC blocks)", 2, (int64_t[]){13, 520}, 50, 1, 0);
  test_linear("linear+gelu 1x64x48 (one row: eager's matrix-vector path)", 2, (int64_t[]){1, 64}, 48, 0, 0);
  test_linear("linear+gelu 5x31x1 (one column)", 2, (int64_t[]){5, 31}, 1, 0, 0);
  test_linear("linear+gelu, x transposed [19,45] (strided rows)", 2, (int64_t[]){19, 45}, 29, 0, 1);
  test_linear("linear+gelu, x batched [3,5,64] (folds into 15 rows)", 3, (int64_t[]){3, 5, 64}, 40, 1, 0);
  test_linear("linear+gelu, x [4,6,33] a transposed view (does not fold: eager's matmul)", 3, (int64_t[]){4, 6, 33}, 20, 0, 2);
  test_linear("linear+gelu 0x16x8 (empty)", 2, (int64_t[]){0, 16}, 8, 0, 0);
  test_linear("linear+gelu 300x200x700 (the worker pool)", 2, (int64_t[]){300, 200}, 700, 0, 0);
  test_residual(11, 23, 17);
  test_residual(64, 128, 96);
  test_horizontal();
  test_weight_update();
  test_kernels();
  diag_time();
  grace_vm_free(vm);
  return tap_done();
}
