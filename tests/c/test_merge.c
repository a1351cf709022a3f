/* test_merge.c: merging two recorded paths at a host branch into one program with a cond region (ir/ir_merge.c),
 * from hand-written IR text: a break's predicate prints and parses back; the merged program verifies, holds the
 * predicate ops and a cond whose then branch is the path that took the true side, and runs on the CPU to the values
 * each path computes (worked out by hand here); an early return (a path whose rest is empty) returns a prefix value
 * through the region; an integer value compares in int64 and a boolean by its truth; and the merge refuses, with
 * the reason, paths that take the same outcome, return different shapes, break twice, or read the value in a way
 * that is no predicate; a branch writing in place into a value from before it, and paths writing their argument
 * back (each its own way), merge and run to what each path leaves. A compiled function of a C host that says
 * how it branches (grace_trace_branch) runs its host function for the first two calls only: then the program. */
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "ir/ir.h"
#include "tap.h"

#include "c/ir_text.h"

static grace_vm *vm;

/* y = 2x; s = sum(y); the host branches on s OP k; then rest / else rest */
#define PREFIX                          \
  "func @f {\n"                         \
  "  %0 = input #0 : f32[4]\n"          \
  "  %1 = literal 2 : i64[]\n"          \
  "  %2 = mul %0, %1 : f32[4]\n"        \
  "  %3 = sum %2 : f32[]\n"

static const char *T_ADD = PREFIX
  "  break %3 gt 0 then  @\"f.lua:3\"\n"
  "  %4 = literal 1 : i64[]\n"
  "  %5 = add %2, %4 : f32[4]\n"
  "  return %5\n"
  "}\n";
static const char *E_NEG = PREFIX
  "  break %3 gt 0 else  @\"f.lua:3\"\n"
  "  %4 = neg %2 : f32[4]\n"
  "  return %4\n"
  "}\n";

/* Merges t and e (their own outputs) at break 0: the program, or NULL with why. */
static grace_ir *merge(grace_ir *t, grace_ir *e, char *why, size_t n, grace_status *st) {
  grace_ir *m = NULL;
  *st = ir_merge(t, e, 0, t->nout, t->outputs, e->outputs, &m, why, n);
  return m;
}

/* Runs m on x (f32[4]) and compares with want. */
static int runs_to(grace_ir *m, const float *x, const float *want) {
  grace_tensor *in = NULL, *out = NULL;
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, (int64_t[]){4}, GRACE_FLOAT32, x, &in);
  grace_status st = grace_ir_run(m, 1, &in, 1, &out);
  float got[4] = {0};
  if (st == GRACE_OK) grace_tensor_read(vm, out, GRACE_FLOAT32, got);
  else printf("# run: %s\n", grace_last_error(vm));
  grace_tensor_release(in);
  grace_tensor_release(out);
  return st == GRACE_OK && !memcmp(got, want, sizeof got);
}

static void test_text(void) {
  grace_ir *t = parse_ir(vm, T_ADD);
  if (!ok(t != NULL, "a path with a predicate on its break parses")) return;
  ok(t->nbreak == 1 && t->breaks[0].kind == IR_BRK_PRED && t->breaks[0].value == 3 && t->breaks[0].cmp == GRACE_CMP_GT &&
     t->breaks[0].taken == 1, "the break holds the value, the comparison and the outcome");
  ok(text_has(grace_ir_text(t), "  break %3 gt 0 then  @\"f.lua:3\"\n"), "and prints back as written");
  grace_ir *w = parse_ir(vm, "func @g {\n  %0 = input #0 : f32[]\n"
                             "  break !\"g.lua:2: the value is stored in a local\"  @\"g.lua:2\"\n"
                             "  return %0\n}\n");
  ok(w && w->breaks[0].kind == IR_BRK_WHY &&
     text_has(grace_ir_text(w), "break !\"g.lua:2: the value is stored in a local\""),
     "a break that is no predicate keeps its reason through print and parse");
  grace_ir_free(t);
  grace_ir_free(w);
}

static void test_merge_two(void) {
  grace_ir *t = parse_ir(vm, T_ADD), *e = parse_ir(vm, E_NEG);
  char why[300];
  grace_status st;
  grace_ir *m = t && e ? merge(t, e, why, sizeof why, &st) : NULL;
  if (!ok(m != NULL, "two paths taking both sides of `sum > 0` merge (%s)", m ? "" : why)) goto out;
  ok(grace_ir_verify(m) == GRACE_OK, "the merged program verifies");
  const char *text = grace_ir_text(m);
  ok(text_has(text, "cast %3 {dtype=f64}") && text_has(text, "literal 0 : f64[]") &&
     text_has(text, "gt %4, %5 : bool[]"),
     "the predicate is computed in float64 on the program's device, as Lua compares the number");
  ok(text_has(text, "= cond %6, %2 : f32[4]  @\"f.lua:3\" {") && text_has(text, "func @f_then") &&
     text_has(text, "func @f_else"),
     "one cond over the prefix value both branches read, at the branch's place");
  ok(grace_ir_count(m, "breaks") == 0 && grace_ir_count(m, "outputs") == 1, "no break is left; one result");
  grace_ir *then_ir = NULL;
  for (int i = 0; i < m->ninst; i++) if (m->insts[i].op == IR_OP_COND) then_ir = grace_ir_sub(m, i, 0);
  ok(then_ir && text_has(grace_ir_text(then_ir), "add "), "the then branch is the path that took the true side");
  ok(runs_to(m, (float[]){1, 2, 3, 4}, (float[]){3, 5, 7, 9}), "sum 20 > 0: 2x + 1, as the then path computes");
  ok(runs_to(m, (float[]){-1, -2, -3, -4}, (float[]){2, 4, 6, 8}), "sum -20: -(2x), as the else path computes");
  ok(runs_to(m, (float[]){0, 0, 0, 0}, (float[]){-0.0f, -0.0f, -0.0f, -0.0f}) , "sum 0 is not > 0: the else path");
  grace_ir *r = NULL;
  ok(grace_ir_parse(vm, text, &r) == GRACE_OK && !strcmp(grace_ir_text(r), text), "the merged program round trips as text");
  grace_ir_free(r);
  /* given the other way round, the paths do not take then/else as asked */
  grace_ir *none = merge(e, t, why, sizeof why, &st);
  ok(!none && st == GRACE_EUNSUPPORTED && text_has(why, "two outcomes"), "then and else swapped: refused (%s)", why);
out:
  grace_ir_free(m);
  grace_ir_free(t);
  grace_ir_free(e);
}

static void test_early_return(void) {
  grace_ir *t = parse_ir(vm, PREFIX "  break %3 gt 100 then  @\"f.lua:4\"\n  return %2\n}\n");
  grace_ir *e = parse_ir(vm, PREFIX "  break %3 gt 100 else  @\"f.lua:4\"\n  %4 = sqrt %2 : f32[4]\n  return %4\n}\n");
  char why[300];
  grace_status st;
  grace_ir *m = t && e ? merge(t, e, why, sizeof why, &st) : NULL;
  if (ok(m != NULL, "an early return (nothing after the break on one path) merges (%s)", m ? "" : why)) {
    ok(runs_to(m, (float[]){10, 20, 30, 40}, (float[]){20, 40, 60, 80}), "sum 200 > 100: the prefix value returned");
    ok(runs_to(m, (float[]){2, 8, 0.5f, 0}, (float[]){2, 4, 1, 0}), "sum 21: the rest runs (sqrt of 2x)");
  }
  grace_ir_free(m);
  grace_ir_free(t);
  grace_ir_free(e);
}

static void test_int_and_bool(void) {
  const char *pre = "func @f {\n  %0 = input #0 : i32[3]\n  %1 = sum %0 : i64[]\n";
  char tt[512], et[512], why[300];
  snprintf(tt, sizeof tt, "%s  break %%1 eq 0 then\n  %%2 = neg %%0 : i32[3]\n  return %%2\n}\n", pre);
  snprintf(et, sizeof et, "%s  break %%1 eq 0 else\n  %%2 = abs %%0 : i32[3]\n  return %%2\n}\n", pre);
  grace_ir *t = parse_ir(vm, tt), *e = parse_ir(vm, et);
  grace_status st;
  grace_ir *m = t && e ? merge(t, e, why, sizeof why, &st) : NULL;
  ok(m && text_has(grace_ir_text(m), "literal 0 : i64[]") && text_has(grace_ir_text(m), "eq %1, %2 : bool[]") &&
     !strstr(grace_ir_text(m), "cast"), "an integer sum == 0 compares exactly in int64 (%s)", m ? "" : why);
  grace_ir_free(m);
  grace_ir_free(t);
  grace_ir_free(e);
  const char *bpre = "func @b {\n  %0 = input #0 : f32[2]\n  %1 = literal 0 : i64[]\n  %2 = gt %0, %1 : bool[2]\n"
                     "  %3 = all %2 : bool[]\n";
  snprintf(tt, sizeof tt, "%s  break %%3 truth then\n  %%4 = exp %%0 : f32[2]\n  return %%4\n}\n", bpre);
  snprintf(et, sizeof et, "%s  break %%3 truth else\n  %%4 = neg %%0 : f32[2]\n  return %%4\n}\n", bpre);
  t = parse_ir(vm, tt);
  e = parse_ir(vm, et);
  m = t && e ? merge(t, e, why, sizeof why, &st) : NULL;
  ok(m && text_has(grace_ir_text(m), "= cond %3, %0"), "a boolean's truth is the predicate itself (%s)", m ? "" : why);
  grace_ir_free(m);
  grace_ir_free(t);
  grace_ir_free(e);
}

/* The merge of T_ADD's prefix and break with else_text refused with a reason containing want. */
static void refused(const char *then_text, const char *else_text, const char *want, const char *what) {
  grace_ir *t = parse_ir(vm, then_text), *e = parse_ir(vm, else_text);
  char why[300] = "";
  grace_status st = GRACE_OK;
  grace_ir *m = t && e ? merge(t, e, why, sizeof why, &st) : NULL;
  ok(t && e && !m && st == GRACE_EUNSUPPORTED && text_has(why, want), "%s: refused (%s)", what, why);
  grace_ir_free(m);
  grace_ir_free(t);
  grace_ir_free(e);
}

/* Runs m on x (f32[4], written back by m) and compares the result with want and x afterwards with want_x. */
static int runs_writing(grace_ir *m, const float *x, const float *want, const float *want_x) {
  grace_tensor *in = NULL, *out = NULL;
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, (int64_t[]){4}, GRACE_FLOAT32, x, &in);
  grace_status st = grace_ir_run(m, 1, &in, 1, &out);
  float got[4] = {0}, after[4] = {0};
  if (st == GRACE_OK) { grace_tensor_read(vm, out, GRACE_FLOAT32, got); grace_tensor_read(vm, in, GRACE_FLOAT32, after); }
  else printf("# run: %s\n", grace_last_error(vm));
  grace_tensor_release(in);
  grace_tensor_release(out);
  return st == GRACE_OK && !memcmp(got, want, sizeof got) && !memcmp(after, want_x, sizeof after);
}

/* In-place writes after the branch: into a value from before it (functional in the branch), and into the argument
 * (written back: the region returns it, copied into it once after the region). */
static void test_writes(void) {
  grace_ir *t = parse_ir(vm, PREFIX "  break %3 gt 0 then\n  %4 = fill_ %2 {a=1} : f32[4]\n  return %4\n}\n");
  grace_ir *e = parse_ir(vm, E_NEG);
  char why[300] = "";
  grace_status st;
  grace_ir *m = t && e ? merge(t, e, why, sizeof why, &st) : NULL;
  if (ok(m != NULL, "a branch writing in place into a value from before it merges (%s)", why)) {
    ok(runs_to(m, (float[]){1, 2, 3, 4}, (float[]){1, 1, 1, 1}), "sum 20 > 0: the filled value");
    ok(runs_to(m, (float[]){-1, -2, -3, -4}, (float[]){2, 4, 6, 8}), "sum -20: -(2x)");
  }
  grace_ir_free(m);
  grace_ir_free(t);
  grace_ir_free(e);
  /* then: x += 1 in place, returns 2x (from before); else: returns -(2x) and writes it into x twice over (bumps 2) */
  t = parse_ir(vm, PREFIX "  break %3 gt 0 then\n  %4 = literal 1 : i64[]\n  %5 = add %0, %4 : f32[4]\n"
                          "  %6 = copy_ %0, %5 : f32[4]\n  write %0, %6\n  return %2\n}\n");
  e = parse_ir(vm, PREFIX "  break %3 gt 0 else\n  %4 = neg %2 : f32[4]\n  %5 = copy_ %0, %4 : f32[4]\n"
                          "  write %0, %5 bumps=2\n  return %4\n}\n");
  m = t && e ? merge(t, e, why, sizeof why, &st) : NULL;
  if (ok(m != NULL, "paths writing their argument back merge (%s)", why)) {
    const char *text = grace_ir_text(m);
    ok(grace_ir_verify(m) == GRACE_OK && text_has(text, "%7, %8 = cond %6, %0, %2 : f32[4], f32[4]") &&
       text_has(text, "copy_ %0, ") && !strstr(text, "bumps=") && grace_ir_count(m, "writes") == 1,
       "the region returns x as each path leaves it, copied into x once (one write, whatever each path counted)");
    ok(runs_writing(m, (float[]){1, 2, 3, 4}, (float[]){2, 4, 6, 8}, (float[]){2, 3, 4, 5}),
       "sum 20 > 0: 2x returned, x + 1 written back");
    ok(runs_writing(m, (float[]){-1, -2, -3, -4}, (float[]){2, 4, 6, 8}, (float[]){2, 4, 6, 8}),
       "sum -20: -(2x) returned and written back");
  }
  grace_ir_free(m);
  grace_ir_free(t);
  grace_ir_free(e);
}

static void test_refusals(void) {
  refused(T_ADD, T_ADD, "two outcomes", "both paths took the true side");
  refused(T_ADD, PREFIX "  break %3 gt 0 else\n  return %3\n}\n", "result 1 is f32[4] when the branch is taken and f32[]",
          "the paths return different shapes");
  refused(PREFIX "  break %3 gt 0 then\n  %4 = neg %2 : f32[4]\n  break\n  return %4\n}\n", E_NEG, "break more than once",
          "a second break after the branch");
  refused(PREFIX "  break !\"f.lua:3: the value is passed to tostring\"\n  return %2\n}\n", E_NEG, "no single comparison",
          "a read that is no predicate");
  refused(PREFIX "  break %3 gt 0 then\n  return %2\n}\n", PREFIX "  break %3 gt 1 else\n  return %2\n}\n",
          "two outcomes of one comparison", "two different comparisons");
}

/* ---- a compiled function of a C host (grace_fn): y = 2x; if sum(y) > 0 then y + 1 else -y ---- */
static int host_calls;

static grace_status h_call(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  (void)ud;
  *nres = 0;
  host_calls++;
  if (nargs != 1 || args[0].kind != GRACE_ARG_TENSOR || maxres < 1) return GRACE_EHOST;
  grace_tensor *two = NULL, *one = NULL, *y = NULL, *s = NULL, *r = NULL;
  double v = 0;
  grace_status st = grace_tensor_scalar(vm, 2.0, 0, &two);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){args[0].t, two}, NULL, 1, &y);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_SUM, 1, &y, NULL, 1, &s);
  if (st == GRACE_OK) st = grace_tensor_read(vm, s, GRACE_FLOAT64, &v);   /* the break */
  if (st == GRACE_OK) st = grace_trace_branch(vm, s, GRACE_CMP_GT, 0, v > 0, NULL);
  if (st == GRACE_OK && v > 0) {
    if ((st = grace_tensor_scalar(vm, 1.0, 0, &one)) == GRACE_OK)
      st = grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){y, one}, NULL, 1, &r);
  } else if (st == GRACE_OK)
    st = grace_run(vm, GRACE_OP_NEG, 1, &y, NULL, 1, &r);
  grace_tensor_release(two); grace_tensor_release(one); grace_tensor_release(y); grace_tensor_release(s);
  if (st != GRACE_OK) { grace_tensor_release(r); return GRACE_EHOST; }
  *nres = 1;
  res[0] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = r};
  return GRACE_OK;
}

static void test_fn(void) {
  static const grace_host host = {.call = h_call};
  grace_fn *fn = NULL;
  if (!ok(grace_fn_new(vm, "branch", &host, NULL, NULL, &fn) == GRACE_OK, "a compiled function of a C host")) return;
  static const float xp[4] = {1, 2, 3, 4}, xn[4] = {-1, -2, -3, -4}, yp[4] = {3, 5, 7, 9}, yn[4] = {2, 4, 6, 8};
  grace_tensor *in[2] = {NULL, NULL};
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, (int64_t[]){4}, GRACE_FLOAT32, xp, &in[0]);
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, (int64_t[]){4}, GRACE_FLOAT32, xn, &in[1]);
  int bad = 0, calls_after_warmup = 0;
  for (int i = 0; i < 10; i++) {
    if (i == 2) calls_after_warmup = host_calls;
    grace_arg a = {.kind = GRACE_ARG_TENSOR, .t = in[i % 2]}, r[1];
    int nr = 0;
    float got[4] = {0};
    if (grace_fn_call(fn, 1, &a, &nr, r, 1) != GRACE_OK || nr != 1) { printf("# call %d: %s\n", i + 1, grace_last_error(vm)); bad++; continue; }
    grace_tensor_read(vm, r[0].t, GRACE_FLOAT32, got);
    bad += memcmp(got, i % 2 ? yn : yp, sizeof got) != 0;
    grace_tensor_release(r[0].t);
  }
  is_int(bad, 0, "10 calls alternating the sign: 2x + 1 or -(2x), as worked out by hand");
  is_int(calls_after_warmup, 2, "the first two calls ran the host function (the trace, then the other outcome)");
  is_int(host_calls, 2, "the 8 calls after them ran the merged program: the host function never again");
  grace_fn_stats s;
  grace_fn_get_stats(fn, &s);
  ok(s.auto_regions == 1 && s.replays == 1 && s.partition_runs == 1 && s.eager_calls == 0,
     "stats: one automatic region, one replay (%ld: its prefix ran as a partition, %ld), no eager call", s.replays,
     s.partition_runs);
  grace_tensor_release(in[0]);
  grace_tensor_release(in[1]);
  grace_fn_free(fn);
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  test_text();
  test_merge_two();
  test_early_return();
  test_int_and_bool();
  test_writes();
  test_refusals();
  test_fn();
  grace_vm_free(vm);
  return tap_done();
}
