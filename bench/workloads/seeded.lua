-- seeded.lua: one workload variant of this folder built on seeded random weights and inputs (no files from the
-- PyTorch side), for the bench tools that look at one compiled call (bench/profile_step.lua, bench/call_split.lua).
-- seeded.build(VARIANT, {device =, npool =, small =}) returns the built workload ({fn, pool, ...}), or nil and a
-- message when no workload has that variant. Requires package.path to hold this folder.
local M = {}

local WORKLOADS = {"mlp", "eos", "st", "gpt2_decode", "kv_inplace", "branch", "early_exit", "greedy_loop", "train_step"}

function M.build(want, o)
  local module, variant
  for _, name in ipairs(WORKLOADS) do
    local m = require(name)
    for _, v in ipairs(m.variants or {{name = m.name, dtype = "float32"}}) do
      if v.name == want then module, variant = m, v end
    end
  end
  if not module then return nil, "no variant named " .. tostring(want) end
  grace.manual_seed(1)
  local device = o.device or "cuda"
  local ctx = {small = o.small or false, device = device, dtype = variant.dtype, variant = variant.name,
               npool = o.npool or 1, bytes = 0}
  function ctx.tensor(_, shape, init)
    local t
    if init[1] == "normal" then t = grace.randn(shape) * init[2] + (init[3] or 0)
    elseif init[1] == "uniform" then t = grace.rand(shape) * (init[3] - init[2]) + init[2]
    else t = grace.randint(init[2], init[3], shape) end
    if t.dtype == "float32" and ctx.dtype ~= "float32" then t = t:to(ctx.dtype) end
    return t:to(device)
  end
  return module.build(ctx)
end

return M
