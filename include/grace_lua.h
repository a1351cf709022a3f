/* grace_lua.h: grace in a Lua 5.4 state the host owns (a game, an editor, a server embedding Lua).
 * Link with -lgrace_lua -lgrace -llua5.4 and libgrace's own libraries (pkg-config --libs --static grace).
 * The Lua module is the one `require "grace"` loads from grace.so; here it is linked into the host instead. */
#ifndef GRACE_LUA_H
#define GRACE_LUA_H

#include <lua.h>
#include "grace.h"

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* The module's opener, as `require "grace"` calls it (luaL_requiref(L, "grace", luaopen_grace, 1) works too). The
 * first open in a state makes a VM (device from $GRACE_DEVICE, else auto) that the state owns: lua_close frees it. */
int luaopen_grace(lua_State *L);

/* Opens the module into L as `require "grace"` does (package.loaded.grace and the global `grace`) and leaves
 * nothing on the stack. vm: a VM the host made (with index_base 1, as Lua counts from 1) and still owns: free it
 * after lua_close(L); NULL: a new VM that the state owns. Nothing is raised: returns LUA_OK, or a Lua error status
 * with the message on top of the stack. Opening again in the same state is LUA_OK when vm is NULL or the VM the
 * state already uses. */
int grace_lua_open(lua_State *L, grace_vm *vm);

/* The VM of the module open in L; NULL when it is not open. */
grace_vm *grace_lua_vm(lua_State *L);

/* The tensor at stack index idx (borrowed: valid while the Lua value lives; grace_tensor_retain keeps it), or
 * NULL when the value is no grace tensor. */
grace_tensor *grace_lua_totensor(lua_State *L, int idx);
/* Pushes t as a Lua tensor holding a reference of its own (the caller keeps its reference). The module must be
 * open in L and t made by its VM. */
void grace_lua_pushtensor(lua_State *L, grace_tensor *t);

/* ---- limits for scripts the host does not trust (docs/c_api.md, "Running untrusted scripts") ---- */
typedef struct grace_lua_limits {
  size_t max_tensor_bytes; /* the VM's tensor storages, host and device (grace_set_memory_limit); 0: none */
  size_t max_lua_bytes;    /* the Lua heap, counted by an allocator put in front of the state's; 0: none.
                            * Past it Lua raises "not enough memory" (after a full collection) */
  double timeout;          /* seconds of wall time from this call; past it the next Lua instructions raise
                            * "time limit of S s exceeded", again after each catch, until the limits are set
                            * again. A C function running (one large op) is not interrupted. 0: none */
} grace_lua_limits;
/* Sets (or, called again, replaces and re-arms) the limits of L; NULL lifts them all. The time check is a count
 * hook on L (coroutines made after inherit it) and replaces any hook of L. Call it from the host, between runs:
 * no script may reach it. Nothing is raised: returns LUA_OK, or a Lua error status with the message on top. */
int grace_lua_set_limits(lua_State *L, const grace_lua_limits *lim);
/* Bytes of L's Lua heap (exact once limits were set; before, as the collector counts them). */
size_t grace_lua_memory(lua_State *L);
/* Takes from L's globals what reaches outside the state: io, debug, dofile, loadfile, os but for clock, time,
 * date and difftime, package.loadlib and searchpath, and grace.save, grace.load and grace.fromfile; load takes
 * text only; require finds package.preload and the embedded grace.* modules only. Call it after opening the
 * standard libraries and grace, before loading the script; code loaded before keeps what it captured. Returns
 * LUA_OK or a Lua error status with the message on top. */
int grace_lua_sandbox(lua_State *L);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif
