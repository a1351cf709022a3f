/* test_pass.c: the pass framework and its passes on IR text: golden outputs written by hand, and the
 * optimized program computing what the original computes on random inputs. */
#include <stdlib.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm;

/* Parses src, runs passes, and compares the printed result with want. Returns the new IR. */
static grace_ir *golden(const char *passes, const char *src, const char *want, const char *what) {
  grace_ir *ir = NULL, *out = NULL;
  if (!ok(grace_ir_parse(vm, src, &ir) == GRACE_OK, "%s: parses", what)) { printf("# %s\n", grace_last_error(vm)); return NULL; }
  grace_status st = grace_ir_pass(ir, passes, &out);
  ok(st == GRACE_OK, "%s: %s runs: %s", what, passes, st == GRACE_OK ? "" : grace_last_error(vm));
  if (out) is_str(grace_ir_text(out), want, "%s: golden output", what);
  grace_ir_free(ir);
  return out;
}

static void test_dce(void) {
  grace_ir *o = golden("dce",
      "func @f {\n"
      "  %0 = input #0 : f32[4]\n"
      "  %1 = input #1 : f32[4]\n"
      "  %2 = exp %0 : f32[4]\n"
      "  %3 = literal 2 : i64[]\n"
      "  %4 = mul %1, %3 : f32[4]\n"
      "  %5 = rand {shape=[3]} : f32[3]\n"
      "  %6 = add %0, %1 : f32[4]  @\"a.lua:3\"\n"
      "  break  @\"a.lua:4\"\n"
      "  %7 = neg %6 : f32[4]\n"
      "  write %1, %4\n"
      "  return %7\n"
      "}\n",
      "func @f {\n"
      "  %0 = input #0 : f32[4]\n"
      "  %1 = input #1 : f32[4]\n"
      "  %2 = literal 2 : i64[]\n"
      "  %3 = mul %1, %2 : f32[4]\n"
      "  %4 = rand {shape=[3]} : f32[3]\n"
      "  %5 = add %0, %1 : f32[4]  @\"a.lua:3\"\n"
      "  break  @\"a.lua:4\"\n"
      "  %6 = neg %5 : f32[4]\n"
      "  write %1, %3\n"
      "  return %6\n"
      "}\n",
      "dce drops exp, keeps the write's value, the random op and the break");
  grace_ir_free(o);
  grace_ir *ir = NULL, *out = NULL;
  grace_ir_parse(vm, "func @g {\n  %0 = input #0 : f32[2]\n  return %0\n}\n", &ir);
  ok(grace_ir_pass(ir, "nosuch", &out) == GRACE_EARG && strstr(grace_last_error(vm), "nosuch"), "unknown pass named");
  grace_ir_free(ir);
}

static void test_hoist(void) {
  grace_ir *o = golden("hoist,dce",
      "func @h {\n"
      "  %0 = input #0 : f32[3,3]\n"
      "  %1 = full {shape=[3,3], a=1} : f32[3,3]\n"
      "  %2 = triu %1 {i0=1} : f32[3,3]\n"
      "  %3 = mul %0, %2 : f32[3,3]\n"
      "  %4 = rand {shape=[3,3]} : f32[3,3]\n"
      "  %5 = add %3, %4 : f32[3,3]\n"
      "  return %5, %2\n"
      "}\n",
      "func @h {\n"
      "  %0 = input #0 : f32[3,3]\n"
      "  %1 = const #0 : f32[3,3]\n"
      "  %2 = mul %0, %1 : f32[3,3]\n"
      "  %3 = rand {shape=[3,3]} : f32[3,3]\n"
      "  %4 = add %2, %3 : f32[3,3]\n"
      "  %5 = clone %1 : f32[3,3]\n"
      "  return %4, %5\n"
      "}\n",
      "hoist computes the mask once; the random op stays; a returned constant is copied");
  if (o) {   /* the constant is the upper triangle above the diagonal: 3 ones out of 9 */
    float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, got[9];
    int64_t sz[2] = {3, 3};
    grace_tensor *in = NULL, *out[2] = {NULL, NULL};
    grace_tensor_from_data(vm, GRACE_FLOAT32, 2, sz, GRACE_FLOAT32, x, &in);
    ok(grace_ir_run(o, 1, &in, 2, out) == GRACE_OK, "hoisted program runs");
    grace_tensor_read(vm, out[1], GRACE_FLOAT32, got);
    ok(got[0] == 0 && got[1] == 1 && got[2] == 1 && got[4] == 0 && got[5] == 1 && got[8] == 0, "the mask is triu(ones, 1)");
    grace_tensor *again[2] = {NULL, NULL};
    grace_ir_run(o, 1, &in, 2, again);
    ok(again[1] != out[1] && grace_tensor_storage_id(again[1]) != grace_tensor_storage_id(out[1]),
       "each run returns its own copy of the constant");
    for (int i = 0; i < 2; i++) { grace_tensor_release(out[i]); grace_tensor_release(again[i]); }
    grace_tensor_release(in);
    grace_ir_free(o);
  }
}

/* The attention pass: scores divided by a 0-d input, kept where the mask is true (flag DIV | KEEP = 3, fill -inf);
 * the chain is dropped, the transpose view stays for the op to read. A second chain whose probabilities are also
 * returned is left alone (someone else reads them). */
static void test_attention(void) {
  grace_ir *o = golden("attention",
      "func @a {\n"
      "  %0 = input #0 : f32[2,5,8]\n"
      "  %1 = input #1 : f32[2,7,8]\n"
      "  %2 = input #2 : f32[2,7,4]\n"
      "  %3 = input #3 : f32[]\n"
      "  %4 = input #4 : bool[5,7]\n"
      "  %5 = transpose %1 {dims=[-2,-1]} : f32[2,8,7]\n"
      "  %6 = matmul %0, %5 : f32[2,5,7]\n"
      "  %7 = div %6, %3 : f32[2,5,7]\n"
      "  %8 = literal -inf : f64[]\n"
      "  %9 = where %4, %7, %8 : f32[2,5,7]\n"
      "  %10 = softmax %9 {dims=[-1]} : f32[2,5,7]\n"
      "  %11 = matmul %10, %2 : f32[2,5,4]\n"
      "  %12 = matmul %0, %5 : f32[2,5,7]\n"
      "  %13 = softmax %12 {dims=[-1]} : f32[2,5,7]\n"
      "  %14 = matmul %13, %2 : f32[2,5,4]\n"
      "  return %11, %14, %13\n"
      "}\n",
      "func @a {\n"
      "  %0 = input #0 : f32[2,5,8]\n"
      "  %1 = input #1 : f32[2,7,8]\n"
      "  %2 = input #2 : f32[2,7,4]\n"
      "  %3 = input #3 : f32[]\n"
      "  %4 = input #4 : bool[5,7]\n"
      "  %5 = transpose %1 {dims=[-2,-1]} : f32[2,8,7]\n"
      "  %6 = literal -inf : f64[]\n"
      "  %7 = attention %0, %5, %2, %3, %4 {a=-inf, flag=3} : f32[2,5,4]\n"
      "  %8 = matmul %0, %5 : f32[2,5,7]\n"
      "  %9 = softmax %8 {dims=[-1]} : f32[2,5,7]\n"
      "  %10 = matmul %9, %2 : f32[2,5,4]\n"
      "  return %7, %10, %9\n"
      "}\n",
      "attention fuses the divided, masked chain and leaves the one whose probabilities are returned");
  grace_ir_free(o);
  /* a chain's product that is also the next chain's scores: the first chain fuses, the second is left as it is
   * (fusing both would leave the second without its input; the pass failed as a whole before) */
  o = golden("attention",
      "func @n {\n"
      "  %0 = input #0 : f32[4,8]\n"
      "  %1 = input #1 : f32[8,5]\n"
      "  %2 = input #2 : f32[5,6]\n"
      "  %3 = input #3 : f32[6,3]\n"
      "  %4 = matmul %0, %1 : f32[4,5]\n"
      "  %5 = softmax %4 {dims=[-1]} : f32[4,5]\n"
      "  %6 = matmul %5, %2 : f32[4,6]\n"
      "  %7 = softmax %6 {dims=[-1]} : f32[4,6]\n"
      "  %8 = matmul %7, %3 : f32[4,3]\n"
      "  return %8\n"
      "}\n",
      "func @n {\n"
      "  %0 = input #0 : f32[4,8]\n"
      "  %1 = input #1 : f32[8,5]\n"
      "  %2 = input #2 : f32[5,6]\n"
      "  %3 = input #3 : f32[6,3]\n"
      "  %4 = attention %0, %1, %2, _, _ : f32[4,6]\n"
      "  %5 = softmax %4 {dims=[-1]} : f32[4,6]\n"
      "  %6 = matmul %5, %3 : f32[4,3]\n"
      "  return %6\n"
      "}\n",
      "attention fuses the first of two chained attentions and leaves the second");
  grace_ir_free(o);
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  test_dce();
  test_hoist();
  test_attention();
  grace_vm_free(vm);
  return tap_done();
}
