/* lgrace_compile.c: grace.compile and grace.explain, grace's TorchDynamo for Lua. A call checks the
 * guards of the cached entries and runs the first that passes (the Lua function does not run); otherwise
 * it traces the function by running it once under a core trace (every tensor op is recorded into IR),
 * and caches the IR with guards on what the trace depended on: the arguments (tensor types, values of
 * numbers, strings and booleans, identity of tables and functions), the globals it read, the numbers in
 * its upvalues, and the captured tensors found by walking its upvalues and arguments (identity, version).
 * A number argument that changes value becomes a dynamic scalar input. What cannot be compiled runs
 * eagerly, and says why once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lua/lgrace_tensor.h"

#define LG_COMPILED "grace.Compiled"
#define LG_ENTRY "grace.Entry"
#define MAXARGS 32

typedef enum { G_NIL, G_BOOL, G_INT, G_FLOAT, G_VALUE, G_TENSOR, G_SCALAR } gkind;

typedef struct arg_guard {
  gkind kind;
  grace_dtype dt;
  grace_device dev;
  int ndim, contiguous;
  int64_t sizes[GRACE_MAX_DIMS], strides[GRACE_MAX_DIMS];
  lua_Integer i;
  lua_Number f;
  int scalar_int;                       /* G_SCALAR: the number's subtype */
} arg_guard;

/* A compiled entry: userdata with __gc freeing the IR; its uservalue table holds the Lua-side data:
 * [1] guard values (G_VALUE args), [2] paths, [3] expected values at the paths, [4] constant returns. */
#define MAXPATHS 16
/* The whole-program passes: the canonical ones keep results bit for bit as eager; attention (a fusion, whose
 * kernel is judged by tolerance) goes first, before anything could split the softmax it looks for. */
#define CANON_PASSES "fold,simplify,cse,views,hoist,dce"
#define COMPILE_PASSES "attention," CANON_PASSES

/* An entry runs in one of three ways: ir (the whole function as one program; the Lua code does not run),
 * paths (a function with graph breaks: its Lua code runs and is replayed against these recorded paths),
 * or neither (eagerly; the reason is in the uservalue [5]). */
typedef struct entry {
  grace_ir *ir;
  grace_ir *tree[MAXPATHS];             /* recorded paths of a function with breaks */
  int ntree;
  int nargs;
  arg_guard args[MAXARGS];
  int input_arg[MAXARGS], ninput;       /* IR tensor input k is argument input_arg[k] */
  int scalar_arg[MAXARGS], nscalar;     /* IR scalar input k is argument scalar_arg[k] */
  int nret;
  int ret_output[MAXARGS];              /* >= 0: IR output index; -1: constant from the uservalue;
                                           <= -2: argument -2 - k itself (the same object, as eager) */
  int npaths;
  int alias[MAXARGS];                   /* tensor argument i shares storage with argument alias[i] (-1: none) */
  long hits;
} entry;

typedef struct compiled {
  int cache_limit;
  int dynamic;                          /* promote changing number arguments (default on) */
  int dynamic_arg[MAXARGS];             /* arguments promoted to dynamic scalars */
  int allow_arg[MAXARGS];               /* opts.dynamic as a list: only these may be promoted */
  int allow_listed;
  int eager_forever, warned;
  long calls, hits, traces, eager_calls, recaptures, replays;
  char name[96];
  char irname[64];                      /* the name as an identifier, for the IR's text form */
  char last_miss[400];
} compiled;

/* ---- timing ---- */
static int l_clock(lua_State *L) {
  lua_pushnumber(L, grace_clock());
  return 1;
}

/* ---- locations: the first frame of user code (the standard library is skipped) ---- */
typedef struct { lua_State *L; } where_ctx;

static void where_cb(void *ud, char *buf, size_t n) {
  lua_State *L = ((where_ctx *)ud)->L;
  lua_Debug ar;
  const char *first = NULL;
  int first_line = 0;
  for (int level = 1; lua_getstack(L, level, &ar); level++) {
    if (!lua_getinfo(L, "Sl", &ar) || ar.currentline <= 0) continue;
    if (!first) { first = ar.short_src; first_line = ar.currentline; }
    if (strncmp(ar.source, "@stdlib/", 8) != 0) { snprintf(buf, n, "%s:%d", ar.short_src, ar.currentline); return; }
  }
  if (first) snprintf(buf, n, "%s:%d", first, first_line);
}

/* ---- guards on arguments ---- */
static void tensor_guard(arg_guard *g, const grace_tensor *t) {
  g->kind = G_TENSOR;
  g->dt = grace_tensor_dtype(t);
  g->dev = grace_tensor_device(t);
  g->ndim = grace_tensor_ndim(t);
  g->contiguous = grace_tensor_is_contiguous(t);
  memcpy(g->sizes, grace_tensor_sizes(t), sizeof(int64_t) * (size_t)g->ndim);
  memcpy(g->strides, grace_tensor_strides(t), sizeof(int64_t) * (size_t)g->ndim);
}

/* Two tensor guards accept the same tensors: dtype, device, sizes, contiguity, and strides when strided. */
static int same_tensor_guard(const arg_guard *a, const arg_guard *b) {
  return a->dt == b->dt && a->dev == b->dev && a->ndim == b->ndim && a->contiguous == b->contiguous &&
         !memcmp(a->sizes, b->sizes, sizeof(int64_t) * (size_t)a->ndim) &&
         (a->contiguous || !memcmp(a->strides, b->strides, sizeof(int64_t) * (size_t)a->ndim));
}

static const char *tensor_desc(const arg_guard *g, char *buf, size_t n) {
  char s[160];
  snprintf(buf, n, "%s %s%s", grace_dtype_name(g->dt), lg_shape_str(s, sizeof s, g->ndim, g->sizes),
           g->contiguous ? "" : " (strided)");
  return buf;
}

/* Why the value at idx fails guard g (NULL: it passes). vals: index of the guard-values table. */
static const char *arg_miss(lua_State *L, const arg_guard *g, int idx, int vals, int i, char *buf, size_t n) {
  switch (g->kind) {
  case G_NIL: return lua_isnil(L, idx) ? NULL : "is no longer nil";
  case G_BOOL: return lua_isboolean(L, idx) && lua_toboolean(L, idx) == (int)g->i ? NULL : "boolean changed";
  case G_INT:
    if (lua_isinteger(L, idx) && lua_tointeger(L, idx) == g->i) return NULL;
    snprintf(buf, n, "number changed (%lld at trace time)", (long long)g->i);
    return buf;
  case G_FLOAT: {   /* bit for bit: -0.0 is not 0.0 (1/x tells them apart), and NaN is itself */
    lua_Number v = lua_tonumber(L, idx);
    if (lua_type(L, idx) == LUA_TNUMBER && !lua_isinteger(L, idx) && !memcmp(&v, &g->f, sizeof v)) return NULL;
    snprintf(buf, n, "number changed (%.17g at trace time)", g->f);
    return buf;
  }
  case G_SCALAR:
    return lua_type(L, idx) == LUA_TNUMBER && lua_isinteger(L, idx) == g->scalar_int ? NULL : "number subtype changed";
  case G_VALUE: {
    lua_rawgeti(L, vals, i);
    int same = lua_rawequal(L, idx, -1);
    lua_pop(L, 1);
    return same ? NULL : "a different value (strings by value, tables and functions by identity)";
  }
  case G_TENSOR: {
    grace_tensor *t = lg_totensor(L, idx);
    if (!t) return "not a tensor";
    arg_guard now;
    tensor_guard(&now, t);
    if (same_tensor_guard(g, &now)) return NULL;
    char want[200], got[200];
    snprintf(buf, n, "tensor %s, traced with %s", tensor_desc(&now, got, sizeof got), tensor_desc(g, want, sizeof want));
    return buf;
  }
  }
  return "unknown guard";
}

/* Which argument each tensor argument shares storage with (-1: none): aliasing changes what in-place
 * writes do, so the pattern is part of the guards. */
static void alias_pattern(lua_State *L, int args, int nargs, int *alias) {
  const void *ids[MAXARGS];
  for (int i = 0; i < nargs && i < MAXARGS; i++) {
    grace_tensor *t = lg_totensor(L, args + i);
    ids[i] = t ? grace_tensor_storage_id(t) : NULL;
    alias[i] = -1;
    for (int j = 0; j < i && t; j++) if (ids[j] == ids[i]) { alias[i] = j; break; }
  }
}

/* ---- paths: where a captured tensor or a guarded number lives, re-read on every call ----
 * A path is a table {root, k1, k2, ...}: root "a<i>" (argument i), "u<i>" (upvalue i of the function),
 * "g" (a global: k1 is its name); then the keys of nested tables (raw access) or "u<i>" for an upvalue
 * of a function met on the way. */
static void push_path_value(lua_State *L, int fn, int args, int path) {
  lua_rawgeti(L, path, 1);
  const char *root = lua_tostring(L, -1);
  int start = 2;
  if (root[0] == 'a') {
    lua_pop(L, 1);
    lua_pushvalue(L, args + atoi(root + 1) - 1);
  } else if (root[0] == 'u') {
    lua_pop(L, 1);
    if (!lua_getupvalue(L, fn, atoi(root + 1))) lua_pushnil(L);
  } else {
    lua_pop(L, 1);
    const char *up = NULL;
    int i = 1;
    while ((up = lua_getupvalue(L, fn, i)) != NULL) {   /* the function's _ENV */
      if (!strcmp(up, "_ENV")) break;
      lua_pop(L, 1);
      i++;
    }
    if (!up) lua_pushglobaltable(L);
  }
  lua_Integer n = luaL_len(L, path);
  for (lua_Integer k = start; k <= n; k++) {
    lua_rawgeti(L, path, k);
    int ty = lua_type(L, -2);
    if (ty == LUA_TFUNCTION && lua_type(L, -1) == LUA_TSTRING && lua_tostring(L, -1)[0] == 'u' && k > 1) {
      int ui = atoi(lua_tostring(L, -1) + 1);
      lua_pop(L, 1);
      if (!lua_getupvalue(L, -1, ui)) lua_pushnil(L);
      lua_remove(L, -2);
    } else if (ty == LUA_TTABLE) {
      lua_rawget(L, -2);
      lua_remove(L, -2);
    } else {
      lua_pop(L, 2);
      lua_pushnil(L);
      return;
    }
  }
}

/* Why the path guards of e fail (NULL: they pass). */
static const char *paths_miss(lua_State *L, int fn, int args, int ud, char *buf, size_t n) {
  lua_getiuservalue(L, ud, 1);
  int data = lua_gettop(L);
  lua_rawgeti(L, data, 2);
  lua_rawgeti(L, data, 3);
  int paths = data + 1, expect = data + 2;
  entry *e = lua_touserdata(L, ud);
  const char *why = NULL;
  for (int i = 1; i <= e->npaths && !why; i++) {
    lua_rawgeti(L, paths, i);
    push_path_value(L, fn, args, lua_gettop(L));
    lua_rawgeti(L, expect, i);
    int same;
    grace_tensor *a = lg_totensor(L, -2), *b = lg_totensor(L, -1);
    if (a || b) same = a == b;
    else same = lua_rawequal(L, -2, -1) && (lua_type(L, -1) != LUA_TNUMBER || lua_isinteger(L, -1) == lua_isinteger(L, -2));
    if (!same) {
      lua_rawgeti(L, -3, 1);
      snprintf(buf, n, "captured value #%d (path root %s) changed identity or value", i, lua_tostring(L, -1));
      lua_pop(L, 1);
      why = buf;
    }
    lua_pop(L, 3);
  }
  lua_settop(L, data - 1);
  return why;
}

/* ---- the walk that finds captured tensors and the numbers a trace depends on ---- */
typedef struct walk {
  lua_State *L;
  int fn, args, nargs;
  int seen;           /* table: visited tables/functions */
  int targets;        /* table: tensor userdata -> true (captured tensors still to find) */
  int paths, expect;  /* output lists */
  int npaths, budget;
  int libs;           /* table: the modules in package.loaded (libraries are not state to guard) */
  int arg_captured;   /* an argument tensor is also reachable (targets maps it to 2) */
} walk;

static void add_guard(walk *w, int path_idx, int value_idx) {
  lua_State *L = w->L;
  w->npaths++;
  lua_pushvalue(L, path_idx);
  lua_rawseti(L, w->paths, w->npaths);
  lua_pushvalue(L, value_idx);
  lua_rawseti(L, w->expect, w->npaths);
}

/* Visits the value on top of the stack, reached by the path at path_idx (a table). depth bounds it;
 * scalars are guarded when `guard_scalars` (direct upvalues, fields of tables holding a captured tensor). */
static void visit(walk *w, int path_idx, int depth, int guard_scalars);

static void visit_child(walk *w, int path_idx, int key_idx, int depth, int guard_scalars) {
  lua_State *L = w->L;
  /* child path = copy of path + key */
  lua_newtable(L);
  lua_Integer n = luaL_len(L, path_idx);
  for (lua_Integer k = 1; k <= n; k++) { lua_rawgeti(L, path_idx, k); lua_rawseti(L, -2, k); }
  lua_pushvalue(L, key_idx);
  lua_rawseti(L, -2, n + 1);
  int child_path = lua_gettop(L);
  lua_pushvalue(L, -2);   /* the child value, just below the new path */
  visit(w, child_path, depth, guard_scalars);
  lua_settop(L, child_path - 1);
}

static void visit(walk *w, int path_idx, int depth, int guard_scalars) {
  lua_State *L = w->L;
  int v = lua_gettop(L);
  int ty = lua_type(L, v);
  if (--w->budget < 0) return;
  if (ty == LUA_TUSERDATA) {
    grace_tensor *t = lg_totensor(L, v);
    if (!t) return;
    lua_pushlightuserdata(L, t);
    lua_rawget(L, w->targets);
    int wanted = lua_toboolean(L, -1), is_arg = lua_tointeger(L, -1) == 2;
    lua_pop(L, 1);
    if (is_arg) { w->arg_captured = 1; return; }
    if (wanted) {
      add_guard(w, path_idx, v);
      lua_pushlightuserdata(L, t);
      lua_pushnil(L);
      lua_rawset(L, w->targets);
    }
    return;
  }
  if ((ty == LUA_TNUMBER || ty == LUA_TSTRING || ty == LUA_TBOOLEAN) && guard_scalars) {
    add_guard(w, path_idx, v);
    return;
  }
  /* a function the code may call: guarded by identity (a replaced method or helper retraces) */
  if (ty == LUA_TFUNCTION && guard_scalars) add_guard(w, path_idx, v);
  if ((ty != LUA_TTABLE && ty != LUA_TFUNCTION) || depth <= 0) return;
  lua_pushvalue(L, v);
  lua_rawget(L, w->seen);
  int seen = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (seen) return;
  lua_pushvalue(L, v);
  lua_pushboolean(L, 1);
  lua_rawset(L, w->seen);
  if (ty == LUA_TFUNCTION) {
    for (int i = 1;; i++) {
      const char *name = lua_getupvalue(L, v, i);
      if (!name) break;
      if (!strcmp(name, "_ENV")) { lua_pop(L, 1); continue; }   /* globals are guarded as they are read */
      lua_pushfstring(L, "u%d", i);
      int key = lua_gettop(L);
      lua_pushvalue(L, key - 1);
      lua_remove(L, key - 1);   /* stack: ..., key, value */
      visit_child(w, path_idx, key - 1, depth - 1, 1);
      lua_settop(L, v);
    }
    return;
  }
  /* a table of data (a module, a config): its numbers, strings and booleans are guarded; a library's
   * table (a value of package.loaded) is code, not state */
  lua_pushvalue(L, v);
  lua_rawget(L, w->libs);
  int lib = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (lib) return;
  lua_pushnil(L);
  while (lua_next(L, v)) {
    int kt = lua_type(L, -2);
    if (kt == LUA_TSTRING || kt == LUA_TNUMBER) {
      int value = lua_gettop(L);
      visit_child(w, path_idx, value - 1, depth - 1, 1);
      lua_settop(L, value);
    }
    lua_pop(L, 1);
  }
}

/* Pushes the set of library tables (values of package.loaded). */
static void push_libs(lua_State *L) {
  lua_newtable(L);
  lua_getglobal(L, "package");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "loaded");
    if (lua_istable(L, -1)) {
      lua_pushnil(L);
      while (lua_next(L, -2)) {
        if (lua_istable(L, -1)) { lua_pushboolean(L, 1); lua_rawset(L, -5); }
        else lua_pop(L, 1);
      }
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* Walks the arguments and the function's upvalues (roots a<i>, u<i>) collecting guards into w. */
static void walk_roots(walk *w, int fn, int args, int nargs) {
  lua_State *L = w->L;
  int top = lua_gettop(L);
  for (int i = 0; i < nargs; i++) {
    if (!lua_istable(L, args + i) && !lua_isfunction(L, args + i)) continue;
    lua_newtable(L);
    lua_pushfstring(L, "a%d", i + 1);
    lua_rawseti(L, -2, 1);
    lua_pushvalue(L, args + i);
    visit(w, lua_gettop(L) - 1, 8, 0);
    lua_settop(L, top);
  }
  lua_pushvalue(L, fn);
  lua_pushboolean(L, 1);
  lua_rawset(L, w->seen);
  for (int i = 1;; i++) {
    const char *name = lua_getupvalue(L, fn, i);
    if (!name) break;
    if (!strcmp(name, "_ENV")) { lua_pop(L, 1); continue; }
    lua_newtable(L);
    lua_pushfstring(L, "u%d", i);
    lua_rawseti(L, -2, 1);
    lua_insert(L, -2);
    visit(w, lua_gettop(L) - 1, 8, 1);
    lua_settop(L, top);
  }
}

/* Which path of a walk (paths/expect tables) no longer holds its value: a description, or NULL. */
static const char *changed_path(lua_State *L, int fn, int args, int paths, int expect, int n, char *buf, size_t len) {
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, paths, i);
    int path = lua_gettop(L);
    push_path_value(L, fn, args, path);
    lua_rawgeti(L, expect, i);
    if (!lua_rawequal(L, -1, -2)) {
      lua_rawgeti(L, path, 1);
      const char *root = lua_tostring(L, -1), *name = NULL;
      if (root[0] == 'u') {   /* an upvalue of the function: say its name */
        name = lua_getupvalue(L, fn, atoi(root + 1));
        if (name) lua_pop(L, 1);
      }
      lua_rawgeti(L, path, luaL_len(L, path));
      if (luaL_len(L, path) == 1 && name)
        snprintf(buf, len, "the function assigns its upvalue '%s'; a compiled call would not, so it runs eagerly", name);
      else
        snprintf(buf, len, "the function changes Lua state that it reads (%s %s, key %s); a compiled call would not, so "
                 "it runs eagerly", root[0] == 'a' ? "argument" : "upvalue", name ? name : root + 1,
                 lua_isstring(L, -1) ? lua_tostring(L, -1) : "?");
      lua_settop(L, path - 1);
      return buf;
    }
    lua_settop(L, path - 1);
  }
  return NULL;
}

/* Whether $GRACE_LOG (a comma-separated list) names topic. */
static int log_topic(const char *topic) {
  const char *v = getenv("GRACE_LOG");
  size_t n = strlen(topic);
  for (const char *p = v; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (!strncmp(p, topic, n) && (p[n] == ',' || p[n] == 0)) return 1;
  return 0;
}

/* For GRACE_LOG=ir: how the program would run once fused (after decomposition) and its memory plan. */
static void log_plan(grace_vm *vm, grace_ir *ir) {
  grace_ir *dec = NULL;
  if (grace_ir_pass(ir, "attention,decompose," CANON_PASSES, &dec) != GRACE_OK) {
    fprintf(stderr, "grace: no fusion report: %s\n", grace_last_error(vm));
    return;
  }
  const size_t n = 1 << 16;
  char *buf = grace_realloc(vm, NULL, 0, n);
  if (buf) {
    int nk = 0;
    grace_status st = grace_ir_fuse_report(dec, buf, n, &nk);
    fprintf(stderr, "grace: fused, %d kernel%s%s:\n%s", nk, nk == 1 ? "" : "s", st == GRACE_OK ? "" : " (report cut)", buf);
    int64_t arena = 0, peak = 0;
    if (grace_ir_memplan(dec, NULL, &arena, &peak, buf, n) == GRACE_OK) fprintf(stderr, "grace: memory plan: %s\n", buf);
    grace_realloc(vm, buf, n, 0);
  }
  grace_ir_free(dec);
}

/* ---- placement (ir/ir_place.c): for GRACE_LOG=placement and grace.explain's "placement:" section ---- */
/* ir's placement report, each line after prefix: to stderr (b NULL) or into b. A report longer than the buffer is
 * shown as far as it fits. */
static void place_lines(grace_vm *vm, grace_ir *ir, const char *prefix, luaL_Buffer *b) {
  const size_t n = 1 << 16;
  char *buf = grace_realloc(vm, NULL, 0, n);
  grace_status st = buf ? grace_ir_place_report(ir, buf, n, NULL) : GRACE_ENOMEM;
  if (buf && (st == GRACE_OK || (st == GRACE_EARG && buf[0]))) {
    for (const char *p = buf, *e; *p; p = *e ? e + 1 : e) {
      if (!(e = strchr(p, '\n'))) e = p + strlen(p);
      if (!b) { fprintf(stderr, "%s%.*s\n", prefix, (int)(e - p), p); continue; }
      luaL_addstring(b, prefix);
      luaL_addlstring(b, p, (size_t)(e - p));
      luaL_addchar(b, '\n');
    }
  } else if (b) {
    luaL_addstring(b, prefix);
    luaL_addstring(b, "(no placement report: ");
    luaL_addstring(b, grace_last_error(vm));
    luaL_addstring(b, ")\n");
  } else
    fprintf(stderr, "%s(no placement report: %s)\n", prefix, grace_last_error(vm));
  grace_realloc(vm, buf, n, 0);
}

/* "model.lua", 12 -> "model_lua_12" */
static void set_irname(compiled *cp, const char *src, int line) {
  const char *base = strrchr(src, '/');
  base = base ? base + 1 : src;
  size_t k = 0;
  for (const char *p = base; *p && k + 12 < sizeof cp->irname; p++)
    cp->irname[k++] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ? *p : '_';
  if (line >= 0) k += (size_t)snprintf(cp->irname + k, sizeof cp->irname - k, "_%d", line);
  cp->irname[k] = 0;
}

/* ---- the compiled object ---- */
static compiled *check_compiled(lua_State *L, int idx) { return luaL_checkudata(L, idx, LG_COMPILED); }

static int entry_gc(lua_State *L) {
  entry *e = luaL_checkudata(L, 1, LG_ENTRY);
  grace_ir_free(e->ir);
  e->ir = NULL;
  for (int k = 0; k < e->ntree; k++) grace_ir_free(e->tree[k]);
  e->ntree = 0;
  return 0;
}

/* A function with breaks: its Lua code runs with every op matched against the recorded paths and
 * deferred to the next break; a call that leaves the paths adds a new one. Results are those of the
 * function itself. */
static int run_replay(lua_State *L, lg_ctx *c, compiled *cp, entry *e, int fn, int args, int nargs) {
  grace_vm *vm = c->vm;
  where_ctx wc = {L};
  if (grace_replay_begin(vm, e->tree, e->ntree, where_cb, &wc) != GRACE_OK) return lg_fail(L, c);
  for (int k = 0; k < e->ninput; k++) {
    grace_value v;
    if (grace_trace_input(vm, lg_totensor(L, args + e->input_arg[k]), &v) != GRACE_OK) {
      grace_ir *none;
      grace_replay_end(vm, &none);
      return lg_fail(L, c);
    }
  }
  lua_settop(L, fn);
  for (int i = 0; i < nargs; i++) lua_pushvalue(L, args + i);
  int st = lua_pcall(L, nargs, LUA_MULTRET, 0);
  grace_ir *rec = NULL;
  grace_status rs = grace_replay_end(vm, &rec);
  if (st != LUA_OK) { grace_ir_free(rec); return lua_error(L); }
  if (rs != GRACE_OK && rs != GRACE_EUNSUPPORTED) { grace_ir_free(rec); return lg_fail(L, c); }
  if (rec) {
    if (e->ntree < MAXPATHS && grace_ir_verify(rec) == GRACE_OK) e->tree[e->ntree++] = rec;
    else grace_ir_free(rec);
    cp->traces++;
  }
  cp->replays++;
  return lua_gettop(L) - fn + 1;
}

/* Pushes the value returned number j of entry e at stack index ud. */
static void push_const_ret(lua_State *L, int ud, int j) {
  lua_getiuservalue(L, ud, 1);
  lua_rawgeti(L, -1, 4);
  lua_rawgeti(L, -1, j + 1);
  lua_replace(L, -3);
  lua_pop(L, 1);
}

/* Runs entry e (userdata at ud) on the arguments at args..args+nargs-1; pushes the results. */
static int run_entry(lua_State *L, lg_ctx *c, int ud, int args) {
  entry *e = lua_touserdata(L, ud);
  grace_tensor *in[2 * MAXARGS], *out[MAXARGS];
  int n = 0;
  for (int k = 0; k < e->ninput; k++) in[n++] = lg_totensor(L, args + e->input_arg[k]);
  for (int k = 0; k < e->nscalar; k++) {
    int a = args + e->scalar_arg[k];
    grace_tensor *s = NULL;
    grace_status st = lua_isinteger(L, a) ? grace_tensor_scalar_int(c->vm, lua_tointeger(L, a), &s)
                                          : grace_tensor_scalar(c->vm, lua_tonumber(L, a), 0, &s);
    if (st != GRACE_OK) return lg_fail(L, c);
    in[n++] = lg_keep(L, c, s);
  }
  int nout = grace_ir_count(e->ir, "outputs");
  grace_tensor **slots[MAXARGS];
  for (int j = 0; j < e->nret; j++) {
    if (e->ret_output[j] >= 0) slots[j] = lg_newslot(L);
    else if (e->ret_output[j] <= -2) lua_pushvalue(L, args - 2 - e->ret_output[j]);
    else push_const_ret(L, ud, j);
  }
  if (grace_ir_run(e->ir, n, in, nout, out) != GRACE_OK) return lg_fail(L, c);
  for (int j = 0; j < e->nret; j++)
    if (e->ret_output[j] >= 0) { *slots[j] = out[e->ret_output[j]]; grace_tensor_retain(*slots[j]); }
  for (int k = 0; k < nout; k++) grace_tensor_release(out[k]);
  lg_drop(c);
  /* as eager results are: the collector learns the outputs' bytes, so that those the caller drops are freed soon
   * (a 4 MB device tensor is a small userdata to it; without this, a loop of calls held hundreds of MB) */
  for (int j = 0; j < e->nret; j++) if (e->ret_output[j] >= 0) lg_account(L, c, *slots[j]);
  e->hits++;
  return e->nret;
}

/* ---- tracing ---- */
/* The _ENV proxy during a trace: reads and writes of globals are recorded (upvalue 2), then go through. */
static int env_index(lua_State *L) {
  lua_pushvalue(L, 2);
  lua_gettable(L, lua_upvalueindex(1));       /* the real environment */
  if (lua_type(L, 2) == LUA_TSTRING) {
    lua_pushvalue(L, 2);
    lua_pushvalue(L, -2);
    lua_rawset(L, lua_upvalueindex(2));        /* reads: name -> value */
  }
  return 1;
}
static int env_newindex(lua_State *L) {
  lua_settop(L, 3);
  if (lua_type(L, 2) == LUA_TSTRING) {   /* writes: name -> true */
    lua_pushvalue(L, 2);
    lua_pushboolean(L, 1);
    lua_rawset(L, lua_upvalueindex(2));
  }
  lua_settable(L, lua_upvalueindex(1));
  return 0;
}

static int find_env(lua_State *L, int fn) {
  for (int i = 1;; i++) {
    const char *name = lua_getupvalue(L, fn, i);
    if (!name) return 0;
    lua_pop(L, 1);
    if (!strcmp(name, "_ENV")) return i;
  }
}

/* Traces fn (at fn) on the arguments args..args+nargs-1; on success leaves a new entry userdata on top,
 * below the function's results; returns the number of results. On failure to compile (not an error of
 * the function) the entry is an eager one with the reason. Lua errors of fn propagate, nothing leaks. */
static int trace_call(lua_State *L, lg_ctx *c, compiled *cp, int fn, int args, int nargs, int *nres) {
  grace_vm *vm = c->vm;
  int base = lua_gettop(L);
  entry *e = lua_newuserdatauv(L, sizeof *e, 1);
  memset(e, 0, sizeof *e);
  luaL_setmetatable(L, LG_ENTRY);
  int ud = lua_gettop(L);
  lua_createtable(L, 5, 0);   /* [1] guard values [2] paths [3] expected [4] constant returns [5] reason */
  int data = lua_gettop(L);
  for (int k = 1; k <= 4; k++) { lua_newtable(L); lua_rawseti(L, data, k); }
  lua_pushvalue(L, data);
  lua_setiuservalue(L, ud, 1);
  e->nargs = nargs;
  alias_pattern(L, args, nargs, e->alias);
  /* what the function can read of Lua state, before it runs: a change afterwards is a side effect */
  push_libs(L);
  int libs = lua_gettop(L);
  lua_newtable(L); int pre_seen = lua_gettop(L);
  lua_newtable(L); int pre_targets = lua_gettop(L);
  lua_newtable(L); int pre_paths = lua_gettop(L);
  lua_newtable(L); int pre_expect = lua_gettop(L);
  walk pw = {L, fn, args, nargs, pre_seen, pre_targets, pre_paths, pre_expect, 0, 100000, libs, 0};
  walk_roots(&pw, fn, args, nargs);
  int pre_n = pw.npaths;
  char irname[64];
  snprintf(irname, sizeof irname, "%s", cp->irname);
  e->ir = grace_ir_new(vm, irname);
  if (!e->ir) return lg_fail(L, c);
  where_ctx wc = {L};
  if (grace_trace_begin(vm, e->ir, where_cb, &wc) != GRACE_OK) return lg_fail(L, c);
  /* arguments: guards, trace inputs, proxies for dynamic scalars */
  lua_pushvalue(L, fn);
  int callf = lua_gettop(L);
  char why[1024] = "";
  for (int i = 0; i < nargs; i++) {
    int a = args + i;
    arg_guard *g = &e->args[i];
    grace_tensor *t = lg_totensor(L, a);
    grace_value v;
    switch (lua_type(L, a)) {
    case LUA_TNIL: g->kind = G_NIL; break;
    case LUA_TBOOLEAN: g->kind = G_BOOL; g->i = lua_toboolean(L, a); break;
    case LUA_TNUMBER:
      if (lua_isinteger(L, a)) { g->kind = G_INT; g->i = lua_tointeger(L, a); }
      else { g->kind = G_FLOAT; g->f = lua_tonumber(L, a); }
      break;
    default:
      if (t) {
        tensor_guard(g, t);
        if (grace_trace_input(vm, t, &v) != GRACE_OK) snprintf(why, sizeof why, "argument %d: %s", i + 1, grace_last_error(vm));
        e->input_arg[e->ninput++] = i;
      } else {
        g->kind = G_VALUE;
        lua_rawgeti(L, data, 1);
        lua_pushvalue(L, a);
        lua_rawseti(L, -2, i);
        lua_pop(L, 1);
      }
      break;
    }
    lua_pushvalue(L, a);
  }
  /* globals read during the trace are recorded through a proxy _ENV */
  int envi = find_env(L, fn);
  int reads = 0, realenv = 0, gwrites = 0;
  if (envi) {
    lua_getupvalue(L, fn, envi);
    realenv = lua_gettop(L);
    lua_newtable(L);
    reads = lua_gettop(L);
    lua_newtable(L);
    gwrites = lua_gettop(L);
    lua_newtable(L);   /* the proxy */
    lua_newtable(L);   /* its metatable */
    lua_pushvalue(L, realenv); lua_pushvalue(L, reads);
    lua_pushcclosure(L, env_index, 2);
    lua_setfield(L, -2, "__index");
    lua_pushvalue(L, realenv); lua_pushvalue(L, gwrites);
    lua_pushcclosure(L, env_newindex, 2);
    lua_setfield(L, -2, "__newindex");
    lua_setmetatable(L, -2);
    lua_setupvalue(L, fn, envi);
    /* move the call (function and its arguments) above the env bookkeeping */
    int ncall = nargs + 1;
    for (int k = 0; k < ncall; k++) { lua_pushvalue(L, callf); lua_remove(L, callf); }
    callf = lua_gettop(L) - ncall + 1;
    realenv -= ncall; reads -= ncall; gwrites -= ncall;
  }
  int top_before = callf - 1;
  int st = lua_pcall(L, nargs, LUA_MULTRET, 0);
  if (envi) { lua_pushvalue(L, realenv); lua_setupvalue(L, fn, envi); }
  if (st != LUA_OK) {
    grace_trace_end(vm);
    return lua_error(L);   /* the entry (and its IR) is garbage now; its __gc frees it */
  }
  int first = top_before + 1, n = lua_gettop(L) - top_before;
  *nres = n;
  /* results */
  e->nret = n;
  if (n > MAXARGS && !*why) snprintf(why, sizeof why, "more than %d results", MAXARGS);
  int nouts = 0;
  for (int j = 0; j < n && j < MAXARGS; j++) {
    grace_tensor *t = lg_totensor(L, first + j);
    int argk = -1;
    for (int i = 0; t && i < nargs && argk < 0; i++) if (lg_totensor(L, args + i) == t) argk = i;
    if (argk >= 0) e->ret_output[j] = -2 - argk;
    else if (t) {
      grace_value v;
      if (grace_trace_value(vm, t, &v) != GRACE_OK || (v >= 0 && grace_ir_output(e->ir, v) != GRACE_OK)) {
        grace_trace_end(vm);
        return lg_fail(L, c);
      }
      e->ret_output[j] = nouts++;   /* v < 0: a problem was noted, and the entry will run eagerly */
    } else {
      if (lua_type(L, first + j) == LUA_TTABLE && !*why)
        snprintf(why, sizeof why, "result %d is a table: return tensors and numbers directly", j + 1);
      e->ret_output[j] = -1;
      lua_rawgeti(L, data, 4);
      lua_pushvalue(L, first + j);
      lua_rawseti(L, -2, j + 1);
      lua_pop(L, 1);
    }
  }
  char problems[1024];
  snprintf(problems, sizeof problems, "%s", grace_trace_problems(vm));
  grace_status ts = grace_trace_end(vm);
  if (ts != GRACE_OK && !*why) {
    snprintf(why, sizeof why, "%s", problems[0] ? problems : grace_last_error(vm));
    size_t wl = strlen(why);
    while (wl && why[wl - 1] == '\n') why[--wl] = 0;   /* several problems stay one per line */
  }
  /* side effects on Lua state the function reads: a compiled call would not repeat them */
  if (!*why && gwrites) {
    lua_pushnil(L);
    if (lua_next(L, gwrites)) {
      snprintf(why, sizeof why, "the function assigns the global '%s'; a compiled call would not, so it runs eagerly",
               lua_isstring(L, -2) ? lua_tostring(L, -2) : "?");
      lua_pop(L, 2);
    }
  }
  if (!*why) changed_path(L, fn, args, pre_paths, pre_expect, pre_n, why, sizeof why);
  /* captured tensors: find each one's path from the arguments and upvalues */
  if (!*why) {
    lua_newtable(L); int seen = lua_gettop(L);
    lua_newtable(L); int targets = lua_gettop(L);
    lua_rawgeti(L, data, 2); int paths = lua_gettop(L);
    lua_rawgeti(L, data, 3); int expect = lua_gettop(L);
    /* targets: the captured tensors that are not local constants of the trace */
    lua_Integer nconst = grace_ir_count(e->ir, "consts");
    for (int k = 0; k < nconst; k++) {
      grace_tensor *t = grace_ir_const_tensor(e->ir, k);
      if (!t || grace_ir_const_is_local(e->ir, k)) continue;
      lua_pushlightuserdata(L, t);
      lua_pushboolean(L, 1);
      lua_rawset(L, targets);
    }
    /* argument tensors too: one the function also reaches by a captured path is read through two names,
     * which one IR value cannot tell apart */
    for (int i = 0; i < nargs; i++) {
      grace_tensor *t = lg_totensor(L, args + i);
      if (!t) continue;
      lua_pushlightuserdata(L, t);
      lua_pushinteger(L, 2);
      lua_rawset(L, targets);
    }
    walk w = {L, fn, args, nargs, seen, targets, paths, expect, 0, 200000, libs, 0};
    walk_roots(&w, fn, args, nargs);
    for (int i = 0; i < nargs; i++) {
      grace_tensor *t = lg_totensor(L, args + i);
      if (!t) continue;
      lua_pushlightuserdata(L, t);
      lua_pushnil(L);
      lua_rawset(L, targets);
    }
    if (w.arg_captured)
      snprintf(why, sizeof why, "a tensor passed as an argument is also reached by the function through an upvalue, a "
               "table or a global; pass a copy, or use only one of the two");
    /* globals read: guarded by value (numbers, strings, booleans) or identity (anything else) */
    if (reads) {
      lua_pushnil(L);
      while (lua_next(L, reads)) {
        lua_newtable(L);
        lua_pushliteral(L, "g");
        lua_rawseti(L, -2, 1);
        lua_pushvalue(L, -3);
        lua_rawseti(L, -2, 2);
        add_guard(&w, lua_gettop(L), lua_gettop(L) - 1);
        lua_pop(L, 1);
        /* a tensor read from a global is found here too */
        grace_tensor *t = lg_totensor(L, -1);
        if (t) { lua_pushlightuserdata(L, t); lua_pushnil(L); lua_rawset(L, targets); }
        lua_pop(L, 1);
      }
    }
    e->npaths = w.npaths;
    lua_pushnil(L);
    if (lua_next(L, targets)) {
      lua_pop(L, 2);
      snprintf(why, sizeof why, "a captured tensor is not reachable from the function's arguments, upvalues or globals "
               "(reached through a C function or a metatable?); pass it as an argument");
    }
    lua_settop(L, seen - 1);
  }
  if (!*why && grace_ir_verify(e->ir) != GRACE_OK) snprintf(why, sizeof why, "internal: %s", grace_last_error(vm));
  if (log_topic("ir")) {
    if (*why) fprintf(stderr, "grace: %s: no IR, runs eagerly: %s\n", cp->name, why);
    else fprintf(stderr, "grace: %s traced:\n%s", cp->name, grace_ir_text(e->ir));
  }
  if (!*why && grace_ir_count(e->ir, "breaks") > 0) {   /* the recording is the first path of the tree */
    e->tree[e->ntree++] = e->ir;
    e->ir = NULL;
  } else if (!*why) {
    /* the whole-program passes (decompose waits for fusion, whose kernels are judged by tolerance); a recording
     * stays as traced where a pass fails */
    grace_ir *opt = NULL;
    if (grace_ir_pass(e->ir, COMPILE_PASSES, &opt) == GRACE_OK) {
      grace_ir_free(e->ir);
      e->ir = opt;
      if (log_topic("ir")) {
        fprintf(stderr, "grace: after %s:\n%s", COMPILE_PASSES, grace_ir_text(e->ir));
        log_plan(vm, e->ir);
      }
    } else if (log_topic("ir"))
      fprintf(stderr, "grace: %s: passes failed, the traced IR runs: %s\n", cp->name, grace_last_error(vm));
  }
  /* GRACE_LOG=placement: where host values meet the device, and the device partitions */
  if (!*why && (e->ir || e->ntree) && log_topic("placement")) {
    char prefix[300];
    snprintf(prefix, sizeof prefix, "grace: placement of %s: ", cp->name);
    place_lines(vm, e->ir ? e->ir : e->tree[e->ntree - 1], prefix, NULL);
  }
  if (*why) {
    grace_ir_free(e->ir);
    e->ir = NULL;
    lua_pushstring(L, why);
    lua_rawseti(L, data, 5);
  }
  /* leave: entry, results */
  lua_pushvalue(L, ud);
  lua_insert(L, first);
  /* remove everything between base and the entry (the data table, env bookkeeping) */
  int junk = first - base - 1;
  for (int k = 0; k < junk; k++) lua_remove(L, base + 1);
  return n;
}

/* Tells once, on stderr, why a compiled function runs eagerly. */
static void say_once(compiled *cp, const char *what) {
  if (cp->warned) return;
  cp->warned = 1;
  fprintf(stderr, "grace.compile: %s runs eagerly: %s\n", cp->name, what);
}

/* Calls the function at fn on the arguments as plain Lua; returns the number of results, which replace
 * everything from fn up. */
static int call_eager(lua_State *L, compiled *cp, int fn, int args, int nargs) {
  cp->eager_calls++;
  lua_settop(L, fn);
  for (int i = 0; i < nargs; i++) lua_pushvalue(L, args + i);
  lua_call(L, nargs, LUA_MULTRET);
  return lua_gettop(L) - fn + 1;
}

static int same_arg_guard(lua_State *L, const arg_guard *a, const arg_guard *b, int vals1, int vals2, int i) {
  if (a->kind != b->kind) return 0;
  switch (a->kind) {
  case G_NIL: return 1;
  case G_BOOL: return a->i == b->i;
  case G_TENSOR: return same_tensor_guard(a, b);
  case G_VALUE: {
    lua_rawgeti(L, vals1, i);
    lua_rawgeti(L, vals2, i);
    int same = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    return same;
  }
  default: return 0;
  }
}

/* The number argument i's value as a literal of a program would hold it. */
static int literal_is_arg(const arg_guard *g, double v, int64_t iv, int is_int) {
  if (g->kind == G_INT) return is_int && iv == g->i;
  return !is_int && !memcmp(&v, &g->f, sizeof v);
}

/* Two entries traced with different numbers in some arguments, whose programs differ only in literals
 * that equal those numbers in each: the later one becomes a single entry for any value of them (each a
 * dynamic scalar input, written per call), and the earlier one goes. Anything else that depends on the
 * numbers (Lua arithmetic on them, a branch, a size, a table key, a returned number) makes the programs
 * differ, and the numbers stay guarded by value. Returns whether it promoted. */
static int try_promote(lua_State *L, compiled *cp, int entries) {
  lua_Integer n = luaL_len(L, entries);
  if (!cp->dynamic || n < 2) return 0;
  lua_rawgeti(L, entries, n);
  int ud2 = lua_gettop(L);
  entry *e2 = lua_touserdata(L, ud2);
  if (!e2->ir || e2->nscalar) { lua_pop(L, 1); return 0; }
  lua_getiuservalue(L, ud2, 1);
  int data2 = lua_gettop(L);
  for (lua_Integer k = n - 1; k >= 1; k--) {
    lua_settop(L, data2);
    lua_rawgeti(L, entries, k);
    int ud1 = lua_gettop(L);
    entry *e1 = lua_touserdata(L, ud1);
    if (!e1->ir || e1->nscalar || e1->nargs != e2->nargs || e1->nret != e2->nret || e1->npaths != e2->npaths) continue;
    lua_getiuservalue(L, ud1, 1);
    int data1 = lua_gettop(L);
    lua_rawgeti(L, data1, 1);
    lua_rawgeti(L, data2, 1);
    int vals1 = lua_gettop(L) - 1, vals2 = vals1 + 1;
    int differs[MAXARGS] = {0}, nd = 0, ok = 1;
    for (int i = 0; i < e1->nargs && ok; i++) {
      const arg_guard *a = &e1->args[i], *b = &e2->args[i];
      if ((a->kind == G_INT || a->kind == G_FLOAT) && a->kind == b->kind) {
        int same = a->kind == G_INT ? a->i == b->i : !memcmp(&a->f, &b->f, sizeof a->f);
        if (!same) {
          if (cp->allow_listed && !cp->allow_arg[i]) ok = 0;
          differs[i] = 1;
          nd++;
        }
      } else ok = same_arg_guard(L, a, b, vals1, vals2, i);
    }
    if (!ok || !nd) continue;
    /* the same captured values, and the same results */
    for (int j = 0; j < e1->nret && ok; j++) ok = e1->ret_output[j] == e2->ret_output[j];
    lua_rawgeti(L, data1, 3);
    lua_rawgeti(L, data2, 3);
    for (int p = 1; p <= e1->npaths && ok; p++) {
      lua_rawgeti(L, -2, p);
      lua_rawgeti(L, -2, p);
      ok = lua_rawequal(L, -1, -2);
      lua_pop(L, 2);
    }
    lua_pop(L, 2);
    lua_rawgeti(L, data1, 4);
    lua_rawgeti(L, data2, 4);
    for (int j = 1; j <= e1->nret && ok; j++) {
      lua_rawgeti(L, -2, j);
      lua_rawgeti(L, -2, j);
      ok = lua_rawequal(L, -1, -2) && (lua_type(L, -1) != LUA_TNUMBER || lua_isinteger(L, -1) == lua_isinteger(L, -2));
      lua_pop(L, 2);
    }
    lua_pop(L, 2);
    int lits[MAXARGS * 4], lit_arg[MAXARGS * 4];
    int nl = ok ? grace_ir_literal_diff(e1->ir, e2->ir, lits, MAXARGS * 4) : -1;
    for (int l = 0; l < nl && ok; l++) {
      double v1, v2;
      int64_t i1, i2;
      int int1, int2;
      grace_ir_literal_value(e1->ir, lits[l], &v1, &i1, &int1);
      grace_ir_literal_value(e2->ir, lits[l], &v2, &i2, &int2);
      lit_arg[l] = -1;
      for (int i = 0; i < e1->nargs && lit_arg[l] < 0; i++)
        if (differs[i] && literal_is_arg(&e1->args[i], v1, i1, int1) && literal_is_arg(&e2->args[i], v2, i2, int2)) lit_arg[l] = i;
      ok = lit_arg[l] >= 0;
    }
    if (nl < 0 || !ok) continue;
    for (int l = 0; l < nl; l++) {
      grace_ir_literal_to_scalar(e2->ir, lits[l]);
      e2->scalar_arg[e2->nscalar++] = lit_arg[l];
    }
    for (int i = 0; i < e2->nargs; i++)
      if (differs[i]) {
        e2->args[i].scalar_int = e2->args[i].kind == G_INT;
        e2->args[i].kind = G_SCALAR;
        cp->dynamic_arg[i] = 1;
      }
    /* the earlier entry goes */
    for (lua_Integer m = k; m < n; m++) { lua_rawgeti(L, entries, m + 1); lua_rawseti(L, entries, m); }
    lua_pushnil(L);
    lua_rawseti(L, entries, n);
    lua_settop(L, ud2 - 1);
    return 1;
  }
  lua_settop(L, ud2 - 1);
  return 0;
}

/* Why the call's arguments alias differently from the trace, or overlap a captured tensor of a program
 * that writes in place (NULL: they do not). */
static const char *alias_miss(lua_State *L, const entry *e, int args, int nargs) {
  int now[MAXARGS];
  alias_pattern(L, args, nargs, now);
  if (memcmp(now, e->alias, sizeof(int) * (size_t)nargs)) return "tensor arguments share storage differently than when traced";
  const grace_ir *ir = e->ir;
  if (!ir || !grace_ir_count(ir, "writes")) return NULL;
  int nc = grace_ir_count(ir, "consts");
  for (int i = 0; i < nargs; i++) {
    grace_tensor *t = lg_totensor(L, args + i);
    if (!t) continue;
    for (int k = 0; k < nc; k++) {
      grace_tensor *c = grace_ir_const_tensor(ir, k);
      if (c && grace_tensor_storage_id(c) == grace_tensor_storage_id(t))
        return "a tensor argument shares storage with a captured tensor of a program that writes in place";
    }
  }
  return NULL;
}

static int compiled_call(lua_State *L) {
  compiled *cp = check_compiled(L, 1);
  lg_ctx *c = lg_begin(L);
  int nargs = lua_gettop(L) - 1, args = 2;
  cp->calls++;
  lua_getiuservalue(L, 1, 1);          /* {fn, entries} */
  int info = lua_gettop(L);
  lua_rawgeti(L, info, 1);
  int fn = lua_gettop(L);
  if (cp->eager_forever || nargs > MAXARGS || grace_trace_active(c->vm)) return call_eager(L, cp, fn, args, nargs);
  lua_rawgeti(L, info, 2);
  int entries = lua_gettop(L);
  lua_Integer ne = luaL_len(L, entries);
  char buf[256];
  for (lua_Integer k = 1; k <= ne; k++) {
    lua_rawgeti(L, entries, k);
    int ud = lua_gettop(L);
    entry *e = lua_touserdata(L, ud);
    const char *miss = e->nargs == nargs ? NULL : "number of arguments changed";
    lua_getiuservalue(L, ud, 1);
    lua_rawgeti(L, -1, 1);
    int vals = lua_gettop(L);
    for (int i = 0; i < nargs && !miss; i++) {
      miss = arg_miss(L, &e->args[i], args + i, vals, i, buf, sizeof buf);
      if (miss) {
        char tmp[300];
        snprintf(tmp, sizeof tmp, "argument %d: %s", i + 1, miss);
        snprintf(cp->last_miss, sizeof cp->last_miss, "%s", tmp);

      }
    }
    lua_settop(L, ud);
    if (!miss) miss = alias_miss(L, e, args, nargs);
    if (!miss) miss = paths_miss(L, fn, args, ud, buf, sizeof buf);
    if (miss) {
      if (!cp->last_miss[0] || strstr(miss, "captured")) snprintf(cp->last_miss, sizeof cp->last_miss, "%s", miss);
      lua_settop(L, entries);
      continue;
    }
    cp->hits++;
    if (e->ir && !grace_ir_consts_current(e->ir)) {
      /* a captured tensor was written in place: nothing in the program was derived from its contents,
       * so re-recording means accepting its new version */
      grace_ir_recapture(e->ir);
      cp->recaptures++;
    }
    if (e->ntree) return run_replay(L, c, cp, e, fn, args, nargs);
    if (!e->ir) return call_eager(L, cp, fn, args, nargs);   /* this guard set runs eagerly */
    return run_entry(L, c, ud, args);
  }
  if (ne >= cp->cache_limit) {
    char msg[600];
    snprintf(msg, sizeof msg, "%d compiled versions reached the cache limit (last guard failure: %s); "
             "raise opts.cache_limit or make the changing argument a tensor", (int)ne, cp->last_miss);
    say_once(cp, msg);
    cp->eager_forever = 1;
    return call_eager(L, cp, fn, args, nargs);
  }
  cp->traces++;
  int nres = 0;
  lua_settop(L, entries);
  trace_call(L, c, cp, fn, args, nargs, &nres);
  /* stack: ..., entries, entry, results... */
  int eidx = entries + 1;
  entry *e = lua_touserdata(L, eidx);
  lua_pushvalue(L, eidx);
  lua_rawseti(L, entries, ne + 1);
  if (try_promote(L, cp, entries) && log_topic("ir"))
    fprintf(stderr, "grace: %s: numbers that changed became dynamic scalars:\n%s", cp->name, grace_ir_text(e->ir));
  if (!e->ir && !e->ntree) {
    lua_getiuservalue(L, eidx, 1);
    lua_rawgeti(L, -1, 5);
    say_once(cp, lua_tostring(L, -1));
    lua_pop(L, 2);
  }
  return nres;
}

static int compiled_tostring(lua_State *L) {
  compiled *cp = check_compiled(L, 1);
  lua_pushfstring(L, "grace.compiled(%s: %d calls, %d traces, %d eager)", cp->name, (int)cp->calls, (int)cp->traces,
                  (int)cp->eager_calls);
  return 1;
}

static int compiled_stats(lua_State *L) {
  compiled *cp = check_compiled(L, 1);
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, cp->calls); lua_setfield(L, -2, "calls");
  lua_pushinteger(L, cp->hits); lua_setfield(L, -2, "hits");
  lua_pushinteger(L, cp->traces); lua_setfield(L, -2, "traces");
  lua_pushinteger(L, cp->eager_calls); lua_setfield(L, -2, "eager_calls");
  lua_pushinteger(L, cp->recaptures); lua_setfield(L, -2, "recaptures");
  lua_pushinteger(L, cp->replays); lua_setfield(L, -2, "replays");
  lua_pushboolean(L, cp->eager_forever); lua_setfield(L, -2, "eager");
  lua_pushstring(L, cp->last_miss); lua_setfield(L, -2, "last_guard_failure");
  lua_newtable(L);
  for (int i = 0, k = 1; i < MAXARGS; i++) if (cp->dynamic_arg[i]) { lua_pushinteger(L, i + 1); lua_rawseti(L, -2, k++); }
  lua_setfield(L, -2, "dynamic_args");
  lua_getiuservalue(L, 1, 1);
  lua_rawgeti(L, -1, 2);
  lua_pushinteger(L, luaL_len(L, -1));
  lua_setfield(L, -4, "entries");
  lua_pop(L, 2);
  return 1;
}

/* f:ir([k]): the IR text of entry k (default: the latest), or nil and the reason it runs eagerly. */
static int compiled_ir(lua_State *L) {
  check_compiled(L, 1);
  lua_Integer k = luaL_optinteger(L, 2, 0);
  lua_getiuservalue(L, 1, 1);
  lua_rawgeti(L, -1, 2);
  lua_Integer n = luaL_len(L, -1);
  if (k == 0) k = n;
  if (k < 1 || k > n) { lua_pushnil(L); lua_pushliteral(L, "no such entry"); return 2; }
  lua_rawgeti(L, -1, k);
  entry *e = lua_touserdata(L, -1);
  if (!e->ir && !e->ntree) {
    lua_getiuservalue(L, -1, 1);
    lua_pushnil(L);
    lua_rawgeti(L, -2, 5);
    return 2;
  }
  if (e->ntree) {   /* a function with breaks: its recorded paths, each with its break markers */
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int p = 0; p < e->ntree; p++) {
      const char *t = grace_ir_text(e->tree[p]);
      if (!t) return lgrace_error(L, lgrace_vm(L));
      lua_pushfstring(L, "-- path %d of %d (replayed: the Lua code runs, ops are matched and run at the breaks)\n", p + 1, e->ntree);
      luaL_addvalue(&b);
      luaL_addstring(&b, t);
    }
    luaL_pushresult(&b);
    return 1;
  }
  const char *text = grace_ir_text(e->ir);
  if (!text) return lgrace_error(L, lgrace_vm(L));
  lua_pushstring(L, text);
  return 1;
}

/* A callable object (an nn module) becomes a Lua closure over it, so the walk finds its tensors. */
static void wrap_callable(lua_State *L, int idx, const char *op) {
  if (lua_isfunction(L, idx)) return;
  if (!luaL_getmetafield(L, idx, "__call")) luaL_error(L, "%s: expected a function or a callable object, got %s", op, luaL_typename(L, idx));
  lua_pop(L, 1);
  if (luaL_loadstring(L, "local m = ... return function(...) return m(...) end") != LUA_OK) lua_error(L);
  lua_pushvalue(L, idx);
  lua_call(L, 1, 1);
  lua_replace(L, idx);
}

static int l_compile(lua_State *L) {
  lua_settop(L, 2);
  wrap_callable(L, 1, "compile");
  compiled *cp = lua_newuserdatauv(L, sizeof *cp, 1);
  memset(cp, 0, sizeof *cp);
  cp->cache_limit = 8;
  cp->dynamic = 0;   /* opt-in: Lua may branch on a number, which no recording shows */
  lua_Debug ar;
  lua_pushvalue(L, 1);
  lua_getinfo(L, ">S", &ar);
  snprintf(cp->name, sizeof cp->name, "function at %s:%d", ar.short_src, ar.linedefined);
  set_irname(cp, ar.short_src, ar.linedefined);
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "cache_limit");
    if (!lua_isnil(L, -1)) cp->cache_limit = (int)luaL_checkinteger(L, -1);
    lua_getfield(L, 2, "dynamic");
    if (lua_isboolean(L, -1)) cp->dynamic = lua_toboolean(L, -1);
    else if (lua_istable(L, -1)) {   /* a list of the argument positions that may become dynamic */
      cp->dynamic = 1;
      lua_Integer n = luaL_len(L, -1);
      for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, -1, i);
        lua_Integer a = luaL_checkinteger(L, -1);
        if (a >= 1 && a <= MAXARGS) cp->allow_arg[a - 1] = 1;
        cp->allow_listed = 1;
        lua_pop(L, 1);
      }
    }
    lua_getfield(L, 2, "name");
    if (lua_isstring(L, -1)) {
      snprintf(cp->name, sizeof cp->name, "%s", lua_tostring(L, -1));
      set_irname(cp, cp->name, -1);
    }
    lua_pop(L, 3);
  } else if (!lua_isnoneornil(L, 2))
    return luaL_error(L, "compile: options must be a table, got %s", luaL_typename(L, 2));
  if (cp->cache_limit < 1) return luaL_error(L, "compile: cache_limit must be at least 1");
  luaL_setmetatable(L, LG_COMPILED);
  lua_createtable(L, 2, 0);
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, 1);
  lua_newtable(L);
  lua_rawseti(L, -2, 2);
  lua_setiuservalue(L, -2, 1);
  return 1;
}

/* grace.explain(f, ...): traces f (a function or a compiled function) on the arguments once, without
 * caching, and returns (and prints) what grace does with it. */
static int l_explain(lua_State *L) {
  int nargs = lua_gettop(L) - 1;
  compiled *given = luaL_testudata(L, 1, LG_COMPILED);
  if (given) {
    lua_getiuservalue(L, 1, 1);
    lua_rawgeti(L, -1, 1);
    lua_replace(L, 1);
    lua_pop(L, 1);
  }
  wrap_callable(L, 1, "explain");
  lg_ctx *c = lg_begin(L);
  /* a throwaway compiled object with every number argument static */
  compiled tmp = {.cache_limit = 1, .dynamic = 0};
  lua_Debug ar;
  lua_pushvalue(L, 1);
  lua_getinfo(L, ">S", &ar);
  snprintf(tmp.name, sizeof tmp.name, "function at %s:%d", ar.short_src, ar.linedefined);
  set_irname(&tmp, ar.short_src, ar.linedefined);
  int nres = 0;
  int base = lua_gettop(L);
  trace_call(L, c, &tmp, 1, 2, nargs, &nres);
  entry *e = lua_touserdata(L, base + 1);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char line[512];
  snprintf(line, sizeof line, "grace.explain: %s\n", tmp.name);
  luaL_addstring(&b, line);
  grace_ir *prog = e->ir ? e->ir : e->ntree ? e->tree[0] : NULL;
  if (prog) {
    const char *text = grace_ir_text(prog);
    int counts[GRACE_NOPKINDS] = {0}, total = 0, nb = grace_ir_count(prog, "breaks");
    for (const char *p = text; p && (p = strstr(p, " = ")); p += 3) {
      char name[32];
      if (sscanf(p + 3, "%31[a-z_0-9]", name) != 1) continue;
      grace_op op;
      if (grace_op_from_name(name, &op) == GRACE_OK) { counts[grace_op_kind(op)]++; total++; }
    }
    snprintf(line, sizeof line, "  %s %d partition%s of %d ops in all (%d inputs, %d captured tensors, %d writes back)\n",
             nb ? "replays" : "compiles to", nb + 1, nb ? "s" : "", total, grace_ir_count(prog, "inputs"),
             grace_ir_count(prog, "consts"), grace_ir_count(prog, "writes"));
    luaL_addstring(&b, line);
    static const char *kinds[] = {
#define KIND_NAME(k) #k,
      GRACE_OPKINDS(KIND_NAME)
#undef KIND_NAME
    };
    luaL_addstring(&b, "  ops by kind:");
    for (int k = 0; k < GRACE_NOPKINDS; k++)
      if (counts[k]) { snprintf(line, sizeof line, " %s %d", kinds[k], counts[k]); luaL_addstring(&b, line); }
    luaL_addstring(&b, nb ? "\n  graph breaks (the host reads a value there; its Lua code runs on every call, and the ops "
                            "between breaks are matched and run as one partition):\n" : "\n  graph breaks: none\n");
    for (int k = 0; k < nb; k++) {
      int after;
      const char *where;
      grace_ir_break(prog, k, &after, &where);
      snprintf(line, sizeof line, "    %s: a tensor's value is read on the host (item, tolist, tostring, print); keep it a "
               "tensor (grace.where instead of if) to remove the break\n", where ? where : "(unknown place)");
      luaL_addstring(&b, line);
    }
    luaL_addstring(&b, "  placement:\n");
    place_lines(c->vm, prog, "    ", &b);
  } else {
    lua_getiuservalue(L, base + 1, 1);
    lua_rawgeti(L, -1, 5);
    snprintf(line, sizeof line, "  runs eagerly (no compiled partition):\n    %s\n", lua_tostring(L, -1));
    lua_pop(L, 2);
    luaL_addstring(&b, line);
  }
  if (given) {
    int any = 0;
    for (int i = 0; i < MAXARGS; i++)
      if (given->dynamic_arg[i]) {
        snprintf(line, sizeof line, "%s %d", any++ ? "," : "  dynamic scalars (numbers that change, passed per call): argument", i + 1);
        luaL_addstring(&b, line);
      }
    if (any) luaL_addstring(&b, "\n");
  }
  luaL_addstring(&b, "  guards:\n");
  for (int i = 0; i < e->nargs; i++) {
    const arg_guard *g = &e->args[i];
    char d[200];
    switch (g->kind) {
    case G_NIL: snprintf(line, sizeof line, "    argument %d is nil\n", i + 1); break;
    case G_BOOL: snprintf(line, sizeof line, "    argument %d == %s\n", i + 1, g->i ? "true" : "false"); break;
    case G_INT: snprintf(line, sizeof line, "    argument %d == %lld (becomes a dynamic scalar if it changes)\n", i + 1, (long long)g->i); break;
    case G_FLOAT: snprintf(line, sizeof line, "    argument %d == %.17g (becomes a dynamic scalar if it changes)\n", i + 1, g->f); break;
    case G_SCALAR: snprintf(line, sizeof line, "    argument %d is a dynamic scalar\n", i + 1); break;
    case G_VALUE: snprintf(line, sizeof line, "    argument %d is the same %s\n", i + 1, "value (identity)"); break;
    case G_TENSOR: snprintf(line, sizeof line, "    argument %d is a tensor %s\n", i + 1, tensor_desc(g, d, sizeof d)); break;
    }
    luaL_addstring(&b, line);
  }
  snprintf(line, sizeof line, "    %d captured values (tensors by identity and version, upvalue and global numbers by value)\n", e->npaths);
  luaL_addstring(&b, line);
  luaL_pushresult(&b);
  lua_pushvalue(L, -1);
  lua_getglobal(L, "print");
  if (lua_isfunction(L, -1)) { lua_insert(L, -2); lua_call(L, 1, 0); } else lua_pop(L, 2);
  return 1;
}

/* ---- launch report: how each device program of a compiled function runs (vm/gpu_graph.c) ---- */
static const char *const launch_names[GRACE_LAUNCH_NSTRATEGIES] = {"eager", "graph+copies", "graph+indirection"};

/* Pushes one program's launch figures as a table. */
static void push_graph_info(lua_State *L, const grace_graph_info *gi, int entry, int path) {
  lua_createtable(L, 0, 16);
  lua_pushinteger(L, entry); lua_setfield(L, -2, "entry");
  if (path) { lua_pushinteger(L, path); lua_setfield(L, -2, "path"); }
  lua_pushboolean(L, gi->managed); lua_setfield(L, -2, "on_device");
  lua_pushinteger(L, gi->calls); lua_setfield(L, -2, "calls");
  lua_pushinteger(L, gi->captures); lua_setfield(L, -2, "captures");
  lua_pushboolean(L, gi->decided); lua_setfield(L, -2, "decided");
  lua_pushboolean(L, gi->from_cache); lua_setfield(L, -2, "from_cache");
  lua_pushstring(L, gi->ineligible[0] ? "eager" : gi->decided ? launch_names[gi->chosen] : "measuring");
  lua_setfield(L, -2, "strategy");
  if (gi->ineligible[0]) { lua_pushstring(L, gi->ineligible); lua_setfield(L, -2, "no_graph"); }
  lua_pushinteger(L, gi->unfused); lua_setfield(L, -2, "unfused");
  if (gi->unfused) { lua_pushstring(L, gi->unfused_why); lua_setfield(L, -2, "unfused_why"); }
  lua_createtable(L, 0, 3);
  for (int k = 0; k < GRACE_LAUNCH_NSTRATEGIES; k++)
    if (gi->us[k] > 0) { lua_pushnumber(L, gi->us[k]); lua_setfield(L, -2, launch_names[k]); }
  lua_setfield(L, -2, "us");
  lua_createtable(L, 0, 3);
  for (int k = 0; k < GRACE_LAUNCH_NSTRATEGIES; k++)
    if (gi->why[k][0]) { lua_pushstring(L, gi->why[k]); lua_setfield(L, -2, launch_names[k]); }
  lua_setfield(L, -2, "unavailable");
  lua_pushinteger(L, gi->graphs); lua_setfield(L, -2, "graphs");
  lua_pushinteger(L, gi->kernels); lua_setfield(L, -2, "kernels");
  lua_pushinteger(L, gi->indirect_words); lua_setfield(L, -2, "indirect_words");
  lua_pushinteger(L, (lua_Integer)gi->graph_bytes); lua_setfield(L, -2, "graph_bytes");
  lua_pushinteger(L, (lua_Integer)gi->table_bytes); lua_setfield(L, -2, "table_bytes");
  lua_pushinteger(L, (lua_Integer)gi->arena_bytes); lua_setfield(L, -2, "arena_bytes");
  lua_pushinteger(L, (lua_Integer)gi->copy_bytes); lua_setfield(L, -2, "copy_bytes");
  lua_pushinteger(L, gi->replays); lua_setfield(L, -2, "replays");
  lua_pushnumber(L, gi->replay_host_us_min); lua_setfield(L, -2, "replay_host_us_min");
  lua_pushnumber(L, gi->replay_host_us_mean); lua_setfield(L, -2, "replay_host_us_mean");
}

/* A device program of a compiled function: its launch figures, its entry and path (0: not a path). */
typedef struct program_info {
  grace_graph_info gi;
  int entry, path;
} program_info;

/* The device programs of the compiled function at index 1 (entries, and paths of functions with breaks), in a
 * userdata pushed on the stack (collected with it); *n of them. */
static program_info *collect_programs(lua_State *L, int *n) {
  *n = 0;
  lua_getiuservalue(L, 1, 1);
  lua_rawgeti(L, -1, 2);
  lua_Integer ne = luaL_len(L, -1);
  int cap = 0;
  for (lua_Integer k = 1; k <= ne; k++) {
    lua_rawgeti(L, -1, k);
    entry *e = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (e) cap += 1 + e->ntree;
  }
  program_info *p = lua_newuserdatauv(L, sizeof *p * (size_t)(cap ? cap : 1), 0);
  for (lua_Integer k = 1; k <= ne; k++) {
    lua_rawgeti(L, -2, k);   /* the entries list, under the userdata */
    entry *e = lua_touserdata(L, -1);
    lua_pop(L, 1);
    for (int j = -1; e && j < e->ntree; j++) {
      grace_ir *ir = j < 0 ? e->ir : e->tree[j];
      if (!ir) continue;
      grace_ir_graph_info(ir, &p[*n].gi);
      if (!p[*n].gi.managed) continue;
      p[*n].entry = (int)k;
      p[(*n)++].path = j + 1;
    }
  }
  lua_replace(L, -3);   /* the userdata where the uservalue table was */
  lua_pop(L, 1);
  return p;
}

/* Pushes the list of f:report() for programs p[0..n). */
static void push_programs(lua_State *L, const program_info *p, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    push_graph_info(L, &p[i].gi, p[i].entry, p[i].path);
    lua_rawseti(L, -2, i + 1);
  }
}

/* f:report(): a list with one table per device program of f (entries, and paths of functions with breaks). */
static int compiled_report(lua_State *L) {
  check_compiled(L, 1);
  lua_settop(L, 1);
  int n;
  const program_info *p = collect_programs(L, &n);
  push_programs(L, p, n);
  return 1;
}

/* grace.report(f): prints, per device program of compiled function f, the launch strategy chosen, what each
 * strategy measured, kernels, bytes copied per call and the graphs' memory; returns f:report()'s table. */
static int l_report(lua_State *L) {
  compiled *cp = check_compiled(L, 1);
  lua_settop(L, 1);
  int n;
  const program_info *p = collect_programs(L, &n);
  push_programs(L, p, n);   /* the result, at index 3 */
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char line[512];
  snprintf(line, sizeof line, "grace.report: %s\n", cp->name);
  luaL_addstring(&b, line);
  if (n == 0) luaL_addstring(&b, "  no program has run on the CUDA device yet\n");
  for (int i = 0; i < n; i++) {
    const grace_graph_info *gi = &p[i].gi;
    char path[32] = "";
    if (p[i].path) snprintf(path, sizeof path, " path %d", p[i].path);
    const char *strategy = gi->ineligible[0] ? "eager" : gi->decided ? launch_names[gi->chosen] : "measuring";
    snprintf(line, sizeof line, "  program %d%s: %s%s after %ld calls; %d kernels per graph, %zu bytes copied per call, "
             "%d graphs holding %.1f KiB\n", p[i].entry, path, strategy,
             gi->from_cache ? " (measured by an earlier process: from the launch cache)" : "", gi->calls, gi->kernels,
             gi->copy_bytes, gi->graphs, (double)gi->graph_bytes / 1024.0);
    luaL_addstring(&b, line);
    if (gi->ineligible[0]) {
      snprintf(line, sizeof line, "    no graph: %s\n", gi->ineligible);
      luaL_addstring(&b, line);
    }
    if (gi->unfused) {
      snprintf(line, sizeof line, "    %d fused group%s ran an op at a time (%s)\n", gi->unfused, gi->unfused > 1 ? "s" : "",
               gi->unfused_why);
      luaL_addstring(&b, line);
    }
    for (int k = 0; k < GRACE_LAUNCH_NSTRATEGIES; k++) {
      if (gi->why[k][0]) snprintf(line, sizeof line, "    %-18s unavailable: %s\n", launch_names[k], gi->why[k]);
      else if (gi->us[k] > 0) snprintf(line, sizeof line, "    %-18s %9.1f us per call (median measured)\n", launch_names[k], gi->us[k]);
      else continue;
      luaL_addstring(&b, line);
    }
  }
  luaL_pushresult(&b);
  lua_getglobal(L, "print");
  if (lua_isfunction(L, -1)) { lua_insert(L, -2); lua_call(L, 1, 0); } else lua_pop(L, 2);
  lua_settop(L, 3);
  return 1;
}

/* grace.eager(fn, ...): runs fn as plain Lua and eager ops. Inside a traced function it is a graph break. */
static int l_eager(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  grace_vm *vm = lgrace_vm(L);
  int n = lua_gettop(L) - 1, tracing = grace_trace_active(vm);
  if (tracing) {
    grace_trace_note(vm, "graph break: grace.eager");
    grace_trace_pause(vm);
  }
  int st = lua_pcall(L, n, LUA_MULTRET, 0);
  if (tracing) grace_trace_resume(vm);
  if (st != LUA_OK) return lua_error(L);
  return lua_gettop(L);
}

static const luaL_Reg compiled_meta[] = {
  {"__call", compiled_call},
  {"__tostring", compiled_tostring},
  {NULL, NULL}
};
static const luaL_Reg compiled_methods[] = {
  {"stats", compiled_stats},
  {"ir", compiled_ir},
  {"report", compiled_report},
  {NULL, NULL}
};
static const luaL_Reg compile_funcs[] = {
  {"compile", l_compile},
  {"explain", l_explain},
  {"report", l_report},
  {"clock", l_clock},
  {"eager", l_eager},
  {NULL, NULL}
};

void lgrace_open_compile(lua_State *L) {
  luaL_newmetatable(L, LG_ENTRY);
  lua_pushcfunction(L, entry_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_newmetatable(L, LG_COMPILED);
  luaL_setfuncs(L, compiled_meta, 0);
  luaL_newlib(L, compiled_methods);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_setfuncs(L, compile_funcs, 0);
}
