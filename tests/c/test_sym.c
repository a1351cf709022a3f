/* test_sym.c: symbolic sizes in the IR (ir/ir_sym.c) without Lua. Ops built on symbolic inputs get the symbols
 * inference implies (a pointwise op keeps its input's, a cat of one more row derives s + 1, a flatten 3*s); a
 * broadcast of two symbols relates them; a reshape to fixed sizes and a narrow bound or pin them; the text form
 * prints and parses the table back; the CPU interpreter runs one program at several sizes, refusing sizes the
 * relations or bounds exclude; a copy specialised to a call's sizes has every size fixed and runs; a compiled function (grace_fn, a C host) with dynamic_shapes retraces once symbolic,
 * refuses unequal sizes through the relation guard, and with dynamic_dims is symbolic from its first trace. Expected
 * values are worked out by hand from the inputs. */
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "ir/ir_sym.h"
#include "tap.h"

#include "c/ir_text.h"

static grace_vm *vm;

static void test_settle(void) {
  grace_ir *ir = parse_ir(vm, "func @s {\n"
                              "  sym s1 hint=4 min=2\n"
                              "  sym s2 hint=4 min=2\n"
                              "  %0 = input #0 : f32[s1=4,3]\n"
                              "  %1 = input #1 : f32[s2=4,3]\n"
                              "  %2 = input #2 : f32[1,3]\n"
                              "  return %0\n"
                              "}\n");
  if (!ok(ir != NULL, "a program with two symbols parses")) return;
  grace_value neg, cat, flat, add, fixed, nar;
  ok(grace_ir_op(ir, GRACE_OP_NEG, 1, (grace_value[]){0}, NULL, 1, &neg) == GRACE_OK, "neg");
  grace_attrs ca = {.ndims = 1, .dims = {0}};
  ok(grace_ir_op(ir, GRACE_OP_CAT, 2, (grace_value[]){0, 2}, &ca, 1, &cat) == GRACE_OK, "cat of one more row");
  grace_attrs ra = {.nshape = 1, .shape = {-1}};
  ok(grace_ir_op(ir, GRACE_OP_RESHAPE, 1, &neg, &ra, 1, &flat) == GRACE_OK, "reshape to -1");
  const char *t = grace_ir_text(ir);
  ok(text_has(t, "neg %0 : f32[s1=4,3]"), "neg keeps s1");
  ok(text_has(t, "sym s3 base=s1 mul=1 add=1") && text_has(t, ": f32[s3=5,3]"), "cat gives s3 = s1 + 1");
  ok(text_has(t, "sym s4 base=s1 mul=3 add=0") && text_has(t, ": f32[s4=12]"), "the flatten gives s4 = 3*s1");
  ok(grace_ir_op(ir, GRACE_OP_ADD, 2, (grace_value[]){0, 1}, NULL, 1, &add) == GRACE_OK, "s1 + s2 broadcast");
  t = grace_ir_text(ir);
  ok(text_has(t, "sym s2 hint=4 min=2 same=s1"), "the broadcast relates s2 to s1");
  grace_attrs na = {.ndims = 1, .dims = {0}, .i0 = 0, .i1 = 3};
  ok(grace_ir_op(ir, GRACE_OP_NARROW, 1, &neg, &na, 1, &nar) == GRACE_OK, "narrow to 3 rows");
  t = grace_ir_text(ir);
  ok(text_has(t, "sym s1 hint=4 min=4") && text_has(t, ": f32[3,3]"), "the narrow raises the bound to the traced size");
  grace_attrs fa = {.nshape = 1, .shape = {12}};
  ok(grace_ir_op(ir, GRACE_OP_RESHAPE, 1, &neg, &fa, 1, &fixed) == GRACE_OK, "reshape to a fixed 12");
  t = grace_ir_text(ir);
  ok(text_has(t, "sym s1 hint=4 min=4 pinned"), "a reshape to fixed sizes pins s1");
  ok(grace_ir_verify(ir) == GRACE_OK, "the program verifies: %s", grace_last_error(vm));
  grace_ir *back = parse_ir(vm, t);
  ok(back && !strcmp(grace_ir_text(back), t), "the text parses back and prints the same");
  grace_ir_free(back);
  grace_ir_free(ir);
}

/* Fusion groups a symbolic chain as it groups the same chain at fixed sizes. */
static void test_fuse(void) {
  const char *sym = "func @f {\n"
                    "  sym s1 hint=4 min=2\n"
                    "  %0 = input #0 : f32[s1=4,3]\n"
                    "  %1 = input #1 : f32[3]\n"
                    "  %2 = mul %0, %1 : f32[s1=4,3]\n"
                    "  %3 = exp %2 : f32[s1=4,3]\n"
                    "  %4 = sum %3 {dims=[1]} : f32[s1=4]\n"
                    "  return %4\n"
                    "}\n";
  grace_ir *a = parse_ir(vm, sym), *b = NULL;
  char *fixed = strdup(sym), *p;
  while ((p = strstr(fixed, "s1=4"))) memmove(p, p + 3, strlen(p + 3) + 1);   /* "s1=4" -> "4" */
  memmove(strstr(fixed, "  sym"), strstr(fixed, "  %0"), strlen(strstr(fixed, "  %0")) + 1);
  b = parse_ir(vm, fixed);
  char ra[2048], rb[2048];
  int na = -1, nb = -2;
  ok(a && b && grace_ir_fuse_report(a, ra, sizeof ra, &na) == GRACE_OK && grace_ir_fuse_report(b, rb, sizeof rb, &nb) == GRACE_OK,
     "both fuse");
  is_int(na, nb, "a symbolic chain runs as as many kernels as the fixed one (%d)", nb);
  is_int(na, 1, "one kernel: the multiply and exp fuse into the row sum");
  free(fixed);
  grace_ir_free(a);
  grace_ir_free(b);
}

static grace_tensor *filled(int64_t rows, int64_t cols, float base) {
  float *v = malloc(sizeof(float) * (size_t)(rows * cols));
  for (int64_t i = 0; i < rows * cols; i++) v[i] = base + (float)i;
  grace_tensor *t = NULL;
  grace_tensor_from_data(vm, GRACE_FLOAT32, 2, (int64_t[]){rows, cols}, GRACE_FLOAT32, v, &t);
  free(v);
  return t;
}

/* %3 = x + y over [s1, 2] with y related to x; %4 the sum of all of cat(x, z) */
static void test_run(void) {
  grace_ir *ir = parse_ir(vm, "func @r {\n"
                              "  sym s1 hint=3 min=2\n"
                              "  sym s2 hint=3 min=2 same=s1\n"
                              "  sym s3 base=s1 mul=1 add=1\n"
                              "  %0 = input #0 : f32[s1=3,2]\n"
                              "  %1 = input #1 : f32[s2=3,2]\n"
                              "  %2 = input #2 : f32[1,2]\n"
                              "  %3 = add %0, %1 : f32[s1=3,2]\n"
                              "  %4 = cat %0, %2 {dims=[0]} : f32[s3=4,2]\n"
                              "  %5 = sum %4 : f32[]\n"
                              "  return %3, %5\n"
                              "}\n");
  if (!ok(ir != NULL, "a symbolic program parses")) return;
  for (int64_t n = 2; n <= 6; n += 4) {
    grace_tensor *in[3] = {filled(n, 2, 0), filled(n, 2, 100), filled(1, 2, 1000)}, *out[2] = {NULL, NULL};
    grace_status st = grace_ir_run(ir, 3, in, 2, out);
    if (ok(st == GRACE_OK, "runs at %lld rows: %s", (long long)n, st == GRACE_OK ? "" : grace_last_error(vm))) {
      const float *a = grace_tensor_data(out[0]);
      is_int(grace_tensor_sizes(out[0])[0], n, "the sum has %lld rows", (long long)n);
      /* x[i] = i, y[i] = 100 + i: x + y = 100 + 2i; the last element i = 2n - 1 */
      is_near(a[2 * n - 1], 100 + 2 * (double)(2 * n - 1), 0, "its last element");
      /* sum of x (0 .. 2n-1) + 1000 + 1001 */
      double want = (double)(2 * n - 1) * (double)(2 * n) / 2 + 2001;
      is_near(*(const float *)grace_tensor_data(out[1]), want, 0, "the sum over the grown rows");
    }
    for (int k = 0; k < 3; k++) grace_tensor_release(in[k]);
    for (int k = 0; k < 2; k++) grace_tensor_release(out[k]);
  }
  /* specialised to 6 rows: every size fixed, s3 = s1 + 1 evaluated */
  int64_t vals[4];
  grace_tensor *six[3] = {filled(6, 2, 0), filled(6, 2, 0), filled(1, 2, 0)};
  grace_ir *spec = NULL;
  ok(ir_sym_bind(ir, 3, six, vals) == GRACE_OK && ir_sym_specialize(ir, vals, &spec) == GRACE_OK,
     "specialised to 6 rows: %s", grace_last_error(vm));
  const char *st6 = spec ? grace_ir_text(spec) : "";
  ok(text_has(st6, "input #0 : f32[6,2]") && text_has(st6, "cat %0, %2 {dims=[0]} : f32[7,2]") && !strstr(st6, "sym"),
     "the specialised program has fixed sizes, the grown cat 7 rows");
  grace_tensor *o6[2] = {NULL, NULL};
  ok(spec && grace_ir_run(spec, 3, six, 2, o6) == GRACE_OK &&
     *(const float *)grace_tensor_data(o6[1]) == (float)(11 * 12 / 2 + 1),
     "it runs: the sum over 7 rows is 0 + .. + 11 + 1 + 0");
  for (int k = 0; k < 3; k++) grace_tensor_release(six[k]);
  for (int k = 0; k < 2; k++) grace_tensor_release(o6[k]);
  grace_ir_free(spec);

  grace_tensor *in[3] = {filled(4, 2, 0), filled(5, 2, 0), filled(1, 2, 0)}, *out[2] = {NULL, NULL};
  ok(grace_ir_run(ir, 3, in, 2, out) == GRACE_ESHAPE && strstr(grace_last_error(vm), "equal"),
     "sizes breaking s2 == s1 are refused: %s", grace_last_error(vm));
  grace_tensor_release(in[0]);
  grace_tensor_release(in[1]);
  in[0] = filled(1, 2, 0);
  in[1] = filled(1, 2, 0);
  ok(grace_ir_run(ir, 3, in, 2, out) == GRACE_ESHAPE && strstr(grace_last_error(vm), "s1 >= 2"),
     "a size below the bound is refused: %s", grace_last_error(vm));
  for (int k = 0; k < 3; k++) grace_tensor_release(in[k]);
  grace_ir_free(ir);
}

/* A C host: the sum of two tensors (x + y, broadcast as eager). */
static grace_status h_add(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  (void)ud;
  *nres = 0;
  if (nargs != 2 || maxres < 1) return GRACE_EHOST;
  grace_tensor *y = NULL;
  if (grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){args[0].t, args[1].t}, NULL, 1, &y) != GRACE_OK) return GRACE_EHOST;
  res[0] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = y};
  *nres = 1;
  return GRACE_OK;
}

/* Calls f on [n, 2] and [m, 2] filled 0.. and 100..; checks element (0, 1) is 1 + 101 and the row count. */
static grace_status call_add(grace_fn *f, int64_t n, int64_t m, const char *what) {
  grace_tensor *x = filled(n, 2, 0), *y = filled(m, 2, 100);
  grace_arg args[2] = {{.kind = GRACE_ARG_TENSOR, .t = x}, {.kind = GRACE_ARG_TENSOR, .t = y}}, res[1];
  int nres = 0;
  grace_status st = grace_fn_call(f, 2, args, &nres, res, 1);
  if (st == GRACE_OK) {
    ok(grace_tensor_sizes(res[0].t)[0] == (n > m ? n : m) && ((const float *)grace_tensor_data(res[0].t))[1] == 102,
       "%s: [%lld, 2] + [%lld, 2] is right", what, (long long)n, (long long)m);
    grace_tensor_release(res[0].t);
  }
  grace_tensor_release(x);
  grace_tensor_release(y);
  return st;
}

static void test_fn(void) {
  grace_host host = {.call = h_add};
  grace_fn *f = NULL;
  size_t bytes = grace_tensor_bytes(vm);
  ok(grace_fn_new(vm, "add", &host, NULL, &(grace_fn_options){.cache_limit = 8, .dynamic_shapes = 1}, &f) == GRACE_OK,
     "a function with dynamic shapes");
  call_add(f, 3, 3, "first");
  call_add(f, 5, 5, "second size");
  grace_fn_stats st;
  grace_fn_get_stats(f, &st);
  is_int(st.traces, 2, "a size change retraces once");
  is_int(st.symbolic_entries, 1, "the second entry is symbolic");
  is_int(st.dynamic_dims[0], 1, "argument 1's dim 1 is symbolic");
  for (int64_t n = 6; n <= 9; n++) call_add(f, n, n, "a new size");
  grace_fn_get_stats(f, &st);
  is_int(st.traces, 2, "new sizes hit the symbolic entry");
  ok(call_add(f, 6, 7, "unequal") == GRACE_EHOST, "[6, 2] + [7, 2] fails in the host function, as eagerly");
  grace_fn_get_stats(f, &st);
  ok(strstr(st.last_miss, "s1") != NULL, "the miss names the relation: %s", st.last_miss);
  char text[4096];
  grace_tensor *x = filled(4, 2, 0), *y = filled(4, 2, 0);
  grace_arg args[2] = {{.kind = GRACE_ARG_TENSOR, .t = x}, {.kind = GRACE_ARG_TENSOR, .t = y}};
  ok(grace_fn_explain(f, 2, args, text, sizeof text) == GRACE_OK && strstr(text, "s2 == s1: argument 2 dim 1") &&
     strstr(text, "argument 1 is a tensor float32 [s1, 2]"), "explain shows the symbols and the relation");
  grace_tensor_release(x);
  grace_tensor_release(y);
  grace_fn_free(f);

  grace_fn_options up = {.cache_limit = 8, .dynamic_dims = {1, 1}};
  ok(grace_fn_new(vm, "add", &host, NULL, &up, &f) == GRACE_OK, "a function with dims asked up front");
  for (int64_t n = 2; n <= 5; n++) call_add(f, n, n, "up front");
  grace_fn_get_stats(f, &st);
  is_int(st.traces, 1, "dims asked up front: one trace");
  grace_fn_free(f);

  ok(grace_fn_new(vm, "add", &host, NULL, &(grace_fn_options){.cache_limit = 8}, &f) == GRACE_OK, "the default");
  for (int64_t n = 2; n <= 5; n++) call_add(f, n, n, "default");
  grace_fn_get_stats(f, &st);
  is_int(st.traces, 4, "by default in C, one trace per size");
  grace_fn_free(f);
  is_int(grace_tensor_bytes(vm), bytes, "no tensor left");
}

static void test_bad_text(void) {
  grace_ir *ir = NULL;
  ok(grace_ir_parse(vm, "func @b {\n  sym s2 hint=4 min=2\n  return\n}\n", &ir) != GRACE_OK, "a symbol out of order is refused");
  ok(grace_ir_parse(vm, "func @b {\n  sym s1 base=s1 mul=1 add=0\n  return\n}\n", &ir) != GRACE_OK,
     "a derived symbol of itself is refused");
  ok(grace_ir_parse(vm, "func @b {\n  sym s1 hint=4 min=2\n  sym s2 base=s1 mul=2 add=0\n"
                        "  %0 = input #0 : f32[s2=8]\n  return %0\n}\n", &ir) != GRACE_OK,
     "an input sized by a derived symbol is refused: %s", grace_last_error(vm));
  ok(grace_ir_parse(vm, "func @b {\n  %0 = input #0 : f32[4]\n  %1 = neg %0 : f32[s1=4]\n  return %1\n}\n", &ir) !=
     GRACE_OK && strstr(grace_last_error(vm), "no input"), "a free symbol no input binds is refused: %s", grace_last_error(vm));
  ok(ir == NULL, "nothing is returned");
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  if (!vm) { printf("1..0 # SKIP no VM: %s\n", err); return 1; }
  test_settle();
  test_fuse();
  test_run();
  test_fn();
  test_bad_text();
  grace_vm_free(vm);
  return tap_done();
}
