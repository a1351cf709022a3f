/* test_ir.c: the IR without Lua: builder and type inference, the printed form against hand-written
 * text, parse/print round trips, the verifier rejecting broken IR, and running IR on the CPU. */
#include <stdlib.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm;

/* Parses text, prints it back, and checks the print is the text itself. */
static grace_ir *roundtrip(const char *text, const char *what) {
  grace_ir *ir = NULL;
  grace_status st = grace_ir_parse(vm, text, &ir);
  if (!ok(st == GRACE_OK, "%s parses", what)) { printf("# %s\n", grace_last_error(vm)); return NULL; }
  is_str(grace_ir_text(ir), text, "%s prints back as written", what);
  return ir;
}

static void test_builder(void) {
  grace_ir *ir = grace_ir_new(vm, "mlp");
  grace_value x, w, s, l, mm, add, mul, mx[2];
  int64_t xs[] = {4, 8}, ws[] = {8, 3};
  ok(grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 2, xs, &x) == GRACE_OK, "input");
  grace_tensor *wt = NULL;
  float wv[24];
  for (int i = 0; i < 24; i++) wv[i] = (float)(i % 5) - 2;
  grace_tensor_from_data(vm, GRACE_FLOAT32, 2, ws, GRACE_FLOAT32, wv, &wt);
  ok(grace_ir_const(ir, wt, &w) == GRACE_OK, "const");
  ok(grace_ir_scalar(ir, GRACE_FLOAT32, &s) == GRACE_OK, "scalar");
  ok(grace_ir_literal(ir, 2, 1, &l) == GRACE_OK, "literal");
  grace_ir_set_location(ir, "mlp.lua:3");
  ok(grace_ir_op(ir, GRACE_OP_MATMUL, 2, (grace_value[]){x, w}, NULL, 1, &mm) == GRACE_OK, "matmul");
  ok(grace_ir_op(ir, GRACE_OP_ADD, 2, (grace_value[]){mm, s}, NULL, 1, &add) == GRACE_OK, "add scalar");
  grace_ir_set_location(ir, "mlp.lua:4");
  ok(grace_ir_op(ir, GRACE_OP_MUL, 2, (grace_value[]){add, l}, NULL, 1, &mul) == GRACE_OK, "mul literal");
  grace_ir_set_location(ir, NULL);
  grace_attrs a = {.ndims = 1, .dims = {1}, .keepdim = 1};
  ok(grace_ir_op(ir, GRACE_OP_MAX, 1, &mul, &a, 2, mx) == GRACE_OK, "max with indices");
  grace_ir_output(ir, mul);
  grace_ir_output(ir, mx[1]);
  ok(grace_ir_verify(ir) == GRACE_OK, "built IR verifies: %s", grace_last_error(vm));
  /* written by hand from the format described in ir/ir_text.c */
  const char *want =
      "func @mlp {\n"
      "  %0 = input #0 : f32[4,8]\n"
      "  %1 = const #0 : f32[8,3]\n"
      "  %2 = scalar #0 : f32[]\n"
      "  %3 = literal 2 : i64[]\n"
      "  %4 = matmul %0, %1 : f32[4,3]  @\"mlp.lua:3\"\n"
      "  %5 = add %4, %2 : f32[4,3]  @\"mlp.lua:3\"\n"
      "  %6 = mul %5, %3 : f32[4,3]  @\"mlp.lua:4\"\n"
      "  %7, %8 = max %6 {dims=[1], keepdim=1} : f32[4,1], i64[4,1]\n"
      "  return %6, %8\n"
      "}\n";
  is_str(grace_ir_text(ir), want, "printed form");
  /* errors at build time are the eager ones */
  grace_value bad;
  ok(grace_ir_op(ir, GRACE_OP_MATMUL, 2, (grace_value[]){x, x}, NULL, 1, &bad) == GRACE_ESHAPE &&
     strstr(grace_last_error(vm), "[4, 8]"), "matmul shape mismatch at build time: %s", grace_last_error(vm));
  ok(grace_ir_op(ir, GRACE_OP_ADD, 2, (grace_value[]){x, 99}, NULL, 1, &bad) == GRACE_EARG, "undefined value rejected");

  /* run: out = (x @ w + s) * 2 and the argmax along dim 1 */
  float xv[32], sv = 0.5f;
  for (int i = 0; i < 32; i++) xv[i] = (float)((i * 7) % 11) - 5;
  grace_tensor *xt = NULL, *st = NULL, *out[2] = {NULL, NULL};
  grace_tensor_from_data(vm, GRACE_FLOAT32, 2, xs, GRACE_FLOAT32, xv, &xt);
  grace_tensor_from_data(vm, GRACE_FLOAT32, 0, NULL, GRACE_FLOAT32, &sv, &st);
  grace_status rs = grace_ir_run(ir, 2, (grace_tensor *[]){xt, st}, 2, out);
  if (rs != GRACE_OK && strstr(grace_last_error(vm), "not implemented")) {
    skip("CPU kernels for matmul/max not built yet");
    skip("CPU kernels for matmul/max not built yet");
  } else {
    ok(rs == GRACE_OK, "run: %s", grace_last_error(vm));
    float got[12];
    int64_t idx[4];
    grace_tensor_read(vm, out[0], GRACE_FLOAT32, got);
    grace_tensor_read(vm, out[1], GRACE_INT64, idx);
    int good = 1, gidx = 1;
    for (int r = 0; r < 4; r++) {
      int best = 0;
      float bv = -1e30f;
      for (int c = 0; c < 3; c++) {
        double acc = 0;
        for (int k = 0; k < 8; k++) acc += xv[r * 8 + k] * wv[k * 3 + c];
        double want_v = (acc + 0.5) * 2;
        good &= fabs(got[r * 3 + c] - want_v) < 1e-4;
        if (want_v > bv) { bv = (float)want_v; best = c; }
      }
      gidx &= idx[r] == best;
    }
    ok(good && gidx, "run gives (x @ w + s) * 2 and its argmax");
  }
  for (int i = 0; i < 2; i++) grace_tensor_release(out[i]);
  /* a captured tensor written in place makes the IR stale */
  grace_attrs fill = {.a = 1};
  grace_run(vm, GRACE_OP_FILL_, 1, &wt, &fill, 0, NULL);
  ok(grace_ir_run(ir, 2, (grace_tensor *[]){xt, st}, 1, out) == GRACE_EARG && strstr(grace_last_error(vm), "stale"),
     "modified capture is detected: %s", grace_last_error(vm));
  int64_t other[] = {4, 9};
  grace_tensor *wrong = NULL;
  grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 2, other, &wrong);
  grace_ir_bind_const(ir, 0, wt);   /* re-capture at the new version */
  ok(grace_ir_run(ir, 2, (grace_tensor *[]){wrong, st}, 1, out) == GRACE_ESHAPE && strstr(grace_last_error(vm), "[4, 9]"),
     "input of the wrong shape: %s", grace_last_error(vm));
  grace_tensor_release(wrong);
  grace_tensor_release(xt);
  grace_tensor_release(st);
  grace_tensor_release(wt);
  is_int(grace_ir_count(ir, "insts"), 8, "instruction count");
  grace_ir_free(ir);
}

static void test_text(void) {
  grace_ir *ir = roundtrip(
      "func @views {\n"
      "  sym s1 hint=7 min=2\n"
      "  %0 = input #0 : f32[2,3,4]\n"
      "  %1 = transpose %0 {dims=[0,2]} : f32[4,3,2]\n"
      "  %2 = reshape %1 {shape=[12,-1]} : f32[12,2]\n"
      "  %3 = sum %2 {dims=[-1]} : f32[12]\n"
      "  %4 = narrow %0 {dims=[1], i0=1, i1=2} : f32[2,2,4]\n"
      "  %5 = unsqueeze %3 {dims=[0]} : f32[1,12]\n"
      "  %6 = expand %5 {shape=[5,12]} : f32[5,12]\n"
      "  %7 = cast %6 {dtype=f16} : f16[5,12]\n"
      "  %8 = layer_norm %7, _, _ {a=1.0000000000000001e-05} : f16[5,12]\n"
      "  %9 = full {shape=[2,2], a=3, dtype=i32} : i32[2,2]\n"
      "  %10 = scalar #0 : f32[]\n"
      "  %11 = div %9, %10 : f32[2,2]\n"
      "  %12 = lt %11, %10 : bool[2,2]\n"
      "  %13 = sum %12 : i64[]\n"
      "  %14 = input #1 : i64[s1=7]\n"
      "  %15 = neg %14 : i64[s1=7]\n"
      "  return %8, %13, %15\n"
      "}\n", "views and promotion");
  ok(ir && grace_ir_verify(ir) == GRACE_OK, "parsed IR verifies: %s", grace_last_error(vm));
  grace_ir_free(ir);
  ir = roundtrip(
      "func @inplace {\n"
      "  %0 = input #0 : f32[3]\n"
      "  %1 = literal 1.5 : f64[]\n"
      "  %2 = copy_ %0, %1 : f32[3]\n"
      "  %3 = softmax %2 {dims=[0]} : f32[3]\n"
      "  %4, %5 = topk %3 {dims=[0], i0=2} : f32[2], i64[2]\n"
      "  return %2, %4, %5\n"
      "}\n", "in-place and multi-result");
  ok(ir && grace_ir_verify(ir) == GRACE_OK, "verifies");
  grace_ir_free(ir);

  /* parsing verifies: a result typed differently from inference is an error */
  ir = NULL;
  ok(grace_ir_parse(vm, "func @bad {\n  %0 = input #0 : i32[3]\n  %1 = exp %0 : i32[3]\n  return %1\n}\n", &ir) != GRACE_OK &&
     !ir, "wrongly typed IR does not parse");
  ok(strstr(grace_last_error(vm), "f32[3]") && strstr(grace_last_error(vm), "verify"),
     "verify: exp of int32 must be f32: %s", grace_last_error(vm));
  ir = NULL;
  ok(grace_ir_parse(vm, "func @bad {\n  %0 = input #0 : f32[3]\n  %1 = add %0, %2 : f32[3]\n  return %1\n}\n", &ir) != GRACE_OK &&
     strstr(grace_last_error(vm), "before it is defined"), "use before definition is rejected: %s", grace_last_error(vm));
  ok(grace_ir_parse(vm, "func @bad {\n  %0 = frobnicate : f32[3]\n  return %0\n}\n", &ir) != GRACE_OK &&
     strstr(grace_last_error(vm), "line 2"), "unknown op names the line: %s", grace_last_error(vm));
  ok(grace_ir_parse(vm, "func @bad {\n  %0 = input #0 : f32[3\n", &ir) != GRACE_OK, "truncated text is an error");
  ir = NULL;
  ok(grace_ir_parse(vm, "func @bad {\n  %0 = input #0 : f32[2,3]\n  %1 = sum %0 {dims=[1,1]} : f32[2]\n  return %1\n}\n",
                    &ir) != GRACE_OK && !ir && strstr(grace_last_error(vm), "more than once"), "repeated dim caught by verify");
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  if (!vm) { printf("1..0 # SKIP no VM: %s\n", err); return 1; }
  test_builder();
  test_text();
  grace_vm_free(vm);
  return tap_done();
}
