/* ir_infer.c: result types of every op from its input types and attributes, by op kind (views, data movement
 * and creation in ir_infer_shape.c). The rules and
 * error messages are those of eager execution, so a trace rejects what eager would reject. Symbolic
 * sizes pass through where a result dim is an input dim unchanged. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "ir/ir.h"
#include "ir/ir_pointwise.h"
#include "ir/ir_infer.h"
#include "base/base.h"

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

const char *ir_shape_str(const ir_type *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < t->ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)t->sizes[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}
#define SHAPE IR_SHAPE

static int tier(const ir_type *t) { return t->wrapped ? 2 : t->ndim == 0 ? 1 : 0; }

/* PyTorch's result type over every input (grace_result_type takes a few; its tiers fold one by one, so each
 * tier's dtypes are promoted first: cat and stack take any number of inputs). */
grace_dtype ir_result_type(int n, const ir_type *const *in) {
  grace_dtype acc[3] = {GRACE_BOOL, GRACE_BOOL, GRACE_BOOL}, dts[3];
  int has[3] = {0, 0, 0}, tiers[3], k = 0;
  for (int i = 0; i < n; i++) {
    if (!in[i]) continue;
    int t = tier(in[i]);
    grace_dtype dt = t == 2 && grace_dtype_is_float(in[i]->dtype) ? GRACE_FLOAT32 : in[i]->dtype;
    acc[t] = has[t] ? grace_promote_types(acc[t], dt) : dt;
    has[t] = 1;
  }
  for (int t = 0; t < 3; t++) if (has[t]) { dts[k] = acc[t]; tiers[k++] = t; }
  return grace_result_type(k, dts, tiers);
}
#define result_type ir_result_type

#define norm_dim grace_norm_dim   /* the VM's, so traced and eager calls say the same */
#define broadcast ir_broadcast

grace_status ir_broadcast(grace_vm *vm, const char *op, int n, const ir_type *const *in, ir_type *out) {
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
  else if (op == GRACE_OP_CAST) {
    if ((unsigned)a->dtype >= GRACE_NDTYPES) return grace_set_error(vm, GRACE_EDTYPE, "cast: invalid dtype %d", (int)a->dtype);
    o->dtype = a->dtype;
  }
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
  /* every backend's matmul checks (cpu_matmul.c calls this through vm_infer_tensors; the device runs one-op programs) */
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

static grace_status infer_op(grace_vm *vm, int op, int nin, const ir_type *const *in, const grace_attrs *a, int nout,
                             ir_type *out);

/* Every op's result shape checked in one place (vm_check_shape): a rule that multiplies or adds sizes (repeat,
 * expand, broadcast, cat) may make one past VM_MAX_NUMEL, which kernels could not index without overflow. */
grace_status ir_infer(grace_vm *vm, int op, int nin, const ir_type *const *in, const grace_attrs *a, int nout, ir_type *out) {
  grace_status st = infer_op(vm, op, nin, in, a, nout, out);
  const char *name = op < GRACE_NOPS ? grace_op_name((grace_op)op) : ir_op_name(op);
  /* the first result: the others (indices of max, ...) have its shape or a fixed one */
  return st != GRACE_OK || nout < 1 ? st : (grace_status)vm_check_shape(vm, name, out[0].ndim, out[0].sizes);
}

static grace_status infer_op(grace_vm *vm, int op, int nin, const ir_type *const *in, const grace_attrs *a, int nout,
                             ir_type *out) {
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
  case GRACE_KIND_VIEW: return ir_infer_view(vm, gop, in[0], a, out);
  case GRACE_KIND_MOVE: return ir_infer_move(vm, gop, nin, in, a, out);
  case GRACE_KIND_NORM: return infer_norm(vm, gop, nin, in, out);
  case GRACE_KIND_CREATE: return ir_infer_create(vm, gop, a, out);
  case GRACE_KIND_INPLACE: {
    const ir_type *dst = in[0];
    if (gop == GRACE_OP_INDEX_PUT_) return ir_infer_index_put(vm, nin, in, out);
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
