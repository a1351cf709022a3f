-- test_compile_fused.lua: compiled CPU functions whose programs run as fused groups (matmul groups on packed
-- weights with their epilogues, row groups of user-written reductions) against eager execution of the same
-- Lua function on the same inputs. The reference is always the eager call; results must match bit for bit,
-- except where the attention pass fused scores, softmax and product into one op (ir/ir_attention.c): its sums
-- run in another order and the scores are not rounded to float32, so the transformer block is held to 1e-6 of
-- its largest output (seen: 2.4e-7 and 4.8e-7 absolute).
-- Covered: the MLP and transformer block of bench/compile_cpu.lua at odd sizes (partial panels, a batch of
-- rows that folds, one row), a transposed (strided) input, weights changed in place between calls (an
-- optimizer step: the kept packed weights must not be reused), a softmax, layer norm, RMS norm and
-- logsumexp written out in Lua, also over a transposed input and rows over 1024 elements.
local tap = require "tests.lua.tap"
local grace = require "grace"
local nn = require "grace.nn"

local section = tap.section

local function shape(t) return table.concat(t:size(), "x") end

-- Equality (same shape, every element within rel x max |b|: 0 is bit for bit; NaN nowhere expected).
local function same(a, b, rel)
  if shape(a) ~= shape(b) then return false, ("shapes %s and %s"):format(shape(a), shape(b)) end
  local d = (a - b):abs():max():item()
  local nan = (a:ne(a)):any():item() or (b:ne(b)):any():item()
  return d <= (rel or 0) * b:abs():max():item() and not nan, ("max |difference| %g"):format(d)
end

-- Calls the compiled form of f (three calls: tracing, then the compiled program twice) and f itself.
local function check_rel(name, rel, f, ...)
  local c = grace.compile(f)
  c(...)
  for call = 1, 2 do
    local got, want = c(...), f(...)
    local ok, why = same(got, want, rel)
    tap.ok(ok, ("%s: compiled call %d equals eager"):format(name, call))
    if not ok then io.write("# ", why, "\n") end
  end
  return c
end
local function check(name, f, ...) return check_rel(name, 0, f, ...) end

section("mlp", function()
  grace.manual_seed(1)
  local layers = {}
  for _, d in ipairs{{37, 53}, {53, 300}, {300, 16}} do
    layers[#layers + 1] = nn.Linear(d[1], d[2])
    layers[#layers + 1] = nn.GELU()
  end
  local mlp = nn.Sequential(table.unpack(layers))
  local f = function(x) return mlp(x) end
  check("mlp 37-53-300-16, batch 7", f, grace.randn(7, 37))
  check("mlp, batch [2,3] (rows fold)", f, grace.randn(2, 3, 37))
  check("mlp, one row (matrix-vector)", f, grace.randn(1, 37))
  check("mlp, x transposed (strided)", f, grace.randn(37, 9):t())
end)

section("transformer block", function()
  grace.manual_seed(2)
  local block = nn.TransformerBlock(96, 4)
  local f = function(x) return block(x) end
  check_rel("transformer block d96, [2,11,96]", 1e-6, f, grace.randn(2, 11, 96))
  check_rel("transformer block d96, [1,16,96]", 1e-6, f, grace.randn(1, 16, 96))
end)

section("weights updated in place", function()
  grace.manual_seed(3)
  local lin = nn.Linear(40, 24)
  local f = function(x) return lin(x):gelu() end
  local x = grace.randn(6, 40)
  local c = check("linear+gelu before the update", f, x)
  -- an optimizer step: the weight and bias change in place; a compiled call must see the new values
  for step = 1, 2 do
    grace.no_grad(function()   -- the parameters require grad: an update is no op autograd records
      lin.weight:copy_(lin.weight * 0.5 + 0.25)
      lin.bias:copy_(lin.bias - 1)
    end)
    local ok, why = same(c(x), f(x))
    tap.ok(ok, ("linear+gelu after in-place update %d equals eager"):format(step))
    if not ok then io.write("# ", why, "\n") end
  end
end)

section("row groups", function()
  grace.manual_seed(4)
  local function softmax(x) local m = x:max(-1, true); local e = (x - m):exp(); return e / e:sum(-1, true) end
  local function lse(x) local m = x:max(-1, true); return (x - m):exp():sum(-1, true):log() + m end
  for _, s in ipairs{{16, 16}, {3, 7, 33}, {4, 1500}} do
    local L = s[#s]
    local w, b = grace.randn(L), grace.randn(L)
    local function layernorm(x)
      local d = x - x:mean(-1, true)
      return d * ((d * d):mean(-1, true) + 1e-5):rsqrt() * w + b
    end
    local function rms(x) return x * ((x * x):mean(-1, true) + 1e-6):rsqrt() * w end
    local x = grace.randn(table.unpack(s)) * 3
    local n = table.concat(s, "x")
    check("softmax " .. n, softmax, x)
    check("logsumexp " .. n, lse, x)
    check("layer norm " .. n, layernorm, x)
    check("rms norm " .. n, rms, x)
  end
  check("softmax over a transposed [30,200]", softmax, grace.randn(200, 30):t())
  check("softmax over a transposed [5,1500] (rows over 1024)", softmax, grace.randn(1500, 5):t())
end)

tap.done()
