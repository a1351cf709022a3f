-- test_gpu_pred.lua: compiled cond regions on CUDA lowered by predication (grace.regions("pred"): both bodies'
-- kernels in the program's one CUDA graph, each returning at once unless the predicate picks its body), under the
-- graph strategies "copy" and "indirect", against the same Lua functions run eagerly on CPU copies of the inputs.
-- Cases: a cond whose outcome alternates over 10 calls (the predicate computed on the device), a host boolean
-- predicate, a cond nested in a cond (the three outcomes in turn), a cond whose then branch returns its argument as
-- it is (and one whose both do), a branch holding a small matmul run by grace's kernels. From the fourth call on (call
-- 1 runs eagerly, call 2 is the layout's warm run, call 3 captures) each call must replay the one graph and never wait
-- for the device (grace.device_stats().syncs unchanged across the call), and the report must say "predication" with no
-- conditional node. Refused with the reason, running as host branches and equal to eager: random numbers in a branch
-- (generator offsets included) and a cuBLASLt matmul in a branch. Then, nothing forced, the launch measurement tries
-- every lowering: the report's region_times has each one measured and the one kept is the fastest, and grace.explain
-- names predication. Tolerances: float32 rtol 1e-5, atol 1e-5 (pointwise); products over K terms atol 1e-4 * sqrt(K).
-- Without a usable CUDA device it prints a TAP skip plan; GRACE_TEST_DEVICE=cpu runs it CPU against CPU.
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"
local capture = require "tests.lua.capture"

local DEV, to_dev, flat = H.DEV, H.to_dev, H.flat
local ON_GPU = DEV == "cuda"

local function close(got, want, atol)
  if not grace.is_tensor(got) or got.dtype ~= want.dtype or H.shape(got) ~= H.shape(want) then return false end
  local a, b = flat(got:cpu()), flat(want)
  for i = 1, #b do
    local tol = (atol or 1e-5) + 1e-5 * math.abs(b[i])
    if not (math.abs(a[i] - b[i]) <= tol or (a[i] ~= a[i] and b[i] ~= b[i])) then return false end
  end
  return true
end

local function syncs() return grace.device_stats().syncs or 0 end
local function last_report(cf)
  if not ON_GPU then return {} end
  local r = cf:report()
  return r[#r] or {}
end
local function captures(cf) return last_report(cf).captures or 0 end

-- Runs f compiled on device copies of args(k), k = 1..n, against f eagerly on the CPU arguments; counts host
-- synchronisations inside the calls from the fourth on, but for one that captures. Returns the compiled function,
-- the calls that differ and the synchronisations counted.
local function run(f, args, n, atol)
  local cf = grace.compile(f)
  local bad, waited = 0, 0
  for k = 1, n do
    local a = table.pack(args(k))
    local d = {}
    for i = 1, a.n do d[i] = grace.is_tensor(a[i]) and a[i].device == "cpu" and a[i]:dim() > 0 and to_dev(a[i]) or a[i] end
    local want = table.pack(f(table.unpack(a, 1, a.n)))
    local s0, c0 = syncs(), captures(cf)
    local got = table.pack(cf(table.unpack(d, 1, a.n)))
    if k >= 4 and captures(cf) == c0 then waited = waited + syncs() - s0 end
    local good = got.n == want.n
    for j = 1, want.n do good = good and close(got[j], want[j], atol) end
    if not good then bad = bad + 1; tap.diag(("call %d differs from eager"):format(k)) end
  end
  return cf, bad, waited
end

-- A predicated case: equal to eager, predicated in one graph replayed without waits.
local function check(name, mode, f, args, n, atol)
  local cf, bad, waited = run(f, args, n, atol)
  tap.is(bad, 0, ("%s [%s]: %d calls equal the eager CPU calls"):format(name, mode, n))
  if not ON_GPU then return cf end
  local p = last_report(cf)
  tap.ok(p.region_lowering == "predication" and (p.cond_nodes or 0) == 0,
         ("%s [%s]: its regions are predicated, no conditional node (%s, %s nodes; %s)"):format(
           name, mode, tostring(p.region_lowering), tostring(p.cond_nodes), tostring(p.pred_why)))
  tap.ok(p.captures == 1 and (p.replays or 0) >= n - 3,
         ("%s [%s]: captured once, replayed by the calls after (%s captures, %s replays)"):format(
           name, mode, tostring(p.captures), tostring(p.replays)))
  tap.is(waited, 0, ("%s [%s]: no wait for the device inside calls 4 to %d (but the capture)"):format(name, mode, n))
  return cf
end

-- A refused case: equal to eager, run as host branches, the report saying why predication was refused.
local function check_refused(name, mode, f, args, n, atol, why)
  local cf, bad = run(f, args, n, atol)
  tap.is(bad, 0, ("%s [%s]: %d calls equal the eager CPU calls"):format(name, mode, n))
  if not ON_GPU then return end
  local p = last_report(cf)
  tap.ok(p.region_lowering ~= "predication" and tostring(p.pred_why):find(why, 1, true) ~= nil,
         ("%s [%s]: not predicated, and the report says why (%s: %s)"):format(name, mode, tostring(p.region_lowering),
                                                                            tostring(p.pred_why)))
end

local N = 1000
local x0, y0 = grace.randn(N), grace.randn(N)
local function alt(k) return (k % 2 == 0) and x0 or -x0 end

local branch = function(x, y)
  local r = grace.cond(x:sum():gt(0), function(a, b) return (a * b):exp() + a end,
                       function(a, b) return (a - b):tanh() * 2 end, x, y)
  return r * 3 + x
end
local host_pred = function(p, x, y)
  return grace.cond(p, function(a, b) return a * b + 1 end, function(a, b) return a - b * 0.5 end, x, y)
end
local nested = function(x)
  return grace.cond(x:sum():gt(0),
                    function(a) return grace.cond(a:max():gt(3), function(u) return u * 0.5 end,
                                                  function(u) return u:exp() end, a) end,
                    function(a) return a:abs() + 1 end, x)
end
local identity = function(x)
  return grace.cond(x:sum():gt(0), function(a) return a end, function(a) return a * -2 end, x)
end
local both_identity = function(x, y)
  return grace.cond(x:sum():gt(0), function(a, b) return a end, function(a, b) return b end, x, y)
end
local random_branch = function(p, x)
  local r = grace.cond(p, function(a) return a + grace.rand(N, {device = a.device}) end,
                       function(a) return a * grace.randn(N, {device = a.device}) end, x)
  return r - grace.rand(N, {device = x.device})
end
local K = 256
local W1, W2 = grace.randn(K, K) * 0.1, grace.randn(K, K) * 0.1
local dW1, dW2 = to_dev(W1), to_dev(W2)
local xm = grace.randn(64, K)
local function mm_fn(A, B)
  return function(x)
    return grace.cond(x:sum():gt(0), function(a) return a:matmul(A):relu() end, function(a) return a:matmul(B) * 0.5 end, x)
  end
end
-- the matmul on the device's weights, checked against the CPU's
local function check_mm(name, mode, backend, refused)
  grace.matmul_backend(backend)
  local cmf = grace.compile(mm_fn(dW1, dW2))
  local mf_cpu = mm_fn(W1, W2)
  local bad, waited = 0, 0
  for k = 1, 8 do
    local a = (k % 2 == 0) and xm or -xm
    local da = to_dev(a)   -- the copy to the device is not the call's
    local s0, c0 = syncs(), captures(cmf)
    local got = cmf(da)
    if k >= 4 and captures(cmf) == c0 then waited = waited + syncs() - s0 end
    if not close(got, mf_cpu(a), 1e-4 * math.sqrt(K)) then bad = bad + 1 end
  end
  grace.matmul_backend()
  tap.is(bad, 0, ("%s [%s]: 8 calls equal the eager CPU calls"):format(name, mode))
  if not ON_GPU then return end
  local p = last_report(cmf)
  if refused then
    tap.ok(p.region_lowering ~= "predication" and tostring(p.pred_why):find("cuBLASLt", 1, true) ~= nil,
           ("%s [%s]: not predicated, the report says why (%s: %s)"):format(name, mode, tostring(p.region_lowering),
                                                                         tostring(p.pred_why)))
  else
    tap.ok(p.region_lowering == "predication" and waited == 0,
           ("%s [%s]: predicated, no synchronisation (%s, %d)"):format(name, mode, tostring(p.region_lowering), waited))
  end
end

grace.regions("pred")
for _, mode in ipairs(ON_GPU and {"copy", "indirect"} or {"auto"}) do
  grace.graphs(mode)
  check("cond alternating, predicate on the device", mode, branch, function(k) return alt(k), y0 end, 10)
  check("cond alternating, host boolean predicate", mode, host_pred,
        function(k) return grace.tensor(k % 2 == 0), x0, y0 end, 10)
  check("cond nested in a cond", mode, nested, function(k) return ({x0:abs() * 2, -x0:abs(), x0:abs() * 0.001})[k % 3 + 1] end, 9)
  check("cond whose then branch returns its argument", mode, identity, function(k) return alt(k) end, 10)
  check("cond whose branches return their arguments", mode, both_identity, function(k) return alt(k), y0 end, 10)
  check_mm("grace's matmul in a branch", mode, "grace", false)
  check_mm("cuBLASLt matmul in a branch", mode, "cublaslt", true)
  -- random numbers in branches: drawn as eagerly, so not predicated (the generator would advance by both bodies)
  local crf = grace.compile(random_branch)
  local rbad = 0
  for k = 1, 6 do
    local pv = k % 2 == 0
    grace.manual_seed(900 + k)
    local want = random_branch(grace.tensor(pv), x0)
    local _, ow = grace.get_rng_state()
    grace.manual_seed(900 + k)
    local got = crf(grace.tensor(pv), to_dev(x0))
    local _, og = grace.get_rng_state()
    if not (close(got, want) and og == ow) then rbad = rbad + 1 end
  end
  tap.is(rbad, 0, ("random draws in branches [%s]: as the eager CPU calls, generator offsets included"):format(mode))
  if ON_GPU then
    local p = last_report(crf)
    tap.ok(p.region_lowering == "host branch" and tostring(p.pred_why):find("random", 1, true) ~= nil,
           ("random draws in branches [%s]: host branch, and why (%s)"):format(mode, tostring(p.pred_why)))
  end
end

-- nothing forced: every lowering measured, the fastest kept (or a simpler one within 3% of it)
grace.regions()
grace.graphs()
local cf, bad = run(branch, function(k) return alt(k), y0 end, 100)   -- 7 candidates: 1 + 7 * 9 timed + 7 untimed
tap.is(bad, 0, "measured: 100 calls equal the eager CPU calls")
if ON_GPU then
  local p = last_report(cf)
  local t = p.region_times or {}
  local kept = ({["host branch"] = "host", ["conditional nodes"] = "nodes", predication = "pred"})[p.region_lowering]
  local fastest = kept ~= nil and t[kept] ~= nil
  for _, v in pairs(t) do fastest = fastest and t[kept] <= v * 1.03 end   -- a simpler one within 3% wins the tie
  tap.ok(t.host and t.pred and (t.nodes or p.region_why) and fastest,
         ("measured: each lowering measured, the fastest kept (%s; host %s, nodes %s, pred %s us)"):format(
           tostring(p.region_lowering), tostring(t.host), tostring(t.nodes), tostring(t.pred)))
  local rep = capture.explain(cf, to_dev(x0), to_dev(y0))
  tap.ok(tostring(rep):find("predication", 1, true) ~= nil, "explain: names predication")
end
tap.done()
