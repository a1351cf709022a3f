/* cpu_create.c: ops that make a tensor from attributes alone: full, arange, linspace, eye, and the
 * random ops, which draw element i of the VM's k-th random op from Philox counter (i, k). */
#include <math.h>
#include "cpu/cpu_kernels.h"
#include "ir/ir_check.h"

/* randint draws low + (u mod span) in unsigned arithmetic: the span of [INT64_MIN, INT64_MAX) is past int64 */
typedef struct { grace_tensor *t; uint64_t seed, offset; grace_op op; int64_t low; uint64_t span; } rand_job;

static void rand_range(void *ctx, int64_t b, int64_t e) {
  rand_job *j = ctx;
  grace_dtype dt = j->t->dtype;
  size_t es = grace_dtype_size(dt);
  char *p = vm_ptr(j->t);
  for (int64_t i = b; i < e; i++) {
    uint32_t r[4];
    vm_philox(j->seed, j->offset, (uint64_t)i, r);
    if (j->op == GRACE_OP_RANDINT) {
      uint64_t u = ((uint64_t)r[1] << 32) | r[0];
      vm_store_i64(dt, p + i * es, (int64_t)((uint64_t)j->low + u % j->span));
    } else if (j->op == GRACE_OP_RAND) {
      /* as many random bits as the dtype's significand holds, so rounding never reaches 1.0 */
      double v = dt == GRACE_FLOAT64 ? (double)((((uint64_t)r[0] << 32) | r[1]) >> 11) * 0x1p-53
                 : dt == GRACE_FLOAT16 ? (double)(r[0] >> 21) * 0x1p-11
                 : dt == GRACE_BFLOAT16 ? (double)(r[0] >> 24) * 0x1p-8
                                        : (double)(r[0] >> 8) * 0x1p-24;
      vm_store_f64(dt, p + i * es, v);
    } else {  /* RANDN: Box-Muller on two uniforms, u1 in (0, 1] */
      double u1 = ((double)r[0] + 1.0) * 0x1p-32, u2 = (double)r[1] * 0x1p-32;
      vm_store_f64(dt, p + i * es, sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
  }
}

grace_status cpu_create_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                            int nout, grace_tensor **out) {
  const char *name = grace_op_name(op);
  grace_dtype dt;
  int nd;
  int64_t shape[GRACE_MAX_DIMS];
  grace_status cs = vm_create_shape(vm, op, a, &dt, &nd, shape);
  if (cs != GRACE_OK) return cs;
  grace_tensor *t = vm_tensor_new(vm, name, dt, GRACE_CPU, nd, shape);
  if (!t) return vm->status;
  int64_t n = vm_numel(nd, shape);
  size_t es = grace_dtype_size(dt);
  char *p = vm_ptr(t);
  switch (op) {
  case GRACE_OP_FULL: {
    char v[8];
    if (grace_dtype_is_int(dt) && ((a->exact & 1) || a->a == floor(a->a))) vm_store_i64(dt, v, vm_attr_int(a, 0));
    else vm_store_f64(dt, v, a->a);
    for (int64_t i = 0; i < n; i++) memcpy(p + i * es, v, es);
    break;
  }
  case GRACE_OP_ARANGE:
    if ((a->exact & 7) == 7 && grace_dtype_is_int(dt))
      for (int64_t i = 0; i < n; i++) vm_store_i64(dt, p + i * es, a->ia + i * a->ic);
    else
      for (int64_t i = 0; i < n; i++) vm_store_f64(dt, p + i * es, a->a + (double)i * a->c);
    break;
  case GRACE_OP_LINSPACE: {
    /* symmetric from both ends, so the last value is exactly `end` */
    double step = n > 1 ? (a->b - a->a) / (double)(n - 1) : 0;
    for (int64_t i = 0; i < n; i++)
      vm_store_f64(dt, p + i * es, n == 1 ? a->a : i < n / 2 ? a->a + step * (double)i : a->b - step * (double)(n - 1 - i));
    break;
  }
  case GRACE_OP_EYE:
    memset(p, 0, (size_t)n * es);
    for (int64_t i = 0; i < shape[0] && i < shape[1]; i++) vm_store_f64(dt, p + (i * shape[1] + i) * (int64_t)es, 1);
    break;
  case GRACE_OP_RAND: case GRACE_OP_RANDN: case GRACE_OP_RANDINT: {
    rand_job j = {t, vm->seed, vm->rng_offset++, op, a->i0, (uint64_t)a->i1 - (uint64_t)a->i0};
    vm_parallel_for(vm, n, 1 << 14, rand_range, &j);
    break;
  }
  default:
    grace_tensor_release(t);
    return vm_err(vm, GRACE_EINTERNAL, "%s: not a creation op", name);
  }
  out[0] = t;
  return GRACE_OK;
}
