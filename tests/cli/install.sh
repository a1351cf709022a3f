#!/bin/sh
# install.sh: `make install PREFIX=...` into a temporary prefix, then the installed Lua module under Debian's stock
# lua5.4 (require "grace", the stdlib through it and from share/lua/5.4), what grace.so exports, and the headers
# and libraries a host links (by hand, and through the installed pkg-config files grace.pc and grace-lua.pc). Run by prove through tests/run.sh, which sets $GRACE (the build folder is its folder).
GRACE=${GRACE:-build/grace}
build=$(dirname "$GRACE")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
. "$(dirname "$0")/lib.sh"

echo "1..11"
p=$tmp/p
out=$(make -s --no-print-directory BUILD="$build" PREFIX="$p" install 2>&1); st=$?
is "make install PREFIX=$p succeeds" "$st" "0"
[ $st -eq 0 ] || echo "$out" | sed 's/^/# /'
for f in bin/grace lib/libgrace.so lib/libgrace.a lib/libgrace_lua.a include/grace.h include/grace_lua.h \
         lib/lua/5.4/grace.so share/lua/5.4/grace/nn.lua lib/pkgconfig/grace.pc lib/pkgconfig/grace-lua.pc; do
  [ -f "$p/$f" ] || missing="$missing $f"
done
is "installed files are there" "${missing:-}" ""

exports=$(nm -D --defined-only "$p/lib/lua/5.4/grace.so" | awk '$2 ~ /^[TDBRVW]$/ { print $3 }')
is "grace.so exports only luaopen_grace" "$exports" "luaopen_grace"

if [ -n "${GRACE_SANITIZED:-}" ]; then   # a sanitized grace.so cannot load into an unsanitized lua5.4
  for i in 4 5 6 7 8 9 10 11; do echo "ok $i # SKIP sanitized build"; done; exit 0
fi
if ! command -v lua5.4 >/dev/null 2>&1 || [ -n "${GRACE_DEP_LIBS:-}" ]; then
  # no stock Lua here, or a build against unpacked packages (DEPS_PREFIX): no system Lua to load the module into
  for i in 4 5 6 7 8 9 10 11; do echo "ok $i # SKIP no system lua5.4 (or a DEPS_PREFIX build)"; done; exit 0
fi
export LUA_CPATH="$p/lib/lua/5.4/?.so;;" LUA_PATH="$p/share/lua/5.4/?.lua;;"
out=$(lua5.4 -e 'local grace = require "grace"; print(grace.ones{2,2})' 2>&1)
is "lua5.4: require \"grace\" and print(grace.ones{2,2})" "$out" "tensor([[1., 1.],
        [1., 1.]])"

out=$(lua5.4 -e 'local g = require "grace"; local f = g.compile(function(x) return x * 2 + 1 end)
local r; for i = 1, 3 do r = f(g.arange(4)) end
print(r:tolist()[4], f:stats().traces, f:stats().hits)' 2>&1)
is "lua5.4: a compiled function traces once, then hits" "$out" "$(printf '7\t1\t2')"

out=$(lua5.4 -e 'local g = require "grace"; local nn = require "grace.nn"; print(nn.Linear ~= nil, g.version)' 2>&1)
is "lua5.4: require \"grace.nn\" (embedded stdlib)" "$out" "$(printf 'true\t%s' "$("$GRACE" -e 'print(grace.version)')")"

out=$(lua5.4 -e 'require "grace"; print(package.searchpath("grace.nn", package.path))' 2>&1)
is "the stdlib's sources are on the installed Lua path" "$out" "$p/share/lua/5.4/grace/nn.lua"

out=$(lua5.4 -e 'local g = require "grace"; print(pcall(g.ones, {2}, "nosuch"))' 2>&1)
case "$out" in false*) st=0 ;; *) st=1 ;; esac
ok $st "lua5.4: a grace error is a Lua error" "$out"

# a host linking the installed libraries: grace_lua_open into its own state
cat > "$tmp/host.c" <<'C'
#include <stdio.h>
#include <lauxlib.h>
#include <lualib.h>
#include "grace_lua.h"
static int run(lua_State *L, const char *code) {
  if (luaL_dostring(L, code) == LUA_OK) return 0;
  printf("%s\n", lua_tostring(L, -1));
  return 1;
}
int main(void) {
  lua_State *L = luaL_newstate();   /* the state makes and owns its VM */
  luaL_openlibs(L);
  if (grace_lua_open(L, NULL) != LUA_OK || run(L, "print(grace.arange(3):sum():item())")) return 1;
  lua_close(L);
  grace_config c0 = {.device = "cpu"}, c1 = {.device = "cpu", .index_base = 1};
  grace_vm *vm0 = grace_vm_new(&c0, NULL, 0), *vm1 = grace_vm_new(&c1, NULL, 0);
  L = luaL_newstate();              /* the host's VM: a 0-based one is refused, a 1-based one used */
  luaL_openlibs(L);
  if (grace_lua_open(L, vm0) == LUA_OK) return 1;
  printf("%s\n", lua_tostring(L, -1));
  lua_pop(L, 1);
  if (grace_lua_open(L, vm1) != LUA_OK || run(L, "print(grace.tensor{5, 7}:argmax())")) return 1;
  printf("%d %d\n", grace_lua_vm(L) == vm1, grace_lua_open(L, vm0) != LUA_OK);
  lua_close(L);
  grace_vm_free(vm0);               /* still the host's after lua_close */
  grace_vm_free(vm1);
  return 0;
}
C
out=$(cc -std=c11 -Wall -Wextra -Werror -I"$p/include" -I/usr/include/lua5.4 -o "$tmp/host" "$tmp/host.c" \
      -L"$p/lib" -lgrace_lua -Wl,-Bstatic -lgrace -Wl,-Bdynamic -llua5.4 -lmimalloc -ljansson -lz -lm -ldl -lpthread \
      ${GRACE_SANITIZED:+-fsanitize=address,undefined} 2>&1 \
      && "$tmp/host" 2>&1)
is "a C host links libgrace_lua.a and libgrace.a; grace_lua_open with its own VM or the host's" "$out" "3
grace_lua_open: the VM must be made with index_base 1 (Lua counts from 1)
tensor(2)
1 1"

# the same host built with nothing but what pkg-config says of the installed grace-lua (which requires grace and
# lua5.4), linked against the installed libgrace.so
export PKG_CONFIG_PATH="$p/lib/pkgconfig"
v=$(pkg-config --modversion grace-lua 2>&1)
is "pkg-config knows grace-lua, of grace's version" "$v" "$(pkg-config --modversion grace 2>&1)"
out=$(cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags grace-lua) -o "$tmp/host_pc" "$tmp/host.c" \
      $(pkg-config --libs grace-lua) 2>&1 && LD_LIBRARY_PATH="$p/lib" "$tmp/host_pc" 2>&1)
is "a C host built with pkg-config --cflags --libs grace-lua runs" "$out" "3
grace_lua_open: the VM must be made with index_base 1 (Lua counts from 1)
tensor(2)
1 1"
[ $failed -eq 0 ]
