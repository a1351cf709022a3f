/* lgrace.h: the Lua binding of grace (module "grace"), built only on include/grace.h. */
#ifndef GRACE_LGRACE_H
#define GRACE_LGRACE_H

#include <lua.h>
#include "grace.h"
/* luaopen_grace (creates the VM, registers the tensor metatable and the searcher for the embedded standard
 * library, require "grace.nn") and the host's functions: exported from grace.so and libgrace_lua.a */
#include "grace_lua.h"

/* The VM of the state (created by luaopen_grace); raises a Lua error if the module is not open. */
grace_vm *lgrace_vm(lua_State *L);
/* Raises a Lua error with the VM's last message, prefixed by the script position. */
int lgrace_error(lua_State *L, grace_vm *vm);
/* A package.searchers entry that finds "grace.NAME" in the embedded standard library. */
int lgrace_stdlib_searcher(lua_State *L);

#endif
