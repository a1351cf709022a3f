-- test_partitions.lua: a compiled function with graph breaks runs each partition between breaks as a program of its
-- own (vm/vm_part.c), on the CPU: counted through f:stats() (partitions made, partition programs run), listed by
-- f:ir() and grace.explain; results checked against plain Lua arithmetic over the same numbers, on both outcomes of
-- the break; in-place writes inside a partition leave the tensor and its version counter as eager would; a view of
-- the argument read at the break; an error inside a partition's program.
local tap = require "tests.lua.tap"
local grace = require "grace"

-- y = relu(2x + 1); if sum(y) > 10 then 3y else y - 1 (the break reads the sum)
local function f(x)
  local y = (x * 2 + 1):relu()
  if y:sum():item() > 10 then return y * 3 end
  return y - 1
end

-- the same in plain Lua over a list of numbers
local function ref(xs)
  local y, s = {}, 0
  for i, v in ipairs(xs) do y[i] = math.max(2 * v + 1, 0) s = s + y[i] end
  local out = {}
  for i, v in ipairs(y) do out[i] = s > 10 and 3 * v or v - 1 end
  return out
end

local function same_list(t, want)
  local got = t:tolist()
  if #got ~= #want then return false end
  for i = 1, #want do if math.abs(got[i] - want[i]) > 1e-5 then return false end end
  return true
end

local cf = grace.compile(f, {auto_regions = false})   -- the paths stay replayed: their partitions are tested here
local inputs = {{1, 2, 3, 4}, {-3, 0.5, -1, 0}, {4, 4, -4, 1}, {0, 0, 0, 0.25}, {5, -2, 1, 1}, {-1, -1, -1, -1}}
local bad = 0
for round = 1, 3 do
  for _, xs in ipairs(inputs) do
    if not same_list(cf(grace.tensor(xs):float()), ref(xs)) then bad = bad + 1 end
  end
end
tap.is(bad, 0, "18 calls over both outcomes of the break: every result equals plain Lua arithmetic")
local s = cf:stats()
tap.is(s.partitions, 3, "three partitions became programs: the one before the break (shared by both paths) and one after it per path")
tap.is(s.traces, 2, "two paths were recorded, one per outcome")
local runs0 = s.partition_runs
cf(grace.tensor({1, 2, 3, 4}):float())
tap.is(cf:stats().partition_runs - runs0, 2, "a replayed call runs two partition programs, none op by op")
local text = cf:ir()
tap.ok(text:find("-- partition 1 of path 1", 1, true) and text:find("-- partition 2 of path 2", 1, true),
       "f:ir() lists the partitions' programs")
tap.ok(text:find("_part1 {", 1, true) ~= nil, "each partition is a program with a name of its own")

local rep = grace.explain(f, grace.tensor({1, 2, 3, 4}):float())
tap.ok(rep:find("partition 1: 4 ops, ends at the break at", 1, true) ~= nil, "explain: partition 1 and the break it ends at")
tap.ok(rep:find("partition 2: 1 op, ends the call", 1, true) ~= nil, "explain: partition 2 ends the call")

-- in place: a write into the argument before the break, and another after it
local function g(x)
  x:add_(1)
  local big = x:max():item() > 100
  x:mul_(2)
  if big then return x * 0 end
  return x / 4
end
local cg = grace.compile(g)
local vbad, rbad = 0, 0
for i = 1, 6 do
  local xs = {i, -i, 2 * i}
  local xc = grace.tensor(xs):float()
  local v0 = xc:version()
  local r = cg(xc)
  -- by hand: x holds 2(x + 1), the result is 2(x + 1) / 4
  local want_x, want_r = {}, {}
  for k, v in ipairs(xs) do want_x[k] = 2 * (v + 1) want_r[k] = 2 * (v + 1) / 4 end
  if not (same_list(r, want_r) and same_list(xc, want_x)) then rbad = rbad + 1 end
  if xc:version() - v0 ~= 2 then vbad = vbad + 1 end
end
tap.is(rbad, 0, "writes into the argument around a break: the result and the argument equal arithmetic by hand")
tap.is(vbad, 0, "writes into the argument around a break: two in-place ops advance the version by two, as eagerly")
tap.ok(cg:stats().partitions == 2 and cg:stats().partition_runs >= 10, "the writing partitions are programs too")

-- a view of the argument made in a partition is made outside its program (a view computes nothing)
local function h(x)
  local row = x:narrow(1, 2, 1)
  if row:sum():item() > 4 then return row * 2 end
  return row * 3
end
local ch = grace.compile(h, {auto_regions = false})
local hbad = 0
for _, i in ipairs({1, 2, 1, 2, 1, 2}) do
  local x = grace.tensor({{1, 2}, {i, 3}}):float()
  local k = i + 3 > 4 and 2 or 3
  if not same_list(ch(x):reshape(2), {k * i, k * 3}) then hbad = hbad + 1 end
end
tap.is(hbad, 0, "a view of the argument read at the break: results equal arithmetic by hand")
tap.is(ch:stats().partitions, 3, "and the partitions are programs (the one before the break shared by both paths)")

-- an error inside a partition's program: raised with the op's name, and the next call runs
local function pick(x, idx)
  local s = x:sum():item()
  return x:index_select(1, idx) * (s > 0 and 1 or -1)
end
local cp = grace.compile(pick)
local x4 = grace.tensor({1, 2, 3, 4}):float()
for _ = 1, 3 do cp(x4, grace.tensor({1, 3})) end
local ok_err, err = pcall(cp, x4, grace.tensor({1, 9}))
tap.ok(not ok_err and tostring(err):find("index_select", 1, true) ~= nil,
       "an index out of range inside a partition's program is an error naming the op")
tap.ok(same_list(cp(x4, grace.tensor({2, 4})), {2, 4}), "and the next call runs")
tap.ok(cp:stats().partitions == 2, "the partitions stayed programs")

tap.done()
