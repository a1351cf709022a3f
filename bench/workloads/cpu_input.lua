-- cpu_input.lua: benchmark workload "cpu_input": the mlp workload's model (8 x (Linear 1024->1024 + exact GELU),
-- batch 8, float32) fed a host tensor on every call, moved to the device inside the function (`model(x:cuda())`,
-- the case PyGraph names: a per-call CPU input keeps PyTorch's CUDA graphs from being used). grace stages the input
-- ahead of the program (page-locked buffer, asynchronous copy) so the program stays one graph. The same model is
-- bench/torch/workloads.py's CpuInput; weights and inputs come from ctx.tensor under the names used there.
local nn = require "grace.nn"

local M = {name = "cpu_input", variants = {{name = "cpu_input", dtype = "float32"}}}

function M.config(small)
  if small then return {layers = 8, d = 64, batch = 8} end
  return {layers = 8, d = 1024, batch = 8}
end

function M.build(ctx)
  local c = M.config(ctx.small)
  local seq = {}
  for i = 1, c.layers do
    local lin = nn.Linear(c.d, c.d)
    lin.weight = ctx.tensor(("cpuin.fc%d.weight"):format(i), {c.d, c.d}, {"normal", math.sqrt(2 / c.d)})
    lin.bias = ctx.tensor(("cpuin.fc%d.bias"):format(i), {c.d}, {"normal", 0.02})
    seq[#seq + 1] = lin
    seq[#seq + 1] = nn.GELU()
  end
  local model = nn.Sequential(seq)
  local dev = ctx.device
  local pool = {}
  for k = 1, ctx.npool do   -- the inputs stay on the host
    pool[k] = {ctx.tensor(("cpuin.x.%d"):format(k), {c.batch, c.d}, {"normal", 1}):cpu()}
  end
  return {
    description = ("%d x (Linear %d->%d + GELU), batch %d, the input a host tensor moved inside the function")
      :format(c.layers, c.d, c.d, c.batch),
    fn = function(x) return model(x:to(dev)) end,
    pool = pool,
    flops = 2 * c.layers * c.batch * c.d * c.d,
  }
end

return M
