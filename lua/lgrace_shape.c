/* lgrace_shape.c: shape methods (views: reshape, view, transpose, permute, expand, narrow, select,
 * squeeze, unsqueeze, flatten, split, chunk; data movement with dims: index_select, gather, scatter,
 * triu/tril, repeat) and the module functions cat, stack and where. Dims and positions are 1-based. */
#include <stdio.h>
#include <string.h>
#include "lua/lgrace_tensor.h"

/* x:reshape(shape) / x:view(shape): a table or numbers, one -1 allowed */
static int reshape_like(lua_State *L, grace_op op) {
  const char *name = grace_op_name(op);
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, name);
  grace_attrs a = {0};
  lg_shape(L, c, 2, name, &a, 1);
  return lg_run(L, c, op, 1, &x, &a, 1);
}
static int m_reshape(lua_State *L) { return reshape_like(L, GRACE_OP_RESHAPE); }
static int m_view(lua_State *L) { return reshape_like(L, GRACE_OP_VIEW); }

static int m_expand(lua_State *L) { return reshape_like(L, GRACE_OP_EXPAND); }

/* x:rep(2, 3) is PyTorch's x.repeat(2, 3) */
static int m_repeat(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "repeat");
  grace_attrs a = {0};
  lg_shape(L, c, 2, "repeat", &a, 0);
  return lg_run(L, c, GRACE_OP_REPEAT, 1, &x, &a, 1);
}

static int m_transpose(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "transpose");
  grace_attrs a = {0};
  a.ndims = 2;
  a.dims[0] = lg_dim(L, c, 2, "transpose");
  a.dims[1] = lg_dim(L, c, 3, "transpose");
  return lg_run(L, c, GRACE_OP_TRANSPOSE, 1, &x, &a, 1);
}

/* x:permute(2, 1, 3) or x:permute({2, 1, 3}) */
static int m_permute(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "permute");
  grace_attrs a = {0};
  if (lua_type(L, 2) == LUA_TTABLE) lg_dims(L, c, 2, "permute", &a);
  else {
    int top = lua_gettop(L);
    if (top - 1 > GRACE_MAX_DIMS) return lg_errorf(L, c, "permute: more than %d dims given", GRACE_MAX_DIMS);
    for (int i = 2; i <= top; i++) a.dims[a.ndims++] = lg_dim(L, c, i, "permute");
  }
  return lg_run(L, c, GRACE_OP_PERMUTE, 1, &x, &a, 1);
}

/* x:narrow(dim, start, length) */
static int m_narrow(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "narrow");
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = lg_dim(L, c, 2, "narrow");
  a.i0 = lg_pos(L, c, 3, "narrow", "start");
  a.i1 = lg_int(L, c, 4, "narrow", "length");
  return lg_run(L, c, GRACE_OP_NARROW, 1, &x, &a, 1);
}

/* x:select(dim, i) */
static int m_select(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "select");
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = lg_dim(L, c, 2, "select");
  a.i0 = lg_pos(L, c, 3, "select", "index");
  return lg_run(L, c, GRACE_OP_SELECT, 1, &x, &a, 1);
}

/* x:squeeze([dims]): no dims drops every size-1 dim */
static int m_squeeze(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "squeeze");
  grace_attrs a = {0};
  lg_dims(L, c, 2, "squeeze", &a);
  return lg_run(L, c, GRACE_OP_SQUEEZE, 1, &x, &a, 1);
}

/* x:unsqueeze(d): the new dim is d of the result (1 .. ndim+1, or -1 for last) */
static int m_unsqueeze(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "unsqueeze");
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = lg_dim(L, c, 2, "unsqueeze");
  return lg_run(L, c, GRACE_OP_UNSQUEEZE, 1, &x, &a, 1);
}

/* x:flatten([start=1] [, end=-1]) through reshape */
static int m_flatten(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "flatten");
  int nd = grace_tensor_ndim(x);
  const int64_t *sz = grace_tensor_sizes(x);
  int s = lua_isnoneornil(L, 2) ? 0 : lg_norm_dim(L, c, lg_dim(L, c, 2, "flatten"), nd, "flatten");
  int e = lua_isnoneornil(L, 3) ? (nd > 0 ? nd - 1 : 0) : lg_norm_dim(L, c, lg_dim(L, c, 3, "flatten"), nd, "flatten");
  if (s > e) return lg_errorf(L, c, "flatten: start dim %d comes after end dim %d", s + 1, e + 1);
  grace_attrs a = {0};
  if (nd == 0) {
    a.nshape = 1;
    a.shape[0] = 1;
  } else {
    for (int d = 0; d < s; d++) a.shape[a.nshape++] = sz[d];
    int64_t n = 1;
    for (int d = s; d <= e; d++) n *= sz[d];
    a.shape[a.nshape++] = n;
    for (int d = e + 1; d < nd; d++) a.shape[a.nshape++] = sz[d];
  }
  return lg_run(L, c, GRACE_OP_RESHAPE, 1, &x, &a, 1);
}

/* Pushes a table of narrow views of x along dim d with the given piece sizes. */
static int push_pieces(lua_State *L, lg_ctx *c, grace_tensor *x, int d, int n, const int64_t *len) {
  lua_createtable(L, n, 0);
  int tbl = lua_gettop(L);
  int64_t start = 0;
  for (int i = 0; i < n; i++) {
    grace_attrs a = {0};
    a.ndims = 1;
    a.dims[0] = d;
    a.i0 = start;
    a.i1 = len[i];
    lg_run(L, c, GRACE_OP_NARROW, 1, &x, &a, 1);
    lua_rawseti(L, tbl, i + 1);
    start += len[i];
  }
  return 1;
}

/* split and chunk: the piece sizes go in a scratch userdata, so an error cannot leak them */
static int64_t *pieces_buf(lua_State *L, int64_t n) {
  return lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof(int64_t), 0);
}

static int split_dim(lua_State *L, lg_ctx *c, grace_tensor *x, int idx, const char *op) {
  if (grace_tensor_ndim(x) == 0) lg_errorf(L, c, "%s: not possible on a 0-d tensor", op);
  return lg_norm_dim(L, c, lua_isnoneornil(L, idx) ? 0 : lg_dim(L, c, idx, op), grace_tensor_ndim(x), op);
}

/* x:split(size [, dim=1]) or x:split({sizes} [, dim=1]) */
static int m_split(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "split");
  int d = split_dim(L, c, x, 3, "split");
  grace_trace_size_read(c->vm, x, d);   /* the pieces are computed from the size */
  int64_t total = grace_tensor_sizes(x)[d], n, *len;
  if (lua_type(L, 2) == LUA_TTABLE) {
    n = (int64_t)luaL_len(L, 2);
    len = pieces_buf(L, n);
    int64_t sum = 0;
    for (int64_t i = 0; i < n; i++) {
      lua_geti(L, 2, (lua_Integer)i + 1);
      len[i] = lg_int(L, c, -1, "split", "a size");
      lua_pop(L, 1);
      if (len[i] < 0) return lg_errorf(L, c, "split: sizes must be >= 0, got %lld", (long long)len[i]);
      if (__builtin_add_overflow(sum, len[i], &sum))   /* lua/ sees only grace.h: the builtin itself */
        return lg_errorf(L, c, "split: sizes sum past the largest integer (dim %d has size %lld)", d + 1,
                         (long long)total);
    }
    if (sum != total)
      return lg_errorf(L, c, "split: sizes sum to %lld but dim %d has size %lld (shape %s)", (long long)sum, d + 1,
                       (long long)total, LG_SHAPE(x));
  } else {
    int64_t size = lg_int(L, c, 2, "split", "size");
    if (size <= 0 && !(size == 0 && total == 0))
      return lg_errorf(L, c, "split: size must be positive, got %lld", (long long)size);
    n = total == 0 ? 1 : total / size + (total % size != 0);   /* ceil without total + size - 1 overflowing */
    if (n > (1 << 24)) return lg_errorf(L, c, "split: too many pieces (%lld)", (long long)n);
    len = pieces_buf(L, n);
    for (int64_t i = 0; i < n; i++) len[i] = total - i * size < size ? total - i * size : size;
  }
  if (n > (1 << 24)) return lg_errorf(L, c, "split: too many pieces (%lld)", (long long)n);
  return push_pieces(L, c, x, d, (int)n, len);
}

/* x:chunk(n [, dim=1]): pieces of ceil(size / n), so fewer than n when they run out (as PyTorch) */
static int m_chunk(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "chunk");
  int64_t k = lg_int(L, c, 2, "chunk", "the number of chunks");
  if (k <= 0) return lg_errorf(L, c, "chunk: the number of chunks must be positive, got %lld", (long long)k);
  int d = split_dim(L, c, x, 3, "chunk");
  grace_trace_size_read(c->vm, x, d);   /* the pieces are computed from the size */
  /* ceilings without total + k - 1 overflowing; size is 0 only when total is */
  int64_t total = grace_tensor_sizes(x)[d], size = total / k + (total % k != 0);
  int64_t n = total == 0 ? 1 : total / size + (total % size != 0);
  int64_t *len = pieces_buf(L, n);
  for (int64_t i = 0; i < n; i++) len[i] = total - i * size < size ? total - i * size : size;
  return push_pieces(L, c, x, d, (int)n, len);
}

/* x:index_select(dim, index), x:gather(dim, index) (index values 1-based) */
static int dim_index(lua_State *L, grace_op op) {
  const char *name = grace_op_name(op);
  lg_ctx *c = lg_begin(L);
  grace_tensor *in[2];
  in[0] = lg_check(L, c, 1, name);
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = lg_dim(L, c, 2, name);
  in[1] = lg_check(L, c, 3, name);
  return lg_run(L, c, op, 2, in, &a, 1);
}
static int m_index_select(lua_State *L) { return dim_index(L, GRACE_OP_INDEX_SELECT); }
static int m_gather(lua_State *L) { return dim_index(L, GRACE_OP_GATHER); }

/* x:scatter(dim, index, src_or_number), out of place; a number is expanded to index's shape */
static int m_scatter(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *in[3];
  in[0] = lg_check(L, c, 1, "scatter");
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = lg_dim(L, c, 2, "scatter");
  in[1] = lg_check(L, c, 3, "scatter");
  in[2] = lg_operand(L, c, 4, "scatter");
  if (!lg_is_tensor(L, 4)) {   /* as PyTorch's scatter(dim, index, value): the value in x's dtype */
    grace_attrs ca = {0};
    ca.has_dtype = 1;
    ca.dtype = grace_tensor_dtype(in[0]);
    in[2] = lg_run_tmp(L, c, GRACE_OP_CAST, 1, &in[2], &ca);
    if (grace_tensor_device(in[0]) != GRACE_CPU) {   /* expanded, it is no longer a number: it must sit with x */
      grace_attrs da = {0};
      da.device = grace_tensor_device(in[0]);
      in[2] = lg_run_tmp(L, c, GRACE_OP_TO_DEVICE, 1, &in[2], &da);
    }
    grace_attrs e = {0};
    e.nshape = grace_tensor_ndim(in[1]);
    grace_trace_size_read(c->vm, in[1], -1);   /* the number is expanded to these sizes */
    memcpy(e.shape, grace_tensor_sizes(in[1]), (size_t)e.nshape * sizeof(int64_t));
    in[2] = lg_run_tmp(L, c, GRACE_OP_EXPAND, 1, &in[2], &e);
  }
  return lg_run(L, c, GRACE_OP_SCATTER, 3, in, &a, 1);
}

/* x:triu([k=0]), x:tril([k=0]): k is a diagonal offset, not a position */
static int tri(lua_State *L, grace_op op) {
  const char *name = grace_op_name(op);
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, name);
  grace_attrs a = {0};
  a.i0 = lua_isnoneornil(L, 2) ? 0 : lg_int(L, c, 2, name, "the diagonal");
  return lg_run(L, c, op, 1, &x, &a, 1);
}
static int m_triu(lua_State *L) { return tri(L, GRACE_OP_TRIU); }
static int m_tril(lua_State *L) { return tri(L, GRACE_OP_TRIL); }

/* x:where(cond, y) is PyTorch's Tensor.where: cond ? x : y (grace.where(cond, a, b) is the function) */
static int m_where(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *in[3];
  in[1] = lg_check(L, c, 1, "where");
  in[0] = lg_check(L, c, 2, "where");
  in[2] = lg_operand(L, c, 3, "where");
  return lg_run(L, c, GRACE_OP_WHERE, 3, in, NULL, 1);
}

const luaL_Reg lg_view_methods[] = {
  {"reshape", m_reshape},
  {"view", m_view},
  {"expand", m_expand},
  {"rep", m_repeat},
  {"repeat", m_repeat},
  {"transpose", m_transpose},
  {"permute", m_permute},
  {"narrow", m_narrow},
  {"select", m_select},
  {"squeeze", m_squeeze},
  {"unsqueeze", m_unsqueeze},
  {"flatten", m_flatten},
  {"split", m_split},
  {"chunk", m_chunk},
  {"index_select", m_index_select},
  {"gather", m_gather},
  {"scatter", m_scatter},
  {"triu", m_triu},
  {"tril", m_tril},
  {"where", m_where},
  {NULL, NULL}
};

/* ---- module functions ---- */
/* grace.cat(list [, dim=1]) and grace.stack(list [, dim=1]) */
static int cat_like(lua_State *L, grace_op op) {
  const char *name = grace_op_name(op);
  lg_ctx *c = lg_begin(L);
  if (lua_type(L, 1) != LUA_TTABLE) return lg_errorf(L, c, "%s: expected a list of tensors, got %s", name, luaL_typename(L, 1));
  lua_Integer n = luaL_len(L, 1);
  if (n < 1) return lg_errorf(L, c, "%s: expected a non-empty list of tensors", name);
  if (n > (1 << 24)) return lg_errorf(L, c, "%s: too many tensors (%lld)", name, (long long)n);
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = lua_isnoneornil(L, 2) ? 0 : lg_dim(L, c, 2, name);
  lua_settop(L, 2);
  /* a reference to each: an __index metamethod may make a tensor nothing else holds, or close an earlier one */
  grace_tensor **in = lua_newuserdatauv(L, (size_t)n * sizeof *in, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, 1, i);
    in[i - 1] = lg_is_tensor(L, -1) && lg_totensor(L, -1) ? lg_check(L, c, -1, name) : NULL;
    if (!in[i - 1]) return lg_errorf(L, c, "%s: element %lld of the list is a %s, expected a tensor", name, (long long)i,
                                     luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  return lg_run(L, c, op, (int)n, in, &a, 1);
}
static int l_cat(lua_State *L) { return cat_like(L, GRACE_OP_CAT); }
static int l_stack(lua_State *L) { return cat_like(L, GRACE_OP_STACK); }

/* grace.where(cond, a, b): a and b tensors or numbers */
static int l_where(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *in[3];
  in[0] = lg_check(L, c, 1, "where");
  in[1] = lg_operand(L, c, 2, "where");
  in[2] = lg_operand(L, c, 3, "where");
  return lg_run(L, c, GRACE_OP_WHERE, 3, in, NULL, 1);
}

const luaL_Reg lg_module_shape[] = {
  {"cat", l_cat},
  {"stack", l_stack},
  {"where", l_where},
  {NULL, NULL}
};
