-- branch.lua: benchmark workload "branch": an MLP whose second half depends on the data. Four layers (Linear
-- d->d + exact GELU), then `(h:sum() * s):item() > 0` picks one of two four-layer halves; s is a 0-d input whose
-- sign alternates over the pool (h:sum() of GELU outputs is positive), so consecutive calls take alternate
-- branches. Two forms of the same program: `branch` as users write it (a host `if` on item()), `branch_cond`
-- through grace.cond. The same model is Branch in bench/torch/wl_control.py.
local nn = require "grace.nn"

local M = {name = "branch", variants = {
  {name = "branch", dtype = "float32"},
  {name = "branch_cond", dtype = "float32"},
}}

function M.config(small)
  return {half = 4, d = small and 64 or 1024, batch = 8}
end

-- layers i = 1..n named prefix..i, each Linear d->d then GELU
function M.stack(ctx, prefix, n, d)
  local seq = {}
  for i = 1, n do
    local lin = nn.Linear(d, d)
    lin.weight = ctx.tensor(("%s%d.weight"):format(prefix, i), {d, d}, {"normal", math.sqrt(2 / d)})
    lin.bias = ctx.tensor(("%s%d.bias"):format(prefix, i), {d}, {"normal", 0.02})
    seq[#seq + 1] = lin
    seq[#seq + 1] = nn.GELU()
  end
  return nn.Sequential(seq)
end

function M.build(ctx)
  local c = M.config(ctx.small)
  local first = M.stack(ctx, "branch.fc", c.half, c.d)
  local pos = M.stack(ctx, "branch.pos", c.half, c.d)
  local neg = M.stack(ctx, "branch.neg", c.half, c.d)
  local pool = {}
  for k = 1, ctx.npool do
    local sign = k % 2 == 1 and 1 or -1
    pool[k] = {ctx.tensor(("branch.x.%d"):format(k), {c.batch, c.d}, {"normal", 1}),
               ctx.tensor(("branch.s.%d"):format(k), {}, {"uniform", sign, sign})}
  end
  local fn
  if ctx.variant == "branch_cond" then
    fn = function(x, s)
      local h = first(x)
      return grace.cond((h:sum() * s):gt(0), function(a) return pos(a) end, function(a) return neg(a) end, h)
    end
  else
    fn = function(x, s)
      local h = first(x)
      if (h:sum() * s):item() > 0 then return pos(h) end
      return neg(h)
    end
  end
  return {
    description = ("%d x (Linear %d->%d + GELU), then one of two such halves by the sign of a sum, batch %d"):format(
      c.half, c.d, c.d, c.batch),
    fn = fn,
    pool = pool,
    flops = 2 * 2 * c.half * c.batch * c.d * c.d,
  }
end

return M
