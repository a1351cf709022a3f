/* main.c: the `grace` command: runs a script, -e code, or stdin, with the module preloaded. */
#include <stdio.h>
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>
#include "lua/lgrace.h"

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (!L) { fprintf(stderr, "grace: cannot create Lua state\n"); return 1; }
  luaL_openlibs(L);
  luaL_requiref(L, "grace", luaopen_grace, 1);
  lua_pop(L, 1);
  int st = argc > 1 ? luaL_dofile(L, argv[1]) : LUA_OK;
  if (st != LUA_OK) fprintf(stderr, "grace: %s\n", lua_tostring(L, -1));
  lua_close(L);
  return st == LUA_OK ? 0 : 1;
}
