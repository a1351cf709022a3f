-- train_gpt.lua: a tiny character-level GPT (nn.GPT: token and position embeddings, causal TransformerBlocks, a final
-- LayerNorm and a linear head) trained on the characters of a text file (examples/train_gpt.txt by default) with
-- cross-entropy and AdamW, the whole step compiled into one program. Samples a few lines before and after training.
-- usage: grace examples/train_gpt.lua [steps=300] [batch=16] [ctx=32] [d=64] [heads=4] [layers=2] [lr=3e-3]
--        [every=50] [seed=0] [compile=1] [device=cpu|cuda] [text=examples/train_gpt.txt]
local nn = require "grace.nn"

local cfg = {steps = 300, batch = 16, ctx = 32, d = 64, heads = 4, layers = 2, lr = 3e-3, every = 50, seed = 0,
             compile = 1, device = nil, text = nil}
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^%-*([%w_]+)=(.+)$")
  if not k or (cfg[k] == nil and k ~= "device" and k ~= "text") then
    error("unknown argument '" .. a .. "' (expected key=value: steps, batch, ctx, d, heads, layers, lr, every, seed, "
          .. "compile, device, text)", 0)
  end
  cfg[k] = math.tointeger(tonumber(v)) or tonumber(v) or v
end
grace.manual_seed(cfg.seed)
local device = cfg.device or grace.device()

-- the text next to this script unless one is given
local path = cfg.text or ((arg and arg[0] or ""):match("^(.*[/\\])") or "") .. "train_gpt.txt"
local f = assert(io.open(path, "rb"))
local text = f:read("a")
f:close()

-- the vocabulary: the distinct characters, ids 1..V in byte order
local ids, chars = {}, {}
for ch in text:gmatch(".") do ids[ch] = true end
for ch in pairs(ids) do chars[#chars + 1] = ch end
table.sort(chars)
for i, ch in ipairs(chars) do ids[ch] = i end
local V = #chars
local codes = {}
for i = 1, #text do codes[i] = ids[text:sub(i, i)] end
local data = grace.tensor(codes):to(device)
print(("%s: %d characters, %d distinct"):format(path, #text, V))

local model = nn.GPT(V, cfg.ctx, {d = cfg.d, heads = cfg.heads, layers = cfg.layers}):to(device)
local opt = grace.optim.AdamW(model, {lr = cfg.lr, weight_decay = 0.01})
local sched = grace.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps, cfg.lr / 10)

-- random windows of ctx + 1 characters: inputs and the next characters as targets
local offsets = grace.arange(0, cfg.ctx + 1):to(device)
local function batch()
  local start = grace.randint(1, data:size(1) - cfg.ctx, {cfg.batch, 1}):to(device)
  local w = data:index_select(1, (start + offsets):reshape(-1)):reshape(cfg.batch, cfg.ctx + 1)
  return w:narrow(2, 1, cfg.ctx), w:narrow(2, 2, cfg.ctx)
end

local function sample(n, prompt)
  model:eval()
  local out = {prompt}
  grace.no_grad(function()
    local ctx = {}
    for i = 1, #prompt do ctx[i] = ids[prompt:sub(i, i)] end
    for _ = 1, n do
      local window = {table.unpack(ctx, math.max(1, #ctx - cfg.ctx + 1))}
      local logits = model(grace.tensor({window}):to(device))
      local probs = logits:select(2, #window):softmax(-1)
      local next_id = probs:multinomial(1):reshape(1)[1]:item()
      ctx[#ctx + 1] = next_id
      out[#out + 1] = chars[next_id]
    end
  end)
  model:train()
  return table.concat(out)
end

local function train_step(x, y)
  opt:zero_grad()
  local logits = model(x)
  local loss = grace.cross_entropy(logits:reshape(-1, V), y:reshape(-1))
  loss:backward()
  opt:step()
  return loss
end
local step_fn = cfg.compile ~= 0 and grace.compile(train_step) or train_step

print("before training: " .. sample(60, "the "):gsub("\n", " "))
local tty = grace.isatty("stdout")
for step = 1, cfg.steps do
  local x, y = batch()
  local loss = step_fn(x, y)
  sched:step()
  if step % cfg.every == 0 or step == 1 then
    if tty then io.write("\r\27[K") end
    print(("step %4d  loss %.4f"):format(step, loss:item()))
  elseif tty then
    io.write(("\rstep %d/%d"):format(step, cfg.steps))
    io.flush()
  end
end
if tty then io.write("\r\27[K") end
for _ = 1, 3 do print("after training:  " .. sample(60, "the "):gsub("\n", " ")) end
if cfg.compile ~= 0 then
  local s = step_fn:stats()
  print(("compiled step: %d trace(s), %d compiled calls, %d eager"):format(s.traces, s.hits, s.eager_calls))
end
