/* lgrace_index.c: x[key] and x[key] = v for keys other than one integer (lgrace_tensor.c's __index and
 * __newindex hand them here), and x:index_put_. A key is a tensor or a table of entries, one per dim from the
 * first (Torch7's forms): an integer selects (the dim goes), {first, last} is an inclusive range, {i} is {i, i},
 * {} all of the dim, a bool tensor a mask over as many dims as it has, an integer tensor positions along one dim.
 * Integers and ranges become views (select, narrow), so compiled functions fuse them; tensors become ops
 * (index_select, masked_select, nonzero, index_put_). Intermediate results stay on the Lua stack as userdata, so
 * an error at any step leaks nothing. */
#include <string.h>
#include "lua/lgrace_tensor.h"

enum { K_INT, K_RANGE, K_ALL, K_TENSOR };
typedef struct part {
  int kind;
  int64_t a, b;          /* K_INT: 0-based position; K_RANGE: 0-based start, length */
  grace_tensor *t;       /* K_TENSOR (held by the key table) */
} part;

typedef struct key {
  int n, tensor;         /* parts; the part that is a tensor, or -1 */
  int ndims;             /* dims of x the key covers */
  part p[GRACE_MAX_DIMS];
} key;

static int64_t key_int(lua_State *L, lg_ctx *c, int idx) {
  if (!lua_isinteger(L, idx))
    lg_errorf(L, c, "index: expected an integer, a {first, last} range, {} or a tensor, got %s%s%s",
              lua_type(L, idx) == LUA_TNUMBER ? "the number " : luaL_typename(L, idx),
              lua_type(L, idx) == LUA_TNUMBER ? lua_tostring(L, idx) : "", "");
  return (int64_t)lua_tointeger(L, idx);
}

/* A 1-based position (negative from the end) along dim d of size n, checked. */
static int64_t key_pos(lua_State *L, lg_ctx *c, int64_t i, int d, int64_t n, grace_tensor *x) {
  int64_t q = i < 0 ? i + n : i - 1;
  if (i == 0) lg_errorf(L, c, "index: 0 is not a position along dim %d (positions are 1-based)", d + 1);
  if (q < 0 || q >= n)
    lg_errorf(L, c, "index: %lld is out of range for dim %d of size %lld (shape %s)", (long long)i, d + 1, (long long)n,
              LG_SHAPE(x));
  return q;
}

/* {first, last}, inclusive, 1-based, negatives from the end (-1 is the last); {i, i - 1} is empty. */
static void key_range(lua_State *L, lg_ctx *c, int idx, int d, grace_tensor *x, part *p) {
  int64_t n = grace_tensor_sizes(x)[d];
  grace_trace_size_read(c->vm, x, d);   /* the bounds are resolved against the size: a trace keeps it */
  lua_Integer len = (lua_Integer)lua_rawlen(L, idx);
  if (len == 0) { p->kind = K_ALL; return; }
  if (len > 2) lg_errorf(L, c, "index: a range is {first, last}, got a table of %lld entries for dim %d", (long long)len, d + 1);
  lua_rawgeti(L, idx, 1);
  int64_t f = key_int(L, c, -1), l = f;
  lua_pop(L, 1);
  if (len == 2) { lua_rawgeti(L, idx, 2); l = key_int(L, c, -1); lua_pop(L, 1); }
  int64_t s = f < 0 ? f + n + 1 : f, e = l < 0 ? l + n + 1 : l;
  if (f == 0 || s < 1 || s > n + 1 || e > n || e < s - 1)
    lg_errorf(L, c, "index: range {%lld, %lld} is out of range for dim %d of size %lld (shape %s)", (long long)f,
              (long long)l, d + 1, (long long)n, LG_SHAPE(x));
  p->kind = K_RANGE;
  p->a = s - 1;
  p->b = e - s + 1;
}

/* Parses the key at idx against x. */
static void parse_key(lua_State *L, lg_ctx *c, int idx, grace_tensor *x, key *k) {
  int nd = grace_tensor_ndim(x);
  memset(k, 0, sizeof *k);
  k->tensor = -1;
  if (lg_is_tensor(L, idx)) {
    k->n = 1;
    k->tensor = 0;
    k->p[0].kind = K_TENSOR;
    k->p[0].t = lg_check(L, c, idx, "index");
  } else if (lua_type(L, idx) == LUA_TTABLE) {
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
    if (n > nd) lg_errorf(L, c, "index: %lld indices for a tensor of %d dims (shape %s)", (long long)n, nd, LG_SHAPE(x));
    k->n = (int)n;
    for (int i = 0; i < k->n; i++) {
      part *p = &k->p[i];
      lua_rawgeti(L, idx, i + 1);
      if (lua_type(L, -1) == LUA_TNUMBER) {
        if (k->ndims >= nd) lg_errorf(L, c, "index: too many indices for a tensor of %d dims (shape %s)", nd, LG_SHAPE(x));
        p->kind = K_INT;
        grace_trace_size_read(c->vm, x, k->ndims);   /* a negative index is resolved against the size */
        p->a = key_pos(L, c, key_int(L, c, -1), k->ndims, grace_tensor_sizes(x)[k->ndims], x);
      } else if (lua_type(L, -1) == LUA_TTABLE) {
        if (k->ndims >= nd) lg_errorf(L, c, "index: too many indices for a tensor of %d dims (shape %s)", nd, LG_SHAPE(x));
        key_range(L, c, lua_gettop(L), k->ndims, x, p);
      } else if (lg_is_tensor(L, -1)) {
        if (k->tensor >= 0)
          lg_errorf(L, c, "index: one index tensor per key (got a second at entry %d); see index_put_ and gather", i + 1);
        k->tensor = i;
        p->kind = K_TENSOR;
        p->t = lg_check(L, c, -1, "index");
      } else {
        lg_errorf(L, c, "index: entry %d of the key is a %s (expected an integer, {first, last}, {} or a tensor)", i + 1,
                  luaL_typename(L, -1));
      }
      lua_pop(L, 1);
      k->ndims += p->kind != K_TENSOR ? 1 : grace_tensor_dtype(p->t) == GRACE_BOOL ? grace_tensor_ndim(p->t) : 1;
    }
  } else {
    lg_errorf(L, c, "index: a tensor is indexed by an integer, a table or a tensor, got %s", luaL_typename(L, idx));
  }
  if (k->ndims > nd) lg_errorf(L, c, "index: the key covers %d dims of a tensor of %d (shape %s)", k->ndims, nd, LG_SHAPE(x));
}

/* Runs a one-output op, leaving its result on the stack; returns it. */
static grace_tensor *step(lua_State *L, lg_ctx *c, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a) {
  luaL_checkstack(L, 4, "index");
  lg_run(L, c, op, nin, in, a, 1);
  return lg_totensor(L, -1);
}

static grace_tensor *reshape(lua_State *L, lg_ctx *c, grace_tensor *t, int nd, const int64_t *sz) {
  grace_attrs a = {.nshape = nd};
  memcpy(a.shape, sz, sizeof(int64_t) * (size_t)nd);
  return step(L, c, GRACE_OP_RESHAPE, 1, &t, &a);
}

/* Applies the views of an integer or range part at dim *cd. */
static grace_tensor *apply_view(lua_State *L, lg_ctx *c, grace_tensor *cur, const part *p, int *cd) {
  grace_attrs a = {.ndims = 1, .dims = {*cd}, .i0 = p->a, .i1 = p->b};
  if (p->kind == K_INT) return step(L, c, GRACE_OP_SELECT, 1, &cur, &a);
  (*cd)++;
  return p->kind == K_RANGE ? step(L, c, GRACE_OP_NARROW, 1, &cur, &a) : cur;
}

static void check_mask(lua_State *L, lg_ctx *c, grace_tensor *cur, grace_tensor *m, int cd) {
  int mn = grace_tensor_ndim(m);
  if (mn == 0) lg_errorf(L, c, "index: a 0-d mask cannot index a dim");
  for (int d = 0; d < mn; d++)
    if (grace_tensor_sizes(m)[d] != grace_tensor_sizes(cur)[cd + d])
      lg_errorf(L, c, "index: mask of shape %s does not match the indexed tensor's shape %s at dim %d (%lld against %lld)",
                LG_SHAPE(m), LG_SHAPE(cur), cd + d + 1, (long long)grace_tensor_sizes(m)[d],
                (long long)grace_tensor_sizes(cur)[cd + d]);
}

/* cur indexed along dim cd by a tensor: an integer tensor of shape I puts I there (index_select of its elements);
 * a mask over dims cd.. puts one dim of its true elements' count (masked_select when it covers all of cur, else
 * the dims merged and index_select by the nonzero positions). */
static grace_tensor *apply_tensor(lua_State *L, lg_ctx *c, grace_tensor *cur, grace_tensor *t, int *cd) {
  int nd = grace_tensor_ndim(cur), tn = grace_tensor_ndim(t), d0 = *cd;
  const int64_t *cs = grace_tensor_sizes(cur);
  int64_t sz[GRACE_MAX_DIMS], all = -1;
  grace_attrs a = {.ndims = 1, .dims = {d0}};
  if (grace_tensor_dtype(t) == GRACE_BOOL) {
    check_mask(L, c, cur, t, d0);
    (*cd)++;
    if (d0 == 0 && tn == nd) return step(L, c, GRACE_OP_MASKED_SELECT, 2, (grace_tensor *[]){cur, t}, NULL);
    int k = 0;
    int64_t merged = 1;
    for (int d = 0; d < d0; d++) sz[k++] = cs[d];
    for (int d = d0; d < d0 + tn; d++) merged *= cs[d];
    sz[k++] = merged;
    for (int d = d0 + tn; d < nd; d++) sz[k++] = cs[d];
    cur = reshape(L, c, cur, k, sz);
    grace_tensor *flat = reshape(L, c, t, 1, &all);
    grace_tensor *nz = step(L, c, GRACE_OP_NONZERO, 1, &flat, NULL);
    nz = reshape(L, c, nz, 1, &all);
    return step(L, c, GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){cur, nz}, &a);
  }
  if (tn == 1) { (*cd)++; return step(L, c, GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){cur, t}, &a); }
  if (nd - 1 + tn > GRACE_MAX_DIMS) lg_errorf(L, c, "index: the result would have more than %d dims", GRACE_MAX_DIMS);
  grace_tensor *flat = reshape(L, c, t, 1, &all);
  grace_tensor *r = step(L, c, GRACE_OP_INDEX_SELECT, 2, (grace_tensor *[]){cur, flat}, &a);
  int k = 0;
  for (int d = 0; d < d0; d++) sz[k++] = cs[d];
  for (int d = 0; d < tn; d++) sz[k++] = grace_tensor_sizes(t)[d];   /* a 0-d index drops the dim, as an integer */
  for (int d = d0 + 1; d < nd; d++) sz[k++] = cs[d];
  *cd += tn;
  return reshape(L, c, r, k, sz);
}

/* x[key] for a table or tensor key (x at 1, the key at 2). */
int lg_index_get(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "index"), *cur = x;
  key k;
  parse_key(L, c, 2, x, &k);
  lua_settop(L, 2);
  int cd = 0;
  for (int i = 0; i < k.n; i++)
    cur = k.p[i].kind == K_TENSOR ? apply_tensor(L, c, cur, k.p[i].t, &cd) : apply_view(L, c, cur, &k.p[i], &cd);
  if (cur == x) lua_pushvalue(L, 1);   /* x[{}]: all of x */
  return 1;
}

/* Moves dims [p, p + k) of an n-dim tensor to the front (a view). */
static grace_tensor *to_front(lua_State *L, lg_ctx *c, grace_tensor *t, int p, int k) {
  int n = grace_tensor_ndim(t), j = 0;
  if (p == 0) return t;
  grace_attrs a = {.ndims = n};
  for (int d = p; d < p + k; d++) a.dims[j++] = d;
  for (int d = 0; d < p; d++) a.dims[j++] = d;
  for (int d = p + k; d < n; d++) a.dims[j++] = d;
  return step(L, c, GRACE_OP_PERMUTE, 1, &t, &a);
}

/* view[t at dim p] = v through index_put_ (after moving the indexed dims first, and the values' matching dims). */
static void put_tensor(lua_State *L, lg_ctx *c, grace_tensor *view, grace_tensor *t, int p, int vidx) {
  int is_mask = grace_tensor_dtype(t) == GRACE_BOOL, tn = grace_tensor_ndim(t), vn = grace_tensor_ndim(view);
  int k = is_mask ? tn : 1, m = is_mask ? 1 : tn;   /* dims of view indexed; dims of the selection they give */
  if (is_mask) check_mask(L, c, view, t, p);
  grace_tensor *v = lg_operand(L, c, vidx, "index");
  if (lua_isnumber(L, vidx) || lua_isboolean(L, vidx)) {   /* as a tensor of view's dtype, kept on the stack */
    grace_attrs ca = {.has_dtype = 1, .dtype = grace_tensor_dtype(view)};
    v = step(L, c, GRACE_OP_CAST, 1, &v, &ca);
    if (grace_tensor_device(view) != GRACE_CPU) {
      grace_attrs da = {.device = grace_tensor_device(view)};
      v = step(L, c, GRACE_OP_TO_DEVICE, 1, &v, &da);
    }
  }
  int sn = vn - k + m, pn = grace_tensor_ndim(v);
  if (p > 0 && pn > 0) {
    if (pn > sn)
      lg_errorf(L, c, "index: values of shape %s have more dims than the selection (%d)", LG_SHAPE(v), sn);
    int64_t sz[GRACE_MAX_DIMS];
    for (int d = 0; d < sn - pn; d++) sz[d] = 1;
    memcpy(sz + sn - pn, grace_tensor_sizes(v), sizeof(int64_t) * (size_t)pn);
    v = to_front(L, c, reshape(L, c, v, sn, sz), p, m);
  }
  view = to_front(L, c, view, p, k);
  grace_tensor *in[3] = {view, v, t};
  if (grace_run(c->vm, GRACE_OP_INDEX_PUT_, 3, in, NULL, 0, NULL) != GRACE_OK) lg_fail(L, c);
}

/* x[key] = v for a table or tensor key (x at 1, the key at 2, v at 3): the views of the integer and range
 * entries, then fill_/copy_ (no tensor), masked_fill (a mask and a number), or index_put_. */
int lg_index_set(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "index"), *cur = x;
  key k;
  parse_key(L, c, 2, x, &k);
  lua_settop(L, 3);
  int cd = 0, tp = -1;
  for (int i = 0; i < k.n; i++) {
    if (k.p[i].kind != K_TENSOR) { cur = apply_view(L, c, cur, &k.p[i], &cd); continue; }
    tp = cd;
    cd += grace_tensor_dtype(k.p[i].t) == GRACE_BOOL ? grace_tensor_ndim(k.p[i].t) : 1;
  }
  if (tp < 0) { lg_assign(L, c, cur, 3, "x[key] = v"); return 0; }
  grace_tensor *t = k.p[k.tensor].t;
  int vt = lua_type(L, 3);
  if (grace_tensor_dtype(t) == GRACE_BOOL && (vt == LUA_TNUMBER || vt == LUA_TBOOLEAN)) {
    check_mask(L, c, cur, t, tp);
    int nd = grace_tensor_ndim(cur), tn = grace_tensor_ndim(t);
    int64_t sz[GRACE_MAX_DIMS];
    for (int d = 0; d < nd; d++) sz[d] = d >= tp && d < tp + tn ? grace_tensor_sizes(t)[d - tp] : 1;
    grace_tensor *m = reshape(L, c, t, nd, sz);
    grace_tensor *in[3] = {cur, m, lg_operand(L, c, 3, "index")};
    grace_tensor *filled = step(L, c, GRACE_OP_MASKED_FILL, 3, in, NULL);
    grace_tensor *cp[2] = {cur, filled};
    if (grace_run(c->vm, GRACE_OP_COPY_, 2, cp, NULL, 0, NULL) != GRACE_OK) lg_fail(L, c);
    return 0;
  }
  put_tensor(L, c, cur, t, tp, 3);
  lg_drop(c);
  return 0;
}

/* x:index_put_({idx1, idx2, ...} or {mask}, values [, accumulate]): returns x. */
static int m_index_put_(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *in[2 + GRACE_MAX_DIMS];
  in[0] = lg_check(L, c, 1, "index_put_");
  if (lua_type(L, 2) != LUA_TTABLE)
    return lg_errorf(L, c, "index_put_: expected a table of index tensors, got %s", luaL_typename(L, 2));
  lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
  if (n < 1 || n > GRACE_MAX_DIMS)
    return lg_errorf(L, c, "index_put_: expected 1 to %d index tensors, got %lld", GRACE_MAX_DIMS, (long long)n);
  grace_attrs a = {0};
  if (!lua_isnoneornil(L, 4)) {
    if (!lua_isboolean(L, 4)) return lg_errorf(L, c, "index_put_: accumulate must be a boolean, got %s", luaL_typename(L, 4));
    a.flag = lua_toboolean(L, 4);
  }
  in[1] = lg_operand(L, c, 3, "index_put_");
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, 2, i);   /* the table keeps the tensor alive */
    in[1 + i] = lg_totensor(L, -1);
    if (!in[1 + i])
      return lg_errorf(L, c, "index_put_: index %lld is a %s, expected a tensor", (long long)i, luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  if (grace_run(c->vm, GRACE_OP_INDEX_PUT_, 2 + (int)n, in, &a, 0, NULL) != GRACE_OK) return lg_fail(L, c);
  lg_drop(c);
  lua_settop(L, 1);
  return 1;
}

const luaL_Reg lg_index_methods[] = {
  {"index_put_", m_index_put_},
  {NULL, NULL}
};
