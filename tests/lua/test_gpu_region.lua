-- test_gpu_region.lua: grace.cond and grace.while_loop over CUDA tensors, eagerly and compiled (the host-branch
-- lowering: the predicate is read on the host, then the chosen sub-program runs on the device, its kernels fused on
-- their own), against the same Lua functions run eagerly on CPU copies of the inputs. Predicates on the device and
-- on the host, both outcomes, loops of 0, 1 and many iterations, a cond nested in a while, a fused chain around a
-- region, and max_iters. Without a usable CUDA device it prints a TAP skip plan; GRACE_TEST_DEVICE=cpu runs it CPU
-- against CPU (a check of this file). Tolerances: float32 rtol 1e-5, atol 1e-6 (tests/lua/test_gpu_ops.lua's
-- pointwise ones); integers exact.
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"

local DEV, to_dev, flat = H.DEV, H.to_dev, H.flat

local function close(got, want)
  if got.dtype ~= want.dtype or H.shape(got) ~= H.shape(want) then return false end
  local a, b, t = flat(got:cpu()), flat(want), H.TOL[want.dtype]
  for i = 1, #b do
    local tol = t and (t.atol + t.rtol * math.abs(b[i])) or 0
    if not (math.abs(a[i] - b[i]) <= tol or (a[i] ~= a[i] and b[i] ~= b[i])) then return false end
  end
  return true
end

-- Calls f eagerly on CPU inputs and compiled on device copies, for each input list; compares every result.
local function compare(name, f, inputs)
  local cf = grace.compile(f)
  for k, args in ipairs(inputs) do
    local dargs = {}
    for i, a in ipairs(args) do dargs[i] = grace.is_tensor(a) and a.device == "cpu" and a:dim() > 0 and to_dev(a) or a end
    local want = table.pack(f(table.unpack(args)))
    local got = table.pack(cf(table.unpack(dargs)))
    local good = got.n == want.n
    for j = 1, want.n do good = good and close(got[j], want[j]) end
    tap.ok(good, ("%s, call %d"):format(name, k))
  end
  return cf
end

local function rnd(n) return grace.randn(n) end

local f = function(p, x, y)
  local r = grace.cond(p, function(a, b) return (a * b):exp() + a end, function(a, b) return (a - b):tanh() * 2 end, x, y)
  return r * 3 + x
end
local x, y = rnd(1000), rnd(1000)
local cf = compare("cond, predicate on the host", f, {{grace.tensor(true), x, y}, {grace.tensor(false), x, y}})
tap.is(cf:stats().traces, 1, "one trace for both outcomes")
local dp = function(x, y) return f(x:sum():gt(0), x, y) end   -- the predicate computed on the device
compare("cond, predicate computed on the device", dp, {{x, y}, {-x, y}, {x:abs(), y}})

-- random numbers inside the branches: the device draws what the eager CPU call draws for the same seed, and the
-- generator goes on from the branch taken
local rf = function(p, x)
  local r = grace.cond(p, function(a) return a + grace.rand(1000, {device = a.device}) end,
                          function(a) return a * grace.randn(1000, {device = a.device}) end, x)
  return r - grace.rand(1000, {device = x.device})
end
local crf = grace.compile(rf)
for k, pv in ipairs({true, false, false, true}) do
  grace.manual_seed(300 + k)
  local want = rf(grace.tensor(pv), x)
  local _, ow = grace.get_rng_state()
  grace.manual_seed(300 + k)
  local got = crf(grace.tensor(pv), to_dev(x))
  local _, og = grace.get_rng_state()
  tap.ok(close(got, want) and og == ow, ("random draws in a %s branch, call %d: as the eager CPU call (offset %d vs %d)"):format(
    pv and "then" or "else", k, og, ow))
end
tap.is(crf:stats().traces, 1, "random draws in branches: one trace")

local loop = function(x, limit)
  return grace.while_loop(function(n, v) return v:abs():sum():lt(limit) end,
                          function(n, v) return n + 1, grace.cond(n:remainder(2):eq(0), function(u) return u * 2 end,
                                                                   function(u) return u * 1.5 + 0.25 end, v) end,
                          {grace.tensor(0):to(x.device), x})
end
local lf = function(x) local n, v = loop(x, 4000) return n, v end
compare("while with a cond inside (0, few, many iterations)", lf, {{rnd(1000) * 10}, {rnd(1000)}, {rnd(1000) * 0.001}})
local bounded = grace.compile(function(x) return grace.while_loop(function(v) return v:sum():lt(1e6) end,
                                                                  function(v) return v * 2 end, {x}, {max_iters = 3}) end)
tap.raises(function() bounded(to_dev(grace.ones(8))) end, {"max_iters=3"}, "max_iters on the device")
if DEV == "cuda" then
  tap.ok(cf(grace.tensor(true), x:cuda(), y:cuda()).device == "cuda", "results stay on the device")
end
tap.done()
