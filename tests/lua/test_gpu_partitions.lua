-- test_gpu_partitions.lua: a compiled function with a graph break on the device runs each partition between breaks
-- as a program of its own, captured as a CUDA graph (vm/vm_part.c, gpu/gpu_graph.c). The early-exit MLP: 8 layers of
-- relu(x W + b), and after layer 4 the host checks `x:abs():max():item() > 1e9` (the break) and returns early when
-- it holds. Under each launch strategy (forced "copy" and "indirect", and "auto") every call's result is compared with
-- the same Lua function run eagerly on CPU copies (float32; rtol 1e-4, atol 1e-4 * sqrt(K)), on both outcomes of the
-- break; f:report() must list the two partitions of the path taken, each captured (for a forced strategy: as that
-- strategy) and replayed on every call after the warm-up: two graphs per call. Without a usable CUDA device it
-- prints a TAP skip plan (GRACE_TEST_DEVICE=cpu checks the harness, CPU against CPU, with no report checks). The first
-- partition hands back only what is read after it (x, and the value checked): 2 outputs, its other values internal.
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"
local DEV, to_dev = H.DEV, H.to_dev

local K, B, LAYERS = 256, 8, 8

local make_mlp = H.early_exit_mlp

local Wc, bc, Wd, bd = H.mlp_weights(K, LAYERS)
local eager = make_mlp(Wc, bc)

local function close(got, want) return H.close_k(got, want, K) end

local function partitions_of(f)
  local out = {}
  for _, r in ipairs(f:report()) do if r.partition then out[#out + 1] = r end end
  return out
end

local MODES = DEV == "cpu" and {"auto"} or {"copy", "indirect", "auto"}
for _, mode in ipairs(MODES) do
  grace.graphs(mode)
  local f = grace.compile(make_mlp(Wd, bd), {auto_regions = false})   -- the partitions of replayed paths are tested here
  local bad, worst, CALLS = 0, 0, 30
  for _ = 1, CALLS do
    local x = grace.randn(B, K)
    local ok, d = close(f(to_dev(x)), eager(x))
    if not ok then bad = bad + 1 end
    worst = math.max(worst, d)
  end
  if not tap.is(bad, 0, mode .. ": 30 calls on the long path, every result equals eager on the CPU") then
    tap.diag(("largest difference %g"):format(worst))
  end
  local s = f:stats()
  tap.is(s.partitions, 2, mode .. ": the two partitions of the path became programs")
  tap.is(s.partition_runs, 2 * (CALLS - 1), mode .. ": every call after the trace ran both programs")
  if DEV ~= "cpu" then
    local parts = partitions_of(f)
    tap.is(#parts, 2, mode .. ": the report lists two device partitions")
    local first = parts[1].partition == 1 and parts[1] or parts[2]
    tap.is(first.outputs, 2, mode .. ": the first partition hands back x and the value checked, nothing else")
    for _, r in ipairs(parts) do
      local want = mode == "copy" and "graph+copies" or mode == "indirect" and "graph+indirection" or nil
      tap.ok(r.captures >= 1 and (want == nil or r.strategy == want) and not r.no_graph,
             ("%s: partition %d captured as a graph (%s, %d captures)"):format(mode, r.partition, r.strategy, r.captures))
      if want then
        tap.ok(r.replays >= CALLS - 3, ("%s: partition %d replayed on every call after the warm-up (%d replays)"):format(
          mode, r.partition, r.replays))
      end
    end
  end
  -- the other outcome: inputs so large that the check after layer 4 holds
  local bad2 = 0
  for _ = 1, 6 do
    local x = grace.randn(B, K) * 1e12
    if not close(f(to_dev(x)), eager(x)) then bad2 = bad2 + 1 end
  end
  tap.is(bad2, 0, mode .. ": the early exit taken, results equal eager")
  tap.is(f:stats().partitions, 3, mode .. ": the exit path adds one partition; the first is shared")
  tap.ok(f:stats().partition_internal > 0, mode .. ": values kept inside the partitions (" ..
         f:stats().partition_internal .. ")")
end
grace.graphs()

tap.done()
