-- gpt2_decode.lua: benchmark workload "gpt2_decode" (issue 8): one decode step of GPT-2 small (12 layers,
-- d 768, 12 heads, vocab 50257, learned positions, LM head tied to the token embedding) for batch 1: the
-- new token attends to the 128 cached keys/values of each layer plus its own. The caches are inputs
-- ([layers, 1, heads, 128, 64] for keys and for values); the step returns the logits [1, 1, vocab] and the
-- new token's keys and values ([layers, 1, heads, 1, 64] each). float32 and bfloat16 variants share the
-- float32 weights (cast once at load). The block is written out (nn's attention has separate q/k/v
-- projections and a cache written in place); the same model is workloads.py's Gpt2Decode.
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
  local function W(name, shape, std) return ctx.tensor(name, shape, {"normal", std}) end
  local function ln(name)
    return {w = ctx.tensor(name .. ".weight", {d}, {"normal", 0.1, 1}),
            b = ctx.tensor(name .. ".bias", {d}, {"normal", 0.1})}
  end
  local wte = W("gpt2.wte", {c.vocab, d}, 0.02)
  local wpe = W("gpt2.wpe", {c.max_pos, d}, 0.01)
  local blocks = {}
  for i = 1, Lc do
    local p = ("gpt2.h%d."):format(i)
    blocks[i] = {
      ln1 = ln(p .. "ln1"),
      attn_w = W(p .. "attn.weight", {3 * d, d}, 0.02), attn_b = W(p .. "attn.bias", {3 * d}, 0.02),
      proj_w = W(p .. "proj.weight", {d, d}, 0.02), proj_b = W(p .. "proj.bias", {d}, 0.02),
      ln2 = ln(p .. "ln2"),
      fc_w = W(p .. "fc.weight", {4 * d, d}, 0.02), fc_b = W(p .. "fc.bias", {4 * d}, 0.02),
      fcp_w = W(p .. "fcproj.weight", {d, 4 * d}, 0.02), fcp_b = W(p .. "fcproj.bias", {d}, 0.02),
    }
  end
  local ln_f = ln("gpt2.ln_f")
  local pos = c.cached + 1            -- 1-based row of wpe for the new token (0-based position 128)
  local scale = 1 / math.sqrt(hd)

  local function heads(t) return t:reshape({1, 1, H, hd}):transpose(2, 3) end   -- [1, H, 1, hd]
  -- ids [1, 1] int64 (1-based), past_k/past_v [layers, 1, H, cached, hd]
  local function step(ids, past_k, past_v)
    local x = grace.embedding(ids, wte) + wpe:narrow(1, pos, 1)              -- [1, 1, d]
    local new_k, new_v = {}, {}
    for i = 1, Lc do
      local b = blocks[i]
      local h = grace.layer_norm(x, b.ln1.w, b.ln1.b)
      local qkv = h:matmul(b.attn_w:t()) + b.attn_b                            -- [1, 1, 3d]
      local q = heads(qkv:narrow(3, 1, d))
      local k = heads(qkv:narrow(3, d + 1, d))
      local v = heads(qkv:narrow(3, 2 * d + 1, d))
      new_k[i], new_v[i] = k, v
      local K = grace.cat({past_k[i], k}, 3)                                   -- [1, H, cached+1, hd]
      local V = grace.cat({past_v[i], v}, 3)
      local att = (q:matmul(K:transpose(-2, -1)) * scale):softmax(-1)        -- [1, H, 1, cached+1]
      local o = att:matmul(V):transpose(2, 3):reshape({1, 1, d})
      x = x + (o:matmul(b.proj_w:t()) + b.proj_b)
      h = grace.layer_norm(x, b.ln2.w, b.ln2.b)
      local m = (h:matmul(b.fc_w:t()) + b.fc_b):gelu("tanh")
      x = x + (m:matmul(b.fcp_w:t()) + b.fcp_b)
    end
    x = grace.layer_norm(x, ln_f.w, ln_f.b)
    local logits = x:matmul(wte:t())                                           -- [1, 1, vocab]
    return logits, grace.stack(new_k, 1), grace.stack(new_v, 1)
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
