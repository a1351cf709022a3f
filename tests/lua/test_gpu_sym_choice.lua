-- test_gpu_sym_choice.lua: the launch decision of a compiled function whose sizes grow each call (a decoder step over
-- a cache that grows: symbolic sizes on the device, a copy of the program per size). The first size of the symbolic
-- program measures (or takes the launch cache's decision); copies made for later sizes start decided with that
-- strategy, measure nothing, and say so in f:report() (inherited, decided_by); every result equals the same Lua
-- function run eagerly on CPU copies of the inputs (float32, rtol 1e-4, atol 1e-4 * sqrt(K)). Without a usable CUDA
-- device it prints a TAP skip plan; GRACE_TEST_DEVICE=cpu runs the value checks on the CPU (a check of the harness).
local tap = require "tests.lua.tap"
local grace = require "grace"

local H = require "tests.lua.gpu_harness"
local to_dev, absmax = H.to_dev, H.absmax

-- grace's own matmul kernels at every size: with cuBLASLt at some sizes only, graph+node updates (kept for a size
-- that calls it) could not run at the others, which then measure on their own
if H.DEV ~= "cpu" then grace.matmul_backend("grace") end

local D = 32
local W = grace.randn({D, D}) / math.sqrt(D)
local dW = to_dev(W)
local function step_with(w)
  return function(K, x)
    K = grace.cat({K, x}, 1)
    local att = (x:matmul(w):matmul(K:t()) / math.sqrt(D)):softmax(-1)
    return att:matmul(K)
  end
end
local f, ref = grace.compile(step_with(dW)), step_with(W)

local bad, worst = 0, 0
local function call_at(n, calls)
  local K, x = grace.randn({n, D}), grace.randn({1, D})
  local dK, dx = to_dev(K), to_dev(x)
  local want = ref(K, x)
  for _ = 1, calls do
    local got = f(dK, dx)
    local diff = (got:cpu():double() - want:double()):abs()
    local bound = want:double():abs() * 1e-4 + 1e-4 * math.sqrt(n + 1) * math.max(absmax(want), 1)
    if (diff - bound):max():item() > 0 then bad = bad + 1 end
    worst = math.max(worst, diff:max():item())
  end
end

-- The report entry of the copy made for the newest sizes (nil on the CPU: no copies there).
local function sized_entries()
  local r = {}
  for _, p in ipairs(f:report()) do if p.sizes then r[#r + 1] = p end end
  return r
end

call_at(2, 1)    -- the first trace, at fixed sizes
call_at(3, 45)   -- the symbolic program's first copy: enough calls to measure and decide
local first
if H.DEV ~= "cpu" then
  first = sized_entries()[1]
  tap.ok(first and first.decided, ("the first size's copy decided (%s, %s measuring calls)"):format(
    first and first.strategy or "none", first and first.measure_calls or "-"))
end
for n = 4, 40 do call_at(n, 3) end
tap.is(bad, 0, ("every call at sizes 2 to 40 equals eager (largest difference %g)"):format(worst))
tap.ok(f:stats().traces <= 2, ("at most 2 traces (%d)"):format(f:stats().traces))
if H.DEV ~= "cpu" and first then
  local later, inherited = sized_entries(), 0
  for _, p in ipairs(later) do
    if p.inherited and p.decided and p.measure_calls == 0 and p.strategy == first.strategy and
       (p.decided_by == first.sizes or p.decided_by == "the launch cache") then
      inherited = inherited + 1
    else
      tap.diag(("copy at %s: inherited %s, by %s, %s, %d measuring calls"):format(p.sizes, tostring(p.inherited),
        tostring(p.decided_by), p.strategy, p.measure_calls))
    end
  end
  tap.ok(#later >= 1 and #later <= 4, ("copies kept: %d (at most 4)"):format(#later))
  tap.is(inherited, #later, ("each later size's copy started decided with %s from %s, nothing measured"):format(
    first.strategy, first.sizes))
  local text, print0 = "", print
  print = function(s) text = text .. tostring(s) end   -- grace.report prints through the global print
  grace.report(f)
  print = print0
  tap.ok(text:find("inherited from", 1, true) ~= nil, "the printed report says the decision was inherited")
end
if H.DEV ~= "cpu" then grace.matmul_backend() end

tap.done()
