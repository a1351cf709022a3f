-- test_gpu_auto_cond.lua: automatic cond regions on the device. The early-exit MLP of test_gpu_partitions.lua (8
-- layers of relu(x W + b), an exit after layer 4 when `x:abs():max():item() > 1e9`) and the alternating branch
-- `if (h:sum() * s):item() > 0 then A else B end`, compiled with device weights: once both outcomes were seen, the
-- two paths become one program with a cond region (f:stats().auto_regions), later calls run it with no replay and
-- no partition run, and every result equals the same Lua function run eagerly on CPU copies (float32; rtol 1e-4,
-- atol 1e-4 * sqrt(K)), on both outcomes. Then the early exit as written in bench/workloads/early_exit.lua (`return
-- h` when the check fires, which it never does): its exit is recorded ahead and merged, and under graphs "copy" and
-- "indirect" each later call is one launch of the program's CUDA graph with no wait for the device. A branch writing
-- a captured device cache at a position merges too, the cache as eagerly after every call. Without a usable
-- CUDA device it prints a TAP skip plan (GRACE_TEST_DEVICE=cpu checks the harness, CPU against CPU).
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"
local DEV, to_dev = H.DEV, H.to_dev

local K, B, LAYERS = 256, 8, 8

local make_mlp = H.early_exit_mlp

local function make_branch(W, A, Bm)
  return function(x, s)
    local h = x:matmul(W):relu()
    if (h:sum() * s):item() > 0 then
      return h:matmul(A):tanh()
    end
    return h:matmul(Bm):sigmoid() + 1
  end
end

local Wc, bc, Wd, bd = H.mlp_weights(K, LAYERS)

local function close(got, want) return H.close_k(got, want, K) end

-- calls f (device args) and eager (CPU args) on inputs (cycled) n times: bad results and counter changes
local function run(f, eager, inputs, n)
  local s0, bad = f:stats(), 0
  for i = 1, n do
    local args = inputs[(i - 1) % #inputs + 1]
    local dev = {}
    for j, a in ipairs(args) do dev[j] = to_dev(a) end
    if not close(f(table.unpack(dev)), eager(table.unpack(args))) then bad = bad + 1 end
  end
  local s1 = f:stats()
  return bad, s1.replays - s0.replays, s1.partition_runs - s0.partition_runs
end

local small, big = grace.randn(B, K), grace.randn(B, K) * 1e12
local f = grace.compile(make_mlp(Wd, bd))
local eager = make_mlp(Wc, bc)
local bad = run(f, eager, {{small}, {big}, {small}}, 3)
tap.is(bad, 0, "early exit: the warm-up calls (trace, the exit path, the guards) equal eager")
tap.is(f:stats().auto_regions, 1, "early exit: the two paths became one program with a cond region (" .. tostring(f:stats().auto_region_failure) .. ")")
local b2, replays, runs = run(f, eager, {{big}, {small}}, 12)
tap.ok(b2 == 0 and replays == 0 and runs == 0, ("early exit: 12 calls on both outcomes equal eager with no replay "
       .. "(%d bad, %d replays, %d partition runs)"):format(b2, replays, runs))

local A, Bm = grace.randn(K, K) * (1 / math.sqrt(K)), grace.randn(K, K) * (1 / math.sqrt(K))
local g = grace.compile(make_branch(Wd[1], to_dev(A), to_dev(Bm)))
local geager = make_branch(Wc[1], A, Bm)
local x = grace.randn(B, K)
local plus, minus = grace.tensor(1.0), grace.tensor(-1.0)
bad = run(g, geager, {{x, plus}, {x, minus}, {x, plus}}, 3)
tap.ok(bad == 0 and g:stats().auto_regions == 1, "branch: warm-up calls equal eager; one program with a cond region (" .. tostring(g:stats().auto_region_failure) .. ")")
b2, replays, runs = run(g, geager, {{x, minus}, {x, plus}}, 12)
tap.ok(b2 == 0 and replays == 0 and runs == 0, ("branch: 12 alternating calls equal eager with no replay (%d bad, "
       .. "%d replays)"):format(b2, replays))

-- ---- a branch writing a captured device cache at a position (the paths merge; the cache is written back once after
-- the region): results and the cache against the same Lua on CPU tensors of its own
local function cache_step(dev)
  local cache = grace.zeros(4, K):to(dev)
  return function(x, pos, s)
    local h = x:matmul(dev == "cpu" and Wc[1] or Wd[1]):relu()
    if (h:sum() * s):item() > 0 then
      cache:index_copy_(1, pos, h:narrow(1, 1, 1))
      return h + cache:sum()
    end
    return h - 1
  end, cache
end
local ce_f, ce_cache = cache_step("cpu")
local cd_f0, cd_cache = cache_step(DEV)
local cd_f = grace.compile(cd_f0)
local cbad = 0
for i = 1, 12 do
  local x, sign = grace.rand(B, K), grace.tensor(i % 3 == 0 and -1.0 or 1.0)
  local pos = grace.tensor({i % 4 + 1}, {dtype = "int64"})
  local want = ce_f(x, pos, sign)
  if not (close(cd_f(to_dev(x), to_dev(pos), sign), want) and close(cd_cache, ce_cache)) then cbad = cbad + 1 end
end
tap.ok(cbad == 0 and cd_f:stats().auto_regions == 1,
       ("a branch writing a captured cache: 12 calls, results and the cache as eagerly (%d differ), one program (%s)"):format(
         cbad, tostring(cd_f:stats().auto_region_failure)))

-- ---- the benchmark's early exit as users write it (bench/workloads/early_exit.lua): the check never fires, its exit
-- only returns `h`, so the exit's path is recorded ahead after three calls and the paths merge on the fourth. Under
-- the graph strategies that lower regions to conditional nodes ("copy", "indirect"), each call from the eighth on
-- (the program's first three calls run, warm and capture it) must launch the one CUDA graph once (the report's
-- replays move by one, its captures stay) and never wait for the device (grace.device_stats().syncs unchanged).
local limit = {v = 1e9}
local function halves(Ws, bs)
  local function layers(x, from, to)
    for i = from, to do x = (x:matmul(Ws[i]) + bs[i]):relu() end
    return x
  end
  return function(x)
    local h = layers(x, 1, 4)
    if h:abs():max():item() > limit.v then return h end
    return layers(h, 5, 8)
  end, function(x) return layers(x, 1, 4) end
end
local natural_eager, first_half = halves(Wc, bc)
local ON_GPU = DEV == "cuda"
local function syncs() return grace.device_stats().syncs or 0 end
-- The merged program's line of f:report() (the entry's own program, not a partition of the replayed paths).
local function program(f)
  if not ON_GPU then return {} end
  for _, p in ipairs(f:report()) do
    if (p.partition or 0) == 0 and (p.path or 0) == 0 and (p.regions or 0) > 0 then return p end
  end
  return {}
end
for _, mode in ipairs(ON_GPU and {"copy", "indirect"} or {"auto"}) do
  grace.graphs(mode)
  local nf = grace.compile((halves(Wd, bd)))
  local nbad, waited, launches, counted_calls, lua_replays = 0, 0, 0, 0, 0
  for k = 1, 14 do
    local x = grace.randn(B, K)
    local want = natural_eager(x)
    local dx = to_dev(x)   -- the copy to the device is not the call's
    local r0 = program(nf)
    local s0, rp0 = syncs(), nf:stats().replays
    local got = nf(dx)
    local s1, r1 = syncs(), program(nf)   -- before the comparison, which reads the result back
    if not close(got, want) then nbad = nbad + 1 end
    if k >= 8 then
      lua_replays = lua_replays + nf:stats().replays - rp0
      if (r1.captures or 0) == (r0.captures or 0) then
        waited = waited + s1 - s0
        launches = launches + (r1.replays or 0) - (r0.replays or 0)
        counted_calls = counted_calls + 1
      end
    end
  end
  local st = nf:stats()
  tap.ok(nbad == 0 and st.ahead_paths == 1 and st.auto_regions == 1 and lua_replays == 0,
         ("early exit as written [%s]: 14 calls equal eager, the exit recorded ahead (%d) and merged (%d), no Lua "
          .. "replay from the 8th call (%d) %s"):format(mode, st.ahead_paths, st.auto_regions, lua_replays,
                                                        st.auto_region_failure))
  if ON_GPU then
    local p = program(nf)
    tap.ok(p.region_lowering == "conditional nodes" and counted_calls >= 6 and launches == counted_calls and waited == 0,
           ("early exit as written [%s]: one graph launch per call (%d for %d calls), no wait for the device (%d), "
            .. "regions as %s"):format(mode, launches, counted_calls, waited, tostring(p.region_lowering)))
  end
  local bx = grace.randn(B, K) * 1e12
  local rp = nf:stats().replays
  tap.ok(close(nf(to_dev(bx)), first_half(bx)) and nf:stats().replays == rp,
         ("early exit as written [%s]: a call that exits returns the first half's output, from the program"):format(mode))
end
grace.graphs()

tap.done()
