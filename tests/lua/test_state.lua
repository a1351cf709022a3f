-- test_state.lua: compiled programs that write into their arguments and captured tensors, on the CPU: a decode step
-- writing its new key into a preallocated cache with index_copy_ at a position given as a 0-d tensor, an SGD step
-- updating a weight in place (sub_, and mul_/add_ on a captured running statistic), and a copy_ into an argument.
-- Each runs as one compiled program (no eager call, one trace), the written tensors hold what arithmetic by hand
-- says, and their version counters advance as the eager ops advance them. Values holding the old contents read
-- after the write (or by ops the write does not depend on) still see the old contents.
local tap = require "tests.lua.tap"
local grace = require "grace"

local function same_list(got, want)
  if #got ~= #want then return false end
  for i = 1, #want do
    if type(want[i]) == "table" then
      if not same_list(got[i], want[i]) then return false end
    elseif math.abs(got[i] - want[i]) > 1e-5 then return false end
  end
  return true
end

-- decode step: cache[pos] = kv; returns the sum of the rows written so far
local step = grace.compile(function(cache, pos, kv)
  cache:index_copy_(1, pos, kv)
  return cache:sum(1)
end)
local cache = grace.zeros(5, 3)
local want = {}
for r = 1, 5 do want[r] = {0, 0, 0} end
local bad, vbad = 0, 0
for i = 1, 5 do
  local v0 = cache:version()
  local kv = grace.tensor({{i, 2 * i, -i}}):float()
  local s = step(cache, grace.tensor(i), kv)   -- the position: a 0-d tensor
  want[i] = {i, 2 * i, -i}
  local sum = {0, 0, 0}
  for r = 1, 5 do for c = 1, 3 do sum[c] = sum[c] + want[r][c] end end
  if not (same_list(cache:tolist(), want) and same_list(s:tolist(), sum)) then bad = bad + 1 end
  if cache:version() - v0 ~= 1 then vbad = vbad + 1 end
end
tap.is(bad, 0, "kv cache: each step writes its row at the position given as a 0-d tensor, and the sum is right")
tap.is(vbad, 0, "kv cache: one index_copy_ advances the cache's version by one, as eagerly")
tap.ok(step:stats().eager_calls == 0 and step:stats().traces == 1, "kv cache: one trace, every step compiled")

-- SGD step: w:sub_(lr * g); a captured running statistic: stat:mul_(0.9):add_(0.1 * mean(g))
local stat = grace.zeros(3)
local sgd = grace.compile(function(w, g, lr)
  w:sub_(g * lr)
  stat:mul_(0.9)
  stat:add_(g:mean(1) * 0.1)
  return w:sum()
end)
local w = grace.tensor({{1, 2, 3}, {4, 5, 6}}):float()
local g = grace.tensor({{1, 1, 1}, {2, 2, 2}}):float()
local wl = {{1, 2, 3}, {4, 5, 6}}
local sl = {0, 0, 0}
bad, vbad = 0, 0
for _ = 1, 6 do
  local vw, vs = w:version(), stat:version()
  local total = sgd(w, g, 0.5)
  local t = 0
  for r = 1, 2 do for c = 1, 3 do wl[r][c] = wl[r][c] - 0.5 * (r == 1 and 1 or 2) t = t + wl[r][c] end end
  for c = 1, 3 do sl[c] = 0.9 * sl[c] + 0.1 * 1.5 end
  if not (same_list(w:tolist(), wl) and same_list(stat:tolist(), sl) and math.abs(total:item() - t) < 1e-4) then bad = bad + 1 end
  if w:version() - vw ~= 1 or stat:version() - vs ~= 2 then vbad = vbad + 1 end
end
tap.is(bad, 0, "sgd: the weight and the captured statistic follow arithmetic by hand over 6 steps")
tap.is(vbad, 0, "sgd: sub_ advances the weight's version by one, mul_ and add_ the statistic's by two, as eagerly")
tap.ok(sgd:stats().eager_calls == 0 and sgd:stats().traces == 1 and sgd:stats().recaptures <= 1,
       "sgd: one trace; the statistic's new versions are the program's own (recaptured at most once, after the trace)")

-- a value holding the argument's old contents is read after the write: the write goes through a copy, and a view
-- of the argument made before the write reads the written contents, as eagerly
local keep = grace.compile(function(x)
  local old = x * 1
  local before = x:narrow(1, 1, 1)
  x:copy_(x + 10)
  return old + before:sum()
end)
local x = grace.tensor({1, 2, 3}):float()
local r = keep(x)
tap.ok(same_list(x:tolist(), {11, 12, 13}) and same_list(r:tolist(), {12, 13, 14}),
       "a view of the argument taken before the write and read after it sees the eager value (first call)")
x = grace.tensor({1, 2, 3}):float()
r = keep(x)
tap.ok(same_list(x:tolist(), {11, 12, 13}) and same_list(r:tolist(), {12, 13, 14}),
       "and the compiled call gives the same")

-- a value computed from the argument before the write, by an op the write does not depend on: it must see the old
-- contents whatever order the program's kernels run in
local before = grace.compile(function(x, z)
  local y = x + 1
  x:copy_(z)
  return y * 2
end)
local rbad = 0
for _ = 1, 3 do
  local x, z = grace.tensor({1, 2, 3}):float(), grace.tensor({10, 20, 30}):float()
  if not (same_list(before(x, z):tolist(), {4, 6, 8}) and same_list(x:tolist(), {10, 20, 30})) then rbad = rbad + 1 end
end
tap.is(rbad, 0, "a value read before the write by an op the write does not depend on keeps the old contents")

tap.done()
