/* cpu_reduce.h: what the reduction files share: the SCAN and NORM entry points (cpu_reduce_scan.c,
 * cpu_reduce_norm.c) that cpu_reduce_run dispatches to, and small row-addressing helpers. */
#ifndef GRACE_CPU_REDUCE_H
#define GRACE_CPU_REDUCE_H

#include "cpu/cpu_kernels.h"

/* CUMSUM, SOFTMAX, LOG_SOFTMAX, TOPK, SORT */
grace_status cpu_scan_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                          int nout, grace_tensor **out);
/* LAYER_NORM, RMS_NORM */
grace_status cpu_norm_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                          int nout, grace_tensor **out);

/* Element offset of row r of a tensor whose rows run along `skip`: r is decomposed row-major over the other
 * dims. Rows are long compared to the few divisions this costs. */
static inline int64_t rr_row_offset(int ndim, const int64_t *sizes, const int64_t *strides, int skip, int64_t r) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; d--) {
    if (d == skip) continue;
    off += (r % sizes[d]) * strides[d];
    r /= sizes[d];
  }
  return off;
}

/* Rows up to this long are staged in float32 stack buffers by the general softmax/norm paths. */
#define RR_STAGE 4096

/* n elements of dtype dt at src (stride in elements) as float32; the dtype switch sits outside the loops. */
static inline void rr_load_f32(grace_dtype dt, const char *src, int64_t stride, int64_t n, float *dst) {
  int64_t step = stride * (int64_t)grace_dtype_size(dt);
  switch (dt) {
  case GRACE_FLOAT32: for (int64_t i = 0; i < n; i++) dst[i] = *(const float *)(src + i * step); break;
  case GRACE_FLOAT16: for (int64_t i = 0; i < n; i++) dst[i] = vm_half_to_float(*(const uint16_t *)(src + i * step)); break;
  case GRACE_BFLOAT16: for (int64_t i = 0; i < n; i++) dst[i] = vm_bf16_to_float(*(const uint16_t *)(src + i * step)); break;
  default: for (int64_t i = 0; i < n; i++) dst[i] = (float)vm_load_f64(dt, src + i * step); break;
  }
}
static inline void rr_store_f32(grace_dtype dt, const float *src, char *dst, int64_t stride, int64_t n) {
  int64_t step = stride * (int64_t)grace_dtype_size(dt);
  switch (dt) {
  case GRACE_FLOAT32: for (int64_t i = 0; i < n; i++) *(float *)(dst + i * step) = src[i]; break;
  case GRACE_FLOAT16: for (int64_t i = 0; i < n; i++) *(uint16_t *)(dst + i * step) = vm_float_to_half(src[i]); break;
  case GRACE_BFLOAT16: for (int64_t i = 0; i < n; i++) *(uint16_t *)(dst + i * step) = vm_float_to_bf16(src[i]); break;
  default: for (int64_t i = 0; i < n; i++) vm_store_f64(dt, dst + i * step, src[i]); break;
  }
}

#endif
