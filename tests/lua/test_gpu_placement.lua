-- test_gpu_placement.lua: placement rewrites on the device (vm/vm_place.c, gpu/gpu_stage.c). The 8-layer MLP fed a
-- host tensor every call (`model(x:cuda())`, PyGraph's case) with a bias held on the host and moved inside the
-- function (`b:cuda()`): the host input is staged ahead of the program (f:stats().staged_bytes counts it), the bias
-- becomes a device constant, and the program is a CUDA graph (f:report()). Every call's result equals the same Lua
-- function run eagerly on the CPU (float32; rtol 1e-4, atol 1e-4 * sqrt(K)); after the bias is written in place
-- on the host the results follow it (the constant is made again) with no new trace. Under each launch strategy.
-- Host work between device ops: the MLP's activations copied to the host after layer 4 (`h:cpu()`), scaled and
-- clamped there, and copied back (`:to(dev)`) for layers 5 to 8: placement moves that host work onto the device (the
-- program stays one graph, explain says "moved to the device"), results equal eager on the CPU.
-- Without a usable CUDA device it prints a TAP skip plan (GRACE_TEST_DEVICE=cpu checks the harness).
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"
local DEV, to_dev = H.DEV, H.to_dev

local K, B, LAYERS = 256, 8, 8
local Wc = {}
for i = 1, LAYERS do Wc[i] = grace.randn(K, K) * (1 / math.sqrt(K)) end
local Wd = {}
for i = 1, LAYERS do Wd[i] = to_dev(Wc[i]) end
local bias = grace.randn(K) * 0.1   -- on the host, moved inside the function

local function make(Ws, dev)
  return function(x)
    local h = x:to(dev)
    local b = bias:to(dev)
    for i = 1, LAYERS do h = (h:matmul(Ws[i]) + b):relu() end
    return h
  end
end
local eager = make(Wc, "cpu")

local function close(got, want)
  local d = (got:cpu():double() - want:double()):abs():max():item()
  return d <= 1e-4 * math.sqrt(K) + 1e-4 * H.absmax(want)
end

local MODES = DEV == "cpu" and {"auto"} or {"copy", "indirect", "auto"}
for _, mode in ipairs(MODES) do
  grace.graphs(mode)
  local f = grace.compile(make(Wd, DEV))
  local bad, CALLS = 0, 20
  for _ = 1, CALLS do
    local x = grace.randn(B, K)   -- a host tensor every call
    if not close(f(x), eager(x)) then bad = bad + 1 end
  end
  tap.is(bad, 0, mode .. ": 20 calls fed a host tensor, every result equals eager on the CPU")
  if DEV ~= "cpu" then
    local s = f:stats()
    tap.is(s.staged_bytes, (CALLS - 1) * B * K * 4, mode .. ": the input is staged ahead of the program on every compiled call")
    local r = f:report()[1] or {}
    local want = mode == "copy" and "graph+copies" or mode == "indirect" and "graph+indirection" or nil
    tap.ok((r.captures or 0) >= 1 and not r.no_graph and (want == nil or r.strategy == want),
           ("%s: the program is a graph (%s%s)"):format(mode, tostring(r.strategy), r.no_graph and ": " .. r.no_graph or ""))
  end
  bias:add_(1)
  bad = 0
  for _ = 1, 4 do
    local x = grace.randn(B, K)
    if not close(f(x), eager(x)) then bad = bad + 1 end
  end
  tap.is(bad, 0, mode .. ": after the host bias was written, results follow it")
  tap.is(f:stats().eager_calls, 0, mode .. ": no call ran eagerly")
end
grace.graphs()

-- a round trip through the host in the middle of the device program
local function make_trip(Ws, dev)
  return function(x)
    local h = x
    for i = 1, 4 do h = (h:matmul(Ws[i])):relu() end
    local c = (h:cpu() * 0.5):clamp(0, 4)   -- host work on the device value's host copy
    h = c:to(dev)
    for i = 5, LAYERS do h = (h:matmul(Ws[i])):relu() end
    return h
  end
end
local eager_trip = make_trip(Wc, "cpu")
for _, mode in ipairs(MODES) do
  grace.graphs(mode)
  local f = grace.compile(make_trip(Wd, DEV))
  local bad = 0
  for _ = 1, 12 do
    local x = grace.randn(B, K)
    if not close(f(to_dev(x)), eager_trip(x)) then bad = bad + 1 end
  end
  tap.is(bad, 0, mode .. ": round trip through the host: 12 calls, every result equals eager on the CPU")
  tap.is(f:stats().eager_calls, 0, mode .. ": round trip: no call ran eagerly")
  if DEV ~= "cpu" then
    local r = f:report()[1] or {}
    local want = mode == "copy" and "graph+copies" or mode == "indirect" and "graph+indirection" or nil
    tap.ok((r.captures or 0) >= 1 and not r.no_graph and (want == nil or r.strategy == want),
           ("%s: round trip: the program is a graph (%s%s)"):format(mode, tostring(r.strategy),
           r.no_graph and ": " .. r.no_graph or ""))
    local text = grace.explain(f, to_dev(grace.randn(B, K)))
    tap.ok(text:find("host ops between a copy to the host and one back) -> moved to the device", 1, true) ~= nil,
           mode .. ": round trip: explain says the host work moved to the device")
  end
end
grace.graphs()

tap.done()
