-- test_guards_paths.lua: the host guard of a compiled function re-reads, on every call, each path from its
-- arguments, upvalues and globals to a value its trace depends on, through every kind of step (a field, an array
-- element, a metatable, a table's length, an upvalue of a function met on the way, a global) and compares each kind
-- of value (a tensor by identity, an integer apart from a float, a float bit for bit, a string, a boolean, a class
-- by a snapshot of its fields). Each case changes one value and expects a retrace (f:stats().traces grows, and
-- last_guard_failure names a captured value) with the new result, or changes nothing the trace reads and expects no
-- retrace. Each expected value is worked out by hand from ones{3} and the numbers set.
local tap = require "tests.lua.tap"
local grace = require "grace"

local x = grace.ones{3}
local function first(t) return t:tolist()[1] end
local function traces(f) return f:stats().traces end

-- compiles f, calls it twice (one trace), runs change(), calls again: the result want1 by a retrace (retrace true)
-- or by the same trace (retrace false); returns the compiled function for more changes
local function after(name, f, want0, change, want1, retrace)
  local c = grace.compile(f)
  local a, b = first(c(x)), first(c(x))
  tap.ok((a == want0 or want0 ~= want0) and (b == want0 or want0 ~= want0) and traces(c) == 1,
         name .. ": compiled once (" .. tostring(a) .. ")")
  change()
  local got = first(c(x))
  if want1 == want1 then tap.is(got, want1, name .. ": the result after the change")
  else tap.ok(got ~= got, name .. ": the result after the change is NaN") end
  if retrace then
    tap.is(traces(c), 2, name .. ": by a retrace")
    tap.ok((c:stats().last_guard_failure or ""):find("changed identity or value", 1, true) ~= nil,
           name .. ": the guard says a captured value changed (" .. tostring(c:stats().last_guard_failure) .. ")")
  else
    tap.is(traces(c), 1, name .. ": no retrace")
  end
  return c
end

-- a tensor field: replaced by another tensor retraces; the same tensor assigned again does not
local m = {w = grace.ones{3} * 2}
after("a tensor field replaced", function(t) return t * m.w end, 2, function() m.w = grace.ones{3} * 5 end, 5, true)
local m2 = {w = grace.ones{3} * 2}
after("the same tensor assigned again", function(t) return t * m2.w end, 2, function() m2.w = m2.w end, 2, false)

-- numbers: an integer and a float of the same value differ; 0.0 and -0.0 differ; NaN is itself
local ci = {k = 1}
after("an integer replaced by the same float", function(t) return t * ci.k end, 1, function() ci.k = 1.0 end, 1, true)
local cz = {k = 0.0}
local cz_c = after("0.0 replaced by -0.0", function(t) return t * cz.k end, 0, function() cz.k = -0.0 end, 0, true)
tap.is(1 / first(cz_c(x)), -math.huge, "0.0 replaced by -0.0: the new trace multiplies by -0.0")
local nan = 0 / 0
local cnan = after("a NaN upvalue unchanged", function(t) return t * nan end, 0 / 0, function() nan = nan + 0 end, 0 / 0,
                   false)
tap.ok(cnan:ir() ~= nil, "a NaN upvalue unchanged: the function is compiled")
local tnan = {k = 0 / 0}   -- a NaN in a table: the table is unchanged after the trace (NaN is itself)
local ctn = after("a NaN field unchanged", function(t) return t * tnan.k end, 0 / 0, function() tnan.k = tnan.k + 0 end,
                  0 / 0, false)
tap.ok(ctn:ir() ~= nil and not ctn:stats().eager, "a NaN field unchanged: the function is compiled, not eager")

-- a string, a boolean
local cs = {mode = "double"}
after("a string changed", function(t) if cs.mode == "double" then return t * 2 end return t * 3 end, 2,
      function() cs.mode = "triple" end, 3, true)
local long = ("a long string, longer than the strings Lua interns: %s"):format(("x"):rep(40))
local cl = {mode = long}
after("a long string replaced by an equal one", function(t) if cl.mode == long then return t * 2 end return t * 3 end,
      2, function() cl.mode = (long .. "!"):sub(1, #long) end, 2, false)
local cb = {on = true}
after("a boolean flipped", function(t) if cb.on then return t * 2 end return t * 3 end, 2,
      function() cb.on = false end, 3, true)

-- a class: a method replaced (a snapshot of the __index table), the metatable swapped
local Class = {}
Class.__index = Class
function Class:scale(t) return t * self.k end
local obj = setmetatable({k = 2}, Class)
after("a method replaced in a class", function(t) return obj:scale(t) end, 2,
      function() function Class:scale(t) return t * self.k * 4 end end, 8, true)
local Other = {}
Other.__index = Other
function Other:scale(t) return t * self.k * 10 end
local Base = {}
Base.__index = Base
function Base:scale(t) return t * self.k end
local obj2 = setmetatable({k = 2}, Base)
after("a metatable swapped", function(t) return obj2:scale(t) end, 2, function() setmetatable(obj2, Other) end, 20,
      true)

-- a class rehashed without a change of its methods (keys of other kinds added): no retrace; a method replaced after
-- that still retraces (the order of its entries was learned again)
local Re = {}
Re.__index = Re
function Re:scale(t) return t * self.k end
for i = 1, 10 do Re["m" .. i] = function() return i end end   -- so a rehash reorders its entries
local obj3 = setmetatable({k = 2}, Re)
local re_c = after("a class rehashed, its methods unchanged", function(t) return obj3:scale(t) end, 2,
                   function() for i = 1, 40 do Re["extra" .. i] = {} end end, 2, false)
function Re:scale(t) return t * self.k * 3 end
tap.is(first(re_c(x)), 6, "a method replaced after the rehash: the new result")
tap.is(traces(re_c), 2, "a method replaced after the rehash: by a retrace")

-- a number key of a class (a snapshot entry other than a string key)
local Num = {}
Num.__index = Num
Num[1] = 2
function Num:scale(t) return t * self[1] end
local obj4 = setmetatable({}, Num)
after("a number-keyed field of a class changed", function(t) return obj4:scale(t) end, 2,
      function() Num[1] = 7 end, 7, true)

-- a length: an element appended
local list = {1, 2}
after("an element appended", function(t) return t * #list end, 2, function() list[#list + 1] = 9 end, 3, true)

-- an upvalue of a helper function the function calls
local k = 2
local function helper(t) return t * k end
after("an upvalue of a helper changed", function(t) return helper(t) end, 2, function() k = 6 end, 6, true)

-- a global the function reads
GUARD_PATHS_SCALE = 2
after("a global changed", function(t) return t * GUARD_PATHS_SCALE end, 2, function() GUARD_PATHS_SCALE = 4 end, 4,
      true)

-- an argument's field (a path from an argument)
local arg = {k = 2}
local ca = grace.compile(function(t, a) return t * a.k end)
ca(x, arg)
ca(x, arg)
arg.k = 5
tap.is(first(ca(x, arg)), 5, "an argument's field changed: the new result")
tap.is(traces(ca), 2, "an argument's field changed: by a retrace")

-- an intermediate table replaced by an equal copy: the paths through it still hold (no retrace), and are read
-- through the new table (a change in it retraces)
local outer = {inner = {s = 2}}
local cc = after("an intermediate table replaced by an equal copy", function(t) return t * outer.inner.s end, 2,
                 function() outer.inner = {s = 2} end, 2, false)
outer.inner.s = 5
tap.is(first(cc(x)), 5, "a field of the copy changed: the new result")
tap.is(traces(cc), 2, "a field of the copy changed: by a retrace")

-- two paths sharing a long prefix: only the last one changes, then only the first
local deep = {a = {b = {c = {d = {x = 2, y = 3}}}}}
local cd = after("two paths sharing a long prefix, the second changed",
                 function(t) return t * deep.a.b.c.d.x * deep.a.b.c.d.y end, 6, function() deep.a.b.c.d.y = 5 end, 10,
                 true)
deep.a.b.c.d.x = 7
tap.is(first(cd(x)), 35, "two paths sharing a long prefix, the first changed: the new result")
tap.is(traces(cd), 3, "two paths sharing a long prefix, the first changed: by a retrace")

-- many fields (more values than the stack of a check holds before it is compacted): the first and the last field
-- are still checked
local wide = {}
for i = 1, 600 do wide["f" .. i] = 1 end
local function sum_wide(t)
  local s = 0
  for i = 1, 600 do s = s + wide["f" .. i] end
  return t * s
end
local cw = after("600 fields, the last changed", sum_wide, 600, function() wide.f600 = 2 end, 601, true)
wide.f1 = 3
tap.is(first(cw(x)), 603, "600 fields, the first changed: the new result")
tap.is(traces(cw), 3, "600 fields, the first changed: by a retrace")
local nested = {}
for i = 1, 300 do nested[i] = {v = 1} end
local cn2 = after("300 nested tables, one field deep in the list changed", function(t)
  local s = 0
  for i = 1, 300 do s = s + nested[i].v end
  return t * s
end, 300, function() nested[290].v = 4 end, 303, true)
nested[3].v = 2
tap.is(first(cn2(x)), 304, "300 nested tables, an early field changed: the new result")
tap.is(traces(cn2), 3, "300 nested tables, an early field changed: by a retrace")

tap.done()
