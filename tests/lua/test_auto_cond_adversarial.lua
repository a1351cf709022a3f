-- test_auto_cond_adversarial.lua: edge cases of automatic cond regions (a host branch on item() that becomes a
-- device-side cond), on the CPU. Every case runs a compiled function and the same Lua function eagerly on the same
-- inputs, over calls that alternate the branch's outcome, and checks that every result (tensors, numbers, booleans,
-- their count) equals eager's, and whether the two recorded paths became one program (f:stats().auto_regions) as
-- docs/lua_api.md says. Covered: NaN (> and ~=), -0.0 == 0, integer tensors against fractional constants, exact int64
-- comparison at 2^53, the constant on the left, `and true`/`or false`, a second item() in the condition, elseif,
-- nested ifs, a branch in a loop, goto, results that differ in count/type/number (no merge, with the reason),
-- a returned argument, side effects on Lua state (upvalue, table field, global: no merge or eager), in-place writes
-- in a branch to arguments, captures and values from before it (merged: written back once), the limit read from an upvalue changed after the merge (retraces), the limit of a
-- helper function (stays a break), state read only by the branch recorded second (upvalue number, field, bool,
-- string, replaced tensor: retraces), dynamic sizes, dtype changes, a coroutine, and sites that must stay breaks.
local tap = require "tests.lua.tap"
local grace = require "grace"
local T = grace.tensor

local function same_num(x, y)
  return x == y or (x ~= x and y ~= y) or math.abs(x - y) <= 1e-5 * math.max(1, math.abs(y))
end

-- nil when a and b (results of one call) are alike, else why not
local function differ(a, b)
  if type(a) ~= type(b) then return "type " .. type(a) .. " vs " .. type(b) end
  if type(a) == "number" then return not same_num(a, b) and (a .. " vs " .. b) or nil end
  if type(a) ~= "userdata" then return a ~= b and (tostring(a) .. " vs " .. tostring(b)) or nil end
  if a.dtype ~= b.dtype or a:dim() ~= b:dim() then return "dtype or rank" end
  for d = 1, a:dim() do if a:size(d) ~= b:size(d) then return "size" end end
  if a:numel() == 0 then return nil end
  local la, lb = a:double():reshape({-1}):tolist(), b:double():reshape({-1}):tolist()
  for i = 1, #lb do if not same_num(la[i], lb[i]) then return ("element %d: %s vs %s"):format(i, la[i], lb[i]) end end
end

-- Calls the compiled cf and the eager fn n times on inputs (cycled), mutate(i) before each call; the first
-- difference (nil if none) and the change of cf's counters.
local function compare(cf, fn, inputs, n, mutate)
  local s0, diff = cf:stats(), nil
  for i = 1, n do
    local args = inputs[(i - 1) % #inputs + 1]
    if mutate then mutate(i) end
    local okc, rc = pcall(function() return table.pack(cf(table.unpack(args))) end)
    local oke, re = pcall(function() return table.pack(fn(table.unpack(args))) end)
    if okc ~= oke then diff = diff or ("call %d: compiled ok=%s, eager ok=%s"):format(i, okc, oke)
    elseif okc then
      if rc.n ~= re.n then diff = diff or ("call %d: %d results vs %d"):format(i, rc.n, re.n) end
      for k = 1, re.n do
        local why = differ(rc[k], re[k])
        if why then diff = diff or ("call %d result %d: %s"):format(i, k, why) end
      end
    end
  end
  local s1 = cf:stats()
  return diff, {replays = s1.replays - s0.replays, traces = s1.traces - s0.traces, eager = s1.eager_calls - s0.eager_calls}
end

-- One case: results equal eager over n calls; merged (true: one program with a cond, false: none, nil: not checked).
local function case(name, fn, inputs, n, merged, opts, mutate)
  tap.section(name, function()
    local cf = grace.compile(fn, opts)
    local diff = compare(cf, fn, inputs, n, mutate)
    tap.ok(diff == nil, name .. ": every result equals eager" .. (diff and (" (" .. diff .. ")") or ""))
    local st = cf:stats()
    if merged == true then
      tap.ok(st.auto_regions >= 1, name .. ": the paths became one program with a cond")
    elseif merged == false then
      tap.ok(st.auto_regions == 0, name .. ": the paths stay replayed or eager (" .. st.auto_region_failure .. ")")
    end
  end)
  return name
end

local P, N, Z = T({1.0, 2}), T({-1.0, -2}), T({0.5, -0.5})
local alt = {{P}, {N}}
local function L(v) return T({v}):long() end

-- ---- numbers: NaN, -0.0, integer tensors, exactness ----
case("NaN > 0", function(t) if t:sum():item() > 0 then return t * 2 else return t * 3 end end,
     {{P}, {T({0 / 0, 1})}, {N}, {T({0 / 0})}}, 12, true)
case("NaN ~= 0", function(t) if t:sum():item() ~= 0 then return t * 2 else return t * 3 end end,
     {{T({1.0, -1})}, {T({0 / 0, 1})}, {T({2.0})}}, 12, true)
case("not (NaN <= 0)", function(t) if not (t:sum():item() <= 0) then return t * 2 else return t * 3 end end,
     {{P}, {T({0 / 0, 1})}, {N}}, 12, true)
case("-0.0 == 0", function(t) if t:sum():item() == 0 then return t * 2 else return t * 3 end end,
     {{T({-0.0})}, {T({1.0})}, {T({0.0})}}, 12, true)
case("int > 0.5", function(t) if t:sum():item() > 0.5 then return t:float() * 2 else return t:float() * 3 end end,
     {{T({1}):int()}, {T({0}):int()}}, 10, true)
case("int < -0.5", function(t) if t:sum():item() < -0.5 then return t:float() * 2 else return t:float() * 3 end end,
     {{T({-1}):int()}, {T({0}):int()}}, 10, true)
case("uint8 > 200", function(t) if t:sum():item() > 200 then return t:float() * 2 else return t:float() * 3 end end,
     {{T({250}):byte()}, {T({10}):byte()}}, 10, true)
-- 2^53 + 1 and 2^53 are one double: an integer at 2^53 or beyond keeps the break, and Lua's exact comparison
case("int64 == 2^53, then 2^53 + 1", function(t)
       if t:sum():item() == 9007199254740992 then return t:float() * 2 else return t:float() * 3 end end,
     {{L(9007199254740992)}, {L(5)}, {L(9007199254740992)}, {L(5)}, {L(9007199254740993)}, {L(5)}}, 12, false)
case("float32 > 0.1", function(t) if t:sum():item() > 0.1 then return t * 2 else return t * 3 end end,
     {{T({0.1})}, {T({0.05})}}, 10, true)
case("constant on the left", function(t) if 0 < t:sum():item() then return t * 2 end return t * 3 end,
     {{P}, {N}, {T({0.0})}}, 12, true)
case("constant on the left, ==", function(t) if 2 == t:sum():item() then return t * 2 end return t * 3 end,
     {{T({2.0})}, {T({-1.0})}}, 10, true)
-- -0.0 is not folded by Lua's compiler: computed on the line, it stays a break
case("< -0.0", function(t) if t:sum():item() < -0.0 then return t * 2 else return t * 3 end end,
     {{T({-0.0})}, {T({-1.0})}, {T({0.0})}}, 12, false)

-- ---- conditions ----
case("and true", function(t) if t:sum():item() > 0 and true then return t * 2 else return t * 3 end end, alt, 10, true)
case("or false", function(t) if t:sum():item() > 0 or false then return t * 2 else return t * 3 end end, alt, 10, true)
case("and a number argument", function(t, s) if t:sum():item() > 0 and s > 0 then return t * 2 else return t * 3 end end,
     {{P, 1}, {N, 1}, {P, -1}}, 12, true)
case("and a second item()", function(t)
       if t:sum():item() > 0 and t:max():item() > 1.5 then return t * 2 else return t * 3 end end, {{P}, {N}, {Z}}, 12, false)
case("or a second item()", function(t)
       if t:sum():item() > 0 or t:max():item() > 0 then return t * 2 else return t * 3 end end, {{P}, {N}, {Z}}, 12, false)
case("elseif", function(t)
       if t:sum():item() > 1 then return t * 2 elseif t:sum():item() < -1 then return t * 3 else return t * 4 end end,
     {{P}, {N}, {Z}}, 12, false)
case("nested if", function(t)
       if t:sum():item() > 0 then
         if t:max():item() > 1.5 then return t * 2 end
         return t * 5
       else return t * 3 end
     end, {{P}, {N}, {T({0.1, 0.2})}}, 12, false)
case("a branch in a loop of 3", function(t)
       local r = t
       for i = 1, 3 do if t:sum():item() > i then r = r + 1 else r = r * 2 end end
       return r
     end, {{T({5.0})}, {T({1.5})}, {T({2.5})}, {T({0.0})}}, 12, false)
case("goto", function(t)
       local r = t
       if t:sum():item() > 0 then goto skip end
       r = r * 3
       ::skip::
       return r + 1
     end, alt, 10, true)
case("the outcome as a number on the next line", function(t)
       local m = 3
       if t:sum():item() > 0 then m = 2 end
       return t * m
     end, alt, 10, true)
case("the outcome in an and/or expression", function(t) return t * (t:sum():item() > 0 and 2 or 3) end, alt, 10, true)
case("a coroutine's branch", function(t)
       local co = coroutine.wrap(function() if t:sum():item() > 0 then return t * 2 end return t * 3 end)
       return co()
     end, alt, 10, true)

-- ---- results ----
case("the same number on both sides", function(t)
       if t:sum():item() > 0 then return t * 2, 1 end
       return t * 3, 1
     end, alt, 10, true)
case("an argument on one side", function(t) if t:sum():item() > 0 then return t end return t * 3 end, alt, 10, true)
case("one result twice", function(t)
       local h = t * 2
       if t:sum():item() > 0 then return h, h end
       return h + 1, h
     end, alt, 10, true)
for _, c in ipairs({
  {"different counts", function(t) if t:sum():item() > 0 then return t * 2 end return t * 3, t end},
  {"different numbers", function(t) if t:sum():item() > 0 then return t * 2, 1 end return t * 3, 2 end},
  {"nil against a tensor", function(t) if t:sum():item() > 0 then return t * 2, nil end return t * 3, t end},
  {"nothing against a tensor", function(t) if t:sum():item() > 0 then return end return t * 3 end},
  {"strings", function(t) if t:sum():item() > 0 then return t * 2, "a" end return t * 3, "b" end},
  {"booleans", function(t) if t:sum():item() > 0 then return t * 2, true end return t * 3, false end},
  {"dtypes", function(t) if t:sum():item() > 0 then return t:int() end return t * 3 end},
  {"shapes", function(t) if t:sum():item() > 0 then return t:sum() end return t * 3 end},
}) do
  case("results: " .. c[1], c[2], alt, 10, false)
end

-- ---- Lua state ----
local count = 0
case("an upvalue counter", function(t)
       if t:sum():item() > 0 then
         count = count + 1
         return t * 2
       else return t * 3 end
     end, alt, 10, false)
tap.is(count, 10, "an upvalue counter: every call (compiled and eager) counted")
local tbl = {}
case("a table field read and written", function(t)
       if t:sum():item() > 0 then
         tbl.x = (tbl.x or 0) + 1
         return t * 2
       else return t * 3 end
     end, alt, 10, false)
tap.is(tbl.x, 10, "a table field: every positive call counted")
ADV_COUNT = 0
case("a global written", function(t)
       if t:sum():item() > 0 then
         ADV_COUNT = ADV_COUNT + 1
         return t * 2
       else return t * 3 end
     end, alt, 10, false)
tap.is(ADV_COUNT, 10, "a global: every positive call counted")
local A, B = T({10.0, 20}), T({30.0, 40})
case("different captures", function(t) if t:sum():item() > 0 then return t * A else return t + B end end, alt, 10, true,
     nil, function(i) if i == 6 then A:add_(1) end end)
local W = T({1.0, 1})
case("in place to a capture", function(t)
       if t:sum():item() > 0 then
         W:add_(1)
         return t * 2
       end
       return t * 3
     end, alt, 10, true)
tap.is(W:tolist()[1], 11.0, "in place to a capture: every positive call (compiled and eager) wrote")
local acc = T({0.0, 0})
case("in place to an argument", function(t, a)
       if t:sum():item() > 0 then
         a:add_(1)
         return t * 2
       end
       return t * 3
     end, {{P, acc}, {N, acc}}, 10, true)
tap.is(acc:tolist()[1], 10.0, "in place to an argument: every positive call wrote")
case("in place to a tensor computed before the branch", function(t)
       local h = t * 2
       if t:sum():item() > 0 then
         h:add_(1)
         return h
       end
       return h * 3
     end, alt, 10, true)
case("in place to a tensor made in the branch", function(t)
       local h = t * 2
       if t:sum():item() > 0 then
         local g = h + 0
         g:mul_(5)
         return g
       end
       return h * 3
     end, alt, 10, true)

-- ---- the limit, and state read by one branch, changing after the merge ----
local c = {limit = 0}
case("c.limit changed after the merge", function(t) if t:sum():item() > c.limit then return t * 2 end return t * 3 end,
     {{P}, {N}, {T({3.0, 4})}, {T({-5.0, -4})}}, 12, true, nil, function(i) c.limit = i > 6 and 100 or 0 end)
local lim = 0
case("an upvalue limit changed every third call", function(t) if t:sum():item() > lim then return t * 2 end return t * 3 end,
     alt, 12, true, nil, function(i) lim = (i % 3 == 0) and -100 or 0 end)
local cfg = {a = {b = 0}}
case("cfg.a.b, its table replaced", function(t) if t:sum():item() >= cfg.a.b then return t * 2 end return t * 3 end,
     alt, 12, true, nil, function(i) if i == 7 then cfg.a = {b = 10} end end)
local ilim = 3
case("an integer limit, integer tensor", function(t)
       if t:sum():item() > ilim then return t:float() * 2 end
       return t:float() * 3
     end, {{L(5)}, {L(1)}}, 12, true, nil, function(i) ilim = i > 6 and 10 or 3 end)
local lim3 = 0
local function helper(t) if t:sum():item() > lim3 then return t * 2 end return t * 3 end
case("a helper's upvalue limit", function(t) return helper(t) + 1 end, alt, 12, false, nil,
     function(i) lim3 = i > 6 and 100 or 0 end)
local ci = setmetatable({}, {__index = function() return 0 end})
case("a limit through __index", function(t) if t:sum():item() > ci.limit then return t * 2 end return t * 3 end,
     alt, 10, false)
local scale, cs, flag, mode = 3, {s = 3}, false, "a"
local Wr = T({1.0, 1})
case("a number read by the second path only", function(t)
       if t:sum():item() > 0 then return t * 2 end
       return t * scale
     end, alt, 14, true, nil, function(i) scale = i > 7 and 5 or 3 end)
case("a field read by the second path only", function(t)
       if t:sum():item() < 0 then return t * cs.s end
       return t * 2
     end, alt, 14, true, nil, function(i) cs.s = i > 7 and 5 or 3 end)
case("a tensor read by the second path only, replaced", function(t)
       if t:sum():item() > 0 then return t * 2 end
       return t * Wr
     end, alt, 14, true, nil, function(i) if i == 8 then Wr = T({7.0, 7}) end end)
case("a boolean read by the second path only", function(t)
       if t:sum():item() > 0 then return t * 2 end
       if flag then return t * 5 end
       return t * 3
     end, alt, 14, true, nil, function(i) flag = i > 7 end)
case("a string read by the second path only", function(t)
       if t:sum():item() > 0 then return t * 2 end
       if mode == "b" then return t * 5 end
       return t * 3
     end, alt, 14, true, nil, function(i) mode = i > 7 and "b" or "a" end)
local function get_scale() return scale end
case("a helper's upvalue read by the second path only", function(t)
       if t:sum():item() > 0 then return t * 2 end
       return t * get_scale()
     end, alt, 14, true, nil, function(i) scale = i > 7 and 5 or 3 end)

-- ---- sizes and dtypes ----
grace.manual_seed(7)
local sized = {}
for i = 1, 12 do
  local x = grace.randn(({3, 5, 7, 4})[i % 4 + 1], 4):abs() + 0.1
  sized[i] = {i % 3 == 0 and x or -x}
end
case("sizes that change, early return", function(t)
       local h = t:relu() + t
       if h:sum():item() > 0 then return h end
       return h:tanh()
     end, sized, 24, true)
case("dtypes that change", function(t) if t:sum():item() > 0 then return t * 2 end return t * 3 end,
     {{T({1.0})}, {T({-1.0})}, {T({1.0}):double()}, {T({-1.0}):double()}, {L(2)}, {L(-2)}, {T({1.0})}}, 14, true)
case("0-d and [1]", function(t) if t:sum():item() > 0 then return t * 2 end return t * 3 end,
     {{T(1.0)}, {T({-1.0})}, {T(-1.0)}, {T({1.0})}}, 12, true)
case("sizes 1 and 0", function(t) if t:sum():item() > 0 then return t * 2 end return t * 3 end,
     {{P}, {T({-1.0, 3, -4})}, {T({1.0})}, {grace.zeros(0)}, {T({-1.0})}}, 15, true)
case("an argument's own item()", function(t) if t:item() > 0 then return t * 2 end return t * 3 end,
     {{T(1.0)}, {T(-1.0)}}, 10, true)

-- ---- sites that stay breaks ----
case("the comparison kept", function(t)
       local b = t:sum():item() > 0
       if b then return t * 2 end
       return t * 3
     end, alt, 10, false)
case("item() through pcall", function(t)
       local _, v = pcall(t.item, t:sum())
       if v > 0 then return t * 2 end
       return t * 3
     end, alt, 10, false)
local item_of = function(x) return x:item() end
case("item() in a wrapper", function(t) if item_of(t:sum()) > 0 then return t * 2 end return t * 3 end, alt, 10, false)
case("item() through a local", function(t)
       local item = t.item
       if item(t:sum()) > 0 then return t * 2 end
       return t * 3
     end, alt, 10, false)
case("floor division", function(t) if t:sum():item() // 1 > 0 then return t * 2 end return t * 3 end,
     {{T({0.5})}, {T({1.5})}}, 10, false)
case("a loop of one with break", function(t)
       for _ = 1, 1 do
         if t:sum():item() > 0 then break end
         t = t * 2
       end
       return t + 1
     end, alt, 10, false)
case("repeat until", function(t)
       repeat t = t - 1 until t:sum():item() < 0
       return t
     end, alt, 10, false)

-- ---- after the merge: no Lua code runs, every call equals eager ----
tap.section("after the merge", function()
  local function f(t) if (t:sum() * 2):item() > 1 then return t:exp() end return t:abs() + 1 end
  local cf = grace.compile(f)
  compare(cf, f, {{P}, {N}, {P}}, 3)
  local diff, d = compare(cf, f, {{P}, {N}, {Z}, {T({0 / 0, 1})}, {T({0.25, 0.25})}, {T({0.25, 0.26})}}, 24)
  tap.ok(diff == nil and d.replays == 0 and d.traces == 0 and d.eager == 0,
         ("after the merge: 24 calls, both ways and NaN, equal eager with no replay (%s, %d replays)"):format(
           tostring(diff), d.replays))
end)

-- ---- a random draw before the branch: the predicate and the branch read the same draw ----
tap.section("a random draw", function()
  local function g(t)
    local r = grace.rand(2) + t
    if r:sum():item() > 1 then return r * 2 end
    return -r
  end
  local cf = grace.compile(g)
  local bad = 0
  for _ = 1, 40 do
    local v = cf(T({0.0, 0})):tolist()
    local pos = v[1] >= 0   -- r >= 0: the branch taken is told by the sign
    local s = pos and (v[1] + v[2]) / 2 or -(v[1] + v[2])
    if pos ~= (s > 1) then bad = bad + 1 end
  end
  tap.ok(bad == 0 and cf:stats().auto_regions == 1,
         ("a random draw: 40 calls, each result's branch agrees with its own draw's sum (%d do not)"):format(bad))
end)

-- ---- the watch given up after 16 calls one way: the other outcome still runs right, replayed ----
tap.section("the watch given up", function()
  local function f(t) if t:sum():item() > 0 then return t * 2 end return t * 3 end
  local cf = grace.compile(f)
  compare(cf, f, {{P}}, 20)
  local diff = compare(cf, f, alt, 8)
  tap.ok(diff == nil and cf:stats().auto_regions == 0 and cf:stats().auto_region_failure:find("16 replayed calls", 1, true),
         "the watch given up: the other outcome afterwards equals eager, no merge, the reason given")
end)

tap.done()
