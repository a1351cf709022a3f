/* cpu_reduce_scan.c: the CPU backend's row ops over one dim: cumsum, softmax, log_softmax, topk and sort.
 * Rows are independent and split across threads. Softmax has a float32 fast path for contiguous last-dim
 * rows (vectorized max, exp, sum, scale) that also serves other float dtypes and strided rows by staging
 * them through float32 buffers, and a column-tile path for non-last dims; float64 and very long strided
 * rows go through a general path computing in double. Sort and topk order 64-bit keys that map every dtype's order (NaN largest) onto unsigned order,
 * so one stable merge sort serves all dtypes and both directions. */
#include <math.h>
#include "cpu/cpu_reduce.h"
#include "cpu/cpu_reduce_math.h"
#include "ir/ir.h"
#include "ir/ir_check.h"

/* Rows of x along `dim` and the matching rows of the (contiguous) outputs. */
typedef struct srow {
  grace_op op;
  grace_dtype dt, odt;
  size_t es, oes;
  int nd, dim, log, desc, index_base;   /* log: log_softmax; desc: sort/topk order largest first */
  int64_t sizes[GRACE_MAX_DIMS], xst[GRACE_MAX_DIMS], ost[GRACE_MAX_DIMS];
  int64_t L, k, rows, inner;
  const char *x;
  char *vals;
  int64_t *idxs;
  /* sort/topk: rows are handed out in `parts`, each with its own scratch */
  int64_t parts;
  struct kv *scratch;
} srow;

/* A 0-d input acts as one row of one element. */
static void srow_init(srow *r, const grace_tensor *x, int dim, const grace_tensor *o) {
  r->dt = x->dtype;
  r->es = grace_dtype_size(x->dtype);
  r->x = vm_ptr(x);
  r->dim = dim;
  if (x->ndim == 0) {
    r->nd = 1; r->sizes[0] = 1; r->xst[0] = 1; r->ost[0] = 1;
  } else {
    r->nd = x->ndim;
    for (int d = 0; d < x->ndim; d++) { r->sizes[d] = x->sizes[d]; r->xst[d] = x->strides[d]; }
    for (int d = 0; d < o->ndim; d++) r->ost[d] = o->strides[d];
  }
  r->L = r->sizes[dim];
  r->rows = r->L ? vm_numel(r->nd, r->sizes) / r->L : 0;
  if (r->L == 0) {   /* rows still exist (and are empty) when only the row dim is zero */
    r->rows = 1;
    for (int d = 0; d < r->nd; d++) if (d != dim) r->rows *= r->sizes[d];
  }
}
static const char *row_x(const srow *r, int64_t row) {
  return r->x + rr_row_offset(r->nd, r->sizes, r->xst, r->dim, row) * (int64_t)r->es;
}
static int64_t row_o(const srow *r, int64_t row) { return rr_row_offset(r->nd, r->sizes, r->ost, r->dim, row); }

/* ---- cumsum ---- */
static void cumsum_rows(void *ctx, int64_t b, int64_t e) {
  const srow *r = ctx;
  int64_t xs = r->xst[r->dim] * (int64_t)r->es, os = r->ost[r->dim] * (int64_t)r->oes;
  int int_out = vm_dtype_category(r->odt) != 2;
  for (int64_t row = b; row < e; row++) {
    const char *x = row_x(r, row);
    char *o = r->vals + row_o(r, row) * (int64_t)r->oes;
    if (int_out) {
      uint64_t acc = 0;   /* wraps like PyTorch's int64 arithmetic, without signed overflow */
      for (int64_t i = 0; i < r->L; i++) {
        acc += (uint64_t)vm_load_i64(r->dt, x + i * xs);
        vm_store_i64(r->odt, o + i * os, (int64_t)acc);
      }
    } else {
      double acc = 0;
      for (int64_t i = 0; i < r->L; i++) {
        acc += vm_load_f64(r->dt, x + i * xs);
        vm_store_f64(r->odt, o + i * os, acc);
      }
    }
  }
}

/* ---- softmax / log_softmax ---- */
/* One contiguous float32 row: max, exp into y, sum, then scale (or shift, for log_softmax). */
static inline void softmax_row_f32(const float *x, float *y, int64_t L, int logp) {
  float m = rm_best_f32(x, L, 1);
  for (int64_t i = 0; i < L; i++) y[i] = rm_expf(x[i] - m);
  double s = rm_sum_f32(y, L);
  if (logp) {
    float ls = (float)log(s);
    for (int64_t i = 0; i < L; i++) y[i] = (x[i] - m) - ls;
  } else {
    float inv = (float)(1.0 / s);
    for (int64_t i = 0; i < L; i++) y[i] *= inv;
  }
}

RM_CLONES static void softmax_rows_f32(void *ctx, int64_t b, int64_t e) {
  const srow *r = ctx;
  for (int64_t row = b; row < e; row++)
    softmax_row_f32((const float *)row_x(r, row), (float *)r->vals + row_o(r, row), r->L, r->log);
}

/* Other float dtypes and strided rows: staged through float32 buffers into the same row kernel. */
RM_CLONES static void softmax_rows_staged(void *ctx, int64_t b, int64_t e) {
  const srow *r = ctx;
  float xb[RR_STAGE], yb[RR_STAGE];
  for (int64_t row = b; row < e; row++) {
    rr_load_f32(r->dt, row_x(r, row), r->xst[r->dim], r->L, xb);
    softmax_row_f32(xb, yb, r->L, r->log);
    rr_store_f32(r->odt, yb, r->vals + row_o(r, row) * (int64_t)r->oes, r->ost[r->dim], r->L);
  }
}

/* Softmax over a non-last dim of a contiguous float32 tensor, seen as [outer, L, inner]: tiles of SCOLS
 * neighbouring columns are processed together so every pass reads contiguous row segments. */
#define SCOLS 256
RM_CLONES static void softmax_cols_f32(void *ctx, int64_t b, int64_t e) {
  const srow *r = ctx;
  int64_t L = r->L, inner = r->inner, ntiles = (inner + SCOLS - 1) / SCOLS;
  float m[SCOLS], c[SCOLS];
  double s[SCOLS];
  for (int64_t t = b; t < e; t++) {
    int64_t j0 = (t % ntiles) * SCOLS, w = inner - j0 < SCOLS ? inner - j0 : SCOLS;
    int64_t off = (t / ntiles) * L * inner + j0;
    const float *x = (const float *)r->x + off;
    float *y = (float *)r->vals + off;
    /* a NaN need not stick in m: it makes its own exp NaN, hence the sum and the whole column */
    memcpy(m, x, sizeof(float) * (size_t)w);
    for (int64_t l = 1; l < L; l++)
      for (int64_t j = 0; j < w; j++) m[j] = x[l * inner + j] > m[j] ? x[l * inner + j] : m[j];
    for (int64_t j = 0; j < w; j++) s[j] = 0;
    for (int64_t l = 0; l < L; l++) {
      float *yl = y + l * inner;
      const float *xl = x + l * inner;
      for (int64_t j = 0; j < w; j++) yl[j] = rm_expf(xl[j] - m[j]);
      for (int64_t j = 0; j < w; j++) s[j] += yl[j];
    }
    if (r->log) {
      for (int64_t j = 0; j < w; j++) c[j] = (float)log(s[j]);
      for (int64_t l = 0; l < L; l++)
        for (int64_t j = 0; j < w; j++) y[l * inner + j] = (x[l * inner + j] - m[j]) - c[j];
    } else {
      for (int64_t j = 0; j < w; j++) c[j] = (float)(1.0 / s[j]);
      for (int64_t l = 0; l < L; l++)
        for (int64_t j = 0; j < w; j++) y[l * inner + j] *= c[j];
    }
  }
}

static void softmax_rows(void *ctx, int64_t b, int64_t e) {
  const srow *r = ctx;
  int64_t xs = r->xst[r->dim] * (int64_t)r->es, os = r->ost[r->dim] * (int64_t)r->oes;
  for (int64_t row = b; row < e; row++) {
    const char *x = row_x(r, row);
    char *o = r->vals + row_o(r, row) * (int64_t)r->oes;
    double m = -INFINITY;
    for (int64_t i = 0; i < r->L; i++) {
      double v = vm_load_f64(r->dt, x + i * xs);
      if (v > m || v != v) m = v;
      if (m != m) break;
    }
    double s = 0;
    for (int64_t i = 0; i < r->L; i++) s += exp(vm_load_f64(r->dt, x + i * xs) - m);
    double ls = log(s);
    for (int64_t i = 0; i < r->L; i++) {
      double d = vm_load_f64(r->dt, x + i * xs) - m;
      vm_store_f64(r->odt, o + i * os, r->log ? d - ls : exp(d) / s);
    }
  }
}

/* ---- sort / topk ---- */
typedef struct kv { uint64_t k; int64_t i; } kv;

/* Unsigned keys ordered as the values: floats by their bits with the sign folded (-0 taken as +0 so it ties
 * with +0, every NaN mapped to the top), integers with the sign bit flipped. */
static inline uint64_t sort_key(grace_dtype dt, int is_float, const char *p) {
  if (!is_float) return (uint64_t)vm_load_i64(dt, p) ^ 0x8000000000000000ull;
  double d = vm_load_f64(dt, p);
  if (d != d) return UINT64_MAX;
  if (d == 0) d = 0;
  uint64_t u;
  memcpy(&u, &d, 8);
  return (u >> 63) ? ~u : u | 0x8000000000000000ull;
}

/* Stable ascending merge sort of a[0..n) by key; tmp has room for n. */
static void kv_sort(kv *a, kv *tmp, int64_t n) {
  const int64_t run = 32;
  for (int64_t s = 0; s < n; s += run) {   /* insertion-sorted runs */
    int64_t e = s + run < n ? s + run : n;
    for (int64_t i = s + 1; i < e; i++) {
      kv v = a[i];
      int64_t j = i;
      while (j > s && a[j - 1].k > v.k) { a[j] = a[j - 1]; j--; }
      a[j] = v;
    }
  }
  kv *src = a, *dst = tmp;
  for (int64_t w = run; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, o = lo;
      while (i < mid && j < hi) dst[o++] = src[j].k < src[i].k ? src[j++] : src[i++];
      while (i < mid) dst[o++] = src[i++];
      while (j < hi) dst[o++] = src[j++];
    }
    kv *t = src; src = dst; dst = t;
  }
  if (src != a) memcpy(a, src, sizeof(kv) * (size_t)n);
}

/* Small k: keep the k best (smallest keys) in order while scanning; a later equal key never displaces an
 * earlier one, which keeps ties in index order as the full stable sort would. */
static int64_t small_k(int64_t k, int64_t L) { return k <= 32 && k * 16 <= L; }

static void sort_part(void *ctx, int64_t b, int64_t e) {
  const srow *r = ctx;
  int is_float = vm_dtype_category(r->dt) == 2;
  int64_t xs = r->xst[r->dim] * (int64_t)r->es, os = r->ost[r->dim];
  uint64_t flip = r->desc ? ~0ull : 0;   /* largest first: inverted keys sort ascending */
  int sel = small_k(r->k, r->L);
  for (int64_t part = b; part < e; part++) {
    kv *a = r->scratch + part * (sel ? r->k : 2 * r->L);
    int64_t r0 = r->rows * part / r->parts, r1 = r->rows * (part + 1) / r->parts;
    for (int64_t row = r0; row < r1; row++) {
      const char *x = row_x(r, row);
      if (sel) {
        int64_t cnt = 0;
        for (int64_t i = 0; i < r->L; i++) {
          uint64_t key = sort_key(r->dt, is_float, x + i * xs) ^ flip;
          if (cnt == r->k && key >= a[cnt - 1].k) continue;
          int64_t j = cnt < r->k ? cnt++ : cnt - 1;
          while (j > 0 && a[j - 1].k > key) { a[j] = a[j - 1]; j--; }
          a[j] = (kv){key, i};
        }
      } else {
        for (int64_t i = 0; i < r->L; i++) a[i] = (kv){sort_key(r->dt, is_float, x + i * xs) ^ flip, i};
        kv_sort(a, a + r->L, r->L);
      }
      int64_t o = row_o(r, row);
      for (int64_t j = 0; j < r->k; j++) {
        memcpy(r->vals + (o + j * os) * (int64_t)r->es, x + a[j].i * xs, r->es);
        if (r->idxs) r->idxs[o + j * os] = a[j].i + r->index_base;
      }
    }
  }
}

grace_status cpu_scan_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                          int nout, grace_tensor **out) {
  const char *name = grace_op_name(op);
  grace_tensor *x = in[0];
  ir_type ot[2];
  /* the checks and result types are ir_infer's (infer_scan), which the IR and the device share */
  grace_status s = vm_infer_tensors(vm, op, 1, &x, a, nout, ot);
  if (s != GRACE_OK) return s;
  int dim = x->ndim > 0 ? x->ndim - 1 : 0;
  if (a->ndims == 1) (void)vm_norm_dim(vm, name, a->dims[0], x->ndim, &dim);   /* checked above */

  srow r;
  memset(&r, 0, sizeof r);
  r.op = op;
  r.index_base = vm->index_base;
  r.odt = ot[0].dtype;
  r.oes = grace_dtype_size(r.odt);
  if (!(out[0] = vm_tensor_new(vm, name, r.odt, GRACE_CPU, ot[0].ndim, ot[0].sizes))) return vm->status;
  if (nout == 2 && !(out[1] = vm_tensor_new(vm, name, GRACE_INT64, GRACE_CPU, ot[0].ndim, ot[0].sizes))) return vm->status;
  srow_init(&r, x, dim, out[0]);
  r.vals = vm_ptr(out[0]);

  switch (op) {
  case GRACE_OP_CUMSUM: case GRACE_OP_SOFTMAX: case GRACE_OP_LOG_SOFTMAX: {
    r.log = op == GRACE_OP_LOG_SOFTMAX;
    int64_t grain = r.L > 0 ? 16384 / r.L + 1 : r.rows + 1;
    if (op == GRACE_OP_CUMSUM) vm_parallel_for(vm, r.rows, grain, cumsum_rows, &r);
    else if (r.dt == GRACE_FLOAT32 && r.odt == GRACE_FLOAT32 && dim == r.nd - 1 && r.xst[dim] == 1 && r.L > 0)
      vm_parallel_for(vm, r.rows, grain, softmax_rows_f32, &r);
    else if (r.dt == GRACE_FLOAT32 && r.odt == GRACE_FLOAT32 && dim < r.nd - 1 && vm_is_contiguous(x) && r.L > 0) {
      r.inner = 1;
      for (int d = dim + 1; d < r.nd; d++) r.inner *= r.sizes[d];
      int64_t ntiles = (r.inner + SCOLS - 1) / SCOLS, tasks = r.rows / r.inner * ntiles;
      vm_parallel_for(vm, tasks, 65536 / (r.L * SCOLS) + 1, softmax_cols_f32, &r);
    } else if (r.dt != GRACE_FLOAT64 && r.odt != GRACE_FLOAT64 && r.L > 0 && r.L <= RR_STAGE)
      vm_parallel_for(vm, r.rows, grain, softmax_rows_staged, &r);
    else if (r.L > 0) vm_parallel_for(vm, r.rows, grain, softmax_rows, &r);
    return GRACE_OK;
  }
  default: break;
  }

  /* topk, sort */
  if (x->ndim == 0) r.ost[0] = 1;
  r.k = op == GRACE_OP_TOPK ? a->i0 : r.L;
  r.idxs = nout == 2 ? (int64_t *)vm_ptr(out[1]) : NULL;
  r.desc = op == GRACE_OP_TOPK ? !a->flag : a->flag;
  if (r.rows == 0 || r.k == 0) return GRACE_OK;

  /* One scratch area per part, allocated here: the VM's allocator need not be thread-safe. */
  int64_t work = r.rows * r.L;
  r.parts = work >= 32768 && vm->threads > 1 ? vm->threads * 2 : 1;
  if (r.parts > r.rows) r.parts = r.rows;
  /* rows of an expanded view can be far longer than its storage: the scratch is data-sized, its size checked */
  size_t per = (size_t)(small_k(r.k, r.L) ? r.k : 2 * r.L);
  if (!(r.scratch = vm_alloc_data(vm, name, per, sizeof(kv) * (size_t)r.parts))) return vm->status;
  size_t bytes = per * sizeof(kv) * (size_t)r.parts;   /* did not overflow: checked by vm_alloc_data */
  vm_parallel_for(vm, r.parts, 1, sort_part, &r);
  vm_free(vm, r.scratch, bytes);
  return GRACE_OK;
}
