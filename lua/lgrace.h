/* lgrace.h: the Lua binding of grace (module "grace"), built only on include/grace.h. */
#ifndef GRACE_LGRACE_H
#define GRACE_LGRACE_H

#include <lua.h>
#include "grace.h"

/* Opens the module: creates the VM (device from $GRACE_DEVICE, default auto), registers the tensor
 * metatable and the searcher for the embedded standard library (require "grace.nn"). */
int luaopen_grace(lua_State *L);

/* The VM of the state (created by luaopen_grace); raises a Lua error if the module is not open. */
grace_vm *lgrace_vm(lua_State *L);
/* Raises a Lua error with the VM's last message, prefixed by the script position. */
int lgrace_error(lua_State *L, grace_vm *vm);

#endif
