-- compile_cpu.lua: compiled against eager execution on the CPU for the workloads of the benchmark suite,
-- at CPU-friendly sizes: an equation-of-state chain (40 pointwise ops over 1M floats, one fused loop when
-- compiled), an 8-layer MLP (Linear 256 + GELU, batch 8) and a GPT-2 style block (d 256, 4 heads, 16 tokens).
-- Usage: grace bench/compile_cpu.lua [reps]
local nn = require "grace.nn"
grace.set_grad_enabled(false)   -- inference: autograd records nothing (as torch.no_grad)
local reps = tonumber(arg and arg[1]) or 20
grace.manual_seed(0)

local function eos(t, s, p)
  local r = t * 0.5 + s * 0.25
  for i = 1, 12 do r = r * t + s * (0.1 * i) - p * 0.01 end
  return (r:abs() + 1):sqrt() / (p + 2)
end
local n = 1 << 20
local T, S, P = grace.rand(n), grace.rand(n), grace.rand(n)

local layers = {}
for i = 1, 8 do layers[#layers + 1] = nn.Linear(256, 256); layers[#layers + 1] = nn.GELU() end
local mlp = nn.Sequential(table.unpack(layers))
local xm = grace.randn(8, 256)
local block = nn.TransformerBlock(256, 4)
local xb = grace.randn(1, 16, 256)

local function time(f, ...)
  for _ = 1, 3 do f(...) end
  local ts = {}
  for i = 1, reps do
    local t0 = grace.clock()
    f(...)
    ts[i] = grace.clock() - t0
  end
  table.sort(ts)
  return ts[reps // 2 + 1] * 1e3
end

local cases = {
  {"eos (40 pointwise ops, 1M)", eos, {T, S, P}},
  {"mlp 8 x (Linear 256 + GELU), batch 8", function(x) return mlp(x) end, {xm}},
  {"transformer block d256, 16 tokens", function(x) return block(x) end, {xb}},
}
print(("grace %s, %s; median of %d calls"):format(grace.version, grace.backend(), reps))
print(("%-40s %10s %10s %8s"):format("workload", "eager ms", "compiled", "speedup"))
for _, c in ipairs(cases) do
  local f = grace.compile(c[2])
  local a, b = f(table.unpack(c[3])), c[2](table.unpack(c[3]))
  assert((a - b):abs():max():item() <= 1e-5 * (1 + b:abs():max():item()), c[1] .. ": compiled differs from eager")
  local e, k = time(c[2], table.unpack(c[3])), time(f, table.unpack(c[3]))
  print(("%-40s %10.3f %10.3f %7.2fx"):format(c[1], e, k, e / k))
end
