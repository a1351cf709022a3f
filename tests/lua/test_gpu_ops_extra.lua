-- test_gpu_ops_extra.lua: the ops composed in stdlib/grace/ops.lua (dot, norm, median, flip, roll, unique, allclose,
-- equal, multinomial, uniform_, normal_) on CUDA tensors against the same ops on CPU tensors (the CPU is checked
-- against NumPy in tests/conformance/test_ops_extra.py). Each case builds random CPU inputs, moves copies to the
-- device, runs the op on both and compares the device results read back. Random ops are seeded alike on both
-- sides: grace's Philox draws the same numbers on every backend. Without a usable CUDA device it prints a TAP skip
-- plan; GRACE_TEST_DEVICE=cpu runs it CPU against CPU (a check of this file).
--
-- Tolerances: data movement, indices, counts and booleans exact; dot and norm (sums of K terms) rtol 1e-4 (float64
-- 1e-12) plus atol 1e-4 * sqrt(K) * max|term|, as test_gpu_ops.lua's reductions; median exact (it selects).
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"
local DEV, to_dev = H.DEV, H.to_dev
local section = tap.section

-- nil when the device tensor got equals the CPU tensor want within rtol/atol (nil: exact), else what differs
local function diff(got, want, rtol, atol)
  if not grace.is_tensor(want) then
    if got == want or (got ~= got and want ~= want) then return nil end
    return ("got %s, expected %s"):format(tostring(got), tostring(want))
  end
  if not grace.is_tensor(got) then return "got " .. type(got) .. ", expected a tensor" end
  if got.device ~= DEV then return ("result on %s, expected %s"):format(got.device, DEV) end
  if got.dtype ~= want.dtype or got.shape ~= want.shape then
    return ("got %s %s, expected %s %s"):format(got.dtype, tostring(got.shape), want.dtype, tostring(want.shape))
  end
  local g, w = got:cpu():double():reshape(-1):tolist(), want:double():reshape(-1):tolist()
  for i = 1, #w do
    local a, b = g[i], w[i]
    local ok = a == b or (a ~= a and b ~= b) or (rtol and math.abs(a - b) <= (atol or 0) + rtol * math.abs(b))
    if not ok then return ("element %d: got %.9g, expected %.9g"):format(i, a, b) end
  end
  return nil
end

-- runs fn on the CPU inputs and on their device copies; compares every result
local function case(name, fn, inputs, rtol, atol)
  local dev = {}
  for i, t in ipairs(inputs) do dev[i] = grace.is_tensor(t) and to_dev(t) or t end
  local want = table.pack(pcall(fn, table.unpack(inputs)))
  local got = table.pack(pcall(fn, table.unpack(dev)))
  if not want[1] then
    return tap.is(got[1] and "no error" or tostring(got[2]):gsub("^[^:]*:%d+: ", ""):gsub("cuda", "cpu"),
                  (tostring(want[2]):gsub("^[^:]*:%d+: ", "")), name .. " (raises as on the CPU)")
  end
  if not got[1] then tap.ok(false, name); tap.diag("raised on " .. DEV .. ": " .. tostring(got[2])); return end
  if got.n ~= want.n then tap.ok(false, name); tap.diag("result counts differ"); return end
  for i = 2, want.n do
    local d = diff(got[i], want[i], rtol, atol)
    if d then tap.ok(false, name); tap.diag(("result %d: %s"):format(i - 1, d)); return end
  end
  tap.ok(true, name)
end

local function sum_tol(dt, K, scale)
  if dt == "float64" then return 1e-12, 1e-12 * math.sqrt(K) * scale end
  if dt == "float16" then return 1e-2, 1e-2 * math.sqrt(K) * scale end
  return 1e-4, 1e-4 * math.sqrt(K) * scale
end

local FLOATS = {"float32", "float64", "float16"}

section("dot and norm", function()
  for _, dt in ipairs(FLOATS) do
    local a, b = grace.randn(1000):cast(dt), grace.randn(1000):cast(dt)
    case("dot " .. dt .. " [1000]", function(x, y) return x:dot(y) end, {a, b}, sum_tol(dt, 1000, 16))
    local x = (grace.randn(6, 7, 300) * 2):cast(dt)
    local r, at = sum_tol(dt, 2100, 64)
    case("norm() " .. dt, function(t) return t:norm() end, {x}, r, at)
    case("norm(1, {1, 3}) " .. dt, function(t) return t:norm(1, {1, 3}) end, {x}, r, at)
    case("norm(3, -1, true) " .. dt, function(t) return t:norm(3, -1, true) end, {x}, r, at)
    case("norm(inf, 2) " .. dt .. " (exact: a max)", function(t) return t:norm(math.huge, 2) end, {x})
    case("norm(0) " .. dt .. " (exact: a count)", function(t) return t:relu():norm(0) end, {x})
    case("norm(2, 1) of a transposed view " .. dt, function(t) return t:select(3, 1):t():norm(2, 1) end, {x}, r, at)
  end
  case("dot int32 raises as on the CPU", function(x, y) return x:dot(y) end,
       {grace.tensor({1, 2}, {dtype = "int32"}), grace.tensor({1., 2.})})
end)

section("median, flip, roll", function()
  for _, dt in ipairs({"float32", "float64", "int64", "int32"}) do
    local x = (grace.randn(5, 33, 9) * 100):cast(dt)
    case("median() " .. dt, function(t) return t:median() end, {x})
    -- distinct values (a permutation): the index of the median is then unique
    local p = select(2, grace.rand(5 * 33 * 9):sort()):reshape(5, 33, 9):cast(dt)
    case("median(2) " .. dt .. " values, indices", function(t) return t:median(2) end, {p})
    case("median(-1, true) " .. dt, function(t) return t:median(-1, true) end, {p})
    case("median(1) of a permuted view " .. dt, function(t) return t:permute(3, 1, 2):median(1) end, {p})
    case("flip({1, 3}) " .. dt, function(t) return t:flip({1, 3}) end, {x})
    case("flip(2) of a transposed view " .. dt, function(t) return t:transpose(1, 3):flip(2) end, {x})
    case("roll({2, -5}, {1, 3}) " .. dt, function(t) return t:roll({2, -5}, {1, 3}) end, {x})
    case("roll(100) flattened " .. dt, function(t) return t:roll(100) end, {x})
  end
  local n = grace.randn(4, 10)
  n[2][7] = 0 / 0
  case("median(2) with a NaN", function(t) return t:median(2) end, {n})
  case("median of a row longer than the device sort's rows (host fallback)", function(t) return t:median(1) end,
       {select(2, grace.rand(20001):sort()):double()})
end)

section("unique, allclose, equal", function()
  for _, dt in ipairs({"int64", "int32", "float32", "uint8"}) do
    local x = grace.randint(0, 50, {7, 300}):cast(dt)
    case("unique(true, true, true) " .. dt, function(t) return t:unique(true, true, true) end, {x})
    case("unique() of a transposed view " .. dt, function(t) return t:t():unique() end, {x})
  end
  local a = grace.randn(50, 20)
  local b = a + grace.randn(50, 20) * 1e-7
  case("allclose true", function(x, y) return grace.allclose(x, y) end, {a, b})
  case("allclose false", function(x, y) return grace.allclose(x, y, 1e-9, 1e-9) end, {a, a + 1e-3})
  case("allclose equal_nan", function(x) return grace.allclose(x, x, 1e-5, 1e-8, true) end, {grace.tensor({1., 0 / 0})})
  case("equal true", function(x, y) return grace.equal(x, y) end, {a, a:clone()})
  case("equal false", function(x, y) return grace.equal(x, y) end, {a, b})
end)

section("random: the same draws on both devices", function()
  local function seeded(seed, fn) return function(...) grace.manual_seed(seed) return fn(...) end end
  local w = grace.rand(8, 50) * grace.rand(8, 50):gt(0.3)
  case("multinomial(5) without replacement", seeded(21, function(p) return p:multinomial(5) end), {w})
  case("multinomial(1) 1-D", seeded(22, function(p) return p:multinomial(1) end), {grace.tensor({0.2, 0.3, 0.5})})
  -- with replacement a draw next to a boundary of the cumulative sums may fall either way when the device sums in
  -- another order: count the draws that differ
  local p = grace.rand(4, 30)
  grace.manual_seed(23)
  local cw = p:multinomial(2000, true)
  grace.manual_seed(23)
  local cg = to_dev(p):multinomial(2000, true)
  local differ = cg:cpu():ne(cw):sum():item()
  tap.ok(cg.device == DEV and differ <= 8, ("multinomial(2000, true): %d of 8000 draws differ (at most 8)"):format(differ))
  case("uniform_(-2, 5)", seeded(24, function(t) return t:uniform_(-2, 5) end), {grace.zeros(3, 1000)}, 1e-6, 1e-6)
  case("normal_(1, 3) float64", seeded(25, function(t) return t:normal_(1, 3) end),
       {grace.zeros({2000}, {dtype = "float64"})}, 1e-12, 1e-12)
end)

section("cat and stack of more tensors than one launch takes", function()
  for _, n in ipairs({65, 200}) do
    local xs, ds = {}, {}
    for k = 1, n do xs[k] = grace.randn(1, 3) * k; ds[k] = to_dev(xs[k]) end
    local want, got = grace.cat(xs, 1), grace.cat(ds, 1)
    tap.ok(not diff(got, want, 0, 0), ("cat of %d tensors equals the CPU's"):format(n))
    local ws, gs = grace.stack(xs, 2), grace.stack(ds, 2)
    tap.ok(not diff(gs, ws, 0, 0) and table.concat(gs:size(), ",") == "1," .. n .. ",3",
           ("stack of %d tensors along dim 2 equals the CPU's"):format(n))
  end
end)

tap.done()
