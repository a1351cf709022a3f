/* lgrace_tensor.c: the tensor userdata (owning a grace_tensor reference, released by __gc/__close),
 * its methods and metamethods, and the module's constructors and functional ops. */
#include <lauxlib.h>
#include "lua/lgrace.h"

/* Adds the tensor API to the module table on top of the stack. */
void lgrace_open_tensor(lua_State *L) {
  (void)L;
}
