-- test_autograd.lua: autograd from Lua (requires_grad, backward, grad, no_grad, detach, the version check), nn's
-- training parts (parameters that require grad, zero_grad, train/eval, Dropout, nn.init), the gradient of a
-- transposed matmul weight (by hand, in the weight's layout), the losses against values
-- computed here with plain Lua arithmetic, the optimizers and schedules against hand-computed updates, and a
-- compiled training step (forward, backward and AdamW in one traced program) against the same step run eagerly.
local tap = require "tests.lua.tap"
local nn = require "grace.nn"

local function section(name, fn)
  io.write("# ", name, "\n")
  fn()
end

local function list(t) return t:double():tolist() end
local function close(a, b, tol)
  tol = tol or 1e-9
  if type(a) == "number" then return math.abs(a - b) <= tol * (1 + math.abs(b)) end
  for i = 1, #b do if not close(a[i], b[i], tol) then return false end end
  return #a == #b
end

section("tensors", function()
  local x = grace.tensor({1, 2, 3}, {dtype = "float64", requires_grad = true})
  tap.ok(x.requires_grad and x.is_leaf and x.grad == nil and x.grad_fn == nil, "a leaf that requires grad, no grad yet")
  local y = (x * x):sum()
  tap.ok(y.requires_grad and not y.is_leaf and y.grad_fn == "sum", "a result records the op that made it")
  y:backward()
  tap.ok(close(list(x.grad), {2, 4, 6}), "d sum(x^2)/dx = 2x")
  y:backward()
  tap.ok(close(list(x.grad), {4, 8, 12}), "backward again adds to grad")
  x.grad = nil
  tap.is(x.grad, nil, "x.grad = nil clears it")
  local z = x:exp()
  z:backward(grace.tensor({1, 0, 2}, {dtype = "float64"}))
  tap.ok(close(list(x.grad), {math.exp(1), 0, 2 * math.exp(3)}), "backward(grad) seeds a non-scalar result")
  local gx = grace.grad(y, x)
  tap.ok(close(list(gx), {2, 4, 6}) and close(list(x.grad), {math.exp(1), 0, 2 * math.exp(3)}),
         "grace.grad gives the gradient and leaves x.grad alone")
  local w = grace.tensor({0.5, -1}, {dtype = "float64", requires_grad = true})
  local gs = grace.grad({(x:sum() * w):sum()}, {x, w})
  tap.ok(close(list(gs[1]), {-0.5, -0.5, -0.5}) and close(list(gs[2]), {6, 6}), "grace.grad over lists")
  local u = grace.ones(2, {requires_grad = true})
  tap.ok(grace.grad(w:sum(), {w, u})[2] == nil, "an input with no path to the output gets nil")

  tap.ok(not grace.no_grad(function() return (x * 2).requires_grad end), "no_grad records nothing")
  tap.ok(grace.no_grad(function() return grace.enable_grad(function() return (x * 2).requires_grad end) end),
         "enable_grad inside no_grad records again")
  local ok = pcall(grace.no_grad, function() error("boom") end)
  tap.ok(not ok and grace.is_grad_enabled(), "an error inside no_grad restores grad mode")
  tap.ok(grace.set_grad_enabled(false) == true and not grace.is_grad_enabled(), "set_grad_enabled returns the old mode")
  grace.set_grad_enabled(true)
  local d = z:detach()
  tap.ok(not d.requires_grad and d.is_leaf, "detach gives a tensor that does not require grad")
  local p = grace.zeros(2)
  tap.ok(p:requires_grad_() == p and p.requires_grad, "requires_grad_ returns the tensor")
  p.requires_grad = false
  tap.ok(not p.requires_grad, "x.requires_grad = false")

  local err = select(2, pcall(function() return (x * x):backward() end))
  tap.ok(tostring(err):find("needs its gradient given", 1, true), "a non-scalar backward without grad: " .. tostring(err))
  err = select(2, pcall(function() x:add_(1) end))
  tap.ok(tostring(err):find("add_: input 2", 1, true), "x:add_(1) writes a value that requires grad, named as written: "
         .. tostring(err))
  err = select(2, pcall(function() z:fill_(1) end))
  tap.ok(tostring(err):find("result of an op", 1, true), "in place on a result of a recorded op: " .. tostring(err))
  local leaf = grace.zeros(2, {requires_grad = true})
  leaf:copy_(grace.ones(2))
  tap.ok(leaf:sum():item() == 2 and leaf.requires_grad, "a leaf that requires grad may be overwritten (loading weights)")
  err = select(2, pcall(function() grace.ones(2, {dtype = "int64", requires_grad = true}) end))
  tap.ok(tostring(err):find("floating", 1, true), "integers cannot require grad: " .. tostring(err))
  local s = x:sigmoid()
  local loss = s:sum()
  grace.no_grad(function() s:mul_(2) end)
  err = select(2, pcall(function() loss:backward() end))
  tap.ok(tostring(err):find("backward of sigmoid", 1, true) and tostring(err):find("modified in place", 1, true),
         "a saved tensor written in place: the backward that needs it names the op: " .. tostring(err))
end)

section("nn", function()
  grace.manual_seed(3)
  local m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4, 2))
  local ps = m:parameters()
  local all = true
  for _, p in ipairs(ps) do all = all and p.requires_grad and p.is_leaf end
  tap.ok(#ps == 4 and all, "the parameters (4) are leaves that require grad")
  m:eval()
  local x = grace.randn(5, 3)
  tap.ok(close(list(m(x):reshape(10)), list(m(x):reshape(10))), "eval: Dropout is the identity (same output twice)")
  tap.ok(m.training == false and m[3].training == false, "eval reaches the children")
  m:train()
  m(x):sum():backward()
  local has = true
  for _, p in ipairs(ps) do has = has and p.grad ~= nil end
  tap.ok(has, "backward fills every parameter's grad")
  local g0 = m[1].weight.grad
  m:zero_grad(false)
  tap.ok(g0:abs():max():item() == 0 and m[1].weight.grad:abs():max():item() == 0,
         "zero_grad(false) zeroes the grad in place")
  m:zero_grad()
  tap.is(m[1].weight.grad, nil, "zero_grad sets grad to nil")
  local drop = nn.Dropout(0.25)
  local big = grace.ones(4000)
  local out = drop(big)
  local zeros = out:eq(0):sum():item()
  tap.ok(zeros > 800 and zeros < 1200, "Dropout(0.25) zeroes about a quarter (" .. zeros .. " of 4000)")
  tap.ok(close(out:max():item(), 1 / 0.75, 1e-6), "and scales the rest by 1 / (1 - p)")
  local w = grace.empty(30, 20)
  nn.init.xavier_uniform_(w)
  local b = math.sqrt(6 / 50)
  tap.ok(w:abs():max():item() <= b and w:abs():max():item() > 0.8 * b, "xavier_uniform_ within sqrt(6 / (fan_in + fan_out))")
  nn.init.constant_(w, 0.5)
  tap.ok(w:eq(0.5):all():item(), "constant_")
  local lin = nn.Linear(2, 2):to("float64")
  tap.ok(lin.weight.dtype == "float64" and lin.weight.requires_grad and lin.weight.is_leaf,
         "Module:to gives parameters that are leaves requiring grad")
end)

-- references with plain Lua arithmetic
local function log_softmax_rows(rows)
  local out = {}
  for i, r in ipairs(rows) do
    local m = -math.huge
    for _, v in ipairs(r) do m = math.max(m, v) end
    local s = 0
    for _, v in ipairs(r) do s = s + math.exp(v - m) end
    out[i] = {}
    for j, v in ipairs(r) do out[i][j] = v - m - math.log(s) end
  end
  return out
end

section("losses", function()
  local logits = {{1.0, 2.0, 0.5}, {-1.0, 0.0, 3.0}, {0.2, 0.2, 0.1}, {2.0, -2.0, 1.0}}
  local target = {2, 3, 1, 3}
  local lp = log_softmax_rows(logits)
  local x = grace.tensor(logits, {dtype = "float64", requires_grad = true})
  local t = grace.tensor(target)
  local nll, sum = {}, 0
  for i = 1, 4 do nll[i] = -lp[i][target[i]]; sum = sum + nll[i] end
  tap.ok(close(grace.cross_entropy(x, t):item(), sum / 4), "cross_entropy (mean)")
  tap.ok(close(grace.cross_entropy(x, t, {reduction = "sum"}):item(), sum), "reduction sum")
  tap.ok(close(list(grace.cross_entropy(x, t, {reduction = "none"})), nll), "reduction none")
  local t2 = grace.tensor({2, 3, -100, 3})
  tap.ok(close(grace.cross_entropy(x, t2, {ignore_index = -100}):item(), (nll[1] + nll[2] + nll[4]) / 3),
         "ignore_index: the ignored sample neither counts nor adds")
  local eps, ls = 0.1, 0
  for i = 1, 4 do
    local mean = (lp[i][1] + lp[i][2] + lp[i][3]) / 3
    ls = ls + (1 - eps) * nll[i] - eps * mean
  end
  tap.ok(close(grace.cross_entropy(x, t, {label_smoothing = eps}):item(), ls / 4), "label_smoothing")
  local probs = {{0.2, 0.5, 0.3}, {0, 0, 1}, {1, 0, 0}, {0.5, 0.25, 0.25}}
  local pl = 0
  for i = 1, 4 do for j = 1, 3 do pl = pl - probs[i][j] * lp[i][j] end end
  tap.ok(close(grace.cross_entropy(x, grace.tensor(probs, {dtype = "float64"})):item(), pl / 4), "probability targets")
  -- d mean CE / d logits = (softmax - onehot) / N
  grace.cross_entropy(x, t):backward()
  local g, want = x.grad:tolist(), true
  for i = 1, 4 do for j = 1, 3 do
    local r = (math.exp(lp[i][j]) - (j == target[i] and 1 or 0)) / 4
    want = want and close(g[i][j], r, 1e-9)
  end end
  tap.ok(want, "cross_entropy's gradient is (softmax - onehot) / N")
  tap.ok(close(grace.nll_loss(x:log_softmax(-1), t):item(), sum / 4), "nll_loss of log_softmax equals cross_entropy")
  tap.ok(close(nn.CrossEntropyLoss({reduction = "sum"})(x, t):item(), sum), "nn.CrossEntropyLoss")
  local a, b = grace.tensor({1.0, 2.0, -1.0}), grace.tensor({0.5, 2.5, 1.0})
  tap.ok(close(grace.mse_loss(a, b):item(), (0.25 + 0.25 + 4) / 3, 1e-6), "mse_loss")
  local z, y = {-2.0, 0.5, 3.0}, {0.0, 1.0, 0.25}
  local bce, bcew = 0, 0
  for i = 1, 3 do
    local s = 1 / (1 + math.exp(-z[i]))
    bce = bce - (y[i] * math.log(s) + (1 - y[i]) * math.log(1 - s))
    bcew = bcew - (2 * y[i] * math.log(s) + (1 - y[i]) * math.log(1 - s))
  end
  local zt, yt = grace.tensor(z, {dtype = "float64"}), grace.tensor(y, {dtype = "float64"})
  tap.ok(close(grace.binary_cross_entropy_with_logits(zt, yt):item(), bce / 3), "binary_cross_entropy_with_logits")
  tap.ok(close(grace.binary_cross_entropy_with_logits(zt, yt, {pos_weight = 2}):item(), bcew / 3), "with pos_weight")
  local err = select(2, pcall(grace.cross_entropy, x, grace.tensor({1, 2})))
  tap.ok(tostring(err):find("[4, 3]", 1, true), "mismatched targets name the shapes: " .. tostring(err))
end)

section("optimizers", function()
  local function param(v) return grace.tensor(v, {dtype = "float64", requires_grad = true}) end
  local function set_grad(p, g) p.grad = grace.tensor(g, {dtype = "float64"}) end
  local p = param({1.0, -2.0})
  local opt = grace.optim.SGD({p}, {lr = 0.1})
  set_grad(p, {0.5, 1.0})
  opt:step()
  tap.ok(close(list(p), {0.95, -2.1}), "SGD: p - lr g")
  p = param({1.0})
  opt = grace.optim.SGD({p}, {lr = 0.1, momentum = 0.9, weight_decay = 0.01})
  local pv, buf = 1.0, 0
  for _, gv in ipairs({0.5, -0.2, 0.3}) do
    set_grad(p, {gv})
    opt:step()
    local d = gv + 0.01 * pv
    buf = 0.9 * buf + d
    pv = pv - 0.1 * buf
  end
  tap.ok(close(list(p)[1], pv), "SGD with momentum and weight decay, three steps")
  p = param({1.0})
  opt = grace.optim.SGD({p}, {lr = 0.1, momentum = 0.9, nesterov = true})
  pv, buf = 1.0, 0
  for _, gv in ipairs({0.5, -0.2}) do
    set_grad(p, {gv})
    opt:step()
    buf = 0.9 * buf + gv
    pv = pv - 0.1 * (gv + 0.9 * buf)
  end
  tap.ok(close(list(p)[1], pv), "SGD nesterov, two steps")
  p = param({1.0, -0.5})
  opt = grace.optim.AdamW({p}, {lr = 0.01, weight_decay = 0.1})
  local ref, m, v = {1.0, -0.5}, {0, 0}, {0, 0}
  for step, gs in ipairs({{0.3, -0.1}, {0.2, 0.4}, {-0.5, 0.1}}) do
    set_grad(p, gs)
    opt:step()
    for i = 1, 2 do
      ref[i] = ref[i] * (1 - 0.01 * 0.1)
      m[i] = 0.9 * m[i] + 0.1 * gs[i]
      v[i] = 0.999 * v[i] + 0.001 * gs[i] ^ 2
      local mh, vh = m[i] / (1 - 0.9 ^ step), v[i] / (1 - 0.999 ^ step)
      ref[i] = ref[i] - 0.01 * mh / (math.sqrt(vh) + 1e-8)
    end
  end
  tap.ok(close(list(p), ref, 1e-7), "AdamW, three steps")
  opt:zero_grad()
  tap.is(p.grad, nil, "optimizer zero_grad")
  local sched = grace.optim.lr_scheduler.StepLR(opt, 2, 0.5)
  local lrs = {}
  for _ = 1, 5 do sched:step(); lrs[#lrs + 1] = opt:get_lr() end
  tap.ok(close(lrs, {0.01, 0.005, 0.005, 0.0025, 0.0025}), "StepLR halves every 2 steps")
  opt = grace.optim.SGD({p}, {lr = 1.0})
  local cos = grace.optim.lr_scheduler.CosineAnnealingLR(opt, 4, 0.1)
  lrs = {}
  for _ = 1, 4 do cos:step(); lrs[#lrs + 1] = opt:get_lr() end
  local want = {}
  for e = 1, 4 do want[e] = 0.1 + 0.9 * (1 + math.cos(math.pi * e / 4)) / 2 end
  tap.ok(close(lrs, want), "CosineAnnealingLR")
  local before = list(p)
  set_grad(p, {1, 1})
  opt:step()
  tap.ok(close(list(p), {before[1] - 0.1, before[2] - 0.1}), "the scheduled lr (0.1) is the one a step uses")
end)

section("matmul with a transposed weight", function()
  -- y = x @ W:t() (a Linear): dL/dW[n][k] = c[n] * sum over rows of x[.][k] for L = sum(y * c); the gradient comes
  -- in W's own layout (contiguous), for a 2-D x and for a batched one whose rows are summed over the batch too
  local xs = {{{1, 2}, {3, -1}, {0.5, 4}}, {{-2, 1}, {1, 1}, {2, -3}}}
  local c = {1, -2, 0.5, 3}
  for _, case in ipairs({{"2-D", {xs[1]}, grace.tensor(xs[1], {dtype = "float64"})},
                         {"batched", xs, grace.tensor(xs, {dtype = "float64"})}}) do
    local name, rows, x = case[1], case[2], case[3]
    local W = grace.tensor({{1, 0}, {0, 1}, {2, -1}, {0.5, 0.25}}, {dtype = "float64", requires_grad = true})
    local y = x:matmul(W:t())
    local loss = (y * grace.tensor(c, {dtype = "float64"})):sum()
    loss:backward()
    local want, colsum = {}, {0, 0}
    for _, m in ipairs(rows) do for _, r in ipairs(m) do colsum[1] = colsum[1] + r[1]; colsum[2] = colsum[2] + r[2] end end
    for n = 1, 4 do want[n] = {c[n] * colsum[1], c[n] * colsum[2]} end
    local got = W.grad:double():tolist()
    local good = #got == 4
    for n = 1, 4 do good = good and close(got[n], want[n]) end
    tap.ok(good, name .. ": the gradient of a transposed weight, by hand")
    tap.ok(W.grad:is_contiguous(), name .. ": in the weight's own layout")
  end
end)

section("compiled training step", function()
  local function make()
    grace.manual_seed(7)
    local model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))
    return model, grace.optim.AdamW(model, {lr = 5e-3})
  end
  local function step(model, opt, sched, x, y)
    opt:zero_grad()
    local loss = grace.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    return loss
  end
  grace.manual_seed(11)
  local x = grace.randn(32, 6)
  local y = x:narrow(2, 1, 4):argmax(-1)
  local m1, o1 = make()
  local m2, o2 = make()
  local s1 = grace.optim.lr_scheduler.CosineAnnealingLR(o1, 20)
  local s2 = grace.optim.lr_scheduler.CosineAnnealingLR(o2, 20)
  local f = grace.compile(function(a, b) return step(m2, o2, nil, a, b) end)
  local worst, first, last = 0, nil, nil
  for i = 1, 20 do
    local a = step(m1, o1, s1, x, y):item()
    local b = f(x, y):item()
    s1:step(); s2:step()
    worst = math.max(worst, math.abs(a - b))
    first = first or a
    last = a
  end
  local pa, pb = m1:parameters(), m2:parameters()
  for k = 1, #pa do worst = math.max(worst, (pa[k] - pb[k]):abs():max():item()) end
  tap.ok(worst < 1e-5, ("20 compiled steps equal the eager ones (largest difference %.2g)"):format(worst))
  tap.ok(last < first, ("the loss falls (%.4f to %.4f)"):format(first, last))
  local st = f:stats()
  tap.is(st.traces, 1, "one trace for 20 steps, the learning rate changing every step")
  tap.is(st.hits, 19, "the other 19 calls ran the compiled program")
  tap.is(st.eager_calls, 0, "no call ran eagerly")
  local ir = f:ir()
  local _, nwrites = ir:gsub("\n%s*write ", "")
  tap.ok(ir:find("matmul", 1, true) and ir:find("log_softmax", 1, true) and nwrites == 6 * 4,
         "one program: forward, backward and the update writing the 6 parameters, their 2 moments and step counts")
  -- a tiny causal transformer (embeddings, attention, layer norms, tanh GELU) trained with SGD and momentum
  local function make_gpt()
    grace.manual_seed(5)
    local m = nn.Sequential(nn.Embedding(11, 16), nn.TransformerBlock(16, 2, {causal = true}), nn.LayerNorm(16),
                            nn.Linear(16, 11))
    return m, grace.optim.SGD(m, {lr = 0.05, momentum = 0.9})
  end
  local function gpt_step(m, opt, ids, tgt)
    opt:zero_grad()
    local loss = grace.cross_entropy(m(ids):reshape(-1, 11), tgt:reshape(-1))
    loss:backward()
    opt:step()
    return loss
  end
  local g1, go1 = make_gpt()
  local g2, go2 = make_gpt()
  local ids = grace.randint(1, 12, {3, 8})
  local tgt = grace.randint(1, 12, {3, 8})
  local gf = grace.compile(function(a, b) return gpt_step(g2, go2, a, b) end)
  worst, first, last = 0, nil, nil
  for _ = 1, 10 do
    local a = gpt_step(g1, go1, ids, tgt):item()
    local b = gf(ids, tgt):item()
    worst = math.max(worst, math.abs(a - b))
    first = first or a
    last = a
  end
  pa, pb = g1:parameters(), g2:parameters()
  for k = 1, #pa do worst = math.max(worst, (pa[k] - pb[k]):abs():max():item()) end
  tap.ok(worst < 1e-4 and last < first,
         ("a tiny transformer: 10 compiled steps equal the eager ones (largest difference %.2g), loss %.3f to %.3f")
         :format(worst, first, last))
  tap.ok(gf:stats().traces == 1 and gf:stats().hits == 9, "one trace, then the compiled program")

  -- grace.grad inside a compiled function: the gradient of a function of the argument, traced once
  local g = grace.compile(function(a) return grace.grad((a:sin() * a):sum(), a) end)
  local a = grace.tensor({0.5, 1.0, 2.0}, {dtype = "float64", requires_grad = true})
  local r1 = list(g(a))
  local r2 = list(g(a * 1.5))
  local ok1 = true
  for i, v in ipairs({0.5, 1.0, 2.0}) do ok1 = ok1 and close(r1[i], math.sin(v) + v * math.cos(v)) end
  for i, v in ipairs({0.75, 1.5, 3.0}) do ok1 = ok1 and close(r2[i], math.sin(v) + v * math.cos(v)) end
  tap.ok(ok1, "a compiled grace.grad: d(x sin x) = sin x + x cos x")
  tap.is(g:stats().traces, 1, "traced once")
end)

tap.done()
