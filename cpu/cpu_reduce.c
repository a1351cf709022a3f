/* cpu_reduce.c: the CPU backend's reductions (sum, mean, prod, max/min and their indices, var/std, logsumexp,
 * all/any) and the entry point of the REDUCE, SCAN and NORM kinds.
 * A reduction is planned as kept dims (one output each) times a reduced region. The region is read in chunks
 * converted to an accumulation type (float, double or int64), so one set of kernels serves every dtype and
 * layout; a contiguous region already in that type is read in place. A long region with few outputs (a full
 * reduction) is cut into fixed-size blocks reduced in parallel and merged in order, so results do not depend
 * on the number of threads. When the innermost kept dim is contiguous (reducing leading dims), tiles of
 * neighbouring outputs are accumulated row by row instead ("vertical"), keeping reads sequential. */
#include <math.h>
#include "cpu/cpu_reduce.h"
#include "cpu/cpu_reduce_math.h"
#include "ir/ir.h"
#include "ir/ir_check.h"

enum { ACC_F, ACC_D, ACC_I };   /* float (float32/16/bf16), double (float64), int64 (integers and bool) */
#define RCH 1024                /* elements converted per chunk */
#define RBLOCK 65536            /* block of a split region */

/* Partial result of one output (or of one block of it). */
typedef struct rstate {
  double s;        /* sum, product, or sum of exp */
  double m;        /* best value (max/min), max (logsumexp), mean (var) */
  double m2;       /* sum of squared deviations from m (var) */
  int64_t is, im;  /* integer sum or product; integer best */
  int64_t n, idx;  /* elements seen; position of the best */
  int b;           /* all/any result; whether a best is set */
} rstate;

typedef struct rplan {
  grace_op op;
  int acc, want_max, want_idx, unbiased, index_base;
  grace_dtype dt, odt;                          /* input, values output */
  size_t es, oes;
  const char *x;                                /* input element 0 */
  int ond, rnd;                                 /* kept dims (outputs), reduced dims (region) */
  int64_t osz[GRACE_MAX_DIMS], ost[GRACE_MAX_DIMS];
  int64_t rsz[GRACE_MAX_DIMS], rst[GRACE_MAX_DIMS];
  int64_t nout, nred, nblocks;
  char *vals;
  int64_t *idxs;                                /* NULL unless indices are wanted */
  rstate *states;                               /* nout * nblocks partials when split */
} rplan;

static int acc_for(grace_dtype dt) {
  return dt == GRACE_FLOAT64 ? ACC_D : vm_dtype_category(dt) == 2 ? ACC_F : ACC_I;
}
static grace_dtype acc_dtype(int acc) { return acc == ACC_F ? GRACE_FLOAT32 : acc == ACC_D ? GRACE_FLOAT64 : GRACE_INT64; }

/* n elements at src (stride in elements) converted to the accumulation type into dst. */
static void convert(int acc, grace_dtype dt, const char *src, int64_t stride, int64_t n, void *dst) {
  int64_t step = stride * (int64_t)grace_dtype_size(dt);
  if (acc == ACC_F) {
    float *o = dst;
    switch (dt) {
    case GRACE_FLOAT32: for (int64_t i = 0; i < n; i++) o[i] = *(const float *)(src + i * step); break;
    case GRACE_FLOAT16: for (int64_t i = 0; i < n; i++) o[i] = vm_half_to_float(*(const uint16_t *)(src + i * step)); break;
    case GRACE_BFLOAT16: for (int64_t i = 0; i < n; i++) o[i] = vm_bf16_to_float(*(const uint16_t *)(src + i * step)); break;
    default: for (int64_t i = 0; i < n; i++) o[i] = (float)vm_load_f64(dt, src + i * step); break;
    }
  } else if (acc == ACC_D) {
    double *o = dst;
    if (dt == GRACE_FLOAT64) for (int64_t i = 0; i < n; i++) o[i] = *(const double *)(src + i * step);
    else for (int64_t i = 0; i < n; i++) o[i] = vm_load_f64(dt, src + i * step);
  } else {
    int64_t *o = dst;
    switch (dt) {
    case GRACE_INT64: for (int64_t i = 0; i < n; i++) o[i] = *(const int64_t *)(src + i * step); break;
    case GRACE_INT32: for (int64_t i = 0; i < n; i++) o[i] = *(const int32_t *)(src + i * step); break;
    case GRACE_UINT8: for (int64_t i = 0; i < n; i++) o[i] = *(const uint8_t *)(src + i * step); break;
    case GRACE_BOOL: for (int64_t i = 0; i < n; i++) o[i] = *(const uint8_t *)(src + i * step) != 0; break;
    default: for (int64_t i = 0; i < n; i++) o[i] = vm_load_i64(dt, src + i * step); break;
    }
  }
}

/* ---- reading a region [pos, end) (flat row-major positions) in chunks ---- */
typedef struct citer {
  const rplan *p;
  const char *base;
  int64_t pos, end;
  int direct;
  int64_t idx[GRACE_MAX_DIMS];
  union { float f[RCH]; double d[RCH]; int64_t i[RCH]; } buf;
} citer;

static void citer_init(citer *it, const rplan *p, const char *base, int64_t b, int64_t e) {
  it->p = p; it->base = base; it->pos = b; it->end = e;
  it->direct = p->rnd == 1 && p->rst[0] == 1 && p->dt == acc_dtype(p->acc);
  if (it->direct) return;
  int64_t r = b;
  for (int d = p->rnd - 1; d >= 0; d--) { it->idx[d] = p->rsz[d] ? r % p->rsz[d] : 0; r = p->rsz[d] ? r / p->rsz[d] : 0; }
}

/* The next chunk as accumulation-type values; returns its length (0 at the end) and its first position. */
static int64_t citer_next(citer *it, const void **data, int64_t *pos) {
  const rplan *p = it->p;
  if (it->pos >= it->end) return 0;
  *pos = it->pos;
  if (it->direct) {
    int64_t n = it->end - it->pos;
    *data = it->base + it->pos * (int64_t)p->es;
    it->pos = it->end;
    return n;
  }
  int last = p->rnd - 1;
  int64_t n = 0;
  while (n < RCH && it->pos < it->end) {
    int64_t seg = p->rsz[last] - it->idx[last];
    if (seg > RCH - n) seg = RCH - n;
    if (seg > it->end - it->pos) seg = it->end - it->pos;
    const char *src = it->base + vm_offset(p->rnd, it->idx, p->rst) * (int64_t)p->es;
    convert(p->acc, p->dt, src, p->rst[last], seg, (char *)&it->buf + (size_t)n * (p->acc == ACC_F ? 4 : 8));
    n += seg;
    it->pos += seg;
    it->idx[last] += seg;
    for (int d = last; d > 0 && it->idx[d] == p->rsz[d]; d--) { it->idx[d] = 0; it->idx[d - 1]++; }
  }
  *data = &it->buf;
  return n;
}

/* ---- chunk kernels ---- */
static double chunk_sum(int acc, const void *x, int64_t n) {
  return acc == ACC_F ? rm_sum_f32(x, n) : rm_sum_f64(x, n);
}
static double chunk_sqdev(int acc, const void *x, int64_t n, double c) {
  return acc == ACC_F ? rm_sqdev_f32(x, n, (float)c) : rm_sqdev_f64(x, n, c);
}
static double chunk_best(int acc, const void *x, int64_t n, int want_max) {
  return acc == ACC_F ? rm_best_f32(x, n, want_max) : rm_best_f64(x, n, want_max);
}
static int64_t isum(const int64_t *x, int64_t n) {
  uint64_t a[4] = {0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; k++) a[k] += (uint64_t)x[i + k];
  for (; i < n; i++) a[0] += (uint64_t)x[i];
  return (int64_t)(a[0] + a[1] + a[2] + a[3]);
}
/* First position of v (or of a NaN when v is NaN) in x. */
static int64_t find_first(int acc, const void *x, int64_t n, double v) {
  if (acc == ACC_F) {
    const float *f = x;
    float fv = (float)v;
    for (int64_t i = 0; i < n; i++) if (f[i] == fv || (v != v && f[i] != f[i])) return i;
  } else {
    const double *d = x;
    for (int64_t i = 0; i < n; i++) if (d[i] == v || (v != v && d[i] != d[i])) return i;
  }
  return 0;
}
static double exp_sum(int acc, const void *x, int64_t n, double m) {
  if (acc == ACC_D) {
    const double *d = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += exp(d[i] - m);
    return s;
  }
  const float *f = x;
  float tmp[RCH], fm = (float)m;
  double s = 0;
  for (int64_t b = 0; b < n; b += RCH) {
    int64_t c = n - b < RCH ? n - b : RCH;
    for (int64_t i = 0; i < c; i++) tmp[i] = rm_expf(f[b + i] - fm);
    s += rm_sum_f32(tmp, c);
  }
  return s;
}

/* Max/min (with position) of a chunk folded into the state: NaN wins and the first occurrence is kept. */
static void best_chunk(const rplan *p, rstate *st, const void *x, int64_t n, int64_t pos) {
  int wm = p->want_max;
  if (p->acc == ACC_I) {
    const int64_t *v = x;
    int64_t m = v[0];
    if (wm) { for (int64_t i = 1; i < n; i++) m = v[i] > m ? v[i] : m; }
    else { for (int64_t i = 1; i < n; i++) m = v[i] < m ? v[i] : m; }
    if (st->b && (wm ? m <= st->im : m >= st->im)) return;
    st->b = 1;
    st->im = m;
    if (p->want_idx) { int64_t i = 0; while (v[i] != m) i++; st->idx = pos + i; }
    return;
  }
  if (st->b && isnan(st->m)) return;
  double m = chunk_best(p->acc, x, n, wm);
  if (st->b && !isnan(m) && (wm ? m <= st->m : m >= st->m)) return;
  st->b = 1;
  st->m = m;
  if (p->want_idx) st->idx = pos + find_first(p->acc, x, n, m);
}

static void state_init(const rplan *p, rstate *st, int64_t n) {
  memset(st, 0, sizeof *st);
  st->n = n;
  if (p->op == GRACE_OP_PROD) { st->s = 1; st->is = 1; }
  if (p->op == GRACE_OP_ALL) st->b = 1;
  if (p->op == GRACE_OP_LOGSUMEXP) st->m = -INFINITY;
}

/* Reduces positions [b, e) of the region starting at base into st. */
static void reduce_range(const rplan *p, const char *base, int64_t b, int64_t e, rstate *st) {
  citer it;
  const void *x;
  int64_t n, pos;
  state_init(p, st, e - b);
  switch (p->op) {
  case GRACE_OP_VAR: case GRACE_OP_STD: {   /* two passes: mean, then squared deviations from it */
    citer_init(&it, p, base, b, e);
    while ((n = citer_next(&it, &x, &pos))) st->s += chunk_sum(p->acc, x, n);
    st->m = st->n ? st->s / (double)st->n : 0;
    citer_init(&it, p, base, b, e);
    while ((n = citer_next(&it, &x, &pos))) st->m2 += chunk_sqdev(p->acc, x, n, st->m);
    return;
  }
  case GRACE_OP_LOGSUMEXP: {   /* two passes: max, then sum of exp(x - max) */
    citer_init(&it, p, base, b, e);
    while ((n = citer_next(&it, &x, &pos))) {
      double m = chunk_best(p->acc, x, n, 1);
      if (m > st->m || isnan(m)) st->m = m;
      if (isnan(m)) break;
    }
    if (!isfinite(st->m)) return;
    citer_init(&it, p, base, b, e);
    while ((n = citer_next(&it, &x, &pos))) st->s += exp_sum(p->acc, x, n, st->m);
    return;
  }
  default: break;
  }
  citer_init(&it, p, base, b, e);
  while ((n = citer_next(&it, &x, &pos))) {
    switch (p->op) {
    case GRACE_OP_SUM: case GRACE_OP_MEAN:
      if (p->acc == ACC_I) st->is = (int64_t)((uint64_t)st->is + (uint64_t)isum(x, n));
      else st->s += chunk_sum(p->acc, x, n);
      break;
    case GRACE_OP_PROD:
      if (p->acc == ACC_I) {
        const int64_t *v = x;
        uint64_t r = (uint64_t)st->is;
        for (int64_t i = 0; i < n; i++) r *= (uint64_t)v[i];
        st->is = (int64_t)r;
      } else if (p->acc == ACC_F) {
        const float *v = x;
        for (int64_t i = 0; i < n; i++) st->s *= v[i];
      } else {
        const double *v = x;
        for (int64_t i = 0; i < n; i++) st->s *= v[i];
      }
      break;
    case GRACE_OP_ALL: case GRACE_OP_ANY: {
      int want = p->op == GRACE_OP_ANY, found = 0;   /* looking for a nonzero (any) or a zero (all) */
      if (p->acc == ACC_F) { const float *v = x; for (int64_t i = 0; i < n && !found; i++) found = (v[i] != 0) == want; }
      else if (p->acc == ACC_D) { const double *v = x; for (int64_t i = 0; i < n && !found; i++) found = (v[i] != 0) == want; }
      else { const int64_t *v = x; for (int64_t i = 0; i < n && !found; i++) found = (v[i] != 0) == want; }
      if (found) { st->b = want; return; }
      break;
    }
    default:   /* max, min, argmax, argmin */
      best_chunk(p, st, x, n, pos);
      break;
    }
  }
}

/* Folds the state of the next block (b, later positions) into a. */
static void state_merge(const rplan *p, rstate *a, const rstate *b) {
  switch (p->op) {
  case GRACE_OP_SUM: case GRACE_OP_MEAN:
    a->s += b->s;
    a->is = (int64_t)((uint64_t)a->is + (uint64_t)b->is);
    break;
  case GRACE_OP_PROD:
    a->s *= b->s;
    a->is = (int64_t)((uint64_t)a->is * (uint64_t)b->is);
    break;
  case GRACE_OP_ALL: a->b = a->b && b->b; break;
  case GRACE_OP_ANY: a->b = a->b || b->b; break;
  case GRACE_OP_VAR: case GRACE_OP_STD: {   /* Chan et al.'s pairwise update */
    int64_t n = a->n + b->n;
    if (b->n == 0) break;
    if (a->n == 0) { *a = *b; break; }
    double delta = b->m - a->m;
    a->m += delta * (double)b->n / (double)n;
    a->m2 += b->m2 + delta * delta * (double)a->n * (double)b->n / (double)n;
    a->n = n;
    break;
  }
  case GRACE_OP_LOGSUMEXP: {
    if (isnan(a->m) || b->m == -INFINITY) break;
    if (isnan(b->m) || a->m == -INFINITY) { *a = *b; break; }
    double m = a->m > b->m ? a->m : b->m;
    if (isinf(m)) { a->m = m; break; }
    a->s = a->s * exp(a->m - m) + b->s * exp(b->m - m);
    a->m = m;
    break;
  }
  default: {   /* max, min, argmax, argmin: later blocks win only when strictly better */
    if (!b->b) break;
    if (!a->b) { *a = *b; break; }
    int wm = p->want_max;
    if (p->acc == ACC_I) {
      if (wm ? b->im > a->im : b->im < a->im) { a->im = b->im; a->idx = b->idx; }
    } else if (!isnan(a->m) && (isnan(b->m) || (wm ? b->m > a->m : b->m < a->m))) {
      a->m = b->m; a->idx = b->idx;
    }
    break;
  }
  }
}

static void finalize(const rplan *p, const rstate *st, int64_t o) {
  char *dst = p->vals + o * (int64_t)p->oes;
  switch (p->op) {
  case GRACE_OP_SUM: case GRACE_OP_PROD:
    if (p->acc == ACC_I) vm_store_i64(p->odt, dst, st->is);
    else vm_store_f64(p->odt, dst, st->s);
    break;
  case GRACE_OP_MEAN: vm_store_f64(p->odt, dst, st->s / (double)p->nred); break;
  case GRACE_OP_VAR: case GRACE_OP_STD: {
    double v = st->n == 0 ? NAN : st->m2 / (double)(st->n - p->unbiased);
    vm_store_f64(p->odt, dst, p->op == GRACE_OP_STD ? sqrt(v) : v);
    break;
  }
  case GRACE_OP_LOGSUMEXP:
    vm_store_f64(p->odt, dst, isnan(st->m) || isinf(st->m) ? st->m : st->m + log(st->s));
    break;
  case GRACE_OP_ALL: case GRACE_OP_ANY: *(uint8_t *)dst = (uint8_t)st->b; break;
  case GRACE_OP_ARGMAX: case GRACE_OP_ARGMIN: *(int64_t *)dst = st->idx + p->index_base; break;
  default:   /* max, min */
    if (p->acc == ACC_I) vm_store_i64(p->odt, dst, st->im);
    else vm_store_f64(p->odt, dst, st->m);
    if (p->idxs) p->idxs[o] = st->idx + p->index_base;
    break;
  }
}

static const char *out_base(const rplan *p, int64_t o) {
  int64_t off = 0;
  for (int d = p->ond - 1; d >= 0; d--) { off += (o % p->osz[d]) * p->ost[d]; o /= p->osz[d]; }
  return p->x + off * (int64_t)p->es;
}

static void run_outputs(void *ctx, int64_t b, int64_t e) {
  const rplan *p = ctx;
  rstate st;
  for (int64_t o = b; o < e; o++) {
    reduce_range(p, out_base(p, o), 0, p->nred, &st);
    finalize(p, &st, o);
  }
}

static void run_blocks(void *ctx, int64_t b, int64_t e) {
  const rplan *p = ctx;
  for (int64_t t = b; t < e; t++) {
    int64_t o = t / p->nblocks, blk = t % p->nblocks;
    int64_t lo = blk * RBLOCK, hi = lo + RBLOCK < p->nred ? lo + RBLOCK : p->nred;
    reduce_range(p, out_base(p, o), lo, hi, &p->states[t]);
  }
}

/* ---- vertical reductions: the innermost kept dim is contiguous (sum over dim 0 of a row-major matrix).
 * Instead of walking each output's strided region, a tile of VT neighbouring outputs is updated from each
 * contiguous input row segment, which keeps the accesses sequential and the inner loop vectorized. */
#define VT 256
#define VFLUSH 256   /* float column sums go into double every VFLUSH rows (accuracy, as RM_SPAN) */

static int vertical_ok(const rplan *p) {
  switch (p->op) {
  case GRACE_OP_SUM: case GRACE_OP_MEAN: case GRACE_OP_MAX: case GRACE_OP_MIN: case GRACE_OP_ARGMAX: case GRACE_OP_ARGMIN:
    break;
  default: return 0;
  }
  return p->ond >= 1 && p->ost[p->ond - 1] == 1 && p->osz[p->ond - 1] >= 8 && p->nred > 0 && p->nred < INT32_MAX;
}

static void vertical_tile(const rplan *p, const char *base, int64_t w, int64_t o0) {
  float fa[VT];
  double da[VT];
  int64_t ia[VT];
  int32_t ix[VT];
  union { float f[VT]; double d[VT]; int64_t i[VT]; } buf;
  int is_sum = p->op == GRACE_OP_SUM || p->op == GRACE_OP_MEAN, wm = p->want_max;
  int64_t idx[GRACE_MAX_DIMS] = {0};
  for (int64_t j = 0; j < w; j++) { fa[j] = 0; da[j] = 0; ia[j] = 0; ix[j] = 0; }
  for (int64_t pos = 0; pos < p->nred; pos++) {
    const char *src = base + vm_offset(p->rnd, idx, p->rst) * (int64_t)p->es;
    const void *v = src;
    if (p->dt != acc_dtype(p->acc)) { convert(p->acc, p->dt, src, 1, w, &buf); v = &buf; }
    if (p->acc == ACC_F) {
      const float *x = v;
      if (is_sum) {
        for (int64_t j = 0; j < w; j++) fa[j] += x[j];
        if (pos % VFLUSH == VFLUSH - 1)
          for (int64_t j = 0; j < w; j++) { da[j] += fa[j]; fa[j] = 0; }
      } else if (pos == 0) {
        memcpy(fa, x, sizeof(float) * (size_t)w);
      } else {   /* take x where it beats the best, or where it is the first NaN */
        int64_t j = 0;
        rm_v4i pv = {(int32_t)pos, (int32_t)pos, (int32_t)pos, (int32_t)pos};
        for (; j + 4 <= w; j += 4) {
          rm_v4f xv, av;
          rm_v4i iv;
          memcpy(&xv, x + j, sizeof xv);
          memcpy(&av, fa + j, sizeof av);
          memcpy(&iv, ix + j, sizeof iv);
          rm_v4i take = (wm ? xv > av : xv < av) | ((xv != xv) & (av == av));
          av = (rm_v4f)(((rm_v4i)xv & take) | ((rm_v4i)av & ~take));
          iv = (pv & take) | (iv & ~take);
          memcpy(fa + j, &av, sizeof av);
          memcpy(ix + j, &iv, sizeof iv);
        }
        for (; j < w; j++) {
          float xj = x[j], aj = fa[j];
          if ((wm ? xj > aj : xj < aj) || (xj != xj && aj == aj)) { fa[j] = xj; ix[j] = (int32_t)pos; }
        }
      }
    } else if (p->acc == ACC_D) {
      const double *x = v;
      if (is_sum) for (int64_t j = 0; j < w; j++) da[j] += x[j];
      else if (pos == 0) memcpy(da, x, sizeof(double) * (size_t)w);
      else
        for (int64_t j = 0; j < w; j++) {
          double xj = x[j], aj = da[j];
          if ((wm ? xj > aj : xj < aj) || (xj != xj && aj == aj)) { da[j] = xj; ix[j] = (int32_t)pos; }
        }
    } else {
      const int64_t *x = v;
      if (is_sum) for (int64_t j = 0; j < w; j++) ia[j] = (int64_t)((uint64_t)ia[j] + (uint64_t)x[j]);
      else if (pos == 0) memcpy(ia, x, sizeof(int64_t) * (size_t)w);
      else
        for (int64_t j = 0; j < w; j++)
          if (wm ? x[j] > ia[j] : x[j] < ia[j]) { ia[j] = x[j]; ix[j] = (int32_t)pos; }
    }
    for (int d = p->rnd - 1; d >= 0; d--) {
      if (++idx[d] < p->rsz[d]) break;
      idx[d] = 0;
    }
  }
  for (int64_t j = 0; j < w; j++) {
    rstate st;
    memset(&st, 0, sizeof st);
    st.n = p->nred;
    st.b = 1;
    st.s = da[j] + fa[j];
    st.is = st.im = ia[j];
    st.m = p->acc == ACC_F ? fa[j] : da[j];
    st.idx = ix[j];
    finalize(p, &st, o0 + j);
  }
}

static void run_vertical(void *ctx, int64_t b, int64_t e) {
  const rplan *p = ctx;
  int64_t C = p->osz[p->ond - 1], ntiles = (C + VT - 1) / VT;
  for (int64_t t = b; t < e; t++) {
    int64_t j0 = (t % ntiles) * VT, o0 = (t / ntiles) * C + j0;
    vertical_tile(p, out_base(p, o0), C - j0 < VT ? C - j0 : VT, o0);
  }
}

/* Dims to (size, stride) lists, size-1 dims dropped, neighbours that address like one dim merged. */
static int collect_dims(const grace_tensor *x, const int *mask, int want, int64_t *sz, int64_t *st) {
  int n = 0;
  for (int d = 0; d < x->ndim; d++) {
    if (mask[d] != want || x->sizes[d] == 1) continue;
    sz[n] = x->sizes[d];
    st[n] = x->strides[d];
    n++;
  }
  return n;
}
static int merge_dims(int n, int64_t *sz, int64_t *st) {
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (m > 0 && st[m - 1] == sz[i] * st[i]) { sz[m - 1] *= sz[i]; st[m - 1] = st[i]; continue; }
    sz[m] = sz[i]; st[m] = st[i]; m++;
  }
  return m;
}

static grace_status reduce_run(grace_vm *vm, grace_op op, grace_tensor *x, const grace_attrs *a, int nout,
                               grace_tensor **out) {
  const char *name = grace_op_name(op);
  int nd = x->ndim, mask[GRACE_MAX_DIMS] = {0};
  ir_type ot[2];
  /* the checks and result types are ir_infer's (infer_reduce), which the IR and the device share */
  grace_status s = vm_infer_tensors(vm, op, 1, &x, a, nout, ot);
  if (s != GRACE_OK) return s;
  for (int i = 0; i < a->ndims; i++) {
    int d = 0;
    (void)vm_norm_dim(vm, name, a->dims[i], nd, &d);   /* checked above */
    if (nd) mask[d] = 1;
  }
  if (a->ndims == 0) for (int d = 0; d < nd; d++) mask[d] = 1;

  int is_best = op == GRACE_OP_MAX || op == GRACE_OP_MIN || op == GRACE_OP_ARGMAX || op == GRACE_OP_ARGMIN;
  int is_arg = op == GRACE_OP_ARGMAX || op == GRACE_OP_ARGMIN;
  grace_dtype odt = ot[0].dtype;

  rplan p;
  memset(&p, 0, sizeof p);
  p.op = op;
  p.dt = x->dtype;
  p.odt = odt;
  p.es = grace_dtype_size(x->dtype);
  p.oes = grace_dtype_size(odt);
  p.acc = is_best || op == GRACE_OP_ALL || op == GRACE_OP_ANY || op == GRACE_OP_VAR || op == GRACE_OP_STD
              ? acc_for(x->dtype) : acc_for(odt);
  p.want_max = op == GRACE_OP_MAX || op == GRACE_OP_ARGMAX;
  p.want_idx = is_arg || nout == 2;
  p.unbiased = a->flag != 0;
  p.index_base = vm->index_base;
  p.x = vm_ptr(x);
  p.nred = 1;
  p.nout = 1;
  for (int d = 0; d < nd; d++) {
    if (mask[d]) p.nred *= x->sizes[d];
    else p.nout *= x->sizes[d];
  }
  p.ond = merge_dims(collect_dims(x, mask, 0, p.osz, p.ost), p.osz, p.ost);
  int n = collect_dims(x, mask, 1, p.rsz, p.rst);
  if (!p.want_idx) {   /* order does not matter: walk the region with the smallest stride innermost */
    for (int i = 1; i < n; i++)
      for (int j = i; j > 0 && p.rst[j - 1] < p.rst[j]; j--) {
        int64_t t = p.rst[j]; p.rst[j] = p.rst[j - 1]; p.rst[j - 1] = t;
        t = p.rsz[j]; p.rsz[j] = p.rsz[j - 1]; p.rsz[j - 1] = t;
      }
  }
  p.rnd = merge_dims(n, p.rsz, p.rst);
  if (p.rnd == 0) { p.rnd = 1; p.rsz[0] = 1; p.rst[0] = 1; }
  if (p.nred == 0) { p.rnd = 1; p.rsz[0] = 0; p.rst[0] = 1; }

  out[0] = vm_tensor_new(vm, name, odt, GRACE_CPU, ot[0].ndim, ot[0].sizes);
  if (!out[0]) return vm->status;
  if (nout == 2 && !(out[1] = vm_tensor_new(vm, name, GRACE_INT64, GRACE_CPU, ot[0].ndim, ot[0].sizes))) return vm->status;
  p.vals = vm_ptr(out[0]);
  p.idxs = nout == 2 ? (int64_t *)vm_ptr(out[1]) : NULL;
  if (p.nout == 0) return GRACE_OK;

  if (vertical_ok(&p)) {
    int64_t C = p.osz[p.ond - 1], tasks = p.nout / C * ((C + VT - 1) / VT);
    vm_parallel_for(vm, tasks, 65536 / (p.nred * VT) + 1, run_vertical, &p);
  } else if (p.nred >= 2 * RBLOCK && p.nout <= 16) {
    p.nblocks = (p.nred + RBLOCK - 1) / RBLOCK;
    /* a block's state each: as many as the rows' length allows, so data-sized (an expanded view's rows) */
    size_t bytes = sizeof(rstate) * (size_t)(p.nout * p.nblocks);
    if (!(p.states = vm_alloc_data(vm, name, (size_t)(p.nout * p.nblocks), sizeof(rstate)))) return vm->status;
    vm_parallel_for(vm, p.nout * p.nblocks, 1, run_blocks, &p);
    for (int64_t o = 0; o < p.nout; o++) {
      rstate *st = &p.states[o * p.nblocks];
      for (int64_t k = 1; k < p.nblocks; k++) state_merge(&p, st, &st[k]);
      finalize(&p, st, o);
    }
    vm_free(vm, p.states, bytes);
  } else {
    int64_t per = p.nred > 0 ? p.nred : 1;
    vm_parallel_for(vm, p.nout, 16384 / per > 0 ? 16384 / per : 1, run_outputs, &p);
  }
  return GRACE_OK;
}

grace_status cpu_reduce_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                            int nout, grace_tensor **out) {
  switch (grace_op_kind(op)) {
  case GRACE_KIND_REDUCE: return reduce_run(vm, op, in[0], a, nout, out);
  case GRACE_KIND_SCAN: return cpu_scan_run(vm, op, nin, in, a, nout, out);
  case GRACE_KIND_NORM: return cpu_norm_run(vm, op, nin, in, a, nout, out);
  default: return vm_err(vm, GRACE_EINTERNAL, "%s: not a reduction", grace_op_name(op));
  }
}
