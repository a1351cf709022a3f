/* test_luac.c: the item() site analysis on Lua 5.4 bytecode (lua/lgrace_luac.c). A table X with a C method item()
 * stands in for a tensor: item() runs lg_cmp_site on its Lua caller (level 1), records the answer and returns the
 * global V. Each snippet's expected comparison, constant and sense come from reading its source; each accepted
 * snippet is then run with many values (NaN and booleans among them) and the branch Lua took must be the one
 * lg_cmp_holds predicts; each rejected one must name its file:line and say why. */
#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include "lua/lgrace_luac.h"
#include "tap.h"

typedef struct {
  int calls, ok;
  lg_cmp cmp;
  char why[256];
} probe;
static probe last;   /* what the latest item() call answered */

static int item(lua_State *L) {
  last.calls++;
  last.ok = lg_cmp_site(L, 1, &last.cmp, last.why, sizeof last.why);
  lua_getglobal(L, "V");
  return 1;
}

/* Runs src (chunk "t.lua", after a first line "local x = X; T = false") with item() returning v; 0 or Lua's status. */
static int run(lua_State *L, const char *src, int is_bool, double v) {
  char code[1024];
  snprintf(code, sizeof code, "local x = X; T = false\n%s", src);
  if (is_bool) lua_pushboolean(L, v != 0);
  else if (v == floor(v) && fabs(v) < 1e15) lua_pushinteger(L, (lua_Integer)v);
  else lua_pushnumber(L, v);
  lua_setglobal(L, "V");
  memset(&last, 0, sizeof last);
  int st = luaL_loadbuffer(L, code, strlen(code), "=t.lua");
  if (st == LUA_OK) st = lua_pcall(L, 0, 0, 0);
  if (st != LUA_OK) lua_pop(L, 1);
  return st;
}

/* src on one line, for a test name (a static buffer: one use per call of ok). */
static const char *oneline(const char *src) {
  static char buf[256];
  size_t n = 0;
  for (; *src && n + 4 < sizeof buf; src++) {
    if (*src == '\n') { memcpy(buf + n, " / ", 3); n += 3; }
    else buf[n++] = *src;
  }
  buf[n] = '\0';
  return buf;
}

static int then_ran(lua_State *L) {
  lua_getglobal(L, "T");
  int t = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return t;
}

typedef struct {
  const char *src;   /* from line 2 */
  int line;          /* of the item() call */
  lg_cmp_op op;
  double k;
  int kint;          /* k is an integer constant */
  int negate;
  int flip;          /* the then-block runs when holds is false (the comparison jumps into it) */
} accept_case;

static const accept_case accepts[] = {
  {"if x:item() > 1e9 then T = true end", 2, LG_CMP_GT, 1e9, 0, 0, 0},
  {"if x:item() == 0 then T = true end", 2, LG_CMP_EQ, 0, 1, 0, 0},
  {"if x:item() ~= 0 then T = true end", 2, LG_CMP_NE, 0, 1, 0, 0},
  {"if x:item() < 3 then T = true end", 2, LG_CMP_LT, 3, 1, 0, 0},
  {"if x:item() >= 2.5 then T = true end", 2, LG_CMP_GE, 2.5, 0, 0, 0},
  {"if x:item() <= 0 then T = true end", 2, LG_CMP_LE, 0, 1, 0, 0},
  {"if not (x:item() > 0) then T = true end", 2, LG_CMP_GT, 0, 1, 1, 0},
  {"if not (x:item() == 1) then T = true end", 2, LG_CMP_NE, 1, 1, 0, 0},
  {"if 0 < x:item() then T = true end", 2, LG_CMP_GT, 0, 1, 0, 0},
  {"if 2.5 >= x:item() then T = true end", 2, LG_CMP_LE, 2.5, 0, 0, 0},
  {"if 1e9 <= x:item() then T = true end", 2, LG_CMP_GE, 1e9, 0, 0, 0},
  {"if x:item() == 1e9 then T = true end", 2, LG_CMP_EQ, 1e9, 0, 0, 0},
  {"if x:item() > 1000 then T = true end", 2, LG_CMP_GT, 1000, 1, 0, 0},
  {"if x:item() > -3 then T = true end", 2, LG_CMP_GT, -3, 1, 0, 0},
  {"if x:item() < 2.0 then T = true end", 2, LG_CMP_LT, 2, 0, 0, 0},
  {"if x:item() == -0.5 then T = true end", 2, LG_CMP_EQ, -0.5, 0, 0, 0},
  {"if x:item() then T = true end", 2, LG_CMP_TRUTH, 0, 0, 0, 0},
  {"if not x:item() then T = true end", 2, LG_CMP_TRUTH, 0, 0, 1, 0},
  {"if x:item() then local z = 1; T = true end", 2, LG_CMP_TRUTH, 0, 0, 0, 0},
  {"if x:item() then T = true end\nlocal after = 1", 2, LG_CMP_TRUTH, 0, 0, 0, 0},
  {"if x:item() > 1 then T = true else T = false end", 2, LG_CMP_GT, 1, 1, 0, 0},
  {"if NO then T = 1 elseif x:item() < 1 then T = true end", 2, LG_CMP_LT, 1, 1, 0, 0},
  {"if x:item() > 0 and YES then T = true end", 2, LG_CMP_GT, 0, 1, 0, 0},
  /* `or`: Lua jumps into the then-block when the comparison holds, and falls through to test NO */
  {"if x:item() > 0 or NO then T = true end", 2, LG_CMP_GT, 0, 1, 1, 1},
  {"local a, b = 1, 2\nif x:item() >= 1 then T = true end", 3, LG_CMP_GE, 1, 1, 0, 0},
  {"local function f()\n  if x:item() ~= 5 then T = true end\nend\nf()", 3, LG_CMP_NE, 5, 1, 0, 0},
  {"if x:max():item() > 1e9 then T = true end", 2, LG_CMP_GT, 1e9, 0, 0, 0},
  {"T = x:item() > 0 and true or false", 2, LG_CMP_GT, 0, 1, 0, 0},
  {"if x:item()\n  > 0 then T = true end", 2, LG_CMP_GT, 0, 1, 0, 0},
  {"for i = 1, 2 do\n  if x:item() > 2 then T = true; break end\nend", 3, LG_CMP_GT, 2, 1, 0, 0},
  {"local K <const> = 5\nif x:item() > K then T = true end", 3, LG_CMP_GT, 5, 1, 0, 0},
  {"for i = 1, 2 do\n  if x:item() > 2 then T = true end\nend", 3, LG_CMP_GT, 2, 1, 0, 0},
};

/* Every accepted snippet: the comparison read from the source, then Lua's branch against lg_cmp_holds. */
static void test_accepts(lua_State *L) {
  static const double nums[] = {-4, -3, -1, -0.5, 0, 0.5, 1, 2, 2.5, 3, 5, 1000, 1001, 1e9, 2e9, NAN, INFINITY};
  for (size_t c = 0; c < sizeof accepts / sizeof *accepts; c++) {
    const accept_case *a = &accepts[c];
    const char *name = oneline(a->src);
    int st = run(L, a->src, 0, 0);
    ok(st == LUA_OK && last.calls > 0 && last.ok, "accepted: %s (%s)", name, last.why);
    if (!last.ok) continue;
    ok(last.cmp.op == a->op && last.cmp.k == a->k && last.cmp.k_is_int == a->kint && last.cmp.negate == a->negate &&
       last.cmp.line == a->line, "%s: op %d k %g int %d negate %d line %d", name, last.cmp.op, last.cmp.k,
       last.cmp.k_is_int, last.cmp.negate, last.cmp.line);
    lg_cmp cmp = last.cmp;
    int agree = 1;
    for (size_t i = 0; i < sizeof nums / sizeof *nums + 2; i++) {
      int is_bool = i >= sizeof nums / sizeof *nums;
      double v = is_bool ? (double)(i - sizeof nums / sizeof *nums) : nums[i];
      int h = lg_cmp_holds(&cmp, is_bool, v);
      st = run(L, a->src, is_bool, v);
      int want = st != LUA_OK ? -1 : then_ran(L) != a->flip;
      if (h != want) { agree = 0; printf("# %s with %s%g: Lua %d, lg_cmp_holds %d", name, is_bool ? "boolean " : "", v, want, h); printf("\n"); }
    }
    ok(agree, "%s: Lua's branch is lg_cmp_holds for every value", name);
  }
}

typedef struct {
  const char *src;
  int line;
  const char *why;   /* a part of the reason */
} reject_case;

static const reject_case rejects[] = {
  {"local v = x:item()\nif v > 0 then T = true end", 2, "stored in the local 'v'"},
  {"local v = x:item() if v > 0 then T = true end", 2, "stored in the local 'v'"},
  {"if x:item() * 2 > 1 then T = true end", 2, "arithmetic"},
  {"if -x:item() > 1 then T = true end", 2, "arithmetic"},
  {"S = tostring(x:item())", 2, "passed on"},
  {"S = math.floor(x:item())", 2, "passed on"},
  {"S = tostring(x:item(), 1)", 2, "passed to a function"},
  {"S = {x:item()}", 2, "passed on"},
  {"S = {}\nS[x:item()] = 1", 3, "table key"},
  {"S = {}\nS.f = x:item()", 3, "stored in a table"},
  {"S = x:item()", 2, "stored in a table or a global"},
  {"return x:item()", 2, "returned"},
  {"local t = {}\nreturn x:item(), t", 3, "returned"},
  {"local b = x:item() > 0", 2, "boolean value"},
  {"S = x:item() == 0", 2, "boolean value"},
  {"S = x:item() > 0 and 1", 2, "boolean value"},
  {"local b = not x:item()", 2, "'not'"},
  {"local b = x:item() or 0", 2, "'and' or 'or'"},
  {"if x:item() > YES2 then T = true end", 2, "not a constant"},
  {"S = x:item() or 0", 2, "'and' or 'or'"},
  {"S = x:item() and 1", 2, "'and' or 'or'"},
  {"local t = {}\nt.f = x:item() or 0", 3, "'and' or 'or'"},
  {"return x:item() or 0, 1", 2, "'and' or 'or'"},
  {"if (x:item() or 0) > 1 then T = true end", 2, "'and' or 'or'"},
  {"print(x:item().field)", 2, "indexed"},
  {"S = 'a' .. x:item()", 2, "concatenated"},
  {"local lim = 5\nif x:item() > lim then T = true end", 3, "not a constant"},
  {"if x:item() == 'a' then T = true end", 2, "not a number"},
  {"if x:item() == true then T = true end", 2, "not a number"},
  {"if x:item() < 'a' then T = true end", 2, "not a number"},
  {"if x:item() > 0 and x:item() < 5 then T = true end", 2, "several item() calls"},
  {"x:item()", 2, "not used"},
  {"local a, b = x:item()", 2, "several variables"},
  {"local f = x.item\nif f(x) > 0 then T = true end", 3, "no call obj:item()"},
  {"V = 3\nwhile x:item() > 0 do V = V - 1 end", 3, "decides a loop"},
  {"V = 3\nrepeat V = V - 1 until x:item() <= 0", 3, "decides a loop"},
  {"V = -2\nwhile true do\n  if x:item() > 0 then break end\n  V = V + 1\nend", 4, "decides a loop"},
  {"V = 5\nfor i = 1, 3 do if x:item() > 0 then break end end", 3, "decides a loop"},
  {"V = 3\nrepeat local z = V; F = function() return z end; V = V - 1 until x:item() <= 0", 3, "decides a loop"},
  {"local v <const> = x:item()\nif v > 0 then T = true end", 2, "stored in the local 'v'"},
  {"if tostring(1) == '1' and x:item() > 0 then T = true end", 2, "cannot be told apart"},
  {"V = 3\nwhile YES do if x:item() <= 0 then break end V = V - 1 end", 3, "decides a loop"},
};

static void test_rejects(lua_State *L) {
  for (size_t c = 0; c < sizeof rejects / sizeof *rejects; c++) {
    const reject_case *r = &rejects[c];
    char where[32];
    snprintf(where, sizeof where, "t.lua:%d: ", r->line);
    run(L, r->src, 0, 1);
    ok(last.calls > 0 && !last.ok && strncmp(last.why, where, strlen(where)) == 0 && strstr(last.why, r->why),
       "rejected: %s -> %s", oneline(r->src), last.why);
  }
}

/* Callers that are not the x:item() of a Lua line: a C function, a metamethod, a stripped chunk. */
static void test_callers(lua_State *L) {
  run(L, "local ok, v = pcall(x.item, x)", 0, 1);
  ok(last.calls == 1 && !last.ok && strstr(last.why, "C function"), "pcall(x.item, x): %s", last.why);
  /* the line holds x:item(), but the call running is __index of M (item itself), at the top of the frame */
  run(L, "local M = setmetatable({}, {__index = x.item})\nif x:item() > 0 and M.z then T = true end", 0, 1);
  ok(last.calls == 2 && !last.ok && strstr(last.why, "t.lua:3: the running call is not"), "a metamethod: %s", last.why);
  run(L, "local f = load(string.dump(function() if x:item() > 0 then T = true end end, true))\n"
         "debug.setupvalue(f, 1, x)\nf()", 0, 1);
  ok(last.calls == 1 && !last.ok && strstr(last.why, "no line information"), "a stripped chunk: %s", last.why);
  ok(!lg_cmp_site(L, 0, &last.cmp, last.why, sizeof last.why) && strstr(last.why, "no function at stack level 0"),
     "no function running: %s", last.why);
  ok(!lg_cmp_site(L, 0, &last.cmp, NULL, 0), "no reason buffer");
}

/* The constant of an integer comparison is exact beyond 2^53. */
static void test_constants(lua_State *L) {
  run(L, "if x:item() == 9007199254740993 then T = true end", 0, 1);
  ok(last.ok && last.cmp.op == LG_CMP_EQ && last.cmp.k_is_int && last.cmp.ik == 9007199254740993LL,
     "2^53 + 1 is kept exactly (%lld)", last.cmp.ik);
  run(L, "if x:item() < -1000000 then T = true end", 0, 1);
  ok(last.ok && last.cmp.op == LG_CMP_LT && last.cmp.k_is_int && last.cmp.ik == -1000000, "-1e6 as an integer");
}

int main(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  lua_newtable(L);
  lua_pushcfunction(L, item);
  lua_setfield(L, -2, "item");
  (void)luaL_dostring(L, "return function(self) return self end");
  lua_setfield(L, -2, "max");
  lua_setglobal(L, "X");
  lua_pushboolean(L, 1);
  lua_setglobal(L, "YES");
  lua_pushboolean(L, 0);
  lua_setglobal(L, "NO");
  lua_pushinteger(L, 2);
  lua_setglobal(L, "YES2");
  test_accepts(L);
  test_rejects(L);
  test_callers(L);
  test_constants(L);
  ok(lua_gettop(L) == 0, "the Lua stack is left as it was");
  lua_close(L);
  return tap_done();
}
