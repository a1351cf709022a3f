/* lgrace_limits.c: limits for scripts the host does not trust (include/grace_lua.h): a cap on the Lua heap
 * through the state's allocator, a wall-clock deadline checked by a count hook, the VM's tensor-memory cap, and a
 * sandbox that takes away what reaches outside the state (files, processes, C modules, bytecode, the debug
 * library). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lauxlib.h>
#include <lualib.h>
#include "lua/lgrace.h"

/* Lua instructions between two looks at the clock: a clock read costs about as much as 20 of them, and at about
 * 1e8 instructions a second a deadline is seen within a few hundredths of a millisecond. */
#define LIMIT_COUNT 1000
#define LIMIT_KEY "grace.limits"

/* Lives outside the Lua heap (the host's original allocator made it) so that it outlasts every block it counts;
 * it is the allocator's ud, which is how the hook finds it without a table look-up. */
typedef struct {
  lua_Alloc orig;
  void *orig_ud;
  size_t used, max;       /* bytes of the Lua heap; max 0: no cap */
  double deadline, secs;  /* grace_clock() time; secs 0: none */
} limit_state;

static void *limit_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  limit_state *s = ud;
  size_t old = ptr ? osize : 0;   /* with no block, osize is the type of the new object, not a size */
  /* frees and shrinks always go through: Lua counts on them, and they only give room back */
  if (s->max && nsize > old && (nsize - old > s->max || s->used > s->max - (nsize - old))) return NULL;
  void *p = s->orig(s->orig_ud, ptr, osize, nsize);
  if (p || nsize == 0) s->used = s->used - old + nsize;
  return p;
}

static void limit_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  void *ud;
  if (lua_getallocf(L, &ud) != limit_alloc) return;
  limit_state *s = ud;
  if (s->secs <= 0 || grace_clock() <= s->deadline) return;
  char secs[32];   /* lua_pushfstring has no %g */
  snprintf(secs, sizeof secs, "%g", s->secs);
  luaL_error(L, "time limit of %s s exceeded", secs);
}

/* The __gc of the registry's box: when the state closes (or the box is collected, which nothing else can do) the
 * host's allocator comes back, so the blocks freed after it need no limit_state; the finalizer runs before Lua
 * frees its objects. */
static int limit_gc(lua_State *L) {
  limit_state **box = lua_touserdata(L, 1);
  if (!box || !*box) return 0;
  limit_state *s = *box;
  *box = NULL;
  void *ud;
  if (lua_getallocf(L, &ud) == limit_alloc && ud == s) lua_setallocf(L, s->orig, s->orig_ud);
  s->orig(s->orig_ud, s, sizeof *s, 0);
  return 0;
}

/* The state's limit_state, made and put in place of the allocator on first use. */
static limit_state *limit_get(lua_State *L) {
  void *ud;
  if (lua_getallocf(L, &ud) == limit_alloc) return ud;
  limit_state **box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = NULL;
  lua_newtable(L);
  lua_pushcfunction(L, limit_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, LIMIT_KEY);
  lua_Alloc orig = lua_getallocf(L, &ud);
  limit_state *s = orig(ud, NULL, LUA_TUSERDATA, sizeof *s);
  if (!s) { luaL_error(L, "grace_lua_set_limits: not enough memory"); return NULL; }
  memset(s, 0, sizeof *s);
  s->orig = orig;
  s->orig_ud = ud;
  /* the heap so far: the collector's count of it is exact (its debt included) */
  s->used = (size_t)lua_gc(L, LUA_GCCOUNT) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB);
  lua_getfield(L, LUA_REGISTRYINDEX, LIMIT_KEY);
  *(limit_state **)lua_touserdata(L, -1) = s;
  lua_pop(L, 1);
  lua_setallocf(L, limit_alloc, s);
  return s;
}

/* grace_lua_set_limits' protected part: the limits are a light userdata at 1. */
static int set_limits(lua_State *L) {
  const grace_lua_limits *lim = lua_touserdata(L, 1);
  if (lim->max_tensor_bytes) {
    grace_vm *vm = grace_lua_vm(L);
    if (!vm) return luaL_error(L, "grace_lua_set_limits: max_tensor_bytes needs the module open (grace_lua_open)");
    grace_set_memory_limit(vm, lim->max_tensor_bytes);
  } else if (grace_lua_vm(L))
    grace_set_memory_limit(grace_lua_vm(L), 0);
  if (lim->timeout < 0) return luaL_error(L, "grace_lua_set_limits: timeout %g is negative", lim->timeout);
  limit_state *s = limit_get(L);
  s->max = lim->max_lua_bytes;
  s->secs = lim->timeout;
  s->deadline = grace_clock() + lim->timeout;
  return 0;
}

int grace_lua_set_limits(lua_State *L, const grace_lua_limits *lim) {
  grace_lua_limits none = {0};
  lua_pushcfunction(L, set_limits);
  lua_pushlightuserdata(L, (void *)(lim ? lim : &none));
  int st = lua_pcall(L, 1, 0, 0);
  if (st != LUA_OK) return st;
  /* set here, outside the pcall, on the state the host calls with (coroutines made later inherit it) */
  if (lim && lim->timeout > 0) lua_sethook(L, limit_hook, LUA_MASKCOUNT, LIMIT_COUNT);
  else if (lua_gethook(L) == limit_hook) lua_sethook(L, NULL, 0, 0);
  return LUA_OK;
}

size_t grace_lua_memory(lua_State *L) {
  void *ud;
  if (lua_getallocf(L, &ud) == limit_alloc) return ((limit_state *)ud)->used;
  return (size_t)lua_gc(L, LUA_GCCOUNT) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB);
}

/* ---- the sandbox ---- */

/* load(chunk [, name [, mode [, env]]]) with mode forced to "t": a binary chunk can break the VM's invariants. */
static int safe_load(lua_State *L) {
  lua_settop(L, 4);
  lua_pushliteral(L, "t");
  lua_replace(L, 3);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, 4, LUA_MULTRET);
  return lua_gettop(L);
}

static void drop_field(lua_State *L, int t, const char *name) {
  lua_pushnil(L);
  lua_setfield(L, t, name);
}

/* os: only the clock and calendar functions (no files, processes, environment or exit). */
static void sandbox_os(lua_State *L, int loaded) {
  static const char *const keep[] = {"clock", "time", "date", "difftime", NULL};
  lua_newtable(L);
  if (lua_getglobal(L, "os") == LUA_TTABLE)
    for (int i = 0; keep[i]; i++) { lua_getfield(L, -1, keep[i]); lua_setfield(L, -3, keep[i]); }
  lua_pop(L, 1);
  lua_pushvalue(L, -1);
  lua_setfield(L, loaded, "os");
  lua_setglobal(L, "os");
}

/* require finds package.preload and the embedded standard library only: no Lua files (their loader takes
 * bytecode too) and no C modules. */
static void sandbox_package(lua_State *L, int package) {
  lua_createtable(L, 2, 0);
  lua_getfield(L, package, "searchers");
  if (lua_istable(L, -1)) { lua_geti(L, -1, 1); lua_seti(L, -3, 1); }   /* the preload searcher */
  lua_pop(L, 1);
  lua_pushcfunction(L, lgrace_stdlib_searcher);
  lua_seti(L, -2, 2);
  lua_setfield(L, package, "searchers");
  drop_field(L, package, "loadlib");
  drop_field(L, package, "searchpath");
  lua_pushliteral(L, "");
  lua_setfield(L, package, "path");
  lua_pushliteral(L, "");
  lua_setfield(L, package, "cpath");
}

static int sandbox(lua_State *L) {
  static const char *const gone[] = {"io", "debug", "dofile", "loadfile", NULL};
  static const char *const grace_files[] = {"save", "load", "fromfile", NULL};
  /* grace.nn names its callers' lines through debug.getinfo: it is loaded now, while it can take that */
  if (lua_getglobal(L, "require") == LUA_TFUNCTION && grace_lua_vm(L)) {
    lua_pushliteral(L, "grace.nn");
    lua_call(L, 1, 0);
  } else
    lua_pop(L, 1);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  int loaded = lua_gettop(L);
  for (int i = 0; gone[i]; i++) {
    lua_pushnil(L); lua_setglobal(L, gone[i]);
    drop_field(L, loaded, gone[i]);
  }
  sandbox_os(L, loaded);
  lua_getglobal(L, "load");
  if (lua_isfunction(L, -1)) {
    lua_pushcclosure(L, safe_load, 1);
    lua_setglobal(L, "load");
  } else
    lua_pop(L, 1);
  if (lua_getfield(L, loaded, "package") == LUA_TTABLE) sandbox_package(L, lua_gettop(L));
  lua_pop(L, 1);
  /* grace's own file functions read and write any path */
  if (lua_getfield(L, loaded, "grace") == LUA_TTABLE)
    for (int i = 0; grace_files[i]; i++) drop_field(L, loaded + 1, grace_files[i]);
  lua_pop(L, 2);
  return 0;
}

int grace_lua_sandbox(lua_State *L) {
  lua_pushcfunction(L, sandbox);
  return lua_pcall(L, 0, 0, 0);
}
