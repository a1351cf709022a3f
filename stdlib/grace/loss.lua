-- grace.loss: the loss functions (cross_entropy, nll_loss, mse_loss, binary_cross_entropy_with_logits), composed
-- from the op table's ops so that autograd differentiates them and they trace, fuse and run on every device like
-- any other code. Class targets are indices in the VM's base (1-based in Lua), as gather and embedding take them.
-- The C binding (lua/lgrace.c) runs this chunk with the module table when grace opens.
local opened = ...
local grace = type(opened) == "table" and opened or require "grace"   -- require "grace.NAME" passes a name

local fmt = string.format

local function reduction_of(op, opts)
  local r = opts and opts.reduction or "mean"
  if r ~= "mean" and r ~= "sum" and r ~= "none" then
    error(fmt("%s: reduction must be 'mean', 'sum' or 'none', got %s", op, tostring(r)), 4)
  end
  return r
end

local function check_tensor(op, what, x)
  if not grace.is_tensor(x) then error(fmt("%s: %s must be a tensor, got %s", op, what, type(x)), 4) end
end

local function shape_str(t) return "[" .. table.concat(t:size(), ", ") .. "]" end

local function reduce(loss, r, count)
  if r == "none" then return loss end
  if r == "sum" then return loss:sum() end
  return count and loss:sum() / count or loss:mean()
end

-- The per-sample negative log-likelihood of logp [N, C] (or [C]) at class targets [N] (or 0-d), with ignore_index:
-- the loss, the mask of the samples counted (nil when none is ignored) and their count.
local function pick(op, logp, target, opts)
  if target.dtype ~= "int64" and target.dtype ~= "int32" then
    error(fmt("%s: class targets must be int64 or int32, got %s", op, target.dtype), 4)
  end
  local want = logp:size()
  table.remove(want)
  if target:dim() ~= logp:dim() - 1 or table.concat(target:size(), ",") ~= table.concat(want, ",") then
    error(fmt("%s: input of shape %s wants targets of shape [%s], got shape %s", op, shape_str(logp),
              table.concat(want, ", "), shape_str(target)), 4)
  end
  local valid, count = nil, nil
  local ii = opts and opts.ignore_index
  if ii ~= nil then
    valid = target:ne(ii)
    target = grace.where(valid, target, 1)   -- any class: the ignored samples' loss is masked away
    count = valid:sum()
  end
  local nll = -logp:gather(logp:dim(), target:unsqueeze(-1)):squeeze(-1)
  return nll, valid, count
end

-- cross_entropy(input [N, C] or [C], target [, {ignore_index=, label_smoothing=0, reduction="mean"}]): class
-- indices as targets, or class probabilities of input's shape (a float target)
function grace.cross_entropy(input, target, opts)
  check_tensor("cross_entropy", "input", input)
  check_tensor("cross_entropy", "target", target)
  local r = reduction_of("cross_entropy", opts)
  local eps = opts and opts.label_smoothing or 0
  if type(eps) ~= "number" or eps < 0 or eps > 1 then
    error(fmt("cross_entropy: label_smoothing must be a number in [0, 1], got %s", tostring(eps)), 3)
  end
  local logp = input:log_softmax(-1)
  local c = input:size(-1)
  if target.dtype:find("float") then   -- probabilities
    if shape_str(target) ~= shape_str(input) then
      error(fmt("cross_entropy: probability targets of shape %s for input of shape %s", shape_str(target),
                shape_str(input)), 3)
    end
    if eps > 0 then target = target * (1 - eps) + eps / c end
    return reduce(-(logp * target):sum(-1), r)
  end
  local nll, valid, count = pick("cross_entropy", logp, target, opts)
  local loss = nll
  if eps > 0 then loss = nll * (1 - eps) - logp:mean(-1) * eps end
  if valid then loss = grace.where(valid, loss, 0) end
  return reduce(loss, r, count)
end

-- nll_loss(logp [N, C] or [C], target [, {ignore_index=, reduction="mean"}]): logp holds log-probabilities
function grace.nll_loss(logp, target, opts)
  check_tensor("nll_loss", "input", logp)
  check_tensor("nll_loss", "target", target)
  local r = reduction_of("nll_loss", opts)
  local loss, valid, count = pick("nll_loss", logp, target, opts)
  if valid then loss = grace.where(valid, loss, 0) end
  return reduce(loss, r, count)
end

-- mse_loss(input, target [, {reduction="mean"}]): the squared differences (broadcast)
function grace.mse_loss(input, target, opts)
  check_tensor("mse_loss", "input", input)
  local r = reduction_of("mse_loss", opts)
  local d = input - target
  return reduce(d * d, r)
end

-- binary_cross_entropy_with_logits(x, y [, {pos_weight=, reduction="mean"}]): -[w y log s(x) + (1 - y) log(1 - s(x))]
-- in the stable form (1 - y) x + (1 + (w - 1) y) (log(1 + e^-|x|) + max(-x, 0))
function grace.binary_cross_entropy_with_logits(x, y, opts)
  check_tensor("binary_cross_entropy_with_logits", "input", x)
  local r = reduction_of("binary_cross_entropy_with_logits", opts)
  local soft = (-x:abs()):exp():log1p() + (-x):relu()
  local w = opts and opts.pos_weight
  local loss
  if w ~= nil then loss = (1 - y) * x + (1 + (w - 1) * y) * soft
  else loss = (1 - y) * x + soft end
  return reduce(loss, r)
end

return grace
