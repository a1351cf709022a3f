/* lgrace_methods.c: tensor methods that need their own argument handling and so override the generic
 * ones derived from the op table: facts (size, item, tolist), conversions (to, float, ...), clamp,
 * gelu, max/min with indices, var/std, topk, sort, mm, t, the in-place ops, and the norms. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "lua/lgrace_tensor.h"
#include "lua/lgrace_luac.h"

/* ---- facts ---- */
/* A size (x:size(), x.shape, x:stride()) is a plain table of integers, so it indexes, has # and goes wherever a
 * shape table does; its metatable (LG_SIZE) only adds printing as {1, 16, 256} and == with another size or a
 * plain table of the same numbers. */
static int size_tostring(lua_State *L) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '{');
  lua_Integer n = luaL_len(L, 1);
  for (lua_Integer i = 1; i <= n; i++) {
    if (i > 1) luaL_addstring(&b, ", ");
    lua_geti(L, 1, i);
    luaL_addvalue(&b);   /* numbers are converted in place */
  }
  luaL_addchar(&b, '}');
  luaL_pushresult(&b);
  return 1;
}

static int size_eq(lua_State *L) {
  int eq = lua_istable(L, 1) && lua_istable(L, 2) && lua_rawlen(L, 1) == lua_rawlen(L, 2);
  for (lua_Integer i = 1, n = eq ? (lua_Integer)lua_rawlen(L, 1) : 0; eq && i <= n; i++) {
    lua_rawgeti(L, 1, i);
    lua_rawgeti(L, 2, i);
    eq = lua_type(L, -1) == LUA_TNUMBER && lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
  }
  lua_pushboolean(L, eq);
  return 1;
}

int lg_push_size(lua_State *L, int n, const int64_t *v) {
  lua_createtable(L, n, 0);
  for (int d = 0; d < n; d++) { lua_pushinteger(L, (lua_Integer)v[d]); lua_rawseti(L, -2, d + 1); }
  if (luaL_newmetatable(L, LG_SIZE)) {
    lua_pushcfunction(L, size_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, size_eq);
    lua_setfield(L, -2, "__eq");
  }
  lua_setmetatable(L, -2);
  return 1;
}

/* x:size() / x:size(d) and x:stride() / x:stride(d) */
static int fact_dims(lua_State *L, const char *op, int strides) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, op);
  const int64_t *v = strides ? grace_tensor_strides(x) : grace_tensor_sizes(x);
  int nd = grace_tensor_ndim(x);
  if (lua_isnoneornil(L, 2)) {
    grace_trace_size_read(c->vm, x, -1);
    return lg_done(c, lg_push_size(L, nd, v));
  }
  if (nd == 0) return lg_errorf(L, c, "%s: a 0-d tensor has no dims", op);
  int d = lg_norm_dim(L, c, lg_dim(L, c, 2, op), nd, op);
  grace_trace_size_read(c->vm, x, strides ? -1 : d);   /* a stride is made of the sizes after it */
  lua_pushinteger(L, (lua_Integer)v[d]);
  return lg_done(c, 1);
}
static int m_size(lua_State *L) { return fact_dims(L, "size", 0); }
static int m_stride(lua_State *L) { return fact_dims(L, "stride", 1); }

static int m_dim(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  lua_pushinteger(L, grace_tensor_ndim(lg_check(L, c, 1, "dim")));
  return lg_done(c, 1);
}

static int m_numel(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "numel");
  grace_trace_size_read(c->vm, x, -1);
  lua_pushinteger(L, (lua_Integer)grace_tensor_numel(x));
  return lg_done(c, 1);
}

static int m_is_contiguous(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  lua_pushboolean(L, grace_tensor_is_contiguous(lg_check(L, c, 1, "is_contiguous")));
  return lg_done(c, 1);
}

static int m_version(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  lua_pushinteger(L, (lua_Integer)grace_tensor_version(lg_check(L, c, 1, "version")));
  return lg_done(c, 1);
}

/* lg_cmp_site for the Lua function calling item(): it decodes that function's bytecode each time, so its answer is
 * kept per site (the calling function, weakly, and the line: a line with two item() calls is refused anyway), and a
 * replayed call pays a lookup. An answer that depends on values read now (an upvalue compared with, the function of
 * another call on the line) is not kept: those values may differ at the next call. */
static const char site_key = 0;
typedef struct { int ok; lg_cmp c; char why[300]; } site_answer;

static int site_of(lua_State *L, lg_cmp *c, char *why, size_t n) {
  lua_Debug ar;
  if (!lua_getstack(L, 1, &ar) || !lua_getinfo(L, "fl", &ar)) return lg_cmp_site(L, 1, c, why, n);
  int top = lua_gettop(L) - 1;   /* the caller pushed by "f" is on top */
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &site_key) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &site_key);
  }
  lua_pushvalue(L, top + 1);
  if (lua_rawget(L, -2) != LUA_TTABLE) {   /* the caller's sites */
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, top + 1);
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
  }
  site_answer fresh, *a = &fresh;
  if (lua_rawgeti(L, -1, ar.currentline) == LUA_TUSERDATA) a = lua_touserdata(L, -1);
  else {
    memset(a, 0, sizeof *a);
    a->ok = lg_cmp_site(L, 1, &a->c, a->why, sizeof a->why);
    if (!a->c.read_now) {
      site_answer *kept = lua_newuserdatauv(L, sizeof *kept, 0);
      *kept = fresh;
      lua_rawseti(L, -3, ar.currentline);
    }
  }
  *c = a->c;
  snprintf(why, n, "%s", a->why);
  lua_settop(L, top);
  return a->ok;
}

/* Whether the function calling item() is the one being traced: then its upvalues, and the tables they reach, are
 * guarded by value, so a constant read from them now holds for every call the compiled program runs. */
static int caller_is_traced(lua_State *L) {
  lua_Debug ar;
  int top = lua_gettop(L), same = 0;
  if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "f", &ar)) {
    lua_getfield(L, LUA_REGISTRYINDEX, LG_TRACED_FN);
    same = !lua_isnil(L, -1) && lua_rawequal(L, -1, -2);
  }
  lua_settop(L, top);
  return same;
}

/* During a trace or a replay: tells the core how the calling Lua code uses the value item() read from x (v, of kind
 * 0 float, 1 integer, 2 boolean), so that a branch on it can become a cond region (grace_trace_branch), and whether
 * the code of the branch's other way is an early return that grace may record ahead (grace_trace_branch_ahead).
 * While grace records that way, the value is forced: 1 and *forced, which item() returns instead of v; -1 when it
 * cannot be (err says why: the call fails, and grace drops the recording); 0 otherwise. */
static int note_branch(lua_State *L, grace_vm *vm, grace_tensor *x, int kind, double v, double *forced, char *err,
                       size_t nerr) {
  static const grace_cmp cmps[] = {
    [LG_CMP_LT] = GRACE_CMP_LT, [LG_CMP_LE] = GRACE_CMP_LE, [LG_CMP_GT] = GRACE_CMP_GT, [LG_CMP_GE] = GRACE_CMP_GE,
    [LG_CMP_EQ] = GRACE_CMP_EQ, [LG_CMP_NE] = GRACE_CMP_NE, [LG_CMP_TRUTH] = GRACE_CMP_TRUTH};
  if (!grace_trace_active(vm)) return 0;
  lg_cmp c;
  char why[300] = "";
  int holds = site_of(L, &c, why, sizeof why) ? lg_cmp_holds(&c, kind == 2, v) : -1;
  if (holds >= 0 && c.k_from_upvalue && !caller_is_traced(L)) {
    snprintf(why, sizeof why, "line %d: compares with %s, a value read from a function other than the compiled one "
             "(not guarded)", c.line, c.k_path);
    holds = -1;
  }
  /* Lua compares integers and floats exactly; the predicate gets the constant and (here) the value as float64,
   * exact only up to 2^53 in magnitude for an integer: beyond, the branch stays a break */
  if (holds >= 0 && c.op != LG_CMP_TRUTH &&
      ((c.k_is_int && (c.ik >= (1LL << 53) || c.ik <= -(1LL << 53))) || (kind != 0 && fabs(v) >= 9007199254740992.0))) {
    snprintf(why, sizeof why, "line %d: an integer at 2^53 or beyond in magnitude in the comparison, which float64 "
             "does not hold exactly", c.line);
    holds = -1;
  }
  int want = grace_trace_forced(vm, x);   /* the outcome of `v OP k` itself that grace records ahead */
  if (want >= 0 && (holds < 0 || !lg_cmp_force(&c, kind, want, forced))) {
    snprintf(err, nerr, "item: recording a branch's other way ahead: no value gives that outcome here (%s)",
             why[0] ? why : "the comparison");
    return -1;
  }
  if (holds < 0) {
    if (!why[0]) snprintf(why, sizeof why, "line %d: an order comparison of a boolean with a number", c.line);
    grace_trace_branch(vm, x, GRACE_CMP_NONE, 0, 0, why);
    return 0;
  }
  if (want >= 0) holds = c.negate ? !want : want;
  /* the outcome of `v OP k` itself: the core's predicate computes that comparison */
  grace_trace_branch(vm, x, cmps[c.op], c.k, c.negate ? !holds : holds, NULL);
  const char *ahead = c.ahead_why[!holds][0] ? c.ahead_why[!holds] : NULL;
  lua_Debug ar;
  if (!ahead && !caller_is_traced(L)) {   /* its return goes on in the caller's code, which may do anything */
    int named = lua_getstack(L, 1, &ar) && lua_getinfo(L, "S", &ar);
    snprintf(why, sizeof why, "%s:%d: the branch's other way is not recorded before a call takes it: it returns to "
             "the function that called this one, not out of the compiled function", named ? ar.short_src : "?", c.line);
    ahead = why;
  }
  grace_trace_branch_ahead(vm, ahead);
  return want >= 0;
}

static int m_item(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "item");
  int64_t n = grace_tensor_numel(x);
  if (n != 1)
    return lg_errorf(L, c, "item: a tensor with %lld elements cannot be converted to a number (shape %s)", (long long)n,
                     LG_SHAPE(x));
  grace_dtype dt = grace_tensor_dtype(x);
  int kind = grace_dtype_is_float(dt) ? 0 : dt == GRACE_BOOL ? 2 : 1, forced;
  double v, f = 0;
  int64_t iv = 0;
  char err[400];
  if (grace_tensor_read(c->vm, x, kind ? GRACE_INT64 : GRACE_FLOAT64, kind ? (void *)&iv : (void *)&v) != GRACE_OK)
    return lg_fail(L, c);
  if (kind) v = (double)iv;
  if ((forced = note_branch(L, c->vm, x, kind, v, &f, err, sizeof err)) < 0) return lg_errorf(L, c, "%s", err);
  if (forced) { v = f; iv = (int64_t)f; }
  if (kind == 0) lua_pushnumber(L, v);
  else if (kind == 2) lua_pushboolean(L, iv != 0);
  else lua_pushinteger(L, (lua_Integer)iv);
  return lg_done(c, 1);
}

typedef struct { const void *buf; int kind; int64_t pos; } list_src;   /* kind: 0 float, 1 int, 2 bool */

static void push_elem(lua_State *L, list_src *s) {
  int64_t i = s->pos++;
  if (s->kind == 0) lua_pushnumber(L, ((const double *)s->buf)[i]);
  else if (s->kind == 1) lua_pushinteger(L, (lua_Integer)((const int64_t *)s->buf)[i]);
  else lua_pushboolean(L, ((const int64_t *)s->buf)[i] != 0);
}

static void push_list(lua_State *L, list_src *s, int d, int nd, const int64_t *sizes) {
  lua_createtable(L, sizes[d] < (1 << 24) ? (int)sizes[d] : 0, 0);
  for (int64_t i = 0; i < sizes[d]; i++) {
    if (d == nd - 1) push_elem(L, s);
    else push_list(L, s, d + 1, nd, sizes);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

/* x:tolist(): nested tables in row-major order; a 0-d tensor gives a plain value. */
static int m_tolist(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "tolist");
  grace_dtype dt = grace_tensor_dtype(x);
  int64_t n = grace_tensor_numel(x), tables = 0, level = 1;
  /* tables, one per index of the dims before the last: an empty tensor has no elements to bound them, so
   * [2^40, 0] would make 2^40 empty tables (memory without bound); a tensor with elements has at most ndim per one */
  for (int d = 0; d < grace_tensor_ndim(x) - 1 && level > 0; d++) {
    if (__builtin_mul_overflow(level, grace_tensor_sizes(x)[d], &level) ||
        __builtin_add_overflow(tables, level, &tables))
      tables = INT64_MAX, level = 0;
  }
  if (tables > (1 << 20) && tables / GRACE_MAX_DIMS > n)
    return lg_errorf(L, c, "tolist: a tensor of shape %s would make %lld nested tables for %lld elements", LG_SHAPE(x),
                     (long long)tables, (long long)n);
  void *buf = lg_data_buffer(L, c, "tolist", n);
  list_src s = {buf, grace_dtype_is_float(dt) ? 0 : dt == GRACE_BOOL ? 2 : 1, 0};
  if (grace_tensor_read(c->vm, x, s.kind ? GRACE_INT64 : GRACE_FLOAT64, buf) != GRACE_OK) return lg_fail(L, c);
  lua_checkstack(L, GRACE_MAX_DIMS * 2 + 4);
  if (grace_tensor_ndim(x) == 0) push_elem(L, &s);
  else push_list(L, &s, 0, grace_tensor_ndim(x), grace_tensor_sizes(x));
  return lg_done(c, 1);
}

/* ---- conversions ---- */
/* x:to(...): a dtype and/or a device (strings, an options table, or another tensor); x itself when
 * nothing changes, as PyTorch's .to. */
static int convert(lua_State *L, lg_ctx *c, grace_tensor *x, int has_dt, grace_dtype dt, int has_dev, grace_device dev) {
  grace_tensor *cur = x;
  if (has_dev && dev != grace_tensor_device(cur)) {
    grace_attrs a = {0};
    a.device = dev;
    cur = lg_run_tmp(L, c, GRACE_OP_TO_DEVICE, 1, &cur, &a);
  }
  if (has_dt && dt != grace_tensor_dtype(cur)) {
    grace_attrs a = {0};
    a.has_dtype = 1;
    a.dtype = dt;
    cur = lg_run_tmp(L, c, GRACE_OP_CAST, 1, &cur, &a);
  }
  if (cur == x) {
    lg_drop(c);
    lua_pushvalue(L, 1);
    return 1;
  }
  return lg_push(L, c, cur);
}

static int m_to(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "to");
  int has_dt = 0, has_dev = 0, top = lua_gettop(L);
  grace_dtype dt = GRACE_FLOAT32;
  grace_device dev = GRACE_CPU;
  for (int i = 2; i <= top; i++) {
    grace_tensor *o;
    if (lua_type(L, i) == LUA_TSTRING) {
      const char *s = lua_tostring(L, i);
      if (lg_parse_device(s, &dev)) has_dev = 1;
      else if (grace_dtype_from_name(s, &dt) == GRACE_OK) has_dt = 1;
      else
        return lg_errorf(L, c, "to: unknown dtype or device '%s' (dtypes: float32, float64, float16, bfloat16, int32, "
                         "int64, uint8, bool; devices: cpu, cuda)", s);
    } else if (lua_type(L, i) == LUA_TTABLE) {
      grace_attrs a = {0};
      int hd = 0;
      lg_opts(L, c, i, "to", &a, &hd);
      if (a.has_dtype) { has_dt = 1; dt = a.dtype; }
      if (hd) { has_dev = 1; dev = a.device; }
    } else if ((o = lg_totensor(L, i)) != NULL) {
      has_dt = has_dev = 1;
      dt = grace_tensor_dtype(o);
      dev = grace_tensor_device(o);
    } else if (!lua_isnil(L, i)) {
      return lg_errorf(L, c, "to: expected a dtype or device name, got %s", luaL_typename(L, i));
    }
  }
  return convert(L, c, x, has_dt, dt, has_dev, dev);
}

/* x:type(): the dtype name; x:type(dtype): as x:to(dtype). */
static int m_type(lua_State *L) {
  if (lua_isnoneornil(L, 2)) {
    lg_ctx *c = lg_begin(L);
    lua_pushstring(L, grace_dtype_name(grace_tensor_dtype(lg_check(L, c, 1, "type"))));
    return 1;
  }
  return m_to(L);
}

/* float(), double(), ...: as x:to(dtype) */
static int to_dtype_named(lua_State *L, grace_dtype dt, const char *op) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, op);
  return convert(L, c, x, 1, dt, 0, GRACE_CPU);
}
static int m_float(lua_State *L) { return to_dtype_named(L, GRACE_FLOAT32, "float"); }
static int m_double(lua_State *L) { return to_dtype_named(L, GRACE_FLOAT64, "double"); }
static int m_half(lua_State *L) { return to_dtype_named(L, GRACE_FLOAT16, "half"); }
static int m_bfloat16(lua_State *L) { return to_dtype_named(L, GRACE_BFLOAT16, "bfloat16"); }
static int m_long(lua_State *L) { return to_dtype_named(L, GRACE_INT64, "long"); }
static int m_int(lua_State *L) { return to_dtype_named(L, GRACE_INT32, "int"); }
static int m_byte(lua_State *L) { return to_dtype_named(L, GRACE_UINT8, "byte"); }
static int m_bool(lua_State *L) { return to_dtype_named(L, GRACE_BOOL, "bool"); }

static int to_device_named(lua_State *L, grace_device dev, const char *op) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, op);
  return convert(L, c, x, 0, GRACE_FLOAT32, 1, dev);
}
static int m_cpu(lua_State *L) { return to_device_named(L, GRACE_CPU, "cpu"); }
static int m_cuda(lua_State *L) { return to_device_named(L, GRACE_CUDA, "cuda"); }

/* x:cast(dtype): always a new tensor (x:to returns x when the dtype is already right) */
static int m_cast(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "cast");
  grace_attrs a = {0};
  a.has_dtype = 1;
  a.dtype = lg_dtype(L, c, 2, "cast");
  return lg_run(L, c, GRACE_OP_CAST, 1, &x, &a, 1);
}

static int m_contiguous(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "contiguous");
  if (grace_tensor_is_contiguous(x)) { lua_settop(L, 1); return 1; }
  return lg_run(L, c, GRACE_OP_CONTIGUOUS, 1, &x, NULL, 1);
}

/* ---- pointwise with parameters ---- */
static void clamp_args(lua_State *L, lg_ctx *c, const char *op, grace_attrs *a) {
  for (int i = 2; i <= 3; i++) {
    if (lua_isnoneornil(L, i)) continue;
    if (lua_type(L, i) != LUA_TNUMBER)
      lg_errorf(L, c, "%s: min and max must be numbers or nil, got %s (use maximum/minimum for tensors)", op,
                luaL_typename(L, i));
    if (i == 2) a->has_a = 1; else a->has_b = 1;
    lg_number_attr(L, i, a, i - 2);
  }
  if (!a->has_a && !a->has_b) lg_errorf(L, c, "%s: at least one of min and max must be given", op);
}

static int m_clamp(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "clamp");
  grace_attrs a = {0};
  clamp_args(L, c, "clamp", &a);
  return lg_run(L, c, GRACE_OP_CLAMP, 1, &x, &a, 1);
}

static int m_gelu(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "gelu");
  grace_attrs a = {0};
  if (!lua_isnoneornil(L, 2)) {
    const char *s = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
    if (!strcmp(s, "tanh")) a.flag = 1;
    else if (strcmp(s, "none"))
      return lg_errorf(L, c, "gelu: approximate must be \"tanh\" or \"none\", got %s", luaL_tolstring(L, 2, NULL));
  }
  return lg_run(L, c, GRACE_OP_GELU, 1, &x, &a, 1);
}

/* ---- reductions ---- */
/* x:max(): the maximum (0-d); x:max(d [, keepdim]): values and 1-based indices; x:max(y): elementwise */
static int maxmin(lua_State *L, grace_op op, grace_op elementwise) {
  const char *name = grace_op_name(op);
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, name);
  grace_tensor *y = lg_totensor(L, 2);
  if (y) {
    grace_tensor *in[2] = {x, y};
    return lg_run(L, c, elementwise, 2, in, NULL, 1);
  }
  grace_attrs a = {0};
  int i = 2;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    a.ndims = 1;
    a.dims[0] = lg_dim(L, c, 2, name);
    i = 3;
  } else if (lua_isnil(L, 2)) i = 3;
  else if (!lua_isnone(L, 2) && !lua_isboolean(L, 2))
    return lg_errorf(L, c, "%s: expected a dim, a tensor or nothing, got %s", name, luaL_typename(L, 2));
  if (!lua_isnoneornil(L, i)) {
    if (!lua_isboolean(L, i)) return lg_errorf(L, c, "%s: keepdim must be a boolean, got %s", name, luaL_typename(L, i));
    a.keepdim = lua_toboolean(L, i);
  }
  return lg_run(L, c, op, 1, &x, &a, a.ndims ? 2 : 1);
}
static int m_max(lua_State *L) { return maxmin(L, GRACE_OP_MAX, GRACE_OP_MAXIMUM); }
static int m_min(lua_State *L) { return maxmin(L, GRACE_OP_MIN, GRACE_OP_MINIMUM); }

/* x:var([dims] [, unbiased=true] [, keepdim]) */
static int var_std(lua_State *L, grace_op op) {
  const char *name = grace_op_name(op);
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, name);
  grace_attrs a = {0};
  a.flag = 1;
  int i = 2;
  if (lua_type(L, 2) == LUA_TNUMBER || lua_type(L, 2) == LUA_TTABLE || lua_isnil(L, 2)) {
    lg_dims(L, c, 2, name, &a);
    i = 3;
  }
  for (int k = 0; k < 2; k++, i++) {
    if (lua_isnoneornil(L, i)) continue;
    if (!lua_isboolean(L, i))
      return lg_errorf(L, c, "%s: %s must be a boolean, got %s", name, k ? "keepdim" : "unbiased", luaL_typename(L, i));
    if (k) a.keepdim = lua_toboolean(L, i);
    else a.flag = lua_toboolean(L, i);
  }
  return lg_run(L, c, op, 1, &x, &a, 1);
}
static int m_var(lua_State *L) { return var_std(L, GRACE_OP_VAR); }
static int m_std(lua_State *L) { return var_std(L, GRACE_OP_STD); }

static int opt_bool(lua_State *L, lg_ctx *c, int i, const char *op, const char *what, int def) {
  if (lua_isnoneornil(L, i)) return def;
  if (!lua_isboolean(L, i)) lg_errorf(L, c, "%s: %s must be a boolean, got %s", op, what, luaL_typename(L, i));
  return lua_toboolean(L, i);
}

/* x:topk(k [, dim=-1] [, largest=true]) -> values, indices */
static int m_topk(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "topk");
  grace_attrs a = {0};
  a.i0 = lg_int(L, c, 2, "topk", "k");
  a.ndims = 1;
  a.dims[0] = lua_isnoneornil(L, 3) ? -1 : lg_dim(L, c, 3, "topk");
  a.flag = !opt_bool(L, c, 4, "topk", "largest", 1);
  return lg_run(L, c, GRACE_OP_TOPK, 1, &x, &a, 2);
}

/* x:sort([dim=-1] [, descending=false]) -> values, indices; x:sort(true) sorts the last dim descending */
static int m_sort(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "sort");
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = -1;
  int i = 2;
  if (lua_type(L, 2) == LUA_TNUMBER) { a.dims[0] = lg_dim(L, c, 2, "sort"); i = 3; }
  else if (lua_isnil(L, 2)) i = 3;
  a.flag = opt_bool(L, c, i, "sort", "descending", 0);
  return lg_run(L, c, GRACE_OP_SORT, 1, &x, &a, 2);
}

/* ---- linear algebra ---- */
static int m_mm(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *in[2] = {lg_check(L, c, 1, "mm"), lg_check(L, c, 2, "mm")};
  if (grace_tensor_ndim(in[0]) != 2 || grace_tensor_ndim(in[1]) != 2)
    return lg_errorf(L, c, "mm: expected 2-D tensors, got shapes %s and %s (use matmul for other cases)", LG_SHAPE(in[0]),
                     LG_SHAPE(in[1]));
  return lg_run(L, c, GRACE_OP_MATMUL, 2, in, NULL, 1);
}

static int m_t(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "t");
  int nd = grace_tensor_ndim(x);
  if (nd > 2) return lg_errorf(L, c, "t: expects a tensor with <= 2 dims, got shape %s (use transpose)", LG_SHAPE(x));
  if (nd < 2) { lua_settop(L, 1); return 1; }
  grace_attrs a = {0};
  a.ndims = 2;
  a.dims[1] = 1;
  return lg_run(L, c, GRACE_OP_TRANSPOSE, 1, &x, &a, 1);
}

/* ---- in place: the out-of-place result, checked as PyTorch does, copied into x ---- */
static int dtype_rank(grace_dtype dt) { return dt == GRACE_BOOL ? 0 : grace_dtype_is_float(dt) ? 2 : 1; }

static int inplace_finish(lua_State *L, lg_ctx *c, grace_tensor *x, grace_tensor *res, const char *op) {
  int nd = grace_tensor_ndim(x);
  if (grace_tensor_ndim(res) != nd || memcmp(grace_tensor_sizes(res), grace_tensor_sizes(x), (size_t)nd * sizeof(int64_t)))
    return lg_errorf(L, c, "%s: output with shape %s doesn't match the broadcast shape %s", op, LG_SHAPE(x), LG_SHAPE(res));
  if (dtype_rank(grace_tensor_dtype(res)) > dtype_rank(grace_tensor_dtype(x)))
    return lg_errorf(L, c, "%s: result type %s can't be cast to the desired output type %s", op,
                     grace_dtype_name(grace_tensor_dtype(res)), grace_dtype_name(grace_tensor_dtype(x)));
  grace_tensor *in[2] = {x, res};
  if (grace_run(c->vm, GRACE_OP_COPY_, 2, in, NULL, 0, NULL) != GRACE_OK) {
    /* the copy is how op writes: its errors speak of op, as the user wrote it */
    const char *msg = grace_last_error(c->vm);
    if (strncmp(msg, "copy_: ", 7)) return lg_fail(L, c);
    char m[640];
    snprintf(m, sizeof m, "%s", msg + 7);
    return lg_errorf(L, c, "%s: %s", op, m);
  }
  lg_drop(c);
  lua_settop(L, 1);
  return 1;
}

/* NAME_ for every unary and binary op of the table (upvalue 1: the op): x:add_(y [, alpha]), x:exp_() */
int lg_inplace(lua_State *L) {
  grace_op op = (grace_op)lua_tointeger(L, lua_upvalueindex(1));
  char name[48];
  snprintf(name, sizeof name, "%s_", grace_op_name(op));
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, name), *res;
  if (grace_op_kind(op) == GRACE_KIND_UNARY) {
    res = lg_run_tmp(L, c, op, 1, &x, NULL);
  } else {
    grace_tensor *in[2] = {x, lg_operand(L, c, 2, name)};
    if ((op == GRACE_OP_ADD || op == GRACE_OP_SUB) && !lua_isnoneornil(L, 3)) {
      if (lua_type(L, 3) != LUA_TNUMBER) return lg_errorf(L, c, "%s: alpha must be a number", name);
      grace_tensor *scaled[2] = {in[1], lg_operand(L, c, 3, name)};
      in[1] = lg_run_tmp(L, c, GRACE_OP_MUL, 2, scaled, NULL);
    }
    res = lg_run_tmp(L, c, op, 2, in, NULL);
  }
  return inplace_finish(L, c, x, res, name);
}

static int m_clamp_(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "clamp_");
  grace_attrs a = {0};
  clamp_args(L, c, "clamp_", &a);
  return inplace_finish(L, c, x, lg_run_tmp(L, c, GRACE_OP_CLAMP, 1, &x, &a), "clamp_");
}

static int m_masked_fill_(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *in[3] = {lg_check(L, c, 1, "masked_fill_"), lg_check(L, c, 2, "masked_fill_"),
                         lg_operand(L, c, 3, "masked_fill_")};
  return inplace_finish(L, c, in[0], lg_run_tmp(L, c, GRACE_OP_MASKED_FILL, 3, in, NULL), "masked_fill_");
}

/* x:fill_(v) and x:copy_(src): v/src a number, boolean or tensor (broadcast) */
static int m_fill_(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "fill_");
  lg_assign(L, c, x, 2, "fill_");
  lua_settop(L, 1);
  return 1;
}

static int m_copy_(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "copy_");
  lg_assign(L, c, x, 2, "copy_");
  lua_settop(L, 1);
  return 1;
}

static int m_zero_(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, "zero_");
  grace_attrs a = {0};
  if (grace_run(c->vm, GRACE_OP_FILL_, 1, &x, &a, 0, NULL) != GRACE_OK) return lg_fail(L, c);
  lua_settop(L, 1);
  return 1;
}

/* x:index_copy_(dim, index, src) */
static int m_index_copy_(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *in[3];
  in[0] = lg_check(L, c, 1, "index_copy_");
  grace_attrs a = {0};
  a.ndims = 1;
  a.dims[0] = lg_dim(L, c, 2, "index_copy_");
  in[1] = lg_check(L, c, 3, "index_copy_");
  in[2] = lg_check(L, c, 4, "index_copy_");
  if (grace_run(c->vm, GRACE_OP_INDEX_COPY_, 3, in, &a, 0, NULL) != GRACE_OK) return lg_fail(L, c);
  lua_settop(L, 1);
  return 1;
}

/* ---- normalisations ---- */
static grace_tensor *opt_tensor(lua_State *L, lg_ctx *c, int idx, const char *op) {
  return lua_isnoneornil(L, idx) ? NULL : lg_check(L, c, idx, op);
}

static double opt_eps(lua_State *L, lg_ctx *c, int idx, const char *op, double def) {
  if (lua_isnoneornil(L, idx)) return def;
  if (lua_type(L, idx) != LUA_TNUMBER) lg_errorf(L, c, "%s: eps must be a number, got %s", op, luaL_typename(L, idx));
  return lua_tonumber(L, idx);
}

/* grace.layer_norm(x, weight, bias [, eps=1e-5]) (weight/bias may be nil) */
static int m_layer_norm(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *in[3] = {lg_check(L, c, 1, "layer_norm"), opt_tensor(L, c, 2, "layer_norm"),
                         opt_tensor(L, c, 3, "layer_norm")};
  grace_attrs a = {0};
  a.a = opt_eps(L, c, 4, "layer_norm", 1e-5);
  a.has_a = 1;
  return lg_run(L, c, GRACE_OP_LAYER_NORM, 3, in, &a, 1);
}

/* grace.rms_norm(x, weight [, eps=1e-6]) */
static int m_rms_norm(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *in[2] = {lg_check(L, c, 1, "rms_norm"), opt_tensor(L, c, 2, "rms_norm")};
  grace_attrs a = {0};
  a.a = opt_eps(L, c, 3, "rms_norm", 1e-6);
  a.has_a = 1;
  return lg_run(L, c, GRACE_OP_RMS_NORM, 2, in, &a, 1);
}

/* grace.attention(q, k, v [, {mask = m, scale = s}]): softmax(q @ k^T * scale, keeping the scores where the bool
 * mask is true) @ v, as PyTorch's scaled_dot_product_attention; scale (a number or 0-d tensor) defaults to
 * 1 / sqrt(q's last dim). One kernel: the scores are never stored. */
static int m_attention(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_tensor *q = lg_check(L, c, 1, "attention"), *k = lg_check(L, c, 2, "attention"),
               *v = lg_check(L, c, 3, "attention"), *mask = NULL, *scale = NULL;
  if (!lua_isnoneornil(L, 4)) {
    if (!lua_istable(L, 4)) lg_errorf(L, c, "attention: options must be a table, got %s", luaL_typename(L, 4));
    lua_getfield(L, 4, "mask");
    if (!lua_isnil(L, -1)) mask = lg_check(L, c, lua_gettop(L), "attention");
    lua_getfield(L, 4, "scale");
    if (!lua_isnil(L, -1)) scale = lg_operand(L, c, lua_gettop(L), "attention");
  }
  if (!scale) {
    int64_t d = grace_tensor_ndim(q) ? grace_tensor_sizes(q)[grace_tensor_ndim(q) - 1] : 1;
    grace_trace_size_read(c->vm, q, grace_tensor_ndim(q) - 1);   /* the scale is a number made from it */
    lua_pushnumber(L, 1.0 / sqrt((double)(d > 0 ? d : 1)));
    scale = lg_operand(L, c, lua_gettop(L), "attention");
  }
  grace_attrs tr = {.ndims = 2, .dims = {-2, -1}};
  grace_tensor *kt = grace_tensor_ndim(k) >= 2 ? lg_run_tmp(L, c, GRACE_OP_TRANSPOSE, 1, &k, &tr) : k;
  grace_attrs a = {0};
  a.a = -INFINITY;
  a.flag = GRACE_ATTN_KEEP;
  return lg_run(L, c, GRACE_OP_ATTENTION, 5, (grace_tensor *[]){q, kt, v, scale, mask}, &a, 1);
}

const luaL_Reg lg_special_methods[] = {
  {"size", m_size},
  {"stride", m_stride},
  {"dim", m_dim},
  {"numel", m_numel},
  {"is_contiguous", m_is_contiguous},
  {"version", m_version},
  {"item", m_item},
  {"tolist", m_tolist},
  {"to", m_to},
  {"type", m_type},
  {"float", m_float},
  {"double", m_double},
  {"half", m_half},
  {"bfloat16", m_bfloat16},
  {"long", m_long},
  {"int", m_int},
  {"byte", m_byte},
  {"bool", m_bool},
  {"cpu", m_cpu},
  {"cuda", m_cuda},
  {"cast", m_cast},
  {"contiguous", m_contiguous},
  {"clamp", m_clamp},
  {"gelu", m_gelu},
  {"max", m_max},
  {"min", m_min},
  {"var", m_var},
  {"std", m_std},
  {"topk", m_topk},
  {"sort", m_sort},
  {"mm", m_mm},
  {"t", m_t},
  {"clamp_", m_clamp_},
  {"masked_fill_", m_masked_fill_},
  {"fill_", m_fill_},
  {"copy_", m_copy_},
  {"zero_", m_zero_},
  {"index_copy_", m_index_copy_},
  {"layer_norm", m_layer_norm},
  {"rms_norm", m_rms_norm},
  {"attention", m_attention},
  {NULL, NULL}
};
