-- test_generate.lua: text generation (stdlib/grace/generate.lua, stdlib/grace/gpt2.lua) on the CPU. Greedy
-- generation with a static cache and with a growing cache, compiled, must give the tokens of a plain uncompiled
-- loop that runs the whole sequence through the model for every token (no cache) and takes the argmax; the static
-- decode step must be one trace for every position. Sampling: the same seed gives the same tokens compiled and
-- uncompiled and with either cache, inside one compiled program without a graph break; multinomial's draws
-- follow the weights within a bound from the binomial variance; top-k and top-p keep the sets worked out by hand
-- (their values against NumPy: tests/conformance/test_generate.py). Also eos, gpt2.load of a saved Hugging
-- Face-layout file, argument errors, examples/generate.lua --small and the benchmark's grace side
-- (bench/workloads/gpt2_generate.lua --small).
local tap = require "tests.lua.tap"
local grace = require "grace"
local gpt2 = require "grace.gpt2"
local gen = require "grace.generate"
local section = tap.section

-- A tiny model with weights large enough that greedy decoding does not settle on one token at once.
local CFG = {layers = 2, d = 32, heads = 4, vocab = 97, max_pos = 64}
local function tiny(seed)
  grace.manual_seed(seed)
  return gpt2.new(CFG, {make = function(_, shape, kind)
    if kind == "ln_w" then return grace.randn(shape) * 0.1 + 1 end
    return grace.randn(shape) * (kind == "w" and 0.3 or 0.1)
  end})
end

-- The reference: the whole sequence through the model (no cache) for every token, argmax of the last position.
local function plain_greedy(model, prompt, n, eos)
  local ids = prompt
  local done = {}
  for _ = 1, n do
    local logits = model:forward(ids, 1)
    local nxt = logits:select(2, ids:size(2)):argmax(-1, true)
    if eos then
      local l = nxt:reshape(-1):tolist()
      for b = 1, #l do
        if done[b] then l[b] = eos end
        if l[b] == eos then done[b] = true end
      end
      nxt = grace.tensor(l):reshape({#l, 1})
    end
    ids = grace.cat({ids, nxt}, 2)
  end
  return ids
end

local function distinct(t)
  local seen, k = {}, 0
  for _, v in ipairs(t:reshape(-1):tolist()) do if not seen[v] then seen[v], k = true, k + 1 end end
  return k
end

local model = tiny(5)
grace.manual_seed(9)
local prompt = grace.randint(1, CFG.vocab + 1, {2, 6})
local N = 12

section("greedy generation equals the plain loop", function()
  local want = plain_greedy(model, prompt, N)
  tap.ok(distinct(want:narrow(2, 7, N)) >= 4, "the reference tokens vary (the test can tell caches apart)")
  for _, kind in ipairs({"static", "growing"}) do
    local got, info = gen.generate(model, prompt, {max_new_tokens = N, temperature = 0, cache = kind})
    tap.is(tostring(got.shape), "{2, 18}", kind .. ": prompt and new tokens")
    tap.ok(grace.equal(got, want), kind .. ": the tokens of the plain uncompiled loop")
    local p, d = info.steps.prefill:stats(), info.steps.decode:stats()
    tap.is(p.traces, 1, kind .. ": prefill traced once")
    tap.is(d.calls, N - 1, kind .. ": one decode call per token after the first")
    if kind == "static" then
      tap.is(d.traces, 1, "static: one decode trace serves every position")
      tap.is(d.hits, N - 2, "static: the later decode calls run the compiled program")
      local again = gen.generate(model, prompt, {max_new_tokens = N, temperature = 0, cache = kind})
      tap.ok(grace.equal(again, want) and info.steps.decode:stats().traces == 1 and
             info.steps.prefill:stats().traces == 1, "static: a second generate reuses both compiled steps")
    else
      -- the cache's length changes every step: a second trace makes it symbolic, and every later length hits
      tap.ok(d.traces == 2 and d.hits == N - 3 and d.eager_calls == 0,
             ("growing: two decode traces serve every length (traces %d, hits %d, eager %d)"):format(d.traces, d.hits,
             d.eager_calls))
    end
    tap.ok(info.first_token_s > 0 and info.tokens_per_s > 0 and info.new_tokens == N, kind .. ": timings reported")
  end
  local u = gen.generate(model, prompt, {max_new_tokens = N, temperature = 0, compile = false})
  tap.ok(grace.equal(u, want), "uncompiled generate: the same tokens")
end)

section("eos", function()
  local free = plain_greedy(model, prompt, N)
  local eos = free[{1, 9}]:item()   -- row 1's third new token
  local want = plain_greedy(model, prompt, N, eos)
  local got = gen.generate(model, prompt, {max_new_tokens = N, temperature = 0, eos = eos})
  local w = want:narrow(2, 1, got:size(2))
  tap.ok(grace.equal(got, w), "with eos: the plain loop's tokens, eos repeated after it")
  local row1 = got[1]:tolist()
  tap.is(row1[9], eos, "row 1 stops at its eos")
  tap.ok(row1[#row1] == eos, "and repeats it")
  local one = gen.generate(model, prompt:narrow(1, 1, 1), {max_new_tokens = N, temperature = 0, eos = eos})
  local first = 0
  for j, v in ipairs(free[1]:tolist()) do if j > 6 and v == eos and first == 0 then first = j end end
  tap.is(one:size(2), first, "a single row stops as soon as it produces eos")
end)

section("sampling", function()
  local opts = {max_new_tokens = N, temperature = 0.9, top_k = 40, top_p = 0.95}
  local runs = {}
  for _, v in ipairs({{"static", true}, {"growing", true}, {"static", false}}) do
    grace.manual_seed(77)
    local o = {cache = v[1], compile = v[2]}
    for k, x in pairs(opts) do o[k] = x end
    local ids, info = gen.generate(model, prompt, o)
    runs[#runs + 1] = {ids = ids, info = info}
  end
  tap.ok(grace.equal(runs[1].ids, runs[2].ids), "one seed: the same tokens with either cache")
  tap.ok(grace.equal(runs[1].ids, runs[3].ids), "one seed: the same tokens compiled and uncompiled")
  local d = runs[1].info.steps.decode:stats()
  tap.ok(d.traces == 1 and d.replays == 0 and d.eager_calls == 0 and d.hits == N - 2,
         "sampling inside the compiled decode step: one trace, no graph break")
  grace.manual_seed(78)
  local o = {cache = "static"}
  for k, x in pairs(opts) do o[k] = x end
  local other = gen.generate(model, prompt, o)
  tap.ok(not grace.equal(other, runs[1].ids), "another seed: other tokens")
  tap.ok(distinct(runs[1].ids:narrow(2, 7, N)) >= 6, "sampled tokens vary")
  local logits = grace.randn(3, 50)
  tap.ok(grace.equal(gen.sample(logits, {temperature = 0}), logits:argmax(-1, true)), "temperature 0 is argmax")
  tap.ok(grace.equal(gen.sample(logits:unsqueeze(2), {greedy = true}), logits:argmax(-1, true)),
         "greedy on [B, T, V] takes the last position")
end)

section("multinomial: frequencies within the binomial bound", function()
  -- n draws of one category of probability p: count ~ Binomial(n, p), sd sqrt(n p (1 - p)); 5 sd bounds a
  -- fixed-seed test far from chance failure (about 6e-7 per category for a normal tail)
  local w = {0.05, 0.0, 0.2, 0.4, 0.1, 0.25}
  local n = 40000
  grace.manual_seed(123)
  local probs = grace.tensor(w):reshape({1, 6}):expand(n, 6):contiguous()
  local draws = probs:multinomial(1, {check = false}):reshape(-1):tolist()
  local counts = {0, 0, 0, 0, 0, 0}
  for _, i in ipairs(draws) do counts[i] = counts[i] + 1 end
  tap.is(counts[2], 0, "a zero weight is never drawn")
  local worst = 0
  for i, p in ipairs(w) do
    if p > 0 then worst = math.max(worst, math.abs(counts[i] - n * p) / math.sqrt(n * p * (1 - p))) end
  end
  tap.ok(worst < 5, ("one draw per row: every count within 5 sd of n p (worst %.2f sd)"):format(worst))
  grace.manual_seed(124)
  local s = grace.tensor(w):multinomial(n, {replacement = true}):tolist()
  counts = {0, 0, 0, 0, 0, 0}
  for _, i in ipairs(s) do counts[i] = counts[i] + 1 end
  worst = 0
  for i, p in ipairs(w) do
    if p > 0 then worst = math.max(worst, math.abs(counts[i] - n * p) / math.sqrt(n * p * (1 - p))) end
  end
  tap.ok(worst < 5 and counts[2] == 0, ("n draws with replacement: within 5 sd (worst %.2f sd)"):format(worst))
  grace.manual_seed(5)
  local a = probs:narrow(1, 1, 64):multinomial(1, {check = false}):tolist()
  grace.manual_seed(5)
  local b = probs:narrow(1, 1, 64):multinomial(1):tolist()
  tap.is(table.concat(a[1] and (function() local r = {} for i, x in ipairs(a) do r[i] = x[1] end return r end)() or {}, ","),
         table.concat((function() local r = {} for i, x in ipairs(b) do r[i] = x[1] end return r end)(), ","),
         "one seed, the same draws with and without the check")
  local f = grace.compile(function(p) return p:multinomial(1, {check = false}) end)
  local x1, x2 = f(probs:narrow(1, 1, 64)), f(probs:narrow(1, 1, 64))
  local st = f:stats()
  tap.ok(st.traces == 1 and st.replays == 0 and st.hits == 1, "compiled with check = false: no graph break")
  tap.ok(not grace.equal(x1, x2), "each compiled call draws new numbers")
  tap.raises(function() return probs:multinomial(1, {check = false, other = 1}) end, "multinomial: unknown option 'other'",
             "an unknown option is an error")
  tap.raises(function() return grace.tensor({1., -1.}):multinomial(1, {replacement = true}) end,
             "multinomial: invalid distribution", "the check stays on by default with an options table")
end)

section("top-k, top-p, temperature", function()
  local p = {0.5, 0.3, 0.15, 0.05}
  local l = grace.tensor(p):log():reshape({1, 4})
  local function kept(t)
    local r = {}
    for i, v in ipairs(t:reshape(-1):tolist()) do if v > -math.huge then r[#r + 1] = i end end
    return table.concat(r, ",")
  end
  tap.is(kept(gen.top_k(l, 2)), "1,2", "top_k 2 keeps the two largest")
  tap.is(kept(gen.top_k(l, 9)), "1,2,3,4", "top_k beyond the row keeps everything")
  tap.is(kept(gen.top_p(l, 0.4)), "1", "top_p 0.4: the top token alone reaches it")
  tap.is(kept(gen.top_p(l, 0.7)), "1,2", "top_p 0.7: 0.5 + 0.3")
  tap.is(kept(gen.top_p(l, 0.9)), "1,2,3", "top_p 0.9: 0.5 + 0.3 + 0.15")
  tap.is(kept(gen.top_p(l, 0.99)), "1,2,3,4", "top_p 0.99: all four")
  tap.is(kept(gen.top_p(grace.tensor({{0.0, 0.0, 0.0, -5.0}}), 0.5)), "1,2,3", "top_p keeps tokens tied with the last")
  tap.ok(grace.allclose(gen.temperature(l, 0.5), l * 2), "temperature divides the logits")
  tap.raises(function() return gen.top_p(l, 0) end, "top_p: p must be a number in (0, 1]", "top_p 0")
  tap.raises(function() return gen.top_k(l, 0) end, "top_k: k must be a positive integer", "top_k 0")
  tap.raises(function() return gen.temperature(l, -1) end, "temperature: expected a number > 0", "temperature < 0")
end)

section("gpt2: static and growing caches against the whole sequence", function()
  local ids = grace.randint(1, CFG.vocab + 1, {2, 7})
  local full = model:forward(ids, 1)
  local ck, cv = model:new_cache("static", 2, 10)
  local a = model:forward(ids:narrow(2, 1, 4), grace.tensor(1), "static", ck, cv)
  local b = model:forward(ids:narrow(2, 5, 1), grace.tensor(5), "static", ck, cv)
  local c = model:forward(ids:narrow(2, 6, 2), grace.tensor(6), "static", ck, cv)
  local got = grace.cat({a, b, c}, 2)
  tap.ok(grace.allclose(got, full, 1e-4, 1e-5), "static: prefill 4, decode 1, then 2 tokens give the full logits")
  local gk, gv = model:new_cache("growing", 2, 0)
  local x, y
  x, gk, gv = model:forward(ids:narrow(2, 1, 3), 1, "growing", gk, gv)
  y, gk, gv = model:forward(ids:narrow(2, 4, 4), 4, "growing", gk, gv)
  tap.ok(grace.allclose(grace.cat({x, y}, 2), full, 1e-4, 1e-5), "growing: 3 then 4 tokens give the full logits")
  tap.is(tostring(gk.shape), "{2, 2, 4, 7, 8}", "growing: the cache holds the 7 positions")
  tap.raises(function() return model:new_cache("paged", 1, 4) end, "unknown cache kind 'paged'", "cache kind")
  tap.raises(function() return model:new_cache("static", 1, 65) end, "expected 1 .. max_pos 64", "static beyond max_pos")
end)

section("gpt2.load: a Hugging Face-layout safetensors file", function()
  local path = os.tmpname() .. ".safetensors"
  local sd = model:state_dict()
  tap.is(tostring(sd["h.0.attn.c_attn.weight"].shape), "{32, 96}", "Conv1D weights are stored [in, out]")
  grace.save(path, sd)
  local m2 = gpt2.load(path, {heads = 4})
  local ids = grace.randint(1, CFG.vocab + 1, {1, 5})
  tap.ok(grace.equal(m2:forward(ids, 1), model:forward(ids, 1)), "the loaded model gives the same logits")
  tap.is(m2.config.layers, 2, "layers counted from the file")
  local pre = {}
  for k, v in pairs(sd) do pre["transformer." .. k] = v end
  grace.save(path, pre)
  tap.ok(grace.equal(gpt2.load(path, {heads = 4}):forward(ids, 1), model:forward(ids, 1)),
         "names with a transformer. prefix load too")
  sd["h.1.mlp.c_fc.bias"] = grace.zeros(3)
  grace.save(path, sd)
  tap.raises(function() return gpt2.load(path, {heads = 4}) end, {"'h2.fc.bias' has shape"}, "a wrong shape is an error")
  sd["h.1.mlp.c_fc.bias"] = nil
  grace.save(path, sd)
  tap.raises(function() return gpt2.load(path, {heads = 4}) end, {"has no tensor 'h.1.mlp.c_fc.bias'"},
             "a missing tensor is an error")
  os.remove(path)
  os.remove(path:sub(1, -13))
end)

section("argument errors", function()
  tap.raises(function() return gen.generate(model, prompt, {max_tokens = 3}) end, "generate: unknown option 'max_tokens'",
             "unknown option")
  tap.raises(function() return gen.generate(model, prompt, {cache = "paged"}) end, "cache must be \"static\" or",
             "bad cache kind")
  tap.raises(function() return gen.generate(model, prompt:float(), {}) end, "prompt_ids must be an integer tensor",
             "float prompt")
  tap.raises(function() return gen.generate({}, prompt, {}) end, "the model must have forward", "not a model")
  tap.raises(function() return gpt2.new({layers = 1, d = 30, heads = 4, vocab = 5, max_pos = 4}) end,
             "d 30 is not divisible by heads 4", "bad config")
end)

section("examples/generate.lua --small", function()
  local i = -1
  while arg[i - 1] do i = i - 1 end
  local p = io.popen(("'%s' examples/generate.lua --small --new 6 2>&1"):format(arg[i]))
  local out = p:read("a")
  local ok = p:close()
  tap.ok(ok, "it runs")
  tap.ok(out:find("time to first token", 1, true) and out:find("tokens/s", 1, true),
         "it prints time to first token and tokens/s")
  tap.ok(not out:find("token 6/6", 1, true), "no progress line when stdout is not a terminal")
  local json = os.tmpname()
  p = io.popen(("'%s' bench/workloads/gpt2_generate.lua --device cpu --small --batch 2 --dtype float32 --reps 2 --warmup 2 --json '%s' 2>&1")
               :format(arg[i], json))
  out = p:read("a")
  ok = p:close()
  tap.ok(ok, "bench/workloads/gpt2_generate.lua --small runs")
  local row = out:match("float32%s+2%s+static%s+compiled([^\n]*)")
  local t3, r3, tt, rt = (row or ""):match("%s(%d+)/(%d+)%s+(%d+)/(%d+)")
  tap.ok(t3 == "0" and r3 == "0" and tt == "0" and rt == "0" and not row:find("DIFFER", 1, true),
         "its static compiled run: no trace or graph record after 3 tokens nor in the timed runs, which repeat")
  local f = io.open(json)
  local text = f and f:read("a") or ""
  if f then f:close() end
  tap.ok(text:find('"tokens_per_s"', 1, true) and text:find('"traces_after_3_tokens": 0', 1, true), "it writes JSON")
  os.remove(json)
end)

tap.done()
