/* test_ahead.c: a branch's other way recorded before a call takes it (vm/vm_auto.c), with a C host whose function is
 * y = 2x; if sum(y) > 1e9 then return y end; return -y, and which says the early return has no effect
 * (grace_trace_branch_ahead). Calls whose sum stays small: after the third, grace calls the host once more with the
 * read forced (grace_trace_forced), the fourth call merges the two paths, and from then on the host function never
 * runs; a call whose sum is large returns 2x (worked out by hand) from the program. Hosts that misbehave in that extra
 * call each have it dropped with the reason, the paths kept replayed and every result right: one that runs an op
 * after the forced branch, one that ignores the forcing (its next op would pass the branch), one that takes
 * another path before the branch, one that fails; and a host that says the other way has effects is never called
 * an extra time. */
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm;

enum { GOOD, OP_AFTER, UNFORCED, OTHER_PATH, FAILS, EFFECTS };
static int behave, host_calls, forced_calls;

static grace_status h_call(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  (void)ud;
  *nres = 0;
  host_calls++;
  if (nargs != 1 || args[0].kind != GRACE_ARG_TENSOR || maxres < 1) return GRACE_EHOST;
  grace_tensor *two = NULL, *y = NULL, *s = NULL, *r = NULL;
  double v = 0;
  int ahead = 0;
  grace_status st = grace_tensor_scalar(vm, 2.0, 0, &two);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){args[0].t, two}, NULL, 1, &y);
  if (st == GRACE_OK && behave == OTHER_PATH && host_calls == 4)   /* the extra call: another op before the branch */
    st = grace_run(vm, GRACE_OP_NEG, 1, &y, NULL, 1, &s);
  else if (st == GRACE_OK)
    st = grace_run(vm, GRACE_OP_SUM, 1, &y, NULL, 1, &s);
  if (st == GRACE_OK) st = grace_tensor_read(vm, s, GRACE_FLOAT64, &v);   /* the break */
  int want = st == GRACE_OK && behave != UNFORCED ? grace_trace_forced(vm, s) : -1;
  if (want >= 0) {
    forced_calls++;
    ahead = 1;
    v = want ? 2e9 : 0;   /* a value on the wanted side of `v > 1e9` */
  }
  if (st == GRACE_OK) st = grace_trace_branch(vm, s, GRACE_CMP_GT, 1e9, v > 1e9, NULL);
  if (st == GRACE_OK) st = grace_trace_branch_ahead(vm, behave == EFFECTS ? "t.c:3: the other way prints" : NULL);
  if (st == GRACE_OK && ahead && behave == FAILS) st = GRACE_EHOST;
  if (st == GRACE_OK && v > 1e9) {
    r = y;
    y = NULL;
    grace_tensor *more = NULL;
    if (ahead && behave == OP_AFTER) st = grace_run(vm, GRACE_OP_NEG, 1, &r, NULL, 1, &more);
    grace_tensor_release(more);
  } else if (st == GRACE_OK)
    st = grace_run(vm, GRACE_OP_NEG, 1, &y, NULL, 1, &r);
  grace_tensor_release(two); grace_tensor_release(y); grace_tensor_release(s);
  if (st != GRACE_OK) { grace_tensor_release(r); return GRACE_EHOST; }
  *nres = 1;
  res[0] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = r};
  return GRACE_OK;
}

/* The host's watch of its own state: nothing to check, nothing to guard. */
static void h_trace_begin(void *ud) { (void)ud; }
static void h_trace_end(void *ud, grace_ir *ir, uint64_t *guard, int *nguarded, char *why, size_t n) {
  (void)ud; (void)ir; (void)n;
  *guard = 0;
  *nguarded = 0;
  why[0] = 0;
}

/* n calls on x (float32 [4]) checked against want; the results that differ. */
static int calls(grace_fn *fn, grace_tensor *x, const float *want, int n) {
  int bad = 0;
  for (int i = 0; i < n; i++) {
    grace_arg a = {.kind = GRACE_ARG_TENSOR, .t = x}, r[1];
    int nr = 0;
    float got[4] = {0};
    if (grace_fn_call(fn, 1, &a, &nr, r, 1) != GRACE_OK || nr != 1) { printf("# %s\n", grace_last_error(vm)); bad++; continue; }
    grace_tensor_read(vm, r[0].t, GRACE_FLOAT32, got);
    bad += memcmp(got, want, sizeof got) != 0;
    grace_tensor_release(r[0].t);
  }
  return bad;
}

static const grace_host host = {.call = h_call, .trace_begin = h_trace_begin, .trace_end = h_trace_end};
static const float xs[4] = {1, 2, 3, 4}, ys[4] = {-2, -4, -6, -8}, xb[4] = {1e9, 2e9, 3e9, 4e9}, yb[4] = {2e9, 4e9, 6e9, 8e9};

static void test_good(grace_tensor *small, grace_tensor *big) {
  grace_fn *fn = NULL;
  behave = GOOD;
  host_calls = forced_calls = 0;
  if (!ok(grace_fn_new(vm, "early", &host, NULL, NULL, &fn) == GRACE_OK, "a compiled function of a C host")) return;
  int bad = calls(fn, small, ys, 3);
  grace_fn_stats s;
  grace_fn_get_stats(fn, &s);
  ok(bad == 0 && s.ahead_paths == 1 && host_calls == 4 && forced_calls == 1,
     "3 calls that stay small: -2x each; then the host ran once more, forced (%d host calls, %d forced, %d ahead)",
     host_calls, forced_calls, s.ahead_paths);
  bad = calls(fn, small, ys, 1);
  grace_fn_get_stats(fn, &s);
  ok(bad == 0 && s.auto_regions == 1 && host_calls == 5, "the 4th call merges the paths (%d regions)", s.auto_regions);
  bad = calls(fn, small, ys, 5) + calls(fn, big, yb, 2);
  ok(bad == 0 && host_calls == 5, "5 small and 2 large calls: -2x and 2x, without the host function (%d host calls)",
     host_calls);
  grace_fn_free(fn);
}

/* A host misbehaving in the extra call: it is dropped with a reason containing `reason`, the paths stay replayed. */
static void test_dropped(int how, grace_tensor *small, grace_tensor *big, const char *reason, const char *what) {
  grace_fn *fn = NULL;
  behave = how;
  host_calls = forced_calls = 0;
  if (grace_fn_new(vm, "early", &host, NULL, NULL, &fn) != GRACE_OK) { ok(0, "%s: grace_fn_new", what); return; }
  int bad = calls(fn, small, ys, 6);
  grace_fn_stats s;
  grace_fn_get_stats(fn, &s);
  ok(bad == 0 && s.ahead_paths == 0 && s.auto_regions == 0 && strstr(s.auto_why, reason) != NULL,
     "%s: dropped with the reason, 6 calls right (%d bad; %s)", what, bad, s.auto_why);
  ok(host_calls == (how == EFFECTS ? 6 : 7), "%s: %d host calls for 6 calls", what, host_calls);
  bad = calls(fn, big, yb, 1) + calls(fn, small, ys, 2);
  grace_fn_get_stats(fn, &s);
  ok(bad == 0 && s.auto_regions == 1, "%s: a call that takes the exit brings its path as before; then merged", what);
  grace_fn_free(fn);
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu"}, err, sizeof err);
  if (!vm) { printf("Bail out! %s\n", err); return 1; }
  grace_tensor *small = NULL, *big = NULL;
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, (int64_t[]){4}, GRACE_FLOAT32, xs, &small);
  grace_tensor_from_data(vm, GRACE_FLOAT32, 1, (int64_t[]){4}, GRACE_FLOAT32, xb, &big);
  test_good(small, big);
  test_dropped(OP_AFTER, small, big, "runs after the branch", "an op after the forced branch");
  test_dropped(UNFORCED, small, big, "passes the branch unforced", "the forcing ignored");
  test_dropped(OTHER_PATH, small, big, "leaves the recorded path", "another path before the branch");
  test_dropped(FAILS, small, big, "failed", "the extra call failing");
  test_dropped(EFFECTS, small, big, "t.c:3: the other way prints", "the other way has effects: no extra call");
  grace_tensor_release(small);
  grace_tensor_release(big);
  grace_vm_free(vm);
  return tap_done();
}
