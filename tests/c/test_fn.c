/* test_fn.c: compiled functions (grace_fn) with a C host and no Lua: a first call traces, a call of the same types
 * runs the program without the host function, another dtype retraces and the miss names the argument, a number
 * that changes becomes a dynamic scalar, a failing host guard retraces, a failing host call returns GRACE_EHOST
 * and leaks nothing, the cache limit turns the function eager once, explain describes the guards. Results are
 * checked against plain C arithmetic. */
#include <stdlib.h>
#include "grace.h"
#include "tap.h"

static grace_vm *vm;
static long live_bytes;   /* host memory the VM holds, through the counting allocator */

static void *count_alloc(void *ud, void *ptr, size_t osize, size_t nsize, size_t align) {
  if (nsize == 0) {
    if (ptr) { live_bytes -= (long)osize; free(ptr); }
    return NULL;
  }
  size_t a = align < sizeof(void *) ? sizeof(void *) : align;
  void *p = NULL;
  if (posix_memalign(&p, a, nsize)) return NULL;
  if (ptr) {
    memcpy(p, ptr, osize < nsize ? osize : nsize);
    live_bytes -= (long)osize;
    free(ptr);
  }
  live_bytes += (long)nsize;
  return p;
}

/* The host: y = x * 2 + s (x a tensor, s a number); a guard that passes while guard_ok. */
typedef struct host_state {
  int calls, fail, guard_ok, guard_checks, traces_begun, traces_ended, eager_told;
  int guards_made, guards_released;
  char eager_why[600];
} host_state;

static grace_status run2(grace_op op, grace_tensor *a, grace_tensor *b, grace_tensor **out) {
  return grace_run(vm, op, 2, (grace_tensor *[]){a, b}, NULL, 1, out);
}

static grace_status h_call(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  host_state *h = ud;
  h->calls++;
  *nres = 0;
  if (nargs != 2 || args[0].kind != GRACE_ARG_TENSOR) return GRACE_EHOST;
  grace_tensor *two = NULL, *s = NULL, *t = NULL, *y = NULL;
  grace_tensor_scalar_int(vm, 2, &two);
  if (args[1].kind == GRACE_ARG_INT) grace_tensor_scalar_int(vm, args[1].i, &s);
  else grace_tensor_scalar(vm, args[1].f, 0, &s);
  grace_status st = run2(GRACE_OP_MUL, args[0].t, two, &t);
  if (st == GRACE_OK && !h->fail) st = run2(GRACE_OP_ADD, t, s, &y);
  grace_tensor_release(two);
  grace_tensor_release(s);
  grace_tensor_release(t);
  if (h->fail || st != GRACE_OK) return GRACE_EHOST;   /* an error of the host code, after some traced ops */
  *nres = 1;
  if (maxres >= 1) res[0] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = y};
  else grace_tensor_release(y);
  return GRACE_OK;
}

static void h_trace_begin(void *ud) { ((host_state *)ud)->traces_begun++; }

static void h_trace_end(void *ud, grace_ir *ir, uint64_t *guard, int *nguarded, char *why, size_t n) {
  host_state *h = ud;
  h->traces_ended++;
  *guard = 0;
  *nguarded = 0;
  why[0] = 0;
  if (!ir) return;
  *guard = 1000 + (uint64_t)h->guards_made++;
  *nguarded = 1;
}

static int h_guard_check(void *ud, uint64_t guard, int nargs, const grace_arg *args, char *why, size_t n) {
  host_state *h = ud;
  h->guard_checks++;
  if (!h->guard_ok) snprintf(why, n, "captured value #1 (the host's) changed");
  return h->guard_ok;
}

static int h_guard_same(void *ud, uint64_t a, uint64_t b) { return 1; }
static void h_release(void *ud, uint64_t handle) {
  if (handle >= 1000) ((host_state *)ud)->guards_released++;
}
static void h_eager(void *ud, const char *why) {
  host_state *h = ud;
  h->eager_told++;
  snprintf(h->eager_why, sizeof h->eager_why, "%s", why);
}

static const grace_host host = {
  .call = h_call, .trace_begin = h_trace_begin, .trace_end = h_trace_end, .guard_check = h_guard_check,
  .guard_same = h_guard_same, .release = h_release, .eager = h_eager,
};

static grace_tensor *vec(grace_dtype dt, const double *v, int64_t n) {
  grace_tensor *t = NULL;
  grace_tensor_from_data(vm, dt, 1, &n, GRACE_FLOAT64, v, &t);
  return t;
}

/* Calls fn(x, s) with x = v (n values of dtype dt); checks the result against v*2+s; returns the status. */
static grace_status call_check(grace_fn *fn, grace_dtype dt, const double *v, int64_t n, double s, const char *what) {
  grace_tensor *x = vec(dt, v, n);
  grace_arg args[2] = {{.kind = GRACE_ARG_TENSOR, .t = x}, {.kind = GRACE_ARG_FLOAT, .f = s}}, res[4];
  int nres = -1;
  grace_status st = grace_fn_call(fn, 2, args, &nres, res, 4);
  if (st == GRACE_OK) {
    int good = nres == 1 && res[0].kind == GRACE_ARG_TENSOR && grace_tensor_dtype(res[0].t) == dt;
    for (int64_t i = 0; good && i < n; i++) {
      double got;
      grace_tensor_get(vm, res[0].t, (int64_t[]){i}, &got);
      double want = v[i] * 2 + s;
      if (dt == GRACE_FLOAT32) want = (double)((float)((float)v[i] * 2.0f) + (float)s);
      good = got == want;
    }
    ok(good, "%s: the result is x*2 + %g", what, s);
    if (nres >= 1) grace_tensor_release(res[0].t);
  } else
    ok(0, "%s: call failed: %s", what, grace_last_error(vm));
  grace_tensor_release(x);
  return st;
}

/* f(a, b): c = contiguous(b) (b itself: it is contiguous); c:fill_(0); returns (-a, c). Found by tests/fuzz/fuzz_fn:
 * the trace recorded contiguous as a new value, so the fill_ through it never reached b in a compiled call. */
static grace_status fill_through_contiguous(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res,
                                            int maxres) {
  grace_tensor *c = NULL, *n = NULL;
  grace_attrs zero = {.a = 0};
  grace_status st = grace_run(vm, GRACE_OP_CONTIGUOUS, 1, &args[1].t, NULL, 1, &c);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_FILL_, 1, &c, &zero, 0, NULL);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_NEG, 1, &args[0].t, NULL, 1, &n);
  if (st != GRACE_OK) { grace_tensor_release(c); return st; }
  *nres = 2;
  res[0] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = n};
  res[1] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = c};
  return GRACE_OK;
}

static void test_write_through_contiguous(void) {
  grace_fn *f = NULL;
  grace_host hc = {.call = fill_through_contiguous};
  ok(grace_fn_new(vm, "fill", &hc, NULL, NULL, &f) == GRACE_OK, "a function writing through contiguous(b)");
  int good = 1;
  for (int call = 0; call < 3; call++) {   /* a trace, then two compiled calls */
    double av[3] = {1, 2, 3}, bv[3] = {-4, 5, 6}, got[3] = {9, 9, 9}, bb[3] = {9, 9, 9};
    grace_tensor *a = vec(GRACE_FLOAT32, av, 3), *b = vec(GRACE_FLOAT32, bv, 3);
    grace_arg args[2] = {{.kind = GRACE_ARG_TENSOR, .t = a}, {.kind = GRACE_ARG_TENSOR, .t = b}}, res[2];
    int nres = 0;
    good = good && grace_fn_call(f, 2, args, &nres, res, 2) == GRACE_OK && nres == 2 &&
           grace_tensor_read(vm, res[1].t, GRACE_FLOAT64, got) == GRACE_OK &&
           grace_tensor_read(vm, b, GRACE_FLOAT64, bb) == GRACE_OK;
    for (int i = 0; i < 3; i++) good = good && got[i] == 0 && bb[i] == 0;
    for (int k = 0; k < nres; k++) grace_tensor_release(res[k].t);
    grace_tensor_release(a);
    grace_tensor_release(b);
  }
  grace_fn_stats st;
  grace_fn_get_stats(f, &st);
  ok(good && st.traces == 1 && st.hits == 2, "compiled calls fill b and return it as eager does (%ld hits)", st.hits);
  grace_fn_free(f);
}

int main(void) {
  char err[256];
  vm = grace_vm_new(&(grace_config){.device = "cpu", .alloc = count_alloc}, err, sizeof err);
  if (!vm) { printf("1..0 # SKIP no VM: %s\n", err); return 0; }
  host_state h = {.guard_ok = 1};
  grace_fn *fn = NULL;
  grace_fn_options opts = {.cache_limit = 8, .dynamic = 1};
  ok(grace_fn_new(vm, "y = x*2 + s", &host, &h, &opts, &fn) == GRACE_OK && fn, "grace_fn_new");
  grace_fn_stats st;
  double v1[4] = {1, 2, 3, 4}, v2[4] = {-1, 0.5, 10, 7};

  call_check(fn, GRACE_FLOAT32, v1, 4, 1.5, "first call (traced)");
  grace_fn_get_stats(fn, &st);
  is_int(st.traces, 1, "one trace");
  is_int(h.calls, 1, "the host function ran once");
  is_int(grace_fn_entry_count(fn), 1, "one entry");
  const char *why = NULL;
  grace_ir *ir = grace_fn_entry_ir(fn, 0, &why, NULL, NULL);
  ok(ir && grace_ir_count(ir, "insts") > 0, "the entry has a program (%s)", why ? why : "no reason given");

  call_check(fn, GRACE_FLOAT32, v2, 4, 1.5, "same types, new values");
  grace_fn_get_stats(fn, &st);
  is_int(st.traces, 1, "no retrace");
  is_int(st.hits, 1, "a hit");
  is_int(h.calls, 1, "the host function did not run");
  ok(h.guard_checks >= 1, "the host guard was checked");

  call_check(fn, GRACE_FLOAT64, v1, 4, 1.5, "another dtype");
  grace_fn_get_stats(fn, &st);
  is_int(st.traces, 2, "another dtype retraces");
  ok(strstr(st.last_miss, "argument 1") && strstr(st.last_miss, "float64"), "the miss names argument 1: %s", st.last_miss);

  /* a number that changes: the second trace differs from the first only in its literal, which becomes a scalar */
  call_check(fn, GRACE_FLOAT32, v1, 4, 2.5, "s changed");
  grace_fn_get_stats(fn, &st);
  is_int(st.traces, 3, "a changed number retraces once");
  ok(st.dynamic[1] && !st.dynamic[0], "argument 2 became a dynamic scalar");
  is_int(grace_fn_entry_count(fn), 2, "the two float32 entries became one");
  int calls = h.calls;
  call_check(fn, GRACE_FLOAT32, v2, 4, -7.25, "s changed again");
  call_check(fn, GRACE_FLOAT32, v1, 4, 100, "and again");
  grace_fn_get_stats(fn, &st);
  is_int(st.traces, 3, "no retrace for new values of s");
  is_int(h.calls, calls, "the host function did not run");

  /* the host guard fails: a retrace */
  h.guard_ok = 0;
  call_check(fn, GRACE_FLOAT32, v1, 4, 3, "host guard fails");
  h.guard_ok = 1;
  grace_fn_get_stats(fn, &st);
  is_int(st.traces, 4, "a failing host guard retraces");
  is_int(h.calls, calls + 1, "the host function ran");
  ok(strstr(st.last_miss, "captured value") != NULL, "the miss is the host's: %s", st.last_miss);

  /* a host call that fails: its status, nothing cached, nothing leaked, the trace ended */
  call_check(fn, GRACE_FLOAT32, v1, 2, 1, "warm up a 2-element call");
  int entries = grace_fn_entry_count(fn);
  size_t tbytes = grace_tensor_bytes(vm);
  h.fail = 1;
  grace_tensor *x = vec(GRACE_FLOAT32, v1, 3);
  long before = live_bytes;
  grace_arg args[2] = {{.kind = GRACE_ARG_TENSOR, .t = x}, {.kind = GRACE_ARG_FLOAT, .f = 1}}, res[2];
  int nres = -1;
  grace_status s = grace_fn_call(fn, 2, args, &nres, res, 2);
  is_str(grace_status_name(s), grace_status_name(GRACE_EHOST), "a failing host call gives GRACE_EHOST");
  is_int(nres, 0, "no results");
  is_int(grace_fn_entry_count(fn), entries, "no entry cached");
  ok(!grace_trace_active(vm), "the trace ended");
  is_int(h.traces_begun, h.traces_ended, "the host's trace_end undid every trace_begin");
  is_int(live_bytes, before, "no host memory leaked");
  grace_tensor_release(x);
  is_int(grace_tensor_bytes(vm), tbytes, "no tensor leaked");
  h.fail = 0;

  /* bad input */
  ok(grace_fn_call(NULL, 0, NULL, &nres, res, 1) == GRACE_EARG, "a NULL fn");
  ok(grace_fn_call(fn, 2, NULL, &nres, res, 1) == GRACE_EARG && strstr(grace_last_error(vm), "grace_fn_call"),
     "args NULL: %s", grace_last_error(vm));
  ok(grace_fn_call(fn, 0, NULL, NULL, res, 1) == GRACE_EARG, "nres NULL");
  x = vec(GRACE_FLOAT32, v1, 4);
  args[0].t = x;
  args[1].f = 1.5;
  ok(grace_fn_call(fn, 2, args, &nres, res, 0) == GRACE_EARG && strstr(grace_last_error(vm), "room"),
     "no room for the result: %s", grace_last_error(vm));
  ok(grace_fn_new(vm, "bad", &host, &h, &(grace_fn_options){.cache_limit = 0}, &(grace_fn *){NULL}) == GRACE_EARG,
     "cache_limit 0 refused");

  /* explain: the guards, without caching or counting */
  char text[8192];
  grace_fn_get_stats(fn, &st);
  long traces = st.traces;
  ok(grace_fn_explain(fn, 2, args, text, sizeof text) == GRACE_OK, "explain: %s", grace_last_error(vm));
  printf("# %s", text);
  ok(strstr(text, "compiles to 1 partition") && strstr(text, "argument 1 is a tensor float32 [4]") &&
     strstr(text, "argument 2 == 1.5") && strstr(text, "1 captured values") && strstr(text, "dynamic scalars"),
     "explain names the partition, the guards and the dynamic scalar");
  grace_fn_get_stats(fn, &st);
  is_int(st.traces, traces, "explain does not count a trace");
  grace_tensor_release(x);

  /* the cache limit: the function runs eagerly for good and the host hears why once */
  grace_fn *f1 = NULL;
  grace_fn_new(vm, "limited", &host, &h, &(grace_fn_options){.cache_limit = 1}, &f1);
  call_check(f1, GRACE_FLOAT32, v1, 4, 1, "limited: first");
  call_check(f1, GRACE_FLOAT64, v1, 4, 1, "limited: second dtype");
  call_check(f1, GRACE_FLOAT32, v1, 3, 1, "limited: another shape");
  grace_fn_get_stats(f1, &st);
  ok(st.eager && st.eager_calls == 2, "past the limit it runs eagerly (%ld eager calls)", st.eager_calls);
  is_int(h.eager_told, 1, "the host is told once");
  ok(strstr(h.eager_why, "cache limit") != NULL, "why: %s", h.eager_why);

  test_write_through_contiguous();
  grace_fn_free(fn);
  grace_fn_free(f1);
  is_int(h.guards_released, h.guards_made, "every host guard was released");
  is_int(grace_tensor_bytes(vm), 0, "no tensor left");
  grace_vm_free(vm);
  return tap_done();
}
