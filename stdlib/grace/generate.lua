-- grace.generate: text generation. The sampling helpers (temperature, top-k and top-p filtering, greedy or
-- multinomial choice) are made of ops that run on every device without a host read, so they sit inside the
-- compiled decode step; generate() runs the loop: the prompt in one call (prefill), then one token per call
-- (decode), each compiled once with grace.compile, with a static KV cache written in place or a growing one.
local grace = require "grace"

local M = {}
local fmt = string.format

local function check_tensor(op, x)
  if not grace.is_tensor(x) then error(fmt("%s: expected a tensor, got %s", op, type(x)), 3) end
end

-- The helpers are locals that never reach M or the table of compiled steps: a compiled step's guards walk what
-- its upvalues reach, and that must stay the model and the sampling options.

-- logits / t (t > 0).
local function temperature(logits, t)
  check_tensor("temperature", logits)
  if type(t) ~= "number" or not (t > 0) then error("temperature: expected a number > 0, got " .. tostring(t), 2) end
  return t == 1 and logits or logits / t
end

-- The logits of the k largest of each row along the last dim kept, the others -inf (ties with the k-th kept).
local function top_k(logits, k)
  check_tensor("top_k", logits)
  local n = logits:size(-1)
  if math.type(k) ~= "integer" or k < 1 then error("top_k: k must be a positive integer, got " .. tostring(k), 2) end
  if k >= n then return logits end
  local vals = logits:topk(k, -1)
  return logits:masked_fill(logits:lt(vals:narrow(-1, k, 1)), -math.huge)
end

-- Nucleus filtering: of each row of logits along the last dim, the most probable tokens whose probabilities
-- together reach p are kept (the smallest such set; tokens tied with the last one kept too), the others -inf.
-- Found without a sort: the threshold probability is bisected (BISECT halvings between 0 and the row's
-- largest probability), each step a sum over the row, so it stays on the device and in one graph.
local BISECT = 32
local function top_p(logits, p)
  check_tensor("top_p", logits)
  if type(p) ~= "number" or not (p > 0 and p <= 1) then
    error("top_p: p must be a number in (0, 1], got " .. tostring(p), 2)
  end
  if p == 1 then return logits end
  local probs = logits:float():softmax(-1)
  -- lo: a threshold whose kept mass reaches p (0 keeps everything); hi: one whose kept mass falls short, or the
  -- largest probability when that alone reaches p
  local hi = probs:max(-1, true)
  local lo = grace.zeros_like(hi)
  for _ = 1, BISECT do
    local mid = (lo + hi) * 0.5
    local mass = grace.where(probs:ge(mid), probs, 0):sum(-1, true)
    local ok = mass:ge(p)
    lo = grace.where(ok, mid, lo)
    hi = grace.where(ok, hi, mid)
  end
  -- the largest probability alone may reach p: hi is then a threshold that works, and keeps less
  local top_alone = hi:ge(p)
  local keep = probs:ge(grace.where(top_alone, hi, lo))
  return logits:masked_fill(keep:logical_not(), -math.huge)
end

-- The next token of each row of logits [B, V] (or [B, T, V]: the last position): [B, 1] int64, 1-based.
-- opts: temperature (default 1; 0 is greedy: the argmax), top_k, top_p, greedy (true: the argmax). Sampling draws
-- with grace.multinomial (grace's Philox stream: the same tokens on every device for one seed).
local function sample(logits, opts)
  check_tensor("sample", logits)
  opts = opts or {}
  if logits:dim() == 3 then logits = logits:select(2, logits:size(2)) end
  if logits:dim() ~= 2 then error(fmt("sample: expected logits [B, V] or [B, T, V], got %s", tostring(logits.shape)), 2) end
  local t = opts.temperature or 1
  if t == 0 or opts.greedy then return logits:argmax(-1, true) end
  local l = temperature(logits:float(), t)
  if opts.top_k then l = top_k(l, opts.top_k) end
  if opts.top_p then l = top_p(l, opts.top_p) end
  return l:softmax(-1):multinomial(1, {check = false})
end
M.temperature, M.top_k, M.top_p, M.sample = temperature, top_k, top_p, sample

local OPTS = {max_new_tokens = true, temperature = true, top_k = true, top_p = true, eos = true, cache = true,
              compile = true, on_token = true, greedy = true}

local function check_opts(model, prompt, o)
  for k in pairs(o) do
    if not OPTS[k] then
      error(fmt("generate: unknown option '%s' (max_new_tokens, temperature, top_k, top_p, greedy, eos, cache, "
                .. "compile, on_token)", tostring(k)), 3)
    end
  end
  if type(model) ~= "table" or type(model.forward) ~= "function" or type(model.new_cache) ~= "function" then
    error("generate: the model must have forward(ids, pos, kind, cache_k, cache_v) and new_cache(kind, batch, "
          .. "max_len) (see grace.gpt2)", 3)
  end
  if not grace.is_tensor(prompt) or prompt:dim() ~= 2 or (prompt.dtype ~= "int64" and prompt.dtype ~= "int32") then
    error(fmt("generate: prompt_ids must be an integer tensor [batch, tokens], got %s", grace.is_tensor(prompt)
              and (prompt.dtype .. " " .. tostring(prompt.shape)) or type(prompt)), 3)
  end
  if prompt:size(2) < 1 or prompt:size(1) < 1 then error("generate: the prompt is empty", 3) end
  local n = o.max_new_tokens or 32
  if math.type(n) ~= "integer" or n < 1 then error("generate: max_new_tokens must be a positive integer", 3) end
  local kind = o.cache or "static"
  if kind ~= "static" and kind ~= "growing" then
    error(fmt("generate: cache must be \"static\" or \"growing\", got %s", tostring(kind)), 3)
  end
  if o.eos ~= nil and math.type(o.eos) ~= "integer" then error("generate: eos must be an integer token id", 3) end
  return n, kind
end

-- The step functions of one model, cache kind and sampling choice: prefill and decode, each its own compiled
-- function (their traces differ: many tokens and a mask against one), kept for later generate calls.
local steps_of = setmetatable({}, {__mode = "k"})

local function steps(model, kind, sopts, compile)
  local key = fmt("%s %s %s %s %s %s", kind, tostring(sopts.temperature), tostring(sopts.top_k),
                  tostring(sopts.top_p), tostring(sopts.greedy), tostring(compile ~= false))
  local per = steps_of[model] or {}
  steps_of[model] = per
  if per[key] then return per[key] end
  local function step(ids, pos, ck, cv, done, eos)
    local logits, nk, nv = model:forward(ids, pos, kind, ck, cv)
    local nxt = sample(logits, sopts)
    if done then
      nxt = grace.where(done, eos, nxt)
      done = done:logical_or(nxt:eq(eos))
    end
    local r = {nxt}
    if kind == "growing" then r[2], r[3] = nk, nv end
    if done then r[#r + 1] = done end
    return table.unpack(r)
  end
  local s = {prefill = step, decode = step}
  if compile ~= false then
    s = {prefill = grace.compile(step, {name = "generate:prefill"}),
         decode = grace.compile(step, {name = "generate:decode"})}
  end
  per[key] = s
  return s
end

-- generate(model, prompt_ids, opts): prompt_ids [B, T] int64 (1-based token ids) followed by max_new_tokens
-- new ones: [B, T + n] int64 (fewer when every row has produced eos; after its eos a row repeats eos), and a
-- table {prefill_s, decode_s, first_token_s, new_tokens, tokens_per_s, steps = {prefill = f, decode = f}}.
-- opts: max_new_tokens (32), temperature (1; 0 is greedy), top_k, top_p, greedy, eos, cache ("static" or "growing"),
-- compile (true), on_token(i, ids [B, 1], info) (called after each new token, with the table generate returns
-- as it stands; reading the token is a sync per token).
function M.generate(model, prompt, opts)
  opts = opts or {}
  local n, kind = check_opts(model, prompt, opts)
  local sopts = {temperature = opts.temperature, top_k = opts.top_k, top_p = opts.top_p, greedy = opts.greedy}
  local s = steps(model, kind, sopts, opts.compile)
  local sync = grace.synchronize or function() end
  local B, T = prompt:size(1), prompt:size(2)
  local dev = model.device
  prompt = prompt:long():to(dev)
  local ck, cv = model:new_cache(kind, B, T + n)
  local done, eos
  if opts.eos then
    done = grace.zeros({B, 1}, {dtype = "bool", device = dev})
    eos = grace.tensor(opts.eos, {device = dev})
  end
  local out = {prompt}
  local t0 = grace.clock()
  local function call(f, ids, pos)
    -- a 0-d CPU tensor: on the GPU a word of the compiled program's argument table, not a copy per step
    local p = grace.tensor(pos)
    local r = table.pack(f(ids, p, ck, cv, table.unpack(done and {done, eos} or {})))
    if kind == "growing" then ck, cv = r[2], r[3] end
    if done then done = r[r.n] end
    return r[1]
  end
  local info = {steps = s}
  local nxt = call(s.prefill, prompt, 1)
  sync()
  info.first_token_s = grace.clock() - t0
  out[2] = nxt
  if opts.on_token then opts.on_token(1, nxt, info) end
  local t1 = grace.clock()
  local made = 1
  for i = 2, n do
    if done and done:all():item() then break end
    nxt = call(s.decode, nxt, T + i - 1)
    out[#out + 1] = nxt
    made = i
    if opts.on_token then opts.on_token(i, nxt, info) end
  end
  local ids = grace.cat(out, 2)
  sync()
  local t2 = grace.clock()
  info.prefill_s, info.decode_s, info.new_tokens = info.first_token_s, t2 - t1, made
  info.total_s = t2 - t0
  info.tokens_per_s = B * made / info.total_s
  return ids, info
end

return M
