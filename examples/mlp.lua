-- mlp.lua: a stack of (Linear + GELU) layers, as the `mlp` benchmark (8 x Linear 1024->1024 + GELU, batch 8)
-- but 256 wide by default so it is quick on the CPU. Prints the output shape, a few values, the time per forward.
-- usage: grace examples/mlp.lua [width=256] [depth=8] [batch=8] [iters=20] [seed=0] [device=cpu|cuda] [dtype=float32]
local nn = require "grace.nn"
grace.set_grad_enabled(false)   -- inference: autograd records nothing (as torch.no_grad)

local cfg = {width = 256, depth = 8, batch = 8, iters = 20, seed = 0, device = nil, dtype = "float32"}
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^%-*([%w_]+)=(.+)$")
  if not k or (cfg[k] == nil and k ~= "device") then
    local keys = {"device"}
    for key in pairs(cfg) do keys[#keys + 1] = key end
    table.sort(keys)
    error("unknown argument '" .. a .. "' (expected key=value, key one of " .. table.concat(keys, ", ") .. ")", 0)
  end
  cfg[k] = math.tointeger(tonumber(v)) or tonumber(v) or v
end

-- os.clock is CPU time, which over-counts a multithreaded backend: prefer a wall clock when grace has one.
local clock, clock_kind = os.clock, "cpu time"
if grace.clock then clock, clock_kind = grace.clock, "wall time" end
local function sync() if grace.synchronize then grace.synchronize() end end

grace.manual_seed(cfg.seed)
local layers = {}
for _ = 1, cfg.depth do
  layers[#layers + 1] = nn.Linear(cfg.width, cfg.width)
  layers[#layers + 1] = nn.GELU()
end
local model = nn.Sequential(layers)
if cfg.device then model:to(cfg.device) end
if cfg.dtype ~= "float32" then model:to(cfg.dtype) end
local x = grace.randn({cfg.batch, cfg.width}):to(cfg.device or "cpu", cfg.dtype)

print(("grace %s, backend: %s"):format(grace.version, grace.backend()))
print(("mlp: %d x (Linear %d->%d + GELU), batch %d, %s, %d parameters"):format(
  cfg.depth, cfg.width, cfg.width, cfg.batch, cfg.dtype, model:num_parameters()))

local y = model(x)                          -- warm-up (and, under tracing, the compile)
local vals = y:narrow(1, 1, 1):flatten():narrow(1, 1, math.min(4, cfg.width)):float():tolist()
for i, v in ipairs(vals) do vals[i] = ("%.6f"):format(v) end
print(("output shape [%s], y[1][1..%d] = %s"):format(table.concat(y:size(), ", "), #vals, table.concat(vals, " ")))
print(("checksum (sum of outputs) = %.6f"):format(y:float():sum():item()))

sync()
local t0 = clock()
for _ = 1, cfg.iters do y = model(x) end
y:sum():item()                              -- results are real before the clock stops
sync()
local dt = (clock() - t0) / cfg.iters
local flops = 2 * cfg.batch * cfg.width * cfg.width * cfg.depth
print(("%.3f ms per forward (%s, mean of %d), %.2f GFLOP/s"):format(dt * 1e3, clock_kind, cfg.iters, flops / dt / 1e9))
