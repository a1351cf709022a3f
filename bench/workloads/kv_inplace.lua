-- kv_inplace.lua: benchmark workload "kv_inplace": one GPT-2 small decode step (the gpt2_decode workload's weights
-- and block) with a static key/value cache written in place, the recipe of gpt-fast: the caches are preallocated
-- [1, heads, max_seq, 64] tensors per layer the model holds, the step writes the new token's keys and values at its
-- position with index_copy_ (the position a 0-d int64 device tensor, so one compiled program serves every
-- position), then attends over the whole cache with the positions after it masked. Returns the logits [1, 1, vocab].
-- Pool entry k: token ids and a position (128 + k - 1); the caches start as the same random past for every run.
-- The same model is bench/torch/workloads.py's KvInplace.
local M = {name = "kv_inplace", variants = {{name = "kv_inplace", dtype = "float32"}}}

function M.config(small)
  if small then return {layers = 2, d = 64, heads = 4, vocab = 512, cached = 16, max_seq = 32, max_pos = 64} end
  return {layers = 12, d = 768, heads = 12, vocab = 50257, cached = 128, max_seq = 256, max_pos = 1024}
end

function M.build(ctx)
  local c = M.config(ctx.small)
  local d, H, Lc, S = c.d, c.heads, c.layers, c.max_seq
  local hd = d // H
  local function W(name, shape, std) return ctx.tensor(name, shape, {"normal", std}) end
  local function ln(name)
    return {w = ctx.tensor(name .. ".weight", {d}, {"normal", 0.1, 1}),
            b = ctx.tensor(name .. ".bias", {d}, {"normal", 0.1})}
  end
  local wte = W("kv.wte", {c.vocab, d}, 0.02)
  local wpe = W("kv.wpe", {c.max_pos, d}, 0.01)
  local blocks = {}
  for i = 1, Lc do
    local p = ("kv.h%d."):format(i)
    blocks[i] = {
      ln1 = ln(p .. "ln1"),
      attn_w = W(p .. "attn.weight", {3 * d, d}, 0.02), attn_b = W(p .. "attn.bias", {3 * d}, 0.02),
      proj_w = W(p .. "proj.weight", {d, d}, 0.02), proj_b = W(p .. "proj.bias", {d}, 0.02),
      ln2 = ln(p .. "ln2"),
      fc_w = W(p .. "fc.weight", {4 * d, d}, 0.02), fc_b = W(p .. "fc.bias", {4 * d}, 0.02),
      fcp_w = W(p .. "fcproj.weight", {d, 4 * d}, 0.02), fcp_b = W(p .. "fcproj.bias", {d}, 0.02),
    }
  end
  local ln_f = ln("kv.ln_f")
  -- the static caches, one tensor per layer (written in place, not through a view): a random past
  local cache_k, cache_v = {}, {}
  for i = 1, Lc do
    cache_k[i] = ctx.tensor(("kv.cache_k.%d"):format(i), {1, H, S, hd}, {"normal", 1})
    cache_v[i] = ctx.tensor(("kv.cache_v.%d"):format(i), {1, H, S, hd}, {"normal", 1})
  end
  local slots = grace.arange(S, {device = ctx.device})   -- 0-based key positions, for the mask
  local scale = 1 / math.sqrt(hd)

  local function heads(t) return t:reshape({1, 1, H, hd}):transpose(2, 3) end   -- [1, H, 1, hd]
  -- ids [1, 1] int64 (1-based), pos a 0-d int64 tensor (0-based position of the new token)
  local function step(ids, pos)
    local x = grace.embedding(ids, wte) + wpe:index_select(1, pos:reshape({1}) + 1)   -- [1, 1, d]
    local masked = slots:gt(pos):reshape({1, 1, 1, S})
    local at = pos:reshape({1}) + 1                                             -- 1-based cache row
    for i = 1, Lc do
      local b = blocks[i]
      local h = grace.layer_norm(x, b.ln1.w, b.ln1.b)
      local qkv = h:matmul(b.attn_w:t()) + b.attn_b
      local q = heads(qkv:narrow(3, 1, d))
      local K, V = cache_k[i], cache_v[i]                                        -- [1, H, S, hd]
      K:index_copy_(3, at, heads(qkv:narrow(3, d + 1, d)))
      V:index_copy_(3, at, heads(qkv:narrow(3, 2 * d + 1, d)))
      local att = (q:matmul(K:transpose(-2, -1)) * scale):masked_fill(masked, -math.huge):softmax(-1)
      local o = att:matmul(V):transpose(2, 3):reshape({1, 1, d})
      x = x + (o:matmul(b.proj_w:t()) + b.proj_b)
      h = grace.layer_norm(x, b.ln2.w, b.ln2.b)
      local m = (h:matmul(b.fc_w:t()) + b.fc_b):gelu("tanh")
      x = x + (m:matmul(b.fcp_w:t()) + b.fcp_b)
    end
    return grace.layer_norm(x, ln_f.w, ln_f.b):matmul(wte:t())                  -- [1, 1, vocab]
  end

  local pool = {}
  for k = 1, ctx.npool do
    local ids = ctx.tensor(("kv.ids.%d"):format(k), {1, 1}, {"randint", 0, c.vocab}) + 1
    pool[k] = {ids, grace.tensor(c.cached + k - 1):to(ctx.device)}
  end
  return {
    description = ("GPT-2 decode step, %d layers, d %d, %d heads, vocab %d, static cache of %d written in place at a "
                   .. "0-d position, %s"):format(Lc, d, H, c.vocab, S, ctx.dtype),
    fn = step,
    pool = pool,
    flops = Lc * (2 * d * 3 * d + 2 * 2 * S * d + 2 * d * d + 2 * 2 * d * 4 * d) + 2 * d * c.vocab,
  }
end

return M
