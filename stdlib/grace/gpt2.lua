-- grace.gpt2: a GPT-2 model (learned positions, pre-norm blocks, tanh GELU, the LM head tied to the token
-- embedding) written against the public tensor API, for text generation (grace.generate) and the benchmarks.
-- Weights come from seeded random numbers, a table of tensors, or a Hugging Face GPT-2 safetensors file.
-- One forward serves three uses: the whole sequence at once (no cache), a static KV cache written in place at a
-- position given as a 0-d tensor (so one compiled program serves every step), and a growing cache made by cat.
local grace = require "grace"

local gpt2 = {}
local fmt = string.format

local Model = {}
Model.__index = Model
gpt2.Model = Model

local CONFIGS = {
  small = {layers = 12, d = 768, heads = 12, vocab = 50257, max_pos = 1024},
  -- a few-kilobyte model for tests and --small runs on the CPU
  tiny = {layers = 2, d = 64, heads = 4, vocab = 512, max_pos = 128},
}
gpt2.configs = CONFIGS

local function check_config(c)
  if type(c) == "string" then
    c = CONFIGS[c] or error(fmt("gpt2: unknown config '%s' (small, tiny or a table)", c), 3)
  end
  if type(c) ~= "table" then error("gpt2: expected a config table or name", 3) end
  local out = {}
  for _, k in ipairs({"layers", "d", "heads", "vocab", "max_pos"}) do
    local v = c[k]
    if math.type(v) ~= "integer" or v < 1 then
      error(fmt("gpt2: config.%s must be a positive integer, got %s", k, tostring(v)), 3)
    end
    out[k] = v
  end
  if out.d % out.heads ~= 0 then
    error(fmt("gpt2: d %d is not divisible by heads %d", out.d, out.heads), 3)
  end
  out.head_dim = out.d // out.heads
  return out
end

-- The parameters as a table: wte [vocab, d], wpe [max_pos, d], ln_f_w/ln_f_b [d], and per block ln1_w, ln1_b,
-- attn_w [3d, d], attn_b [3d], proj_w [d, d], proj_b, ln2_w, ln2_b, fc_w [4d, d], fc_b [4d], fcp_w [d, 4d], fcp_b:
-- linear weights as [out, in] (PyTorch's nn.Linear). make(name, shape, kind) gives each tensor; kind is "w"
-- (a linear or embedding weight), "wpe", "ln_w", "ln_b" or "b" (a bias).
local function build_params(c, make)
  local d = c.d
  local p = {wte = make("wte", {c.vocab, d}, "w"), wpe = make("wpe", {c.max_pos, d}, "wpe"), blocks = {}}
  for i = 1, c.layers do
    local function m(name, shape, kind) return make(fmt("h%d.%s", i, name), shape, kind) end
    p.blocks[i] = {
      ln1_w = m("ln1.weight", {d}, "ln_w"), ln1_b = m("ln1.bias", {d}, "ln_b"),
      attn_w = m("attn.weight", {3 * d, d}, "w"), attn_b = m("attn.bias", {3 * d}, "b"),
      proj_w = m("proj.weight", {d, d}, "w"), proj_b = m("proj.bias", {d}, "b"),
      ln2_w = m("ln2.weight", {d}, "ln_w"), ln2_b = m("ln2.bias", {d}, "ln_b"),
      fc_w = m("fc.weight", {4 * d, d}, "w"), fc_b = m("fc.bias", {4 * d}, "b"),
      fcp_w = m("fcproj.weight", {d, 4 * d}, "w"), fcp_b = m("fcproj.bias", {d}, "b"),
    }
  end
  p.ln_f_w, p.ln_f_b = make("ln_f.weight", {d}, "ln_w"), make("ln_f.bias", {d}, "ln_b")
  return p
end
gpt2.build_params = build_params

-- gpt2.new(config [, {params=, make=, dtype=, device=}]): a model. config: "small", "tiny" or {layers, d, heads,
-- vocab, max_pos}. Weights: params (a table as build_params gives), else make(name, shape, kind) for each, else
-- seeded normal numbers (grace.manual_seed first for a fixed model). Cast to dtype and moved to device.
function gpt2.new(config, opts)
  opts = opts or {}
  local c = check_config(config)
  local make = opts.make or function(_, shape, kind)
    if kind == "ln_w" then return grace.randn(shape) * 0.1 + 1 end
    local std = ({w = 0.02, wpe = 0.01, ln_b = 0.1, b = 0.02})[kind]
    return grace.randn(shape) * std
  end
  local p = opts.params or build_params(c, make)
  local function place(t)
    if opts.dtype and t.dtype ~= opts.dtype then t = t:to(opts.dtype) end
    if opts.device and t.device ~= opts.device then t = t:to(opts.device) end
    return t
  end
  local function walk(t)
    for k, v in pairs(t) do
      if grace.is_tensor(v) then t[k] = place(v) elseif type(v) == "table" then walk(v) end
    end
  end
  walk(p)
  local self = setmetatable({config = c, p = p}, Model)
  self.dtype, self.device = p.wte.dtype, p.wte.device
  return self
end

-- gpt2.load(path [, {heads=, dtype=, device=}]): a model from a Hugging Face GPT-2 safetensors file (the names
-- "wte.weight", "h.0.attn.c_attn.weight", ..., with or without a "transformer." prefix; Conv1D weights stored
-- [in, out] are transposed here). The sizes come from the shapes; heads from opts, else d / 64 (every GPT-2).
function gpt2.load(path, opts)
  opts = opts or {}
  local t = grace.load(path, {format = "safetensors"})
  local function get(name)
    local v = t[name] or t["transformer." .. name]
    if not v then error(fmt("gpt2.load: %s has no tensor '%s'", path, name), 3) end
    return v
  end
  local wte, wpe = get("wte.weight"), get("wpe.weight")
  local layers = 0
  while t[fmt("h.%d.ln_1.weight", layers)] or t[fmt("transformer.h.%d.ln_1.weight", layers)] do layers = layers + 1 end
  local d = wte:size(2)
  local c = {layers = layers, d = d, heads = opts.heads or d // 64, vocab = wte:size(1), max_pos = wpe:size(1)}
  local hf = {["ln1.weight"] = "ln_1.weight", ["ln1.bias"] = "ln_1.bias", ["ln2.weight"] = "ln_2.weight",
              ["ln2.bias"] = "ln_2.bias", ["attn.weight"] = "attn.c_attn.weight", ["attn.bias"] = "attn.c_attn.bias",
              ["proj.weight"] = "attn.c_proj.weight", ["proj.bias"] = "attn.c_proj.bias",
              ["fc.weight"] = "mlp.c_fc.weight", ["fc.bias"] = "mlp.c_fc.bias",
              ["fcproj.weight"] = "mlp.c_proj.weight", ["fcproj.bias"] = "mlp.c_proj.bias"}
  local function make(name, shape, kind)
    local v
    if name == "wte" then v = wte elseif name == "wpe" then v = wpe
    elseif name:match("^ln_f") then v = get(name)
    else
      local i, rest = name:match("^h(%d+)%.(.*)$")
      v = get(fmt("h.%d.%s", tonumber(i) - 1, hf[rest]))
      if kind == "w" then v = v:t():contiguous() end   -- Conv1D [in, out] -> [out, in]
    end
    if v.shape ~= shape then
      error(fmt("gpt2.load: %s: '%s' has shape %s, expected [%s]", path, name, tostring(v.shape),
                table.concat(shape, ", ")), 4)
    end
    return v:float()
  end
  return gpt2.new(c, {make = make, dtype = opts.dtype or "float32", device = opts.device})
end

-- The token and position embeddings of ids [B, T] (1-based token ids) at positions pos .. pos+T-1 (pos a
-- 0-d int64 tensor, 1-based): [B, T, d].
function Model:embed(ids, pos)
  local T = ids:size(2)
  local rows = grace.arange(T, {device = ids.device}) + pos
  return grace.embedding(ids, self.p.wte) + self.p.wpe:index_select(1, rows)
end

-- Block i on x [B, T, d]. attend(i, q, k, v) gets the queries, keys and values [B, H, T, hd] of this block
-- and returns the attention output [B, H, T, hd]: that is where a cache is read and written.
function Model:block(i, x, attend)
  local b, c = self.p.blocks[i], self.config
  local B, T, d, H, hd = x:size(1), x:size(2), c.d, c.heads, c.head_dim
  local function heads(t) return t:reshape({B, T, H, hd}):transpose(2, 3) end
  local h = grace.layer_norm(x, b.ln1_w, b.ln1_b)
  local qkv = h:matmul(b.attn_w:t()) + b.attn_b                                -- [B, T, 3d]
  local q = heads(qkv:narrow(3, 1, d))
  local k = heads(qkv:narrow(3, d + 1, d))
  local v = heads(qkv:narrow(3, 2 * d + 1, d))
  local o = attend(i, q, k, v):transpose(2, 3):reshape({B, T, d})
  x = x + (o:matmul(b.proj_w:t()) + b.proj_b)
  h = grace.layer_norm(x, b.ln2_w, b.ln2_b)
  local m = (h:matmul(b.fc_w:t()) + b.fc_b):gelu("tanh")
  return x + (m:matmul(b.fcp_w:t()) + b.fcp_b)
end

-- The final norm and the tied LM head: logits [B, T, vocab].
function Model:head(x)
  return grace.layer_norm(x, self.p.ln_f_w, self.p.ln_f_b):matmul(self.p.wte:t())
end

-- The causal mask of T queries at positions pos .. pos+T-1 over S keys at positions 1 .. S: key j is seen by
-- query t when j <= pos + t - 1. [T, S] bool.
local function causal_mask(T, S, pos, device)
  local qpos = (grace.arange(T, {device = device}) + pos):unsqueeze(2)      -- [T, 1], 1-based positions
  return grace.arange(1, S + 1, {device = device}):unsqueeze(1):le(qpos)
end

-- model:new_cache(kind, batch, max_len): the KV cache of generation, two tensors (keys, values).
--   "static":  [B, H, layers * max_len, hd] each: block i's max_len positions are rows (i-1)*max_len + 1 ..
--              i*max_len of dim 3, written in place by index_copy_ (one write per block, on the tensor itself).
--   "growing": [layers, B, H, 0, hd] each: every call returns them one longer per token (cat).
function Model:new_cache(kind, batch, max_len)
  local c = self.config
  local o = {dtype = self.dtype, device = self.device}
  if kind == "static" then
    if math.type(max_len) ~= "integer" or max_len < 1 or max_len > c.max_pos then
      error(fmt("gpt2: a static cache of %s positions, expected 1 .. max_pos %d", tostring(max_len), c.max_pos), 2)
    end
    local shape = {batch, c.heads, c.layers * max_len, c.head_dim}
    return grace.zeros(shape, o), grace.zeros(shape, o)
  elseif kind == "growing" then
    local shape = {c.layers, batch, c.heads, 0, c.head_dim}
    return grace.zeros(shape, o), grace.zeros(shape, o)
  end
  error(fmt("gpt2: unknown cache kind '%s' (static or growing)", tostring(kind)), 2)
end

-- model:forward(ids, pos [, kind, cache_k, cache_v]): logits [B, T, vocab] of ids [B, T] (1-based) at positions
-- pos .. pos+T-1 (pos: a 0-d int64 tensor, or an integer; 1-based). Without a cache the T tokens attend
-- causally among themselves. "static": the keys and values are written into the caches in place at their
-- positions and each query attends to positions 1 .. its own. "growing": returns logits and the caches with the
-- T new positions appended (the caches must hold pos - 1 positions).
function Model:forward(ids, pos, kind, ck, cv)
  local c = self.config
  local T = ids:size(2)
  if math.type(pos) == "integer" then pos = grace.tensor(pos) end
  local x = self:embed(ids, pos)
  local attend
  if kind == nil then
    local mask = causal_mask(T, T, grace.tensor(1), ids.device)
    attend = function(_, q, k, v) return grace.attention(q, k, v, {mask = mask}) end
  elseif kind == "static" then
    local S = ck:size(3) // c.layers
    local mask = causal_mask(T, S, pos, ids.device)
    local rows = grace.arange(T, {device = ids.device}) + pos               -- the T positions, 1-based
    attend = function(i, q, k, v)
      local at = rows + (i - 1) * S                                         -- block i's rows of the cache
      ck:index_copy_(3, at, k)
      cv:index_copy_(3, at, v)
      return grace.attention(q, ck:narrow(3, (i - 1) * S + 1, S), cv:narrow(3, (i - 1) * S + 1, S), {mask = mask})
    end
  elseif kind == "growing" then
    -- one new token attends to everything: no mask, and the cache's length is not read on the host (a read would
    -- pin it, and every length would be a new trace instead of one with the length symbolic)
    local mask = T > 1 and causal_mask(T, ck:size(4) + T, pos, ids.device) or nil
    local ks, vs = {}, {}
    attend = function(i, q, k, v)
      ks[i], vs[i] = grace.cat({ck[i], k}, 3), grace.cat({cv[i], v}, 3)
      return grace.attention(q, ks[i], vs[i], mask and {mask = mask} or nil)
    end
    for i = 1, c.layers do x = self:block(i, x, attend) end
    return self:head(x), grace.stack(ks, 1), grace.stack(vs, 1)
  else
    error(fmt("gpt2: unknown cache kind '%s' (static or growing)", tostring(kind)), 2)
  end
  for i = 1, c.layers do x = self:block(i, x, attend) end
  return self:head(x)
end

-- model:state_dict(): the parameters under Hugging Face GPT-2's names and layouts (Conv1D weights [in, out]),
-- as float32 CPU tensors, for grace.save(path, model:state_dict()) and gpt2.load.
function Model:state_dict()
  local p, sd = self.p, {}
  local function put(name, t, transpose)
    if transpose then t = t:t() end
    sd[name] = t:float():cpu():contiguous()
  end
  put("wte.weight", p.wte)
  put("wpe.weight", p.wpe)
  put("ln_f.weight", p.ln_f_w)
  put("ln_f.bias", p.ln_f_b)
  for i, b in ipairs(p.blocks) do
    local h = fmt("h.%d.", i - 1)
    put(h .. "ln_1.weight", b.ln1_w); put(h .. "ln_1.bias", b.ln1_b)
    put(h .. "ln_2.weight", b.ln2_w); put(h .. "ln_2.bias", b.ln2_b)
    put(h .. "attn.c_attn.weight", b.attn_w, true); put(h .. "attn.c_attn.bias", b.attn_b)
    put(h .. "attn.c_proj.weight", b.proj_w, true); put(h .. "attn.c_proj.bias", b.proj_b)
    put(h .. "mlp.c_fc.weight", b.fc_w, true); put(h .. "mlp.c_fc.bias", b.fc_b)
    put(h .. "mlp.c_proj.weight", b.fcp_w, true); put(h .. "mlp.c_proj.bias", b.fcp_b)
  end
  return sd
end

function Model:__tostring()
  local c = self.config
  return fmt("GPT-2 (%d layers, d %d, %d heads, vocab %d, max_pos %d, %s, %s)", c.layers, c.d, c.heads, c.vocab,
             c.max_pos, self.dtype, self.device)
end

return gpt2
