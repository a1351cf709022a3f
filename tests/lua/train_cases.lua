-- train_cases.lua: the two models both training-step tests run (test_train_steps.lua on the CPU,
-- test_gpu_train_steps.lua on CUDA): an 8-layer MLP (width 64, MSE against a random target) and the tiny GPT of
-- examples/train_gpt.lua (nn.GPT: 2 layers, d 32, 4 heads, vocab 64, seq 16, cross-entropy on next ids), each
-- with AdamW, and the step as users write it.
local grace = require "grace"
local nn = require "grace.nn"

local C = {STEPS = 100, LR = 1e-3}

-- case.make(dtype): the model (the same weights for the same seed); case.batches(dtype): 4 (x, y) batches on the
-- CPU, drawn from the generator; case.loss(model, x, y).
C.cases = {
  {
    name = "8-layer MLP (width 64, MSE)",
    make = function(dtype)
      local layers = {}
      for _ = 1, 8 do
        layers[#layers + 1] = nn.Linear(64, 64)
        layers[#layers + 1] = nn.GELU()
      end
      return nn.Sequential(layers):to(dtype)
    end,
    batch = function(dtype) return grace.randn(8, 64):to(dtype), grace.randn(8, 64):to(dtype) end,
    loss = function(model, x, y) return grace.mse_loss(model(x), y) end,
  },
  {
    name = "tiny GPT (2 layers, d 32, vocab 64, seq 16, cross-entropy)",
    make = function(dtype) return nn.GPT(64, 16, {d = 32, heads = 4, layers = 2}):to(dtype) end,
    batch = function()   -- 4 windows of 17 random ids: the first 16 in, the last 16 as targets
      local w = grace.randint(1, 65, {4, 17})
      return w:narrow(2, 1, 16), w:narrow(2, 2, 16)
    end,
    loss = function(model, x, y) return grace.cross_entropy(model(x):reshape(-1, 64), y:reshape(-1)) end,
  },
}

-- A model and its AdamW from seed 3 (the same weights every time).
function C.setup(case, dtype)
  grace.manual_seed(3)
  local model = case.make(dtype)
  return model, grace.optim.AdamW(model, {lr = C.LR})
end

function C.batches(case, dtype)
  local b = {}
  for k = 1, 4 do b[k] = {case.batch(dtype)} end
  return b
end

function C.step(case, model, opt, x, y)
  opt:zero_grad()
  local loss = case.loss(model, x, y)
  loss:backward()
  opt:step()
  return loss
end

-- The largest |a - b| over two lists of parameters (b may live on another device).
function C.largest_difference(pa, pb)
  local worst = 0
  for k = 1, #pa do worst = math.max(worst, (pa[k]:double() - pb[k]:cpu():double()):abs():max():item()) end
  return worst
end

-- Runs C.STEPS steps of the eager step on (model1, opt1) and of the compiled one f, the inputs cycling through
-- batches (to_dev moves an input for f). Returns the largest loss difference (relative to max(1, |loss|)), the
-- largest parameter difference, the first step over tol = {loss=, param=} (or nil), the first and last loss.
function C.compare(case, model1, opt1, f, model2, batches, tol, to_dev)
  local worst_loss, worst_param, bad, first, last = 0, 0, nil, nil, nil
  local dev = {}
  for k, b in ipairs(batches) do dev[k] = {to_dev(b[1]), to_dev(b[2])} end
  local pa, pb = model1:parameters(), model2:parameters()
  for i = 1, C.STEPS do
    local k = (i - 1) % #batches + 1
    local a = C.step(case, model1, opt1, batches[k][1], batches[k][2]):item()
    local b = f(dev[k][1], dev[k][2]):item()
    local dl = math.abs(a - b) / math.max(1, math.abs(a))
    local dp = C.largest_difference(pa, pb)
    worst_loss, worst_param = math.max(worst_loss, dl), math.max(worst_param, dp)
    if not bad and not (dl <= tol.loss and dp <= tol.param) then bad = i end
    first = first or a
    last = a
  end
  return worst_loss, worst_param, bad, first, last
end

return C
