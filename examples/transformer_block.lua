-- transformer_block.lua: a GPT-2 style pre-norm TransformerBlock on a [1, 16, d] causal input, then a KV-cache
-- decode of the last few tokens one at a time. The decoded outputs must equal the full-sequence ones: that
-- checks the cache writes, the positions and the causal mask against each other.
-- usage: grace examples/transformer_block.lua [d=256] [heads=4] [seq=16] [batch=1] [steps=4] [iters=10] [seed=0] [device=cpu|cuda]
local nn = require "grace.nn"
grace.set_grad_enabled(false)   -- inference: autograd records nothing (as torch.no_grad)

local cfg = {d = 256, heads = 4, seq = 16, batch = 1, steps = 4, iters = 10, seed = 0, device = nil}
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
if cfg.steps >= cfg.seq then error("steps must be smaller than seq", 0) end

local clock, clock_kind = os.clock, "cpu time"
if grace.clock then clock, clock_kind = grace.clock, "wall time" end
local function sync() if grace.synchronize then grace.synchronize() end end

grace.manual_seed(cfg.seed)
local block = nn.TransformerBlock(cfg.d, cfg.heads, {causal = true})
if cfg.device then block:to(cfg.device) end
local x = grace.randn({cfg.batch, cfg.seq, cfg.d})
if cfg.device then x = x:to(cfg.device) end

print(("grace %s, backend: %s"):format(grace.version, grace.backend()))
print(("TransformerBlock d=%d heads=%d (GPT-2 pre-norm, causal), %d parameters"):format(
  cfg.d, cfg.heads, block:num_parameters()))

local y = block(x)
print(("full forward: input [%s] -> output [%s], checksum %.6f"):format(
  table.concat(x:size(), ", "), table.concat(y:size(), ", "), y:sum():item()))

sync()
local t0 = clock()
for _ = 1, cfg.iters do y = block(x) end
y:sum():item()
sync()
print(("%.3f ms per full forward (%s, mean of %d)"):format((clock() - t0) / cfg.iters * 1e3, clock_kind, cfg.iters))

-- Decode: prefill all but the last `steps` tokens in one call, then one token per call.
local ck, cv = block:new_cache(cfg.batch, cfg.seq)
local P = cfg.seq - cfg.steps
local yp = block(x:narrow(2, 1, P), {cache_k = ck, cache_v = cv, pos = 1})
local worst = (yp - y:narrow(2, 1, P)):abs():max():item()
print(("prefill %d tokens: max |diff| vs full forward = %.3g"):format(P, worst))
sync()
t0 = clock()
for t = P + 1, cfg.seq do
  local yt = block(x:narrow(2, t, 1), {cache_k = ck, cache_v = cv, pos = t})
  local diff = (yt - y:narrow(2, t, 1)):abs():max():item()
  worst = math.max(worst, diff)
  print(("decode position %2d: max |diff| vs full forward = %.3g"):format(t, diff))
end
sync()
print(("%.3f ms per decode step (%s)"):format((clock() - t0) / cfg.steps * 1e3, clock_kind))
local tol = 1e-4
print(("KV-cache check: max |diff| %.3g %s %g -> %s"):format(worst, worst <= tol and "<=" or ">", tol,
  worst <= tol and "OK" or "MISMATCH"))
if worst > tol then os.exit(1) end
