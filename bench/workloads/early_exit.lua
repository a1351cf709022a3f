-- early_exit.lua: benchmark workload "early_exit": the 8-layer MLP of mlp.lua (Linear d->d + exact GELU, batch 8)
-- with a check after layer 4 that returns early when the activations blow up (`x:abs():max():item() > 1e9`; it
-- never does here, so every call pays for the check and runs all 8 layers). Two forms: `early_exit` as users write
-- it (a host `if` on item()), `early_exit_cond` through grace.cond. The same model is EarlyExit in
-- bench/torch/wl_control.py.
local branch = dofile((debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/branch.lua")

local M = {name = "early_exit", variants = {
  {name = "early_exit", dtype = "float32"},
  {name = "early_exit_cond", dtype = "float32"},
}}

function M.config(small)
  return {half = 4, d = small and 64 or 1024, batch = 8, limit = 1e9}
end

function M.build(ctx)
  local c = M.config(ctx.small)
  local first = branch.stack(ctx, "early.fc", c.half, c.d)
  local rest = branch.stack(ctx, "early.rest", c.half, c.d)
  local pool = {}
  for k = 1, ctx.npool do pool[k] = {ctx.tensor(("early.x.%d"):format(k), {c.batch, c.d}, {"normal", 1})} end
  local fn
  if ctx.variant == "early_exit_cond" then
    fn = function(x)
      local h = first(x)
      return grace.cond(h:abs():max():gt(c.limit), function(a) return a end, function(a) return rest(a) end, h)
    end
  else
    fn = function(x)
      local h = first(x)
      if h:abs():max():item() > c.limit then return h end
      return rest(h)
    end
  end
  return {
    description = ("%d x (Linear %d->%d + GELU), a check on max |x|, %d more, batch %d"):format(
      c.half, c.d, c.d, c.half, c.batch),
    fn = fn,
    pool = pool,
    flops = 2 * 2 * c.half * c.batch * c.d * c.d,
  }
end

return M
