/* cpu_shape.c: the CPU backend's data movement: cat, stack, index_select, gather, scatter, triu/tril,
 * repeat, embedding and index_copy_. Almost everything is one engine: a strided copy (with dtype
 * conversion) between views described by sizes and strides; the ops only work out those views. */
#include "cpu/cpu_kernels.h"
#include "ir/ir_check.h"

/* ---- the strided copy engine ---- */
#define CP_MAXD (2 * GRACE_MAX_DIMS)   /* repeat views its result with two dims per input dim */

typedef struct cp_job {
  int nd;
  int64_t sizes[CP_MAXD], ss[CP_MAXD], ds[CP_MAXD];   /* element strides of source and destination */
  const char *src;
  char *dst;
  grace_dtype sdt, ddt;
} cp_job;

static void cp_init(cp_job *j, int nd, const int64_t *sizes, const char *src, const int64_t *ss, grace_dtype sdt,
                    char *dst, const int64_t *ds, grace_dtype ddt) {
  j->nd = nd;
  for (int d = 0; d < nd; d++) { j->sizes[d] = sizes[d]; j->ss[d] = ss[d]; j->ds[d] = ds[d]; }
  j->src = src; j->dst = dst; j->sdt = sdt; j->ddt = ddt;
}

/* Copies whole rows (all dims but the last) [begin, end). */
static void cp_rows(void *ctx, int64_t begin, int64_t end) {
  const cp_job *j = ctx;
  int last = j->nd - 1;
  int64_t n = j->sizes[last], sst = j->ss[last], dst = j->ds[last];
  int64_t ses = (int64_t)grace_dtype_size(j->sdt), des = (int64_t)grace_dtype_size(j->ddt);
  int same = j->sdt == j->ddt, sint = grace_dtype_is_int(j->sdt);
  for (int64_t r = begin; r < end; r++) {
    int64_t rem = r, so = 0, dof = 0;
    for (int d = last - 1; d >= 0; d--) {
      int64_t i = rem % j->sizes[d];
      rem /= j->sizes[d];
      so += i * j->ss[d];
      dof += i * j->ds[d];
    }
    const char *s = j->src + so * ses;
    char *o = j->dst + dof * des;
    if (same && sst == 1 && dst == 1) { memcpy(o, s, (size_t)(n * ses)); continue; }
    if (same) {
      switch (ses) {   /* fixed-size memcpy compiles to one move and keeps strict aliasing happy */
      case 1: for (int64_t i = 0; i < n; i++) o[i * dst] = s[i * sst]; break;
      case 2: for (int64_t i = 0; i < n; i++) memcpy(o + i * dst * 2, s + i * sst * 2, 2); break;
      case 4: for (int64_t i = 0; i < n; i++) memcpy(o + i * dst * 4, s + i * sst * 4, 4); break;
      default: for (int64_t i = 0; i < n; i++) memcpy(o + i * dst * 8, s + i * sst * 8, 8); break;
      }
    } else if (sint) {   /* integers through int64 keep large values exact */
      for (int64_t i = 0; i < n; i++) vm_store_i64(j->ddt, o + i * dst * des, vm_load_i64(j->sdt, s + i * sst * ses));
    } else {
      for (int64_t i = 0; i < n; i++) vm_store_f64(j->ddt, o + i * dst * des, vm_load_f64(j->sdt, s + i * sst * ses));
    }
  }
}

/* Drops size-1 dims, merges dims that are one run in both source and destination, then copies in
 * parallel over rows when the job is big. */
static void cp_run(grace_vm *vm, cp_job *j) {
  int k = 0;
  for (int d = 0; d < j->nd; d++) {
    if (j->sizes[d] == 0) return;
    if (j->sizes[d] == 1) continue;
    if (k > 0 && j->ss[k - 1] == j->ss[d] * j->sizes[d] && j->ds[k - 1] == j->ds[d] * j->sizes[d]) {
      j->sizes[k - 1] *= j->sizes[d];
      j->ss[k - 1] = j->ss[d];
      j->ds[k - 1] = j->ds[d];
      continue;
    }
    j->sizes[k] = j->sizes[d]; j->ss[k] = j->ss[d]; j->ds[k] = j->ds[d];
    k++;
  }
  if (k == 0) { k = 1; j->sizes[0] = 1; j->ss[0] = j->ds[0] = 0; }
  j->nd = k;
  int64_t rows = 1, inner = j->sizes[k - 1];
  for (int d = 0; d < k - 1; d++) rows *= j->sizes[d];
  vm_parallel_for(vm, rows, inner >= 32768 ? 1 : 32768 / inner, cp_rows, j);
}

/* A tensor as a view description; a 0-d tensor is seen as [1] so dim 0 exists (as PyTorch allows). */
typedef struct tview {
  int nd;
  int64_t sizes[GRACE_MAX_DIMS], strides[GRACE_MAX_DIMS];
  char *ptr;
  grace_dtype dt;
} tview;

static tview tv_of(const grace_tensor *t) {
  tview v = {.nd = t->ndim, .ptr = vm_ptr(t), .dt = t->dtype};
  for (int d = 0; d < t->ndim; d++) { v.sizes[d] = t->sizes[d]; v.strides[d] = t->strides[d]; }
  if (t->ndim == 0) { v.nd = 1; v.sizes[0] = 1; v.strides[0] = 0; }
  return v;
}

/* Copies src (any strides, any dtype) into dst of the same shape. */
static void copy_tensor(grace_vm *vm, grace_tensor *dst, const grace_tensor *src) {
  cp_job j;
  cp_init(&j, src->ndim, src->sizes, vm_ptr(src), src->strides, src->dtype, vm_ptr(dst), dst->strides, dst->dtype);
  cp_run(vm, &j);
}

/* Copies the slice src[dim = si] into dst[dim = di] (both views of the same rank, `dim` dropped). */
static void copy_slice(grace_vm *vm, const tview *dst, int64_t di, const tview *src, int64_t si, int dim) {
  int64_t sz[GRACE_MAX_DIMS], ss[GRACE_MAX_DIMS], ds[GRACE_MAX_DIMS];
  int k = 0;
  for (int d = 0; d < src->nd; d++)
    if (d != dim) { sz[k] = src->sizes[d]; ss[k] = src->strides[d]; ds[k] = dst->strides[d]; k++; }
  cp_job j;
  cp_init(&j, k, sz, src->ptr + si * src->strides[dim] * (int64_t)grace_dtype_size(src->dt), ss, src->dt,
          dst->ptr + di * dst->strides[dim] * (int64_t)grace_dtype_size(dst->dt), ds, dst->dt);
  cp_run(vm, &j);
}

/* ---- index tensors ---- */

/* Reads every value of idx (row-major) as a 0-based position, checked against size. `dim` < 0 means the
 * embedding message. The caller frees *pos with idx_free. */
static grace_status read_index(grace_vm *vm, const char *op, const grace_tensor *idx, int64_t size, int dim,
                               int64_t **pos) {
  int64_t n = vm_numel(idx->ndim, idx->sizes);
  int64_t *p = vm_alloc_data(vm, op, (size_t)(n > 0 ? n : 1), sizeof(int64_t));   /* an expanded index: data-sized */
  if (!p) return vm->status;
  *pos = p;
  if (n == 0) return GRACE_OK;
  size_t es = grace_dtype_size(idx->dtype);
  const char *base = vm_ptr(idx);
  vm_counter c;
  vm_counter_init(&c, idx->ndim, idx->sizes);
  for (int64_t i = 0;; i++) {
    int64_t v = vm_load_i64(idx->dtype, base + vm_offset(idx->ndim, c.idx, idx->strides) * (int64_t)es);
    int64_t q;
    if (!vm_sub_ok(v, vm->index_base, &q)) q = -1;   /* INT64_MIN with base 1: out of range, not overflow */
    if (q < 0 || q >= size) {
      vm_free(vm, p, (size_t)n * sizeof(int64_t));
      *pos = NULL;
      if (dim < 0)
        return vm_err(vm, GRACE_EINDEX, "%s: id %lld out of range for a table of %lld rows", op, (long long)v,
                      (long long)size);
      return vm_err(vm, GRACE_EINDEX, "%s: index %lld out of range for dim %d of size %lld", op, (long long)v,
                    dim + vm->index_base, (long long)size);
    }
    p[i] = q;
    if (!vm_counter_next(&c)) break;
  }
  return GRACE_OK;
}

static void idx_free(grace_vm *vm, int64_t *pos, const grace_tensor *idx) {
  int64_t n = vm_numel(idx->ndim, idx->sizes);
  vm_free(vm, pos, (size_t)(n > 0 ? n : 1) * sizeof(int64_t));
}

static int64_t dim_arg(const grace_attrs *a) { return a->ndims ? a->dims[0] : 0; }

/* ---- cat and stack (checks shared with the device: ir/ir_check.c) ---- */
static grace_status op_cat(grace_vm *vm, int nin, grace_tensor *const *in, const grace_attrs *a, grace_tensor **out) {
  grace_dtype dt;
  int nd, dim;
  int64_t sz[GRACE_MAX_DIMS];
  grace_status s = vm_check_cat(vm, nin, in, dim_arg(a), &dt, &nd, sz, &dim);
  if (s != GRACE_OK) return s;
  grace_tensor *o = vm_tensor_new(vm, "cat", dt, GRACE_CPU, nd, sz);
  if (!o) return vm->status;
  int64_t off = 0, es = (int64_t)grace_dtype_size(dt);
  for (int i = 0; i < nin; i++) {
    const grace_tensor *t = in[i];
    if (vm_cat_skips(t)) continue;
    cp_job j;
    cp_init(&j, t->ndim, t->sizes, vm_ptr(t), t->strides, t->dtype, vm_ptr(o) + off * o->strides[dim] * es,
            o->strides, dt);
    cp_run(vm, &j);
    off += t->sizes[dim];
  }
  *out = o;
  return GRACE_OK;
}

static grace_status op_stack(grace_vm *vm, int nin, grace_tensor *const *in, const grace_attrs *a, grace_tensor **out) {
  grace_dtype dt;
  int nd1, dim;
  int64_t sz[GRACE_MAX_DIMS];
  grace_status s = vm_check_stack(vm, nin, in, dim_arg(a), &dt, &nd1, sz, &dim);
  if (s != GRACE_OK) return s;
  int nd = nd1 - 1;
  grace_tensor *o = vm_tensor_new(vm, "stack", dt, GRACE_CPU, nd1, sz);
  if (!o) return vm->status;
  int64_t ds[GRACE_MAX_DIMS], es = (int64_t)grace_dtype_size(dt);
  for (int d = 0, k = 0; d <= nd; d++) if (d != dim) ds[k++] = o->strides[d];
  for (int i = 0; i < nin; i++) {
    cp_job j;
    cp_init(&j, nd, in[i]->sizes, vm_ptr(in[i]), in[i]->strides, in[i]->dtype, vm_ptr(o) + i * o->strides[dim] * es,
            ds, dt);
    cp_run(vm, &j);
  }
  *out = o;
  return GRACE_OK;
}

/* ---- index_select, gather, scatter, index_copy_ ---- */
static grace_status op_index_select(grace_vm *vm, grace_tensor *x, grace_tensor *idx, const grace_attrs *a,
                                    grace_tensor **out) {
  const char *op = "index_select";
  int dim;
  int64_t n;
  grace_status s = vm_check_index_select(vm, x, idx, dim_arg(a), &dim, &n);
  if (s != GRACE_OK) return s;
  tview xv = tv_of(x);
  int64_t *pos;
  if ((s = read_index(vm, op, idx, xv.sizes[dim], dim, &pos)) != GRACE_OK) return s;
  int64_t sz[GRACE_MAX_DIMS];
  memcpy(sz, x->sizes, sizeof sz);
  if (x->ndim > 0) sz[dim] = n;
  grace_tensor *o = vm_tensor_new(vm, op, x->dtype, GRACE_CPU, x->ndim, sz);
  if (o) {
    tview ov = tv_of(o);
    for (int64_t i = 0; i < n; i++) copy_slice(vm, &ov, i, &xv, pos[i], dim);
  }
  idx_free(vm, pos, idx);
  *out = o;
  return o ? GRACE_OK : vm->status;
}


static grace_status op_gather(grace_vm *vm, grace_tensor *x, grace_tensor *idx, const grace_attrs *a, grace_tensor **out) {
  const char *op = "gather";
  int dim;
  grace_status s = vm_norm_dim(vm, op, dim_arg(a), x->ndim, &dim);
  if (s != GRACE_OK || (s = vm_check_index_dtype(vm, op, idx, "index")) != GRACE_OK ||
      (s = vm_check_gather_shapes(vm, op, x, idx, NULL, dim)) != GRACE_OK)
    return s;
  tview xv = tv_of(x), iv = tv_of(idx);
  int64_t *pos;
  if ((s = read_index(vm, op, idx, xv.sizes[dim], dim, &pos)) != GRACE_OK) return s;
  grace_tensor *o = vm_tensor_new(vm, op, x->dtype, GRACE_CPU, idx->ndim, idx->sizes);
  int64_t n = vm_numel(idx->ndim, idx->sizes);
  if (o && n > 0) {
    int64_t es = (int64_t)grace_dtype_size(x->dtype);
    char *dst = vm_ptr(o);
    vm_counter c;
    vm_counter_init(&c, iv.nd, iv.sizes);
    for (int64_t i = 0;; i++) {
      int64_t off = 0;
      for (int d = 0; d < xv.nd; d++) off += (d == dim ? pos[i] : c.idx[d]) * xv.strides[d];
      memcpy(dst + i * es, xv.ptr + off * es, (size_t)es);
      if (!vm_counter_next(&c)) break;
    }
  }
  idx_free(vm, pos, idx);
  *out = o;
  return o ? GRACE_OK : vm->status;
}

static grace_status op_scatter(grace_vm *vm, grace_tensor *x, grace_tensor *idx, grace_tensor *src, const grace_attrs *a,
                               grace_tensor **out) {
  const char *op = "scatter";
  int dim, scalar = src->ndim == 0;
  grace_status s = vm_norm_dim(vm, op, dim_arg(a), x->ndim, &dim);
  if (s != GRACE_OK || (s = vm_check_index_dtype(vm, op, idx, "index")) != GRACE_OK ||
      (s = vm_check_gather_shapes(vm, op, x, idx, scalar ? NULL : src, dim)) != GRACE_OK)
    return s;
  /* src's dtype (ir_infer's check) */
  if ((s = vm_check_types(vm, GRACE_OP_SCATTER, 3, (grace_tensor *[]){x, idx, src}, a)) != GRACE_OK) return s;
  tview xv = tv_of(x), iv = tv_of(idx), sv = tv_of(src);
  int64_t *pos;
  if ((s = read_index(vm, op, idx, xv.sizes[dim], dim, &pos)) != GRACE_OK) return s;
  grace_tensor *o = vm_tensor_new(vm, op, x->dtype, GRACE_CPU, x->ndim, x->sizes);
  int64_t n = vm_numel(idx->ndim, idx->sizes);
  if (o) {
    copy_tensor(vm, o, x);
    tview ov = tv_of(o);
    int64_t es = (int64_t)grace_dtype_size(x->dtype);
    char value[8];
    if (scalar) {   /* the value converted once to x's dtype */
      if (grace_dtype_is_int(src->dtype)) vm_store_i64(x->dtype, value, vm_load_i64(src->dtype, vm_ptr(src)));
      else vm_store_f64(x->dtype, value, vm_load_f64(src->dtype, vm_ptr(src)));
    }
    vm_counter c;
    vm_counter_init(&c, iv.nd, iv.sizes);
    for (int64_t i = 0; i < n; i++) {   /* in order, so with repeated indices the last write wins */
      int64_t off = 0;
      for (int d = 0; d < ov.nd; d++) off += (d == dim ? pos[i] : c.idx[d]) * ov.strides[d];
      const char *from = scalar ? value : sv.ptr + vm_offset(sv.nd, c.idx, sv.strides) * es;
      memcpy(ov.ptr + off * es, from, (size_t)es);
      vm_counter_next(&c);
    }
  }
  idx_free(vm, pos, idx);
  *out = o;
  return o ? GRACE_OK : vm->status;
}

static grace_status op_index_copy(grace_vm *vm, grace_tensor *dst, grace_tensor *idx, grace_tensor *src,
                                  const grace_attrs *a) {
  const char *op = "index_copy_";
  int dim;
  int64_t n;
  grace_status s = vm_check_index_copy(vm, dst, idx, src, dim_arg(a), &dim, &n);
  if (s != GRACE_OK) return s;
  tview dv = tv_of(dst), sv = tv_of(src);
  int64_t *pos;
  if ((s = read_index(vm, op, idx, dv.sizes[dim], dim, &pos)) != GRACE_OK) return s;
  for (int64_t i = 0; i < n; i++) copy_slice(vm, &dv, pos[i], &sv, i, dim);
  idx_free(vm, pos, idx);
  vm_bump_version(dst);
  return GRACE_OK;
}

/* ---- triu / tril ---- */
static grace_status op_tri(grace_vm *vm, grace_op opc, grace_tensor *x, const grace_attrs *a, grace_tensor **out) {
  const char *op = grace_op_name(opc);
  grace_status cs = vm_check_types(vm, opc, 1, &x, a);   /* ir_infer's: at least 2 dims */
  if (cs != GRACE_OK) return cs;
  grace_tensor *o = vm_tensor_new(vm, op, x->dtype, GRACE_CPU, x->ndim, x->sizes);
  if (!o) return vm->status;
  copy_tensor(vm, o, x);
  int64_t R = x->sizes[x->ndim - 2], C = x->sizes[x->ndim - 1], k = vm_tri_diag(a->i0, R, C), es = (int64_t)grace_dtype_size(x->dtype);
  int64_t nmat = R > 0 && C > 0 ? vm_numel(x->ndim, x->sizes) / (R * C) : 0;
  char *p = vm_ptr(o);
  for (int64_t m = 0; m < nmat; m++)
    for (int64_t i = 0; i < R; i++) {
      char *row = p + (m * R + i) * C * es;
      /* triu keeps j - i >= k, tril keeps j - i <= k: zero (every dtype's zero is all-zero bytes) the rest */
      int64_t lo, hi;
      if (opc == GRACE_OP_TRIU) { lo = 0; hi = i + k; }
      else { lo = i + k + 1; hi = C; }
      if (lo < 0) lo = 0;
      if (hi > C) hi = C;
      if (hi > lo) memset(row + lo * es, 0, (size_t)((hi - lo) * es));
    }
  *out = o;
  return GRACE_OK;
}

/* ---- repeat: the result viewed as [r0, s0, r1, s1, ...], the input read with stride 0 along each r ---- */
static grace_status op_repeat(grace_vm *vm, grace_tensor *x, const grace_attrs *a, grace_tensor **out) {
  int nr = a->nshape;
  int64_t xs[GRACE_MAX_DIMS] = {0}, xst[GRACE_MAX_DIMS] = {0}, osz[GRACE_MAX_DIMS] = {0};
  grace_status cs = vm_check_repeat(vm, x, a, xs, xst, osz);
  if (cs != GRACE_OK) return cs;
  grace_tensor *o = vm_tensor_new(vm, "repeat", x->dtype, GRACE_CPU, nr, osz);
  if (!o) return vm->status;
  cp_job j;
  int64_t sz[CP_MAXD], ss[CP_MAXD], ds[CP_MAXD];
  for (int d = 0; d < nr; d++) {
    sz[2 * d] = a->shape[d]; ss[2 * d] = 0; ds[2 * d] = xs[d] * o->strides[d];
    sz[2 * d + 1] = xs[d]; ss[2 * d + 1] = xst[d]; ds[2 * d + 1] = o->strides[d];
  }
  cp_init(&j, 2 * nr, sz, vm_ptr(x), ss, x->dtype, vm_ptr(o), ds, x->dtype);
  cp_run(vm, &j);
  *out = o;
  return GRACE_OK;
}

/* ---- embedding: one row of the table per id ---- */
typedef struct emb_ctx {
  const int64_t *pos;
  const char *w;
  char *o;
  int64_t D, rs, cs, es;
} emb_ctx;

static void emb_rows(void *vctx, int64_t begin, int64_t end) {
  const emb_ctx *x = vctx;
  for (int64_t i = begin; i < end; i++) {
    const char *row = x->w + x->pos[i] * x->rs * x->es;
    char *o = x->o + i * x->D * x->es;
    if (x->cs == 1) memcpy(o, row, (size_t)(x->D * x->es));
    else for (int64_t k = 0; k < x->D; k++) memcpy(o + k * x->es, row + k * x->cs * x->es, (size_t)x->es);
  }
}

static grace_status op_embedding(grace_vm *vm, grace_tensor *ids, grace_tensor *w, grace_tensor **out) {
  const char *op = "embedding";
  /* ir_infer's checks: ids int64/int32, weight 2-d; an id out of range is a matter of values, checked below */
  grace_status s = vm_check_types(vm, GRACE_OP_EMBEDDING, 2, (grace_tensor *[]){ids, w}, NULL);
  if (s != GRACE_OK) return s;
  int64_t *pos;
  if ((s = read_index(vm, op, ids, w->sizes[0], -1, &pos)) != GRACE_OK) return s;
  int64_t sz[GRACE_MAX_DIMS], n = vm_numel(ids->ndim, ids->sizes);
  memcpy(sz, ids->sizes, sizeof(int64_t) * (size_t)ids->ndim);
  sz[ids->ndim] = w->sizes[1];
  grace_tensor *o = vm_tensor_new(vm, op, w->dtype, GRACE_CPU, ids->ndim + 1, sz);
  if (o && w->sizes[1] > 0) {
    emb_ctx x = {.pos = pos, .w = vm_ptr(w), .o = vm_ptr(o), .D = w->sizes[1], .rs = w->strides[0],
                 .cs = w->sizes[1] == 1 ? 1 : w->strides[1], .es = (int64_t)grace_dtype_size(w->dtype)};
    vm_parallel_for(vm, n, x.D * x.es >= 16384 ? 1 : 16384 / (x.D * x.es), emb_rows, &x);
  }
  idx_free(vm, pos, ids);
  *out = o;
  return o ? GRACE_OK : vm->status;
}


/* The functional form of writing a narrowed or selected view: a copy of base with that region = src. */
static grace_status op_slice_scatter(grace_vm *vm, grace_tensor *base, grace_tensor *src, const grace_attrs *a,
                                     grace_tensor **out) {
  grace_tensor *copy = vm_dense_like(vm, GRACE_CPU, "slice_scatter", base), *view = NULL;
  grace_attrs va = *a;
  grace_status st = copy ? cpu_copy_into(vm, "slice_scatter", copy, base) : vm->status;
  if (st == GRACE_OK) st = vm_view_run(vm, a->flag ? GRACE_OP_SELECT : GRACE_OP_NARROW, 1, &copy, &va, 1, &view);
  if (st == GRACE_OK) st = cpu_copy_into(vm, "slice_scatter", view, src);
  grace_tensor_release(view);
  if (st != GRACE_OK) { grace_tensor_release(copy); return st; }
  *out = copy;
  return GRACE_OK;
}

grace_status cpu_shape_run(grace_vm *vm, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a,
                           int nout, grace_tensor **out) {
  switch (op) {
  case GRACE_OP_CAT: return op_cat(vm, nin, in, a, out);
  case GRACE_OP_STACK: return op_stack(vm, nin, in, a, out);
  case GRACE_OP_INDEX_SELECT: return op_index_select(vm, in[0], in[1], a, out);
  case GRACE_OP_GATHER: return op_gather(vm, in[0], in[1], a, out);
  case GRACE_OP_SCATTER: return op_scatter(vm, in[0], in[1], in[2], a, out);
  case GRACE_OP_TRIU: case GRACE_OP_TRIL: return op_tri(vm, op, in[0], a, out);
  case GRACE_OP_REPEAT: return op_repeat(vm, in[0], a, out);
  case GRACE_OP_EMBEDDING: return op_embedding(vm, in[0], in[1], out);
  case GRACE_OP_INDEX_COPY_: return op_index_copy(vm, in[0], in[1], in[2], a);
  case GRACE_OP_SLICE_SCATTER: return op_slice_scatter(vm, in[0], in[1], a, out);
  default:
    return vm_err(vm, GRACE_EUNSUPPORTED, "%s: not a data movement op of the CPU backend", grace_op_name(op));
  }
}
