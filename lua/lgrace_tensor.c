/* lgrace_tensor.c: the tensor userdata (owning a grace_tensor reference, released by __gc/__close),
 * the per-state context owning temporaries, argument parsing shared by the binding, the ops registered
 * generically from the op table (GRACE_OPS), the metamethods, and lgrace_open_tensor. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "lua/lgrace_tensor.h"

static char ctx_key;   /* its address keys the context in the registry */

/* ---- context and temporaries ---- */
static const void *call_id(lua_State *L) {
  lua_Debug ar;
  return lua_getstack(L, 0, &ar) ? (const void *)ar.i_ci : NULL;
}

static void release_if(lg_ctx *c, int (*dead)(lg_ctx *, const lg_tmp *, void *), void *ud) {
  int k = 0;
  for (int i = 0; i < c->ntmp; i++) {
    if (dead(c, &c->tmp[i], ud)) grace_tensor_release(c->tmp[i].t);
    else c->tmp[k++] = c->tmp[i];
  }
  c->ntmp = k;
}

static int of_current_call(lg_ctx *c, const lg_tmp *t, void *ud) { return t->L == c->L && t->ci == c->ci; }
static int any_tmp(lg_ctx *c, const lg_tmp *t, void *ud) { return 1; }

/* The temporaries of the call that kept the last one. After a nested call (from Lua code run in the middle of this
 * one) that is the nested call's: this call's stay until the next call on its state sees them dead, never freed
 * early. */
void lg_drop(lg_ctx *c) {
  if (c->ntmp) release_if(c, of_current_call, NULL);
}

static int ctx_gc(lua_State *L) {
  lg_ctx *c = lua_touserdata(L, 1);
  if (!c) return 0;
  if (c->tmp) release_if(c, any_tmp, NULL);
  if (c->tmp && c->tmp != c->inline_tmp) {
    void *ud;
    lua_Alloc f = lua_getallocf(L, &ud);
    f(ud, c->tmp, sizeof *c->tmp * (size_t)c->cap, 0);
  }
  c->tmp = NULL;
  return 0;
}

/* A temporary of state L is dead when its call is not on L's call stack, as after an error raised through it.
 * Another state's (a coroutine's) stay: that state may be suspended in a resume from here. */
typedef struct { const void *live[64]; int nlive; } live_calls;
static int dead_in_state(lg_ctx *c, const lg_tmp *t, void *ud) {
  live_calls *lc = ud;
  if (t->L != c->L) return 0;
  for (int i = 0; i < lc->nlive; i++) if (lc->live[i] == t->ci) return 0;
  return lc->nlive < 64;   /* a stack deeper than that was not walked: keep rather than free a live one */
}

lg_ctx *lg_begin(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &ctx_key);
  lg_ctx *c = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (!c || !c->tmp) luaL_error(L, "grace: the module is not open");
  c->L = L;
  c->ci = call_id(L);
  c->want_grad = 0;
  if (c->ntmp) {   /* left over by an error in an earlier call, or held by calls this one runs inside */
    live_calls lc = {.nlive = 0};
    lua_Debug ar;
    for (int level = 1; lc.nlive < 64 && lua_getstack(L, level, &ar); level++) lc.live[lc.nlive++] = ar.i_ci;
    release_if(c, dead_in_state, &lc);
  }
  return c;
}

grace_tensor *lg_keep(lua_State *L, lg_ctx *c, grace_tensor *t) {
  if (!t) return NULL;
  if (c->ntmp == c->cap) {
    void *ud;
    lua_Alloc f = lua_getallocf(L, &ud);
    int cap = c->cap * 2;
    lg_tmp *p = cap > (1 << 26) ? NULL : f(ud, NULL, 0, sizeof *p * (size_t)cap);   /* no GC runs in f */
    if (!p) {
      grace_tensor_release(t);
      lg_errorf(L, c, "grace: out of memory for %d temporaries", c->ntmp + 1);
    }
    memcpy(p, c->tmp, sizeof *p * (size_t)c->ntmp);
    if (c->tmp != c->inline_tmp) f(ud, c->tmp, sizeof *c->tmp * (size_t)c->cap, 0);
    c->tmp = p;
    c->cap = cap;
  }
  c->L = L;   /* this call's: a nested call that ran since lg_begin set its own */
  c->ci = call_id(L);
  c->tmp[c->ntmp++] = (lg_tmp){t, c->L, c->ci};
  return t;
}

/* A reference to the tensor at idx for the rest of the call: Lua code run in the middle of it (a metamethod, a
 * finalizer, a __close) may close the userdata or drop the last reference to it. */
static grace_tensor *hold(lua_State *L, lg_ctx *c, grace_tensor *t) {
  grace_tensor_retain(t);
  return lg_keep(L, c, t);
}

int lg_fail(lua_State *L, lg_ctx *c) {
  lg_drop(c);
  return lgrace_error(L, c->vm);
}

int lg_errorf(lua_State *L, lg_ctx *c, const char *fmt, ...) {
  char msg[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c) lg_drop(c);
  return luaL_error(L, "%s", msg);
}

void *lg_data_buffer(lua_State *L, lg_ctx *c, const char *op, int64_t n) {
  size_t bytes = (size_t)(n > 0 ? n : 1) * 8, cap = grace_memory_limit(c->vm);   /* n <= 2^60: no overflow */
  if (cap && bytes > cap)
    lg_errorf(L, c, "%s: working memory of %zu bytes is past the memory limit of %zu bytes", op, bytes, cap);
  return lua_newuserdatauv(L, bytes, 0);   /* collected even if the caller raises */
}

/* ---- the userdata ---- */
grace_tensor **lg_newslot(lua_State *L) {
  grace_tensor **p = lua_newuserdatauv(L, sizeof *p, 0);
  *p = NULL;
  luaL_setmetatable(L, LG_TENSOR);
  return p;
}

grace_tensor *lg_totensor(lua_State *L, int idx) {
  grace_tensor **p = luaL_testudata(L, idx, LG_TENSOR);
  return p ? *p : NULL;
}

int lg_is_tensor(lua_State *L, int idx) { return luaL_testudata(L, idx, LG_TENSOR) != NULL; }

grace_tensor *lg_check(lua_State *L, lg_ctx *c, int idx, const char *op) {
  grace_tensor **p = luaL_testudata(L, idx, LG_TENSOR);
  if (p && *p) return hold(L, c, *p);
  if (p) lg_errorf(L, c, "%s: the tensor was closed", op);
  lg_errorf(L, c, "%s: expected a tensor, got %s", op, luaL_typename(L, idx));
  return NULL;
}

grace_tensor *lg_operand(lua_State *L, lg_ctx *c, int idx, const char *op) {
  grace_tensor *s = NULL;
  grace_status st;
  switch (lua_type(L, idx)) {
  case LUA_TUSERDATA: {
    grace_tensor **p = luaL_testudata(L, idx, LG_TENSOR);
    if (p && *p) return hold(L, c, *p);
    if (p) lg_errorf(L, c, "%s: the tensor was closed", op);
    break;
  }
  case LUA_TNUMBER:
    st = lua_isinteger(L, idx) ? grace_tensor_scalar_int(c->vm, lua_tointeger(L, idx), &s)
                               : grace_tensor_scalar(c->vm, lua_tonumber(L, idx), 0, &s);
    if (st != GRACE_OK) lg_fail(L, c);
    return lg_keep(L, c, s);
  case LUA_TBOOLEAN:
    if (grace_tensor_scalar(c->vm, lua_toboolean(L, idx), 1, &s) != GRACE_OK) lg_fail(L, c);
    return lg_keep(L, c, s);
  default:
    break;
  }
  lg_errorf(L, c, "%s: expected a tensor or a number, got %s", op, luaL_typename(L, idx));
  return NULL;
}

/* A userdata of 8 bytes may own megabytes, host or device, that Lua's collector cannot see: untold, it lets garbage
 * tensors pile up (a loop making large results grew far past what it held live). Told per tensor, it runs most of a
 * cycle for each large one (bench/RESULTS.md, Lua's collector and tensor bytes). So the bytes go to it in batches,
 * as one step once the bytes made since the last batch reach the larger of LG_GC_MIN and the bytes live tensors
 * hold after it: garbage tensors stay within about that much, and a cycle is paid per batch, not per tensor. */
#define LG_GC_MIN ((size_t)64 << 20)
void lg_account(lua_State *L, lg_ctx *c, const grace_tensor *t) {
  /* under a cap (grace_set_memory_limit) garbage must not take the room live tensors may need: a full cycle
   * every eighth of the cap keeps it within about that */
  size_t cap = grace_memory_limit(c->vm), next = cap && c->gc_next > cap / 8 ? cap / 8 : c->gc_next;
  c->gc_pending += (size_t)grace_tensor_numel(t) * grace_dtype_size(grace_tensor_dtype(t));
  if (c->gc_pending < next || !lua_gc(L, LUA_GCISRUNNING)) return;
  size_t kb = c->gc_pending >> 10;
  c->gc_pending = 0;
  if (cap) lua_gc(L, LUA_GCCOLLECT);
  else lua_gc(L, LUA_GCSTEP, kb > INT_MAX ? INT_MAX : (int)kb);
  size_t live = grace_tensor_bytes(c->vm);
  c->gc_next = live > LG_GC_MIN ? live : LG_GC_MIN;
}

int lg_run(lua_State *L, lg_ctx *c, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a, int nout) {
  grace_tensor **slot[4], *out[4];
  for (int i = 0; i < nout; i++) slot[i] = lg_newslot(L);
  grace_status st = grace_run(c->vm, op, nin, in, a, nout, out);
  if (st == GRACE_ENOMEM && grace_memory_limit(c->vm)) {   /* at the cap: garbage tensors may hold the room */
    lua_gc(L, LUA_GCCOLLECT);
    st = grace_run(c->vm, op, nin, in, a, nout, out);
  }
  if (st != GRACE_OK) return lg_fail(L, c);
  for (int i = 0; i < nout; i++) *slot[i] = out[i];
  if (c->want_grad && grace_tensor_set_requires_grad(out[0], 1) != GRACE_OK) return lg_fail(L, c);
  lg_drop(c);
  if (grace_op_kind(op) != GRACE_KIND_VIEW)
    for (int i = 0; i < nout; i++) lg_account(L, c, out[i]);
  return nout;
}

int lg_push(lua_State *L, lg_ctx *c, grace_tensor *t) {
  grace_tensor **slot = lg_newslot(L);
  grace_tensor_retain(t);
  *slot = t;
  if (c->want_grad && grace_tensor_set_requires_grad(t, 1) != GRACE_OK) return lg_fail(L, c);
  lg_drop(c);
  return 1;
}

grace_tensor *lg_run_tmp(lua_State *L, lg_ctx *c, grace_op op, int nin, grace_tensor *const *in, const grace_attrs *a) {
  grace_tensor *out = NULL;
  if (grace_run(c->vm, op, nin, in, a, 1, &out) != GRACE_OK) lg_fail(L, c);
  return lg_keep(L, c, out);
}

/* ---- arguments ---- */
const char *lg_shape_str(char *buf, size_t n, int ndim, const int64_t *sizes) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)sizes[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

void lg_number_attr(lua_State *L, int idx, grace_attrs *a, int k) {
  double d = lua_isboolean(L, idx) ? lua_toboolean(L, idx) : lua_tonumber(L, idx);
  int64_t i = lua_isboolean(L, idx) ? lua_toboolean(L, idx) : lua_isinteger(L, idx) ? lua_tointeger(L, idx) : 0;
  int exact = lua_isboolean(L, idx) || lua_isinteger(L, idx);
  if (k == 0) { a->a = d; a->ia = i; } else if (k == 1) { a->b = d; a->ib = i; } else { a->c = d; a->ic = i; }
  if (exact) a->exact |= 1 << k; else a->exact &= ~(1 << k);
}

int64_t lg_int(lua_State *L, lg_ctx *c, int idx, const char *op, const char *what) {
  int isnum;
  lua_Integer v = lua_tointegerx(L, idx, &isnum);
  if (!isnum) {
    if (lua_type(L, idx) == LUA_TNUMBER)
      lg_errorf(L, c, "%s: %s must be an integer, got %s", op, what, lua_tostring(L, idx));
    lg_errorf(L, c, "%s: %s must be an integer, got %s", op, what, luaL_typename(L, idx));
  }
  return (int64_t)v;
}

int64_t lg_dim(lua_State *L, lg_ctx *c, int idx, const char *op) {
  int64_t d = lg_int(L, c, idx, op, "dim");
  if (d == 0) lg_errorf(L, c, "%s: dim 0 is invalid (dims are 1-based)", op);
  return d > 0 ? d - 1 : d;
}

void lg_dims(lua_State *L, lg_ctx *c, int idx, const char *op, grace_attrs *a) {
  a->ndims = 0;
  if (lua_isnoneornil(L, idx)) return;
  if (lua_type(L, idx) != LUA_TTABLE) {
    a->ndims = 1;
    a->dims[0] = lg_dim(L, c, idx, op);
    return;
  }
  lua_Integer n = luaL_len(L, idx);
  if (n > GRACE_MAX_DIMS) lg_errorf(L, c, "%s: %d dims given, at most %d are supported", op, (int)n, GRACE_MAX_DIMS);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, idx, i);
    a->dims[i - 1] = lg_dim(L, c, -1, op);
    lua_pop(L, 1);
  }
  a->ndims = (int)n;
}

int64_t lg_pos(lua_State *L, lg_ctx *c, int idx, const char *op, const char *what) {
  int64_t p = lg_int(L, c, idx, op, what);
  if (p == 0) lg_errorf(L, c, "%s: %s 0 is invalid (positions are 1-based)", op, what);
  return p > 0 ? p - 1 : p;
}

int lg_norm_dim(lua_State *L, lg_ctx *c, int64_t dim, int ndim, const char *op) {
  int d = 0;
  if (grace_norm_dim(c->vm, op, dim, ndim, &d) != GRACE_OK) lg_fail(L, c);
  return d;
}

int lg_shape(lua_State *L, lg_ctx *c, int idx, const char *op, grace_attrs *a, int allow_neg1) {
  int n = 0, next;
  if (lua_type(L, idx) == LUA_TTABLE) {
    lua_Integer len = luaL_len(L, idx);
    if (len > GRACE_MAX_DIMS) lg_errorf(L, c, "%s: %d dims requested, at most %d are supported", op, (int)len, GRACE_MAX_DIMS);
    for (lua_Integer i = 1; i <= len; i++) {
      lua_geti(L, idx, i);
      a->shape[n++] = lg_int(L, c, -1, op, "a size");
      lua_pop(L, 1);
    }
    next = idx + 1;
  } else if (lua_type(L, idx) == LUA_TNUMBER) {
    int i = idx;
    for (; lua_type(L, i) == LUA_TNUMBER; i++) {
      if (n == GRACE_MAX_DIMS) lg_errorf(L, c, "%s: more than %d dims requested", op, GRACE_MAX_DIMS);
      a->shape[n++] = lg_int(L, c, i, op, "a size");
    }
    next = i;
  } else {
    lg_errorf(L, c, "%s: expected a shape (a table or numbers), got %s", op, luaL_typename(L, idx));
    return 0;
  }
  for (int d = 0; d < n; d++)
    if (a->shape[d] < 0 && !(allow_neg1 && a->shape[d] == -1))
      lg_errorf(L, c, "%s: invalid shape %s (sizes must be >= 0)", op, lg_shape_str((char[160]){0}, 160, n, a->shape));
  a->nshape = n;
  return next;
}

grace_dtype lg_dtype(lua_State *L, lg_ctx *c, int idx, const char *op) {
  grace_dtype dt = GRACE_FLOAT32;
  if (lua_type(L, idx) != LUA_TSTRING)
    lg_errorf(L, c, "%s: expected a dtype name, got %s", op, luaL_typename(L, idx));
  if (grace_dtype_from_name(lua_tostring(L, idx), &dt) != GRACE_OK)
    lg_errorf(L, c, "%s: unknown dtype '%s' (expected float32, float64, float16, bfloat16, int32, int64, uint8 or bool)",
              op, lua_tostring(L, idx));
  return dt;
}

int lg_parse_device(const char *s, grace_device *out) {
  if (!strcmp(s, "cpu")) { *out = GRACE_CPU; return 1; }
  if (!strcmp(s, "cuda") || !strcmp(s, "cuda:0")) { *out = GRACE_CUDA; return 1; }
  return 0;
}

void lg_opts(lua_State *L, lg_ctx *c, int idx, const char *op, grace_attrs *a, int *has_device) {
  if (has_device) *has_device = 0;
  if (lua_isnoneornil(L, idx)) return;
  if (lua_type(L, idx) != LUA_TTABLE)
    lg_errorf(L, c, "%s: expected an options table {dtype=, device=}, got %s", op, luaL_typename(L, idx));
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
    if (!strcmp(k, "dtype")) {
      a->dtype = lg_dtype(L, c, -1, op);
      a->has_dtype = 1;
    } else if (!strcmp(k, "device")) {
      grace_device dev = GRACE_CPU;
      if (lua_type(L, -1) != LUA_TSTRING || !lg_parse_device(lua_tostring(L, -1), &dev))
        lg_errorf(L, c, "%s: unknown device '%s' (expected cpu or cuda)", op, luaL_tolstring(L, -1, NULL));
      a->device = dev;
      if (has_device) *has_device = 1;
    } else if (!strcmp(k, "requires_grad")) {
      c->want_grad = lua_toboolean(L, -1);
    } else {
      lg_errorf(L, c, "%s: unknown option '%s' (expected dtype, device or requires_grad)", op, luaL_tolstring(L, -2, NULL));
    }
    lua_pop(L, 1);
  }
}

/* ---- ops registered from the op table: argument parsing by kind ---- */
static grace_op upvalue_op(lua_State *L) { return (grace_op)lua_tointeger(L, lua_upvalueindex(1)); }

static int m_unary(lua_State *L) {
  grace_op op = upvalue_op(L);
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, grace_op_name(op));
  return lg_run(L, c, op, 1, &x, NULL, 1);
}

/* Binary and compare ops; either side may be a Lua number (2 - x). add/sub take alpha: x + alpha * y. */
static int m_binary(lua_State *L) {
  grace_op op = upvalue_op(L);
  const char *name = grace_op_name(op);
  lg_ctx *c = lg_begin(L);
  if (!lg_is_tensor(L, 1) && !lg_is_tensor(L, 2) && lua_type(L, 1) == LUA_TNUMBER && lua_type(L, 2) == LUA_TNUMBER)
    lg_errorf(L, c, "%s: expected a tensor, got two numbers", name);
  grace_tensor *in[2];
  in[0] = lg_operand(L, c, 1, name);
  in[1] = lg_operand(L, c, 2, name);
  if ((op == GRACE_OP_ADD || op == GRACE_OP_SUB) && !lua_isnoneornil(L, 3)) {
    if (lua_type(L, 3) != LUA_TNUMBER) lg_errorf(L, c, "%s: alpha must be a number, got %s", name, luaL_typename(L, 3));
    grace_tensor *scaled[2] = {in[1], lg_operand(L, c, 3, name)};
    in[1] = lg_run_tmp(L, c, GRACE_OP_MUL, 2, scaled, NULL);
  }
  return lg_run(L, c, op, 2, in, NULL, 1);
}

static int m_ternary(lua_State *L) {
  grace_op op = upvalue_op(L);
  const char *name = grace_op_name(op);
  lg_ctx *c = lg_begin(L);
  grace_tensor *in[3];
  in[0] = lg_check(L, c, 1, name);
  in[1] = lg_operand(L, c, 2, name);
  in[2] = lg_operand(L, c, 3, name);
  return lg_run(L, c, op, 3, in, NULL, 1);
}

/* x:sum([dims] [, keepdim]); x:sum(true) keeps dims of a full reduction. */
static int m_reduce(lua_State *L) {
  grace_op op = upvalue_op(L);
  const char *name = grace_op_name(op);
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, name);
  grace_attrs a = {0};
  int i = 2;
  if (lua_type(L, 2) == LUA_TNUMBER || lua_type(L, 2) == LUA_TTABLE || lua_isnil(L, 2)) {
    lg_dims(L, c, 2, name, &a);
    i = 3;
  }
  if (!lua_isnoneornil(L, i)) {
    if (!lua_isboolean(L, i)) lg_errorf(L, c, "%s: keepdim must be a boolean, got %s", name, luaL_typename(L, i));
    a.keepdim = lua_toboolean(L, i);
  }
  return lg_run(L, c, op, 1, &x, &a, 1);
}

/* x:cumsum(dim), x:softmax(dim): one dim, required. */
static int m_scan(lua_State *L) {
  grace_op op = upvalue_op(L);
  const char *name = grace_op_name(op);
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, name);
  if (lua_isnoneornil(L, 2)) lg_errorf(L, c, "%s: a dim is required (e.g. x:%s(-1))", name, name);
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = lg_dim(L, c, 2, name);
  return lg_run(L, c, op, 1, &x, &a, 1);
}

/* Ops whose inputs are all tensors and take no attributes (matmul, clone, embedding, copy_, ...). */
static int m_tensors(lua_State *L) {
  grace_op op = upvalue_op(L);
  const char *name = grace_op_name(op);
  lg_ctx *c = lg_begin(L);
  int nin = grace_op_ninputs(op);
  grace_tensor *in[4];
  if (nin > 4) return lg_errorf(L, c, "%s: not available from Lua", name);
  for (int i = 0; i < nin; i++) in[i] = lg_check(L, c, i + 1, name);
  if (grace_op_noutputs(op) == 0) {
    if (grace_run(c->vm, op, nin, in, NULL, 0, NULL) != GRACE_OK) return lg_fail(L, c);
    lua_settop(L, 1);
    return lg_done(c, 1);
  }
  return lg_run(L, c, op, nin, in, NULL, grace_op_noutputs(op) > 1 ? 1 : grace_op_noutputs(op));
}

static lua_CFunction generic_for(grace_op op) {
  if (grace_op_ninputs(op) < 0) return NULL;   /* variadic (cat, stack): module functions only */
  switch (grace_op_kind(op)) {
  case GRACE_KIND_UNARY: return m_unary;
  case GRACE_KIND_BINARY: case GRACE_KIND_COMPARE: return m_binary;
  case GRACE_KIND_TERNARY: return m_ternary;
  case GRACE_KIND_REDUCE: return m_reduce;
  case GRACE_KIND_SCAN: return m_scan;
  case GRACE_KIND_CREATE: return NULL;   /* module constructors, lgrace_create.c */
  default: return m_tensors;
  }
}

/* ---- metamethods ---- */
static int t_gc(lua_State *L) {
  grace_tensor **p = lua_touserdata(L, 1);
  if (p && *p) { grace_tensor_release(*p); *p = NULL; }
  return 0;
}

/* x[i] selects along dim 1 (tables and tensors as keys: lgrace_index.c); strings are methods, then the fields
 * dtype, device, shape. */
static int t_index(lua_State *L) {
  int kt = lua_type(L, 2);
  if (kt == LUA_TSTRING) {
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
    const char *k = lua_tostring(L, 2);
    int field = !strcmp(k, "dtype") ? 1 : !strcmp(k, "device") ? 2 : !strcmp(k, "shape") ? 3 : 0;
    lg_ctx *c = lg_begin(L);
    grace_tensor *x = lg_check(L, c, 1, k);
    if (!field) return lg_grad_field(L, c, x, k) ? 1 : lg_done(c, 1);   /* autograd's fields, else nil */
    if (field == 1) lua_pushstring(L, grace_dtype_name(grace_tensor_dtype(x)));
    else if (field == 2) lua_pushstring(L, grace_device_name(grace_tensor_device(x)));
    else {
      grace_trace_size_read(c->vm, x, -1);
      lg_push_size(L, grace_tensor_ndim(x), grace_tensor_sizes(x));
    }
    return lg_done(c, 1);
  }
  if (kt == LUA_TTABLE || lg_is_tensor(L, 2)) return lg_index_get(L);   /* x[{...}], x[mask], x[idx] */
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "select");
  if (kt != LUA_TNUMBER)
    return lg_errorf(L, c, "select: a tensor is indexed by an integer, a table or a tensor (x[i], x[{i, {first, last}}], "
                     "1-based), got %s", luaL_typename(L, 2));
  grace_attrs a = {0};
  a.ndims = 1;
  a.i0 = lg_pos(L, c, 2, "select", "index");
  return lg_run(L, c, GRACE_OP_SELECT, 1, &x, &a, 1);
}

int lg_assign(lua_State *L, lg_ctx *c, grace_tensor *dst, int idx, const char *op) {
  grace_status st;
  if (lua_type(L, idx) == LUA_TNUMBER || lua_type(L, idx) == LUA_TBOOLEAN) {
    grace_attrs a = {0};
    lg_number_attr(L, idx, &a, 0);
    st = grace_run(c->vm, GRACE_OP_FILL_, 1, &dst, &a, 0, NULL);
  } else {
    grace_tensor *in[2] = {dst, lg_totensor(L, idx)};
    if (!in[1]) return lg_errorf(L, c, "%s: expected a number or a tensor to assign, got %s", op, luaL_typename(L, idx));
    st = grace_run(c->vm, GRACE_OP_COPY_, 2, in, NULL, 0, NULL);
  }
  return st == GRACE_OK ? 0 : lg_fail(L, c);
}

/* x[i] = v: v (a number or a tensor, broadcast) is copied into x:select(1, i); other keys: lgrace_index.c. */
static int t_newindex(lua_State *L) {
  if (lua_type(L, 2) == LUA_TTABLE || lg_is_tensor(L, 2)) return lg_index_set(L);
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "x[i] = v");
  if (lua_type(L, 2) == LUA_TSTRING && lg_grad_assign(L, c, x, lua_tostring(L, 2), 3)) return lg_done(c, 0);
  if (lua_type(L, 2) != LUA_TNUMBER)
    return lg_errorf(L, c, "cannot assign to field '%s' of a tensor (only x[i] = v, x[{...}] = v, x.grad and "
                     "x.requires_grad)", luaL_tolstring(L, 2, NULL));
  grace_attrs a = {0};
  a.ndims = 1;
  a.i0 = lg_pos(L, c, 2, "select", "index");
  grace_tensor *row = lg_run_tmp(L, c, GRACE_OP_SELECT, 1, &x, &a);
  lg_assign(L, c, row, 3, "x[i] = v");
  lg_drop(c);
  return 0;
}

static int t_len(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "len");
  if (grace_tensor_ndim(x) == 0) return lg_errorf(L, c, "len: a 0-d tensor has no length (use x:item())");
  grace_trace_size_read(c->vm, x, 0);
  lua_pushinteger(L, (lua_Integer)grace_tensor_sizes(x)[0]);
  return lg_done(c, 1);
}

static int t_lt(lua_State *L) { return luaL_error(L, "attempt to compare tensors with <: use x:lt(y) (or x:gt(y))"); }
static int t_le(lua_State *L) { return luaL_error(L, "attempt to compare tensors with <=: use x:le(y) (or x:ge(y))"); }

static const luaL_Reg tensor_meta[] = {
  {"__gc", t_gc},
  {"__close", t_gc},
  {"__newindex", t_newindex},
  {"__len", t_len},
  {"__lt", t_lt},
  {"__le", t_le},
  {"__tostring", lg_tostring},
  {NULL, NULL}
};

static const struct { const char *meta; grace_op op; } operators[] = {
  {"__add", GRACE_OP_ADD}, {"__sub", GRACE_OP_SUB}, {"__mul", GRACE_OP_MUL}, {"__div", GRACE_OP_DIV},
  {"__mod", GRACE_OP_REM}, {"__pow", GRACE_OP_POW},
};

/* ---- opening ---- */
static int l_is_tensor(lua_State *L) {
  lua_pushboolean(L, lg_is_tensor(L, 1));
  return 1;
}

void lgrace_open_tensor(lua_State *L) {
  int mod = lua_gettop(L);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &ctx_key);
  if (lua_isnil(L, -1)) {
    lg_ctx *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    c->tmp = c->inline_tmp;
    c->cap = LG_NTMP;
    c->vm = lgrace_vm(L);
    c->gc_next = LG_GC_MIN;
    lua_newtable(L);
    lua_pushcfunction(L, ctx_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &ctx_key);
  }
  lua_pop(L, 1);

  luaL_newmetatable(L, LG_TENSOR);
  int mt = lua_gettop(L);
  lua_newtable(L);
  int methods = lua_gettop(L);
  /* a new op in include/grace_ops.h appears here with no binding change */
  for (int op = 0; op < GRACE_NOPS; op++) {
    lua_CFunction fn = generic_for((grace_op)op);
    if (!fn) continue;
    lua_pushinteger(L, op);
    lua_pushcclosure(L, fn, 1);
    lua_setfield(L, methods, grace_op_name((grace_op)op));
    /* and NAME_ (in place) for pointwise ops without parameters */
    grace_opkind k = grace_op_kind((grace_op)op);
    if ((k == GRACE_KIND_UNARY || k == GRACE_KIND_BINARY) && op != GRACE_OP_CAST && op != GRACE_OP_GELU &&
        op != GRACE_OP_CLAMP) {
      char name[48];
      snprintf(name, sizeof name, "%s_", grace_op_name((grace_op)op));
      lua_pushinteger(L, op);
      lua_pushcclosure(L, lg_inplace, 1);
      lua_setfield(L, methods, name);
    }
  }
  luaL_setfuncs(L, lg_view_methods, 0);
  luaL_setfuncs(L, lg_index_methods, 0);
  luaL_setfuncs(L, lg_special_methods, 0);
  luaL_setfuncs(L, lg_grad_methods, 0);

  lua_pushvalue(L, mt);
  luaL_setfuncs(L, tensor_meta, 0);
  lua_pop(L, 1);
  lua_pushvalue(L, methods);
  lua_pushcclosure(L, t_index, 1);
  lua_setfield(L, mt, "__index");
  for (size_t i = 0; i < sizeof operators / sizeof *operators; i++) {
    lua_pushinteger(L, operators[i].op);
    lua_pushcclosure(L, m_binary, 1);
    lua_setfield(L, mt, operators[i].meta);
  }
  lua_pushinteger(L, GRACE_OP_NEG);
  lua_pushcclosure(L, m_unary, 1);
  lua_setfield(L, mt, "__unm");
  /* getmetatable(x) gives a description, not the metatable: a script that reached __gc or __close could free a
   * tensor other userdata still hold, or one a binding call is using */
  lua_createtable(L, 0, 1);
  lua_pushstring(L, LG_TENSOR);
  lua_setfield(L, -2, "__name");
  lua_setfield(L, mt, "__metatable");

  /* the module: dtype names first (grace.bool is "bool", not the method), then constructors, then every
   * method as a function taking the tensor first, where the name is still free */
  lua_createtable(L, GRACE_NDTYPES, 0);
  for (int dt = 0; dt < GRACE_NDTYPES; dt++) {
    lua_pushstring(L, grace_dtype_name((grace_dtype)dt));
    lua_pushvalue(L, -1);
    lua_setfield(L, mod, grace_dtype_name((grace_dtype)dt));
    lua_rawseti(L, -2, dt + 1);
  }
  lua_setfield(L, mod, "dtypes");
  lua_pushvalue(L, mod);
  lg_open_create(L);
  luaL_setfuncs(L, lg_module_shape, 0);
  luaL_setfuncs(L, lg_module_grad, 0);
  lua_pushcfunction(L, l_is_tensor);
  lua_setfield(L, mod, "is_tensor");
  lua_pop(L, 1);
  lua_pushnil(L);
  while (lua_next(L, methods)) {
    lua_pushvalue(L, -2);
    if (lua_rawget(L, mod) == LUA_TNIL) {
      lua_pushvalue(L, -3);
      lua_pushvalue(L, -3);
      lua_rawset(L, mod);
    }
    lua_pop(L, 2);
  }
  lua_pushvalue(L, methods);
  lua_setfield(L, mod, "Tensor");   /* Lua code may add methods here */
  lua_settop(L, mod);
}
