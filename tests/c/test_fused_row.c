/* test_fused_row.c: row groups on the CPU (cpu_fused_row_run in cpu/cpu_fused.c, planned by cpu/cpu_interp.c):
 * reductions over the last dim with their pointwise producers and broadcast consumers, one pass per row. The
 * programs are the decomposed softmax, layer_norm (captured weight and bias), rms_norm and a row norm with a
 * reduced-shape output (no keepdim); each runs through grace_ir_run (which must plan it as one fused group)
 * and through cpu_fused_row_run directly, and must be bit for bit eager: the same ops one by one through
 * grace_run, written out here. Shapes: a 16x16 attention row, [3,7,33] (odd, 3-d), [5,2000] (rows over one
 * 1024-element chunk), [40,300] with a transposed (strided) input that the max reads in place, also with
 * rows of 1500 (eager reads those in 1024-element chunks), and 4096 rows of 64 (the worker pool). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "ir/ir.h"
#include "cpu/cpu_fused.h"
#include "tap.h"

static grace_vm *vm;
static grace_ir *B;
static int berr;

#define F32_SEED 0x2545F4914F6CDD1Dull
#include "c/f32_data.h"

/* ---- each op both ways: eager now (the reference) and appended to the program ---- */
typedef struct dual { grace_tensor *t; grace_value v; } dual;
static grace_tensor *owned[256];
static int nowned;
static void keep(grace_tensor *t) { if (t && nowned < 256) owned[nowned++] = t; }
static void drop_all(void) { while (nowned) grace_tensor_release(owned[--nowned]); }

static dual d_op(grace_op op, int n, dual a, dual b, const grace_attrs *at) {
  dual r = {NULL, -1};
  grace_tensor *in[2] = {a.t, b.t}, *o[2] = {NULL, NULL};
  grace_value vin[2] = {a.v, b.v}, vo[2] = {-1, -1};
  int nout = (op == GRACE_OP_MAX || op == GRACE_OP_MIN) ? 2 : 1;   /* over one dim: values and indices */
  if (berr) return r;
  if (grace_run(vm, op, n, in, at, nout, o) != GRACE_OK) { printf("# eager %s: %s\n", grace_op_name(op), grace_last_error(vm)); berr = 1; return r; }
  keep(o[0]); keep(o[1]);
  if (grace_ir_op(B, op, n, vin, at, nout, vo) != GRACE_OK) { printf("# build: %s\n", grace_last_error(vm)); berr = 1; return r; }
  r.t = o[0];
  r.v = vo[0];
  return r;
}
static dual d_lit(double x) {
  dual r = {NULL, -1};
  if (grace_tensor_scalar(vm, x, 0, &r.t) != GRACE_OK || grace_ir_literal(B, x, 0, &r.v) != GRACE_OK) berr = 1;
  keep(r.t);
  return r;
}
static dual d_input(grace_tensor *t) {
  dual r = {t, -1};
  if (!t || grace_ir_input(B, GRACE_FLOAT32, GRACE_CPU, grace_tensor_ndim(t), grace_tensor_sizes(t), &r.v) != GRACE_OK) berr = 1;
  return r;
}
static dual d_const(grace_tensor *t) {
  dual r = {t, -1};
  if (!t || grace_ir_const(B, t, &r.v) != GRACE_OK) berr = 1;
  return r;
}
#define OP1(o, a) d_op(GRACE_OP_##o, 1, a, (dual){NULL, -1}, NULL)
#define OP2(o, a, b) d_op(GRACE_OP_##o, 2, a, b, NULL)
static dual red(grace_op op, dual x, int keepdim) {
  grace_attrs at = {.ndims = 1, .dims = {-1}, .keepdim = keepdim};
  return d_op(op, 1, x, (dual){NULL, -1}, &at);
}


/* Outputs y; runs the program both ways and compares with y's eager tensor. */
static void check(const char *what, dual y, int nin, grace_tensor **in) {
  if (!ok(!berr && grace_ir_output(B, y.v) == GRACE_OK && grace_ir_verify(B) == GRACE_OK, "%s: the program builds", what)) {
    printf("# %s\n", grace_last_error(vm));
    return;
  }
  char name[240];
  for (int call = 0; call < 2; call++) {
    grace_tensor *out = NULL;
    grace_status st = grace_ir_run(B, nin, in, 1, &out);
    snprintf(name, sizeof name, "%s: grace_ir_run call %d", what, call + 1);
    if (ok(st == GRACE_OK, "%s runs", name)) same_bits(name, y.t, out);
    else printf("# %s\n", grace_last_error(vm));
    if (call == 0)
      ok(B->plan && B->plan[B->vals[y.v].inst] <= -2, "%s: the output is the root of a fused group in the plan", what);
    grace_tensor_release(out);
  }
  /* directly: every computing instruction is a member; inputs and captures are the outside values */
  grace_tensor **vals = calloc((size_t)B->nval, sizeof *vals);
  int32_t *insts = calloc((size_t)B->ninst, sizeof *insts);
  int n = 0;
  for (int i = 0; vals && insts && i < B->ninst; i++) {
    const ir_inst *k = &B->insts[i];
    if (k->op == IR_OP_INPUT) vals[k->first_result] = in[k->input_index];
    else if (k->op == IR_OP_CONST) vals[k->first_result] = B->consts[k->input_index].t;
    else if (k->op < GRACE_NOPS) insts[n++] = i;
  }
  grace_tensor *got = NULL;
  grace_status st = vals && insts ? cpu_fused_row_run(vm, B, insts, n, vals, y.v, &got) : GRACE_ENOMEM;
  snprintf(name, sizeof name, "%s: cpu_fused_row_run (%d instructions)", what, n);
  if (ok(st == GRACE_OK, "%s runs", name)) same_bits(name, y.t, got);
  else printf("# %s\n", grace_last_error(vm));
  grace_tensor_release(got);
  free(vals);
  free(insts);
}

/* x as given, or (transposed) as the transpose of a [L, rows] tensor: rows strided by 1, elements by rows. */
static grace_tensor *make_x(int nd, const int64_t *s, int transposed) {
  if (!transposed) return randt(nd, s, -3.0f, 3.0f);
  int64_t bs[2] = {s[1], s[0]};
  grace_tensor *base = randt(2, bs, -3.0f, 3.0f), *x = NULL;
  grace_attrs tr = {.ndims = 2, .dims = {0, 1}};
  if (base) grace_run(vm, GRACE_OP_TRANSPOSE, 1, &base, &tr, 1, &x);
  grace_tensor_release(base);
  return x;
}

static void test_softmax(const char *what, int nd, const int64_t *s, int transposed) {
  grace_tensor *x = make_x(nd, s, transposed);
  B = grace_ir_new(vm, "softmax");
  berr = !B || !x;
  if (transposed) ok(x && !grace_tensor_is_contiguous(x), "%s: x is a strided view", what);
  dual vx = d_input(x);
  dual m = red(GRACE_OP_MAX, vx, 1);                   /* reads the outside x in place */
  dual e = OP1(EXP, OP2(SUB, vx, m));
  dual y = OP2(DIV, e, red(GRACE_OP_SUM, e, 1));
  check(what, y, 1, &x);
  drop_all();
  grace_tensor_release(x);
  grace_ir_free(B);
}

static void test_layernorm(const char *what, int nd, const int64_t *s) {
  int64_t L = s[nd - 1];
  grace_tensor *x = make_x(nd, s, 0), *w = randt(1, &L, 0.5f, 1.5f), *b = randt(1, &L, -0.5f, 0.5f);
  B = grace_ir_new(vm, "layernorm");
  berr = !B || !x || !w || !b;
  dual vx = d_input(x), vw = d_const(w), vb = d_const(b);
  dual d = OP2(SUB, vx, red(GRACE_OP_MEAN, vx, 1));
  dual var = red(GRACE_OP_MEAN, OP2(MUL, d, d), 1);
  dual y = OP2(ADD, OP2(MUL, OP2(MUL, d, OP1(RSQRT, OP2(ADD, var, d_lit(1e-5)))), vw), vb);
  check(what, y, 1, &x);
  drop_all();
  grace_tensor_release(x); grace_tensor_release(w); grace_tensor_release(b);
  grace_ir_free(B);
}

static void test_rms(const char *what, int nd, const int64_t *s) {
  int64_t L = s[nd - 1];
  grace_tensor *x = make_x(nd, s, 0), *w = randt(1, &L, 0.5f, 1.5f);
  B = grace_ir_new(vm, "rms");
  berr = !B || !x || !w;
  dual vx = d_input(x), vw = d_const(w);
  dual r = OP1(RSQRT, OP2(ADD, red(GRACE_OP_MEAN, OP2(MUL, vx, vx), 1), d_lit(1e-6)));
  dual y = OP2(MUL, OP2(MUL, vx, r), vw);
  check(what, y, 1, &x);
  drop_all();
  grace_tensor_release(x); grace_tensor_release(w);
  grace_ir_free(B);
}

/* sqrt(sum(x*x)) / (max(|x|) + 1) over rows, without keepdim: the output has the reduced shape. */
static void test_rownorm(const char *what, int nd, const int64_t *s) {
  grace_tensor *x = make_x(nd, s, 0);
  B = grace_ir_new(vm, "rownorm");
  berr = !B || !x;
  dual vx = d_input(x);
  dual y = OP2(DIV, OP1(SQRT, red(GRACE_OP_SUM, OP2(MUL, vx, vx), 0)), OP2(ADD, red(GRACE_OP_MAX, OP1(ABS, vx), 0), d_lit(1.0)));
  check(what, y, 1, &x);
  drop_all();
  grace_tensor_release(x);
  grace_ir_free(B);
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  test_softmax("softmax [64,16] (attention rows)", 2, (int64_t[]){64, 16}, 0);
  test_softmax("softmax [3,7,33]", 3, (int64_t[]){3, 7, 33}, 0);
  test_softmax("softmax [5,2000]", 2, (int64_t[]){5, 2000}, 0);
  test_softmax("softmax, x transposed [40,300]", 2, (int64_t[]){40, 300}, 1);
  test_softmax("softmax, x transposed [6,1500] (eager reads the rows in 1024-element chunks)", 2, (int64_t[]){6, 1500}, 1);
  test_softmax("softmax [4096,64] (the worker pool)", 2, (int64_t[]){4096, 64}, 0);
  test_layernorm("layer_norm [16,256] with weight and bias", 2, (int64_t[]){16, 256});
  test_layernorm("layer_norm [2,5,77]", 3, (int64_t[]){2, 5, 77});
  test_rms("rms_norm [9,1030]", 2, (int64_t[]){9, 1030});
  test_rownorm("row norm without keepdim [13,50] (reduced-shape output)", 2, (int64_t[]){13, 50});
  grace_vm_free(vm);
  return tap_done();
}
