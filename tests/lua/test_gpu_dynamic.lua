-- test_gpu_dynamic.lua: compiled functions over CUDA tensors whose sizes change (symbolic sizes on the device: each
-- size runs a copy of the program specialised to it, its kernels shared across sizes) against the same Lua
-- functions run eagerly on CPU copies of the inputs, at sizes 1, 7, 128 and 1000: a fused pointwise chain with a
-- row reduction, an MLP (generated or cuBLASLt matmuls), and an attention step over a cache that grows. Each takes
-- at most 2 traces (the first size, then the symbolic one), counted by the compiled function's stats. Without a
-- usable CUDA device it prints a TAP skip plan; GRACE_TEST_DEVICE=cpu runs it on the CPU (a check of the harness).
-- Tolerances as tests/lua/test_gpu_compile.lua for reductions and matmuls: float32 rtol 1e-4, atol 1e-4 * sqrt(K).
local tap = require "tests.lua.tap"
local grace = require "grace"
local nn = require "grace.nn"

local H = require "tests.lua.gpu_harness"
local to_dev, absmax = H.to_dev, H.absmax

local SIZES = {1, 7, 128, 1000}

-- largest |got - want| relative to atol + rtol * |want|: <= 1 passes
local function close(got, want, K)
  local diff = (got:cpu():double() - want:double()):abs()
  local bound = want:double():abs() * 1e-4 + 1e-4 * math.sqrt(K) * math.max(absmax(want), 1)
  return (diff - bound):max():item() <= 0, diff:max():item()
end

local function check(name, f, fn, make_args, K)
  local all, worst = true, 0
  for _, n in ipairs(SIZES) do
    local args = make_args(n)
    local dargs = {}
    for i, a in ipairs(args) do dargs[i] = grace.is_tensor(a) and to_dev(a) or a end
    local got = f(table.unpack(dargs))
    local want = fn(table.unpack(args))
    local good, d = close(got, want, K)
    if not good then all = false tap.diag(("%s at size %d: largest difference %g"):format(name, n, d)) end
    worst = math.max(worst, d)
  end
  tap.ok(all, ("%s equals eager at sizes 1, 7, 128, 1000 (largest difference %g)"):format(name, worst))
  local s = f:stats()
  tap.ok(s.traces <= 2, ("%s: at most 2 traces (%d)"):format(name, s.traces))
  tap.is(s.symbolic_entries, 1, name .. ": one symbolic entry")
  if H.DEV ~= "cpu" then
    local sized = 0
    for _, p in ipairs(f:report()) do if p.sizes then sized = sized + 1 end end
    tap.ok(sized >= 1 and sized <= 4, ("%s: f:report() lists the sizes kept (%d, at most 4)"):format(name, sized))
  end
end

grace.manual_seed(H.SEED)

local function chain(x) return (x:exp() * 0.5 - x:tanh()):sum(2) + x:relu():mean(2) end
check("a pointwise chain with row reductions", grace.compile(chain), chain,
      function(n) return {grace.randn({n, 64})} end, 64)

local mlp = nn.MLP(64, 256)
local dmlp = nn.MLP(64, 256)
dmlp:load_parameters(mlp:named_parameters())
dmlp:to(H.DEV)
check("an MLP", grace.compile(function(x) return dmlp(x) end), function(x) return mlp(x) end,
      function(n) return {grace.randn({n, 64})} end, 256)

local D = 32
local Wq = grace.randn({D, D}) / math.sqrt(D)
local dWq = to_dev(Wq)
local function step_with(W)
  return function(K, x)
    K = grace.cat({K, x}, 1)
    local att = (x:matmul(W):matmul(K:t()) / math.sqrt(D)):softmax(-1)
    return att:matmul(K)
  end
end
check("an attention step over a cache of that many rows", grace.compile(step_with(dWq)), step_with(Wq),
      function(n) return {grace.randn({n, D}), grace.randn({1, D})} end, 1000)

tap.done()
