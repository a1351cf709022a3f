/* test_adversarial.c: the C API given bad input: NULL pointers, IR text that says anything, shapes whose arithmetic
 * overflows int64. Each call must return an error status (or a harmless value), never crash: each runs in a child
 * process, so a crash fails its test rather than the file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm;
static grace_tensor *x;   /* f32 [2, 3] */

/* Runs fn in a child; the child exits 0 when fn returns nonzero (the call gave what it should). */
static void survives(int (*fn)(void), const char *name) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) _exit(fn() ? 0 : 1);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) ok(0, "%s: killed by signal %d", name, WTERMSIG(status));
  else ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", name);
}

static int err_has(const char *s) { return strstr(grace_last_error(vm), s) != NULL; }

/* ---- NULL arguments ---- */
static int null_vm_new_err(void) { grace_vm *v = grace_vm_new(NULL, NULL, 0); grace_vm_free(v); return v != NULL; }
static int null_vm_free(void) { grace_vm_free(NULL); return 1; }
static int null_last_error(void) { return grace_last_error(NULL) != NULL; }
static int null_run_vm(void) { grace_tensor *o = NULL; return grace_run(NULL, GRACE_OP_NEG, 1, &x, NULL, 1, &o) != GRACE_OK; }
static int null_run_in(void) {
  grace_tensor *o = NULL;
  return grace_run(vm, GRACE_OP_NEG, 1, NULL, NULL, 1, &o) == GRACE_EARG && err_has("neg");
}
static int null_run_in_elem(void) {
  grace_tensor *in[2] = {x, NULL}, *o = NULL;
  return grace_run(vm, GRACE_OP_ADD, 2, in, NULL, 1, &o) != GRACE_OK && err_has("add");
}
static int null_run_out(void) { return grace_run(vm, GRACE_OP_NEG, 1, &x, NULL, 1, NULL) == GRACE_EARG; }
static int bad_run_counts(void) {
  grace_tensor *o = NULL;
  return grace_run(vm, GRACE_OP_NEG, -1, &x, NULL, 1, &o) != GRACE_OK &&
         grace_run(vm, GRACE_OP_NEG, 1, &x, NULL, -3, &o) != GRACE_OK && grace_run(vm, (grace_op)-7, 1, &x, NULL, 1, &o) != GRACE_OK &&
         grace_run(vm, GRACE_NOPS, 1, &x, NULL, 1, &o) != GRACE_OK;
}
static int null_empty(void) {
  grace_tensor *o = NULL;
  int64_t s[1] = {3};
  return grace_tensor_empty(NULL, GRACE_FLOAT32, GRACE_CPU, 1, s, &o) == GRACE_EARG &&
         grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 1, NULL, &o) == GRACE_EARG &&
         grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 0, NULL, &o) == GRACE_OK &&
         (grace_tensor_release(o), grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 1, s, NULL) == GRACE_EARG);
}
static int null_from_data(void) {
  grace_tensor *o = NULL;
  int64_t s[1] = {3};
  return grace_tensor_from_data(vm, GRACE_FLOAT32, 1, s, GRACE_FLOAT32, NULL, &o) == GRACE_EARG &&
         grace_tensor_from_data(NULL, GRACE_FLOAT32, 1, s, GRACE_FLOAT32, "abcdefghijkl", &o) == GRACE_EARG &&
         grace_tensor_from_data(vm, GRACE_FLOAT32, 1, s, GRACE_FLOAT32, "abcdefghijkl", NULL) == GRACE_EARG;
}
static int null_scalar(void) {
  return grace_tensor_scalar(vm, 1.0, 0, NULL) == GRACE_EARG && grace_tensor_scalar_int(vm, 1, NULL) == GRACE_EARG &&
         grace_tensor_scalar(NULL, 1.0, 0, &(grace_tensor *){NULL}) == GRACE_EARG;
}
static int null_read(void) {
  float buf[6];
  return grace_tensor_read(vm, NULL, GRACE_FLOAT32, buf) == GRACE_EARG &&
         grace_tensor_read(vm, x, GRACE_FLOAT32, NULL) == GRACE_EARG && grace_tensor_read(NULL, x, GRACE_FLOAT32, buf) == GRACE_EARG;
}
static int null_accessors(void) {
  return grace_tensor_ndim(NULL) == 0 && grace_tensor_numel(NULL) == 0 && grace_tensor_sizes(NULL) == NULL &&
         grace_tensor_data(NULL) == NULL && (grace_tensor_retain(NULL), grace_tensor_release(NULL), 1);
}
static int null_ir(void) {
  grace_ir *ir = NULL;
  grace_tensor *o = NULL;
  grace_ir_free(NULL);
  return grace_ir_parse(NULL, "func @f {\n}\n", &ir) == GRACE_EARG && grace_ir_parse(vm, NULL, &ir) == GRACE_EARG &&
         grace_ir_parse(vm, "func @f {\n  %0 = input #0 : f32[3]\n  return %0\n}\n", NULL) == GRACE_EARG &&
         grace_ir_run(NULL, 1, &x, 1, &o) == GRACE_EARG && grace_ir_verify(NULL) == GRACE_EARG && grace_ir_text(NULL) == NULL;
}

/* ---- IR text that says anything ---- */
static int ir_input_past_inputs(void) {
  grace_ir *ir = NULL;
  return grace_ir_parse(vm, "func @f {\n  %0 = input #5 : f32[2,3]\n  return %0\n}\n", &ir) != GRACE_OK && !ir &&
         err_has("input");
}
static int ir_huge_type(void) {
  grace_ir *ir = NULL;
  return grace_ir_parse(vm, "func @f {\n  %0 = input #0 : f32[4611686018427387904,4]\n  return %0\n}\n", &ir) != GRACE_OK &&
         !ir && err_has("too large");
}
static int ir_run_wrong_inputs(void) {
  grace_ir *ir = NULL;
  grace_tensor *o[2] = {NULL, NULL};
  if (grace_ir_parse(vm, "func @f {\n  %0 = input #0 : f32[2,3]\n  %1 = neg %0 : f32[2,3]\n  return %1\n}\n", &ir)) return 0;
  int good = grace_ir_run(ir, 0, NULL, 1, o) == GRACE_EARG && grace_ir_run(ir, 1, &x, 2, o) == GRACE_EARG &&
             grace_ir_run(ir, 1, NULL, 1, o) == GRACE_EARG && grace_ir_run(ir, -1, &x, 1, o) == GRACE_EARG;
  grace_tensor *in1[1] = {NULL}, *y = NULL;
  if (grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 1, (int64_t[]){3}, &y)) return 0;
  good = good && grace_ir_run(ir, 1, in1, 1, o) == GRACE_EARG && grace_ir_run(ir, 1, &y, 1, o) != GRACE_OK;
  grace_tensor_release(y);
  int ran = grace_ir_run(ir, 1, &x, 1, o) == GRACE_OK && o[0] && grace_tensor_numel(o[0]) == 6;
  grace_tensor_release(o[0]);
  grace_ir_free(ir);
  return good && ran;
}

/* ---- shapes whose arithmetic overflows ---- */
static int narrow_overflow(void) {
  grace_tensor *o = NULL;
  grace_attrs a = {0};
  a.ndims = 1; a.dims[0] = 1; a.i0 = 2; a.i1 = INT64_MAX;
  return grace_run(vm, GRACE_OP_NARROW, 1, &x, &a, 1, &o) == GRACE_EINDEX && !o && err_has("narrow");
}
static int expand_overflow(void) {
  grace_tensor *o = NULL, *one = NULL;
  grace_attrs b = {0};
  if (grace_run(vm, GRACE_OP_RESHAPE, 1, &x, &(grace_attrs){.nshape = 2, .shape = {6, 1}}, 1, &one)) return 0;
  b.nshape = 3; b.shape[0] = INT64_C(1) << 62; b.shape[1] = 6; b.shape[2] = 4;
  int r = grace_run(vm, GRACE_OP_EXPAND, 1, &one, &b, 1, &o) == GRACE_ESHAPE && !o && err_has("too large");
  grace_tensor_release(one);
  return r;
}
static int reshape_overflow(void) {
  grace_tensor *o = NULL;
  grace_attrs a = {0};
  a.nshape = 3; a.shape[0] = INT64_C(1) << 62; a.shape[1] = 8; a.shape[2] = -1;
  return grace_run(vm, GRACE_OP_RESHAPE, 1, &x, &a, 1, &o) != GRACE_OK && !o && err_has("reshape");
}
static int empty_huge_shape(void) {
  grace_tensor *o = NULL;
  int64_t s[3] = {INT64_C(1) << 62, 0, INT64_C(1) << 62};
  return grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 3, s, &o) == GRACE_ESHAPE && !o && err_has("too large");
}

int main(void) {
  vm = grace_vm_new(NULL, NULL, 0);
  float v[6] = {1, 2, 3, 4, 5, 6};
  int64_t s[2] = {2, 3};
  if (!vm || grace_tensor_from_data(vm, GRACE_FLOAT32, 2, s, GRACE_FLOAT32, v, &x)) return 1;
  survives(null_vm_new_err, "grace_vm_new(NULL, NULL, 0): the defaults");
  survives(null_vm_free, "grace_vm_free(NULL)");
  survives(null_last_error, "grace_last_error(NULL)");
  survives(null_run_vm, "grace_run with a NULL vm");
  survives(null_run_in, "grace_run with NULL inputs");
  survives(null_run_in_elem, "grace_run with a NULL input tensor");
  survives(null_run_out, "grace_run with NULL outputs");
  survives(bad_run_counts, "grace_run with negative counts or an invalid op");
  survives(null_empty, "grace_tensor_empty with NULLs");
  survives(null_from_data, "grace_tensor_from_data with NULLs");
  survives(null_scalar, "grace_tensor_scalar with NULLs");
  survives(null_read, "grace_tensor_read with NULLs");
  survives(null_accessors, "tensor accessors of NULL");
  survives(null_ir, "grace_ir_* with NULLs");
  survives(ir_input_past_inputs, "parse: an input index past the inputs is an error");
  survives(ir_huge_type, "parse: a type of 2^64 elements is an error");
  survives(ir_run_wrong_inputs, "grace_ir_run: wrong counts and NULL inputs are errors");
  survives(narrow_overflow, "narrow: start + length past int64");
  survives(expand_overflow, "expand: 2^64 elements");
  survives(reshape_overflow, "reshape: sizes whose product wraps");
  survives(empty_huge_shape, "empty: [2^62, 0, 2^62]");
  grace_tensor_release(x);
  grace_vm_free(vm);
  return tap_done();
}
