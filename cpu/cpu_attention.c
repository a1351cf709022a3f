/* cpu_attention.c: the attention op on the CPU (include/grace_ops.h): per query row, the scores against every
 * key, the softmax and the product with v, in one pass over the keys without a scores tensor. The keys go in
 * blocks of ATTN_BLOCK with a running maximum (the softmax of the keys seen so far is rescaled when a larger
 * score arrives), so a row needs two small stack buffers whatever the sequence length. Sums in double, except
 * on the common float32 layout (keys and values contiguous along their feature dim), which runs in float with
 * loops that vectorize. */
#include <math.h>
#include <string.h>
#include "cpu/cpu_kernels.h"
#include "ir/ir_check.h"

enum { ATTN_BLOCK = 256, ATTN_FAST_D = 1024 };

typedef struct attn_ctx {
  const vm_attn *p;
  const char *q, *k, *v, *m;
  char *o;
  grace_dtype dt, odt;
  size_t es, oes;
  double scale, fill;
  int has_scale, div, keep;
} attn_ctx;

static inline double ld(const attn_ctx *c, const char *base, int64_t off) {
  return c->dt == GRACE_FLOAT32 ? ((const float *)base)[off] : vm_load_f64(c->dt, base + off * (int64_t)c->es);
}

/* The offsets of row's query, its keys, values and mask row in their operands. */
static void row_offsets(const vm_attn *p, int64_t row, int64_t *qo, int64_t *ko, int64_t *vo, int64_t *mo) {
  int64_t b = row / p->M, i = row % p->M;
  *qo = i * p->qm; *ko = 0; *vo = 0; *mo = i * p->mm;
  for (int d = p->nb - 1; d >= 0; d--) {
    int64_t x = b % p->bsize[d];
    b /= p->bsize[d];
    *qo += x * p->qb[d]; *ko += x * p->kb[d]; *vo += x * p->vb[d]; *mo += x * p->mb[d];
  }
}

static inline float dot_f32(const float *a, const float *b, int64_t n) {
  float s[8] = {0};   /* eight partial sums: the loop vectorizes without reassociating one sum */
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int t = 0; t < 8; t++) s[t] += a[d + t] * b[d + t];
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; d < n; d++) r += a[d] * b[d];
  return r;
}

/* float32, keys and values contiguous along D and Dv, D and Dv at most ATTN_FAST_D */
static void attn_rows_f32(void *ctx, int64_t begin, int64_t end) {
  const attn_ctx *c = ctx;
  const vm_attn *p = c->p;
  const float *q = (const float *)c->q, *k = (const float *)c->k, *v = (const float *)c->v;
  float qb[ATTN_FAST_D], acc[ATTN_FAST_D], s[ATTN_BLOCK];
  for (int64_t row = begin; row < end; row++) {
    int64_t qo, ko, vo, mo;
    row_offsets(p, row, &qo, &ko, &vo, &mo);
    for (int64_t d = 0; d < p->D; d++) qb[d] = q[qo + d * p->qd];
    for (int64_t t = 0; t < p->Dv; t++) acc[t] = 0;
    float mx = -INFINITY, l = 0;
    for (int64_t j0 = 0; j0 < p->N; j0 += ATTN_BLOCK) {
      int64_t nj = p->N - j0 < ATTN_BLOCK ? p->N - j0 : ATTN_BLOCK;
      float bm = -INFINITY;
      for (int64_t jj = 0; jj < nj; jj++) {
        int64_t j = j0 + jj;
        float dot = dot_f32(qb, k + ko + j * p->kn, p->D);
        if (c->has_scale) dot = c->div ? (float)(dot / c->scale) : (float)(dot * c->scale);
        if (c->m) {
          int on = c->m[mo + j * p->mn] != 0;
          if (c->keep ? !on : on) dot = (float)c->fill;
        }
        s[jj] = dot;
        if (dot > bm || dot != dot) bm = dot;
      }
      if (bm == -INFINITY) continue;
      float nm = bm > mx || bm != bm ? bm : mx, r = expf(mx - nm);
      l *= r;
      for (int64_t t = 0; t < p->Dv; t++) acc[t] *= r;
      for (int64_t jj = 0; jj < nj; jj++) {
        float e = expf(s[jj] - nm);
        l += e;
        const float *vr = v + vo + (j0 + jj) * p->vn;
        for (int64_t t = 0; t < p->Dv; t++) acc[t] += e * vr[t];
      }
      mx = nm;
    }
    float *out = (float *)c->o + row * p->Dv;
    for (int64_t t = 0; t < p->Dv; t++) out[t] = acc[t] / l;
  }
}

static void attn_rows(void *ctx, int64_t begin, int64_t end) {
  const attn_ctx *c = ctx;
  const vm_attn *p = c->p;
  double s[ATTN_BLOCK], acc[ATTN_BLOCK];
  for (int64_t row = begin; row < end; row++) {
    int64_t qo, ko, vo, mo;
    row_offsets(p, row, &qo, &ko, &vo, &mo);
    for (int64_t d0 = 0; d0 < p->Dv; d0 += ATTN_BLOCK) {   /* the output in chunks (scores again per chunk) */
      int64_t nd = p->Dv - d0 < ATTN_BLOCK ? p->Dv - d0 : ATTN_BLOCK;
      double mx = -INFINITY, l = 0;
      for (int64_t t = 0; t < nd; t++) acc[t] = 0;
      for (int64_t j0 = 0; j0 < p->N; j0 += ATTN_BLOCK) {
        int64_t nj = p->N - j0 < ATTN_BLOCK ? p->N - j0 : ATTN_BLOCK;
        double bm = -INFINITY;
        for (int64_t jj = 0; jj < nj; jj++) {
          int64_t j = j0 + jj;
          double dot = 0;
          for (int64_t d = 0; d < p->D; d++) dot += ld(c, c->q, qo + d * p->qd) * ld(c, c->k, ko + d * p->kd + j * p->kn);
          if (c->has_scale) dot = c->div ? dot / c->scale : dot * c->scale;
          if (c->m) {
            int on = c->m[mo + j * p->mn] != 0;
            if (c->keep ? !on : on) dot = c->fill;
          }
          s[jj] = dot;
          if (dot > bm || dot != dot) bm = dot;
        }
        if (bm == -INFINITY) continue;   /* every key of the block masked: nothing to add */
        double nm = bm > mx || bm != bm ? bm : mx, r = exp(mx - nm);
        l *= r;
        for (int64_t t = 0; t < nd; t++) acc[t] *= r;
        for (int64_t jj = 0; jj < nj; jj++) {
          double e = exp(s[jj] - nm);
          l += e;
          int64_t vj = vo + (j0 + jj) * p->vn + d0 * p->vd;
          for (int64_t t = 0; t < nd; t++) acc[t] += e * ld(c, c->v, vj + t * p->vd);
        }
        mx = nm;
      }
      /* a row with every key masked is 0 / 0 (NaN), as softmax over a row of -inf gives */
      char *out = c->o + (row * p->Dv + d0) * (int64_t)c->oes;
      for (int64_t t = 0; t < nd; t++) vm_store_f64(c->odt, out + t * (int64_t)c->oes, acc[t] / l);
    }
  }
}

grace_status cpu_attention_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                               int nout, grace_tensor **out) {
  vm_attn p;
  grace_status st = vm_check_attention(vm, in, a, &p);
  if (st != GRACE_OK) return st;
  if (!(out[0] = vm_tensor_new(vm, "attention", p.odt, GRACE_CPU, p.ndim, p.osizes))) return vm->status;
  if (p.rows == 0 || p.Dv == 0) return GRACE_OK;
  if (p.N == 0) {   /* no keys: the product of empty rows */
    memset(vm_ptr(out[0]), 0, (size_t)(p.rows * p.Dv) * grace_dtype_size(p.odt));
    return GRACE_OK;
  }
  attn_ctx c = {.p = &p, .q = vm_ptr(in[0]), .k = vm_ptr(in[1]), .v = vm_ptr(in[2]), .m = in[4] ? vm_ptr(in[4]) : NULL,
                .o = vm_ptr(out[0]), .dt = in[0]->dtype, .odt = p.odt, .es = grace_dtype_size(in[0]->dtype),
                .oes = grace_dtype_size(p.odt), .fill = a->a, .has_scale = in[3] != NULL,
                .div = (a->flag & GRACE_ATTN_DIV) != 0, .keep = (a->flag & GRACE_ATTN_KEEP) != 0};
  if (in[3]) c.scale = vm_load_f64(in[3]->dtype, vm_ptr(in[3]));
  int64_t work = p.N * (p.D + p.Dv) + 1;
  int fast = c.dt == GRACE_FLOAT32 && c.odt == GRACE_FLOAT32 && (p.kd == 1 || p.D == 1) && (p.vd == 1 || p.Dv == 1) &&
             p.D <= ATTN_FAST_D && p.Dv <= ATTN_FAST_D;
  vm_parallel_for(vm, p.rows, 262144 / work + 1, fast ? attn_rows_f32 : attn_rows, &c);
  return GRACE_OK;
}
