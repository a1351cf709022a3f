-- test_gpu_state.lua: compiled device programs that write into their arguments and captured tensors run as CUDA
-- graphs with the writes inside them (gpu/gpu_graph.c, ir/ir_exec.c). A decode step writes its new key row into a
-- preallocated device cache with index_copy_ at a position given as a 0-d device tensor and reads the cache back
-- (softmax of q against it); an SGD step updates a weight in place (sub_) and a captured momentum buffer (mul_,
-- add_). Under each launch strategy (forced "copy" and "indirect", and "auto") every call's result and the written
-- tensors equal the same Lua functions run eagerly on CPU copies (float32; rtol 1e-4, atol 1e-4), the version
-- counters advance as eagerly, and f:report() shows the program captured as a graph (for a forced strategy: that
-- one) with no eager fallback; with indirection no byte of the state is copied per call. Without a usable CUDA
-- device it prints a TAP skip plan (GRACE_TEST_DEVICE=cpu checks the harness, CPU against CPU). The decode step
-- then runs on new caches, as each generation makes its own.
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"
local DEV, to_dev = H.DEV, H.to_dev

local T, D = 16, 64

local function close(got, want)
  local d = (got:cpu():double() - want:double()):abs():max():item()
  return d <= 1e-4 + 1e-4 * H.absmax(want), d
end

local function decode(cache, pos, k, q)
  cache:index_copy_(1, pos, k)
  return (cache:matmul(q) / 8):softmax(1)
end

local function sgd_with(mom)
  return function(w, g)
    mom:mul_(0.9)
    mom:add_(g)
    w:sub_(mom * 0.01)
    return w:sum()
  end
end

local MODES = DEV == "cpu" and {"auto"} or {"copy", "indirect", "auto"}
for _, mode in ipairs(MODES) do
  grace.graphs(mode)
  local want_strategy = mode == "copy" and "graph+copies" or mode == "indirect" and "graph+indirection" or nil
  -- decode steps
  local f = grace.compile(decode)
  local cd, ce = to_dev(grace.zeros(T, D)), grace.zeros(T, D)
  local bad, vbad = 0, 0
  for i = 1, 30 do
    local p = (i - 1) % T + 1
    local k, q = grace.randn(1, D), grace.randn(D)
    local v0, ve = cd:version(), ce:version()
    local got = f(cd, to_dev(grace.tensor(p)), to_dev(k), to_dev(q))
    local want = decode(ce, grace.tensor(p), k, q)
    if not (close(got, want) and close(cd, ce)) then bad = bad + 1 end
    if cd:version() - v0 ~= ce:version() - ve then vbad = vbad + 1 end
  end
  tap.is(bad, 0, mode .. ": decode: 30 steps, results and the cache equal eager on the CPU")
  tap.is(vbad, 0, mode .. ": decode: the cache's version advances as eagerly")
  -- the same compiled step on new caches (as each generation makes its own): the graph writes and reads the cache
  -- it is given, wherever it lies (the first kept alive, so the second has another address; the third may reuse a
  -- freed block)
  bad = 0
  for round = 1, 2 do
    local cd2, ce2 = to_dev(grace.zeros(T, D)), grace.zeros(T, D)
    for i = 1, 8 do
      local k, q = grace.randn(1, D), grace.randn(D)
      local got = f(cd2, to_dev(grace.tensor(i)), to_dev(k), to_dev(q))
      local want = decode(ce2, grace.tensor(i), k, q)
      if not (close(got, want) and close(cd2, ce2)) then bad = bad + 1 end
    end
    if round == 1 then cd = cd2 else cd2 = nil; collectgarbage() end
  end
  tap.is(bad, 0, mode .. ": decode on two new caches, 8 steps each: results and caches equal eager")
  if DEV ~= "cpu" then
    local r = f:report()[1] or {}
    tap.ok(r.captures and r.captures >= 1 and not r.no_graph and (want_strategy == nil or r.strategy == want_strategy),
           ("%s: decode: the writing program is a graph (%s, %s captures%s)"):format(mode, tostring(r.strategy),
           tostring(r.captures), r.no_graph and ", no graph: " .. r.no_graph or ""))
    if mode == "indirect" then
      tap.ok((r.copy_bytes or math.huge) < T * D * 4, ("indirect: decode: the cache is not copied (%s bytes per call)"):format(
        tostring(r.copy_bytes)))
    end
  end
  -- SGD with momentum
  local md, me = to_dev(grace.zeros(D, D)), grace.zeros(D, D)
  local s = grace.compile(sgd_with(md))
  local eager = sgd_with(me)
  local we = grace.randn(D, D)
  local wd = to_dev(we)
  bad, vbad = 0, 0
  for _ = 1, 30 do
    local g = grace.randn(D, D)
    local vw, vm = wd:version(), md:version()
    local vwe, vme = we:version(), me:version()
    local got, want = s(wd, to_dev(g)), eager(we, g)
    if not (close(got, want) and close(wd, we) and close(md, me)) then bad = bad + 1 end
    if wd:version() - vw ~= we:version() - vwe or md:version() - vm ~= me:version() - vme then vbad = vbad + 1 end
  end
  tap.is(bad, 0, mode .. ": sgd: 30 steps, the weight, the momentum and the results equal eager on the CPU")
  tap.is(vbad, 0, mode .. ": sgd: versions of the weight and the captured momentum advance as eagerly")
  if DEV ~= "cpu" then
    local r = s:report()[1] or {}
    tap.ok(r.captures and r.captures >= 1 and not r.no_graph and (want_strategy == nil or r.strategy == want_strategy),
           ("%s: sgd: the step is a graph (%s)"):format(mode, tostring(r.strategy)))
    tap.is(s:stats().traces, 1, mode .. ": sgd: one trace for all steps")
  end
end
grace.graphs()

tap.done()
