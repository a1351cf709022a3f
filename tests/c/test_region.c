/* test_region.c: region instructions (cond, while) without Lua: building them, the errors the builder gives,
 * running them on the CPU against values computed here in C, the printed form against hand-written text, print ->
 * parse -> print round trips, the verifier rejecting malformed regions, the passes keeping results (and optimizing
 * sub-programs), fusion never grouping across a region, and recording a region through the C tracing API. */
#include <math.h>
#include <stdlib.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm;
static const int64_t S4[] = {4};

static grace_tensor *vec(const float *v) {
  grace_tensor *t = NULL;
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, S4, GRACE_FLOAT32, v, &t);
  return t;
}

static grace_tensor *scalar_of(grace_dtype dt, double v) {
  grace_tensor *t = NULL;
  grace_tensor_from_data(vm, dt, 0, NULL, GRACE_FLOAT64, &v, &t);
  return t;
}

/* A branch over (x f32[4], y f32[4]) returning op(x, y), or x when op < 0. */
static grace_ir *branch2(const char *name, int op) {
  grace_ir *b = grace_ir_new(vm, name);
  grace_value x, y, r;
  grace_ir_input(b, GRACE_FLOAT32, GRACE_CPU, 1, S4, &x);
  grace_ir_input(b, GRACE_FLOAT32, GRACE_CPU, 1, S4, &y);
  if (op < 0) r = x;
  else grace_ir_op(b, (grace_op)op, 2, (grace_value[]){x, y}, NULL, 1, &r);
  grace_ir_output(b, r);
  return b;
}

/* @f(p, x, y) = cond(p, x + y, x * y) * 2, with pred of dtype pdt. */
static grace_ir *cond_program(grace_dtype pdt) {
  grace_ir *ir = grace_ir_new(vm, "f");
  grace_value p, x, y, c, two, out;
  grace_ir_input(ir, pdt, GRACE_CPU, 0, NULL, &p);
  grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 1, S4, &x);
  grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 1, S4, &y);
  grace_status st = grace_ir_cond(ir, p, 2, (grace_value[]){x, y}, branch2("then", GRACE_OP_ADD), branch2("else", GRACE_OP_MUL), 1, &c);
  ok(st == GRACE_OK, "cond builds: %s", grace_last_error(vm));
  grace_ir_literal(ir, 2, 1, &two);
  grace_ir_op(ir, GRACE_OP_MUL, 2, (grace_value[]){c, two}, NULL, 1, &out);
  grace_ir_output(ir, out);
  return ir;
}

static const float XV[4] = {1, 2, 3, 4}, YV[4] = {0.5f, -1, 2, 10};

/* Runs a program over (pred, x, y) and checks its output against want(x, y) computed in C. */
static void check_run(grace_ir *ir, grace_tensor *p, int add, const char *what) {
  grace_tensor *x = vec(XV), *y = vec(YV), *out = NULL;
  grace_status st = grace_ir_run(ir, 3, (grace_tensor *[]){p, x, y}, 1, &out);
  float got[4] = {0};
  if (st == GRACE_OK) grace_tensor_read(vm, out, GRACE_FLOAT32, got);
  int good = st == GRACE_OK;
  for (int i = 0; i < 4; i++) good &= got[i] == (add ? XV[i] + YV[i] : XV[i] * YV[i]) * 2;
  ok(good, "%s: %s branch taken (%s)", what, add ? "then" : "else", st == GRACE_OK ? "ran" : grace_last_error(vm));
  grace_tensor_release(out);
  grace_tensor_release(x);
  grace_tensor_release(y);
}

static void test_cond_run(void) {
  const grace_dtype dts[] = {GRACE_BOOL, GRACE_FLOAT32, GRACE_INT64};
  const char *names[] = {"bool", "float", "int"};
  for (int d = 0; d < 3; d++) {
    grace_ir *ir = cond_program(dts[d]);
    ok(grace_ir_verify(ir) == GRACE_OK, "%s predicate: verifies: %s", names[d], grace_last_error(vm));
    grace_tensor *t = scalar_of(dts[d], d == 1 ? 0.25 : 1), *f = scalar_of(dts[d], 0);
    char what[64];
    snprintf(what, sizeof what, "%s predicate true", names[d]);
    check_run(ir, t, 1, what);
    snprintf(what, sizeof what, "%s predicate false", names[d]);
    check_run(ir, f, 0, what);
    grace_tensor_release(t);
    grace_tensor_release(f);
    grace_ir_free(ir);
  }
  /* a branch returning its argument: the region's result is a tensor of its own */
  grace_ir *ir = grace_ir_new(vm, "ident");
  grace_value p, x, y, c;
  grace_ir_input(ir, GRACE_BOOL, GRACE_CPU, 0, NULL, &p);
  grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 1, S4, &x);
  grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 1, S4, &y);
  grace_ir_cond(ir, p, 2, (grace_value[]){x, y}, branch2("then", -1), branch2("else", GRACE_OP_SUB), 1, &c);
  grace_ir_output(ir, c);
  grace_tensor *pt = scalar_of(GRACE_BOOL, 1), *xt = vec(XV), *yt = vec(YV), *out = NULL;
  ok(grace_ir_run(ir, 3, (grace_tensor *[]){pt, xt, yt}, 1, &out) == GRACE_OK && out != xt, "a returned argument is copied");
  float got[4] = {0};
  grace_tensor_read(vm, out, GRACE_FLOAT32, got);
  ok(got[0] == 1 && got[3] == 4, "with the argument's values");
  grace_tensor_release(out);
  /* a predicate that is not 0-d at run time cannot happen (inputs are typed); a 1-d one fails at build time */
  grace_tensor_release(pt); grace_tensor_release(xt); grace_tensor_release(yt);
  grace_ir_free(ir);
}

/* @loop(i i64[], acc f32[4], step f32[4]) = while i < n: (i + 1, acc + step); returns (i, acc). */
static grace_ir *loop_program(int64_t n, int64_t max_iters) {
  const int64_t none[1] = {0};
  grace_ir *c = grace_ir_new(vm, "cond"), *b = grace_ir_new(vm, "body"), *ir = grace_ir_new(vm, "loop");
  grace_value i, acc, step, lim, lt, one, i1, a1, out[2];
  grace_ir_input(c, GRACE_INT64, GRACE_CPU, 0, none, &i);
  grace_ir_input(c, GRACE_FLOAT32, GRACE_CPU, 1, S4, &acc);
  grace_ir_input(c, GRACE_FLOAT32, GRACE_CPU, 1, S4, &step);
  grace_ir_literal_int(c, n, &lim);
  grace_ir_op(c, GRACE_OP_LT, 2, (grace_value[]){i, lim}, NULL, 1, &lt);
  grace_ir_output(c, lt);
  grace_ir_input(b, GRACE_INT64, GRACE_CPU, 0, none, &i);
  grace_ir_input(b, GRACE_FLOAT32, GRACE_CPU, 1, S4, &acc);
  grace_ir_input(b, GRACE_FLOAT32, GRACE_CPU, 1, S4, &step);
  grace_ir_literal_int(b, 1, &one);
  grace_ir_op(b, GRACE_OP_ADD, 2, (grace_value[]){i, one}, NULL, 1, &i1);
  grace_ir_op(b, GRACE_OP_ADD, 2, (grace_value[]){acc, step}, NULL, 1, &a1);
  grace_ir_output(b, i1);
  grace_ir_output(b, a1);
  grace_ir_input(ir, GRACE_INT64, GRACE_CPU, 0, none, &i);
  grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 1, S4, &acc);
  grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 1, S4, &step);
  grace_status st = grace_ir_while(ir, 2, (grace_value[]){i, acc}, 1, &step, c, b, max_iters, out);
  ok(st == GRACE_OK, "while builds: %s", grace_last_error(vm));
  grace_ir_output(ir, out[0]);
  grace_ir_output(ir, out[1]);
  return ir;
}

/* Runs loop_program from i0: the loop runs max(n - i0, 0) times. */
static void check_loop(grace_ir *ir, int64_t i0, int64_t n, const char *what) {
  grace_tensor *it = scalar_of(GRACE_INT64, (double)i0), *acc = vec(XV), *step = vec(YV), *out[2] = {NULL, NULL};
  grace_status st = grace_ir_run(ir, 3, (grace_tensor *[]){it, acc, step}, 2, out);
  int64_t iters = n > i0 ? n - i0 : 0, gi = -1;
  float got[4] = {0};
  if (st == GRACE_OK) { grace_tensor_read(vm, out[0], GRACE_INT64, &gi); grace_tensor_read(vm, out[1], GRACE_FLOAT32, got); }
  int good = st == GRACE_OK && gi == (n > i0 ? n : i0);
  for (int k = 0; k < 4; k++) {
    float want = XV[k];
    for (int64_t j = 0; j < iters; j++) want += YV[k];
    good &= got[k] == want;
  }
  ok(good, "%s: %lld iterations (%s)", what, (long long)iters, st == GRACE_OK ? "ran" : grace_last_error(vm));
  for (int k = 0; k < 2; k++) grace_tensor_release(out[k]);
  grace_tensor_release(it); grace_tensor_release(acc); grace_tensor_release(step);
}

static void test_while_run(void) {
  grace_ir *ir = loop_program(5, 0);
  ok(grace_ir_verify(ir) == GRACE_OK, "while verifies: %s", grace_last_error(vm));
  check_loop(ir, 5, 5, "cond false at once");
  check_loop(ir, 4, 5, "one iteration");
  check_loop(ir, -20, 5, "many iterations");
  grace_ir_free(ir);
  ir = loop_program(5, 3);
  check_loop(ir, 2, 5, "exactly max_iters iterations");
  grace_tensor *it = scalar_of(GRACE_INT64, 0), *acc = vec(XV), *step = vec(YV), *out[2] = {NULL, NULL};
  grace_status st = grace_ir_run(ir, 3, (grace_tensor *[]){it, acc, step}, 2, out);
  ok(st != GRACE_OK && strstr(grace_last_error(vm), "max_iters=3"), "past max_iters is an error: %s", grace_last_error(vm));
  ok(!out[0] && !out[1], "and gives no results");
  grace_tensor_release(it); grace_tensor_release(acc); grace_tensor_release(step);
  grace_ir_free(ir);
}

static void test_builder_errors(void) {
  grace_ir *ir = grace_ir_new(vm, "bad");
  grace_value p, v, x, y, c[2];
  grace_ir_input(ir, GRACE_BOOL, GRACE_CPU, 0, NULL, &p);
  grace_ir_input(ir, GRACE_BOOL, GRACE_CPU, 1, S4, &v);
  grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 1, S4, &x);
  grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 1, S4, &y);
  grace_ir *t = branch2("then", GRACE_OP_ADD), *e = branch2("else", GRACE_OP_MUL);
  ok(grace_ir_cond(ir, v, 2, (grace_value[]){x, y}, t, e, 1, c) == GRACE_EARG &&
     strstr(grace_last_error(vm), "0-d") && strstr(grace_last_error(vm), "bool[4]"), "a 1-d predicate: %s", grace_last_error(vm));
  ok(grace_ir_cond(ir, p, 1, &x, t, e, 1, c) == GRACE_EARG && strstr(grace_last_error(vm), "takes 2 inputs"),
     "the branch's arity: %s", grace_last_error(vm));
  ok(grace_ir_cond(ir, p, 2, (grace_value[]){x, y}, t, e, 2, c) == GRACE_EARG && strstr(grace_last_error(vm), "returns 1"),
     "the result count: %s", grace_last_error(vm));
  grace_ir_free(e);
  /* else returns x[:2] (f32[2]), then returns f32[4] */
  e = grace_ir_new(vm, "else");
  grace_value ex, ey, en;
  grace_ir_input(e, GRACE_FLOAT32, GRACE_CPU, 1, S4, &ex);
  grace_ir_input(e, GRACE_FLOAT32, GRACE_CPU, 1, S4, &ey);
  grace_attrs nar = {.ndims = 1, .dims = {0}, .i0 = 0, .i1 = 2};
  grace_ir_op(e, GRACE_OP_NARROW, 1, &ex, &nar, 1, &en);
  grace_ir_output(e, en);
  grace_status st = grace_ir_cond(ir, p, 2, (grace_value[]){x, y}, t, e, 1, c);
  ok(st == GRACE_EARG && strstr(grace_last_error(vm), "f32[4] in then") && strstr(grace_last_error(vm), "f32[2] in else"),
     "branches of different shapes, both named: %s", grace_last_error(vm));
  ok(grace_ir_count(ir, "insts") == 4, "nothing appended on failure (the caller keeps the branches)");
  grace_ir_free(t); grace_ir_free(e);
  /* a body that changes the state's shape */
  grace_ir *cb = grace_ir_new(vm, "cond"), *bb = grace_ir_new(vm, "body");
  grace_value a, r, z;
  grace_ir_input(cb, GRACE_FLOAT32, GRACE_CPU, 1, S4, &a);
  grace_ir_op(cb, GRACE_OP_SUM, 1, &a, NULL, 1, &r);
  grace_ir_output(cb, r);
  grace_ir_input(bb, GRACE_FLOAT32, GRACE_CPU, 1, S4, &a);
  grace_ir_op(bb, GRACE_OP_NARROW, 1, &a, &nar, 1, &z);
  grace_ir_output(bb, z);
  ok(grace_ir_while(ir, 1, &x, 0, NULL, cb, bb, 0, c) == GRACE_EARG && strstr(grace_last_error(vm), "changes state 0") &&
     strstr(grace_last_error(vm), "f32[2]"), "a body changing the state's shape: %s", grace_last_error(vm));
  ok(grace_ir_while(ir, 1, &x, 0, NULL, bb, cb, 0, c) == GRACE_EARG && strstr(grace_last_error(vm), "0-d"),
     "a cond that returns no 0-d value: %s", grace_last_error(vm));
  ok(grace_ir_while(ir, 1, &x, 0, NULL, cb, cb, 0, c) == GRACE_EARG, "one IR as both sub-programs is refused");
  grace_ir_free(cb); grace_ir_free(bb);
  /* a sub-program with a captured tensor captures implicitly: refused */
  grace_ir *k = grace_ir_new(vm, "then"), *k2 = branch2("else", GRACE_OP_ADD);
  grace_tensor *w = vec(XV);
  grace_value kx, ky, kw, ks;
  grace_ir_input(k, GRACE_FLOAT32, GRACE_CPU, 1, S4, &kx);
  grace_ir_input(k, GRACE_FLOAT32, GRACE_CPU, 1, S4, &ky);
  grace_ir_const(k, w, &kw);
  grace_ir_op(k, GRACE_OP_ADD, 2, (grace_value[]){kx, kw}, NULL, 1, &ks);
  grace_ir_output(k, ks);
  ok(grace_ir_cond(ir, p, 2, (grace_value[]){x, y}, k, k2, 1, c) == GRACE_EARG && strstr(grace_last_error(vm), "captures nothing"),
     "a sub-program with a captured tensor: %s", grace_last_error(vm));
  grace_tensor_release(w);
  grace_ir_free(k); grace_ir_free(k2);
  grace_ir_free(ir);
}

/* The program with a cond nested in a while's body: while i < 6: acc = cond(i < 3, acc + step, acc * step). */
static const char *NESTED =
    "func @nested {\n"
    "  %0 = input #0 : i64[]\n"
    "  %1 = input #1 : f32[4]\n"
    "  %2 = input #2 : f32[4]\n"
    "  %3, %4 = while %0, %1, %2 {i0=100} : i64[], f32[4]  @\"n.lua:2\" {\n"
    "    func @cond {\n"
    "      %0 = input #0 : i64[]\n"
    "      %1 = input #1 : f32[4]\n"
    "      %2 = input #2 : f32[4]\n"
    "      %3 = literal 6 : i64[]\n"
    "      %4 = lt %0, %3 : bool[]\n"
    "      return %4\n"
    "    }\n"
    "    func @body {\n"
    "      %0 = input #0 : i64[]\n"
    "      %1 = input #1 : f32[4]\n"
    "      %2 = input #2 : f32[4]\n"
    "      %3 = literal 3 : i64[]\n"
    "      %4 = lt %0, %3 : bool[]\n"
    "      %5 = cond %4, %1, %2 : f32[4] {\n"
    "        func @then {\n"
    "          %0 = input #0 : f32[4]\n"
    "          %1 = input #1 : f32[4]\n"
    "          %2 = add %0, %1 : f32[4]\n"
    "          return %2\n"
    "        }\n"
    "        func @else {\n"
    "          %0 = input #0 : f32[4]\n"
    "          %1 = input #1 : f32[4]\n"
    "          %2 = mul %0, %1 : f32[4]\n"
    "          return %2\n"
    "        }\n"
    "      }\n"
    "      %6 = literal 1 : i64[]\n"
    "      %7 = add %0, %6 : i64[]\n"
    "      return %7, %5\n"
    "    }\n"
    "  }\n"
    "  return %4, %3\n"
    "}\n";

/* What NESTED computes from i0 (in C). */
static void nested_want(int64_t i0, float *acc) {
  for (int k = 0; k < 4; k++) acc[k] = XV[k];
  for (int64_t i = i0; i < 6; i++)
    for (int k = 0; k < 4; k++) acc[k] = i < 3 ? acc[k] + YV[k] : acc[k] * YV[k];
}

static int run_nested(grace_ir *ir, int64_t i0, float *got) {
  grace_tensor *it = scalar_of(GRACE_INT64, (double)i0), *acc = vec(XV), *step = vec(YV), *out = NULL;
  grace_status st = grace_ir_run(ir, 3, (grace_tensor *[]){it, acc, step}, 1, &out);
  if (st == GRACE_OK) grace_tensor_read(vm, out, GRACE_FLOAT32, got);
  grace_tensor_release(out);
  grace_tensor_release(it); grace_tensor_release(acc); grace_tensor_release(step);
  return st == GRACE_OK;
}

static void test_text(void) {
  grace_ir *ir = NULL;
  grace_status st = grace_ir_parse(vm, NESTED, &ir);
  ok(st == GRACE_OK, "nested regions parse: %s", grace_last_error(vm));
  if (st != GRACE_OK) return;
  is_str(grace_ir_text(ir), NESTED, "and print back as written");
  ok(grace_ir_verify(ir) == GRACE_OK, "and verify: %s", grace_last_error(vm));
  for (int64_t i0 = 0; i0 <= 6; i0 += 2) {
    float got[4] = {0}, want[4];
    nested_want(i0, want);
    int good = run_nested(ir, i0, got);
    for (int k = 0; k < 4; k++) good &= fabsf(got[k] - want[k]) <= 1e-6f * fabsf(want[k]);
    ok(good, "cond inside while from i=%lld: %g %g %g %g", (long long)i0, got[0], got[1], got[2], got[3]);
  }
  ok(grace_ir_sub(ir, 3, 1) && grace_ir_count(grace_ir_sub(ir, 3, 1), "insts") == 8, "grace_ir_sub gives the body");
  ok(!grace_ir_sub(ir, 2, 0), "no sub-program for an input");
  /* a built program prints as text that parses to the same print and runs alike */
  grace_ir *built = cond_program(GRACE_BOOL);
  char *text = strdup(grace_ir_text(built));
  grace_ir *back = NULL;
  ok(grace_ir_parse(vm, text, &back) == GRACE_OK, "a built cond parses back: %s", grace_last_error(vm));
  if (back) {
    is_str(grace_ir_text(back), text, "print -> parse -> print is identical");
    grace_tensor *p = scalar_of(GRACE_BOOL, 0);
    check_run(back, p, 0, "the parsed cond");
    grace_tensor_release(p);
  }
  free(text);
  grace_ir_free(back);
  grace_ir_free(built);
  grace_ir_free(ir);
}

/* Replaces the first occurrence of from in NESTED by to, parses, and expects the verifier to refuse. */
static void rejects(const char *from, const char *to, const char *needle, const char *what) {
  char buf[4096];
  const char *at = strstr(NESTED, from);
  if (!ok(at != NULL, "the text to replace for %s is there", what)) return;
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - NESTED), NESTED, to, at + strlen(from));
  grace_ir *ir = NULL;
  grace_status st = grace_ir_parse(vm, buf, &ir);
  if (st == GRACE_OK) st = grace_ir_verify(ir);
  ok(st != GRACE_OK && strstr(grace_last_error(vm), needle), "verifier rejects %s: %s", what, grace_last_error(vm));
  grace_ir_free(ir);
}

static void test_verify(void) {
  rejects("          %2 = mul %0, %1 : f32[4]\n          return %2", "          %2 = sum %0 : f32[]\n          return %2",
          "different types", "branches returning different types");
  rejects("          %1 = input #1 : f32[4]\n          %2 = add", "          %1 = input #1 : f32[3]\n          %2 = add",
          "input 1 of the then", "a branch input of the wrong type");
  rejects("      %4 = lt %0, %3 : bool[]\n      return %4", "      %4 = lt %0, %3 : bool[]\n      %5 = add %0, %3 : i64[]\n      return %4, %5",
          "returns 2 values", "a cond sub-program with two results");
  rejects("      return %7, %5", "      return %5, %7", "changes state 0", "a body returning the state out of order");
  rejects("%3, %4 = while %0, %1, %2 {i0=100} : i64[], f32[4]", "%3, %4 = while %0, %1, %2 {i0=100} : i64[], f32[3]",
          "typed f32[3]", "a region result typed unlike its sub-program");
  rejects("          %2 = add %0, %1 : f32[4]", "          %2 = add %0, %3 : f32[4]", "before it is defined",
          "a use before definition inside a nested body");
  rejects("      %3 = literal 3 : i64[]\n", "      %3 = literal 3 : i64[]\n      %9 = input #2 : f32[4]\n",
          "results numbered in order", "misnumbered values inside a body");
}

static void test_passes(void) {
  grace_ir *ir = NULL;
  grace_ir_parse(vm, NESTED, &ir);
  if (!ir) { ok(0, "parse"); return; }
  /* the then branch computes acc + step twice (cse), times 1 (simplify) */
  grace_ir *opt = NULL;
  grace_status st = grace_ir_pass(ir, "default", &opt);
  ok(st == GRACE_OK, "the default pipeline runs over regions: %s", grace_last_error(vm));
  if (opt) {
    int same = 1;
    for (int64_t i0 = 0; i0 <= 6; i0 += 3) {
      float a[4] = {0}, b[4] = {1};
      same &= run_nested(ir, i0, a) && run_nested(opt, i0, b) && !memcmp(a, b, sizeof a);
    }
    ok(same, "and keeps the results");
    ok(grace_ir_verify(opt) == GRACE_OK, "its output verifies");
  }
  grace_ir_free(opt);
  grace_ir_free(ir);
  /* dce: an unused region goes, a used one stays; cse inside a branch */
  const char *t =
      "func @d {\n"
      "  %0 = input #0 : bool[]\n"
      "  %1 = input #1 : f32[4]\n"
      "  %2 = cond %0, %1 : f32[4] {\n"
      "    func @then {\n"
      "      %0 = input #0 : f32[4]\n"
      "      %1 = exp %0 : f32[4]\n"
      "      %2 = exp %0 : f32[4]\n"
      "      %3 = literal 1 : i64[]\n"
      "      %4 = mul %2, %3 : f32[4]\n"
      "      %5 = add %1, %4 : f32[4]\n"
      "      return %5\n"
      "    }\n"
      "    func @else {\n"
      "      %0 = input #0 : f32[4]\n"
      "      return %0\n"
      "    }\n"
      "  }\n"
      "  %3 = cond %0, %1 : f32[4] {\n"
      "    func @then {\n"
      "      %0 = input #0 : f32[4]\n"
      "      return %0\n"
      "    }\n"
      "    func @else {\n"
      "      %0 = input #0 : f32[4]\n"
      "      return %0\n"
      "    }\n"
      "  }\n"
      "  return %2\n"
      "}\n";
  st = grace_ir_parse(vm, t, &ir);
  ok(st == GRACE_OK, "dce program parses: %s", grace_last_error(vm));
  if (st != GRACE_OK) return;
  st = grace_ir_pass(ir, "dce", &opt);
  ok(st == GRACE_OK && grace_ir_count(opt, "insts") == 3, "dce drops the unused region and keeps the used one (%d insts)",
     opt ? grace_ir_count(opt, "insts") : -1);
  grace_ir_free(opt);
  st = grace_ir_pass(ir, "simplify,cse,dce", &opt);
  grace_ir *then = opt ? grace_ir_sub(opt, 2, 0) : NULL;
  ok(st == GRACE_OK && then && grace_ir_count(then, "insts") == 3,
     "the passes optimize a branch too: exp(x) + exp(x) * 1 -> 3 instructions (%d)", then ? grace_ir_count(then, "insts") : -1);
  if (opt) {
    float xv[4] = {0.5f, -1, 2, 0};
    grace_tensor *p = scalar_of(GRACE_BOOL, 1), *x = vec(xv), *o1 = NULL, *o2 = NULL;
    float a[4], b[4];
    int good = grace_ir_run(ir, 2, (grace_tensor *[]){p, x}, 1, &o1) == GRACE_OK &&
               grace_ir_run(opt, 2, (grace_tensor *[]){p, x}, 1, &o2) == GRACE_OK;
    if (good) { grace_tensor_read(vm, o1, GRACE_FLOAT32, a); grace_tensor_read(vm, o2, GRACE_FLOAT32, b); }
    for (int k = 0; good && k < 4; k++) good &= fabsf(a[k] - 2 * expf(xv[k])) < 1e-5f && a[k] == b[k];
    ok(good, "the optimized branch computes 2 exp(x) as before");
    grace_tensor_release(o1); grace_tensor_release(o2); grace_tensor_release(p); grace_tensor_release(x);
  }
  grace_ir_free(opt);
  grace_ir_free(ir);
}

static void test_fusion(void) {
  /* a = x * 2 before the region, b = x + 1 after it, d = a * b: without the barrier a, b and d are one kernel */
  const char *t =
      "func @fz {\n"
      "  %0 = input #0 : bool[]\n"
      "  %1 = input #1 : f32[4]\n"
      "  %2 = literal 2 : i64[]\n"
      "  %3 = mul %1, %2 : f32[4]\n"
      "  %4 = cond %0, %1 : f32[4] {\n"
      "    func @then {\n"
      "      %0 = input #0 : f32[4]\n"
      "      %1 = exp %0 : f32[4]\n"
      "      %2 = neg %1 : f32[4]\n"
      "      return %2\n"
      "    }\n"
      "    func @else {\n"
      "      %0 = input #0 : f32[4]\n"
      "      return %0\n"
      "    }\n"
      "  }\n"
      "  %5 = literal 1 : i64[]\n"
      "  %6 = add %1, %5 : f32[4]\n"
      "  %7 = mul %3, %6 : f32[4]\n"
      "  %8 = add %7, %4 : f32[4]\n"
      "  return %8\n"
      "}\n";
  grace_ir *ir = NULL;
  grace_status st = grace_ir_parse(vm, t, &ir);
  ok(st == GRACE_OK, "fusion program parses: %s", grace_last_error(vm));
  if (st != GRACE_OK) return;
  char rep[2048];
  int nk = 0;
  st = grace_ir_fuse_report(ir, rep, sizeof rep, &nk);
  ok(st == GRACE_OK, "fuse report: %s", grace_last_error(vm));
  printf("# %s", rep);
  ok(strstr(rep, "pointwise: %3 = mul") != NULL, "the op before the region is a kernel of its own");
  ok(strstr(rep, "region: %4 = cond") != NULL, "the region is a kernel of its own");
  ok(strstr(rep, "pointwise: %6 %7 %8 = add mul add") != NULL, "the ops after it fuse among themselves");
  is_int(nk, 3, "three kernels: nothing crosses the region");
  grace_ir *then = grace_ir_sub(ir, 4, 0);
  st = grace_ir_fuse_report(then, rep, sizeof rep, &nk);
  ok(st == GRACE_OK && nk == 1 && strstr(rep, "exp neg"), "the branch fuses on its own: %s", rep);
  grace_ir_free(ir);
}


/* Recording a region from C, as a host other than Lua would: then = x + w (w from outside: captured as an input),
 * then x.fill_(1) (an in-place write to an input: handed back as a write), else = x * x; the traced program then
 * runs both ways. */
static void test_trace(void) {
  grace_ir *ir = grace_ir_new(vm, "traced"), *t = grace_ir_new(vm, "then"), *e = grace_ir_new(vm, "else");
  grace_tensor *p = scalar_of(GRACE_BOOL, 1), *x = vec(XV), *w = vec(YV), *r1 = NULL, *r2 = NULL, *caps[4] = {0};
  grace_value v;
  int ncap = -1;
  ok(grace_trace_begin(vm, ir, NULL, NULL) == GRACE_OK, "trace begins");
  grace_trace_input(vm, p, &v);
  grace_trace_input(vm, x, &v);
  ok(grace_trace_sub_begin(vm, t, 1, &x) == GRACE_OK, "then's recording begins");
  grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){x, w}, NULL, 1, &r1);
  grace_attrs one = {.a = 1};
  grace_trace_pause(vm);   /* the test's looks at x are no reads of the function's */
  uint64_t ver = grace_tensor_version(x);
  grace_trace_resume(vm);
  grace_status st = grace_run(vm, GRACE_OP_FILL_, 1, &x, &one, 0, NULL);
  ok(st == GRACE_OK, "an in-place write to an input inside the branch runs: %s", grace_last_error(vm));
  float xs[4];
  grace_sub_writes wr[2] = {{0}, {0}};
  ok(grace_trace_sub_end(vm, 1, &r1, 4, caps, &ncap, &wr[0]) == GRACE_OK && ncap == 1 && caps[0] == w,
     "then ends: w is its one capture (%d)", ncap);
  grace_trace_pause(vm);
  grace_tensor_read(vm, x, GRACE_FLOAT32, xs);
  float fin[4] = {0};
  if (wr[0].n == 1) grace_tensor_read(vm, wr[0].final[0], GRACE_FLOAT32, fin);
  uint64_t ver1 = grace_tensor_version(x);
  grace_trace_resume(vm);
  ok(wr[0].n == 1 && wr[0].t[0] == x && fin[0] == 1 && fin[3] == 1, "the write is handed back: x, and its contents then");
  ok(xs[0] == XV[0] && xs[3] == XV[3] && ver1 == ver, "x has its contents and version back");
  ok(grace_trace_sub_begin(vm, e, 2, (grace_tensor *[]){x, w}) == GRACE_OK, "else's recording begins");
  grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){x, x}, NULL, 1, &r2);
  int n2 = -1;
  ok(grace_trace_sub_end(vm, 1, &r2, 4, caps + 1, &n2, &wr[1]) == GRACE_OK && n2 == 0 && wr[1].n == 0,
     "else ends with no capture and no write");
  grace_tensor_release(r2);
  st = grace_trace_cond(vm, p, 2, (grace_tensor *[]){x, w}, t, e, 1, &r1, wr, 0);
  grace_sub_writes_release(&wr[0]);
  ok(st == GRACE_OK, "the region is appended: %s", grace_last_error(vm));
  grace_trace_pause(vm);
  grace_tensor_read(vm, x, GRACE_FLOAT32, xs);
  ver1 = grace_tensor_version(x);
  grace_trace_resume(vm);
  ok(xs[0] == 1 && xs[3] == 1 && ver1 == ver + 1, "x holds the taken branch's write, version + 1");
  grace_trace_value(vm, r1, &v);
  grace_ir_output(ir, v);
  ok(grace_trace_end(vm) == GRACE_OK, "trace ends clean: %s", grace_last_error(vm));
  const char *txt = grace_ir_verify(ir) == GRACE_OK ? grace_ir_text(ir) : NULL;   /* one call: each remakes the text */
  ok(txt && strstr(txt, "%3, %4 = cond %0, %1, %2 : f32[4], f32[4]") && strstr(txt, "copy_") &&
     grace_ir_count(ir, "writes") == 1, "the IR: the region returns x too, copied into it once: %s",
     txt ? txt : grace_last_error(vm));
  for (int b = 0; b < 2; b++) {
    grace_tensor *pb = scalar_of(GRACE_BOOL, b), *xb = vec(XV), *out = NULL;
    float got[4] = {0}, xa[4] = {0};
    int good = grace_ir_run(ir, 2, (grace_tensor *[]){pb, xb}, 1, &out) == GRACE_OK;
    if (good) grace_tensor_read(vm, out, GRACE_FLOAT32, got);
    if (good) grace_tensor_read(vm, xb, GRACE_FLOAT32, xa);
    for (int k = 0; k < 4; k++) good &= got[k] == (b ? XV[k] + YV[k] : XV[k] * XV[k]) && xa[k] == (b ? 1 : XV[k]);
    ok(good, "the traced program takes the %s branch, x %s", b ? "then" : "else", b ? "filled" : "as it was");
    grace_tensor_release(out);
    grace_tensor_release(pb);
    grace_tensor_release(xb);
  }
  grace_tensor_release(caps[0]);
  grace_tensor_release(r1);
  grace_ir_free(ir);
  /* a host read inside a branch is a problem of the trace, and a failed host function leaves nothing behind */
  ir = grace_ir_new(vm, "broken");
  t = grace_ir_new(vm, "then");
  grace_trace_begin(vm, ir, NULL, NULL);
  grace_trace_input(vm, x, &v);
  grace_trace_sub_begin(vm, t, 1, &x);
  grace_tensor_read(vm, x, GRACE_FLOAT32, xs);
  grace_trace_sub_abort(vm);
  ok(strstr(grace_trace_problems(vm), "reads a tensor on the host") != NULL, "a host read inside: %s", grace_trace_problems(vm));
  ok(grace_trace_end(vm) == GRACE_EUNSUPPORTED, "so the trace is no program");
  grace_ir_free(t);
  grace_ir_free(ir);
  grace_tensor_release(p); grace_tensor_release(x); grace_tensor_release(w);
}

/* Bad writes handed to grace_trace_cond: a tensor that is none of the region's inputs, a NULL tensor, a count past
 * GRACE_SUB_WRITES, a branch whose outputs do not match its writes: each an error (the sub-programs freed, the tensor
 * untouched), and the trace goes on. */
static void test_bad_writes(void) {
  grace_tensor *p = scalar_of(GRACE_BOOL, 1), *x = vec(XV), *w = vec(YV);
  for (int c = 0; c < 4; c++) {
    grace_ir *ir = grace_ir_new(vm, "bad"), *t = grace_ir_new(vm, "then"), *e = grace_ir_new(vm, "else");
    grace_value v, o;
    grace_trace_begin(vm, ir, NULL, NULL);
    grace_trace_input(vm, p, &v);
    grace_trace_input(vm, x, &v);
    grace_ir_input(t, GRACE_FLOAT32, GRACE_CPU, 1, S4, &o);
    grace_ir_output(t, o);
    if (c != 3) grace_ir_output(t, o);   /* then's written tensor's final value */
    grace_ir_input(e, GRACE_FLOAT32, GRACE_CPU, 1, S4, &o);
    grace_ir_output(e, o);
    grace_sub_writes wr[2] = {{0}, {0}};
    wr[0].n = c == 2 ? GRACE_SUB_WRITES + 1 : 1;
    wr[0].t[0] = c == 1 ? NULL : (c == 0 ? w : x);
    wr[0].final[0] = w;
    grace_tensor *r = vec(XV);
    grace_status st = grace_trace_cond(vm, p, 1, &x, t, e, 1, &r, wr, 0);
    float xs[4] = {0};
    grace_trace_pause(vm);
    grace_tensor_read(vm, x, GRACE_FLOAT32, xs);
    grace_trace_resume(vm);
    ok(st == GRACE_EARG && xs[0] == XV[0] && xs[3] == XV[3], "bad writes %d: an error, x untouched: %s", c,
       grace_last_error(vm));
    grace_tensor_release(r);
    grace_trace_end(vm);
    grace_ir_free(ir);
  }
  grace_sub_writes_release(NULL);
  grace_tensor_release(p); grace_tensor_release(x); grace_tensor_release(w);
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  if (!vm) { printf("1..0 # SKIP no VM: %s\n", err); return 1; }
  test_cond_run();
  test_while_run();
  test_builder_errors();
  test_text();
  test_verify();
  test_passes();
  test_fusion();
  test_trace();
  test_bad_writes();
  grace_vm_free(vm);
  return tap_done();
}
