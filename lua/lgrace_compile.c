/* lgrace_compile.c: grace.compile and grace.explain, grace's TorchDynamo for Lua: the Lua adapter of the core's
 * compiled functions (grace_fn, include/grace.h). The core keeps the cache of entries, the guards on arguments,
 * tracing, replay of functions with breaks and the promotion of changing numbers; this file turns Lua values into
 * grace_arg (tables, functions and strings as handles: a stack slot during a call, a registry reference when the
 * core keeps one) and supplies what only Lua can do: calling the function under lua_pcall (its error is kept and
 * raised once the core has cleaned up), the globals it reads (a proxy _ENV during a trace) and the captured
 * tensors and numbers found by walking its upvalues, arguments and the globals it reads (with the metatables of the
 * tables met, so a method or a default reached through __index is guarded too), guarded by re-reading their paths.
 * What the walk cannot cover (tables nested past its depth, more values than its budget, code iterating its globals)
 * makes the function run eagerly, with the reason: a guard never misses state silently. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lua/lgrace_tensor.h"
#include "lua/lgrace_guard.h"

#define LG_COMPILED "grace.Compiled"
#define MAXARGS GRACE_FN_MAXARGS
#define MAXRES 256   /* results of one call (a trace compiles at most MAXARGS of them) */


/* Records the global read name (at k) -> value (on top, replaced by lg_nil_read when nil) into reads (at r). */
static void note_read(lua_State *L, int r, int k) {
  lua_pushvalue(L, k);
  if (lua_isnil(L, -2)) lua_pushlightuserdata(L, (void *)&lg_nil_read);
  else lua_pushvalue(L, -2);
  lua_rawset(L, r);
}

/* A compiled function: the core's object, and the Lua state of the call in progress (saved and restored around
 * each call, which a recursive call or a coroutine may make again). The function is the uservalue. */
typedef struct compiled {
  grace_fn *fn;
  lua_State *L;
  int fidx, args, nargs;   /* the function and the arguments on L's stack */
  int err;                 /* the error value of a failed call of the function on L's stack (-1: no stack room) */
  int scratch;             /* registry reference of a trace's bookkeeping (LUA_NOREF: none) */
  char name[96];
} compiled;

typedef struct call_state {
  lua_State *L;
  int fidx, args, nargs, err, scratch;
} call_state;

static call_state enter(compiled *cp, lua_State *L, int fidx, int args, int nargs) {
  call_state s = {cp->L, cp->fidx, cp->args, cp->nargs, cp->err, cp->scratch};
  cp->L = L;
  cp->fidx = fidx;
  cp->args = args;
  cp->nargs = nargs;
  cp->err = 0;
  cp->scratch = LUA_NOREF;
  return s;
}

static void leave(compiled *cp, call_state s) {
  cp->L = s.L;
  cp->fidx = s.fidx;
  cp->args = s.args;
  cp->nargs = s.nargs;
  cp->err = s.err;
  cp->scratch = s.scratch;
}

/* ---- timing ---- */
static int l_clock(lua_State *L) {
  lua_pushnumber(L, grace_clock());
  return 1;
}

/* ---- locations: the first frame of user code (the standard library is skipped) ---- */
static void where_cb(void *ud, char *buf, size_t n) {
  lua_State *L = ((compiled *)ud)->L;
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

/* ---- host values as handles: a stack slot of the call (borrowed) or a registry reference (kept) ---- */
#define STACK_HANDLE(i) ((uint64_t)1 << 32 | (uint32_t)(i))

static void push_handle(lua_State *L, uint64_t h) {
  if (h >> 32) lua_pushvalue(L, (int)(uint32_t)h);
  else lua_rawgeti(L, LUA_REGISTRYINDEX, (lua_Integer)h);
}

static uint64_t h_keep(void *ud, uint64_t h) {
  lua_State *L = ((compiled *)ud)->L;
  push_handle(L, h);
  return (uint64_t)(uint32_t)luaL_ref(L, LUA_REGISTRYINDEX);
}

static void h_release(void *ud, uint64_t h) {
  if (!(h >> 32)) luaL_unref(((compiled *)ud)->L, LUA_REGISTRYINDEX, (int)h);
}

static int h_same(void *ud, uint64_t a, uint64_t b) {
  lua_State *L = ((compiled *)ud)->L;
  push_handle(L, a);
  push_handle(L, b);
  int same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

/* The Lua value at idx (absolute) as an argument or a result. */
static void to_arg(lua_State *L, int idx, grace_arg *a) {
  memset(a, 0, sizeof *a);
  switch (lua_type(L, idx)) {
  case LUA_TNONE: case LUA_TNIL: a->kind = GRACE_ARG_NIL; break;
  case LUA_TBOOLEAN: a->kind = GRACE_ARG_BOOL; a->i = lua_toboolean(L, idx); break;
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) { a->kind = GRACE_ARG_INT; a->i = lua_tointeger(L, idx); }
    else { a->kind = GRACE_ARG_FLOAT; a->f = lua_tonumber(L, idx); }
    break;
  default:
    a->t = lg_totensor(L, idx);
    a->kind = a->t ? GRACE_ARG_TENSOR : GRACE_ARG_HOST;
    a->host = STACK_HANDLE(idx);
    a->is_mutable = lua_istable(L, idx);
    break;
  }
}

/* Runs the function on the arguments of the call under lua_pcall: its results stay on the stack (their slots are
 * the handles), an error stays there too for compiled_call to raise. */
static grace_status h_call(void *ud, int nargs, const grace_arg *args, int *nres, grace_arg *res, int maxres) {
  compiled *cp = ud;
  lua_State *L = cp->L;
  *nres = 0;
  if (!lua_checkstack(L, cp->nargs + 8)) { cp->err = -1; return GRACE_EHOST; }
  int base = lua_gettop(L);
  lua_pushvalue(L, cp->fidx);
  for (int i = 0; i < cp->nargs; i++) lua_pushvalue(L, cp->args + i);
  if (lua_pcall(L, cp->nargs, LUA_MULTRET, 0) != LUA_OK) { cp->err = lua_gettop(L); return GRACE_EHOST; }
  int n = lua_gettop(L) - base;
  *nres = n;
  for (int j = 0; j < n && j < maxres; j++) {
    to_arg(L, base + 1 + j, &res[j]);
    if (res[j].kind == GRACE_ARG_TENSOR) grace_tensor_retain(res[j].t);
  }
  return GRACE_OK;
}

static void h_eager(void *ud, const char *why) {
  fprintf(stderr, "grace.compile: %s runs eagerly: %s\n", ((compiled *)ud)->name, why);
}
/* ---- tracing ---- */
/* The _ENV proxy during a trace: reads and writes of globals are recorded (upvalue 2), then go through to the real
 * environment (upvalue 1). The raw functions read from it come wrapped (raw_env): code that gives them _ENV itself
 * must reach the real environment, not the proxy, and what it reads that way is recorded too. */
static const char *const raw_names[] = {"rawget", "rawset", "rawlen", "rawequal", "next", NULL};

/* A raw function called during a trace (upvalues: the function, the real environment, the proxy, reads, the
 * trace's bookkeeping): the proxy among its arguments becomes the real environment; rawget records the global it
 * reads; rawset and next on the environment (a write, an iteration over every global) keep the function eager. */
static int raw_env(lua_State *L) {
  int n = lua_gettop(L), on_env = 0;
  for (int i = 1; i <= n; i++) {
    if (!lua_rawequal(L, i, lua_upvalueindex(3))) continue;
    lua_pushvalue(L, lua_upvalueindex(2));
    lua_replace(L, i);
    on_env |= i == 1;
  }
  const char *name = lua_tostring(L, lua_upvalueindex(6));
  if (on_env && (!strcmp(name, "rawset") || !strcmp(name, "next"))) {
    lua_pushstring(L, name);
    lua_setfield(L, lua_upvalueindex(5), "raw_env");
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  for (int i = 1; i <= n; i++) lua_pushvalue(L, i);
  lua_call(L, n, LUA_MULTRET);   /* the results above the arguments */
  if (on_env && !strcmp(name, "rawget") && n >= 2 && lua_type(L, 2) == LUA_TSTRING && lua_gettop(L) > n) {
    lua_pushvalue(L, n + 1);
    note_read(L, lua_upvalueindex(4), 2);   /* as a read through _ENV */
    lua_pop(L, 1);
  }
  return lua_gettop(L) - n;
}

static int env_index(lua_State *L) {
  lua_pushvalue(L, 2);
  lua_gettable(L, lua_upvalueindex(1));       /* the real environment */
  if (lua_type(L, 2) == LUA_TSTRING) {
    note_read(L, lua_upvalueindex(2), 2);      /* reads: name -> value (an absent one too: defining it retraces) */
    const char *k = lua_tostring(L, 2);
    for (int i = 0; raw_names[i] && lua_iscfunction(L, -1); i++) {
      if (strcmp(k, raw_names[i])) continue;
      lua_pushvalue(L, lua_upvalueindex(1));
      lua_pushvalue(L, 1);
      lua_pushvalue(L, lua_upvalueindex(2));
      lua_pushvalue(L, lua_upvalueindex(3));
      lua_pushvalue(L, 2);
      lua_pushcclosure(L, raw_env, 6);
      break;
    }
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
/* pairs(_ENV) during a trace: iterates the real environment, and keeps the function eager (upvalue 1: the real
 * environment, 2: the trace's bookkeeping) */
static int env_pairs(lua_State *L) {
  lua_pushliteral(L, "pairs");
  lua_setfield(L, lua_upvalueindex(2), "raw_env");
  lua_getglobal(L, "next");
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushnil(L);
  return 3;
}

static int find_env(lua_State *L, int fn) {
  for (int i = 1;; i++) {
    const char *name = lua_getupvalue(L, fn, i);
    if (!name) return 0;
    lua_pop(L, 1);
    if (!strcmp(name, "_ENV")) return i;
  }
}


/* A host guard is a table of lg_push_guard in the registry ({paths, expected values, count, ...}). Why its paths
 * fail for the call in progress (0: they pass). */
static int h_guard_check(void *ud, uint64_t guard, int nargs, const grace_arg *args, char *buf, size_t n) {
  compiled *cp = ud;
  lua_State *L = cp->L;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, (lua_Integer)guard);
  int i = lg_guard_fails(L, top + 1, cp->fidx, cp->args);
  if (i < 0) snprintf(buf, n, "the Lua stack has no room to check the captured values");
  if (i > 0) {
    lua_rawgeti(L, top + 1, 1);
    lua_rawgeti(L, -1, i);
    lua_rawgeti(L, -1, 1);
    snprintf(buf, n, "captured value #%d (path root %s) changed identity or value", i, lua_tostring(L, -1));
  }
  lua_settop(L, top);
  return !i;
}

/* Two guards expect the same values (their paths may differ). */
static int h_guard_same(void *ud, uint64_t a, uint64_t b) {
  lua_State *L = ((compiled *)ud)->L;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, (lua_Integer)a);
  lua_rawgeti(L, LUA_REGISTRYINDEX, (lua_Integer)b);
  lua_rawgeti(L, top + 1, 3);
  lua_rawgeti(L, top + 2, 3);
  int n = (int)lua_tointeger(L, -2), ok = n == lua_tointeger(L, -1);
  lua_rawgeti(L, top + 1, 2);
  lua_rawgeti(L, top + 2, 2);
  for (int p = 1; p <= n && ok; p++) {
    lua_rawgeti(L, -2, p);
    lua_rawgeti(L, -2, p);
    ok = lg_same_expectation(L, -1, -2);
    lua_pop(L, 2);
  }
  lua_settop(L, top);
  return ok;
}

/* Whether guard a checks every value guard b checks: each path of b is one of a's, expecting the same. */
static int h_guard_covers(void *ud, uint64_t a, uint64_t b) {
  lua_State *L = ((compiled *)ud)->L;
  int top = lua_gettop(L), ok = 1;
  lua_checkstack(L, 16);
  lua_rawgeti(L, LUA_REGISTRYINDEX, (lua_Integer)a);
  lua_rawgeti(L, LUA_REGISTRYINDEX, (lua_Integer)b);
  for (int g = 1; g <= 2; g++)
    for (int f = 1; f <= 3; f++) lua_rawgeti(L, top + g, f);
  int pa = top + 3, ea = top + 4, na = (int)lua_tointeger(L, top + 5);
  int pb = top + 6, eb = top + 7, nb = (int)lua_tointeger(L, top + 8);
  for (int i = 1; i <= nb && ok; i++) {
    lua_rawgeti(L, pb, i);
    int path = lua_gettop(L);
    lua_Integer len = (lua_Integer)lua_rawlen(L, path);
    ok = 0;
    for (int j = 1; j <= na && !ok; j++) {
      lua_rawgeti(L, pa, j);
      if ((lua_Integer)lua_rawlen(L, -1) == len && lg_shared_prefix(L, -1, path) == len) {
        lua_rawgeti(L, ea, j);
        lua_rawgeti(L, eb, i);
        ok = lg_same_expectation(L, -1, -2);
      }
      lua_settop(L, path);
    }
    lua_settop(L, path - 1);
  }
  lua_settop(L, top);
  return ok;
}

/* Before a trace: what the function can read of Lua state (a change afterwards is a side effect), and a proxy _ENV
 * that records the globals it reads and writes. Kept in a registry table until h_trace_end. */
static void h_trace_begin(void *ud) {
  compiled *cp = ud;
  lua_State *L = cp->L;
  int top = lua_gettop(L), fn = cp->fidx;
  lua_checkstack(L, 40);
  lua_createtable(L, 0, 10);
  int s = top + 1;
  lg_push_libs(L);
  int libs = lua_gettop(L);
  lua_newtable(L); int seen = lua_gettop(L);
  lua_newtable(L); int targets = lua_gettop(L);
  lua_newtable(L); int paths = lua_gettop(L);
  lua_newtable(L); int expect = lua_gettop(L);
  walk pw = {L, fn, cp->args, cp->nargs, seen, targets, paths, expect, 0, WALK_BUDGET, libs, 0, 0};
  lg_walk_roots(&pw, fn, cp->args, cp->nargs);
  lg_push_table_copies(L, seen);
  lua_setfield(L, s, "pre_tables");
  lua_pushvalue(L, libs); lua_setfield(L, s, "libs");
  lua_pushvalue(L, paths); lua_setfield(L, s, "pre_paths");
  lua_pushvalue(L, expect); lua_setfield(L, s, "pre_expect");
  lua_pushinteger(L, pw.npaths); lua_setfield(L, s, "pre_n");
  lua_settop(L, s);
  int envi = find_env(L, fn);
  if (envi) {
    lua_pushinteger(L, envi); lua_setfield(L, s, "envi");
    lua_getupvalue(L, fn, envi);
    int realenv = lua_gettop(L);
    lua_newtable(L); int reads = lua_gettop(L);
    lua_newtable(L); int gwrites = lua_gettop(L);
    lua_pushvalue(L, realenv); lua_setfield(L, s, "realenv");
    lua_pushvalue(L, reads); lua_setfield(L, s, "reads");
    lua_pushvalue(L, gwrites); lua_setfield(L, s, "gwrites");
    lua_newtable(L);   /* the proxy */
    lua_newtable(L);   /* its metatable */
    lua_pushvalue(L, realenv); lua_pushvalue(L, reads); lua_pushvalue(L, s);
    lua_pushcclosure(L, env_index, 3);
    lua_setfield(L, -2, "__index");
    lua_pushvalue(L, realenv); lua_pushvalue(L, s);
    lua_pushcclosure(L, env_pairs, 2);
    lua_setfield(L, -2, "__pairs");
    lua_pushvalue(L, realenv); lua_pushvalue(L, gwrites);
    lua_pushcclosure(L, env_newindex, 2);
    lua_setfield(L, -2, "__newindex");
    lua_setmetatable(L, -2);
    lua_setupvalue(L, fn, envi);
  }
  lua_settop(L, s);
  lua_getfield(L, LUA_REGISTRYINDEX, LG_TRACED_FN);   /* an enclosing trace's, back at trace_end */
  lua_setfield(L, s, "outer_fn");
  lua_pushvalue(L, fn);
  lua_setfield(L, LUA_REGISTRYINDEX, LG_TRACED_FN);
  cp->scratch = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_settop(L, top);
}

/* The captured tensors of the trace's program: each one's path from the arguments, upvalues and globals, guarded
 * with the numbers the walk finds and the globals read (s: the trace's bookkeeping). */
static void find_captures(compiled *cp, grace_ir *ir, int s, uint64_t *guard, int *nguarded, char *why, size_t len) {
  lua_State *L = cp->L;
  int fn = cp->fidx, args = cp->args, nargs = cp->nargs;
  lua_getfield(L, s, "libs"); int libs = lua_gettop(L);
  lua_getfield(L, s, "reads"); int reads = lua_gettop(L);
  lua_newtable(L); int seen = lua_gettop(L);
  lua_newtable(L); int targets = lua_gettop(L);
  lua_newtable(L); int paths = lua_gettop(L);
  lua_newtable(L); int expect = lua_gettop(L);
  /* targets: the captured tensors that are not local constants of the trace */
  int nconst = grace_ir_count(ir, "consts");
  for (int k = 0; k < nconst; k++) {
    grace_tensor *t = grace_ir_const_tensor(ir, k);
    if (!t || grace_ir_const_is_local(ir, k)) continue;
    lua_pushlightuserdata(L, t);
    lua_pushboolean(L, 1);
    lua_rawset(L, targets);
  }
  /* argument tensors too: one the function also reaches by a captured path is read through two names, which one
   * IR value cannot tell apart */
  walk w = {L, fn, args, nargs, seen, targets, paths, expect, 0, WALK_BUDGET, libs, 0, 0};
  for (int pass = 0; pass < 2; pass++) {
    if (pass) {
      lg_walk_roots(&w, fn, args, nargs);
      lg_walk_globals(&w, reads);
      if (w.arg_captured)
        snprintf(why, len, "a tensor passed as an argument is also reached by the function through an upvalue, a "
                 "table or a global; pass a copy, or use only one of the two");
      else if (w.truncated)
        snprintf(why, len, "the function reaches Lua tables nested more than %d deep or more than %d values (through "
                 "its upvalues, arguments or globals), whose changes a guard cannot follow; it runs eagerly",
                 WALK_DEPTH, WALK_BUDGET);
    }
    for (int i = 0; i < nargs; i++) {
      grace_tensor *t = lg_totensor(L, args + i);
      if (!t) continue;
      lua_pushlightuserdata(L, t);
      if (pass) lua_pushnil(L); else lua_pushinteger(L, 2);
      lua_rawset(L, targets);
    }
  }
  *nguarded = w.npaths;
  lua_pushnil(L);
  if (lua_next(L, targets)) {
    lua_pop(L, 2);
    snprintf(why, len, "a captured tensor is not reachable from the function's arguments, upvalues or globals "
             "(reached through a C function or a metatable?); pass it as an argument");
  }
  if (w.npaths > 0) {
    lg_push_guard(L, paths, expect, w.npaths);
    *guard = (uint64_t)(uint32_t)luaL_ref(L, LUA_REGISTRYINDEX);
  }
  lua_settop(L, libs - 1);
}

/* After a trace: the real _ENV back; with ir, the side effects that keep it eager and the guards it needs. */
static void h_trace_end(void *ud, grace_ir *ir, uint64_t *guard, int *nguarded, char *why, size_t len) {
  compiled *cp = ud;
  lua_State *L = cp->L;
  int top = lua_gettop(L);
  *guard = 0;
  *nguarded = 0;
  why[0] = 0;
  if (cp->scratch == LUA_NOREF) return;
  lua_checkstack(L, 40);
  lua_rawgeti(L, LUA_REGISTRYINDEX, cp->scratch);
  int s = top + 1;
  lua_getfield(L, s, "outer_fn");
  lua_setfield(L, LUA_REGISTRYINDEX, LG_TRACED_FN);
  lua_getfield(L, s, "envi");
  int envi = (int)lua_tointeger(L, -1);
  if (envi) { lua_getfield(L, s, "realenv"); lua_setupvalue(L, cp->fidx, envi); }
  lua_settop(L, s);
  /* side effects on Lua state the function reads: a compiled call would not repeat them */
  if (ir) {
    lua_getfield(L, s, "gwrites");
    lua_pushnil(L);
    if (lua_istable(L, -2) && lua_next(L, -2))
      snprintf(why, len, "the function assigns the global '%s'; a compiled call would not, so it runs eagerly",
               lua_isstring(L, -2) ? lua_tostring(L, -2) : "?");
    lua_settop(L, s);
  }
  if (ir && !*why && lua_getfield(L, s, "raw_env") == LUA_TSTRING)
    snprintf(why, len, "the function calls %s on its global table (_ENV), which a guard cannot follow; it runs "
             "eagerly", lua_tostring(L, -1));
  lua_settop(L, s);
  if (ir && !*why) {
    lua_getfield(L, s, "pre_paths");
    lua_getfield(L, s, "pre_expect");
    lua_getfield(L, s, "pre_n");
    lg_changed_path(L, cp->fidx, cp->args, s + 1, s + 2, (int)lua_tointeger(L, s + 3), why, len);
    lua_settop(L, s);
  }
  /* keys added, or fields written that the function never read (an append, a stored tensor): for a program that
   * runs without its Lua code (with breaks the code runs on every call, effects and all) */
  if (ir && !*why && grace_ir_count(ir, "breaks") == 0) {
    lua_getfield(L, s, "pre_tables");
    lg_changed_table(L, lua_gettop(L), why, len);
    lua_settop(L, s);
  }
  if (ir && !*why) find_captures(cp, ir, s, guard, nguarded, why, len);
  lua_settop(L, top);
  luaL_unref(L, LUA_REGISTRYINDEX, cp->scratch);
  cp->scratch = LUA_NOREF;
}

static const grace_host lua_host = {
  .call = h_call, .trace_begin = h_trace_begin, .trace_end = h_trace_end, .guard_check = h_guard_check,
  .guard_same = h_guard_same, .guard_covers = h_guard_covers, .keep = h_keep, .release = h_release, .same = h_same, .where = where_cb,
  .eager = h_eager,
};

/* "model.lua", 12 -> "model_lua_12" */
static void set_irname(char *irname, size_t cap, const char *src, int line) {
  const char *base = strrchr(src, '/');
  base = base ? base + 1 : src;
  size_t k = 0;
  for (const char *p = base; *p && k + 12 < cap; p++)
    irname[k++] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ? *p : '_';
  if (line >= 0) k += (size_t)snprintf(irname + k, cap - k, "_%d", line);
  irname[k] = 0;
}

/* ---- the compiled object ---- */
static compiled *check_compiled(lua_State *L, int idx) {
  compiled *cp = luaL_checkudata(L, idx, LG_COMPILED);
  if (!cp->fn) luaL_error(L, "compiled function is closed");
  return cp;
}

grace_fn *lg_compiled_fn(lua_State *L, int idx, const char **name) {
  compiled *cp = check_compiled(L, idx);
  if (name) *name = cp->name;
  return cp->fn;
}

static int compiled_gc(lua_State *L) {
  compiled *cp = luaL_checkudata(L, 1, LG_COMPILED);
  cp->L = L;   /* the core releases its handles through it */
  grace_fn_free(cp->fn);
  cp->fn = NULL;
  return 0;
}

/* Pushes a new compiled object for the function at fidx; name and irname "" give "function at file:line". */
static compiled *new_compiled(lua_State *L, int fidx, const char *name, const char *irname, const grace_fn_options *o) {
  compiled *cp = lua_newuserdatauv(L, sizeof *cp, 1);
  memset(cp, 0, sizeof *cp);
  cp->scratch = LUA_NOREF;
  luaL_setmetatable(L, LG_COMPILED);
  lua_pushvalue(L, fidx);
  lua_setiuservalue(L, -2, 1);
  char ir[64];
  snprintf(cp->name, sizeof cp->name, "%s", name);
  snprintf(ir, sizeof ir, "%s", irname);
  if (!name[0]) {
    lua_Debug ar;
    lua_pushvalue(L, fidx);
    lua_getinfo(L, ">S", &ar);
    snprintf(cp->name, sizeof cp->name, "function at %s:%d", ar.short_src, ar.linedefined);
    set_irname(ir, sizeof ir, ar.short_src, ar.linedefined);
  }
  grace_fn_options opts = *o;
  opts.ir_name = ir;
  if (grace_fn_new(lgrace_vm(L), cp->name, &lua_host, cp, &opts, &cp->fn) != GRACE_OK) lgrace_error(L, lgrace_vm(L));
  return cp;
}

/* The call's arguments (from index args) as grace_arg, in buf or, past MAXARGS, in a userdata pushed here. */
static grace_arg *call_args(lua_State *L, int args, int nargs, grace_arg *buf) {
  grace_arg *a = nargs > MAXARGS ? lua_newuserdatauv(L, sizeof *a * (size_t)nargs, 0) : buf;
  for (int i = 0; i < nargs; i++) to_arg(L, args + i, &a[i]);
  return a;
}

/* Pushes the results of a call (handles for the Lua values themselves, new userdata for new tensors), or raises
 * its error: the function's own (err on the stack), or the core's. */
static int push_results(lua_State *L, lg_ctx *c, grace_status st, int err, int nres, grace_arg *res) {
  if (st == GRACE_EHOST) {
    if (err > 0) { lua_pushvalue(L, err); return lua_error(L); }
    return luaL_error(L, "stack overflow (calling a compiled function)");
  }
  if (st != GRACE_OK) return lg_fail(L, c);
  if (!lua_checkstack(L, nres + 4)) {
    for (int j = 0; j < nres; j++) if (res[j].kind == GRACE_ARG_TENSOR) grace_tensor_release(res[j].t);
    return luaL_error(L, "stack overflow (%d results)", nres);
  }
  for (int j = 0; j < nres; j++) {
    const grace_arg *r = &res[j];
    if (r->host) {
      push_handle(L, r->host);
      if (r->kind == GRACE_ARG_TENSOR) grace_tensor_release(r->t);
      continue;
    }
    switch (r->kind) {
    case GRACE_ARG_NIL: lua_pushnil(L); break;
    case GRACE_ARG_BOOL: lua_pushboolean(L, (int)r->i); break;
    case GRACE_ARG_INT: lua_pushinteger(L, (lua_Integer)r->i); break;
    case GRACE_ARG_FLOAT: lua_pushnumber(L, r->f); break;
    case GRACE_ARG_TENSOR: {
      /* as eager results are: the collector learns the outputs' bytes, so that those the caller drops are freed
       * soon (a large device tensor is a small userdata to it) */
      grace_tensor **slot = lg_newslot(L);
      *slot = r->t;
      lg_account(L, c, r->t);
      break;
    }
    case GRACE_ARG_HOST: lua_pushnil(L); break;
    }
  }
  return nres;
}

static int compiled_call(lua_State *L) {
  compiled *cp = check_compiled(L, 1);
  lg_ctx *c = lg_begin(L);
  int nargs = lua_gettop(L) - 1;
  lua_getiuservalue(L, 1, 1);
  int fidx = lua_gettop(L);
  grace_arg buf[MAXARGS], res[MAXRES];
  const grace_arg *args = call_args(L, 2, nargs, buf);
  call_state saved = enter(cp, L, fidx, 2, nargs);
  int nres = 0;
  grace_status st = grace_fn_call(cp->fn, nargs, args, &nres, res, MAXRES);
  int err = cp->err;
  leave(cp, saved);
  return push_results(L, c, st, err, nres, res);
}

static int compiled_tostring(lua_State *L) {
  compiled *cp = check_compiled(L, 1);
  grace_fn_stats s;
  grace_fn_get_stats(cp->fn, &s);
  lua_pushfstring(L, "grace.compiled(%s: %d calls, %d traces, %d eager)", cp->name, (int)s.calls, (int)s.traces,
                  (int)s.eager_calls);
  return 1;
}

static int compiled_stats(lua_State *L) {
  compiled *cp = check_compiled(L, 1);
  grace_fn_stats s;
  grace_fn_get_stats(cp->fn, &s);
  lua_createtable(L, 0, 10);
  lua_pushinteger(L, s.calls); lua_setfield(L, -2, "calls");
  lua_pushinteger(L, s.hits); lua_setfield(L, -2, "hits");
  lua_pushinteger(L, s.traces); lua_setfield(L, -2, "traces");
  lua_pushinteger(L, s.eager_calls); lua_setfield(L, -2, "eager_calls");
  lua_pushinteger(L, s.recaptures); lua_setfield(L, -2, "recaptures");
  lua_pushinteger(L, s.replays); lua_setfield(L, -2, "replays");
  lua_pushboolean(L, s.eager); lua_setfield(L, -2, "eager");
  lua_pushstring(L, s.last_miss); lua_setfield(L, -2, "last_guard_failure");
  lua_newtable(L);
  for (int i = 0, k = 1; i < MAXARGS; i++) if (s.dynamic[i]) { lua_pushinteger(L, i + 1); lua_rawseti(L, -2, k++); }
  lua_setfield(L, -2, "dynamic_args");
  lua_newtable(L);   /* {[arg] = {dims...}}: the sizes traced symbolic */
  for (int i = 0; i < MAXARGS; i++) {
    if (!s.dynamic_dims[i]) continue;
    lua_newtable(L);
    for (int d = 0, k = 1; d < 32; d++) if (s.dynamic_dims[i] >> d & 1u) { lua_pushinteger(L, d + 1); lua_rawseti(L, -2, k++); }
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "dynamic_dims");
  lua_pushinteger(L, s.symbolic_entries); lua_setfield(L, -2, "symbolic_entries");
  lua_pushinteger(L, s.entries); lua_setfield(L, -2, "entries");
  lua_pushinteger(L, s.partitions); lua_setfield(L, -2, "partitions");
  lua_pushinteger(L, s.partition_runs); lua_setfield(L, -2, "partition_runs");
  lua_pushinteger(L, s.partition_outputs); lua_setfield(L, -2, "partition_outputs");
  lua_pushinteger(L, s.partition_internal); lua_setfield(L, -2, "partition_internal");
  lua_pushinteger(L, s.staged_bytes); lua_setfield(L, -2, "staged_bytes");
  lua_pushinteger(L, s.auto_regions); lua_setfield(L, -2, "auto_regions");
  lua_pushstring(L, s.auto_why); lua_setfield(L, -2, "auto_region_failure");
  lua_pushinteger(L, s.ahead_paths); lua_setfield(L, -2, "ahead_paths");
  return 1;
}

/* f:ir([k]): the IR text of entry k (default: the latest), or nil and the reason it runs eagerly. */
static int compiled_ir(lua_State *L) {
  compiled *cp = check_compiled(L, 1);
  lua_Integer k = luaL_optinteger(L, 2, 0), n = grace_fn_entry_count(cp->fn);
  if (k == 0) k = n;
  if (k < 1 || k > n) { lua_pushnil(L); lua_pushliteral(L, "no such entry"); return 2; }
  const char *why;
  grace_ir *const *paths;
  int npaths;
  grace_ir *ir = grace_fn_entry_ir(cp->fn, (int)k - 1, &why, &paths, &npaths);
  if (!ir && !npaths) { lua_pushnil(L); lua_pushstring(L, why); return 2; }
  if (npaths) {   /* a function with breaks: its recorded paths, each with its break markers */
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int p = 0; p < npaths; p++) {
      const char *t = grace_ir_text(paths[p]);
      if (!t) return lgrace_error(L, lgrace_vm(L));
      lua_pushfstring(L, "-- path %d of %d (replayed: the Lua code runs, ops are matched and run at the breaks)\n", p + 1, npaths);
      luaL_addvalue(&b);
      luaL_addstring(&b, t);
    }
    int path, index;
    grace_ir *part;
    for (int j = 0; (part = grace_fn_entry_partition(cp->fn, (int)k - 1, j, &path, &index)); j++) {
      const char *t = grace_ir_text(part);
      if (!t) return lgrace_error(L, lgrace_vm(L));
      lua_pushfstring(L, "-- partition %d of path %d (compiled: its own passes, kernels and launch decision; %d output%s)\n",
                      index + 1, path + 1, grace_ir_count(part, "outputs"), grace_ir_count(part, "outputs") == 1 ? "" : "s");
      luaL_addvalue(&b);
      luaL_addstring(&b, t);
    }
    luaL_pushresult(&b);
    return 1;
  }
  const char *text = grace_ir_text(ir);
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

/* The argument position of parameter `name` of the function at fidx (0: none). */
static int param_position(lua_State *L, int fidx, const char *name) {
  if (!lua_isfunction(L, fidx) || lua_iscfunction(L, fidx)) return 0;
  for (int i = 1; i <= MAXARGS; i++) {
    lua_pushvalue(L, fidx);
    const char *p = lua_getlocal(L, NULL, i);   /* pushes nothing, leaves the function */
    lua_pop(L, 1);
    if (!p) return 0;
    if (!strcmp(p, name)) return i;
  }
  return 0;
}

/* opts.dynamic as a table (at idx): a number names an argument whose number may become a dynamic scalar ({2, 3});
 * a list under a key names the dims (1-based) of that argument made symbolic from the first trace, the key an
 * argument position or a parameter's name ({x = {1}}, {[2] = {1, 2}}). */
static void dynamic_option(lua_State *L, int idx, grace_fn_options *o, int *allow) {
  unsigned char listed[MAXARGS] = {0};
  int numbers = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_isinteger(L, -1)) {
      lua_Integer a = lua_tointeger(L, -1);
      numbers++;
      if (a >= 1 && a <= MAXARGS && !listed[a - 1]) { listed[a - 1] = 1; allow[o->nallow++] = (int)a - 1; }
    } else if (lua_istable(L, -1)) {
      int pos = lua_isinteger(L, -2) ? (int)lua_tointeger(L, -2)
              : lua_type(L, -2) == LUA_TSTRING ? param_position(L, 1, lua_tostring(L, -2)) : 0;
      if (pos < 1 || pos > MAXARGS) {
        if (lua_type(L, -2) == LUA_TSTRING)
          luaL_error(L, "compile: opts.dynamic names '%s', which is not a parameter of the function", lua_tostring(L, -2));
        luaL_error(L, "compile: opts.dynamic has dims for argument %d; arguments are 1 to %d", pos, MAXARGS);
      }
      lua_Integer n = luaL_len(L, -1);
      for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, -1, i);
        lua_Integer d = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
        if (d < 1 || d > GRACE_MAX_DIMS)
          luaL_error(L, "compile: opts.dynamic: a dim of argument %d must be an integer from 1 to %d", pos, GRACE_MAX_DIMS);
        o->dynamic_dims[pos - 1] |= 1u << (d - 1);
        lua_pop(L, 1);
      }
    } else
      luaL_error(L, "compile: opts.dynamic lists argument positions (numbers) and dims (tables), got a %s",
                 luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  if (numbers) {
    o->dynamic = 1;
    o->allow = allow;
    if (!o->nallow) allow[o->nallow++] = -1;   /* a list of no valid position: nothing may be promoted */
  }
}

static int l_compile(lua_State *L) {
  lua_settop(L, 2);
  wrap_callable(L, 1, "compile");
  /* numbers are opt-in (Lua may branch on a number); sizes are automatic (a size read on the host specialises) */
  grace_fn_options o = {.cache_limit = 8, .dynamic = 0, .dynamic_shapes = 1};
  int allow[MAXARGS];
  char name[96] = "", irname[64] = "";
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "cache_limit");
    if (!lua_isnil(L, -1)) o.cache_limit = (int)luaL_checkinteger(L, -1);
    lua_getfield(L, 2, "dynamic");
    if (lua_isboolean(L, -1)) {
      o.dynamic = lua_toboolean(L, -1);
      o.dynamic_shapes = o.dynamic;   /* false: numbers and sizes are guarded by value */
    } else if (lua_istable(L, -1)) dynamic_option(L, lua_gettop(L), &o, allow);
    else if (!lua_isnil(L, -1)) return luaL_error(L, "compile: opts.dynamic must be a boolean or a table, got %s", luaL_typename(L, -1));
    lua_getfield(L, 2, "name");
    if (lua_isstring(L, -1)) {
      snprintf(name, sizeof name, "%s", lua_tostring(L, -1));
      set_irname(irname, sizeof irname, name, -1);
    }
    lua_getfield(L, 2, "auto_regions");
    if (lua_isboolean(L, -1)) o.no_auto_regions = !lua_toboolean(L, -1);
    else if (!lua_isnil(L, -1)) return luaL_error(L, "compile: opts.auto_regions must be a boolean, got %s", luaL_typename(L, -1));
    lua_pop(L, 4);
  } else if (!lua_isnoneornil(L, 2))
    return luaL_error(L, "compile: options must be a table, got %s", luaL_typename(L, 2));
  if (o.cache_limit < 1) return luaL_error(L, "compile: cache_limit must be at least 1");
  new_compiled(L, 1, name, irname, &o);
  return 1;
}

/* grace.explain(f, ...): traces f (a function or a compiled function) on the arguments once, without
 * caching, and returns (and prints) what grace does with it. */
static int l_explain(lua_State *L) {
  int nargs = lua_gettop(L) - 1;
  compiled *cp = luaL_testudata(L, 1, LG_COMPILED);
  if (cp) {
    lua_getiuservalue(L, 1, 1);
    lua_replace(L, 1);
  }
  wrap_callable(L, 1, "explain");
  lg_ctx *c = lg_begin(L);
  if (nargs > MAXARGS) return luaL_error(L, "explain: at most %d arguments", MAXARGS);
  lua_Debug ar;
  lua_pushvalue(L, 1);
  lua_getinfo(L, ">S", &ar);
  char head[160];
  snprintf(head, sizeof head, "grace.explain: function at %s:%d\n", ar.short_src, ar.linedefined);
  grace_arg args[MAXARGS];
  call_args(L, 2, nargs, args);
  if (!cp) cp = new_compiled(L, 1, "", "", &(grace_fn_options){.cache_limit = 1});
  const size_t n = 1 << 17;
  char *buf = lua_newuserdatauv(L, n, 0);
  call_state saved = enter(cp, L, 1, 2, nargs);
  grace_status st = grace_fn_explain(cp->fn, nargs, args, buf, n);
  int err = cp->err;
  leave(cp, saved);
  if (st != GRACE_OK) return push_results(L, c, st, err, 0, NULL);
  lua_pushstring(L, head);
  lua_pushstring(L, buf);
  lua_concat(L, 2);
  lua_pushvalue(L, -1);
  lua_getglobal(L, "print");
  if (lua_isfunction(L, -1)) { lua_insert(L, -2); lua_call(L, 1, 0); } else lua_pop(L, 2);
  return 1;
}
/* grace.eager(fn, ...): runs fn as plain Lua and eager ops. Inside a traced function it is a graph break. */
static int l_eager(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  grace_vm *vm = lgrace_vm(L);
  int n = lua_gettop(L) - 1, tracing = grace_trace_active(vm);
  if (tracing && lg_region_recording(L)) {   /* the region runs eagerly instead: see lg_region_eager */
    lua_pushlightuserdata(L, (void *)&lg_region_eager);
    return lua_error(L);
  }
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
  {"__gc", compiled_gc},
  {NULL, NULL}
};
static const luaL_Reg compiled_methods[] = {
  {"stats", compiled_stats},
  {"ir", compiled_ir},
  {"report", lg_compiled_report},
  {NULL, NULL}
};
static const luaL_Reg compile_funcs[] = {
  {"compile", l_compile},
  {"explain", l_explain},
  {"report", lg_report},
  {"clock", l_clock},
  {"eager", l_eager},
  {NULL, NULL}
};

void lgrace_open_compile(lua_State *L) {
  luaL_newmetatable(L, LG_COMPILED);
  luaL_setfuncs(L, compiled_meta, 0);
  luaL_newlib(L, compiled_methods);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_setfuncs(L, compile_funcs, 0);
}
