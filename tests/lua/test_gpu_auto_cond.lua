-- test_gpu_auto_cond.lua: automatic cond regions on the device. The early-exit MLP of test_gpu_partitions.lua (8
-- layers of relu(x W + b), an exit after layer 4 when `x:abs():max():item() > 1e9`) and the alternating branch
-- `if (h:sum() * s):item() > 0 then A else B end`, compiled with device weights: once both outcomes were seen, the
-- two paths become one program with a cond region (f:stats().auto_regions), later calls run it with no replay and
-- no partition run, and every result equals the same Lua function run eagerly on CPU copies (float32; rtol 1e-4,
-- atol 1e-4 * sqrt(K)), on both outcomes. Without a usable CUDA device it prints a TAP skip plan
-- (GRACE_TEST_DEVICE=cpu checks the harness, CPU against CPU).
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

tap.done()
