/* test_alloc_sweep.c: every host allocation a small workload makes, failed in turn. The workloads go through the
 * public API only: tensors, eager ops, the IR builder, verify, the default passes, a run, a trace; then compiled
 * functions (grace_fn: the first call traces, a hit, a guard miss that retraces, a changed number, explain) and
 * regions (cond and while built, optimized and run; a cond recorded inside a trace); then a function with a graph
 * break replayed as partitions, a value one keeps inside asked for after each call, and the same with the branch's
 * other way recorded ahead and the two paths merged into one program. For each N the
 * Nth allocation returns NULL; the workload must end with an error status that says something (never a crash),
 * give back every byte it took (live bytes back to the VM's baseline, zero after grace_vm_free), and leave the VM
 * usable. The allocator tracks its live blocks so a double free or a wrong osize is seen where it happens instead
 * of as heap corruption later. One worker thread: the allocation order must be the same on every run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grace.h"
#include "tap.h"

/* ---- a counting allocator that fails on request and checks what it is given ---- */
#define NSLOT 65536   /* open addressing over live blocks; the workload holds far fewer */
typedef struct counter {
  long allocs;          /* allocations (new blocks and growths) so far */
  long fail_at;         /* the allocation that returns NULL (1-based; 0: none) */
  long failed;          /* allocations refused so far */
  size_t live;          /* bytes in live blocks */
  int bad;              /* a free or realloc of an unknown block, or with the wrong osize */
  void *ptr[NSLOT];
  size_t size[NSLOT];
} counter;

static size_t slot_of(counter *c, void *p) {
  size_t h = ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull % NSLOT;
  while (c->ptr[h] && c->ptr[h] != p) h = (h + 1) % NSLOT;
  return h;
}
static void slot_del(counter *c, size_t h) {
  /* backward-shift deletion keeps the probe chains of the remaining blocks intact */
  c->ptr[h] = NULL;
  for (size_t j = (h + 1) % NSLOT; c->ptr[j]; j = (j + 1) % NSLOT) {
    void *p = c->ptr[j];
    size_t sz = c->size[j];
    c->ptr[j] = NULL;
    size_t k = slot_of(c, p);
    c->ptr[k] = p, c->size[k] = sz;
  }
}

static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize, size_t align) {
  counter *c = ud;
  size_t h = 0;
  if (ptr) {
    h = slot_of(c, ptr);
    if (c->ptr[h] != ptr || c->size[h] != osize) { c->bad++; return NULL; }
  }
  if (nsize == 0) {
    if (ptr) { c->live -= osize; slot_del(c, h); free(ptr); }
    return NULL;
  }
  c->allocs++;
  if (c->fail_at && c->allocs == c->fail_at) { c->failed++; return NULL; }
  if (align < sizeof(void *)) align = sizeof(void *);
  void *p = NULL;
  if (posix_memalign(&p, align, nsize)) return NULL;
  if (ptr) {
    memcpy(p, ptr, osize < nsize ? osize : nsize);
    c->live -= osize;
    slot_del(c, h);
    free(ptr);
  }
  h = slot_of(c, p);
  c->ptr[h] = p, c->size[h] = nsize;
  c->live += nsize;
  return p;
}

static counter cnt;

static grace_vm *new_vm(void) {
  grace_config cfg = {.alloc = counting_alloc, .alloc_ud = &cnt, .device = "cpu", .threads = 1};
  return grace_vm_new(&cfg, NULL, 0);
}

/* ---- the workload: every step checked, everything it made released on every path ---- */
#define TRY(x) do { st = (x); if (st != GRACE_OK) goto done; } while (0)
#define NEED(p) do { if (!(p)) { st = GRACE_ENOMEM; goto done; } } while (0)

static grace_status workload(grace_vm *vm) {
  grace_status st = GRACE_OK;
  grace_tensor *a = NULL, *b = NULL, *s = NULL, *t[6] = {0}, *o[2] = {0};
  grace_ir *ir = NULL, *opt = NULL, *tr = NULL;
  const float av[6] = {1, 2, 3, 4, 5, 6}, bv[6] = {1, 0, 0, 1, 1, 1};
  /* tensors and eager ops */
  TRY(grace_tensor_from_data(vm, GRACE_FLOAT32, 2, (int64_t[]){2, 3}, GRACE_FLOAT32, av, &a));
  TRY(grace_tensor_from_data(vm, GRACE_FLOAT32, 2, (int64_t[]){3, 2}, GRACE_FLOAT32, bv, &b));
  TRY(grace_tensor_scalar(vm, 2.0, 0, &s));
  TRY(grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){a, s}, NULL, 1, &t[0]));
  TRY(grace_run(vm, GRACE_OP_MATMUL, 2, (grace_tensor *[]){t[0], b}, NULL, 1, &t[1]));
  grace_attrs sum1 = {.ndims = 1, .dims = {1}};
  TRY(grace_run(vm, GRACE_OP_SUM, 1, &t[1], &sum1, 1, &t[2]));
  grace_attrs tp = {.ndims = 2, .dims = {0, 1}};
  TRY(grace_run(vm, GRACE_OP_TRANSPOSE, 1, &a, &tp, 1, &t[3]));
  TRY(grace_run(vm, GRACE_OP_EXP, 1, &t[3], NULL, 1, &t[4]));
  double v;
  TRY(grace_tensor_get(vm, t[2], (int64_t[]){0}, &v));
  /* an IR built by hand: verify, print, the default passes, a run */
  NEED(ir = grace_ir_new(vm, "sweep"));
  grace_value x, w, two, y, m, r;
  TRY(grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 2, (int64_t[]){2, 3}, &x));
  TRY(grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 2, (int64_t[]){3, 2}, &w));
  TRY(grace_ir_literal(ir, 2.0, 0, &two));
  TRY(grace_ir_op(ir, GRACE_OP_MUL, 2, (grace_value[]){x, two}, NULL, 1, &y));
  TRY(grace_ir_op(ir, GRACE_OP_MATMUL, 2, (grace_value[]){y, w}, NULL, 1, &m));
  TRY(grace_ir_op(ir, GRACE_OP_SUM, 1, &m, &sum1, 1, &r));
  TRY(grace_ir_output(ir, r));
  TRY(grace_ir_output(ir, m));
  TRY(grace_ir_verify(ir));
  if (!grace_ir_text(ir)) { st = grace_set_error(vm, GRACE_ENOMEM, "no text"); goto done; }
  TRY(grace_ir_pass(ir, "default", &opt));
  TRY(grace_ir_run(opt, 2, (grace_tensor *[]){a, b}, 2, o));
  /* a traced function */
  NEED(tr = grace_ir_new(vm, "traced"));
  TRY(grace_trace_begin(vm, tr, NULL, NULL));
  grace_value tx, ty;
  st = grace_trace_input(vm, a, &tx);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){a, s}, NULL, 1, &t[5]);
  if (st == GRACE_OK) st = grace_trace_value(vm, t[5], &ty);
  if (st == GRACE_OK) st = grace_ir_output(tr, ty);
  /* the trace ends on every path (a failed step leaves it active otherwise); the first error is the one kept */
  if (st != GRACE_OK) {
    grace_trace_end(vm);
    goto done;
  }
  TRY(grace_trace_end(vm));
  TRY(grace_ir_verify(tr));
done:
  for (int i = 0; i < 6; i++) grace_tensor_release(t[i]);
  for (int i = 0; i < 2; i++) grace_tensor_release(o[i]);
  grace_tensor_release(a); grace_tensor_release(b); grace_tensor_release(s);
  grace_ir_free(ir); grace_ir_free(opt); grace_ir_free(tr);
  return st;
}

/* ---- the second workload: compiled functions and regions ---- */
/* The host function of the grace_fn below: f(x, k) = sum(x * k + x, dim 2) (k a number). */
static grace_status fn_body(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  grace_vm *vm = ud;
  grace_tensor *k = NULL, *t1 = NULL, *t2 = NULL, *out = NULL;
  grace_attrs sum1 = {.ndims = 1, .dims = {1}};
  grace_status st = grace_tensor_scalar(vm, args[1].f, 0, &k);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){args[0].t, k}, NULL, 1, &t1);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){t1, args[0].t}, NULL, 1, &t2);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_SUM, 1, &t2, &sum1, 1, &out);
  grace_tensor_release(k); grace_tensor_release(t1); grace_tensor_release(t2);
  if (st != GRACE_OK) return st;
  *nres = 1;
  res[0] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = out};
  return GRACE_OK;
}

/* One call of fn on x and k; the result checked against sum_j x[i,j] * (k + 1) (x holds small integers: exact). */
static grace_status fn_call_check(grace_vm *vm, grace_fn *fn, grace_tensor *x, double k) {
  grace_arg args[2] = {{.kind = GRACE_ARG_TENSOR, .t = x}, {.kind = GRACE_ARG_FLOAT, .f = k}}, res[1];
  int nres = 0;
  grace_status st = grace_fn_call(fn, 2, args, &nres, res, 1);
  if (st != GRACE_OK) return st;
  double got = 0, row0 = 0, v;
  for (int64_t j = 0; st == GRACE_OK && j < grace_tensor_sizes(x)[1]; j++) {
    st = grace_tensor_get(vm, x, (int64_t[]){0, j}, &v);
    row0 += v;
  }
  if (st == GRACE_OK) st = grace_tensor_get(vm, res[0].t, (int64_t[]){0}, &got);
  grace_tensor_release(res[0].t);
  if (st == GRACE_OK && got != row0 * (k + 1)) st = grace_set_error(vm, GRACE_EINTERNAL, "fn: wrong result %g", got);
  return st;
}

/* A sub-program over (a f32[2,3], b f32[2,3]) returning op(a, b). */
static grace_ir *branch(grace_vm *vm, const char *name, grace_op op) {
  grace_ir *b = grace_ir_new(vm, name);
  grace_value x, y, r;
  if (b && grace_ir_input(b, GRACE_FLOAT32, GRACE_CPU, 2, (int64_t[]){2, 3}, &x) == GRACE_OK &&
      grace_ir_input(b, GRACE_FLOAT32, GRACE_CPU, 2, (int64_t[]){2, 3}, &y) == GRACE_OK &&
      grace_ir_op(b, op, 2, (grace_value[]){x, y}, NULL, 1, &r) == GRACE_OK && grace_ir_output(b, r) == GRACE_OK)
    return b;
  grace_ir_free(b);
  return NULL;
}

/* @cond(p bool, a, b) = cond(p, a + b, a * b); @loop(i i64, acc f32[2,3]) = while i < 3: (i + 1, acc * 2). Built,
 * verified, optimized, run. */
static grace_status region_programs(grace_vm *vm, grace_tensor *a, grace_tensor *b) {
  grace_status st = GRACE_OK;
  grace_ir *ir = NULL, *lp = NULL, *t = NULL, *e = NULL, *c = NULL, *body = NULL, *opt = NULL;
  grace_tensor *p = NULL, *i0 = NULL, *out[2] = {0};
  grace_value vp, va, vb, r, vi, vacc, lim, lt, one, two, i1, a1, lo[2];
  NEED(ir = grace_ir_new(vm, "cond"));
  TRY(grace_ir_input(ir, GRACE_BOOL, GRACE_CPU, 0, NULL, &vp));
  TRY(grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 2, (int64_t[]){2, 3}, &va));
  TRY(grace_ir_input(ir, GRACE_FLOAT32, GRACE_CPU, 2, (int64_t[]){2, 3}, &vb));
  NEED(t = branch(vm, "then", GRACE_OP_ADD));
  NEED(e = branch(vm, "else", GRACE_OP_MUL));
  TRY(grace_ir_cond(ir, vp, 2, (grace_value[]){va, vb}, t, e, 1, &r));
  t = e = NULL;   /* the region owns them now */
  TRY(grace_ir_output(ir, r));
  TRY(grace_ir_verify(ir));
  TRY(grace_ir_pass(ir, "default", &opt));
  const int pv = 1;
  TRY(grace_tensor_from_data(vm, GRACE_BOOL, 0, NULL, GRACE_INT32, &pv, &p));
  TRY(grace_ir_run(opt, 3, (grace_tensor *[]){p, a, b}, 1, out));
  /* the loop */
  NEED(lp = grace_ir_new(vm, "loop"));
  NEED(c = grace_ir_new(vm, "cond"));
  NEED(body = grace_ir_new(vm, "body"));
  TRY(grace_ir_input(c, GRACE_INT64, GRACE_CPU, 0, NULL, &vi));
  TRY(grace_ir_input(c, GRACE_FLOAT32, GRACE_CPU, 2, (int64_t[]){2, 3}, &vacc));
  TRY(grace_ir_literal_int(c, 3, &lim));
  TRY(grace_ir_op(c, GRACE_OP_LT, 2, (grace_value[]){vi, lim}, NULL, 1, &lt));
  TRY(grace_ir_output(c, lt));
  TRY(grace_ir_input(body, GRACE_INT64, GRACE_CPU, 0, NULL, &vi));
  TRY(grace_ir_input(body, GRACE_FLOAT32, GRACE_CPU, 2, (int64_t[]){2, 3}, &vacc));
  TRY(grace_ir_literal_int(body, 1, &one));
  TRY(grace_ir_literal_int(body, 2, &two));
  TRY(grace_ir_op(body, GRACE_OP_ADD, 2, (grace_value[]){vi, one}, NULL, 1, &i1));
  TRY(grace_ir_op(body, GRACE_OP_MUL, 2, (grace_value[]){vacc, two}, NULL, 1, &a1));
  TRY(grace_ir_output(body, i1));
  TRY(grace_ir_output(body, a1));
  TRY(grace_ir_input(lp, GRACE_INT64, GRACE_CPU, 0, NULL, &vi));
  TRY(grace_ir_input(lp, GRACE_FLOAT32, GRACE_CPU, 2, (int64_t[]){2, 3}, &vacc));
  TRY(grace_ir_while(lp, 2, (grace_value[]){vi, vacc}, 0, NULL, c, body, 10, lo));
  c = body = NULL;
  TRY(grace_ir_output(lp, lo[0]));
  TRY(grace_ir_output(lp, lo[1]));
  TRY(grace_ir_verify(lp));
  grace_tensor_release(out[0]);
  out[0] = NULL;
  TRY(grace_tensor_scalar_int(vm, 0, &i0));
  TRY(grace_ir_run(lp, 2, (grace_tensor *[]){i0, a}, 2, out));
done:
  grace_tensor_release(p); grace_tensor_release(i0);
  grace_tensor_release(out[0]); grace_tensor_release(out[1]);
  grace_ir_free(t); grace_ir_free(e); grace_ir_free(c); grace_ir_free(body);
  grace_ir_free(ir); grace_ir_free(opt); grace_ir_free(lp);
  return st;
}

/* A cond recorded inside a trace, as a host records grace.cond: then = a + b and b.fill_(2) (a write handed back),
 * else = a * b; the trace ends. */
static grace_status traced_region(grace_vm *vm, grace_tensor *a, grace_tensor *b) {
  grace_status st = GRACE_OK;
  grace_ir *ir = NULL, *t = NULL, *e = NULL;
  grace_tensor *p = NULL, *r1 = NULL, *r2 = NULL, *caps[4] = {0};
  grace_sub_writes w[2] = {{0}, {0}};
  grace_attrs two = {.a = 2};
  grace_value v;
  int ncap = 0, sub = 0;
  const int pv = 1;
  TRY(grace_tensor_from_data(vm, GRACE_BOOL, 0, NULL, GRACE_INT32, &pv, &p));
  NEED(ir = grace_ir_new(vm, "traced"));
  NEED(t = grace_ir_new(vm, "then"));
  NEED(e = grace_ir_new(vm, "else"));
  TRY(grace_trace_begin(vm, ir, NULL, NULL));
  if ((st = grace_trace_input(vm, p, &v)) == GRACE_OK) st = grace_trace_input(vm, a, &v);
  if (st == GRACE_OK && (st = grace_trace_sub_begin(vm, t, 2, (grace_tensor *[]){a, b})) == GRACE_OK) {
    sub = 1;
    if ((st = grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){a, b}, NULL, 1, &r1)) == GRACE_OK &&
        (st = grace_run(vm, GRACE_OP_FILL_, 1, &b, &two, 0, NULL)) == GRACE_OK) {
      st = grace_trace_sub_end(vm, 1, &r1, 4, caps, &ncap, &w[0]);
      if (st == GRACE_OK) sub = 0;
    }
  }
  if (st == GRACE_OK && (st = grace_trace_sub_begin(vm, e, 2, (grace_tensor *[]){a, b})) == GRACE_OK) {
    sub = 1;
    if ((st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){a, b}, NULL, 1, &r2)) == GRACE_OK) {
      int n2 = 0;
      st = grace_trace_sub_end(vm, 1, &r2, 4, caps + ncap, &n2, &w[1]);
      if (st == GRACE_OK) sub = 0;
      ncap += n2;
    }
  }
  if (sub) grace_trace_sub_abort(vm);
  if (st == GRACE_OK) {
    st = grace_trace_cond(vm, p, 2, (grace_tensor *[]){a, b}, t, e, 1, &r1, w, 0);
    t = e = NULL;   /* the trace's now, whatever the outcome */
  }
  if (st == GRACE_OK) st = grace_trace_value(vm, r1, &v);
  if (st == GRACE_OK) st = grace_ir_output(ir, v);
  if (st != GRACE_OK) grace_trace_end(vm);   /* the first error is the one kept */
  else st = grace_trace_end(vm);
  if (st == GRACE_OK) st = grace_ir_verify(ir);
done:
  for (int i = 0; i < 4; i++) grace_tensor_release(caps[i]);
  grace_sub_writes_release(&w[0]);
  grace_sub_writes_release(&w[1]);
  grace_tensor_release(p); grace_tensor_release(r1); grace_tensor_release(r2);
  grace_ir_free(ir); grace_ir_free(t); grace_ir_free(e);
  return st;
}

static grace_status workload_fn(grace_vm *vm) {
  grace_status st = GRACE_OK;
  grace_fn *fn = NULL;
  grace_tensor *x = NULL, *y = NULL;
  const float xv[6] = {1, 2, 3, 4, 5, 6}, yv[6] = {2, 0, 1, 1, 3, 2};
  TRY(grace_tensor_from_data(vm, GRACE_FLOAT32, 2, (int64_t[]){2, 3}, GRACE_FLOAT32, xv, &x));
  TRY(grace_tensor_from_data(vm, GRACE_FLOAT32, 2, (int64_t[]){3, 2}, GRACE_FLOAT32, yv, &y));
  grace_host host = {.call = fn_body};
  grace_fn_options opts = {.cache_limit = 4};
  TRY(grace_fn_new(vm, "sweep", &host, vm, &opts, &fn));
  TRY(fn_call_check(vm, fn, x, 2));   /* traced */
  TRY(fn_call_check(vm, fn, x, 2));   /* a hit */
  TRY(fn_call_check(vm, fn, y, 2));   /* a new shape: a guard miss, a retrace */
  TRY(fn_call_check(vm, fn, x, 3));   /* a new number: another trace */
  char text[2048];
  grace_arg args[2] = {{.kind = GRACE_ARG_TENSOR, .t = x}, {.kind = GRACE_ARG_FLOAT, .f = 2}};
  TRY(grace_fn_explain(fn, 2, args, text, sizeof text));
  grace_tensor_release(y);
  y = NULL;
  TRY(grace_tensor_from_data(vm, GRACE_FLOAT32, 2, (int64_t[]){2, 3}, GRACE_FLOAT32, yv, &y));
  TRY(region_programs(vm, x, y));
  TRY(traced_region(vm, x, y));
done:
  grace_fn_free(fn);
  grace_tensor_release(x); grace_tensor_release(y);
  return st;
}

/* ---- the third workload: a function with a graph break, run as partitions ---- */
/* The host of the grace_fn below: t = x * 2 (kept by the host past the call, as Lua code keeps a tensor in a table;
 * no later op reads it, so its partition keeps it inside), s = t + x, a host read of sum(s) (the break), then
 * s * s or s. */
typedef struct part_host {
  grace_vm *vm;
  grace_tensor *kept;
  int ahead;   /* tells grace that the other way of the branch only returns (grace_trace_branch_ahead) */
} part_host;

static void part_trace_begin(void *ud) { (void)ud; }
static void part_trace_end(void *ud, grace_ir *ir, uint64_t *guard, int *nguarded, char *why, size_t n) {
  (void)ud; (void)ir; (void)n;
  *guard = 0;
  *nguarded = 0;
  why[0] = 0;
}

static grace_status part_body(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  part_host *h = ud;
  grace_vm *vm = h->vm;
  grace_tensor *two = NULL, *t = NULL, *s = NULL, *sum = NULL, *out = NULL;
  double v = 0;
  grace_status st = grace_tensor_scalar(vm, 2.0, 0, &two);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){args[0].t, two}, NULL, 1, &t);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){t, args[0].t}, NULL, 1, &s);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_SUM, 1, &s, NULL, 1, &sum);
  if (st == GRACE_OK) st = grace_tensor_read(vm, sum, GRACE_FLOAT64, &v);
  int want = st == GRACE_OK && h->ahead ? grace_trace_forced(vm, sum) : -1;
  if (want >= 0) v = want ? 0 : 2e9;   /* grace records the other way ahead: a value on the side it asks for */
  if (st == GRACE_OK) st = grace_trace_branch(vm, sum, GRACE_CMP_LT, 1e9, v < 1e9, NULL);   /* what it decides */
  if (st == GRACE_OK && h->ahead) st = grace_trace_branch_ahead(vm, NULL);
  if (st == GRACE_OK && v < 1e9) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){s, s}, NULL, 1, &out);
  else if (st == GRACE_OK) { out = s; grace_tensor_retain(s); }
  grace_tensor_release(two); grace_tensor_release(s); grace_tensor_release(sum);
  grace_tensor_release(h->kept);
  h->kept = t;
  if (st != GRACE_OK) return st;
  *nres = 1;
  res[0] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = out};
  return GRACE_OK;
}

static grace_status partitions(grace_vm *vm, int ahead) {
  grace_status st = GRACE_OK;
  grace_fn *fn = NULL;
  grace_tensor *x = NULL;
  part_host h = {vm, NULL, ahead};
  const float xv[6] = {1, 2, 3, 4, 5, 6};
  TRY(grace_tensor_from_data(vm, GRACE_FLOAT32, 2, (int64_t[]){2, 3}, GRACE_FLOAT32, xv, &x));
  grace_host host = {.call = part_body, .trace_begin = part_trace_begin, .trace_end = part_trace_end};
  grace_fn_options opts = {.cache_limit = 4, .no_auto_regions = !ahead};
  TRY(grace_fn_new(vm, "sweep_part", &host, &h, &opts, &fn));
  /* traced, then replayed as partitions; with ahead, the other way recorded after the third call and the paths
     merged into one program */
  for (int i = 0; i < (ahead ? 6 : 3); i++) {
    grace_arg args[1] = {{.kind = GRACE_ARG_TENSOR, .t = x}}, res[1];
    int nres = 0;
    double got = 0, kept = 0;
    TRY(grace_fn_call(fn, 1, args, &nres, res, 1));
    st = grace_tensor_get(vm, res[0].t, (int64_t[]){0, 1}, &got);
    grace_tensor_release(res[0].t);
    if (st == GRACE_OK) st = grace_tensor_get(vm, h.kept, (int64_t[]){0, 1}, &kept);   /* computed again */
    if (st == GRACE_OK && (got != 36 || kept != 4))
      st = grace_set_error(vm, GRACE_EINTERNAL, "partitions: wrong result %g, kept %g", got, kept);
    if (st != GRACE_OK) goto done;
  }
  grace_fn_stats fs;
  grace_fn_get_stats(fn, &fs);
  if (fs.partitions < 1 || fs.partition_internal < 1 || (ahead && (fs.ahead_paths != 1 || fs.auto_regions != 1)))
    st = grace_set_error(vm, GRACE_EINTERNAL, "partitions: %d made, %ld values kept inside, %d paths recorded ahead, "
                         "%d merged", fs.partitions, fs.partition_internal, fs.ahead_paths, fs.auto_regions);
done:
  grace_fn_free(fn);
  grace_tensor_release(h.kept);
  grace_tensor_release(x);
  return st;
}
static grace_status workload_part(grace_vm *vm) { return partitions(vm, 0); }
static grace_status workload_ahead(grace_vm *vm) { return partitions(vm, 1); }

/* A small op after a failure: the VM still works. */
static int vm_usable(grace_vm *vm) {
  grace_tensor *a = NULL, *r = NULL;
  int good = grace_tensor_scalar(vm, 3.0, 0, &a) == GRACE_OK &&
             grace_run(vm, GRACE_OP_NEG, 1, &a, NULL, 1, &r) == GRACE_OK;
  double v = 0;
  good = good && grace_tensor_get(vm, r, NULL, &v) == GRACE_OK && v == -3.0;
  grace_tensor_release(a); grace_tensor_release(r);
  return good;
}

/* Fails each allocation of w in turn (one VM per N: a failure must not leave state that changes the next run's
 * allocation order); w must fail cleanly, give back what it took and leave the VM usable. */
static void sweep(const char *name, grace_status (*w)(grace_vm *)) {
  grace_vm *vm = new_vm();
  if (!vm || w(vm) != GRACE_OK) { ok(0, "%s: runs without failures: %s", name, vm ? grace_last_error(vm) : "no VM"); grace_vm_free(vm); return; }
  long before = cnt.allocs;
  size_t base = cnt.live;
  grace_status st = w(vm);
  long total = cnt.allocs - before;
  ok(st == GRACE_OK && total > 0 && cnt.live == base, "%s: %ld allocations a run, all given back", name, total);
  grace_vm_free(vm);
  ok(cnt.live == 0 && !cnt.bad, "%s: then grace_vm_free gives back everything (%zu live)", name, cnt.live);
  cnt.live = 0, cnt.bad = 0;
  memset(cnt.ptr, 0, sizeof cnt.ptr);
  long leaks = 0, silent = 0, unusable = 0, passed = 0, freed_bad = 0;
  for (long n = 1; n <= total; n++) {
    vm = new_vm();
    if (!vm || w(vm) != GRACE_OK) { ok(0, "%s: setup for N=%ld", name, n); grace_vm_free(vm); break; }
    base = cnt.live;
    cnt.fail_at = cnt.allocs + n, cnt.failed = 0;
    st = w(vm);
    cnt.fail_at = 0;
    const char *msg = grace_last_error(vm);
    if (st == GRACE_OK) passed++;   /* an allocation the workload can do without (the CPU fusion plan): fine */
    else if (st != GRACE_ENOMEM && !(msg && msg[0])) {
      silent++;
      printf("# N=%ld: %s with no message\n", n, grace_status_name(st));
    }
    if (cnt.live != base || cnt.bad) {
      leaks++;
      if (leaks <= 10) printf("# N=%ld (%s: %s): %zd bytes kept, %d bad frees\n", n, grace_status_name(st), msg,
                              (ssize_t)(cnt.live - base), cnt.bad);
    }
    if (!vm_usable(vm)) { unusable++; if (unusable <= 10) printf("# N=%ld: the VM is not usable after\n", n); }
    cnt.bad = 0;
    grace_vm_free(vm);
    if (cnt.live || cnt.bad) {
      freed_bad++;
      if (freed_bad <= 10) printf("# N=%ld: %zu bytes live after grace_vm_free\n", n, cnt.live);
    }
    cnt.live = 0, cnt.bad = 0;
    memset(cnt.ptr, 0, sizeof cnt.ptr);
  }
  printf("# %s: %ld allocation points; %ld runs succeeded without the failed allocation\n", name, total, passed);
  ok(silent == 0, "%s: every failed run says why (%ld did not)", name, silent);
  ok(leaks == 0, "%s: every failed run gives back what it took (%ld did not)", name, leaks);
  ok(unusable == 0, "%s: the VM is usable after each failure (%ld not)", name, unusable);
  ok(freed_bad == 0, "%s: grace_vm_free then gives back everything (%ld did not)", name, freed_bad);
}

int main(void) {
  /* every allocation of grace_vm_new fails in turn: NULL and nothing held */
  long vm_allocs = 0, vm_bad = 0;
  for (long n = 1;; n++) {
    cnt.allocs = 0, cnt.fail_at = n, cnt.failed = 0;
    char err[128] = "";
    grace_config cfg = {.alloc = counting_alloc, .alloc_ud = &cnt, .device = "cpu", .threads = 1};
    grace_vm *v = grace_vm_new(&cfg, err, sizeof err);
    int refused = cnt.failed > 0;
    if (v) grace_vm_free(v);
    if (refused && (v || !err[0])) vm_bad++;
    if (cnt.live || cnt.bad) { vm_bad++; printf("# vm_new fail at %ld: %zu live, %d bad\n", n, cnt.live, cnt.bad); }
    cnt.live = 0, cnt.bad = 0;
    if (!refused) { vm_allocs = n - 1; break; }
  }
  cnt.fail_at = 0;
  ok(vm_bad == 0, "grace_vm_new with each of its %ld allocations failing: NULL, a message, nothing held", vm_allocs);

  sweep("build, ops, IR, passes, run, trace", workload);
  sweep("grace_fn (trace, hit, guard miss, retrace, explain) and cond/while regions", workload_fn);
  sweep("a function with a graph break as partitions, a value kept inside asked for", workload_part);
  sweep("the same with the branch's other way recorded ahead and merged", workload_ahead);
  return tap_done();
}
