/* c_only.c: grace from C alone, no Lua. A C function of two tensors, out[i] = sum_j tanh(2 a[i,j] + b[i,j]) a[i,j],
 * is compiled with grace_fn (the C function runs once per new shape while grace records its ops; later calls run
 * the recorded program without calling it), run on arrays the program owns, called again on a new shape (a
 * second trace), explained, and checked against the same arithmetic in plain C.
 * The input tensors wrap the C arrays without copying (grace_tensor_wrap: grace frees them through a callback when
 * the last reference goes); results are read back with grace_tensor_read.
 * Build: cc -std=c11 -Iinclude c_only.c -Lbuild -lgrace (make examples). Prints "c_only: ok" when all agree. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "grace.h"

#define CHECK(call) do { if ((call) != GRACE_OK) return fail(vm, #call); } while (0)

static int fail(grace_vm *vm, const char *what) {
  fprintf(stderr, "c_only: %s: %s\n", what, grace_last_error(vm));
  return 1;
}

/* The host function grace compiles: every grace_run it makes while traced becomes an op of the program. */
static grace_status host_call(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  grace_vm *vm = ud;
  if (nargs != 2 || maxres < 1) return grace_set_error(vm, GRACE_EARG, "f takes (a, b) and returns one tensor");
  grace_tensor *a = args[0].t, *b = args[1].t, *two = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL, *t4 = NULL,
               *out = NULL;
  grace_attrs sum = {.ndims = 1, .dims = {1}};
  grace_status st = grace_tensor_scalar(vm, 2.0, 0, &two);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){a, two}, NULL, 1, &t1);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){t1, b}, NULL, 1, &t2);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_TANH, 1, &t2, NULL, 1, &t3);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){t3, a}, NULL, 1, &t4);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_SUM, 1, &t4, &sum, 1, &out);
  grace_tensor *tmp[] = {two, t1, t2, t3, t4};
  for (int i = 0; i < 5; i++) if (tmp[i]) grace_tensor_release(tmp[i]);
  if (st != GRACE_OK) return st;
  *nres = 1;
  res[0] = (grace_arg){.kind = GRACE_ARG_TENSOR, .t = out};   /* the reference goes to the caller */
  return GRACE_OK;
}

static float reference(const float *a, const float *b, int64_t i, int64_t cols) {
  float s = 0;
  for (int64_t j = 0; j < cols; j++) s += tanhf(2 * a[i * cols + j] + b[i * cols + j]) * a[i * cols + j];
  return s;
}

/* The release callback of a wrapped array: grace calls it once, when no tensor uses the array any more. */
static void free_array(void *ud, void *data) { (void)ud; free(data); }

/* Calls f on rows x cols arrays the program owns and compares each result with plain C; returns 0 when all agree. */
static int run_shape(grace_vm *vm, grace_fn *f, int64_t rows, int64_t cols) {
  float *a = malloc(sizeof *a * rows * cols), *b = malloc(sizeof *b * rows * cols), *out = malloc(sizeof *out * rows);
  if (!a || !b || !out) { fprintf(stderr, "c_only: out of memory\n"); free(a); free(b); free(out); return 1; }
  for (int64_t k = 0; k < rows * cols; k++) { a[k] = (float)(k % 7) / 7 - 0.5f; b[k] = (float)(k % 5) / 10; }
  int64_t sizes[] = {rows, cols};
  grace_tensor *ta = NULL, *tb = NULL;
  if (grace_tensor_wrap(vm, GRACE_FLOAT32, 2, sizes, a, free_array, NULL, &ta) != GRACE_OK) free(a);
  if (grace_tensor_wrap(vm, GRACE_FLOAT32, 2, sizes, b, free_array, NULL, &tb) != GRACE_OK) free(b);
  if (!ta || !tb) { grace_tensor_release(ta); grace_tensor_release(tb); free(out); return fail(vm, "grace_tensor_wrap"); }
  int bad = 0;
  for (int call = 0; call < 3; call++) {   /* the first call of a shape traces; the others replay the program */
    grace_arg args[] = {{.kind = GRACE_ARG_TENSOR, .t = ta}, {.kind = GRACE_ARG_TENSOR, .t = tb}}, res[1];
    int nres = 0;
    CHECK(grace_fn_call(f, 2, args, &nres, res, 1));
    CHECK(grace_tensor_read(vm, res[0].t, GRACE_FLOAT32, out));
    grace_tensor_release(res[0].t);
    for (int64_t i = 0; i < rows; i++) {
      float want = reference(a, b, i, cols);
      if (fabsf(out[i] - want) > 1e-4f * (1 + fabsf(want))) {
        if (bad++ < 5) fprintf(stderr, "c_only: [%ld] row %ld: got %g, want %g\n", (long)rows, (long)i, out[i], want);
      }
    }
  }
  printf("shape %ldx%ld: out[0] = %.6f (C: %.6f)\n", (long)rows, (long)cols, out[0], reference(a, b, 0, cols));
  grace_tensor_release(ta);   /* a and b are freed by free_array once grace holds them no more */
  grace_tensor_release(tb);
  free(out);
  return bad != 0;
}

int main(void) {
  char err[256];
  grace_config cfg = {.device = "cpu"};
  grace_vm *vm = grace_vm_new(&cfg, err, sizeof err);
  if (!vm) { fprintf(stderr, "c_only: %s\n", err); return 1; }
  grace_host host = {.call = host_call};
  grace_fn *f = NULL;
  if (grace_fn_new(vm, "f", &host, vm, NULL, &f) != GRACE_OK) return fail(vm, "grace_fn_new");
  int bad = run_shape(vm, f, 4, 8) || run_shape(vm, f, 3, 5);   /* the new shape is a new entry: a second trace */

  grace_fn_stats s;
  grace_fn_get_stats(f, &s);
  printf("calls %ld, traces %ld, hits %ld, entries %d\n", s.calls, s.traces, s.hits, s.entries);
  if (s.traces != 2 || s.hits != 4) { fprintf(stderr, "c_only: expected 2 traces and 4 hits\n"); bad = 1; }

  /* explain: what grace makes of f on these arguments (partitions, ops, guards) */
  int64_t sizes[] = {2, 3};
  grace_tensor *x = NULL, *y = NULL;
  if (grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 2, sizes, &x) != GRACE_OK ||
      grace_tensor_empty(vm, GRACE_FLOAT32, GRACE_CPU, 2, sizes, &y) != GRACE_OK) return fail(vm, "grace_tensor_empty");
  static char text[8192];
  grace_arg args[] = {{.kind = GRACE_ARG_TENSOR, .t = x}, {.kind = GRACE_ARG_TENSOR, .t = y}};
  if (grace_fn_explain(f, 2, args, text, sizeof text) != GRACE_OK) return fail(vm, "grace_fn_explain");
  printf("explain:\n%s", text);
  grace_tensor_release(x);
  grace_tensor_release(y);
  grace_fn_free(f);
  grace_vm_free(vm);
  printf("c_only: %s\n", bad ? "FAILED" : "ok");
  return bad;
}
