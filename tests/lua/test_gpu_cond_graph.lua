-- test_gpu_cond_graph.lua: compiled regions (grace.cond, grace.while_loop) on CUDA under each lowering, against the
-- same Lua functions run eagerly on CPU copies of the inputs: the host branch (graphs forced "eager": the predicate
-- read on the host, kernel by kernel) and conditional graph nodes (graphs forced "copy" and "indirect": the whole
-- program one CUDA graph, the predicate read on the device). Cases: a cond whose outcome alternates over 10 calls
-- (predicate computed on the device, and a host boolean), a cond nested in a cond, a cond inside a while loop that
-- runs 0, 1 and 37 iterations (the count a device value), a while_loop with max_iters within and past its bound
-- (graphed, the bound's error raised at the next wait for the device), random numbers inside branches (these stay host branches:
-- the generator's offset depends on the branch taken; the draws must equal the eager ones), a branch holding a
-- matmul run by cuBLASLt, and branches writing in place to captured tensors (a cache at a device index, a counter,
-- a row through a view: the region returns them, copied back once after it). Under conditional nodes, from the fourth call on (call 1 runs eagerly, call 2 is the
-- layout's warm run, call 3 captures) each call must replay the one graph and never wait for the device
-- (grace.device_stats().syncs unchanged across the call); the report must say "conditional nodes". Tolerances:
-- float32 rtol 1e-5, atol 1e-5 (pointwise); products over K terms atol 1e-4 * sqrt(K). Without a usable CUDA device
-- it prints a TAP skip plan; GRACE_TEST_DEVICE=cpu runs it CPU against CPU (a check of this file).
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"

local DEV, to_dev = H.DEV, H.to_dev
local ON_GPU = DEV == "cuda"
local last_report = H.last_report

-- Why a program's regions are not conditional nodes, as its report says (for the diagnostics of a failure).
local function why_not(p)
  local w = {p.region_why}
  for k, v in pairs(p.unavailable or {}) do w[#w + 1] = k .. ": " .. v end
  return table.concat(w, "; ")
end

-- A case under the current graphs mode: equal to eager, and run by the mode's lowering. Returns the compiled function.
local function check(name, mode, f, args, n, atol)
  local cf, bad, waited = H.run_vs_eager(("%s [%s]: "):format(name, mode), f, args, n, atol)
  tap.is(bad, 0, ("%s [%s]: %d calls equal the eager CPU calls"):format(name, mode, n))
  if ON_GPU then
    local p = last_report(cf)
    if mode == "eager" then
      -- (a host boolean predicate needs no wait: it is known on the host)
      tap.ok(p.region_lowering == "host branch" and (waited > 0 or name:find("host boolean", 1, true) ~= nil),
             ("%s [%s]: the host branch reads the predicate on the host (%s, %d synchronisations)"):format(
               name, mode, tostring(p.region_lowering), waited))
    else
      local why = why_not(p)
      tap.ok(p.region_lowering == "conditional nodes" and (p.cond_nodes or 0) >= 1,
             ("%s [%s]: its regions run as conditional nodes (%s, %s nodes) %s"):format(
               name, mode, tostring(p.region_lowering), tostring(p.cond_nodes), why))
      tap.ok(p.captures == 1 and (p.replays or 0) >= n - 3,
             ("%s [%s]: captured once, replayed by the calls after (%s captures, %s replays)"):format(
               name, mode, tostring(p.captures), tostring(p.replays)))
      tap.is(waited, 0, ("%s [%s]: no wait for the device inside calls 4 to %d (but the capture)"):format(name, mode, n))
    end
  end
  return cf
end

local P = H.region_progs(1000, 256)
local x0 = P.x0
-- a loop whose count k is a device value: i counts to k, v moves by a cond on i's parity
local loop = function(x, k)
  local i, v = grace.while_loop(function(i, v) return i:lt(k) end,
                                function(i, v)
                                  return i + 1, grace.cond(i:remainder(2):eq(0), function(u) return u * 1.01 + 0.5 end,
                                                           function(u) return u * 0.99 - 0.25 end, v)
                                end, {grace.tensor(0):to(x.device), x})
  return i, v
end
local COUNTS = {0, 1, 37, 5, 0, 37, 1, 2, 37, 0}
local bounded = function(x, k)
  return grace.while_loop(function(i, v) return i:lt(k) end, function(i, v) return i + 1, v * 1.5 - 0.25 end,
                          {grace.tensor(0):to(x.device), x}, {max_iters = 10})
end
local BOUNDED = {3, 10, 0, 7, 10, 1, 9}

-- In-place writes inside a branch: a captured cache written at a position given as a device index (the other branch
-- counts and scales a row of the cache through a view), against the same Lua on CPU tensors of its own. Returns the
-- compiled function, the calls whose result, cache or counter differ, and the waits inside calls 4 to 10.
local function writes_calls()
  local function make(dev)
    local cache, count = grace.zeros(4, 256):to(dev), grace.zeros(1):to(dev)
    local f = function(p, x, pos)
      local r = grace.cond(p, function(a, i) cache:index_copy_(1, i, a) return a * 2 end,
                              function(a, i) count:add_(1) cache:select(1, 1):mul_(0.5) return a + 1 end, x, pos)
      return r + cache:sum()
    end
    return f, cache, count
  end
  local fe, ce, ke = make("cpu")
  local fd, cd, kd = make(DEV)
  local cf = grace.compile(fd)
  local bad, waited = 0, 0
  for k = 1, 10 do
    local x, pv, pos = grace.randn(1, 256), grace.tensor(k % 3 ~= 0), grace.tensor({k % 4 + 1}, {dtype = "int64"})
    local want = fe(pv, x, pos)
    local dx, dp, dpos = to_dev(x), pv:to(DEV), to_dev(pos)
    local s0, c0 = H.syncs(), H.captures(cf)
    local got = cf(dp, dx, dpos)
    if k >= 4 and H.captures(cf) == c0 then waited = waited + H.syncs() - s0 end
    if not (H.close(got, want, 1e-3) and H.close(cd, ce) and H.close(kd, ke)) then
      bad = bad + 1
      tap.diag(("in-place writes in a branch: call %d differs from eager"):format(k))
    end
  end
  return cf, bad, waited
end

for _, mode in ipairs(ON_GPU and {"eager", "copy", "indirect"} or {"auto"}) do
  grace.graphs(mode)
  local wcf, wbad, wwaited = writes_calls()
  tap.is(wbad, 0, ("in-place writes in a branch [%s]: 10 calls, results, cache and counter as eagerly"):format(mode))
  if ON_GPU and mode ~= "eager" then
    local p = last_report(wcf)
    tap.ok(p.region_lowering == "conditional nodes" and p.captures == 1 and wwaited == 0,
           ("in-place writes in a branch [%s]: conditional nodes, captured once, no wait (%s, %s captures, %d) %s"):format(
             mode, tostring(p.region_lowering), tostring(p.captures), wwaited, why_not(p)))
  end
  for _, c in ipairs(P.cases) do check(c[1], mode, c[2], c[3], c[4]) end
  check("cond inside a while of 0, 1 and 37 iterations", mode, loop,
        function(k) return x0, grace.tensor(COUNTS[k]) end, #COUNTS, 1e-3)
  check("while with max_iters, within the bound", mode, bounded, function(k) return x0, grace.tensor(BOUNDED[k]) end,
        #BOUNDED, 1e-3)
  local cb, raised = grace.compile(bounded), 0
  for _ = 1, 5 do   -- graphed, the error comes at the next wait for the device: here, reading the result
    local okc, err = pcall(function() local _, v = cb(to_dev(x0), grace.tensor(11)) return v:cpu() end)
    if not okc and tostring(err):find("max_iters=10", 1, true) then raised = raised + 1 end
  end
  tap.is(raised, 5, ("while with max_iters, past the bound [%s]: every call fails as eagerly"):format(mode))
  -- cuBLASLt inside a branch (forced where it can take the product)
  local cmf, bad, waited = H.matmul_branch_calls(P, "cublaslt")
  tap.is(bad, 0, ("cuBLASLt matmul in a branch [%s]: 8 calls equal the eager CPU calls"):format(mode))
  if ON_GPU and mode ~= "eager" then
    local p = last_report(cmf)
    tap.ok(p.region_lowering == "conditional nodes" and waited == 0,
           ("cuBLASLt matmul in a branch [%s]: conditional nodes, no synchronisation (%s, %d) %s"):format(
             mode, tostring(p.region_lowering), waited, why_not(p)))
  end
  -- random numbers in branches: drawn as eagerly; these regions stay host branches
  local crf, rbad = H.random_branch_calls(P)
  tap.is(rbad, 0, ("random draws in branches [%s]: as the eager CPU calls, generator offsets included"):format(mode))
  if ON_GPU then
    local p = last_report(crf)
    tap.ok(p.region_lowering == "host branch" and tostring(p.region_why):find("random"),
           ("random draws in branches [%s]: host branch, and why (%s)"):format(mode, tostring(p.region_why)))
  end
end
grace.graphs()
tap.done()
