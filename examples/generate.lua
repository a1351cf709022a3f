-- generate.lua: text generation with a GPT-2-small-sized model (grace.gpt2): the prompt in one compiled call
-- (prefill), then one compiled call per token (decode) with a KV cache, and the speed: time to first token and
-- tokens per second. Weights come from a Hugging Face GPT-2 safetensors file when one is given (model.safetensors
-- of "gpt2"), seeded random numbers otherwise; the prompt is seeded random token ids (there is no tokenizer here).
-- A progress line is shown only when stdout is a terminal.
-- usage: grace examples/generate.lua [--weights model.safetensors] [--small] [--device cpu|cuda]
--          [--dtype float32|bfloat16] [--batch 1] [--prompt 16] [--new 256] [--cache static|growing]
--          [--temperature 0 (greedy)] [--top-k K] [--top-p P] [--seed 0] [--eos ID]
-- --small (or GRACE_GENERATE_SMALL=1): a tiny model, 8 new tokens, for a quick run on the CPU.
local gpt2 = require "grace.gpt2"
local gen = require "grace.generate"

local opt = {batch = 1, prompt = 16, new = 256, cache = "static", temperature = 0, seed = 0, dtype = "float32"}
local NUM = {batch = true, prompt = true, new = true, temperature = true, ["top-k"] = true, ["top-p"] = true,
             seed = true, eos = true}
do
  local a, i = arg or {}, 1
  while i <= #a do
    local k, v = a[i]:match("^%-%-([%w-]+)=(.*)$")
    if not k then k = a[i]:match("^%-%-([%w-]+)$") end
    if not k then error("generate.lua: unexpected argument '" .. a[i] .. "'", 0) end
    if k == "small" then
      opt.small = true
    elseif k == "help" then
      print("usage: grace examples/generate.lua [--weights F] [--small] [--device D] [--dtype T] [--batch B] "
            .. "[--prompt N] [--new N] [--cache static|growing] [--temperature T] [--top-k K] [--top-p P] [--seed S] "
            .. "[--eos ID]")
      os.exit(0)
    else
      if v == nil then i = i + 1; v = a[i] end
      if v == nil then error("generate.lua: --" .. k .. " needs a value", 0) end
      if NUM[k] then v = math.tointeger(tonumber(v)) or tonumber(v) or error("generate.lua: --" .. k .. " needs a number", 0) end
      if not (NUM[k] or k == "weights" or k == "device" or k == "dtype" or k == "cache") then
        error("generate.lua: unknown option --" .. k, 0)
      end
      opt[k] = v
    end
    i = i + 1
  end
end
if os.getenv("GRACE_GENERATE_SMALL") == "1" then opt.small = true end
if opt.small and opt.new == 256 then opt.new = 8 end

local device = opt.device or ((grace.cuda_available and grace.cuda_available()) and "cuda" or "cpu")
grace.manual_seed(opt.seed)
local model
if opt.weights then
  model = gpt2.load(opt.weights, {dtype = opt.dtype, device = device})
else
  model = gpt2.new(opt.small and "tiny" or "small", {dtype = opt.dtype, device = device})
end
local c = model.config
if opt.prompt + opt.new > c.max_pos then
  error(("generate.lua: %d prompt + %d new tokens exceed the model's %d positions"):format(opt.prompt, opt.new,
        c.max_pos), 0)
end
local prompt = grace.randint(1, c.vocab + 1, {opt.batch, opt.prompt})
print(("%s%s; batch %d, %d-token prompt, %d new tokens, %s cache, %s"):format(tostring(model),
      opt.weights and (" from " .. opt.weights) or ", seeded random weights", opt.batch, opt.prompt, opt.new,
      opt.cache, opt.temperature == 0 and "greedy" or ("temperature " .. opt.temperature)))

-- a progress line only on a terminal (os.execute is absent in a sandbox: no progress there)
local tty = os.execute and os.execute("test -t 1") == true
local on_token
if tty then
  on_token = function(i)
    if i % 8 == 0 or i == opt.new then io.write(("\r  token %d/%d"):format(i, opt.new)); io.flush() end
  end
end

-- a short run first: it traces and compiles prefill and decode (kept by grace.generate for this model), so
-- the timed run below measures generation, not compilation
local gopts = {temperature = opt.temperature, top_k = opt["top-k"], top_p = opt["top-p"], cache = opt.cache}
gopts.max_new_tokens = math.min(2, opt.new)
local t0 = grace.clock()
gen.generate(model, prompt, gopts)
print(("warm-up (trace and compile prefill and decode): %.2f s"):format(grace.clock() - t0))

local ids, info = gen.generate(model, prompt, {max_new_tokens = opt.new, temperature = opt.temperature,
                                               top_k = opt["top-k"], top_p = opt["top-p"], eos = opt.eos,
                                               cache = opt.cache, on_token = on_token})
if tty then io.write("\r\27[K") end
local first = ids:narrow(2, opt.prompt + 1, math.min(info.new_tokens, 16)):select(1, 1):tolist()
print(("first new tokens of row 1: %s%s"):format(table.concat(first, " "), info.new_tokens > 16 and " ..." or ""))
local decode_tps = info.new_tokens > 1 and opt.batch * (info.new_tokens - 1) / info.decode_s or 0
print(("time to first token %.1f ms; %d tokens in %.3f s: %.1f tokens/s overall, "
       .. "%.1f tokens/s decoding"):format(info.first_token_s * 1e3, opt.batch * info.new_tokens, info.total_s,
      info.tokens_per_s, decode_tps))
