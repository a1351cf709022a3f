/* cpu_reduce_norm.c: the CPU backend's normalisations over the last dim, layer_norm and rms_norm.
 * Rows are split across threads and computed in float32 (vectorized, double partial sums): contiguous float32
 * rows in place, float16/bfloat16 or strided rows staged through float32 buffers, weight and bias converted
 * to float32 once. float64 inputs compute in double. The result has x's dtype whatever the weight's. */
#include <math.h>
#include "cpu/cpu_reduce.h"
#include "cpu/cpu_reduce_math.h"
#include "ir/ir.h"
#include "ir/ir_check.h"

typedef struct nplan {
  int rms, nd;
  double eps;
  const grace_tensor *x, *w, *b;
  const float *wf, *bf;   /* weight/bias as contiguous float32 (the tensors' own data, or converted copies) */
  int64_t D, rows;
  char *y;   /* contiguous output of x's shape and dtype */
} nplan;

/* One contiguous float32 row; mean and squared deviations summed with double partials. */
static inline void norm_row_f32(const nplan *p, const float *x, float *y) {
  int64_t D = p->D;
  const float *w = p->wf, *b = p->bf;
  float mean = 0, rstd;
  if (p->rms) rstd = (float)(1.0 / sqrt(rm_sqdev_f32(x, D, 0.0f) / (double)D + p->eps));
  else {
    mean = (float)(rm_sum_f32(x, D) / (double)D);
    rstd = (float)(1.0 / sqrt(rm_sqdev_f32(x, D, mean) / (double)D + p->eps));
  }
  if (w && b) for (int64_t i = 0; i < D; i++) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
  else if (w) for (int64_t i = 0; i < D; i++) y[i] = (x[i] - mean) * rstd * w[i];
  else if (b) for (int64_t i = 0; i < D; i++) y[i] = (x[i] - mean) * rstd + b[i];
  else for (int64_t i = 0; i < D; i++) y[i] = (x[i] - mean) * rstd;
}

static const char *row_ptr(const nplan *p, int64_t row) {
  const grace_tensor *x = p->x;
  return vm_ptr(x) + rr_row_offset(p->nd, x->sizes, x->strides, p->nd - 1, row) * (int64_t)grace_dtype_size(x->dtype);
}

static void norm_rows_f32(void *ctx, int64_t r0, int64_t r1) {
  const nplan *p = ctx;
  for (int64_t row = r0; row < r1; row++) norm_row_f32(p, (const float *)row_ptr(p, row), (float *)p->y + row * p->D);
}

/* float16/bfloat16 or strided rows, staged through float32 buffers. */
static void norm_rows_staged(void *ctx, int64_t r0, int64_t r1) {
  const nplan *p = ctx;
  grace_dtype dt = p->x->dtype;
  float xb[RR_STAGE], yb[RR_STAGE];
  for (int64_t row = r0; row < r1; row++) {
    rr_load_f32(dt, row_ptr(p, row), p->x->strides[p->nd - 1], p->D, xb);
    norm_row_f32(p, xb, yb);
    rr_store_f32(dt, yb, p->y + row * p->D * (int64_t)grace_dtype_size(dt), 1, p->D);
  }
}

/* float64 (and rows too long to stage): element by element in double. */
static void norm_rows(void *ctx, int64_t r0, int64_t r1) {
  const nplan *p = ctx;
  const grace_tensor *x = p->x, *w = p->w, *b = p->b;
  grace_dtype dt = x->dtype;
  size_t es = grace_dtype_size(dt);
  int64_t D = p->D, xs = x->strides[p->nd - 1] * (int64_t)es;
  int64_t ws = w ? w->strides[0] * (int64_t)grace_dtype_size(w->dtype) : 0;
  int64_t bs = b ? b->strides[0] * (int64_t)grace_dtype_size(b->dtype) : 0;
  for (int64_t row = r0; row < r1; row++) {
    const char *xr = vm_ptr(x) + rr_row_offset(p->nd, x->sizes, x->strides, p->nd - 1, row) * (int64_t)es;
    char *y = p->y + row * D * (int64_t)es;
    double mean = 0, ss = 0;
    if (!p->rms) {
      for (int64_t i = 0; i < D; i++) mean += vm_load_f64(dt, xr + i * xs);
      mean /= (double)D;
    }
    for (int64_t i = 0; i < D; i++) { double d = vm_load_f64(dt, xr + i * xs) - mean; ss += d * d; }
    double rstd = 1.0 / sqrt(ss / (double)D + p->eps);
    for (int64_t i = 0; i < D; i++) {
      double v = (vm_load_f64(dt, xr + i * xs) - mean) * rstd;
      if (w) v *= vm_load_f64(w->dtype, vm_ptr(w) + i * ws);
      if (b) v += vm_load_f64(b->dtype, vm_ptr(b) + i * bs);
      vm_store_f64(dt, y + i * (int64_t)es, v);
    }
  }
}

static int f32_contig(const grace_tensor *t) { return !t || (t->dtype == GRACE_FLOAT32 && t->strides[t->ndim - 1] == 1); }

/* The parameter as contiguous float32: its own data when it already is, else a converted copy in *copy. */
static const float *param_f32(grace_vm *vm, const char *op, const grace_tensor *t, float **copy) {
  *copy = NULL;
  if (!t) return NULL;
  if (f32_contig(t)) return (const float *)vm_ptr(t);
  *copy = vm_alloc_data(vm, op, (size_t)t->sizes[0], sizeof(float));   /* an expanded parameter: data-sized */
  if (*copy) rr_load_f32(t->dtype, vm_ptr(t), t->strides[0], t->sizes[0], *copy);
  return *copy;
}

grace_status cpu_norm_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                          int nout, grace_tensor **out) {
  const char *name = grace_op_name(op);
  nplan p;
  memset(&p, 0, sizeof p);
  p.rms = op == GRACE_OP_RMS_NORM;
  p.x = in[0];
  p.w = nin > 1 ? in[1] : NULL;
  p.b = !p.rms && nin > 2 ? in[2] : NULL;
  p.eps = a->has_a ? a->a : p.rms ? 1e-6 : 1e-5;
  const grace_tensor *x = p.x;
  grace_status s;
  ir_type ot;
  /* the checks are ir_infer's (infer_norm), which the IR and the device share */
  if ((s = vm_infer_tensors(vm, op, nin, in, a, 1, &ot)) != GRACE_OK) return s;
  p.nd = x->ndim;
  p.D = x->sizes[p.nd - 1];
  p.rows = 1;
  for (int d = 0; d < p.nd - 1; d++) p.rows *= x->sizes[d];
  if (!(out[0] = vm_tensor_new(vm, name, x->dtype, GRACE_CPU, x->ndim, x->sizes))) return vm->status;
  p.y = vm_ptr(out[0]);
  if (p.D == 0 || p.rows == 0) return GRACE_OK;
  int64_t grain = 16384 / p.D + 1;
  if (x->dtype == GRACE_FLOAT64 || (!f32_contig(x) && p.D > RR_STAGE)) {
    vm_parallel_for(vm, p.rows, grain, norm_rows, &p);
    return GRACE_OK;
  }
  float *wc = NULL, *bc = NULL;
  p.wf = param_f32(vm, name, p.w, &wc);
  p.bf = p.w && !p.wf ? NULL : param_f32(vm, name, p.b, &bc);
  if ((p.w && !p.wf) || (p.b && !p.bf)) {
    vm_free(vm, wc, sizeof(float) * (size_t)p.D);
    return vm->status;
  }
  vm_parallel_for(vm, p.rows, grain, f32_contig(x) ? norm_rows_f32 : norm_rows_staged, &p);
  vm_free(vm, wc, sizeof(float) * (size_t)p.D);
  vm_free(vm, bc, sizeof(float) * (size_t)p.D);
  return GRACE_OK;
}
