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

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  test_dce();
  test_hoist();
  grace_vm_free(vm);
  return tap_done();
}
