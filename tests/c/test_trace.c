/* test_trace.c: recording IR by running ops (no Lua): inputs, captures, literals, in-place updates made
 * functional and written back, graph breaks on host reads, aliasing writes refused, and the recorded IR
 * giving the eager results on fresh inputs. */
#include <stdlib.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm;

static grace_tensor *vec(const float *v, int64_t n) {
  grace_tensor *t = NULL;
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, &n, GRACE_FLOAT32, v, &t);
  return t;
}
static grace_tensor *op2(grace_op op, grace_tensor *a, grace_tensor *b) {
  grace_tensor *o = NULL;
  grace_run(vm, op, 2, (grace_tensor *[]){a, b}, NULL, 1, &o);
  return o;
}
static void where_fn(void *ud, char *buf, size_t n) { snprintf(buf, n, "test.lua:%d", *(int *)ud); }

/* program: y = (x + w) * 3; acc += y (in place, acc is an input); return y:sum() */
static grace_tensor *program(grace_tensor *x, grace_tensor *w, grace_tensor *acc) {
  grace_tensor *three = NULL, *s = NULL;
  grace_tensor_scalar(vm, 3, 1, &three);
  grace_tensor *t = op2(GRACE_OP_ADD, x, w), *y = op2(GRACE_OP_MUL, t, three);
  grace_tensor *sum = op2(GRACE_OP_ADD, acc, y);
  grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){acc, sum}, NULL, 0, NULL);
  grace_run(vm, GRACE_OP_SUM, 1, &y, NULL, 1, &s);
  grace_tensor_release(three); grace_tensor_release(t); grace_tensor_release(y); grace_tensor_release(sum);
  return s;
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  float xv[4] = {1, 2, 3, 4}, wv[4] = {0.5f, -1, 2, 0}, av[4] = {10, 20, 30, 40};
  grace_tensor *x = vec(xv, 4), *w = vec(wv, 4), *acc = vec(av, 4);
  grace_ir *ir = grace_ir_new(vm, "prog");
  int line = 7;
  ok(grace_trace_begin(vm, ir, where_fn, &line) == GRACE_OK, "trace begins");
  ok(grace_trace_begin(vm, ir, NULL, NULL) != GRACE_OK, "nested trace refused");
  grace_value vx, va, vs;
  grace_trace_input(vm, x, &vx);
  grace_trace_input(vm, acc, &va);
  ok(grace_trace_input(vm, x, &vx) != GRACE_OK, "the same tensor twice as input refused");
  grace_tensor *s = program(x, w, acc);
  ok(grace_trace_value(vm, s, &vs) == GRACE_OK, "output value found");
  grace_ir_output(ir, vs);
  is_str(grace_trace_problems(vm), "", "clean trace");
  ok(grace_trace_end(vm) == GRACE_OK, "trace ends: %s", grace_last_error(vm));
  ok(grace_ir_verify(ir) == GRACE_OK, "traced IR verifies: %s", grace_last_error(vm));
  const char *text = grace_ir_text(ir);
  printf("# %s", text);
  ok(strstr(text, "const #0") && strstr(text, "literal 3") && strstr(text, "write %1,") && strstr(text, "@\"test.lua:7\""),
     "IR has the capture, the literal, the write-back of acc and locations");
  is_int(grace_ir_count(ir, "consts"), 1, "one capture (w)");
  /* eager on the trace's inputs: acc became 10 + 3*(1.5) ... check a fresh run against eager */
  double sv;
  grace_tensor_get(vm, s, NULL, &sv);
  is_near(sv, 3 * (1.5 + 1 + 5 + 4), 1e-5, "eager result during trace");
  float av2[4] = {1, 1, 1, 1}, xv2[4] = {-1, 0, 1, 2};
  grace_tensor *x2 = vec(xv2, 4), *acc2 = vec(av2, 4), *out = NULL;
  uint64_t v0 = grace_tensor_version(acc2);
  ok(grace_ir_run(ir, 2, (grace_tensor *[]){x2, acc2}, 1, &out) == GRACE_OK, "run on fresh inputs: %s", grace_last_error(vm));
  grace_tensor_get(vm, out, NULL, &sv);
  is_near(sv, 3 * (-0.5 - 1 + 3 + 2), 1e-5, "compiled result");
  float got[4];
  grace_tensor_read(vm, acc2, GRACE_FLOAT32, got);
  ok(got[0] == 1 + 3 * (-0.5f) && got[1] == 1 - 3 && got[2] == 1 + 9 && got[3] == 1 + 6, "acc written back");
  ok(grace_tensor_version(acc2) > v0, "write-back bumps the version");
  grace_tensor_release(out);
  grace_tensor_release(s);
  grace_ir_free(ir);

  /* a host read is a graph break: the trace records where it was (the partition ends there) */
  ir = grace_ir_new(vm, "brk");
  grace_trace_begin(vm, ir, where_fn, &line);
  grace_trace_input(vm, x2, &vx);
  grace_tensor *y = op2(GRACE_OP_MUL, x2, x2);
  line = 12;
  double item;
  grace_tensor_get(vm, y, (int64_t[]){0}, &item);
  grace_tensor *y2 = op2(GRACE_OP_ADD, y, x2);
  int brk_after = -2;
  const char *where = NULL;
  ok(grace_trace_end(vm) == GRACE_OK && grace_ir_count(ir, "breaks") == 1, "a trace with a break ends with the break recorded");
  ok(grace_ir_break(ir, 0, &brk_after, &where) == GRACE_OK && where && !strcmp(where, "test.lua:12") && brk_after == 1,
     "the break is after the mul, at test.lua:12 (after %d, %s)", brk_after, where ? where : "?");
  ok(strstr(grace_ir_text(ir), "  break  @\"test.lua:12\"\n") != NULL, "the text form shows the break");
  grace_tensor_release(y); grace_tensor_release(y2);
  grace_ir_free(ir);

  /* writing through a view updates its base functionally (slice_scatter) and is written back */
  ir = grace_ir_new(vm, "viewwrite");
  grace_trace_begin(vm, ir, where_fn, &line);
  grace_trace_input(vm, x2, &vx);
  grace_attrs na = {.ndims = 1, .dims = {0}, .i0 = 1, .i1 = 2};
  grace_tensor *view = NULL, *stale = NULL, *after = NULL;
  grace_run(vm, GRACE_OP_NARROW, 1, &x2, &na, 1, &view);
  grace_attrs fa = {.a = 7};
  grace_run(vm, GRACE_OP_FILL_, 1, &view, &fa, 0, NULL);
  grace_run(vm, GRACE_OP_SUM, 1, &x2, NULL, 1, &after);
  grace_value vsum;
  grace_trace_value(vm, after, &vsum);
  grace_ir_output(ir, vsum);
  ok(grace_trace_end(vm) == GRACE_OK && strstr(grace_ir_text(ir), "slice_scatter"), "write through narrow becomes slice_scatter: %s",
     grace_last_error(vm));
  float base[4] = {1, 2, 3, 4}, got4[4];
  grace_tensor *fresh = vec(base, 4);
  ok(grace_ir_run(ir, 1, &fresh, 1, &out) == GRACE_OK, "run");
  grace_tensor_read(vm, fresh, GRACE_FLOAT32, got4);
  grace_tensor_get(vm, out, NULL, &sv);
  ok(got4[0] == 1 && got4[1] == 7 && got4[2] == 7 && got4[3] == 4 && sv == 1 + 7 + 7 + 4,
     "the input is written back through the view, and reads after the write see it");
  grace_tensor_release(out); grace_tensor_release(fresh); grace_tensor_release(view); grace_tensor_release(after);
  grace_ir_free(ir);

  /* a view made before a write through another view is remade from the written base when used */
  ir = grace_ir_new(vm, "alias");
  grace_trace_begin(vm, ir, where_fn, &line);
  grace_trace_input(vm, x2, &vx);
  grace_run(vm, GRACE_OP_NARROW, 1, &x2, &na, 1, &stale);
  grace_attrs nb = {.ndims = 1, .dims = {0}, .i0 = 0, .i1 = 2};
  grace_run(vm, GRACE_OP_NARROW, 1, &x2, &nb, 1, &view);
  grace_run(vm, GRACE_OP_FILL_, 1, &view, &fa, 0, NULL);
  grace_run(vm, GRACE_OP_SUM, 1, &stale, NULL, 1, &after);
  grace_trace_value(vm, after, &vsum);
  grace_ir_output(ir, vsum);
  ok(grace_trace_end(vm) == GRACE_OK, "a stale view is remade: %s", grace_last_error(vm));
  fresh = vec(base, 4);
  ok(grace_ir_run(ir, 1, &fresh, 1, &out) == GRACE_OK, "run");
  grace_tensor_get(vm, out, NULL, &sv);
  is_near(sv, 7 + 3, 0, "the view made before the write sees it: x = {7, 7, 3, 4}, view x[2..3]");
  grace_tensor_release(out); grace_tensor_release(fresh);
  grace_tensor_release(view); grace_tensor_release(stale); grace_tensor_release(after);
  grace_ir_free(ir);

  /* two arguments sharing storage cannot both be kept right: refused */
  ir = grace_ir_new(vm, "overlap");
  grace_tensor *xt = NULL;
  grace_attrs tr2 = {.ndims = 1, .dims = {0}, .i0 = 0, .i1 = 4};
  grace_run(vm, GRACE_OP_NARROW, 1, &x2, &tr2, 1, &xt);   /* made before the trace */
  grace_trace_begin(vm, ir, NULL, NULL);
  grace_trace_input(vm, x2, &vx);
  grace_trace_input(vm, xt, &vx);
  grace_run(vm, GRACE_OP_FILL_, 1, &x2, &fa, 0, NULL);
  ok(grace_trace_end(vm) == GRACE_EUNSUPPORTED && strstr(grace_last_error(vm), "shared"), "overlapping arguments refused: %s",
     grace_last_error(vm));
  grace_tensor_release(xt);
  grace_ir_free(ir);

  /* pause: host work outside the program is neither recorded nor a break */
  ir = grace_ir_new(vm, "pause");
  grace_trace_begin(vm, ir, NULL, NULL);
  grace_trace_input(vm, x2, &vx);
  grace_trace_pause(vm);
  grace_tensor_get(vm, x2, (int64_t[]){0}, &item);
  grace_tensor *z = op2(GRACE_OP_ADD, x2, x2);
  grace_trace_resume(vm);
  ok(grace_trace_end(vm) == GRACE_OK && grace_ir_count(ir, "insts") == 1, "paused work is not traced");
  grace_tensor_release(z);
  grace_ir_free(ir);

  grace_tensor *all[] = {x, w, acc, x2, acc2};
  for (int i = 0; i < 5; i++) grace_tensor_release(all[i]);
  grace_vm_free(vm);
  return tap_done();
}
