/* fuzz_ops.c: random op sequences through grace_run. The input chooses, step by step, either a new tensor (dtype,
 * up to 4 dims of sizes that may be zero, negative or near 2^63, elements from the input) or an op of the table
 * with inputs from the tensors made so far (views of views, results of earlier ops, NULL where optional) and every
 * attribute from the input (dims, shapes, scalars, dtype, flags). Each result is read back to the host. The checks
 * of fuzz.h: no crash or sanitizer report, an error message for every error, nothing held at the end. */
#include "fuzz.h"

#define POOL 16
#define STEPS 24

static grace_tensor *pick(fz *f, grace_tensor **pool, int n) {
  uint8_t b = fz_u8(f);
  if (b == 255 || n == 0) return NULL;
  return pool[b % n];
}

static grace_status new_tensor(grace_vm *vm, fz *f, grace_tensor **out) {
  grace_dtype dt = fz_dtype(f);
  int ndim = fz_u8(f) % 5;
  int64_t sizes[GRACE_MAX_DIMS], numel = 1;
  for (int d = 0; d < ndim; d++) {
    sizes[d] = fz_int(f);
    if (sizes[d] > 0 && sizes[d] < 64 && numel < 4096) numel *= sizes[d];
    else if (sizes[d] != 0) numel = 4096;   /* too big to fill from the input: let grace judge the shape */
  }
  if (numel >= 4096 || fz_u8(f) < 16) return grace_tensor_empty(vm, dt, GRACE_CPU, ndim, sizes, out);
  double vals[4096];
  for (int64_t k = 0; k < numel; k++) vals[k] = fz_num(f);
  return grace_tensor_from_data(vm, dt, ndim, sizes, GRACE_FLOAT64, vals, out);
}

static void fill_attrs(fz *f, grace_attrs *a) {
  memset(a, 0, sizeof *a);
  uint8_t has = fz_u8(f);   /* which groups of attributes this op gets */
  if (has & 1) { a->ndims = fz_u8(f) % (GRACE_MAX_DIMS + 1); for (int k = 0; k < a->ndims; k++) a->dims[k] = fz_sub(fz_int(f), 2); }
  if (has & 2) { a->nshape = fz_u8(f) % (GRACE_MAX_DIMS + 1); for (int k = 0; k < a->nshape; k++) a->shape[k] = fz_sub(fz_int(f), fz_u8(f) & 1); }
  if (has & 4) { a->a = fz_num(f); a->has_a = 1; a->b = fz_num(f); a->has_b = fz_u8(f) & 1; a->c = fz_num(f); }
  if (has & 8) { a->exact = fz_u8(f) & 7; a->ia = fz_int(f); a->ib = fz_int(f); a->ic = fz_int(f); }
  if (has & 16) { a->i0 = fz_int(f); a->i1 = fz_int(f); }
  if (has & 32) { a->keepdim = fz_u8(f) & 1; a->flag = fz_u8(f) & 3; }
  if (has & 64) { a->has_dtype = 1; a->dtype = fz_dtype(f); }
  if (has & 128) a->device = (grace_device)(fz_u8(f) & 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size, 0};
  grace_vm *vm = fuzz_vm(fz_u8(&f) & 1);
  grace_tensor *pool[POOL];
  int n = 0;
  for (int step = 0; step < STEPS && fz_more(&f); step++) {
    grace_tensor *res[2] = {0};
    int nres = 0;
    grace_status st;
    uint8_t what = fz_u8(&f);
    if (what < 48 || n == 0) {
      st = new_tensor(vm, &f, &res[0]);
      nres = 1;
      fuzz_status(vm, st, "new tensor");
    } else {
      grace_op op = (grace_op)(fz_u8(&f) % GRACE_NOPS);
      int nin = grace_op_ninputs(op);
      if (nin < 0) nin = 1 + fz_u8(&f) % 4;
      grace_tensor *in[8] = {0};
      for (int k = 0; k < nin; k++) in[k] = pick(&f, pool, n);
      grace_attrs a;
      fill_attrs(&f, &a);
      nres = grace_op_noutputs(op);
      if (nres > 1 && (fz_u8(&f) & 1)) nres = 1;
      st = grace_run(vm, op, nin, in, fz_u8(&f) == 7 ? NULL : &a, nres, res);
      fuzz_status(vm, st, grace_op_name(op));
    }
    for (int k = 0; k < nres; k++) {
      if (st != GRACE_OK) { if (res[k]) { fprintf(stderr, "fuzz: a result after an error\n"); abort(); } continue; }
      if (!res[k]) { fprintf(stderr, "fuzz: a NULL result after success\n"); abort(); }
      fuzz_touch(vm, res[k]);
      if (n < POOL) pool[n++] = res[k];
      else { grace_tensor_release(pool[step % POOL]); pool[step % POOL] = res[k]; }
    }
  }
  for (int k = 0; k < n; k++) grace_tensor_release(pool[k]);
  fuzz_vm_done(vm);
  return 0;
}
