-- test_gpu_train_steps.lua: the training step of test_train_steps.lua (forward, loss, backward, AdamW in place;
-- the 8-layer MLP and the tiny GPT of train_cases.lua) compiled on the CUDA device against the same step run
-- eagerly on the CPU, in float32, 100 steps: after every step the losses and every weight agree. The compiled
-- step traces once and never runs eagerly, and once its launch is decided it runs as ONE graph launch per call:
-- one device program, replayed once per call as a CUDA graph, with no kernel launched outside it (grace's own
-- launches, device_stats().kernel_launches, do not move). Without a usable CUDA device it prints a TAP skip plan;
-- GRACE_TEST_DEVICE=cpu runs it CPU against CPU (a check of this file: no graph then).
--
-- Tolerances (float32): the device sums matmuls and reductions in another order than the CPU (rounding ~6e-8 per
-- op), and 100 AdamW steps carry and amplify that where gradients are near zero (Adam's m / sqrt(v)): these models'
-- float32 runs against their float64 runs differ by ~1e-6 in the losses and ~1e-4 in the weights after 100 steps
-- on the CPU. Losses 1e-4 relative; weights 2e-3 absolute (two steps of lr 1e-3: a near-zero gradient whose sign
-- comes out otherwise). A wrong gradient or a missed update moves the loss by ~1e-2 (its fall per step here).
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"
local C = require "tests.lua.train_cases"

local DEV = H.DEV
local TOL = {loss = 1e-4, param = 2e-3}
local EXTRA = 20   -- calls after the 100 checked ones, over which the launches are counted

for _, case in ipairs(C.cases) do
  local label = case.name .. ", float32"
  local m1, o1 = C.setup(case, "float32")
  local m2 = C.setup(case, "float32")
  m2:to(DEV)
  local o2 = grace.optim.AdamW(m2, {lr = C.LR})   -- its state made on the device, beside the weights
  local f = grace.compile(function(x, y) return C.step(case, m2, o2, x, y) end)
  local batches = C.batches(case, "float32")
  local wl, wp, bad, first, last = C.compare(case, m1, o1, f, m2, batches, TOL, H.to_dev)
  tap.ok(bad == nil, ("%s: %d AdamW steps compiled on %s equal the eager CPU steps after every step (largest "
    .. "difference: loss %.2g, weights %.2g)%s"):format(label, C.STEPS, DEV, wl, wp,
    bad and (", first over at step " .. bad) or ""))
  tap.ok(last < first, ("%s: the loss falls (%.4f to %.4f)"):format(label, first, last))
  local st = f:stats()
  tap.ok(st.traces == 1 and st.eager_calls == 0 and not st.eager and st.hits == C.STEPS - 1,
         ("%s: one trace, the other %d calls compiled, none eager (traces %d, hits %d, eager calls %d)"):format(
         label, C.STEPS - 1, st.traces, st.hits, st.eager_calls))
  if DEV ~= "cpu" then
    local x, y = H.to_dev(batches[1][1]), H.to_dev(batches[1][2])
    -- past the one re-check of the launch decision (done by 100 + 14 calls after the decision, which comes by
    -- call 80, or at call 1 from the launch cache), whose calls would not be replays of one graph
    for _ = 1, 120 do f(x, y) end
    grace.synchronize()
    local s0, r0 = grace.device_stats(), f:report()
    for _ = 1, EXTRA do f(x, y) end
    grace.synchronize()
    local s1, r1 = grace.device_stats(), f:report()
    local r = r1[1] or {}
    local replays = (r.replays or 0) - ((r0[1] or {}).replays or 0)
    local why = {}
    for k, v in pairs(r.unavailable or {}) do why[#why + 1] = tostring(k) .. ": " .. tostring(v) end
    for k, v in pairs(r.us or {}) do why[#why + 1] = ("%s %.1f us"):format(tostring(k), v) end
    table.sort(why)
    tap.ok(#r1 == 1 and r.on_device and not r.no_graph and r.strategy ~= "eager",
           ("%s: one device program, run as a CUDA graph (%d programs, strategy %s%s; %s)"):format(label, #r1,
           tostring(r.strategy), r.no_graph and ", no graph: " .. r.no_graph or "", table.concat(why, "; ")))
    tap.ok(replays == EXTRA and s1.kernel_launches == s0.kernel_launches,
           ("%s: %d calls, %d graph replays and %d kernels launched outside the graph: one graph launch per call "
            .. "(%s kernels in the graph)"):format(label, EXTRA, replays, s1.kernel_launches - s0.kernel_launches,
           tostring(r.kernels)))
    -- the optimizer's updates (copy_ into each weight and moment) are fused kernels storing in place
    tap.ok(r.unfused == 0, ("%s: every fused group runs as one kernel (%s groups an op at a time%s)"):format(label,
           tostring(r.unfused), r.unfused_why and (": " .. r.unfused_why) or ""))
  end
end

tap.done()
