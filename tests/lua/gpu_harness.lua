-- gpu_harness.lua: the start both GPU test files share. Picks the device (GRACE_TEST_DEVICE, default cuda; "cpu"
-- runs a file CPU against CPU, a check of its harness), prints a TAP skip plan and exits when no CUDA device is
-- usable, fails once (not thousands of times) when a tensor made on the device cannot be read back, and seeds
-- the generator (GRACE_TEST_SEED reproduces a run; the seed is printed as a diag line). Also the helpers and
-- pointwise tolerances the GPU test files use, and the programs and loops the compiled-region files
-- (test_gpu_cond_graph, test_gpu_pred) share.
local tap = require "tests.lua.tap"
local grace = require "grace"

local DEV = os.getenv("GRACE_TEST_DEVICE") or "cuda"
if DEV ~= "cpu" and not grace.cuda_available() then
  local ok, why = pcall(grace.device, "cuda")
  if ok then grace.device("cpu") end
  why = tostring(why or grace.backend()):gsub("^[^:]*:%d+: ", ""):gsub("\n", " ")
  io.write("1..0 # SKIP no CUDA device: ", why, "\n")
  os.exit(0)
end
do
  local ok, err = pcall(function() return grace.ones(3, {device = DEV}):cpu():tolist() end)
  if not ok then
    io.write("not ok 1 - a tensor made on ", DEV, " reads back\n# ", tostring(err):gsub("\n", "\n# "), "\n1..1\n")
    os.exit(1)
  end
end

local SEED = tonumber(os.getenv("GRACE_TEST_SEED")) or os.time()
tap.diag(("device %s, seed %d (GRACE_TEST_SEED=%d reproduces this run); backend: %s"):format(
  DEV, SEED, SEED, grace.backend()))
grace.manual_seed(SEED)

local H = {DEV = DEV, SEED = SEED}
-- pointwise tolerances per float dtype (see the files' headers)
H.TOL = {
  float32 = {rtol = 1e-5, atol = 1e-6}, float64 = {rtol = 1e-12, atol = 1e-12},
  float16 = {rtol = 1e-2, atol = 1e-3}, bfloat16 = {rtol = 2e-2, atol = 1e-2},
}
function H.shape(t) return "[" .. table.concat(t:size(), ",") .. "]" end
-- A separate copy of a CPU tensor on the device under test (a clone when that device is the CPU too, so
-- in-place ops never touch the reference).
function H.to_dev(t)
  if DEV == "cpu" then return t:clone() end
  return t:to(DEV)
end
function H.flat(t) return t:reshape(-1):tolist() end
function H.absmax(t)
  if not grace.is_tensor(t) or t:numel() == 0 then return 0 end
  return t:double():abs():max():item()
end

-- The early-exit MLP of the partition and automatic-region tests: #Ws layers of relu(x W + b), returning x * 0.5
-- after layer 4 when x:abs():max():item() > 1e9 (a host read: a graph break, or a branch grace can make a region).
function H.early_exit_mlp(Ws, bs)
  return function(x)
    for i = 1, #Ws do
      x = (x:matmul(Ws[i]) + bs[i]):relu()
      if i == 4 and x:abs():max():item() > 1e9 then return x * 0.5 end
    end
    return x
  end
end
-- Its weights: `layers` random [K, K] and [K] CPU tensors, and their copies on the device under test.
function H.mlp_weights(K, layers)
  local Wc, bc, Wd, bd = {}, {}, {}, {}
  for i = 1, layers do
    Wc[i] = grace.randn(K, K) * (1 / math.sqrt(K))
    bc[i] = grace.randn(K) * 0.1
    Wd[i], bd[i] = H.to_dev(Wc[i]), H.to_dev(bc[i])
  end
  return Wc, bc, Wd, bd
end
-- Whether got (any device) is want (CPU, float32) within 1e-4 * sqrt(K) + 1e-4 * max |want|, a sum over K
-- products; and the largest difference.
function H.close_k(got, want, K)
  local d = (got:cpu():double() - want:double()):abs():max():item()
  return d <= 1e-4 * math.sqrt(K) + 1e-4 * H.absmax(want), d
end

-- Compiled regions, shared by the files that test their lowerings on the device.

-- Whether got (any device) has want's dtype and shape and each element within atol (default 1e-5) + 1e-5 |want|
-- (NaN equal to NaN).
function H.close(got, want, atol)
  if not grace.is_tensor(got) or got.dtype ~= want.dtype or H.shape(got) ~= H.shape(want) then return false end
  local a, b = H.flat(got:cpu()), H.flat(want)
  for i = 1, #b do
    local tol = (atol or 1e-5) + 1e-5 * math.abs(b[i])
    if not (math.abs(a[i] - b[i]) <= tol or (a[i] ~= a[i] and b[i] ~= b[i])) then return false end
  end
  return true
end
function H.syncs() return grace.device_stats().syncs or 0 end
-- The report of compiled function cf's last program so far (empty off CUDA, where nothing is graphed).
function H.last_report(cf)
  if DEV ~= "cuda" then return {} end
  local r = cf:report()
  return r[#r] or {}
end
-- Its captures so far (a capture waits for the device once, at its end).
function H.captures(cf) return H.last_report(cf).captures or 0 end

-- Runs f compiled (under the current graphs mode) on device copies of args(k), k = 1..n, against f eagerly on the
-- CPU arguments; counts host synchronisations inside the calls from the fourth on, but for one that captures the
-- graph. A differing call is a diag line starting with label. Returns the compiled function, the calls that
-- differ and the synchronisations counted.
function H.run_vs_eager(label, f, args, n, atol)
  local cf = grace.compile(f)
  local bad, waited = 0, 0
  for k = 1, n do
    local a = table.pack(args(k))
    local d = {}
    for i = 1, a.n do d[i] = grace.is_tensor(a[i]) and a[i].device == "cpu" and a[i]:dim() > 0 and H.to_dev(a[i]) or a[i] end
    local want = table.pack(f(table.unpack(a, 1, a.n)))
    local s0, c0 = H.syncs(), H.captures(cf)
    local got = table.pack(cf(table.unpack(d, 1, a.n)))
    if k >= 4 and H.captures(cf) == c0 then waited = waited + H.syncs() - s0 end
    local good = got.n == want.n
    for j = 1, want.n do good = good and H.close(got[j], want[j], atol) end
    if not good then bad = bad + 1; tap.diag(("%scall %d differs from eager"):format(label, k)) end
  end
  return cf, bad, waited
end

-- The region programs on N-element inputs x0, y0 (and K-wide matmuls) and the cases each lowering runs.
function H.region_progs(N, K)
  local P = {N = N, K = K}
  local x0, y0 = grace.randn(N), grace.randn(N)
  P.x0, P.y0 = x0, y0
  local function alt(k) return (k % 2 == 0) and x0 or -x0 end
  P.alt = alt
  P.branch = function(x, y)
    local r = grace.cond(x:sum():gt(0), function(a, b) return (a * b):exp() + a end,
                         function(a, b) return (a - b):tanh() * 2 end, x, y)
    return r * 3 + x
  end
  P.host_pred = function(p, x, y)
    return grace.cond(p, function(a, b) return a * b + 1 end, function(a, b) return a - b * 0.5 end, x, y)
  end
  P.nested = function(x)
    return grace.cond(x:sum():gt(0),
                      function(a) return grace.cond(a:max():gt(3), function(u) return u * 0.5 end,
                                                    function(u) return u:exp() end, a) end,
                      function(a) return a:abs() + 1 end, x)
  end
  P.random_branch = function(p, x)
    local r = grace.cond(p, function(a) return a + grace.rand(N, {device = a.device}) end,
                         function(a) return a * grace.randn(N, {device = a.device}) end, x)
    return r - grace.rand(N, {device = x.device})
  end
  P.W1, P.W2 = grace.randn(K, K) * 0.1, grace.randn(K, K) * 0.1
  P.dW1, P.dW2 = H.to_dev(P.W1), H.to_dev(P.W2)
  P.xm = grace.randn(64, K)
  -- {name, f, args, calls}: the cases every lowering runs
  P.cases = {
    {"cond alternating, predicate on the device", P.branch, function(k) return alt(k), y0 end, 10},
    {"cond alternating, host boolean predicate", P.host_pred, function(k) return grace.tensor(k % 2 == 0), x0, y0 end, 10},
    {"cond nested in a cond", P.nested, function(k) return ({x0:abs() * 2, -x0:abs(), x0:abs() * 0.001})[k % 3 + 1] end, 9},
  }
  return P
end
local function mm_fn(A, B)
  return function(x)
    return grace.cond(x:sum():gt(0), function(a) return a:matmul(A):relu() end, function(a) return a:matmul(B) * 0.5 end, x)
  end
end
-- A cond whose branches are matmuls by P's weights, compiled under matmul backend `backend` and called 8 times
-- (the input's sign alternating) against the CPU's; returns the compiled function, the calls that differ
-- (products over K terms: atol 1e-4 * sqrt(K)) and the synchronisations inside calls 4 to 8 but a capture.
function H.matmul_branch_calls(P, backend)
  grace.matmul_backend(backend)
  local cmf = grace.compile(mm_fn(P.dW1, P.dW2))
  local mf_cpu = mm_fn(P.W1, P.W2)
  local bad, waited = 0, 0
  for k = 1, 8 do
    local a = (k % 2 == 0) and P.xm or -P.xm
    local da = H.to_dev(a)   -- the copy to the device is not the call's
    local s0, c0 = H.syncs(), H.captures(cmf)
    local got = cmf(da)
    if k >= 4 and H.captures(cmf) == c0 then waited = waited + H.syncs() - s0 end
    if not H.close(got, mf_cpu(a), 1e-4 * math.sqrt(P.K)) then bad = bad + 1 end
  end
  grace.matmul_backend()
  return cmf, bad, waited
end
-- P.random_branch compiled, 6 calls (the predicate alternating, each seeded) against the eager CPU calls;
-- returns the compiled function and the calls whose result or generator offset differs.
function H.random_branch_calls(P)
  local crf = grace.compile(P.random_branch)
  local bad = 0
  for k = 1, 6 do
    local pv = k % 2 == 0
    grace.manual_seed(900 + k)
    local want = P.random_branch(grace.tensor(pv), P.x0)
    local _, ow = grace.get_rng_state()
    grace.manual_seed(900 + k)
    local got = crf(grace.tensor(pv), H.to_dev(P.x0))
    local _, og = grace.get_rng_state()
    if not (H.close(got, want) and og == ow) then bad = bad + 1 end
  end
  return crf, bad
end
return H
