-- test_gpu_generate.lua: text generation (grace.generate, grace.gpt2) on CUDA against the CPU. A small GPT-2
-- (float32) generates greedily with a static and a growing cache on both devices, three times (the compiled prefill
-- first runs in the second, and each generation makes new caches): the tokens must be equal, the static decode step
-- one trace for every position. Sampling with one seed gives the same tokens on both devices (grace's Philox stream;
-- the logits agree closely enough that no draw flips for this model), multinomial draws the same indices, top-k and
-- top-p keep the same tokens, and bfloat16 generation runs with a static cache in one decode trace. The launch
-- strategy of the decode step (f:report()) is printed as a diag line.
-- Without a usable CUDA device it prints a TAP skip plan; GRACE_TEST_DEVICE=cpu runs it CPU against CPU.
local tap = require "tests.lua.tap"
local grace = require "grace"
local gpt2 = require "grace.gpt2"
local gen = require "grace.generate"

local H = require "tests.lua.gpu_harness"
local DEV = H.DEV

local CFG = {layers = 2, d = 64, heads = 4, vocab = 301, max_pos = 96}
local function model_on(device, dtype)
  grace.manual_seed(31)
  return gpt2.new(CFG, {device = device, dtype = dtype, make = function(_, shape, kind)
    if kind == "ln_w" then return grace.randn(shape) * 0.1 + 1 end
    return grace.randn(shape) * (kind == "w" and 0.25 or 0.1)
  end})
end

local cpu, dev = model_on("cpu"), model_on(DEV)
grace.manual_seed(4)
local prompt = grace.randint(1, CFG.vocab + 1, {3, 16})
local N = 24

for _, kind in ipairs({"static", "growing"}) do
  local want = gen.generate(cpu, prompt, {max_new_tokens = N, temperature = 0, cache = kind})
  local got, info = gen.generate(dev, H.to_dev(prompt), {max_new_tokens = N, temperature = 0, cache = kind})
  tap.is(got.device, DEV, kind .. ": the tokens are on the device")
  tap.ok(grace.equal(got:cpu(), want), kind .. ": greedy tokens equal the CPU's")
  if kind == "static" then
    local d = info.steps.decode:stats()
    tap.ok(d.traces == 1 and d.hits == N - 2, "static: one decode trace for every position")
    for _, r in ipairs(info.steps.decode:report()) do
      tap.diag(("decode program: strategy %s, %d kernels, graphs %s%s"):format(tostring(r.strategy), r.kernels or 0,
               tostring(r.graphs), r.no_graph and (", no graph: " .. r.no_graph) or ""))
    end
    tap.diag(("%.1f tokens/s (3 rows, %d new tokens, compile included)"):format(info.tokens_per_s, N))
  end
  -- later generations: the compiled prefill runs from the second call on (the first traces it), and the steps'
  -- graphs are replayed on caches each generation makes anew
  for again = 2, 3 do
    local g2 = gen.generate(dev, H.to_dev(prompt), {max_new_tokens = N, temperature = 0, cache = kind})
    tap.ok(grace.equal(g2:cpu(), want), ("%s: generation %d: greedy tokens equal the CPU's"):format(kind, again))
  end
end

do
  local opts = {max_new_tokens = N, temperature = 0.9, top_k = 50, top_p = 0.9}
  grace.manual_seed(99)
  local want = gen.generate(cpu, prompt, opts)
  grace.manual_seed(99)
  local got = gen.generate(dev, H.to_dev(prompt), opts)
  local same = got:cpu():eq(want):sum():item()
  tap.ok(same == want:numel(), ("sampling, one seed: the CPU's tokens (%d of %d equal)"):format(same, want:numel()))
end

do
  local p = grace.rand(64, 40):pow(3)
  grace.manual_seed(5)
  local a = p:multinomial(1, {check = false})
  grace.manual_seed(5)
  local b = H.to_dev(p):multinomial(1, {check = false})
  tap.ok(grace.equal(b:cpu(), a), "multinomial: one seed, the same draws")
  grace.manual_seed(6)
  local c = p:multinomial(3)
  grace.manual_seed(6)
  local d = H.to_dev(p):multinomial(3)
  tap.ok(grace.equal(d:cpu(), c), "multinomial without replacement: the same draws")
  local l = grace.randn(4, 5000) * 3
  local dl = H.to_dev(l)
  tap.ok(grace.equal(gen.top_k(dl, 40):gt(-math.huge):cpu(), gen.top_k(l, 40):gt(-math.huge)), "top_k: the same tokens kept")
  tap.ok(grace.equal(gen.top_p(dl, 0.9):gt(-math.huge):cpu(), gen.top_p(l, 0.9):gt(-math.huge)), "top_p: the same tokens kept")
end

do
  local m = model_on(DEV, "bfloat16")
  local ids, info = gen.generate(m, H.to_dev(prompt), {max_new_tokens = N, temperature = 0})
  local lo, hi = ids:min():item(), ids:max():item()
  tap.ok(lo >= 1 and hi <= CFG.vocab and ids:size(2) == 16 + N, "bfloat16: tokens in range")
  tap.is(info.steps.decode:stats().traces, 1, "bfloat16: one decode trace")
end

tap.done()
