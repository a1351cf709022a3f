-- gpt2_decode.lua: benchmark workload "gpt2_decode" (issue 8): one decode step of GPT-2 small (12 layers,
-- d 768, 12 heads, vocab 50257, learned positions, LM head tied to the token embedding) for batch 1: the
-- new token attends to the 128 cached keys/values of each layer plus its own. The caches are inputs
-- ([layers, 1, heads, 128, 64] for keys and for values); the step returns the logits [1, 1, vocab] and the
-- new token's keys and values ([layers, 1, heads, 1, 64] each). float32 and bfloat16 variants share the
-- float32 weights (cast once at load). The model is grace.gpt2's (stdlib/grace/gpt2.lua, also what
-- gpt2_generate.lua runs), its attention written out here against the past keys and values; the same model is
-- workloads.py's Gpt2Decode.
local gpt2 = require "grace.gpt2"
local M = {name = "gpt2_decode", variants = {
  {name = "gpt2_decode_fp32", dtype = "float32"},
  {name = "gpt2_decode_bf16", dtype = "bfloat16"},
}}

function M.config(small)
  if small then return {layers = 2, d = 64, heads = 4, vocab = 512, cached = 16, max_pos = 64} end
  return {layers = 12, d = 768, heads = 12, vocab = 50257, cached = 128, max_pos = 1024}
end

function M.build(ctx)
  local c = M.config(ctx.small)
  local d, H, Lc = c.d, c.heads, c.layers
  local hd = d // H
  -- the model of grace.gpt2, its weights made by ctx under the names workloads.py writes ("gpt2.wte", ...)
  local INIT = {w = {"normal", 0.02}, wpe = {"normal", 0.01}, ln_w = {"normal", 0.1, 1}, ln_b = {"normal", 0.1},
                b = {"normal", 0.02}}
  local model = gpt2.new(c, {make = function(name, shape, kind) return ctx.tensor("gpt2." .. name, shape, INIT[kind]) end})
  local wte, wpe = model.p.wte, model.p.wpe
  local pos = c.cached + 1            -- 1-based row of wpe for the new token (0-based position 128)
  local scale = 1 / math.sqrt(hd)

  -- ids [1, 1] int64 (1-based), past_k/past_v [layers, 1, H, cached, hd]
  local function step(ids, past_k, past_v)
    local x = grace.embedding(ids, wte) + wpe:narrow(1, pos, 1)              -- [1, 1, d]
    local new_k, new_v = {}, {}
    local function attend(i, q, k, v)                                          -- q, k, v [1, H, 1, hd]
      new_k[i], new_v[i] = k, v
      local K = grace.cat({past_k[i], k}, 3)                                   -- [1, H, cached+1, hd]
      local V = grace.cat({past_v[i], v}, 3)
      local att = (q:matmul(K:transpose(-2, -1)) * scale):softmax(-1)        -- [1, H, 1, cached+1]
      return att:matmul(V)
    end
    for i = 1, Lc do x = model:block(i, x, attend) end
    return model:head(x), grace.stack(new_k, 1), grace.stack(new_v, 1)        -- logits [1, 1, vocab]
  end

  local pool = {}
  local cache_shape = {Lc, 1, H, c.cached, hd}
  for k = 1, ctx.npool do
    -- token ids are 0-based on file (PyTorch's), 1-based in grace
    local ids = ctx.tensor(("gpt2.ids.%d"):format(k), {1, 1}, {"randint", 0, c.vocab}) + 1
    pool[k] = {ids, ctx.tensor(("gpt2.past_k.%d"):format(k), cache_shape, {"normal", 1}),
               ctx.tensor(("gpt2.past_v.%d"):format(k), cache_shape, {"normal", 1})}
  end
  return {
    description = ("GPT-2 decode step, %d layers, d %d, %d heads, vocab %d, %d cached tokens, %s")
      :format(Lc, d, H, c.vocab, c.cached, ctx.dtype),
    fn = step,
    pool = pool,
    -- the matmuls of one token: qkv, scores and att @ v over cached+1 keys, proj, MLP; the LM head
    flops = Lc * (2 * d * 3 * d + 2 * 2 * (c.cached + 1) * d + 2 * d * d + 2 * 2 * d * 4 * d) + 2 * d * c.vocab,
  }
end

return M
