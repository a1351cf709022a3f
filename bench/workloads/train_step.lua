-- train_step.lua: benchmark workload "train_step": one whole training step per call, as users write it
-- (opt:zero_grad(); loss = loss_fn(model(x), y); loss:backward(); opt:step()), the weights and AdamW's moments
-- updated in place, the loss returned. Two variants:
--   train_step_mlp: the mlp workload's model (8 x (Linear 1024->1024 + exact GELU), batch 8, its weights named
--                   tmlp.*), MSE against a target batch;
--   train_step_gpt: the tiny GPT of examples/train_gpt.lua (nn.GPT: 2 layers, d 64, 4 heads, context 32), a
--                   character-sized vocabulary of 64, batch 16, cross-entropy on next ids.
-- AdamW(lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 1e-2) on both sides. A step changes the weights, so the
-- workload has state: w.reset() puts back the initial weights and zeroes the optimizer's state, and run.lua checks
-- it on the losses of NPOOL steps from that state, one per pool input (the same on PyTorch's side). The same
-- models are bench/torch/workloads.py's (wl_train.py); weights and inputs come from ctx.tensor under the names
-- used there.
local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local mlp = dofile(HERE .. "/mlp.lua")
local nn = require "grace.nn"

local M = {name = "train_step", variants = {{name = "train_step_mlp", dtype = "float32"},
                                             {name = "train_step_gpt", dtype = "float32"}}}
local ADAMW = {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 1e-2}

function M.config(variant, small)
  if variant == "train_step_mlp" then return mlp.config(small) end
  if small then return {layers = 2, d = 32, heads = 4, vocab = 64, seq = 16, batch = 4} end
  return {layers = 2, d = 64, heads = 4, vocab = 64, seq = 32, batch = 16}
end

-- The tiny GPT with its weights from ctx.tensor, named tgpt.<parameter name>: matrices N(0, 0.02) (nn.GPT's
-- init), LayerNorm scales 1 and shifts 0, the Linear biases N(0, 0.02) (nonzero, so their gradients are checked).
local function gpt_model(ctx, c)
  local model = nn.GPT(c.vocab, c.seq, {d = c.d, heads = c.heads, layers = c.layers}):to(ctx.device)
  local own, names = model:named_parameters()
  local map = {}
  for _, name in ipairs(names) do
    local init = {"normal", 0.02}
    if name:match("ln_%w+%.weight$") then init = {"normal", 0, 1}
    elseif name:match("ln_%w+%.bias$") then init = {"normal", 0} end
    map[name] = ctx.tensor("tgpt." .. name, own[name]:size(), init)
  end
  model:load_parameters(map)
  return model
end

-- ctx: see run.lua. Returns {description, fn, pool, flops, min_bytes, reset}.
function M.build(ctx)
  local c = M.config(ctx.variant, ctx.small)
  local model, loss_fn, pool, desc, fwd_flops = nil, nil, {}, nil, nil
  if ctx.variant == "train_step_mlp" then
    model = mlp.model(ctx, "tmlp", c)
    for _, p in ipairs(model:parameters()) do p:requires_grad_() end
    for k = 1, ctx.npool do
      pool[k] = {ctx.tensor(("tmlp.x.%d"):format(k), {c.batch, c.d}, {"normal", 1}),
                 ctx.tensor(("tmlp.y.%d"):format(k), {c.batch, c.d}, {"normal", 1})}
    end
    loss_fn = function(out, y) return grace.mse_loss(out, y) end
    desc = ("%d x (Linear %d->%d + GELU), batch %d, MSE"):format(c.layers, c.d, c.d, c.batch)
    fwd_flops = 2 * c.layers * c.batch * c.d * c.d
  else
    model = gpt_model(ctx, c)
    for k = 1, ctx.npool do   -- 0-based ids on file, 1-based here
      pool[k] = {ctx.tensor(("tgpt.x.%d"):format(k), {c.batch, c.seq}, {"randint", 0, c.vocab}) + 1,
                 ctx.tensor(("tgpt.y.%d"):format(k), {c.batch, c.seq}, {"randint", 0, c.vocab}) + 1}
    end
    loss_fn = function(logits, y) return grace.cross_entropy(logits:reshape(-1, c.vocab), y:reshape(-1)) end
    desc = ("GPT, %d layers, d %d, %d heads, vocab %d, batch %d x %d tokens, cross-entropy"):format(
      c.layers, c.d, c.heads, c.vocab, c.batch, c.seq)
    local tokens, d = c.batch * c.seq, c.d
    fwd_flops = c.layers * (2 * tokens * d * 4 * d + 2 * 2 * tokens * c.seq * d + 2 * tokens * d * 8 * d)
      + 2 * tokens * d * c.vocab
  end
  local opt = grace.optim.AdamW(model, ADAMW)
  local params = model:parameters()
  local initial, pbytes = {}, 0
  for i, p in ipairs(params) do
    initial[i] = p:detach():clone()
    pbytes = pbytes + p:numel() * 4
  end

  -- the parameters under the names their weights have on file (PyTorch's side names its gradients so)
  local named = {}
  if ctx.variant == "train_step_mlp" then
    for i, p in ipairs(params) do
      named[i] = {name = ("tmlp.fc%d.%s"):format((i + 1) // 2, i % 2 == 1 and "weight" or "bias"), t = p}
    end
  else
    local own, names = model:named_parameters()
    for i, n in ipairs(names) do named[i] = {name = "tgpt." .. n, t = own[n]} end
  end

  local function reset()
    grace.no_grad(function()
      for i, p in ipairs(params) do
        p:copy_(initial[i])
        local s = opt.state[i]
        s.exp_avg:zero_()
        s.exp_avg_sq:zero_()
        s.step:zero_()
      end
    end)
  end

  local function step(x, y)
    opt:zero_grad()
    local loss = loss_fn(model(x), y)
    loss:backward()
    opt:step()
    return loss
  end
  return {
    description = desc .. ", AdamW, one step per call",
    -- run.lua turns grad mode off for the inference workloads: a training step turns it on for itself
    fn = function(x, y) return grace.enable_grad(step, x, y) end,
    pool = pool,
    flops = 3 * fwd_flops,   -- forward, and the backward's two matmuls per forward matmul
    -- the weights read by the forward and by the backward, and AdamW reading and writing the weights and both
    -- moments (a gradient consumed where it is made is never stored), one input batch, the loss
    min_bytes = 8 * pbytes,
    reset = reset,
    -- each parameter's gradient after one forward and backward from the initial state
    grads = function(x, y)
      reset()
      opt:zero_grad()
      grace.enable_grad(function() loss_fn(model(x), y):backward() end)
      local out = {}
      for i, p in ipairs(named) do out[i] = {name = p.name, grad = p.t.grad} end
      return out
    end,
  }
end

return M
