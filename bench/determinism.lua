-- determinism.lua: whether compiled calls give the same bits every time (a diagnostic for the device). A
-- GPT-2-shaped model (grace.gpt2, seeded random weights, d 768, vocab 50257): (1) the compiled prefill forward on
-- fresh static caches, N times; (2) the compiled decode forward N times on the same inputs (its cache write is the
-- same each time); each call's logits against the second call's (the first is the trace's eager run), bit for bit;
-- (3) grace.generate greedy three times: whether the token streams repeat.
-- usage: grace bench/determinism.lua [dtype] [layers] [calls] [device]
local gpt2 = require "grace.gpt2"
local gen = require "grace.generate"
local dtype, L, N, dev = arg[1] or "bfloat16", tonumber(arg[2] or "12"), tonumber(arg[3] or "30"), arg[4] or "cuda"
grace.manual_seed(7)
local m = gpt2.new({layers = L, d = 768, heads = 12, vocab = 50257, max_pos = 1024}, {dtype = dtype, device = dev})
local prompt = grace.randint(1, 50257, {1, 16}):long():to(dev)
local function step(ids, pos, k, v) return m:forward(ids, pos, "static", k, v) end
local pre, fwd = grace.compile(step), grace.compile(step)
local function compare(name, call)
  local ref, diffs, maxd = nil, 0, 0
  for i = 1, N do
    local lg = call():float():cpu()
    if i == 2 then ref = lg elseif i > 2 then
      local d = (lg - ref):abs():max():item()
      if d ~= 0 then diffs = diffs + 1 end
      if d > maxd then maxd = d end
    end
  end
  print(("determinism %s layers %d %s: %d of %d compiled calls differ from the first compiled one (max |diff| %.3g); "
         .. "PDL=%s graphs=%s"):format(dtype, L, name, diffs, N - 2, maxd, os.getenv("GRACE_PDL") or "on",
                                       os.getenv("GRACE_GRAPHS") or "auto"))
end
local ck, cv
compare("prefill", function()
  ck, cv = m:new_cache("static", 1, 64)
  return pre(prompt, grace.tensor(1), ck, cv)
end)
local tok = grace.tensor({{42}}):long():to(dev)
compare("decode", function() return fwd(tok, grace.tensor(17), ck, cv) end)
local runs = {}
for r = 1, 4 do runs[r] = gen.generate(m, prompt, {max_new_tokens = 48, greedy = true, cache = "static"}) end
local same = 0
for r = 3, 4 do if grace.equal(runs[r], runs[2]) then same = same + 1 end end
print(("determinism %s layers %d generate: runs 3 and 4 equal run 2: %d of 2"):format(dtype, L, same))
