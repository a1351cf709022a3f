/* lgrace_create.c: the module's constructors: grace.tensor (from nested tables), zeros, ones, empty,
 * full, arange, linspace, eye, rand, randn, randint, the *_like variants and grace.fromfile (raw bytes
 * from a file, for weights written by another program). Creation ops run through grace_run on the
 * default device unless the options name another. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "lua/lgrace_tensor.h"

/* ---- grace.tensor(data [, opts]) ---- */
typedef struct nest {
  int ndim;
  int64_t sizes[GRACE_MAX_DIMS];
  int64_t path[GRACE_MAX_DIMS];   /* the position being visited, for messages */
  int cat;                        /* 0 bool, 1 integer, 2 float */
  int64_t n;
  void *buf;
} nest;

static const char *path_str(char *buf, size_t len, const nest *s, int depth) {
  size_t k = 0;
  buf[0] = 0;
  for (int d = 0; d < depth && k < len; d++) k += (size_t)snprintf(buf + k, len - k, "[%lld]", (long long)s->path[d] + 1);
  return buf;
}

/* pass 0 checks the nesting and finds the element kind; pass 1 stores the values */
static void walk(lua_State *L, lg_ctx *c, nest *s, int depth, int pass) {
  int t = lua_type(L, -1);
  if (depth == s->ndim) {
    if (t != LUA_TNUMBER && t != LUA_TBOOLEAN)
      lg_errorf(L, c, "tensor: ragged nested table: element %s is a %s where a number was expected (shape %s from the "
                "first elements)", path_str((char[128]){0}, 128, s, depth), luaL_typename(L, -1),
                lg_shape_str((char[160]){0}, 160, s->ndim, s->sizes));
    int k = t == LUA_TBOOLEAN ? 0 : lua_isinteger(L, -1) ? 1 : 2;
    if (pass == 0) {
      if (k > s->cat) s->cat = k;
    } else if (s->cat == 2) {
      ((double *)s->buf)[s->n++] = k == 0 ? lua_toboolean(L, -1) : lua_tonumber(L, -1);
    } else {
      ((int64_t *)s->buf)[s->n++] = k == 0 ? lua_toboolean(L, -1) : (int64_t)lua_tointeger(L, -1);
    }
    return;
  }
  if (t != LUA_TTABLE)
    lg_errorf(L, c, "tensor: ragged nested table: element %s is a %s where a table of %lld was expected (shape %s from "
              "the first elements)", path_str((char[128]){0}, 128, s, depth), luaL_typename(L, -1),
              (long long)s->sizes[depth], lg_shape_str((char[160]){0}, 160, s->ndim, s->sizes));
  if ((int64_t)lua_rawlen(L, -1) != s->sizes[depth])
    lg_errorf(L, c, "tensor: ragged nested table: element %s has length %lld, expected %lld (shape %s from the first "
              "elements)", path_str((char[128]){0}, 128, s, depth), (long long)lua_rawlen(L, -1),
              (long long)s->sizes[depth], lg_shape_str((char[160]){0}, 160, s->ndim, s->sizes));
  for (int64_t i = 0; i < s->sizes[depth]; i++) {
    s->path[depth] = i;
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    walk(L, c, s, depth + 1, pass);
    lua_pop(L, 1);
  }
}

static int l_tensor(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_attrs a = {0};
  int has_dev = 0;
  lg_opts(L, c, 2, "tensor", &a, &has_dev);
  lua_settop(L, 2);
  grace_tensor *src = lg_totensor(L, 1);
  if (src) {   /* a copy, as torch.tensor(t) */
    grace_tensor *cp = lg_run_tmp(L, c, GRACE_OP_CLONE, 1, &src, NULL);
    if (a.has_dtype && a.dtype != grace_tensor_dtype(cp)) {
      grace_attrs ca = {0};
      ca.has_dtype = 1;
      ca.dtype = a.dtype;
      cp = lg_run_tmp(L, c, GRACE_OP_CAST, 1, &cp, &ca);
    }
    if (has_dev && a.device != grace_tensor_device(cp)) {
      grace_attrs da = {0};
      da.device = a.device;
      cp = lg_run_tmp(L, c, GRACE_OP_TO_DEVICE, 1, &cp, &da);
    }
    return lg_push(L, c, cp);
  }
  int t = lua_type(L, 1);
  if (t != LUA_TTABLE && t != LUA_TNUMBER && t != LUA_TBOOLEAN)
    return lg_errorf(L, c, "tensor: expected a table of numbers, a number or a boolean, got %s", luaL_typename(L, 1));
  nest s = {0};
  lua_pushvalue(L, 1);
  for (int tt = t; tt == LUA_TTABLE; ) {   /* the shape from the first elements */
    if (s.ndim == GRACE_MAX_DIMS) return lg_errorf(L, c, "tensor: nested deeper than %d levels", GRACE_MAX_DIMS);
    int64_t n = (int64_t)lua_rawlen(L, -1);
    s.sizes[s.ndim++] = n;
    if (n == 0) break;
    tt = lua_rawgeti(L, -1, 1);
    lua_replace(L, -2);
  }
  lua_settop(L, 2);
  int64_t numel = 1;
  for (int d = 0; d < s.ndim; d++) {
    if (s.sizes[d] && numel > (INT64_C(1) << 40) / s.sizes[d]) return lg_errorf(L, c, "tensor: too many elements");
    numel *= s.sizes[d];
  }
  s.cat = numel == 0 ? 2 : 0;   /* tensor({}) is float32, as PyTorch */
  lua_pushvalue(L, 1);
  walk(L, c, &s, 0, 0);
  s.buf = lg_data_buffer(L, c, "tensor", numel);
  lua_pushvalue(L, 1);
  walk(L, c, &s, 0, 1);
  lua_pop(L, 1);
  static const grace_dtype natural[3] = {GRACE_BOOL, GRACE_INT64, GRACE_FLOAT32};
  grace_dtype dt = a.has_dtype ? a.dtype : natural[s.cat];
  grace_tensor **slot = lg_newslot(L);
  grace_status st = s.cat == 2 ? grace_tensor_from_data(c->vm, dt, s.ndim, s.sizes, GRACE_FLOAT64, s.buf, slot)
                               : grace_tensor_from_data(c->vm, dt, s.ndim, s.sizes, GRACE_INT64, s.buf, slot);
  if (st != GRACE_OK) return lg_fail(L, c);
  lg_account(L, c, *slot);
  if (has_dev && a.device != grace_tensor_device(*slot)) {
    grace_attrs da = {0};
    da.device = a.device;
    return lg_run(L, c, GRACE_OP_TO_DEVICE, 1, slot, &da, 1);   /* a leaf there when requires_grad */
  }
  if (c->want_grad && grace_tensor_set_requires_grad(*slot, 1) != GRACE_OK) return lg_fail(L, c);
  return 1;
}

/* ---- shape-and-options constructors ---- */
static void default_device(lg_ctx *c, grace_attrs *a) { a->device = grace_default_device(c->vm); }

/* zeros/ones/empty/rand/randn(shape [, opts]); upvalue 1: 0 zeros, 1 ones, 2 empty, 3 rand, 4 randn */
static int shaped(lua_State *L, int which) {
  static const char *const names[] = {"zeros", "ones", "empty", "rand", "randn"};
  const char *name = names[which];
  lg_ctx *c = lg_begin(L);
  grace_attrs a = {0};
  default_device(c, &a);
  int next = lg_shape(L, c, 1, name, &a, 0);
  lg_opts(L, c, next, name, &a, NULL);
  if (!lua_isnone(L, next + 1)) return lg_errorf(L, c, "%s: unexpected argument %d (%s)", name, next + 1, luaL_typename(L, next + 1));
  if (!a.has_dtype) a.dtype = GRACE_FLOAT32;
  a.has_dtype = 1;
  if (which == 2) {
    grace_tensor **slot = lg_newslot(L);
    if (grace_tensor_empty(c->vm, a.dtype, a.device, a.nshape, a.shape, slot) != GRACE_OK ||
        (c->want_grad && grace_tensor_set_requires_grad(*slot, 1) != GRACE_OK)) return lg_fail(L, c);
    lg_account(L, c, *slot);
    return 1;
  }
  a.a = which == 1;
  return lg_run(L, c, which == 3 ? GRACE_OP_RAND : which == 4 ? GRACE_OP_RANDN : GRACE_OP_FULL, 0, NULL, &a, 1);
}
static int l_zeros(lua_State *L) { return shaped(L, 0); }
static int l_ones(lua_State *L) { return shaped(L, 1); }
static int l_empty(lua_State *L) { return shaped(L, 2); }
static int l_rand(lua_State *L) { return shaped(L, 3); }
static int l_randn(lua_State *L) { return shaped(L, 4); }

/* The dtype PyTorch infers for a fill value: bool, int64 for integers, float32. */
static grace_dtype value_dtype(lua_State *L, int idx) {
  return lua_isboolean(L, idx) ? GRACE_BOOL : lua_isinteger(L, idx) ? GRACE_INT64 : GRACE_FLOAT32;
}

/* The fill value at idx into attribute a (exact for integers). */
static void value_of(lua_State *L, lg_ctx *c, int idx, const char *op, grace_attrs *a) {
  if (!lua_isboolean(L, idx) && lua_type(L, idx) != LUA_TNUMBER)
    lg_errorf(L, c, "%s: the fill value must be a number, got %s", op, luaL_typename(L, idx));
  lg_number_attr(L, idx, a, 0);
}

/* grace.full(shape, value [, opts]) */
static int l_full(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_attrs a = {0};
  default_device(c, &a);
  int next;
  if (lua_type(L, 1) == LUA_TNUMBER) {   /* full(2, 3, value): the last number is the value */
    int n = 1;
    while (lua_type(L, n + 1) == LUA_TNUMBER) n++;
    if (!lua_isboolean(L, n + 1)) n--;
    if (n > GRACE_MAX_DIMS) return lg_errorf(L, c, "full: more than %d dims requested", GRACE_MAX_DIMS);
    for (int i = 0; i < n; i++) {
      a.shape[i] = lg_int(L, c, i + 1, "full", "a size");
      if (a.shape[i] < 0) return lg_errorf(L, c, "full: sizes must be >= 0, got %lld", (long long)a.shape[i]);
    }
    a.nshape = n;
    next = n + 1;
  } else {
    next = lg_shape(L, c, 1, "full", &a, 0);
  }
  value_of(L, c, next, "full", &a);
  grace_dtype vdt = value_dtype(L, next);
  lg_opts(L, c, next + 1, "full", &a, NULL);
  if (!a.has_dtype) a.dtype = vdt;
  a.has_dtype = 1;
  return lg_run(L, c, GRACE_OP_FULL, 0, NULL, &a, 1);
}

/* grace.arange([start,] end [, step] [, opts]): integer arguments give int64 */
static int l_arange(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_attrs a = {0};
  default_device(c, &a);
  int n = 0, all_int = 1, i = 1;
  for (; i <= 3 && lua_type(L, i) == LUA_TNUMBER; i++, n++) all_int &= lua_isinteger(L, i);
  if (n == 0) return lg_errorf(L, c, "arange: expected numbers ([start,] end [, step]), got %s", luaL_typename(L, 1));
  lg_opts(L, c, i, "arange", &a, NULL);
  lua_pushinteger(L, 0);
  lua_pushinteger(L, 1);
  int zero = lua_gettop(L) - 1, one = zero + 1;
  lg_number_attr(L, n >= 2 ? 1 : zero, &a, 0);    /* start */
  lg_number_attr(L, n >= 2 ? 2 : 1, &a, 1);       /* end */
  lg_number_attr(L, n == 3 ? 3 : one, &a, 2);     /* step */
  lua_pop(L, 2);
  if (!a.has_dtype) a.dtype = all_int ? GRACE_INT64 : GRACE_FLOAT32;
  a.has_dtype = 1;
  return lg_run(L, c, GRACE_OP_ARANGE, 0, NULL, &a, 1);
}

/* grace.linspace(start, end, steps [, opts]) */
static int l_linspace(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_attrs a = {0};
  default_device(c, &a);
  for (int i = 1; i <= 2; i++)
    if (lua_type(L, i) != LUA_TNUMBER) return lg_errorf(L, c, "linspace: start and end must be numbers, got %s", luaL_typename(L, i));
  a.a = lua_tonumber(L, 1);
  a.b = lua_tonumber(L, 2);
  a.i0 = lg_int(L, c, 3, "linspace", "steps");
  lg_opts(L, c, 4, "linspace", &a, NULL);
  if (!a.has_dtype) a.dtype = GRACE_FLOAT32;
  a.has_dtype = 1;
  return lg_run(L, c, GRACE_OP_LINSPACE, 0, NULL, &a, 1);
}

/* grace.eye(n [, m] [, opts]) */
static int l_eye(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_attrs a = {0};
  default_device(c, &a);
  a.nshape = 1;
  a.shape[0] = lg_int(L, c, 1, "eye", "n");
  int i = 2;
  if (lua_type(L, 2) == LUA_TNUMBER) { a.shape[a.nshape++] = lg_int(L, c, 2, "eye", "m"); i = 3; }
  for (int d = 0; d < a.nshape; d++)
    if (a.shape[d] < 0) return lg_errorf(L, c, "eye: sizes must be >= 0, got %lld", (long long)a.shape[d]);
  lg_opts(L, c, i, "eye", &a, NULL);
  if (!a.has_dtype) a.dtype = GRACE_FLOAT32;
  a.has_dtype = 1;
  return lg_run(L, c, GRACE_OP_EYE, 0, NULL, &a, 1);
}

/* grace.randint(low, high, shape [, opts]): high exclusive */
static int l_randint(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  grace_attrs a = {0};
  default_device(c, &a);
  a.i0 = lg_int(L, c, 1, "randint", "low");
  a.i1 = lg_int(L, c, 2, "randint", "high");
  int next = lg_shape(L, c, 3, "randint", &a, 0);
  lg_opts(L, c, next, "randint", &a, NULL);
  if (!a.has_dtype) a.dtype = GRACE_INT64;
  a.has_dtype = 1;
  return lg_run(L, c, GRACE_OP_RANDINT, 0, NULL, &a, 1);
}

/* zeros_like(x [, opts]) and friends: x's shape, dtype and device unless the options say otherwise */
static int like(lua_State *L, int which) {
  static const char *const names[] = {"zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "full_like"};
  const char *name = names[which];
  lg_ctx *c = lg_begin(L);
  grace_tensor *x = lg_check(L, c, 1, name);
  grace_attrs a = {0};
  a.nshape = grace_tensor_ndim(x);
  grace_trace_size_read(c->vm, x, -1);   /* the new tensor's shape is made of x's sizes, not computed from x */
  memcpy(a.shape, grace_tensor_sizes(x), (size_t)a.nshape * sizeof(int64_t));
  a.dtype = grace_tensor_dtype(x);
  a.device = grace_tensor_device(x);
  int oi = 2;
  if (which == 5) { value_of(L, c, 2, name, &a); oi = 3; }
  else a.a = which == 1;
  lg_opts(L, c, oi, name, &a, NULL);
  a.has_dtype = 1;
  if (which == 2) {
    grace_tensor **slot = lg_newslot(L);
    if (grace_tensor_empty(c->vm, a.dtype, a.device, a.nshape, a.shape, slot) != GRACE_OK ||
        (c->want_grad && grace_tensor_set_requires_grad(*slot, 1) != GRACE_OK)) return lg_fail(L, c);
    lg_account(L, c, *slot);
    return 1;
  }
  return lg_run(L, c, which == 3 ? GRACE_OP_RAND : which == 4 ? GRACE_OP_RANDN : GRACE_OP_FULL, 0, NULL, &a, 1);
}
static int l_zeros_like(lua_State *L) { return like(L, 0); }
static int l_ones_like(lua_State *L) { return like(L, 1); }
static int l_empty_like(lua_State *L) { return like(L, 2); }
static int l_rand_like(lua_State *L) { return like(L, 3); }
static int l_randn_like(lua_State *L) { return like(L, 4); }
static int l_full_like(lua_State *L) { return like(L, 5); }

/* ---- grace.fromfile(path, dtype, shape [, offset_bytes]) ----
 * Raw little-endian element bytes (what numpy's tofile and torch's numpy().tofile() write on x86) into a
 * new contiguous CPU tensor. Every argument is checked before the file is opened, and the file is closed
 * before any error is raised, so a Lua error never leaks the FILE. */
static int l_fromfile(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  const char *path = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
  if (!path) return lg_errorf(L, c, "fromfile: expected a file path, got %s", luaL_typename(L, 1));
  grace_dtype dt = lg_dtype(L, c, 2, "fromfile");
  if (lua_type(L, 3) != LUA_TTABLE)
    return lg_errorf(L, c, "fromfile: expected the shape as a table (e.g. {2, 3}, {} for 0-d), got %s",
                     luaL_typename(L, 3));
  grace_attrs a = {0};
  lg_shape(L, c, 3, "fromfile", &a, 0);
  int64_t offset = 0;
  if (!lua_isnoneornil(L, 4)) {
    offset = lg_int(L, c, 4, "fromfile", "offset_bytes");
    if (offset < 0) return lg_errorf(L, c, "fromfile: offset_bytes must be >= 0, got %lld", (long long)offset);
  }
  if (!lua_isnone(L, 5)) return lg_errorf(L, c, "fromfile: unexpected argument 5 (%s)", luaL_typename(L, 5));
  int64_t numel = 1;
  for (int d = 0; d < a.nshape; d++) {
    if (a.shape[d] && numel > (INT64_C(1) << 40) / a.shape[d]) return lg_errorf(L, c, "fromfile: too many elements");
    numel *= a.shape[d];
  }
  size_t esize = grace_dtype_size(dt);
  int64_t nbytes = numel * (int64_t)esize;
  char shp[160];
  lg_shape_str(shp, sizeof shp, a.nshape, a.shape);
  grace_tensor **slot = lg_newslot(L);
  if (grace_tensor_empty(c->vm, dt, GRACE_CPU, a.nshape, a.shape, slot) != GRACE_OK) return lg_fail(L, c);
  lg_account(L, c, *slot);
  FILE *f = fopen(path, "rb");
  if (!f) return lg_errorf(L, c, "fromfile: cannot open '%s': %s", path, strerror(errno));
  int64_t size = -1;
  if (fseeko(f, 0, SEEK_END) == 0) size = (int64_t)ftello(f);
  size_t got = 0;
  int fits = size >= 0 && offset <= size && nbytes <= size - offset;   /* no offset + nbytes: it may overflow */
  int seek_ok = fits && fseeko(f, (off_t)offset, SEEK_SET) == 0;
  if (seek_ok && nbytes > 0) got = fread(grace_tensor_data(*slot), 1, (size_t)nbytes, f);
  int read_err = ferror(f);
  fclose(f);
  if (size < 0) return lg_errorf(L, c, "fromfile: cannot find the size of '%s'", path);
  if (!fits)
    return lg_errorf(L, c, "fromfile: '%s' holds %lld bytes; %s %s needs %lld bytes from offset %lld", path,
                     (long long)size, grace_dtype_name(dt), shp, (long long)nbytes, (long long)offset);
  if (!seek_ok || read_err || (int64_t)got != nbytes)
    return lg_errorf(L, c, "fromfile: reading %lld bytes from '%s' at offset %lld failed (got %lld)",
                     (long long)nbytes, path, (long long)offset, (long long)got);
  if (dt == GRACE_BOOL) {   /* any nonzero byte is true, stored as 1 like every other bool tensor */
    uint8_t *b = grace_tensor_data(*slot);
    for (int64_t i = 0; i < numel; i++) b[i] = b[i] != 0;
  }
  return 1;
}

static const luaL_Reg create_funcs[] = {
  {"tensor", l_tensor},
  {"zeros", l_zeros},
  {"ones", l_ones},
  {"empty", l_empty},
  {"full", l_full},
  {"arange", l_arange},
  {"linspace", l_linspace},
  {"eye", l_eye},
  {"rand", l_rand},
  {"randn", l_randn},
  {"randint", l_randint},
  {"zeros_like", l_zeros_like},
  {"ones_like", l_ones_like},
  {"empty_like", l_empty_like},
  {"rand_like", l_rand_like},
  {"randn_like", l_randn_like},
  {"full_like", l_full_like},
  {"fromfile", l_fromfile},
  {NULL, NULL}
};

void lg_open_create(lua_State *L) { luaL_setfuncs(L, create_funcs, 0); }
