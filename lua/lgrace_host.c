/* lgrace_host.c: the tensor side of include/grace_lua.h for C hosts that own the lua_State: handing tensors
 * between C and Lua without copying (the opening functions are in lgrace.c, next to the VM they set up). */
#include "lua/lgrace_tensor.h"

grace_tensor *grace_lua_totensor(lua_State *L, int idx) {
  return lg_totensor(L, idx);
}

void grace_lua_pushtensor(lua_State *L, grace_tensor *t) {
  lg_push(L, lg_begin(L), t);
}
