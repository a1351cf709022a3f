-- cpu_input.lua: benchmark workload "cpu_input": the mlp workload's model (8 x (Linear 1024->1024 + exact GELU),
-- batch 8, float32) fed a host tensor on every call, moved to the device inside the function (`model(x:cuda())`,
-- the case PyGraph names: a per-call CPU input keeps PyTorch's CUDA graphs from being used). grace stages the input
-- ahead of the program (page-locked buffer, asynchronous copy) so the program stays one graph. The same model is
-- bench/torch/workloads.py's CpuInput; weights and inputs come from ctx.tensor under the names used there.
local mlp = dofile((debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/mlp.lua")

local M = {name = "cpu_input", variants = {{name = "cpu_input", dtype = "float32"}}, config = mlp.config}

function M.build(ctx)
  local c = M.config(ctx.small)
  local model = mlp.model(ctx, "cpuin", c)
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
