/* fuzz_lua.c: the Lua API under random calls. Each input runs a fresh Lua state with grace open, limited (a 1 MiB
 * tensor cap, a 64 MiB heap, 20 s) and sandboxed, through the driver below: the input's bytes choose which grace
 * functions to call (every function of the `grace` table, tensor methods included, but the ones that print or
 * read files, and while_loop, whose random functions would loop until the time limit) and with what: integers at the edges of int64, NaN and infinities, tensors of every dtype with zero,
 * negative and huge sizes, strings, nil, tables with metamethods that call back into grace or raise, functions that
 * run grace ops, option tables; results that are tensors join the pool later calls draw from; some values carry
 * finalizers that call grace while the collector runs. Errors are expected; a crash, a sanitizer report, an error
 * calling itself internal, or a VM that no longer computes ones(2):sum() == 2 afterwards is a failure (abort). */
#include <lauxlib.h>
#include <lualib.h>
#include "fuzz.h"
#include "grace_lua.h"

static const char driver[] =
  "local data = ...\n"
  "local pos = 0\n"
  "local function byte() pos = pos + 1; return data:byte(pos) or 0 end\n"
  "local EDGE = {0, 1, -1, -2, 1 << 16, 1 << 31, 1 << 40, 1 << 60, 1 << 62, math.maxinteger, math.mininteger,\n"
  "              -(1 << 62), 1 << 20}\n"
  "local function int()\n"
  "  local b = byte()\n"
  "  if b < 180 then return b % 6 end\n"
  "  if b < 250 then return EDGE[b % #EDGE + 1] end\n"
  "  local v = 0\n"
  "  for _ = 1, 8 do v = (v << 8) | byte() end\n"
  "  return v\n"
  "end\n"
  "local NUMS = {0 / 0, 1 / 0, -1 / 0, -0.0, 1e308, 5e-324, 1e-40, 2 ^ 53, 2 ^ 63, 0.5, -3.25}\n"
  "local function num() local b = byte(); if b < 128 then return b / 7 - 5 end; return NUMS[b % #NUMS + 1] end\n"
  "local DTYPES = {'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool', 'int8', 'nonsense'}\n"
  "local pool = {}\n"
  "local function shape() local s = {}; for i = 1, byte() % 4 do s[i] = int() end; return s end\n"
  "local function tensor()\n"
  "  if #pool > 0 and byte() < 160 then return pool[byte() % #pool + 1] end\n"
  "  local ok, t = pcall(grace.randn, shape(), {dtype = DTYPES[byte() % 4 + 1]})\n"
  "  if ok and byte() % 3 == 0 then ok, t = pcall(grace.cast, t, DTYPES[byte() % #DTYPES + 1]) end\n"
  "  if ok then return t end\n"
  "  ok, t = pcall(grace.ones, byte() % 5)\n"
  "  return ok and t or 0\n"
  "end\n"
  "local value\n"
  "local function proxy()\n"
  "  local mt = {}\n"
  "  local k = byte() % 4\n"
  "  if k == 0 then mt.__index = function() return grace.ones(2) end\n"
  "  elseif k == 1 then mt.__index = function() error('a raising __index') end\n"
  "  elseif k == 2 then mt.__len = function() return int() end\n"
  "  else mt.__index = function(_, i) return i end end\n"
  "  mt.__tostring = function() return 'proxy' end\n"
  "  if byte() < 64 then mt.__gc = function() pcall(grace.zeros, 3) end end\n"
  "  return setmetatable({}, mt)\n"
  "end\n"
  "function value(depth)\n"
  "  local k = byte() % 13\n"
  "  if k == 0 then return int() elseif k == 1 then return num() elseif k <= 4 then return tensor()\n"
  "  elseif k == 5 then return shape() elseif k == 6 then return DTYPES[byte() % #DTYPES + 1]\n"
  "  elseif k == 7 then return nil elseif k == 8 then return byte() % 2 == 0\n"
  "  elseif k == 9 then return proxy()\n"
  "  elseif k == 10 then local t = tensor(); return function(...) return grace.add(t, ...) end\n"
  "  elseif k == 11 then return {dtype = DTYPES[byte() % #DTYPES + 1], device = byte() % 2 == 0 and 'cpu' or 'cuda',\n"
  "                                keepdim = byte() % 2 == 0, requires_grad = byte() % 2 == 0}\n"
  "  elseif (depth or 0) < 2 then local t = {}; for i = 1, byte() % 4 do t[i] = value((depth or 0) + 1) end; return t end\n"
  "  return int()\n"
  "end\n"
  "local SKIP = {help = 1, explain = 1, report = 1, fromfile = 1, load = 1, save = 1, set_printoptions = 1,\n"
  "              isatty = 1, compile = 1, while_loop = 1}\n"
  "local names = {}\n"
  "for k, v in pairs(grace) do if type(v) == 'function' and not SKIP[k] then names[#names + 1] = k end end\n"
  "table.sort(names)\n"
  "local calls = 0\n"
  "while pos < #data and calls < 64 do\n"
  "  calls = calls + 1\n"
  "  local name = names[(byte() << 8 | byte()) % #names + 1]\n"
  "  local n = byte() % 5\n"
  "  local args = {}\n"
  "  for i = 1, n do args[i] = value() end\n"
  "  local r = table.pack(pcall(grace[name], table.unpack(args, 1, n)))\n"
  "  if not r[1] and tostring(r[2]):find('internal', 1, true) then\n"
  "    error('INTERNAL ' .. name .. ': ' .. tostring(r[2]), 0)\n"
  "  end\n"
  "  for i = 2, r.n do if grace.is_tensor(r[i]) and #pool < 16 then pool[#pool + 1] = r[i] end end\n"
  "  if byte() == 255 then collectgarbage() end\n"
  "end\n"
  "pool = nil\n"
  "collectgarbage(); collectgarbage()\n"
  "grace.set_grad_enabled(true)\n"
  "local two = grace.ones(2):sum():item()\n"
  "if two ~= 2 then error('INTERNAL the VM computes ones(2):sum() = ' .. tostring(two), 0) end\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lua_State *L = luaL_newstate();
  if (!L) return 0;
  luaL_openlibs(L);
  grace_lua_limits lim = {FUZZ_MAX_BYTES, (size_t)64 << 20, 20.0};
  if (grace_lua_open(L, NULL) != LUA_OK || grace_lua_set_limits(L, &lim) != LUA_OK || grace_lua_sandbox(L) != LUA_OK) {
    fprintf(stderr, "fuzz_lua: setting up the state failed: %s\n", lua_tostring(L, -1));
    abort();
  }
  if (luaL_loadbuffer(L, driver, sizeof driver - 1, "=fuzz_lua") != LUA_OK) {
    fprintf(stderr, "fuzz_lua: the driver does not load: %s\n", lua_tostring(L, -1));
    abort();
  }
  lua_pushlstring(L, (const char *)data, size);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    /* a limit that fired (memory or time) is what limits do; anything else escaping the driver is a failure */
    if (!msg || (!strstr(msg, "not enough memory") && !strstr(msg, "time limit"))) {
      fprintf(stderr, "fuzz_lua: %s\n", msg ? msg : "(an error that is no string)");
      abort();
    }
  }
  lua_close(L);
  return 0;
}
