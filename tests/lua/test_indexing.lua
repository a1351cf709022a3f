-- test_indexing.lua: assignment through x[{...}] (views written in place, version counters, views of the
-- result), and compiled functions that index: integer and range keys become views inside one traced program
-- (reads and writes), index tensors ops of it, masks with a number masked_fill; masked_select and nonzero are
-- graph breaks that run the function eagerly with the reason. Values are worked out by hand.
local tap = require "tests.lua.tap"

local function list(t) return table.concat(t:reshape(-1):tolist(), ",") end

-- assignment
local x = grace.arange(12):reshape(3, 4)
local v0 = x:version()
x[{2, {2, 3}}] = 0
tap.is(list(x), "0,1,2,3,4,0,0,7,8,9,10,11", "x[{2, {2, 3}}] = 0 writes row 2, columns 2..3")
tap.ok(x:version() > v0, "an assignment bumps the version counter")
x[{{}, -1}] = grace.tensor({100, 200, 300})
tap.is(list(x), "0,1,2,100,4,0,0,200,8,9,10,300", "x[{{}, -1}] = t writes the last column")
x[x:gt(99)] = -1
tap.is(list(x), "0,1,2,-1,4,0,0,-1,8,9,10,-1", "x[mask] = -1")
x[{3, grace.tensor({true, false, true, false})}] = grace.tensor({7, 9})
tap.is(list(x), "0,1,2,-1,4,0,0,-1,7,9,9,-1", "x[{3, mask}] = values, in order")
local r = x[{{1, 2}}]
r[{1, 1}] = 42
tap.is(x[{1, 1}]:item(), 42, "a range read is a view: writing it writes x")
tap.ok(not pcall(function() x[{4}] = 0 end), "x[{4}] = 0 on 3 rows raises")
tap.ok(select(2, pcall(function() return x[{1, {0, 2}}] end)):find("1-based", 1, true) or
       select(2, pcall(function() return x[{1, {0, 2}}] end)):find("dim 2", 1, true), "a range from 0 raises naming the dim")

-- compiled: integers and ranges are views in one program
local f = grace.compile(function(a) return a[{{2, 3}, -1}] * 2 + a[{1, {1, 2}}]:sum() end)
local a = grace.arange(12, {dtype = "float32"}):reshape(3, 4)
f(a)
local out = f(a)
tap.is(list(out), "15.0,23.0", "compiled range and integer reads give the eager values")
tap.is(f:stats().traces, 1, "traced once")
tap.is(f:stats().hits, 1, "the second call runs the compiled program")
tap.ok(not f:ir():find("break", 1, true), "no graph break in the program")
tap.ok(f:ir():find("narrow", 1, true) and f:ir():find("select", 1, true), "the program reads through narrow and select")

-- compiled: writes through a range key on an argument
local g = grace.compile(function(b) b[{{1, 2}, 2}] = 5; return b:sum() end)
local b1, b2 = grace.zeros(3, 3), grace.zeros(3, 3)
g(b1)
local s2 = g(b2)
tap.is(s2:item(), 10.0, "compiled x[{...}] = 5 gives the eager sum")
tap.is(list(b2), "0.0,5.0,0.0,0.0,5.0,0.0,0.0,0.0,0.0", "the argument is written back")
tap.is(g:stats().traces, 1, "a write through a range key traces once")
tap.is(g:stats().hits, 1, "and runs compiled")

-- compiled: an index tensor is an op of the program; a mask with a number is masked_fill
local h = grace.compile(function(c, i) c[c:lt(0)] = 0; return c[{{}, i}] end)
local c1 = grace.tensor({{-1, 2, 3}, {4, -5, 6}})
h(c1:clone(), grace.tensor({3, 1}))
local hr = h(c1:clone(), grace.tensor({3, 1}))
tap.is(list(hr), "3,0,6,4", "compiled mask fill and index tensor read")
tap.is(h:stats().traces, 1, "traced once")
tap.is(h:stats().hits, 1, "runs compiled")
tap.ok(h:ir():find("index_select", 1, true) and h:ir():find("masked_fill", 1, true), "index_select and masked_fill in the program")

-- compiled: masked_select is a graph break with a reason; the results stay right
local k = grace.compile(function(d) return d[d:gt(2)] end)
local d = grace.tensor({1, 5, 2, 7})
local r1, r2 = k(d), k(d)
tap.is(list(r2), "5,7", "masked_select in a compiled function gives the eager values")
tap.is(list(r1), "5,7", "first call too")
tap.ok(k:stats().eager_calls >= 1, "masked_select makes the function run eagerly")
local _, why = k:ir()
tap.ok(tostring(why):find("masked_select", 1, true) ~= nil, "the reason names masked_select: " .. tostring(why))

-- views of a tensor with an empty dim: any position along the other dims is a valid empty view (PyTorch's
-- x[2] of a [2, 0] tensor), and what is made from it is empty too (a growing cache starts as [layers, ..., 0, d])
local e, one = grace.zeros({3, 2, 0, 4}, {dtype = "int64"}), grace.ones({2, 1, 4}, {dtype = "int64"})
tap.is(tostring(e[3].shape), "{2, 0, 4}", "select past the start of an empty tensor's storage")
tap.is(tostring(e:narrow(1, 2, 2).shape), "{2, 2, 0, 4}", "narrow of it")
tap.is(list(grace.cat({e[2], one}, 2)), "1,1,1,1,1,1,1,1", "cat of an empty view and a tensor")
local ce = grace.compile(function(c, k) return grace.cat({c[3], k}, 2) * 2 end)
tap.is(list(ce(e, one)), "2,2,2,2,2,2,2,2", "the same compiled")

tap.done()
