-- mlp.lua: benchmark workload "mlp" (issue 8): 8 x (Linear 1024->1024 + exact GELU), batch 8, float32,
-- built from grace.nn modules. The same model is bench/torch/workloads.py's Mlp; weights and inputs come
-- from ctx.tensor (a file written by workloads.py, or seeded random numbers), under the names used there.
local nn = require "grace.nn"

local M = {name = "mlp", variants = {{name = "mlp", dtype = "float32"}}}

function M.config(small)
  if small then return {layers = 8, d = 64, batch = 8} end
  return {layers = 8, d = 1024, batch = 8}
end

-- The model with its weights named prefix.fc<i>.weight / .bias (cpu_input.lua builds it too).
function M.model(ctx, prefix, c)
  local seq = {}
  for i = 1, c.layers do
    local lin = nn.Linear(c.d, c.d)
    lin.weight = ctx.tensor(("%s.fc%d.weight"):format(prefix, i), {c.d, c.d}, {"normal", math.sqrt(2 / c.d)})
    lin.bias = ctx.tensor(("%s.fc%d.bias"):format(prefix, i), {c.d}, {"normal", 0.02})
    seq[#seq + 1] = lin
    seq[#seq + 1] = nn.GELU()
  end
  return nn.Sequential(seq)
end

-- ctx: see run.lua (tensor, npool, device, dtype, small). Returns {description, fn, pool, flops}.
function M.build(ctx)
  local c = M.config(ctx.small)
  local model = M.model(ctx, "mlp", c)
  local pool = {}
  for k = 1, ctx.npool do
    pool[k] = {ctx.tensor(("mlp.x.%d"):format(k), {c.batch, c.d}, {"normal", 1})}
  end
  return {
    description = ("%d x (Linear %d->%d + GELU), batch %d"):format(c.layers, c.d, c.d, c.batch),
    fn = function(x) return model(x) end,
    pool = pool,
    flops = 2 * c.layers * c.batch * c.d * c.d,   -- the matmuls
  }
end

return M
