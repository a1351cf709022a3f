-- grace.optim: optimizers (SGD with momentum, weight decay and Nesterov; AdamW) and learning-rate schedules (StepLR,
-- CosineAnnealingLR), written against the public tensor API. Every update is in place (p:copy_ under no_grad), and
-- the state (momentum buffers, moments, the step count) is made when the optimizer is, so a compiled training step
-- writes all of it back like any other in-place update. The learning rate is a 0-d tensor the optimizer owns: a
-- schedule changes its value in place, which a compiled step reads at run time instead of recording a new program.
-- The C binding (lua/lgrace.c) runs this chunk with the module table when grace opens; it sets grace.optim.
local opened = ...
local grace = type(opened) == "table" and opened or require "grace"   -- require "grace.NAME" passes a name

local optim = {}
local fmt = string.format

local function fail(msg) error(msg, 3) end

local function param_list(name, params)
  if type(params) == "table" and type(params.parameters) == "function" then params = params:parameters() end
  if type(params) ~= "table" or #params == 0 then
    fail(fmt("%s: expected a list of tensors (or a module), got %s", name, type(params)))
  end
  for i, p in ipairs(params) do
    if not grace.is_tensor(p) then fail(fmt("%s: parameter %d is not a tensor", name, i)) end
  end
  return params
end

local function number(name, what, v, default, min)
  if v == nil then v = default end
  if type(v) ~= "number" or (min and v < min) then
    fail(fmt("%s: %s must be a number%s, got %s", name, what, min and fmt(" >= %g", min) or "", tostring(v)))
  end
  return v
end

---------------------------------------------------------------------------------------------------------
local Optimizer = {}
Optimizer.__index = Optimizer
optim.Optimizer = Optimizer

local function new(cls, name, params, opts)
  local self = setmetatable({}, cls)
  self.name = name
  self.params = param_list(name, params)
  -- kept only as a host 0-d tensor (it goes where the op runs): a compiled step guards the numbers it can reach
  -- from its upvalues, so a plain number here would make each new learning rate a new trace
  self.lr_tensor = grace.tensor(number(name, "lr", opts.lr, cls.default_lr, 0), {dtype = "float64"})
  return self
end

-- The learning rate now; set_lr changes it in place (a compiled step reads the new value, it is not retraced).
function Optimizer:get_lr() return self.lr_tensor:item() end
function Optimizer:set_lr(lr)
  number(self.name, "lr", lr, nil, 0)
  grace.no_grad(function() self.lr_tensor:fill_(lr) end)
end

-- zero_grad(params [, set_to_none=true]): clears the gradients of a list of tensors (set_to_none: grad becomes
-- nil; false: zeroed in place). Optimizer:zero_grad and nn's Module:zero_grad both call it. A local, not a field
-- read through `optim`: a compiled step walks the upvalues of the methods it reaches, and `optim` would take it
-- through every class and schedule here.
local function zero_grad(params, set_to_none)
  for _, p in ipairs(params) do
    if set_to_none == false then
      local g = p.grad
      if g then grace.no_grad(function() g:zero_() end) end
    else
      p.grad = nil
    end
  end
end

optim.zero_grad = zero_grad

function Optimizer:zero_grad(set_to_none) zero_grad(self.params, set_to_none) end

---------------------------------------------------------------------------------------------------------
-- SGD(params, {lr=, momentum=0, weight_decay=0, nesterov=false}), as PyTorch's (dampening 0):
--   d = g + wd p; buf = momentum buf + d; d = nesterov and d + momentum buf or buf; p = p - lr d
local SGD = {}
SGD.__index = SGD
optim.SGD = SGD

setmetatable(SGD, {__index = Optimizer, __call = function(cls, params, opts)
  opts = opts or {}
  local self = new(cls, "SGD", params, opts)
  self.momentum = number("SGD", "momentum", opts.momentum, 0, 0)
  self.weight_decay = number("SGD", "weight_decay", opts.weight_decay, 0, 0)
  self.nesterov = opts.nesterov and true or false
  if self.nesterov and self.momentum == 0 then fail("SGD: nesterov needs a momentum") end
  self.state = {}
  if self.momentum ~= 0 then
    for i, p in ipairs(self.params) do self.state[i] = {momentum_buffer = grace.zeros_like(p)} end
  end
  return self
end})

function SGD:step()
  local lr, mom, wd = self.lr_tensor, self.momentum, self.weight_decay
  grace.no_grad(function()
    for i, p in ipairs(self.params) do
      local d = p.grad
      if d then
        if wd ~= 0 then d = d + p * wd end
        if mom ~= 0 then
          local buf = self.state[i].momentum_buffer
          buf:copy_(buf * mom + d)
          d = self.nesterov and d + buf * mom or buf
        end
        p:copy_(p - d * lr)
      end
    end
  end)
end

---------------------------------------------------------------------------------------------------------
-- AdamW(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=1e-2}), as PyTorch's:
--   p = p (1 - lr wd); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; t = t + 1;
--   p = p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
local AdamW = {default_lr = 1e-3}
AdamW.__index = AdamW
optim.AdamW = AdamW

setmetatable(AdamW, {__index = Optimizer, __call = function(cls, params, opts)
  opts = opts or {}
  local self = new(cls, "AdamW", params, opts)
  local betas = opts.betas or {0.9, 0.999}
  self.beta1 = number("AdamW", "betas[1]", betas[1], nil, 0)
  self.beta2 = number("AdamW", "betas[2]", betas[2], nil, 0)
  if self.beta1 >= 1 or self.beta2 >= 1 then fail("AdamW: betas must be below 1") end
  self.eps = number("AdamW", "eps", opts.eps, 1e-8, 0)
  self.weight_decay = number("AdamW", "weight_decay", opts.weight_decay, 1e-2, 0)
  self.state = {}
  for i, p in ipairs(self.params) do
    -- the step count per parameter, a tensor so that a compiled step counts without retracing
    self.state[i] = {exp_avg = grace.zeros_like(p), exp_avg_sq = grace.zeros_like(p),
                     step = grace.zeros({}, {dtype = "float64", device = p.device})}
  end
  return self
end})

function AdamW:step()
  local lr, b1, b2, eps, wd = self.lr_tensor, self.beta1, self.beta2, self.eps, self.weight_decay
  grace.no_grad(function()
    for i, p in ipairs(self.params) do
      local g = p.grad
      if g then
        local s = self.state[i]
        local m, v, t = s.exp_avg, s.exp_avg_sq, s.step
        t:copy_(t + 1)
        if wd ~= 0 then p:copy_(p * (1 - lr * wd)) end
        m:copy_(m * b1 + g * (1 - b1))
        v:copy_(v * b2 + g * g * (1 - b2))
        local bc1, bc2 = 1 - b1 ^ t, 1 - b2 ^ t
        p:copy_(p - (m / bc1) / ((v / bc2):sqrt() + eps) * lr)
      end
    end
  end)
end

---------------------------------------------------------------------------------------------------------
-- Schedules: sched:step() after each epoch (or step) sets the optimizer's learning rate from its base one.
local lr_scheduler = {}
optim.lr_scheduler = lr_scheduler

local Scheduler = {}
Scheduler.__index = Scheduler
function Scheduler:get_last_lr() return self.optimizer:get_lr() end
function Scheduler:step()
  self.last_epoch = self.last_epoch + 1
  self.optimizer:set_lr(self:lr_at(self.last_epoch))
end

local function scheduler(cls, name, opt)
  if type(opt) ~= "table" or type(opt.set_lr) ~= "function" then fail(fmt("%s: expected an optimizer", name)) end
  return setmetatable({optimizer = opt, base_lr = opt:get_lr(), last_epoch = 0}, cls)
end

-- StepLR(opt, step_size [, gamma=0.1]): base_lr gamma^floor(epoch / step_size)
local StepLR = {}
StepLR.__index = StepLR
lr_scheduler.StepLR = StepLR
setmetatable(StepLR, {__index = Scheduler, __call = function(cls, opt, step_size, gamma)
  local self = scheduler(cls, "StepLR", opt)
  self.step_size = number("StepLR", "step_size", step_size, nil, 1)
  self.gamma = number("StepLR", "gamma", gamma, 0.1, 0)
  return self
end})
function StepLR:lr_at(e) return self.base_lr * self.gamma ^ (e // self.step_size) end

-- CosineAnnealingLR(opt, T_max [, eta_min=0]): eta_min + (base_lr - eta_min) (1 + cos(pi epoch / T_max)) / 2
local Cosine = {}
Cosine.__index = Cosine
lr_scheduler.CosineAnnealingLR = Cosine
setmetatable(Cosine, {__index = Scheduler, __call = function(cls, opt, t_max, eta_min)
  local self = scheduler(cls, "CosineAnnealingLR", opt)
  self.t_max = number("CosineAnnealingLR", "T_max", t_max, nil, 1)
  self.eta_min = number("CosineAnnealingLR", "eta_min", eta_min, 0, 0)
  return self
end})
function Cosine:lr_at(e)
  return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * e / self.t_max)) / 2
end

grace.optim = optim
return optim
