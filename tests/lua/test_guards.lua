-- test_guards.lua: what grace.compile guards of the Lua state a function reads besides its arguments. A change to
-- any of it after compiling must retrace (or run eagerly, saying why), never give the result of the old state:
-- fields of global tables, defaults reached through an __index table or function, methods of a class (a user
-- class of grace.nn.class and grace.nn's own Linear) replaced after compiling, rawget(_ENV, name); tables nested
-- deeper than the walk follows, and code iterating its globals, run eagerly with the reason. A global read while
-- absent is guarded too (defining it retraces).
-- Each expected value is worked out by hand from ones{3} and the numbers set.
local tap = require "tests.lua.tap"
local grace = require "grace"
local nn = require "grace.nn"

local x = grace.ones{3}
local function first(t) return t:tolist()[1] end
local function traces(f) return f:stats().traces end

-- compiles f, calls it twice (a trace, a hit), changes the state, calls again: want before and after, and a retrace
local function retraces(name, f, want0, change, want1)
  local c = grace.compile(f)
  local a, b = first(c(x)), first(c(x))
  tap.ok(a == want0 and b == want0 and traces(c) == 1, name .. ": compiled once, " .. want0)
  change()
  local got = first(c(x))
  tap.is(got, want1, name .. ": after the change, the new result")
  tap.is(traces(c), 2, name .. ": by a retrace")
  return c
end

-- runs eagerly with a reason containing `why`, and follows the state
local function eager(name, f, change, want1, why)
  local c = grace.compile(f)
  c(x)
  change()
  tap.is(first(c(x)), want1, name .. ": the result follows the state")
  local ir, reason = c:ir()
  tap.ok(ir == nil and type(reason) == "string" and reason:find(why, 1, true) ~= nil,
         name .. ": runs eagerly, saying why (" .. tostring(reason) .. ")")
end

cfg = {scale = 2}
retraces("a field of a global table", function(t) return t * cfg.scale end, 2, function() cfg.scale = 3 end, 3)

local defaults = {scale = 2}
local opts = setmetatable({}, {__index = defaults})
retraces("a default read through an __index table", function(t) return t * opts.scale end, 2,
         function() defaults.scale = 5 end, 5)

local state = {v = 2}
local o2 = setmetatable({}, {__index = function(_, k) return state[k] end})
retraces("a value read through an __index function", function(t) return t * o2.v end, 2,
         function() state.v = 9 end, 9)

local C = nn.class("Scale")
function C:__init() self.k = 2 end
function C:forward(t) return t * self.k end
local m = C()
retraces("a method of a user class replaced", function(t) return m(t) end, 2,
         function() function C:forward(t) return t * 7 end end, 7)

local lin = nn.Linear(3, 3)
local forward = nn.Linear.forward
local c = retraces("grace.nn.Linear's forward replaced", function(t) return lin(t) end,
                   first(lin(x)), function() nn.Linear.forward = function(_, t) return t * 11 end end, 11)
nn.Linear.forward = forward
tap.ok(first(c(x)) == first(lin(x)) and traces(c) == 2, "and put back: the first entry's guards hold again (no trace)")

local Base = {}
Base.__index = Base
function Base.bias() return 1 end
local Derived = setmetatable({}, {__index = Base})
Derived.__index = Derived
local obj = setmetatable({}, Derived)
retraces("a method two metatables up, replaced", function(t) return t + obj.bias() end, 2,
         function() Base.bias = function() return 4 end end, 5)
retraces("a method added to the class, hiding its parent's", function(t) return t + obj.bias() end, 5,
         function() Derived.bias = function() return 9 end end, 10)

retraces("a global absent when traced, then defined", function(t) return t * (absent_global or 1) end, 1,
         function() absent_global = 4 end, 4)

gk = 2
retraces("rawget(_ENV, name)", function(t) return t * (rawget(_ENV, "gk") or 1) end, 2, function() gk = 6 end, 6)
tap.ok(rawget(_ENV, "cfg") == cfg, "rawget(_ENV) outside a trace is untouched")

local deep = {a = {b = {c = {d = {e = {f = {g = {h = {i = {v = 2}}}}}}}}}}
eager("a number nested ten tables deep", function(t) return t * deep.a.b.c.d.e.f.g.h.i.v end,
      function() deep.a.b.c.d.e.f.g.h.i.v = 4 end, 4, "nested more than 8 deep")

eager("next over _ENV", function(t) local n = 0; local k = next(_ENV); if k then n = 1 end; return t + n end,
      function() end, 2, "next on its global table")
eager("pairs over _ENV", function(t) local n = 0; for _ in pairs(_ENV) do n = 1; break end; return t + n end,
      function() end, 2, "pairs on its global table")

-- a shallow structure compiles: the walk's limits are not hit by everyday state
local shallow = {a = {b = {v = 3}}}
retraces("three tables deep", function(t) return t * shallow.a.b.v end, 3, function() shallow.a.b.v = 1 end, 1)

-- effects on tables the function can reach that no guard path shows: a key added, a field written and never read.
-- A compiled call would not repeat them, so the function runs eagerly (and its effects happen on every call).
local log = {}
local flog = grace.compile(function(t) log[#log + 1] = 1; if #log > 2 then return t * 3 end return t * 2 end)
local got = {}
for i = 1, 5 do got[i] = first(flog(grace.tensor({1.0}))) end
tap.ok(table.concat(got, " ") == "2.0 2.0 3.0 3.0 3.0" and #log == 5,
       "an append to an upvalue table: every call appends and reads the new length (" .. table.concat(got, " ")
       .. ", #log " .. #log .. ")")
local sink = {}
local fsink = grace.compile(function(t) sink.h = t * 2; return t + 1 end)
for i = 1, 3 do fsink(grace.tensor({i * 1.0})) end
tap.ok(first(sink.h) == 6 and fsink:stats().eager_calls == 2,
       "a tensor stored into a field the function does not read: stored on every call, the function eager ("
       .. tostring(first(sink.h)) .. ")")
-- the length of a table the function can reach (`#t` on a plain table) is guarded: it grows, the call retraces
local hs = {1, 2}
local flen = grace.compile(function(t) return t * (#hs + 1) end)
local lens = {}
for i = 1, 4 do lens[i] = first(flen(grace.tensor({1.0}))); hs[#hs + 1] = i end
tap.ok(table.concat(lens, " ") == "3.0 4.0 5.0 6.0" and traces(flen) == 4,
       "#t of an upvalue table that grows between calls: each call sees the new length (" .. table.concat(lens, " ")
       .. ", " .. traces(flen) .. " traces)")
-- upvalue floats are guarded bit for bit: a NaN stays itself (no retrace, no eager run), -0.0 is not 0.0
local nlim = 0 / 0
local fnan = grace.compile(function(t) if nlim ~= nlim then return t * 2 end return t * 3 end)
for _ = 1, 3 do fnan(grace.tensor({1.0})) end
tap.ok(traces(fnan) == 1 and fnan:stats().eager_calls == 0 and fnan:stats().hits == 2,
       "a NaN upvalue: one trace, then compiled calls (" .. traces(fnan) .. " traces)")
local zero = 0.0
local fz = grace.compile(function(t) return t * (1 / zero) end)
local pz = first(fz(grace.tensor({1.0})))
zero = -0.0
local nz = first(fz(grace.tensor({1.0})))
tap.ok(pz == math.huge and nz == -math.huge and traces(fz) == 2,
       ("an upvalue 0.0 changed to -0.0 retraces: 1/z gives %s then %s"):format(tostring(pz), tostring(nz)))

tap.done()
