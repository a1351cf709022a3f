-- eos.lua: benchmark workload "eos" (issue 8): an equation of state of sea water in the style of UNESCO's
-- EOS-80 (truncated polynomials in temperature T [degC], salinity S [psu] and pressure p [dbar], a square
-- root and a division: 47 pointwise ops) over three float32 inputs of 1,048,576 elements. The expression
-- text is written identically in bench/torch/workloads.py (Lua and Python share this operator syntax), so
-- both evaluate the same ops in the same order.
local M = {name = "eos", variants = {{name = "eos", dtype = "float32"}}}

function M.config(small)
  return {n = small and 4096 or 1048576}
end

-- density [kg/m^3]; every op has the tensor on its left except the final 1 - pb / K
local function eos(T, S, p)
  local rw = (((T * -1.120083e-6 + 1.001685e-4) * T - 9.095290e-3) * T + 6.793952e-2) * T + 999.842594
  local A = ((T * -8.2467e-7 + 7.6438e-5) * T - 4.0899e-3) * T + 8.24493e-1
  local B = (T * -1.6546e-6 + 1.0227e-4) * T - 5.72466e-3
  local sS = S:sqrt()
  local r0 = rw + S * (A + sS * B + S * 4.8314e-4)
  local Kw = ((T * 1.360477e-2 - 2.327105) * T + 148.4206) * T + 19652.21
  local K0 = Kw + S * (((T * -6.1670e-5 + 1.09987e-2) * T - 0.603459) * T + 54.6746)
  local pb = p * 0.1
  local K = K0 + pb * (T * 1.43713e-3 + 3.239908)
  return r0 / (1 - pb / K)
end
M.eos = eos

function M.build(ctx)
  local c = M.config(ctx.small)
  local pool = {}
  for k = 1, ctx.npool do
    pool[k] = {
      ctx.tensor(("eos.T.%d"):format(k), {c.n}, {"uniform", 0, 30}),
      ctx.tensor(("eos.S.%d"):format(k), {c.n}, {"uniform", 30, 40}),
      ctx.tensor(("eos.p.%d"):format(k), {c.n}, {"uniform", 0, 1000}),
    }
  end
  return {
    description = ("equation of state, 47 pointwise ops over 3 x %d elements"):format(c.n),
    fn = eos,
    pool = pool,
    flops = 47 * c.n,   -- pointwise; memory-bound
  }
end

return M
