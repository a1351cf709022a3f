/* lgrace_io.c: grace.save(path, tensor_or_table [, opts]) and grace.load(path [, opts]) over the core's
 * grace_save_file / grace_load_file (safetensors, .npy, .npz picked by the extension or opts.format). A table's
 * names are saved sorted, so the same table always gives the same bytes. A loaded file is held by a userdata whose
 * __gc frees it, so a Lua error while the results are pushed cannot leak its tensors. */
#include <stdlib.h>
#include <string.h>
#include "lua/lgrace_tensor.h"

#define LG_FILE "grace.TensorFile"
#define LG_SINGLE "arr_0"   /* a lone tensor's name in a .safetensors or .npz file: np.savez's for a positional one */

static int file_gc(lua_State *L) {
  grace_tensor_file **p = luaL_checkudata(L, 1, LG_FILE);
  grace_tensor_file_free(*p);
  *p = NULL;
  return 0;
}

static grace_file_format opt_format(lua_State *L, lg_ctx *c, int opts, const char *op, const char *path) {
  grace_file_format fmt = grace_file_format_of(path);
  if (lua_type(L, opts) != LUA_TTABLE) return fmt;
  lua_getfield(L, opts, "format");
  if (!lua_isnil(L, -1)) {
    const char *s = lua_tostring(L, -1);
    if (s && strcmp(s, "safetensors") == 0) fmt = GRACE_FILE_SAFETENSORS;
    else if (s && strcmp(s, "npy") == 0) fmt = GRACE_FILE_NPY;
    else if (s && strcmp(s, "npz") == 0) fmt = GRACE_FILE_NPZ;
    else lg_errorf(L, c, "%s: format must be \"safetensors\", \"npy\" or \"npz\", got %s", op, luaL_tolstring(L, -1, NULL));
  }
  lua_pop(L, 1);
  return fmt;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The name -> tensor table at idx as two arrays (in userdata kept on the stack), sorted by name. */
static int table_entries(lua_State *L, lg_ctx *c, int idx, const char ***names, grace_tensor ***ts) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) { n++; lua_pop(L, 1); }
  const char **nm = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *nm, 0);
  int k = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      lg_errorf(L, c, "save: table keys must be tensor names (strings), got a %s key", luaL_typename(L, -2));
    if (!lg_totensor(L, -1))
      lg_errorf(L, c, "save: '%s' is a %s, not a tensor", lua_tostring(L, -2), luaL_typename(L, -1));
    nm[k++] = lua_tostring(L, -2);   /* the table keeps the string alive */
    lua_pop(L, 1);
  }
  qsort(nm, (size_t)n, sizeof *nm, cmp_str);
  grace_tensor **t = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *t, 0);
  for (int i = 0; i < n; i++) {
    lua_getfield(L, idx, nm[i]);
    t[i] = lg_totensor(L, -1);
    lua_pop(L, 1);
  }
  *names = nm;
  *ts = t;
  return n;
}

/* opts.metadata (string -> string) as two arrays; 0 when none. */
static int metadata(lua_State *L, lg_ctx *c, int opts, const char ***keys, const char ***values) {
  if (lua_type(L, opts) != LUA_TTABLE) return 0;
  lua_getfield(L, opts, "metadata");
  int m = lua_gettop(L);
  if (lua_isnil(L, m)) return 0;
  if (!lua_istable(L, m)) lg_errorf(L, c, "save: metadata must be a table of strings, got %s", luaL_typename(L, m));
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, m)) {
    if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
      lg_errorf(L, c, "save: metadata keys and values must be strings (got %s = %s)", luaL_typename(L, -2),
                luaL_typename(L, -1));
    n++;
    lua_pop(L, 1);
  }
  const char **k = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *k * 2, 0);
  int i = 0;
  lua_pushnil(L);
  while (lua_next(L, m)) {
    k[i] = lua_tostring(L, -2);
    k[n + i++] = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  *keys = k;
  *values = k + n;
  return n;
}

static int l_save(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  const char *path = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
  if (!path) return lg_errorf(L, c, "save: expected a file path, got %s", luaL_typename(L, 1));
  if (!lua_isnoneornil(L, 3) && !lua_istable(L, 3))
    return lg_errorf(L, c, "save: expected an options table as argument 3, got %s", luaL_typename(L, 3));
  grace_file_format fmt = opt_format(L, c, 3, "save", path);
  const char **names, **keys = NULL, **values = NULL;
  grace_tensor **ts;
  int n;
  grace_tensor *one = lg_totensor(L, 2);
  static const char *single = LG_SINGLE;
  if (one) {
    n = 1;
    names = &single;
    ts = &one;
  } else if (lua_istable(L, 2)) {
    if (fmt == GRACE_FILE_NPY)
      return lg_errorf(L, c, "save: '%s': a .npy file holds one tensor; save a table to .safetensors or .npz", path);
    n = table_entries(L, c, 2, &names, &ts);
  } else {
    return lg_errorf(L, c, "save: expected a tensor or a table of name -> tensor, got %s", luaL_typename(L, 2));
  }
  int nmeta = metadata(L, c, 3, &keys, &values);
  if (grace_save_file(c->vm, path, fmt, n, names, ts, nmeta, keys, values) != GRACE_OK) return lg_fail(L, c);
  lg_drop(c);
  return 0;
}

static int l_load(lua_State *L) {
  lg_ctx *c = lg_begin(L);
  const char *path = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
  if (!path) return lg_errorf(L, c, "load: expected a file path, got %s", luaL_typename(L, 1));
  if (!lua_isnoneornil(L, 2) && !lua_istable(L, 2))
    return lg_errorf(L, c, "load: expected an options table as argument 2, got %s", luaL_typename(L, 2));
  grace_file_format fmt = opt_format(L, c, 2, "load", path);
  grace_device dev = GRACE_CPU;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "device");
    if (!lua_isnil(L, -1) && !(lua_type(L, -1) == LUA_TSTRING && lg_parse_device(lua_tostring(L, -1), &dev)))
      return lg_errorf(L, c, "load: device must be \"cpu\" or \"cuda\", got %s", luaL_tolstring(L, -1, NULL));
    lua_pop(L, 1);
  }
  grace_tensor_file **pf = lua_newuserdatauv(L, sizeof *pf, 0);
  *pf = NULL;
  luaL_setmetatable(L, LG_FILE);
  if (grace_load_file(c->vm, path, fmt, dev, pf) != GRACE_OK) return lg_fail(L, c);
  grace_tensor_file *f = *pf;
  if (fmt == GRACE_FILE_NPY) {   /* a .npy holds one tensor: returned as is */
    grace_tensor **slot = lg_newslot(L);
    *slot = f->tensors[0];
    grace_tensor_retain(*slot);
    lg_account(L, c, *slot);
    lg_drop(c);
    return 1;
  }
  lua_createtable(L, 0, f->count);
  for (int i = 0; i < f->count; i++) {
    grace_tensor **slot = lg_newslot(L);
    *slot = f->tensors[i];
    grace_tensor_retain(*slot);
    lg_account(L, c, *slot);
    lua_setfield(L, -2, f->names[i]);
  }
  lua_createtable(L, 0, f->nmeta);
  for (int i = 0; i < f->nmeta; i++) {
    lua_pushstring(L, f->meta_values[i]);
    lua_setfield(L, -2, f->meta_keys[i]);
  }
  lua_createtable(L, f->count, 0);   /* the names in the file's order (a Lua table has none) */
  for (int i = 0; i < f->count; i++) {
    lua_pushstring(L, f->names[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lg_drop(c);
  return 3;
}

static const luaL_Reg io_funcs[] = {
  {"save", l_save},
  {"load", l_load},
  {NULL, NULL},
};

void lgrace_open_io(lua_State *L) {
  if (luaL_newmetatable(L, LG_FILE)) {
    lua_pushcfunction(L, file_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  luaL_setfuncs(L, io_funcs, 0);
}
