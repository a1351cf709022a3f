-- train_mlp.lua: trains a small MLP classifier on a synthetic dataset (points of three interleaved spirals) with
-- cross-entropy and AdamW under a cosine schedule, the whole step (forward, backward, update) compiled into one
-- program. Prints the loss every `every` steps and the final training accuracy; on a terminal a progress line too.
-- usage: grace examples/train_mlp.lua [steps=300] [batch=256] [hidden=64] [lr=0.01] [every=50] [seed=0]
--        [compile=1] [device=cpu|cuda]
local nn = require "grace.nn"

local cfg = {steps = 300, batch = 256, hidden = 64, lr = 0.01, every = 50, seed = 0, compile = 1, device = nil}
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^%-*([%w_]+)=(.+)$")
  if not k or (cfg[k] == nil and k ~= "device") then
    error("unknown argument '" .. a .. "' (expected key=value: steps, batch, hidden, lr, every, seed, compile, device)", 0)
  end
  cfg[k] = math.tointeger(tonumber(v)) or tonumber(v) or v
end
grace.manual_seed(cfg.seed)
local device = cfg.device or grace.device()

-- Three spirals in the plane, with noise: class c's points at angle t + 2 pi c / 3, radius t.
local function spirals(n)
  local t = grace.rand(n) * 3 + 0.3
  local class = grace.randint(1, 4, {n})
  local angle = t * 2.2 + (class - 1):double():float() * (2 * math.pi / 3)
  local x = grace.stack({t * angle:cos(), t * angle:sin()}, 2) + grace.randn(n, 2) * 0.08
  return x:to(device), class:to(device)
end

local x, y = spirals(cfg.batch * 4)
local model = nn.Sequential(nn.Linear(2, cfg.hidden), nn.GELU(), nn.Linear(cfg.hidden, cfg.hidden), nn.GELU(),
                            nn.Linear(cfg.hidden, 3)):to(device)
local opt = grace.optim.AdamW(model, {lr = cfg.lr, weight_decay = 1e-4})
local sched = grace.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps, cfg.lr / 20)

local function train_step(xb, yb)
  opt:zero_grad()
  local loss = grace.cross_entropy(model(xb), yb)
  loss:backward()
  opt:step()
  return loss
end
local step_fn = cfg.compile ~= 0 and grace.compile(train_step) or train_step

local tty = grace.isatty("stdout")
local n = x:size(1)
for step = 1, cfg.steps do
  local first = ((step - 1) * cfg.batch) % n + 1
  local xb, yb = x:narrow(1, first, cfg.batch), y:narrow(1, first, cfg.batch)
  local loss = step_fn(xb, yb)
  sched:step()
  if step % cfg.every == 0 or step == 1 then
    if tty then io.write("\r\27[K") end
    print(("step %4d  loss %.4f  lr %.5f"):format(step, loss:item(), opt:get_lr()))
  elseif tty then
    io.write(("\rstep %d/%d"):format(step, cfg.steps))
    io.flush()
  end
end
if tty then io.write("\r\27[K") end

model:eval()
local acc = grace.no_grad(function() return model(x):argmax(-1):eq(y):double():mean():item() end)
print(("training accuracy %.1f%%"):format(100 * acc))
if cfg.compile ~= 0 then
  local s = step_fn:stats()
  print(("compiled step: %d trace(s), %d compiled calls, %d eager"):format(s.traces, s.hits, s.eager_calls))
end
