-- test_partitions.lua: a compiled function with graph breaks runs each partition between breaks as a program of its
-- own (vm/vm_part.c), on the CPU: counted through f:stats() (partitions made, partition programs run), listed by
-- f:ir() and grace.explain; results checked against plain Lua arithmetic over the same numbers, on both outcomes of
-- the break; in-place writes inside a partition leave the tensor and its version counter as eager would; a view of
-- the argument read at the break; an error inside a partition's program; what a partition hands back (only what is
-- read after it: the early-exit MLP's first partition hands back h and the value of its check) and the values it
-- keeps inside, computed again when Lua asks for them all the same (stored in a table and read after the call, used
-- by a path recorded later), or an error when the tensors they came from were written since (also when such a value
-- is the next call's argument); a value and its view stay one storage whether kept inside or handed back.
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

-- ---- what a partition hands back ----
-- the early-exit MLP: 4 layers, a check on max |h| read on the host, 4 more; checked against the same Lua function
-- run eagerly (grace computes either side with the same kernels: the comparison is exact)
grace.manual_seed(7)
local D = 8
local W, B = {}, {}
for i = 1, 8 do W[i] = grace.randn({D, D}) * 0.4 B[i] = grace.randn({D}) * 0.1 end
local function layer(i, hh) return (hh:matmul(W[i]) + B[i]):gelu() end
local box = {}
local function mlp(x)
  local hh = x
  for i = 1, 4 do hh = layer(i, hh) end
  box.mid = (hh + 1):relu()   -- kept by Lua past the call: no op of the function reads it
  if hh:abs():max():item() > 1e3 then return hh end
  for i = 5, 8 do hh = layer(i, hh) end
  return hh
end
local function maxdiff(a, b) return (a - b):abs():max():item() end
local cm = grace.compile(mlp, {auto_regions = false})
local xs, xb = grace.randn({2, D}), grace.randn({2, D}) * 1e6
local rbad, mbad = 0, 0
for _ = 1, 3 do
  for _, x in ipairs({xs, xb}) do
    local got = cm(x)
    local mid = box.mid
    local want = mlp(x)
    if maxdiff(got, want) ~= 0 then rbad = rbad + 1 end
    if maxdiff(mid, box.mid) ~= 0 then mbad = mbad + 1 end
  end
end
tap.is(rbad, 0, "early-exit MLP: results equal eager on both outcomes (exit taken and not)")
tap.is(mbad, 0, "a value kept inside a partition, stored in a table by Lua and read after the call, equals eager")
local ms = cm:stats()
local p1 = cm:ir():match("%-%- partition 1 of path 1 [^\n]*")
tap.ok(p1 and p1:find("; 2 outputs)", 1, true), "the first partition hands back 2 outputs: h and the value checked (" ..
       tostring(p1) .. ")")
tap.ok(ms.partition_internal >= 4 * 3, "every layer's matmul, add and gelu but the last stay inside the programs (" ..
       ms.partition_internal .. " kept inside, " .. ms.partition_outputs .. " handed back)")
tap.ok(ms.partitions >= 2 and ms.partition_runs >= 6, "the partitions ran as programs")
local ex = grace.explain(cm, xs)
tap.ok(ex:find("partition 1 of path 1: 2 outputs handed back, ", 1, true) ~= nil,
       "explain of the compiled function lists each partition's outputs and what it keeps inside")
cm(xs)
local kept = box.mid
xs:add_(1)
local okr, err = pcall(function() return kept:sum():item() end)
tap.ok(not okr and tostring(err):find("written in place", 1, true) ~= nil,
       "a value kept inside, asked for after the input it came from was written in place: an error saying so")
local okc, errc = pcall(cm, kept)
tap.ok(not okc and tostring(errc):find("written in place", 1, true) ~= nil,
       "such a value passed to the next call: the call fails with the same reason (" .. tostring(errc) .. ")")
xs:sub_(1)
tap.is(maxdiff(cm(xs), mlp(xs)), 0, "and the call after it equals eager")

-- an intermediate the function returns stays an output
local function mlp2(x)
  local hh = x
  for i = 1, 4 do hh = layer(i, hh) end
  local mid = hh * 2
  if hh:abs():max():item() > 1e3 then return hh, mid end
  for i = 5, 8 do hh = layer(i, hh) end
  return hh, mid
end
local cm2 = grace.compile(mlp2, {auto_regions = false})
local bad2 = 0
for _ = 1, 3 do
  local a, m = cm2(xs)
  local wa, wm = mlp2(xs)
  if maxdiff(a, wa) ~= 0 or maxdiff(m, wm) ~= 0 then bad2 = bad2 + 1 end
end
tap.is(bad2, 0, "a returned intermediate: both results equal eager")
p1 = cm2:ir():match("%-%- partition 1 of path 1 [^\n]*")
tap.ok(p1 and p1:find("; 3 outputs)", 1, true), "the first partition hands back h, the value checked and the returned "
       .. "intermediate (" .. tostring(p1) .. ")")

-- a path recorded later reads a value the shared first partition kept inside: that call computes it again, and the
-- partition is built again handing it back
local function mlp3(x)
  local hh = x
  for i = 1, 2 do hh = layer(i, hh) end
  local mid = hh * 3
  hh = layer(3, hh)
  if hh:abs():max():item() > 1e3 then return mid + 1 end
  return layer(4, hh)
end
local cm3 = grace.compile(mlp3, {auto_regions = false})
local function first_outputs(cf)
  local n = -1
  for line in cf:ir():gmatch("%-%- partition 1 of path 1 [^\n]*") do n = tonumber(line:match("; (%d+) output")) end
  return n
end
local bad3, before = 0, nil
for k, x in ipairs({xs, xs, xs, xb, xb, xs, xb}) do
  if maxdiff(cm3(x), mlp3(x)) ~= 0 then bad3 = bad3 + 1 end
  if k == 3 then before = first_outputs(cm3) end
end
tap.is(bad3, 0, "a later path reading a value kept inside: results equal eager on every call")
tap.is(before, 2, "before that path, the first partition hands back h and the value checked")
tap.ok(first_outputs(cm3) == 3 and cm3:stats().traces == 2,
       "after it, the shared first partition is built again and hands back the value that path reads too")

-- values sharing storage (a value and its view) stay one tensor's storage, whether the partition keeps both inside
-- (computed again together) or hands one back (the other with it): an in-place write after the call through one
-- shows in the other, as eagerly
local vbox = {}
local function view_inside(x)
  local hh = layer(1, x)
  vbox.h, vbox.v = hh, hh:view({2 * D})
  local y = hh * 2
  if y:abs():max():item() > 1e3 then return y end
  return y + 1
end
local function view_kept(x)
  local hh = layer(1, x)
  vbox.h, vbox.v = hh, hh:view({2 * D})
  if hh:abs():max():item() > 1e3 then return hh end
  return hh + 1
end
for _, case in ipairs({{"both inside", view_inside}, {"the base handed back", view_kept}}) do
  local name, fv = case[1], case[2]
  local cv = grace.compile(fv, {auto_regions = false})
  local vbad = 0
  for _ = 1, 4 do
    cv(xs)
    vbox.h:add_(1)
    local got = vbox.v:tolist()
    fv(xs)
    vbox.h:add_(1)
    local want = vbox.v:tolist()
    for j = 1, 2 * D do if got[j] ~= want[j] then vbad = vbad + 1 end end
  end
  tap.is(vbad, 0, "a value and its view, " .. name .. ": a write to one after the call shows in the other")
  tap.ok(cv:stats().partitions >= 1 and cv:stats().partition_runs >= 3, name .. ": the partitions ran as programs")
end

tap.done()
