/* test_alloc_sweep.c: every host allocation a small workload makes, failed in turn. The workload goes through the
 * public API only (tensors, eager ops, the IR builder, verify, the default passes, a run, a trace). For each N the
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

int main(void) {
  /* the failure-free run: how many allocations the workload makes, and that it passes */
  grace_vm *vm = new_vm();
  if (!vm) { ok(0, "VM with a counting allocator"); return tap_done(); }
  grace_status st = workload(vm);   /* first run: whatever the VM sets up lazily (the worker pool) */
  ok(st == GRACE_OK, "the workload runs: %s", grace_last_error(vm));
  size_t base = cnt.live;
  long before = cnt.allocs;
  st = workload(vm);
  long total = cnt.allocs - before;
  ok(st == GRACE_OK && total > 0, "again: %ld allocations", total);
  ok(cnt.live == base, "and gives back what it took (%zu live, %zu before)", cnt.live, base);
  grace_vm_free(vm);
  ok(cnt.live == 0 && !cnt.bad, "grace_vm_free gives back everything (%zu live)", cnt.live);

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

  /* the sweep: one VM per N (a failure must not leave state that changes the next run's allocation order) */
  long crashes = 0, leaks = 0, silent = 0, unusable = 0, passed = 0, freed_bad = 0;
  for (long n = 1; n <= total; n++) {
    vm = new_vm();
    if (!vm || workload(vm) != GRACE_OK) { ok(0, "setup for N=%ld", n); break; }
    base = cnt.live;
    cnt.fail_at = cnt.allocs + n, cnt.failed = 0;
    st = workload(vm);
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
  (void)crashes;
  printf("# %ld allocation points; %ld runs succeeded without the failed allocation\n", total, passed);
  ok(silent == 0, "every failed run says why (%ld did not)", silent);
  ok(leaks == 0, "every failed run gives back what it took (%ld did not)", leaks);
  ok(unusable == 0, "the VM is usable after each failure (%ld not)", unusable);
  ok(freed_bad == 0, "grace_vm_free then gives back everything (%ld did not)", freed_bad);
  return tap_done();
}
