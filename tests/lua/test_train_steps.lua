-- test_train_steps.lua: a whole training step (forward, loss, backward, AdamW update in place) compiled with
-- grace.compile against the same step run eagerly, 100 steps on the CPU, for the two models of train_cases.lua
-- (an 8-layer MLP of width 64 with MSE; the tiny GPT of examples/train_gpt.lua with cross-entropy), in float64
-- and float32. After every step the losses and every parameter must agree; the compiled function must have traced
-- once, never run eagerly, and run its one program, with the update's writes inside it, for the other 99 calls.
--
-- Tolerances. On the CPU the compiled program runs the same kernels in the same order as eager and the
-- differences seen are zero; the tolerances leave room for fusion evaluating a chain in another order (a
-- reduction's partial sums), which differs by rounding. 100 AdamW steps feed each step's rounding into the next,
-- and Adam's m / sqrt(v) amplifies a difference in the weights whose gradients are near zero: the float32 run of
-- these models against their float64 run (rounding ~6e-8 against ~1e-16 per op) differs by ~1e-6 in the losses
-- and ~1e-4 in the weights after 100 steps. float64: 1e-9 (losses relative, weights absolute); float32: losses
-- 1e-4, weights 1e-3. A wrong gradient, or an update missed or applied twice, moves the loss by ~1e-2 (it falls
-- by that much per step here) and the weights by lr = 1e-3 per step.
local tap = require "tests.lua.tap"
local C = require "tests.lua.train_cases"

local TOL = {float64 = {loss = 1e-9, param = 1e-9}, float32 = {loss = 1e-4, param = 1e-3}}

for _, case in ipairs(C.cases) do
  for _, dtype in ipairs({"float64", "float32"}) do
    local label = ("%s, %s"):format(case.name, dtype)
    local m1, o1 = C.setup(case, dtype)
    local m2, o2 = C.setup(case, dtype)
    local f = grace.compile(function(x, y) return C.step(case, m2, o2, x, y) end)
    local batches = C.batches(case, dtype)
    local wl, wp, bad, first, last = C.compare(case, m1, o1, f, m2, batches, TOL[dtype], function(t) return t end)
    tap.ok(bad == nil, ("%s: %d compiled AdamW steps equal the eager ones after every step (largest difference: "
      .. "loss %.2g, weights %.2g)%s"):format(label, C.STEPS, wl, wp, bad and (", first over at step " .. bad) or ""))
    tap.ok(last < first, ("%s: the loss falls (%.4f to %.4f)"):format(label, first, last))
    local st = f:stats()
    tap.ok(st.traces == 1 and st.eager_calls == 0 and not st.eager and st.partitions == 0,
           ("%s: one trace, no eager call, no break (traces %d, eager calls %d, partitions %d)"):format(
           label, st.traces, st.eager_calls, st.partitions))
    tap.is(st.hits, C.STEPS - 1, label .. ": the other 99 calls ran the compiled program")
    -- the update is inside that program: it writes every parameter, its two moments and its step count
    local np = #m2:parameters()
    local _, nwrites = f:ir():gsub("\n%s*write ", "")
    tap.is(nwrites, 4 * np, ("%s: the program writes the %d parameters, their moments and step counts"):format(label, np))
  end
end

tap.done()
