/* test_fused.c: the fused CPU executor (cpu/cpu_fused.c). Programs are built with the IR builder; the group
 * of all their pointwise instructions runs through cpu_fused_run and must give bit for bit what grace_ir_run
 * (one grace_run per op) gives: a 40-op equation-of-state chain over three 1M-element inputs (sqrt, div, exp
 * of a clamped value, tanh, erf, gelu, where), broadcasting ([1024,1] with [1,1024] and a 0-d tensor), a
 * transposed input, sizes that end in a partial block, and an empty output. Groups that are not float32
 * pointwise give GRACE_EUNSUPPORTED and no tensor. The chain is timed both ways (a diag line, no assertion). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "grace.h"
#include "ir/ir.h"
#include "ir/ir_fuse.h"
#include "cpu/cpu_fused.h"
#include "tap.h"
#include "c/ir_build.h"

static grace_vm *vm;
static ir_build bld;   /* bld.ir: the program being built */

static grace_value input(grace_dtype dt, int ndim, const int64_t *sizes) { return irb_input(&bld, dt, ndim, sizes); }
static grace_value lit(double x) { return irb_lit(&bld, x, 0); }
static grace_value opn(grace_op op, int n, grace_value a, grace_value b, grace_value c, const grace_attrs *at) {
  return irb_op(&bld, op, n, a, b, c, at, 1, NULL);
}
#define op1(op, a) opn(GRACE_OP_##op, 1, a, -1, -1, NULL)
#define op2(op, a, b) opn(GRACE_OP_##op, 2, a, b, -1, NULL)
static grace_value clampv(grace_value x, double lo, double hi) {
  grace_attrs at = {0};
  at.a = lo; at.b = hi; at.has_a = at.has_b = 1;
  return opn(GRACE_OP_CLAMP, 1, x, -1, -1, &at);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define F32_SEED 88172645463325252ull
#include "c/f32_data.h"

/* The group: every instruction but inputs and literals, in program order. */
static int group_of(const grace_ir *ir, int32_t *insts) {
  int n = 0;
  for (int i = 0; i < ir->ninst; i++)
    if (ir->insts[i].op < GRACE_NOPS) insts[n++] = i;
  return n;
}

/* The values cpu_fused_run reads from outside: the inputs (vals has ir->nval entries, zeroed). */
static void bind_inputs(const grace_ir *ir, grace_tensor **in, grace_tensor **vals) {
  for (int i = 0; i < ir->ninst; i++)
    if (ir->insts[i].op == IR_OP_INPUT) vals[ir->insts[i].first_result] = in[ir->insts[i].input_index];
}

/* Runs bld.ir's output `which` op by op and fused, compares them bit for bit; returns the fused time (ms) of the
 * best of `reps` runs, the op-by-op time in *ref_ms. */
static double check(const char *what, int which, int nin, grace_tensor **in, int reps, double *ref_ms) {
  double best_ref = 1e30, best_fx = 1e30;
  grace_ir *ir = bld.ir;
  if (!ok(!bld.err && grace_ir_verify(ir) == GRACE_OK, "%s: the program builds and verifies", what)) {
    printf("# %s\n", grace_last_error(vm));
    return 0;
  }
  int32_t *insts = calloc((size_t)ir->ninst, sizeof *insts);
  grace_tensor **vals = calloc((size_t)ir->nval, sizeof *vals);
  if (!insts || !vals) { free(insts); free(vals); printf("Bail out! out of memory\n"); exit(1); }
  int ng = group_of(ir, insts);
  bind_inputs(ir, in, vals);
  grace_tensor *ref = NULL, *got = NULL, *outs[4] = {NULL};
  for (int r = 0; r < reps; r++) {
    grace_tensor_release(ref); ref = NULL;
    double t0 = now_ms();
    grace_status st = grace_ir_run(ir, nin, in, which + 1, outs);
    double t1 = now_ms();
    for (int k = 0; k < which; k++) grace_tensor_release(outs[k]);
    ref = outs[which];
    if (st != GRACE_OK) { ok(0, "%s: grace_ir_run: %s", what, grace_last_error(vm)); break; }
    if (t1 - t0 < best_ref) best_ref = t1 - t0;
  }
  for (int r = 0; r < reps; r++) {
    grace_tensor_release(got); got = NULL;
    double t0 = now_ms();
    grace_status st = cpu_fused_run(vm, ir, insts, ng, vals, ir->outputs[which], &got);
    double t1 = now_ms();
    if (st != GRACE_OK) { ok(0, "%s: cpu_fused_run: %s", what, grace_last_error(vm)); break; }
    if (t1 - t0 < best_fx) best_fx = t1 - t0;
  }
  if (ref && got) {
    int64_t n = grace_tensor_numel(ref);
    ok(grace_tensor_ndim(got) == grace_tensor_ndim(ref) && n == grace_tensor_numel(got) &&
       !memcmp(grace_tensor_sizes(got), grace_tensor_sizes(ref), sizeof(int64_t) * (size_t)grace_tensor_ndim(ref)) &&
       grace_tensor_dtype(got) == GRACE_FLOAT32 && grace_tensor_is_contiguous(got),
       "%s: a contiguous float32 result of the same shape (%d instructions fused)", what, ng);
    uint32_t *a = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1)), *b = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (a && b && grace_tensor_read(vm, ref, GRACE_FLOAT32, a) == GRACE_OK &&
        grace_tensor_read(vm, got, GRACE_FLOAT32, b) == GRACE_OK) {
      int64_t diff = 0, first = -1, finite = 0;
      for (int64_t i = 0; i < n; i++) {
        if (a[i] != b[i]) { diff++; if (first < 0) first = i; }
        finite += (a[i] & 0x7f800000u) != 0x7f800000u;
      }
      if (!ok(diff == 0, "%s: bit-identical to running the ops one by one (%lld elements)", what, (long long)n)) {
        float fa, fb;
        memcpy(&fa, &a[first], 4); memcpy(&fb, &b[first], 4);
        printf("# %lld differ; first at %lld: %.9g (eager) vs %.9g (fused)\n", (long long)diff, (long long)first, fa, fb);
      }
      ok(n == 0 || finite * 10 >= n * 9, "%s: the values are mostly finite (%lld of %lld), so the check means something",
         what, (long long)finite, (long long)n);
    } else ok(0, "%s: results read back", what);
    free(a); free(b);
  }
  grace_tensor_release(ref);
  grace_tensor_release(got);
  free(insts);
  free(vals);
  *ref_ms = best_ref;
  return best_fx;
}

/* Equation-of-state style polynomial in temperature t, salinity s, pressure p: Horner steps alternating the
 * inputs, a sqrt(s) branch, a division by p*p, and exp of a clamped value, with a few transcendental ops. */
static void test_chain(void) {
  const int64_t n = 1 << 20;
  bld.ir = grace_ir_new(vm, "eos");
  bld.err = !bld.ir;
  grace_value in[3], acc;
  int nops = 0;
  for (int i = 0; i < 3; i++) in[i] = input(GRACE_FLOAT32, 1, &n);
  grace_value t = in[0], s = in[1], p = in[2];
  acc = op2(ADD, op2(MUL, t, t), op1(SQRT, s)); nops += 3;
  for (int i = 0; nops < 23; i++) {
    acc = op2(MUL, acc, lit(0.25 + 0.0625 * i)); nops++;
    acc = op2(ADD, acc, in[i % 3]); nops++;
  }
  acc = op2(DIV, acc, op2(ADD, op2(MUL, p, p), lit(1.0))); nops += 3;
  grace_value e = op1(EXP, clampv(op2(MUL, acc, lit(-0.01)), -20.0, 20.0)); nops += 3;
  acc = op2(SUB, acc, e); nops++;
  acc = op2(ADD, op1(TANH, acc), op1(ERF, op2(MUL, acc, lit(0.1)))); nops += 4;
  acc = opn(GRACE_OP_WHERE, 3, op2(GT, acc, lit(0.0)), acc, op1(GELU, acc), NULL); nops += 3;
  acc = op2(MUL, acc, op1(RSQRT, op2(ADD, s, lit(1.0)))); nops += 3;
  is_int(nops, 40, "eos: the chain has 40 ops");
  if (grace_ir_output(bld.ir, acc) != GRACE_OK) bld.err = 1;
  grace_tensor *x[3] = {randt(1, &n, -2.0f, 30.0f), randt(1, &n, 0.0f, 40.0f), randt(1, &n, 0.0f, 10.0f)};
  if (!x[0] || !x[1] || !x[2]) bld.err = 1;
  double ref_ms = 0, fx_ms = check("eos", 0, 3, x, 3, &ref_ms);
  /* the group run above is the one the fusion analysis forms: one pointwise kernel of the same instructions */
  ir_fusion f;
  int32_t mine[128];
  if (!bld.err && ir_fuse(bld.ir, &f) == GRACE_OK) {
    int ng = group_of(bld.ir, mine);
    ok(f.ngroup == 1 && f.groups[0].kind == IR_FUSE_POINTWISE && f.groups[0].n == ng &&
       !memcmp(f.members + f.groups[0].first, mine, sizeof(int32_t) * (size_t)ng),
       "eos: ir_fuse makes the same instructions one pointwise group");
    ir_fuse_free(bld.ir, &f);
  } else ok(0, "eos: ir_fuse: %s", grace_last_error(vm));
  printf("# diag: 40-op chain over 3 x %lld float32: op by op (grace_ir_run) %.2f ms, fused %.2f ms (%.1fx)\n",
         (long long)n, ref_ms, fx_ms, fx_ms > 0 ? ref_ms / fx_ms : 0.0);
  for (int i = 0; i < 3; i++) grace_tensor_release(x[i]);
  grace_ir_free(bld.ir);
}

/* [1024,1] with [1,1024] and a 0-d tensor: every operand broadcast, a bool condition, comparisons. */
static void test_broadcast(void) {
  const int64_t col[2] = {1024, 1}, row[2] = {1, 1024};
  bld.ir = grace_ir_new(vm, "bcast");
  bld.err = !bld.ir;
  grace_value a = input(GRACE_FLOAT32, 2, col), b = input(GRACE_FLOAT32, 2, row), z = input(GRACE_FLOAT32, 0, NULL);
  grace_value ca = op1(TANH, op2(MUL, a, lit(3.0)));            /* stays [1024,1] inside the group */
  grace_value x = op2(ADD, op2(MUL, ca, b), z);
  grace_value m = op2(MINIMUM, x, op1(EXP, b));
  grace_value w = opn(GRACE_OP_WHERE, 3, op2(LE, m, z), op1(ERF, m), op2(SUB, m, ca), NULL);
  w = op2(DIV, clampv(w, -0.75, 2.5), op2(ADD, op1(ABS, a), lit(0.5)));
  if (grace_ir_output(bld.ir, w) != GRACE_OK || grace_ir_output(bld.ir, x) != GRACE_OK) bld.err = 1;
  grace_tensor *in[3] = {randt(2, col, -1.0f, 1.0f), randt(2, row, -2.0f, 2.0f), randt(0, NULL, 0.1f, 0.2f)};
  if (!in[0] || !in[1] || !in[2]) bld.err = 1;
  double ref_ms;
  check("broadcast [1024,1] x [1,1024] x []", 0, 3, in, 1, &ref_ms);
  check("broadcast: an intermediate as the output (the rest of the group is skipped)", 1, 3, in, 1, &ref_ms);
  for (int i = 0; i < 3; i++) grace_tensor_release(in[i]);
  grace_ir_free(bld.ir);
}

/* A transposed (strided) input next to a contiguous one; sizes that end in a partial block. */
static void test_strided(int64_t rows, int64_t cols, const char *what) {
  const int64_t shape[2] = {rows, cols}, tshape[2] = {cols, rows};
  bld.ir = grace_ir_new(vm, "strided");
  bld.err = !bld.ir;
  grace_value x = input(GRACE_FLOAT32, 2, shape), y = input(GRACE_FLOAT32, 2, shape);
  grace_value g = opn(GRACE_OP_GELU, 1, op2(MUL, x, y), -1, -1, &(grace_attrs){.flag = 1});
  grace_value r = op2(SUB, op2(ADD, g, op1(SIGMOID, x)), op2(DIV, y, lit(3.0)));
  r = op2(MAXIMUM, r, op1(NEG, op1(SILU, y)));
  /* ops whose float32 expression calls libm (not vectorized): the same calls either way */
  grace_value l = op2(MUL, op1(LOG1P, op1(ABS, y)), op1(COS, x));
  r = op2(ADD, r, op2(POW, op2(ADD, op1(ABS, l), lit(0.5)), op1(ROUND, op1(SIN, y))));
  r = op2(REM, r, lit(2.5));
  if (grace_ir_output(bld.ir, r) != GRACE_OK) bld.err = 1;
  grace_tensor *base = randt(2, tshape, -3.0f, 3.0f), *xt = NULL, *yc = randt(2, shape, -3.0f, 3.0f);
  grace_attrs tr = {.ndims = 2, .dims = {0, 1}};
  if (!base || !yc || grace_run(vm, GRACE_OP_TRANSPOSE, 1, &base, &tr, 1, &xt) != GRACE_OK) bld.err = 1;
  ok(xt && !grace_tensor_is_contiguous(xt), "%s: the input is a strided view", what);
  grace_tensor *in[2] = {xt, yc};
  double ref_ms;
  check(what, 0, 2, in, 1, &ref_ms);
  grace_tensor_release(base); grace_tensor_release(xt); grace_tensor_release(yc);
  grace_ir_free(bld.ir);
}

/* An empty output: a tensor of no elements, nothing run. */
static void test_empty(void) {
  const int64_t shape[2] = {0, 5};
  bld.ir = grace_ir_new(vm, "empty");
  bld.err = !bld.ir;
  grace_value x = input(GRACE_FLOAT32, 2, shape);
  if (grace_ir_output(bld.ir, op1(EXP, op2(ADD, x, lit(1.0)))) != GRACE_OK) bld.err = 1;
  grace_tensor *t = NULL;
  if (grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 2, shape, &t) != GRACE_OK) bld.err = 1;
  double ref_ms;
  check("empty [0,5]", 0, 1, &t, 1, &ref_ms);
  grace_tensor_release(t);
  grace_ir_free(bld.ir);
}

/* Groups cpu_fused_run does not take: it says so with GRACE_EUNSUPPORTED and leaves *out NULL. */
static void expect_unsupported(const char *what, grace_tensor *x) {
  if (!ok(!bld.err && grace_ir_verify(bld.ir) == GRACE_OK, "%s: the program builds", what)) return;
  int32_t insts[64];
  grace_tensor *vals[64] = {0};
  int ng = group_of(bld.ir, insts);
  bind_inputs(bld.ir, &x, vals);
  grace_tensor *out = (grace_tensor *)&bld.err;   /* not NULL: the call must clear it */
  grace_status st = cpu_fused_run(vm, bld.ir, insts, ng, vals, bld.ir->outputs[0], &out);
  is_str(grace_status_name(st), grace_status_name(GRACE_EUNSUPPORTED), "%s: GRACE_EUNSUPPORTED", what);
  ok(out == NULL, "%s: no result", what);
}

static void test_unsupported(void) {
  const int64_t n = 1000;
  grace_tensor *x = NULL;
  /* float64 values */
  bld.ir = grace_ir_new(vm, "f64");
  bld.err = !bld.ir;
  grace_value v = input(GRACE_FLOAT64, 1, &n);
  if (grace_ir_output(bld.ir, op1(EXP, op2(MUL, v, lit(2.0)))) != GRACE_OK) bld.err = 1;
  expect_unsupported("float64 chain", NULL);
  grace_ir_free(bld.ir);
  /* a reduction inside the group */
  bld.ir = grace_ir_new(vm, "reduce");
  bld.err = !bld.ir;
  v = input(GRACE_FLOAT32, 1, &n);
  grace_attrs sum = {.ndims = 1, .dims = {0}};
  if (grace_ir_output(bld.ir, op2(ADD, opn(GRACE_OP_SUM, 1, op1(EXP, v), -1, -1, &sum), lit(1.0))) != GRACE_OK) bld.err = 1;
  expect_unsupported("a group with a sum", NULL);
  grace_ir_free(bld.ir);
  /* int32 arithmetic, and a float32 op over an int32 input (eager converts: not fused) */
  bld.ir = grace_ir_new(vm, "int");
  bld.err = !bld.ir;
  v = input(GRACE_INT32, 1, &n);
  if (grace_ir_output(bld.ir, op2(ADD, v, v)) != GRACE_OK) bld.err = 1;
  expect_unsupported("int32 add", NULL);
  grace_ir_free(bld.ir);
  bld.ir = grace_ir_new(vm, "intexp");
  bld.err = !bld.ir;
  v = input(GRACE_INT32, 1, &n);
  if (grace_ir_output(bld.ir, op1(EXP, v)) != GRACE_OK) bld.err = 1;
  expect_unsupported("exp of an int32 input", NULL);
  grace_ir_free(bld.ir);
  /* a float32 program given a float64 tensor for its input */
  bld.ir = grace_ir_new(vm, "wrongdt");
  bld.err = !bld.ir;
  v = input(GRACE_FLOAT32, 1, &n);
  if (grace_ir_output(bld.ir, op1(EXP, v)) != GRACE_OK) bld.err = 1;
  if (grace_tensor_empty(vm, GRACE_FLOAT64, GRACE_CPU, 1, &n, &x) != GRACE_OK) bld.err = 1;
  expect_unsupported("a float64 tensor bound to a float32 input", x);
  grace_tensor_release(x);
  grace_ir_free(bld.ir);
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  bld.vm = vm;
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  test_chain();
  test_broadcast();
  test_strided(1024, 1024, "transposed [1024,1024]");
  test_strided(37, 333, "transposed [37,333] (a partial last block)");
  test_empty();
  test_unsupported();
  grace_vm_free(vm);
  return tap_done();
}
