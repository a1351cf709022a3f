-- test_gpu_autograd.lua: autograd on the CUDA device: gradients of a set of ops (pointwise, reductions, softmax,
-- matmul, norms, embedding, attention, indexing) computed on the device against the same gradients on the CPU, in
-- float32 and float64, and a training step (forward, backward, AdamW) compiled on the device against the eager CPU
-- step for 20 steps, with its trace count. Without a usable CUDA device it prints a TAP skip plan;
-- GRACE_TEST_DEVICE=cpu runs it CPU against CPU (a check of this file). Tolerances: float64 rtol 1e-9; float32
-- rtol 1e-4, atol 1e-5 (a gradient sums over more terms than a pointwise result).
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"
local nn = require "grace.nn"

local DEV = H.DEV
local TOL = {float64 = {rtol = 1e-9, atol = 1e-12}, float32 = {rtol = 1e-4, atol = 1e-5}}

local function close(got, want, dt)
  local a, b, t = H.flat(got:cpu():double()), H.flat(want:double()), TOL[dt]
  if #a ~= #b then return false, "sizes differ" end
  for i = 1, #b do
    if not (math.abs(a[i] - b[i]) <= t.atol + t.rtol * math.abs(b[i])) then
      return false, ("element %d: %.9g, CPU %.9g"):format(i, a[i], b[i])
    end
  end
  return true
end

-- f(inputs...) -> a tensor; the gradient of sum(f * w) for each float input, on the CPU and on the device
local function check(name, f, inputs, dt)
  local function grads(dev)
    local xs, diff = {}, {}
    for i, x in ipairs(inputs) do
      local t = x
      if x.dtype:find("float") then t = x:to(dt) end
      t = dev == "cpu" and t:clone() or t:to(dev)
      if t.dtype:find("float") then t:requires_grad_(); diff[#diff + 1] = t end
      xs[i] = t
    end
    local y = f(table.unpack(xs))
    local w = grace.rand(y:size(), {dtype = dt})   -- the same w on both: drawn from a copy of the generator state
    w = dev == "cpu" and w or w:to(dev)
    return grace.grad((y * w):sum(), diff)
  end
  grace.manual_seed(H.SEED)
  local want = grads("cpu")
  grace.manual_seed(H.SEED)
  local got = grads(DEV)
  local good, why = #got == #want, "counts differ"
  for k = 1, #want do
    if good then good, why = close(got[k], want[k], dt) end
  end
  tap.ok(good, ("%s (%s): gradients on %s equal the CPU's"):format(name, dt, DEV))
  if not good then tap.diag(why) end
end

local x = grace.randn(4, 6)
local y = grace.randn(6)
local w = grace.randn(6, 5)
local ids = grace.randint(1, 7, {2, 3})
for _, dt in ipairs({"float32", "float64"}) do
  check("pointwise chain", function(a, b) return (a * b):tanh() + a:exp() * 0.1 - (a - b):abs():sqrt() end, {x, y}, dt)
  check("gelu, silu, sigmoid", function(a) return a:gelu() + a:silu() * a:sigmoid() end, {x}, dt)
  check("reductions", function(a) return a:sum(2, true) * a:mean() + a:var(1) - a:logsumexp(2, true) end, {x}, dt)
  check("softmax, log_softmax", function(a) return a:softmax(-1) * a:log_softmax(1) end, {x}, dt)
  check("matmul", function(a, b) return a:matmul(b):relu() end, {x, w}, dt)
  check("layer_norm, rms_norm", function(a, b) return grace.layer_norm(a, b, b, 1e-5) + grace.rms_norm(a, b, 1e-6) end,
        {x, y}, dt)
  check("embedding", function(i, t) return grace.embedding(i, t) end, {ids, w}, dt)
  check("views and cat", function(a) return grace.cat({a:t(), a:narrow(2, 2, 3):t()}, 1):reshape(-1) end, {x}, dt)
  check("attention", function(q, k, v)
    return grace.attention(q:reshape(1, 4, 6), k:reshape(1, 4, 6), v:reshape(1, 4, 6))
  end, {x, x * 0.5, x:flip(1)}, dt)
  check("gather and index_select", function(a, gi, si)
    return a:gather(2, gi) + a:index_select(2, si):sum()
  end, {x, grace.tensor({{1, 6}, {2, 2}, {3, 4}, {6, 5}}), grace.tensor({2, 2})}, dt)
end

-- the compiled training step on the device against the eager step on the CPU
local function make(dev)
  grace.manual_seed(9)
  local m = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4)):to(dev)
  return m, grace.optim.AdamW(m, {lr = 1e-2})
end
local function step(m, opt, a, b)
  opt:zero_grad()
  local loss = grace.cross_entropy(m(a), b)
  loss:backward()
  opt:step()
  return loss
end
local xs = grace.randn(64, 8)
local ys = xs:narrow(2, 1, 4):argmax(-1)
local m1, o1 = make("cpu")
local m2, o2 = make(DEV)
local f = grace.compile(function(a, b) return step(m2, o2, a, b) end)
local xd, yd = H.to_dev(xs), H.to_dev(ys)
local worst = 0
for _ = 1, 20 do
  local a = step(m1, o1, xs, ys):item()
  local b = f(xd, yd):item()
  worst = math.max(worst, math.abs(a - b) / (1 + math.abs(a)))
end
local p1, p2 = m1:parameters(), m2:parameters()
for k = 1, #p1 do worst = math.max(worst, H.absmax(p1[k] - p2[k]:cpu())) end
tap.ok(worst < 1e-3, ("20 compiled AdamW steps on %s equal the eager CPU steps (largest difference %.2g)"):format(DEV, worst))
tap.is(f:stats().traces, 1, "one trace")
tap.is(f:stats().hits, 19, "19 calls ran the compiled program")
tap.done()
