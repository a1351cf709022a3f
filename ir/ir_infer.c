/* ir_infer.c: result types of every op from its input types and attributes, by op kind. The rules and
 * error messages are those of eager execution, so a trace rejects what eager would reject. Symbolic
 * sizes pass through where a result dim is an input dim unchanged. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "ir/ir.h"
#include "ir/ir_pointwise.h"

static const char *short_names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"};

const char *ir_dtype_short(grace_dtype dt) { return (unsigned)dt < GRACE_NDTYPES ? short_names[dt] : "?"; }

int ir_dtype_from_short(const char *s, grace_dtype *dt) {
  for (int i = 0; i < GRACE_NDTYPES; i++)
    if (!strcmp(s, short_names[i])) { *dt = (grace_dtype)i; return 1; }
  return 0;
}

const char *ir_type_str(const ir_type *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", ir_dtype_short(t->dtype));
  for (int d = 0; d < t->ndim && k < n; d++) {
    if (t->sym[d]) k += (size_t)snprintf(buf + k, n - k, "%ss%d=%lld", d ? "," : "", t->sym[d], (long long)t->sizes[d]);
    else k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)t->sizes[d]);
  }
  if (k < n) k += (size_t)snprintf(buf + k, n - k, "]");
  if (k < n && t->device == GRACE_CUDA) snprintf(buf + k, n - k, " cuda");
  return buf;
}

static const char *shape_str(const ir_type *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < t->ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)t->sizes[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}
#define SHAPE(t) shape_str((t), (char[128]){0}, 128)

static int tier(const ir_type *t) { return t->wrapped ? 2 : t->ndim == 0 ? 1 : 0; }

static grace_dtype result_type(int n, const ir_type *const *in) {
  grace_dtype dts[8];
  int tiers[8], k = 0;
  for (int i = 0; i < n && k < 8; i++)
    if (in[i]) { dts[k] = in[i]->dtype; tiers[k++] = tier(in[i]); }
  return grace_result_type(k, dts, tiers);
}

#define norm_dim grace_norm_dim   /* the VM's, so traced and eager calls say the same */

static grace_status broadcast(grace_vm *vm, const char *op, int n, const ir_type *const *in, ir_type *out) {
  int nds[8], k = 0;
  const int64_t *szs[8];
  const ir_type *used[8];
  for (int i = 0; i < n && k < 8; i++)
    if (in[i]) { used[k] = in[i]; nds[k] = in[i]->ndim; szs[k++] = in[i]->sizes; }
  grace_status st = grace_broadcast_shapes(vm, op, k, nds, szs, &out->ndim, out->sizes);
  if (st != GRACE_OK) return st;
  /* a result dim keeps the symbol of an input that has the full size there */
  for (int d = 0; d < out->ndim; d++) {
    out->sym[d] = 0;
    for (int i = 0; i < k; i++) {
      int id = d - (out->ndim - used[i]->ndim);
      if (id >= 0 && used[i]->sizes[id] == out->sizes[d] && used[i]->sym[id]) { out->sym[d] = used[i]->sym[id]; break; }
    }
  }
  return GRACE_OK;
}

static grace_status infer_unary(grace_vm *vm, grace_op op, const ir_type *x, const grace_attrs *a, ir_type *o) {
  *o = *x;
  o->wrapped = 0;
  if (ir_pw_rule_of(op) == IR_PW_FLOAT && !grace_dtype_is_float(x->dtype)) o->dtype = GRACE_FLOAT32;
  else if (op == GRACE_OP_LOGICAL_NOT) o->dtype = GRACE_BOOL;
  else if (op == GRACE_OP_CAST) o->dtype = a->dtype;
  else if (op == GRACE_OP_NEG && x->dtype == GRACE_BOOL)
    return grace_set_error(vm, GRACE_EDTYPE, "neg: negation of a bool tensor is not supported; use logical_not() instead");
  else if (op == GRACE_OP_CLAMP) {
    if (!a->has_a && !a->has_b) return grace_set_error(vm, GRACE_EARG, "clamp: at least one of min and max must be given");
    /* a fractional bound (NaN included) makes an integer or bool input float32, as PyTorch's promotion */
    int frac = (a->has_a && a->a != floor(a->a)) || (a->has_b && a->b != floor(a->b));
    if (!grace_dtype_is_float(x->dtype) && frac) o->dtype = GRACE_FLOAT32;
  }
  return GRACE_OK;
}

/* The EDTYPE error of ops that need a float input. */
static grace_status need_float(grace_vm *vm, const char *name, const char *what, grace_dtype dt) {
  return grace_set_error(vm, GRACE_EDTYPE, "%s: %s dtype %s is not a float type; cast it with :float()", name, what,
                         grace_dtype_name(dt));
}

/* A dtype attribute is one of the dtypes (the C API can pass any number). */
static grace_status check_dtype_attr(grace_vm *vm, const char *name, const grace_attrs *a) {
  if (a->has_dtype && (unsigned)a->dtype >= GRACE_NDTYPES)
    return grace_set_error(vm, GRACE_EDTYPE, "%s: invalid dtype %d", name, (int)a->dtype);
  return GRACE_OK;
}

/* The result dtype of a reduction, PyTorch's rules. */
static grace_status reduce_dtype(grace_vm *vm, grace_op op, const ir_type *x, const grace_attrs *a, grace_dtype *odt) {
  const char *name = grace_op_name(op);
  int isf = grace_dtype_is_float(x->dtype);
  switch (op) {
  case GRACE_OP_SUM: case GRACE_OP_PROD: *odt = a->has_dtype ? a->dtype : isf ? x->dtype : GRACE_INT64; break;
  case GRACE_OP_MEAN:
    *odt = a->has_dtype ? a->dtype : x->dtype;
    if (!grace_dtype_is_float(*odt)) {
      if (a->has_dtype)
        return grace_set_error(vm, GRACE_EDTYPE, "mean: dtype %s is not a float type", grace_dtype_name(*odt));
      return need_float(vm, name, "input", x->dtype);
    }
    break;
  case GRACE_OP_VAR: case GRACE_OP_STD:   /* a dtype attribute is not theirs: the result has x's */
    if (!isf) return need_float(vm, name, "input", x->dtype);
    *odt = x->dtype;
    break;
  case GRACE_OP_LOGSUMEXP: *odt = isf ? x->dtype : GRACE_FLOAT32; break;
  case GRACE_OP_ARGMAX: case GRACE_OP_ARGMIN: *odt = GRACE_INT64; break;
  case GRACE_OP_ALL: case GRACE_OP_ANY: *odt = GRACE_BOOL; break;
  default: *odt = x->dtype; break;   /* max, min */
  }
  return GRACE_OK;
}

/* Reductions: the checks and result types of every backend's reductions (cpu_reduce.c; ROW groups and cg_ops
 * on the device), so they are written once. */
static grace_status infer_reduce(grace_vm *vm, grace_op op, const ir_type *x, const grace_attrs *a, int nout, ir_type *o) {
  const char *name = grace_op_name(op);
  int red[GRACE_MAX_DIMS] = {0}, seen0 = 0, all = a->ndims == 0;
  grace_status st;
  if (a->ndims < 0 || a->ndims > GRACE_MAX_DIMS)
    return grace_set_error(vm, GRACE_EARG, "%s: %d dims given (at most %d)", name, a->ndims, GRACE_MAX_DIMS);
  for (int i = 0; i < a->ndims; i++) {
    int d;
    if ((st = norm_dim(vm, name, a->dims[i], x->ndim, &d))) return st;
    int *slot = x->ndim ? &red[d] : &seen0;   /* a 0-d tensor takes dim 0 (or -1) once, as PyTorch */
    if ((*slot)++) return grace_set_error(vm, GRACE_EARG, "%s: dim %d given more than once", name, d + grace_index_base(vm));
  }
  if (all) for (int d = 0; d < x->ndim; d++) red[d] = 1;
  int is_arg = op == GRACE_OP_ARGMAX || op == GRACE_OP_ARGMIN;
  int is_best = is_arg || op == GRACE_OP_MAX || op == GRACE_OP_MIN;
  if (is_arg && a->ndims > 1) return grace_set_error(vm, GRACE_EARG, "%s: takes one dim or none, got %d", name, a->ndims);
  if (nout == 2 && a->ndims != 1)
    return grace_set_error(vm, GRACE_EARG, a->ndims == 0 ? "%s: indices need a dim" : "%s: indices need exactly one dim, got %d",
                           name, a->ndims);
  grace_dtype dt = x->dtype;
  if ((st = check_dtype_attr(vm, name, a)) || (st = reduce_dtype(vm, op, x, a, &dt))) return st;
  for (int d = 0; d < x->ndim && is_best; d++)   /* no identity to start from, even where keepdim keeps the dim */
    if (red[d] && x->sizes[d] == 0)
      return grace_set_error(vm, GRACE_EARG, "%s: cannot reduce over a zero-size dim (input shape %s)", name, SHAPE(x));
  ir_type r = {.dtype = dt, .device = x->device};
  int keep = a->keepdim && !(is_arg && all);   /* argmax/argmin of everything is 0-d, as PyTorch */
  for (int d = 0; d < x->ndim; d++) {
    if (!red[d]) { r.sizes[r.ndim] = x->sizes[d]; r.sym[r.ndim++] = x->sym[d]; }
    else if (keep) { r.sizes[r.ndim] = 1; r.sym[r.ndim++] = 0; }
  }
  o[0] = r;
  if (nout == 2) { o[1] = r; o[1].dtype = GRACE_INT64; }
  return GRACE_OK;
}

/* Row ops over one dim (cumsum, softmax, log_softmax, topk, sort): the checks and result types of
 * cpu_reduce_scan.c and the device's op_scan, written once. */
static grace_status infer_scan(grace_vm *vm, grace_op op, const ir_type *x, const grace_attrs *a, int nout, ir_type *o) {
  const char *name = grace_op_name(op);
  int d = x->ndim ? x->ndim - 1 : 0, isf = grace_dtype_is_float(x->dtype);
  grace_status st;
  if (a->ndims > 1) return grace_set_error(vm, GRACE_EARG, "%s: takes one dim, got %d", name, a->ndims);
  if ((a->ndims == 1 && (st = norm_dim(vm, name, a->dims[0], x->ndim, &d))) || (st = check_dtype_attr(vm, name, a)))
    return st;
  *o = *x;
  o->wrapped = 0;
  switch (op) {
  case GRACE_OP_CUMSUM: o->dtype = a->has_dtype ? a->dtype : isf ? x->dtype : GRACE_INT64; break;
  case GRACE_OP_SOFTMAX: case GRACE_OP_LOG_SOFTMAX:
    o->dtype = a->has_dtype ? a->dtype : x->dtype;   /* a float dtype attribute takes an integer input */
    if (!isf && !a->has_dtype) return need_float(vm, name, "input", x->dtype);
    if (!grace_dtype_is_float(o->dtype))
      return grace_set_error(vm, GRACE_EDTYPE, "%s: dtype %s is not a float type", name, grace_dtype_name(o->dtype));
    break;
  case GRACE_OP_TOPK: {
    int64_t n = x->ndim ? x->sizes[d] : 1;
    if (a->i0 < 0 || a->i0 > n)
      return grace_set_error(vm, GRACE_EINDEX, "topk: k (%lld) is out of range for dim %d of size %lld", (long long)a->i0,
                             d + grace_index_base(vm), (long long)n);
    if (x->ndim) { o->sizes[d] = a->i0; o->sym[d] = 0; }
    else if (a->i0 == 0) { o->ndim = 1; o->sizes[0] = 0; o->sym[0] = 0; }   /* none of a 0-d tensor's one: [0] */
    break;
  }
  default: o->dtype = x->dtype; break;   /* sort */
  }
  if (nout == 2) { o[1] = o[0]; o[1].dtype = GRACE_INT64; }
  return GRACE_OK;
}

/* layer_norm, rms_norm: a float input of at least one dim; weight and bias absent or 1-d float of its last dim's
 * size. The checks of cpu_reduce_norm.c and the device's op_norm, written once. */
static grace_status infer_norm(grace_vm *vm, grace_op op, int nin, const ir_type *const *in, ir_type *o) {
  const char *name = grace_op_name(op);
  const ir_type *x = in[0];
  if (!grace_dtype_is_float(x->dtype)) return need_float(vm, name, "input", x->dtype);
  if (x->ndim == 0) return grace_set_error(vm, GRACE_ESHAPE, "%s: input of shape [] has no last dim to normalise", name);
  for (int i = 1; i < nin && i < 3; i++) {
    const char *what = i == 1 ? "weight" : "bias";
    if (!in[i]) continue;
    if (!grace_dtype_is_float(in[i]->dtype)) return need_float(vm, name, what, in[i]->dtype);
    if (in[i]->ndim != 1 || in[i]->sizes[0] != x->sizes[x->ndim - 1])
      return grace_set_error(vm, GRACE_ESHAPE, "%s: %s of shape %s does not match the last dim of input of shape %s "
                             "(expected [%lld])", name, what, SHAPE(in[i]), SHAPE(x), (long long)x->sizes[x->ndim - 1]);
  }
  *o = *x;
  o->wrapped = 0;
  return GRACE_OK;
}

/* attention (include/grace_ops.h): one float dtype for q, kt and v, the product dims matching, their batch dims
 * broadcast as matmul's; a 0-d numeric scale; a bool mask that broadcasts to the scores [..., M, N]. */
static grace_status infer_attention(grace_vm *vm, const ir_type *const *in, ir_type *o) {
  const ir_type *q = in[0], *k = in[1], *v = in[2], *s = in[3], *m = in[4];
  const char *role[3] = {"q", "kt", "v"};
  for (int i = 0; i < 3; i++) {
    if (in[i]->ndim < 2)
      return grace_set_error(vm, GRACE_ESHAPE, "attention: %s must have at least 2 dims, got %s", role[i], SHAPE(in[i]));
    if (!grace_dtype_is_float(in[i]->dtype) || in[i]->dtype != q->dtype)
      return grace_set_error(vm, GRACE_EDTYPE, "attention: q, kt and v must have one float dtype, got %s, %s, %s",
                             grace_dtype_name(q->dtype), grace_dtype_name(k->dtype), grace_dtype_name(v->dtype));
  }
  int qn = q->ndim, kn = k->ndim, vn = v->ndim;
  if (q->sizes[qn - 1] != k->sizes[kn - 2] || k->sizes[kn - 1] != v->sizes[vn - 2])
    return grace_set_error(vm, GRACE_ESHAPE, "attention: shapes %s, %s and %s do not chain (q [..., M, D], "
                           "kt [..., D, N], v [..., N, Dv])", SHAPE(q), SHAPE(k), SHAPE(v));
  if (s && (s->ndim != 0 || s->dtype == GRACE_BOOL))
    return grace_set_error(vm, GRACE_EARG, "attention: scale must be a number (a 0-d tensor), got %s %s",
                           grace_dtype_name(s->dtype), SHAPE(s));
  ir_type bq = *q, bk = *k, bv = *v, sc;
  bq.ndim -= 2; bk.ndim -= 2; bv.ndim -= 2;
  grace_status st = broadcast(vm, "attention", 3, (const ir_type *[]){&bq, &bk, &bv}, o);
  if (st != GRACE_OK) return st;
  int b = o->ndim;
  o->dtype = q->dtype;
  o->device = q->device;
  o->wrapped = 0;
  sc = *o;
  sc.ndim = b + 2;
  sc.sizes[b] = q->sizes[qn - 2]; sc.sym[b] = q->sym[qn - 2];
  sc.sizes[b + 1] = k->sizes[kn - 1]; sc.sym[b + 1] = k->sym[kn - 1];
  if (m) {
    ir_type r;
    if (m->dtype != GRACE_BOOL)
      return grace_set_error(vm, GRACE_EDTYPE, "attention: the mask must be bool, got %s", grace_dtype_name(m->dtype));
    if ((st = broadcast(vm, "attention", 2, (const ir_type *[]){&sc, m}, &r))) return st;
    if (r.ndim != sc.ndim)
      return grace_set_error(vm, GRACE_ESHAPE, "attention: the mask %s has more dims than the scores %s", SHAPE(m),
                             SHAPE(&sc));
    for (int d = 0; d < r.ndim; d++)
      if (r.sizes[d] != sc.sizes[d])
        return grace_set_error(vm, GRACE_ESHAPE, "attention: the mask %s does not broadcast to the scores %s", SHAPE(m),
                               SHAPE(&sc));
  }
  o->ndim = b + 2;
  o->sizes[b] = q->sizes[qn - 2]; o->sym[b] = q->sym[qn - 2];
  o->sizes[b + 1] = v->sizes[vn - 1]; o->sym[b + 1] = v->sym[vn - 1];
  return GRACE_OK;
}

static grace_status infer_matmul(grace_vm *vm, const ir_type *x, const ir_type *y, ir_type *o) {
  /* the checks and messages of eager matmul (cpu_matmul.c), in its order */
  if (x->ndim == 0 || y->ndim == 0)
    return grace_set_error(vm, GRACE_ESHAPE, "matmul: both arguments need to be at least 1-d, got shapes %s and %s",
                           SHAPE(x), SHAPE(y));
  if (x->dtype != y->dtype)
    return grace_set_error(vm, GRACE_EDTYPE, "matmul: expected both inputs to have the same dtype, got %s and %s",
                           grace_dtype_name(x->dtype), grace_dtype_name(y->dtype));
  if (x->dtype == GRACE_BOOL)
    return grace_set_error(vm, GRACE_EDTYPE, "matmul: bool tensors are not supported (shapes %s and %s)", SHAPE(x), SHAPE(y));
  int64_t k1 = x->sizes[x->ndim - 1], k2 = y->ndim == 1 ? y->sizes[0] : y->sizes[y->ndim - 2];
  if (k1 != k2)
    return grace_set_error(vm, GRACE_ESHAPE, "matmul: shapes %s and %s cannot be multiplied (inner dims %lld and %lld differ)",
                           SHAPE(x), SHAPE(y), (long long)k1, (long long)k2);
  int xb = x->ndim > 2 ? x->ndim - 2 : 0, yb = y->ndim > 2 ? y->ndim - 2 : 0, nbd = xb > yb ? xb : yb;
  ir_type r = {.dtype = x->dtype, .device = x->device};
  for (int d = 0; d < nbd; d++) {
    int dx = d - (nbd - xb), dy = d - (nbd - yb);
    int64_t sx = dx < 0 ? 1 : x->sizes[dx], sy = dy < 0 ? 1 : y->sizes[dy];
    if (sx != sy && sx != 1 && sy != 1)
      return grace_set_error(vm, GRACE_ESHAPE, "matmul: batch dims of shapes %s and %s do not broadcast (size %lld against %lld)",
                             SHAPE(x), SHAPE(y), (long long)sx, (long long)sy);
    r.sizes[d] = sx == 1 ? sy : sx;
    r.sym[d] = sx == 1 && dy >= 0 ? y->sym[dy] : dx >= 0 ? x->sym[dx] : 0;
  }
  r.ndim = nbd;
  r.wrapped = 0; r.dtype = x->dtype; r.device = x->device;
  if (x->ndim >= 2) { r.sizes[r.ndim] = x->sizes[x->ndim - 2]; r.sym[r.ndim++] = x->sym[x->ndim - 2]; }
  if (y->ndim >= 2) { r.sizes[r.ndim] = y->sizes[y->ndim - 1]; r.sym[r.ndim++] = y->sym[y->ndim - 1]; }
  *o = r;
  return GRACE_OK;
}

static grace_status infer_view(grace_vm *vm, grace_op op, const ir_type *x, const grace_attrs *a, ir_type *o);

static grace_status infer_move(grace_vm *vm, grace_op op, int nin, const ir_type *const *in, const grace_attrs *a, ir_type *o) {
  const char *name = grace_op_name(op);
  const ir_type *x = in[0];
  int d = 0;
  grace_status st;
  *o = *x;
  o->wrapped = 0;
  switch (op) {
  case GRACE_OP_CONTIGUOUS: case GRACE_OP_CLONE: case GRACE_OP_TRIU: case GRACE_OP_TRIL: return GRACE_OK;
  case GRACE_OP_TO_DEVICE: o->device = a->device; return GRACE_OK;
  case GRACE_OP_CAT: case GRACE_OP_STACK: {
    if (op == GRACE_OP_STACK) {
      if ((st = norm_dim(vm, name, a->ndims ? a->dims[0] : 0, x->ndim + 1, &d))) return st;
    } else if ((st = norm_dim(vm, name, a->ndims ? a->dims[0] : 0, x->ndim, &d))) return st;
    if (op == GRACE_OP_CAT && x->ndim == 0) return grace_set_error(vm, GRACE_ESHAPE, "cat: zero-dimensional tensors cannot be concatenated");
    int64_t total = 0;
    for (int i = 0; i < nin; i++) {
      const ir_type *t = in[i];
      int same = t->ndim == x->ndim;
      for (int k = 0; same && k < x->ndim; k++) same = (op == GRACE_OP_CAT && k == d) || t->sizes[k] == x->sizes[k];
      if (!same)
        return grace_set_error(vm, GRACE_ESHAPE, "%s: tensor %d has shape %s, expected %s%s", name, i + grace_index_base(vm),
                               SHAPE(t), SHAPE(x), op == GRACE_OP_CAT ? " except in the cat dim" : "");
      total += op == GRACE_OP_CAT ? t->sizes[d] : 1;
    }
    o->dtype = result_type(nin, in);
    if (op == GRACE_OP_CAT) { o->sizes[d] = total; o->sym[d] = 0; }
    else {
      for (int k = o->ndim; k > d; k--) { o->sizes[k] = o->sizes[k - 1]; o->sym[k] = o->sym[k - 1]; }
      o->sizes[d] = nin; o->sym[d] = 0; o->ndim++;
    }
    return GRACE_OK;
  }
  case GRACE_OP_INDEX_SELECT: case GRACE_OP_GATHER: case GRACE_OP_SCATTER: case GRACE_OP_EMBEDDING: {
    const ir_type *idx = op == GRACE_OP_EMBEDDING ? in[0] : in[1];
    if (idx->dtype != GRACE_INT64 && idx->dtype != GRACE_INT32)
      return grace_set_error(vm, GRACE_EDTYPE, "%s: %s must be int64 or int32, got %s (shape %s)", name,   /* as vm_check_index_dtype */
                             op == GRACE_OP_EMBEDDING ? "ids" : "index", grace_dtype_name(idx->dtype), SHAPE(idx));
    if (op == GRACE_OP_EMBEDDING) {
      const ir_type *w = in[1];
      if (w->ndim != 2) return grace_set_error(vm, GRACE_ESHAPE, "embedding: weight must be 2-d, got shape %s", SHAPE(w));
      if (idx->ndim >= GRACE_MAX_DIMS) return grace_set_error(vm, GRACE_ESHAPE, "embedding: too many dims");
      *o = *idx;
      o->dtype = w->dtype; o->device = w->device;
      o->sizes[o->ndim] = w->sizes[1]; o->sym[o->ndim++] = w->sym[1];
      return GRACE_OK;
    }
    if ((st = norm_dim(vm, name, a->ndims ? a->dims[0] : 0, x->ndim, &d))) return st;
    if (op == GRACE_OP_INDEX_SELECT) {
      if (idx->ndim > 1) return grace_set_error(vm, GRACE_ESHAPE, "index_select: index must be 0-d or 1-d, got shape %s", SHAPE(idx));
      if (x->ndim) { o->sizes[d] = idx->ndim ? idx->sizes[0] : 1; o->sym[d] = idx->ndim ? idx->sym[0] : 0; }
    } else if (op == GRACE_OP_GATHER) {
      if (idx->ndim != x->ndim)
        return grace_set_error(vm, GRACE_ESHAPE, "gather: index (shape %s) must have the same number of dims as the input "
                               "(shape %s)", SHAPE(idx), SHAPE(x));   /* as vm_check_gather_shapes */
      memcpy(o->sizes, idx->sizes, sizeof o->sizes);
      memcpy(o->sym, idx->sym, sizeof o->sym);
    }
    return GRACE_OK;
  }
  case GRACE_OP_SLICE_SCATTER: {
    ir_type view;
    st = infer_view(vm, a->flag ? GRACE_OP_SELECT : GRACE_OP_NARROW, x, a, &view);
    if (st != GRACE_OK) return st;
    const ir_type *src = in[1], *both[2] = {&view, src};
    ir_type b;
    if ((st = broadcast(vm, name, 2, both, &b))) return st;
    if (b.ndim != view.ndim || memcmp(b.sizes, view.sizes, sizeof(int64_t) * (size_t)b.ndim))
      return grace_set_error(vm, GRACE_ESHAPE, "slice_scatter: source of shape %s does not fit the region %s", SHAPE(src), SHAPE(&view));
    return GRACE_OK;
  }
  case GRACE_OP_REPEAT: {
    if (a->nshape < x->ndim)
      return grace_set_error(vm, GRACE_ESHAPE, "repeat: %d repeats given for a %d-d tensor (need at least %d)", a->nshape, x->ndim, x->ndim);
    o->ndim = a->nshape;
    for (int k = 0; k < a->nshape; k++) {
      int xd = k - (a->nshape - x->ndim);
      if (a->shape[k] < 0) return grace_set_error(vm, GRACE_EARG, "repeat: negative repeat %lld", (long long)a->shape[k]);
      o->sizes[k] = (xd >= 0 ? x->sizes[xd] : 1) * a->shape[k];
      o->sym[k] = 0;
    }
    return GRACE_OK;
  }
  default:
    return grace_set_error(vm, GRACE_EINTERNAL, "%s: no type rule", name);
  }
}

static grace_status infer_view(grace_vm *vm, grace_op op, const ir_type *x, const grace_attrs *a, ir_type *o) {
  const char *name = grace_op_name(op);
  int d0, d1;
  grace_status st;
  *o = *x;
  o->wrapped = 0;
  switch (op) {
  case GRACE_OP_RESHAPE: case GRACE_OP_VIEW: {
    int64_t numel = 1, known = 1;
    int infer = -1;
    for (int d = 0; d < x->ndim; d++) numel *= x->sizes[d];
    if (a->nshape < 0 || a->nshape > GRACE_MAX_DIMS) return grace_set_error(vm, GRACE_EARG, "%s: too many dims", name);
    o->ndim = a->nshape;
    for (int d = 0; d < a->nshape; d++) {
      o->sizes[d] = a->shape[d]; o->sym[d] = 0;
      if (a->shape[d] == -1) {
        if (infer >= 0) return grace_set_error(vm, GRACE_EARG, "%s: only one dimension can be -1", name);
        infer = d;
      } else if (a->shape[d] < 0) return grace_set_error(vm, GRACE_EARG, "%s: invalid size %lld", name, (long long)a->shape[d]);
      else known *= a->shape[d];
    }
    if (infer >= 0 && known != 0 && numel % known == 0) { o->sizes[infer] = numel / known; known = numel; }
    if (known != numel)
      return grace_set_error(vm, GRACE_ESHAPE, "%s: shape %s is invalid for input of shape %s (%lld elements)", name,
                             SHAPE(o), SHAPE(x), (long long)numel);
    return GRACE_OK;
  }
  case GRACE_OP_TRANSPOSE:
    if (a->ndims != 2) return grace_set_error(vm, GRACE_EARG, "transpose: expected two dims");
    if ((st = norm_dim(vm, name, a->dims[0], x->ndim, &d0)) || (st = norm_dim(vm, name, a->dims[1], x->ndim, &d1))) return st;
    if (x->ndim) {
      o->sizes[d0] = x->sizes[d1]; o->sizes[d1] = x->sizes[d0];
      o->sym[d0] = x->sym[d1]; o->sym[d1] = x->sym[d0];
    }
    return GRACE_OK;
  case GRACE_OP_PERMUTE: {
    if (a->ndims != x->ndim) return grace_set_error(vm, GRACE_EARG, "permute: %d dims given for a tensor of shape %s", a->ndims, SHAPE(x));
    int seen[GRACE_MAX_DIMS] = {0};
    for (int d = 0; d < x->ndim; d++) {
      if ((st = norm_dim(vm, name, a->dims[d], x->ndim, &d0))) return st;
      if (seen[d0]++) return grace_set_error(vm, GRACE_EARG, "permute: dim %d repeated", d0 + grace_index_base(vm));
      o->sizes[d] = x->sizes[d0]; o->sym[d] = x->sym[d0];
    }
    return GRACE_OK;
  }
  case GRACE_OP_EXPAND:
    if (a->nshape < x->ndim || a->nshape > GRACE_MAX_DIMS)
      return grace_set_error(vm, GRACE_ESHAPE, "expand: cannot expand shape %s to %d dims", SHAPE(x), a->nshape);
    o->ndim = a->nshape;
    for (int d = 0; d < a->nshape; d++) {
      int xd = d - (a->nshape - x->ndim);
      int64_t want = a->shape[d];
      if (xd >= 0 && (want == -1 || want == x->sizes[xd])) { o->sizes[d] = x->sizes[xd]; o->sym[d] = x->sym[xd]; }
      else if ((xd < 0 || x->sizes[xd] == 1) && want >= 0) { o->sizes[d] = want; o->sym[d] = 0; }
      else return grace_set_error(vm, GRACE_ESHAPE, "expand: cannot expand shape %s (size %lld in dim %d)", SHAPE(x),
                                  (long long)(xd >= 0 ? x->sizes[xd] : -1), d + grace_index_base(vm));
    }
    return GRACE_OK;
  case GRACE_OP_NARROW: case GRACE_OP_SELECT: {
    if (x->ndim == 0) return grace_set_error(vm, GRACE_EARG, "%s: not possible on a 0-d tensor", name);
    if ((st = norm_dim(vm, name, a->ndims ? a->dims[0] : 0, x->ndim, &d0))) return st;
    int64_t n = x->sizes[d0], start = a->i0 < 0 ? a->i0 + n : a->i0;
    int b = grace_index_base(vm);
    if (op == GRACE_OP_SELECT) {
      if (start < 0 || start >= n)
        return grace_set_error(vm, GRACE_EINDEX, "select: index %lld out of range for dim %d of size %lld (shape %s)",
                               (long long)(a->i0 < 0 ? a->i0 : a->i0 + b), d0 + b, (long long)n, SHAPE(x));
      for (int d = d0; d < x->ndim - 1; d++) { o->sizes[d] = x->sizes[d + 1]; o->sym[d] = x->sym[d + 1]; }
      o->ndim--;
    } else {
      if (start < 0 || start > n || a->i1 < 0 || start + a->i1 > n)
        return grace_set_error(vm, GRACE_EINDEX, "narrow: start %lld with length %lld is out of range for dim %d of size %lld",
                               (long long)(a->i0 < 0 ? a->i0 : a->i0 + b), (long long)a->i1, d0 + b, (long long)n);
      o->sizes[d0] = a->i1; o->sym[d0] = 0;
    }
    return GRACE_OK;
  }
  case GRACE_OP_SQUEEZE: {
    int drop[GRACE_MAX_DIMS] = {0}, k = 0;
    if (a->ndims == 0) for (int d = 0; d < x->ndim; d++) drop[d] = x->sizes[d] == 1;
    for (int i = 0; i < a->ndims; i++) {
      if ((st = norm_dim(vm, name, a->dims[i], x->ndim, &d0))) return st;
      if (x->ndim && x->sizes[d0] == 1) drop[d0] = 1;
    }
    for (int d = 0; d < x->ndim; d++) if (!drop[d]) { o->sizes[k] = x->sizes[d]; o->sym[k++] = x->sym[d]; }
    o->ndim = k;
    return GRACE_OK;
  }
  case GRACE_OP_UNSQUEEZE:
    if (x->ndim >= GRACE_MAX_DIMS) return grace_set_error(vm, GRACE_EARG, "unsqueeze: already %d dims", x->ndim);
    if ((st = norm_dim(vm, name, a->ndims ? a->dims[0] : 0, x->ndim + 1, &d0))) return st;
    for (int d = x->ndim; d > d0; d--) { o->sizes[d] = x->sizes[d - 1]; o->sym[d] = x->sym[d - 1]; }
    o->sizes[d0] = 1; o->sym[d0] = 0;
    o->ndim++;
    return GRACE_OK;
  default:
    return grace_set_error(vm, GRACE_EINTERNAL, "%s: not a view op", name);
  }
}

static grace_status infer_create(grace_vm *vm, grace_op op, const grace_attrs *a, ir_type *o) {
  memset(o, 0, sizeof *o);
  o->device = a->device;
  o->dtype = a->has_dtype ? a->dtype : op == GRACE_OP_RANDINT ? GRACE_INT64 : GRACE_FLOAT32;
  o->ndim = a->nshape;
  memcpy(o->sizes, a->shape, sizeof o->sizes);
  if (op == GRACE_OP_ARANGE) {
    double n = a->c != 0 ? (a->b - a->a) / a->c : -1;
    if (!(n >= 0)) return grace_set_error(vm, GRACE_EARG, "arange: bounds %g to %g are inconsistent with step %g", a->a, a->b, a->c);
    o->ndim = 1;
    o->sizes[0] = (int64_t)n + ((double)(int64_t)n < n);
    if ((a->exact & 7) == 7 && !grace_dtype_is_float(o->dtype)) {   /* as the kernel: exact integer range */
      int64_t s = a->ia, e = a->ib, k = a->ic;
      o->sizes[0] = k > 0 ? (e > s ? (e - s + k - 1) / k : 0) : (s > e ? (s - e - k - 1) / -k : 0);
    }
  } else if (op == GRACE_OP_LINSPACE) { o->ndim = 1; o->sizes[0] = a->i0; }
  else if (op == GRACE_OP_EYE) { o->ndim = 2; if (a->nshape == 1) o->sizes[1] = a->shape[0]; }
  for (int d = 0; d < o->ndim; d++)
    if (o->sizes[d] < 0) return grace_set_error(vm, GRACE_EARG, "%s: negative size %lld", grace_op_name(op), (long long)o->sizes[d]);
  return GRACE_OK;
}

grace_status ir_infer(grace_vm *vm, int op, int nin, const ir_type *const *in, const grace_attrs *a, int nout, ir_type *out) {
  if (op >= GRACE_NOPS) return grace_set_error(vm, GRACE_EINTERNAL, "%s: inputs have no inferred type", ir_op_name(op));
  grace_op gop = (grace_op)op;
  const char *name = grace_op_name(gop);
  for (int i = 0; i < nin; i++)
    if (!in[i] && !grace_op_input_optional(gop, i))
      return grace_set_error(vm, GRACE_EARG, "%s: input %d is missing", name, i + 1);
  grace_status st;
  if (gop == GRACE_OP_ATTENTION) return infer_attention(vm, in, out);
  switch (grace_op_kind(gop)) {
  case GRACE_KIND_UNARY:
    return infer_unary(vm, gop, in[0], a, out);
  case GRACE_KIND_BINARY: case GRACE_KIND_COMPARE:
    if ((st = broadcast(vm, name, 2, in, out))) return st;
    out->wrapped = 0;
    /* host numbers and 0-d host tensors follow the other operand onto the device */
    out->device = in[0]->device == GRACE_CUDA || in[1]->device == GRACE_CUDA ? GRACE_CUDA : GRACE_CPU;
    if (gop == GRACE_OP_SUB && (in[0]->dtype == GRACE_BOOL || in[1]->dtype == GRACE_BOOL))
      return grace_set_error(vm, GRACE_EDTYPE, "sub: subtraction with a bool tensor is not supported (%s - %s); "
                             "to invert a mask, use logical_not()", grace_dtype_name(in[0]->dtype),
                             grace_dtype_name(in[1]->dtype));
    out->dtype = grace_op_kind(gop) == GRACE_KIND_COMPARE ? GRACE_BOOL : result_type(2, in);
    if (gop == GRACE_OP_DIV && !grace_dtype_is_float(out->dtype)) out->dtype = GRACE_FLOAT32;
    return GRACE_OK;
  case GRACE_KIND_TERNARY:
    if (gop == GRACE_OP_MASKED_FILL) {
      if (in[1]->dtype != GRACE_BOOL)
        return grace_set_error(vm, GRACE_EDTYPE, "masked_fill: mask must be bool, got %s", grace_dtype_name(in[1]->dtype));
      if (in[2]->ndim != 0)
        return grace_set_error(vm, GRACE_ESHAPE, "masked_fill: value must be a 0-d tensor or a number, got shape %s", SHAPE(in[2]));
      const ir_type *xm[2] = {in[0], in[1]};
      if ((st = broadcast(vm, name, 2, xm, out))) return st;
      if (out->ndim != in[0]->ndim || memcmp(out->sizes, in[0]->sizes, sizeof(int64_t) * (size_t)out->ndim))
        return grace_set_error(vm, GRACE_ESHAPE, "masked_fill: mask of shape %s does not broadcast to the input's shape %s",
                               SHAPE(in[1]), SHAPE(in[0]));
      *out = *in[0];
      out->wrapped = 0;
      return GRACE_OK;
    }
    if ((st = broadcast(vm, name, 3, in, out))) return st;
    out->wrapped = 0;
    out->device = in[0]->device == GRACE_CUDA || in[1]->device == GRACE_CUDA || in[2]->device == GRACE_CUDA
                  ? GRACE_CUDA : GRACE_CPU;
    out->dtype = result_type(2, in + 1);
    return GRACE_OK;
  case GRACE_KIND_REDUCE: return infer_reduce(vm, gop, in[0], a, nout, out);
  case GRACE_KIND_SCAN: return infer_scan(vm, gop, in[0], a, nout, out);
  case GRACE_KIND_MATMUL: return infer_matmul(vm, in[0], in[1], out);
  case GRACE_KIND_VIEW: return infer_view(vm, gop, in[0], a, out);
  case GRACE_KIND_MOVE: return infer_move(vm, gop, nin, in, a, out);
  case GRACE_KIND_NORM: return infer_norm(vm, gop, nin, in, out);
  case GRACE_KIND_CREATE: return infer_create(vm, gop, a, out);
  case GRACE_KIND_INPLACE: {
    const ir_type *dst = in[0];
    if (gop == GRACE_OP_COPY_) {
      const ir_type *both[2] = {dst, in[1]};
      ir_type b;
      if ((st = broadcast(vm, name, 2, both, &b))) return st;
      if (b.ndim != dst->ndim || memcmp(b.sizes, dst->sizes, sizeof(int64_t) * (size_t)b.ndim))
        return grace_set_error(vm, GRACE_ESHAPE, "copy_: source of shape %s does not broadcast to the destination's shape %s",
                               SHAPE(in[1]), SHAPE(dst));
    }
    *out = *dst;
    out->wrapped = 0;
    return GRACE_OK;
  }
  default:
    return grace_set_error(vm, GRACE_EINTERNAL, "%s: no type rule", name);
  }
}
