/* test_adversarial.c: the C API given bad input: NULL pointers, IR text that says anything, shapes whose arithmetic
 * overflows int64. Each call must return an error status (or a harmless value), never crash: each runs in a child
 * process, so a crash fails its test rather than the file. */
#include <math.h>
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

/* ---- found by the fuzz targets (tests/fuzz; make asan runs these under UBSan, which saw each one) ---- */
/* randint over the widest range: high - low does not fit int64 (was signed overflow) */
static int randint_full_range(void) {
  grace_attrs a = {.nshape = 1, .shape = {64}, .i0 = INT64_MIN, .i1 = INT64_MAX};
  grace_tensor *r = NULL;
  if (grace_run(vm, GRACE_OP_RANDINT, 0, NULL, &a, 1, &r) != GRACE_OK) return 0;
  int64_t v[64];
  int good = grace_tensor_read(vm, r, GRACE_INT64, v) == GRACE_OK, neg = 0, pos = 0;
  for (int i = 0; good && i < 64; i++) { neg += v[i] < 0; pos += v[i] > 0; good = v[i] != INT64_MAX; }
  grace_tensor_release(r);
  return good && neg && pos;   /* 64 draws over both halves: all on one side has chance 2^-63 */
}
/* a dim or index near INT64_MAX in an error message, with index base 1 (was signed overflow adding the base) */
static int huge_dim_messages(void) {
  grace_config cfg = {.index_base = 1};
  grace_vm *v1 = grace_vm_new(&cfg, NULL, 0);
  grace_tensor *t = NULL, *o = NULL;
  int64_t sz[2] = {2, 3};
  int good = v1 && grace_tensor_empty(v1, GRACE_FLOAT32, GRACE_CPU, 2, sz, &t) == GRACE_OK;
  grace_attrs sum = {.ndims = 1, .dims = {INT64_MAX}}, sel = {.ndims = 1, .i0 = INT64_MAX};
  good = good && grace_run(v1, GRACE_OP_SUM, 1, &t, &sum, 1, &o) == GRACE_EINDEX &&
         strstr(grace_last_error(v1), "9223372036854775807");
  good = good && grace_run(v1, GRACE_OP_STACK, 1, &t, &sum, 1, &o) == GRACE_EINDEX &&
         strstr(grace_last_error(v1), "stack: dim 9223372036854775807");
  good = good && grace_run(v1, GRACE_OP_SELECT, 1, &t, &sel, 1, &o) == GRACE_EINDEX &&
         strstr(grace_last_error(v1), "index 9223372036854775807");
  grace_tensor_release(t);
  grace_vm_free(v1);
  return good;
}
/* narrow past the start of an empty dim's neighbour: an empty view whose offset lay beyond its storage was an
 * internal error */
static int narrow_empty_offset(void) {
  int64_t sz[2] = {0, 4};
  grace_tensor *t = NULL, *o = NULL;
  grace_attrs a = {.ndims = 1, .dims = {1}, .i0 = 1, .i1 = 1};
  int good = grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 2, sz, &t) == GRACE_OK &&
             grace_run(vm, GRACE_OP_NARROW, 1, &t, &a, 1, &o) == GRACE_OK && grace_tensor_numel(o) == 0 &&
             grace_tensor_sizes(o)[0] == 0 && grace_tensor_sizes(o)[1] == 1;
  grace_tensor_release(o);
  grace_tensor_release(t);
  return good;
}
/* an index of INT64_MIN with index base 1 (was signed overflow subtracting the base) */
static int index_int64_min(void) {
  grace_config cfg = {.index_base = 1};
  grace_vm *v1 = grace_vm_new(&cfg, NULL, 0);
  grace_tensor *t = NULL, *ix = NULL, *o = NULL, *val = NULL;
  int64_t sz[1] = {3}, iv[1] = {INT64_MIN};
  grace_attrs d0 = {.ndims = 1};
  int good = v1 && grace_tensor_empty(v1, GRACE_FLOAT32, GRACE_CPU, 1, sz, &t) == GRACE_OK &&
             grace_tensor_from_data(v1, GRACE_INT64, 1, (int64_t[]){1}, GRACE_INT64, iv, &ix) == GRACE_OK &&
             grace_run(v1, GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){t, ix}, &d0, 1, &o) == GRACE_EINDEX &&
             grace_tensor_scalar(v1, 1.0, 0, &val) == GRACE_OK &&
             grace_run(v1, GRACE_OP_INDEX_PUT_, 3, (grace_tensor *[]){t, val, ix}, NULL, 0, NULL) == GRACE_EINDEX;
  grace_tensor_release(val);
  grace_tensor_release(t);
  grace_tensor_release(ix);
  grace_vm_free(v1);
  return good;
}
/* triu/tril with a diagonal of INT64_MAX or INT64_MIN (was signed overflow adding it to the row) */
static int tri_huge_diagonal(void) {
  float v[6];
  grace_tensor *o = NULL;
  int good = 1;
  for (int k = 0; k < 4 && good; k++) {
    grace_attrs a = {.i0 = k & 1 ? INT64_MIN : INT64_MAX};
    good = grace_run(vm, k < 2 ? GRACE_OP_TRIU : GRACE_OP_TRIL, 1, &x, &a, 1, &o) == GRACE_OK &&
           grace_tensor_read(vm, o, GRACE_FLOAT32, v) == GRACE_OK;
    /* triu keeps j - i >= k: nothing for INT64_MAX, all for INT64_MIN; tril keeps j - i <= k: the reverse */
    int keep_all = (k == 1 || k == 2);
    for (int i = 0; good && i < 6; i++) good = v[i] == (keep_all ? (float)(i + 1) : 0.0f);
    grace_tensor_release(o);
  }
  return good;
}
/* literals past int64: an integer literal given as a double out of range or NaN is an error, INT64_MAX as an int64
 * stays exact through the passes (the pass rewriter made it a double and back: undefined behaviour) */
static int literal_ranges(void) {
  grace_ir *ir = grace_ir_new(vm, "lit"), *opt = NULL;
  grace_value v, x, r;
  int good = ir && grace_ir_literal(ir, 9223372036854775808.0, 1, &v) == GRACE_EARG && err_has("literal") &&
             grace_ir_literal(ir, NAN, 1, &v) == GRACE_EARG && grace_ir_literal(ir, 2.5, 1, &v) == GRACE_EARG &&
             grace_ir_literal(ir, -9223372036854775808.0, 1, &v) == GRACE_OK;
  good = good && grace_ir_input(ir, GRACE_INT64, GRACE_CPU, 0, NULL, &x) == GRACE_OK &&
         grace_ir_literal_int(ir, INT64_MAX, &v) == GRACE_OK &&
         grace_ir_op(ir, GRACE_OP_ADD, 2, (grace_value[]){x, v}, NULL, 1, &r) == GRACE_OK &&
         grace_ir_output(ir, r) == GRACE_OK && grace_ir_pass(ir, "default", &opt) == GRACE_OK &&
         strstr(grace_ir_text(opt), "9223372036854775807");
  grace_ir_free(opt);
  grace_ir_free(ir);
  return good;
}
/* IR text with an integer literal past int64, and a float one far past it typed as an integer: the first is a parse
 * error, the second parses (the conversion of its value to int64 was undefined behaviour) */
static int literal_text_ranges(void) {
  grace_ir *ir = NULL;
  int good = grace_ir_parse(vm, "func @f {\n  %0 = literal 99999999999999999999 : i64[]\n  return %0\n}\n", &ir) != GRACE_OK &&
             !ir && err_has("int64");
  grace_ir_free(ir);
  ir = NULL;
  grace_status st = grace_ir_parse(vm, "func @f {\n  %0 = literal 1e300 : i64[]\n  return %0\n}\n", &ir);
  good = good && (st == GRACE_OK ? ir != NULL : ir == NULL);
  grace_ir_free(ir);
  ir = NULL;   /* a literal of a type no trace makes: the passes promoted it differently (an internal error) */
  good = good && grace_ir_parse(vm, "func @f {\n  %0 = literal 0 : i32[]\n  return %0\n}\n", &ir) == GRACE_EARG &&
         !ir && err_has("literal typed i64[] or f64[]");
  return good;
}
/* arange with an exact integer step of 0 while the double step says 1 (a C caller's attributes disagree): an error,
 * not a division by zero */
static int arange_exact_zero_step(void) {
  grace_attrs a = {.a = 0, .b = 4, .c = 1, .exact = 7, .ia = 0, .ib = 4, .ic = 0, .has_dtype = 1, .dtype = GRACE_INT64};
  grace_tensor *r = NULL;
  return grace_run(vm, GRACE_OP_ARANGE, 0, NULL, &a, 1, &r) == GRACE_EARG && !r && err_has("step must be nonzero");
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
  survives(randint_full_range, "randint over [INT64_MIN, INT64_MAX): values on both sides of 0");
  survives(huge_dim_messages, "a dim or index of INT64_MAX with index base 1: EINDEX naming it");
  survives(index_int64_min, "index_select and index_put_ with an index of INT64_MIN, base 1: EINDEX");
  survives(tri_huge_diagonal, "triu and tril with a diagonal of INT64_MAX and INT64_MIN: nothing or all kept");
  survives(literal_ranges, "integer literals out of int64 range are errors; INT64_MAX stays exact through passes");
  survives(literal_text_ranges, "parse: an integer literal past int64 or typed i32 is an error, 1e300 as i64 no crash");
  survives(arange_exact_zero_step, "arange with an exact step of 0: GRACE_EARG, no division by zero");
  survives(narrow_empty_offset, "narrow at 1 of a [0, 4] tensor's dim 2: an empty [0, 1] view");
  grace_tensor_release(x);
  grace_vm_free(vm);
  return tap_done();
}
