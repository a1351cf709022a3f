-- st.lua: benchmark workload "st" (issue 8): 6 pre-norm Transformer encoder layers (d 512, 8 heads, FFN 2048,
-- ReLU, no mask) and a final LayerNorm, batch 1, sequence 64, float32. As in the speech transformer of the
-- PyGraph paper, the attention scale is a 0-d CPU tensor even when the model runs on the GPU: the pattern
-- that keeps PyTorch's CUDA Graphs from capturing. Linear layers and norms are grace.nn modules; attention is
-- written out (fused qkv projection, scale as a tensor). The same model is workloads.py's St.
local nn = require "grace.nn"

local M = {name = "st", variants = {{name = "st", dtype = "float32"}}}

function M.config(small)
  if small then return {layers = 2, d = 64, heads = 4, ffn = 128, seq = 16, batch = 1} end
  return {layers = 6, d = 512, heads = 8, ffn = 2048, seq = 64, batch = 1}
end

function M.build(ctx)
  local c = M.config(ctx.small)
  local d, H = c.d, c.heads
  local hd = d // H
  local function linear(name, nin, nout)
    local m = nn.Linear(nin, nout)
    m.weight = ctx.tensor(name .. ".weight", {nout, nin}, {"normal", 1 / math.sqrt(nin)})
    m.bias = ctx.tensor(name .. ".bias", {nout}, {"normal", 0.02})
    return m
  end
  local function layer_norm(name)
    local m = nn.LayerNorm(d)
    m.weight = ctx.tensor(name .. ".weight", {d}, {"normal", 0.1, 1})
    m.bias = ctx.tensor(name .. ".bias", {d}, {"normal", 0.1})
    return m
  end
  local layers = {}
  for i = 1, c.layers do
    local p = ("st.l%d."):format(i)
    layers[i] = {
      ln1 = layer_norm(p .. "ln1"), qkv = linear(p .. "qkv", d, 3 * d), proj = linear(p .. "proj", d, d),
      ln2 = layer_norm(p .. "ln2"), fc1 = linear(p .. "fc1", d, c.ffn), fc2 = linear(p .. "fc2", c.ffn, d),
    }
  end
  local ln_f = layer_norm("st.ln_f")
  local scale = grace.tensor(1 / math.sqrt(hd), {device = "cpu"})   -- float32, 0-d, on the CPU on purpose

  local function heads(t, B, T) return t:reshape({B, T, H, hd}):transpose(2, 3) end   -- [B, H, T, hd]
  local function forward(x)
    local B, T = x:size(1), x:size(2)
    for i = 1, #layers do
      local L = layers[i]
      local qkv = L.qkv(L.ln1(x))
      local q = heads(qkv:narrow(3, 1, d), B, T)
      local k = heads(qkv:narrow(3, d + 1, d), B, T)
      local v = heads(qkv:narrow(3, 2 * d + 1, d), B, T)
      local att = (q:matmul(k:transpose(-2, -1)) * scale):softmax(-1)
      local o = att:matmul(v):transpose(2, 3):reshape({B, T, d})
      x = x + L.proj(o)
      x = x + L.fc2(L.fc1(L.ln2(x)):relu())
    end
    return ln_f(x)
  end

  local pool = {}
  for k = 1, ctx.npool do
    pool[k] = {ctx.tensor(("st.x.%d"):format(k), {c.batch, c.seq, d}, {"normal", 1})}
  end
  return {
    description = ("%d pre-norm encoder layers, d %d, %d heads, FFN %d, batch %d, seq %d, scale a 0-d CPU tensor")
      :format(c.layers, d, H, c.ffn, c.batch, c.seq),
    fn = forward,
    pool = pool,
    -- the matmuls: qkv, scores, att @ v, proj, FFN
    flops = c.layers * c.batch * (2 * c.seq * d * 3 * d + 2 * 2 * c.seq * c.seq * d + 2 * c.seq * d * d
                                  + 2 * 2 * c.seq * d * c.ffn),
  }
end

return M
