/* test_wrap.c: grace_tensor_wrap, a tensor over the caller's memory. Ops read the caller's array; in-place ops write
 * it; views share it and keep it alive (the release callback runs once, when the last of the tensor and its views
 * goes); op results are tensors of their own; the memory is not counted against the VM's cap; a pointer not aligned
 * to the dtype, a NULL pointer and a bad shape are errors that call no release; a compiled function writes an
 * argument that wraps host memory in place, as an eager call does. Expected values are worked out by hand. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "grace.h"
#include "tap.h"

typedef struct { int calls; void *last; } released;
static void on_release(void *ud, void *data) { released *r = ud; r->calls++; r->last = data; }

static grace_status twice_plus_one(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  grace_vm *vm = ud;
  grace_tensor *two = NULL, *one = NULL, *m = NULL;
  grace_status st = grace_tensor_scalar(vm, 2, 0, &two);
  if (st == GRACE_OK) st = grace_tensor_scalar(vm, 1, 0, &one);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_MUL, 2, (grace_tensor *[]){args[0].t, two}, NULL, 1, &m);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_COPY_, 2, (grace_tensor *[]){args[0].t, m}, NULL, 0, NULL);
  if (st == GRACE_OK) st = grace_run(vm, GRACE_OP_ADD, 2, (grace_tensor *[]){args[0].t, one}, NULL, 1, &res[0].t);
  grace_tensor_release(two); grace_tensor_release(one); grace_tensor_release(m);
  if (st != GRACE_OK) return st;
  *nres = 1;
  res[0].kind = GRACE_ARG_TENSOR;
  return GRACE_OK;
}

int main(void) {
  grace_vm *vm = grace_vm_new(&(grace_config){.device = "cpu", .max_bytes = 64}, NULL, 0);
  if (!vm) { printf("1..0 # SKIP no VM\n"); return 0; }
  float buf[2][3] = {{1, 2, 3}, {4, 5, 6}};
  released r = {0};
  grace_tensor *t = NULL, *s = NULL, *row = NULL, *tt = NULL;
  ok(grace_tensor_wrap(vm, GRACE_FLOAT32, 2, (int64_t[]){2, 3}, buf, on_release, &r, &t) == GRACE_OK && t,
     "wrap a float[2][3] (24 bytes)");
  ok(grace_tensor_data(t) == (void *)buf && grace_tensor_is_contiguous(t) && grace_tensor_numel(t) == 6,
     "the tensor's data is the caller's array, contiguous, 6 elements");
  is_int(grace_tensor_bytes(vm), 0, "not counted in grace_tensor_bytes");
  static double big[100];
  grace_tensor *b = NULL;
  ok(grace_tensor_wrap(vm, GRACE_FLOAT64, 1, (int64_t[]){100}, big, NULL, NULL, &b) == GRACE_OK,
     "800 bytes wrapped under a 64-byte cap: the cap counts grace's storages only");
  grace_tensor_release(b);

  grace_attrs all = {0};
  double v = 0;
  ok(grace_run(vm, GRACE_OP_SUM, 1, &t, &all, 1, &s) == GRACE_OK && grace_tensor_get(vm, s, NULL, &v) == GRACE_OK &&
     v == 21, "an op reads the caller's values (sum 21)");
  grace_tensor_release(s);

  buf[1][2] = 60;   /* the caller writes its array: the tensor sees it */
  ok(grace_run(vm, GRACE_OP_SUM, 1, &t, &all, 1, &s) == GRACE_OK && grace_tensor_get(vm, s, NULL, &v) == GRACE_OK &&
     v == 75, "a write by the caller is seen by the next op (sum 75)");
  grace_tensor_release(s);

  grace_attrs fill = {.a = 7};
  ok(grace_run(vm, GRACE_OP_FILL_, 1, &t, &fill, 0, NULL) == GRACE_OK && buf[0][0] == 7 && buf[1][2] == 7,
     "fill_ writes the caller's array");
  buf[0][0] = 1, buf[0][1] = 2, buf[0][2] = 3, buf[1][0] = 4, buf[1][1] = 5, buf[1][2] = 6;

  /* views share the memory and keep it alive; a result of an op is its own tensor */
  grace_attrs sel = {.ndims = 1, .dims = {0}, .i0 = 1}, tp = {.ndims = 2, .dims = {0, 1}};
  ok(grace_run(vm, GRACE_OP_SELECT, 1, &t, &sel, 1, &row) == GRACE_OK && grace_tensor_data(row) == (void *)buf[1],
     "select(0, 1) is a view of the caller's second row");
  ok(grace_run(vm, GRACE_OP_TRANSPOSE, 1, &t, &tp, 1, &tt) == GRACE_OK &&
     grace_tensor_storage_id(tt) == grace_tensor_storage_id(t), "transpose shares the storage");
  grace_tensor_release(t);
  is_int(r.calls, 0, "releasing the tensor while views live: no release yet");
  grace_attrs neg = {0};
  ok(grace_run(vm, GRACE_OP_NEG, 1, &row, &neg, 1, &s) == GRACE_OK && grace_tensor_data(s) != (void *)buf[1] &&
     grace_tensor_get(vm, s, (int64_t[]){2}, &v) == GRACE_OK && v == -6, "neg of the row: a new tensor, -6 last");
  grace_tensor_release(row);
  grace_tensor_release(tt);
  ok(r.calls == 1 && r.last == (void *)buf, "the last view released: release(ud, data) once, with the array");
  grace_tensor_release(s);
  is_int(r.calls, 1, "and never again");

  /* bad input: an error naming wrap, no release */
  r.calls = 0;
  char *bytes = (char *)buf;
  grace_tensor *bad = NULL;
  grace_status st = grace_tensor_wrap(vm, GRACE_FLOAT32, 1, (int64_t[]){2}, bytes + 1, on_release, &r, &bad);
  ok(st == GRACE_EARG && !bad && strstr(grace_last_error(vm), "aligned") && r.calls == 0,
     "a pointer off the float32 alignment: %s", grace_last_error(vm));
  ok(grace_tensor_wrap(vm, GRACE_FLOAT32, 1, (int64_t[]){2}, NULL, on_release, &r, &bad) == GRACE_EARG && !bad,
     "NULL data: GRACE_EARG");
  ok(grace_tensor_wrap(vm, GRACE_FLOAT32, 1, (int64_t[]){-2}, buf, on_release, &r, &bad) == GRACE_EARG &&
     strstr(grace_last_error(vm), "wrap: negative size") && r.calls == 0, "a negative size: GRACE_EARG, no release");
  ok(grace_tensor_wrap(vm, GRACE_NDTYPES, 1, (int64_t[]){2}, buf, on_release, &r, &bad) == GRACE_EDTYPE && !bad,
     "an invalid dtype: GRACE_EDTYPE");
  grace_tensor_release(bad);

  /* a compiled function writing its argument in place: the caller's array, on the traced call and on hits */
  grace_fn *fn = NULL;
  grace_host host = {.call = twice_plus_one};
  ok(grace_fn_new(vm, "twice", &host, vm, NULL, &fn) == GRACE_OK, "grace_fn_new");
  int good = 1;
  for (int call = 0; call < 3; call++) {
    float x[4] = {1, 2, 3, 4};
    grace_tensor *xt = NULL;
    r.calls = 0;
    grace_arg args[1] = {{.kind = GRACE_ARG_TENSOR}}, res[1];
    int nres = 0;
    good = good && grace_tensor_wrap(vm, GRACE_FLOAT32, 1, (int64_t[]){4}, x, on_release, &r, &xt) == GRACE_OK;
    args[0].t = xt;
    good = good && grace_fn_call(fn, 1, args, &nres, res, 1) == GRACE_OK && nres == 1;
    double y[4] = {0};
    good = good && grace_tensor_read(vm, res[0].t, GRACE_FLOAT64, y) == GRACE_OK;
    for (int i = 0; i < 4; i++) good = good && x[i] == 2.0f * (float)(i + 1) && y[i] == 2.0 * (i + 1) + 1;
    if (nres == 1) grace_tensor_release(res[0].t);
    grace_tensor_release(xt);
    good = good && r.calls == 1;
  }
  grace_fn_stats fs;
  grace_fn_get_stats(fn, &fs);
  ok(good && fs.traces == 1 && fs.hits == 2, "x doubled in the caller's array, x*2+1 returned, traced once (%ld hits)",
     fs.hits);
  grace_fn_free(fn);
  is_int(grace_tensor_bytes(vm), 0, "nothing left");
  grace_vm_free(vm);
  return tap_done();
}
