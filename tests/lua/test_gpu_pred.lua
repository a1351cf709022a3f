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

local DEV, to_dev = H.DEV, H.to_dev
local ON_GPU = DEV == "cuda"
local last_report = H.last_report

-- A predicated case: equal to eager, predicated in one graph replayed without waits.
local function check(name, mode, f, args, n, atol)
  local cf, bad, waited = H.run_vs_eager("", f, args, n, atol)
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

local P = H.region_progs(1000, 256)
local x0, y0, alt = P.x0, P.y0, P.alt
local identity = function(x)
  return grace.cond(x:sum():gt(0), function(a) return a end, function(a) return a * -2 end, x)
end
local both_identity = function(x, y)
  return grace.cond(x:sum():gt(0), function(a, b) return a end, function(a, b) return b end, x, y)
end
-- the matmul on the device's weights, checked against the CPU's
local function check_mm(name, mode, backend, refused)
  local cmf, bad, waited = H.matmul_branch_calls(P, backend)
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
  for _, c in ipairs(P.cases) do check(c[1], mode, c[2], c[3], c[4]) end
  check("cond whose then branch returns its argument", mode, identity, function(k) return alt(k) end, 10)
  check("cond whose branches return their arguments", mode, both_identity, function(k) return alt(k), y0 end, 10)
  check_mm("grace's matmul in a branch", mode, "grace", false)
  check_mm("cuBLASLt matmul in a branch", mode, "cublaslt", true)
  -- random numbers in branches: drawn as eagerly, so not predicated (the generator would advance by both bodies)
  local crf, rbad = H.random_branch_calls(P)
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
local cf, bad = H.run_vs_eager("measured: ", P.branch, function(k) return alt(k), y0 end, 100)   -- 7 candidates: 1 + 7 * 9 timed + 7 untimed
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
