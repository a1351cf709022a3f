-- test_gpu_cond_graph.lua: compiled regions (grace.cond, grace.while_loop) on CUDA under each lowering, against the
-- same Lua functions run eagerly on CPU copies of the inputs: the host branch (graphs forced "eager": the predicate
-- read on the host, kernel by kernel) and conditional graph nodes (graphs forced "copy" and "indirect": the whole
-- program one CUDA graph, the predicate read on the device). Cases: a cond whose outcome alternates over 10 calls
-- (predicate computed on the device, and a host boolean), a cond nested in a cond, a cond inside a while loop that
-- runs 0, 1 and 37 iterations (the count a device value), a while_loop with max_iters within and past its bound
-- (graphed, the bound's error raised at the next wait for the device), random numbers inside branches (these stay host branches:
-- the generator's offset depends on the branch taken; the draws must equal the eager ones), and a branch holding a
-- matmul run by cuBLASLt. Under conditional nodes, from the fourth call on (call 1 runs eagerly, call 2 is the
-- layout's warm run, call 3 captures) each call must replay the one graph and never wait for the device
-- (grace.device_stats().syncs unchanged across the call); the report must say "conditional nodes". Tolerances:
-- float32 rtol 1e-5, atol 1e-5 (pointwise); products over K terms atol 1e-4 * sqrt(K). Without a usable CUDA device
-- it prints a TAP skip plan; GRACE_TEST_DEVICE=cpu runs it CPU against CPU (a check of this file).
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"

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
-- The captures of compiled function cf's last program so far (a capture waits for the device once, at its end).
local function captures(cf)
  if not ON_GPU then return 0 end
  local r = cf:report()
  return (r[#r] or {}).captures or 0
end

-- Why a program's regions are not conditional nodes, as its report says (for the diagnostics of a failure).
local function why_not(p)
  local w = {p.region_why}
  for k, v in pairs(p.unavailable or {}) do w[#w + 1] = k .. ": " .. v end
  return table.concat(w, "; ")
end

-- Runs f compiled (under the current graphs mode) on device copies of args(k), k = 1..n, against f eagerly on the
-- CPU arguments; counts host synchronisations inside the calls from the fourth on, but for the one that captures the
-- graph. Returns the compiled function.
local function check(name, mode, f, args, n, atol)
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
    if not good then bad = bad + 1; tap.diag(("%s [%s]: call %d differs from eager"):format(name, mode, k)) end
  end
  tap.is(bad, 0, ("%s [%s]: %d calls equal the eager CPU calls"):format(name, mode, n))
  if ON_GPU then
    local r = cf:report()
    local p = r[#r] or {}
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

for _, mode in ipairs(ON_GPU and {"eager", "copy", "indirect"} or {"auto"}) do
  grace.graphs(mode)
  check("cond alternating, predicate on the device", mode, branch, function(k) return alt(k), y0 end, 10)
  check("cond alternating, host boolean predicate", mode, host_pred,
        function(k) return grace.tensor(k % 2 == 0), x0, y0 end, 10)
  check("cond nested in a cond", mode, nested, function(k) return ({x0:abs() * 2, -x0:abs(), x0:abs() * 0.001})[k % 3 + 1] end, 9)
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
  grace.matmul_backend("cublaslt")
  local mf_dev = mm_fn(dW1, dW2)
  local cmf = grace.compile(mf_dev)
  local mf_cpu = mm_fn(W1, W2)
  local bad, waited = 0, 0
  for k = 1, 8 do
    local a = (k % 2 == 0) and xm or -xm
    local da = to_dev(a)
    local want = mf_cpu(a)
    local s0, c0 = syncs(), captures(cmf)
    local got = cmf(da)
    if k >= 4 and captures(cmf) == c0 then waited = waited + syncs() - s0 end
    if not close(got, want, 1e-4 * math.sqrt(K)) then bad = bad + 1 end
  end
  grace.matmul_backend()
  tap.is(bad, 0, ("cuBLASLt matmul in a branch [%s]: 8 calls equal the eager CPU calls"):format(mode))
  if ON_GPU and mode ~= "eager" then
    local r = cmf:report()
    local p = r[#r] or {}
    tap.ok(p.region_lowering == "conditional nodes" and waited == 0,
           ("cuBLASLt matmul in a branch [%s]: conditional nodes, no synchronisation (%s, %d) %s"):format(
             mode, tostring(p.region_lowering), waited, why_not(p)))
  end
  -- random numbers in branches: drawn as eagerly; these regions stay host branches
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
    local r = crf:report()
    local p = r[#r] or {}
    tap.ok(p.region_lowering == "host branch" and tostring(p.region_why):find("random"),
           ("random draws in branches [%s]: host branch, and why (%s)"):format(mode, tostring(p.region_why)))
  end
end
grace.graphs()
tap.done()
