-- test_api_extras.lua: the size object (x:size(), x.shape), help() and its one table of docs checked against
-- docs/lua_api.md, GRACE_LOG's unknown topics, grace.set_printoptions against PyTorch's output (written out by
-- hand from torch 2.x), and the argument errors of the composed ops (stdlib/grace/ops.lua). Their values are
-- checked against NumPy in tests/conformance/test_ops_extra.py.
local tap = require "tests.lua.tap"
local grace = require "grace"
local capture = require "tests.lua.capture"
local section = tap.section

section("size object", function()
  local x = grace.zeros(1, 16, 256)
  local s = x:size()
  tap.is(tostring(s), "{1, 16, 256}", "x:size() prints as {1, 16, 256}")
  tap.is(tostring(x.shape), "{1, 16, 256}", "x.shape prints the same")
  tap.is(tostring(grace.tensor(3):size()), "{}", "a 0-d tensor's size prints {}")
  tap.ok(s == x.shape, "two size objects of one shape are ==")
  tap.ok(s == {1, 16, 256} and {1, 16, 256} == s, "a size equals a plain table of its numbers, either side")
  tap.ok(s ~= {1, 16} and s ~= {1, 16, 255} and s ~= grace.zeros(2, 16, 256).shape, "other shapes are ~=")
  tap.ok(s == {1.0, 16, 256}, "a float 1.0 equals the size 1, as 1 == 1.0 in Lua")
  tap.is(#s, 3, "#size is the number of dims")
  tap.is(s[2], 16, "size[2] indexes as a table")
  tap.is(math.type(s[3]), "integer", "sizes are integers")
  tap.is(tostring(grace.zeros(s).shape), "{1, 16, 256}", "a size goes where a shape table does (zeros)")
  tap.is(tostring(grace.zeros(4, 6):reshape(grace.zeros(3, 8):size()).shape), "{3, 8}", "... and reshape")
  tap.is(tostring(grace.zeros(2, 3):t():stride()), "{1, 3}", "x:stride() is a size object too")
  tap.is(table.concat(s, "x"), "1x16x256", "table.concat still works")
end)

section("help", function()
  local H = require "grace.help"
  local out = capture.printed(grace.help, grace.matmul)
  tap.ok(out:find("matmul", 1, true) and not out:find("\n"), "help(grace.matmul) prints one line naming matmul")
  tap.is(capture.printed(grace.help, "matmul"), out, "help(\"matmul\") prints the same line")
  tap.ok(capture.printed(grace.help, grace.Tensor.norm):find("p-norm", 1, true), "help of a method (norm)")
  tap.ok(capture.printed(grace.help, "exp_"):find("in place", 1, true), "NAME_ of a pointwise op is its in-place form")
  tap.ok(capture.printed(grace.help, "no_such_fn"):find("no documentation", 1, true), "an unknown name says so")
  local overview = capture.printed(grace.help)
  tap.ok(overview:find("docs/lua_api.md", 1, true) and overview:find("%f[%w_]softmax%f[^%w_]"),
         "help() prints an overview and the functions")
  -- every function of the module and method of grace.Tensor has a line
  local missing = {}
  for _, t in ipairs({grace, grace.Tensor}) do
    for k, v in pairs(t) do
      if type(v) == "function" and not H.doc(k) then missing[#missing + 1] = k end
    end
  end
  table.sort(missing)
  tap.is(table.concat(missing, " "), "", "every function of grace and grace.Tensor has a help line")
  -- and every name with a line is in the reference, so the two cannot drift apart unnoticed
  local f = io.open("docs/lua_api.md", "r")
  if not f then tap.skip("docs/lua_api.md not found from " .. (os.getenv("PWD") or "?")) return end
  local doc = f:read("a")
  f:close()
  local undocumented = {}
  for _, e in ipairs(H.entries) do
    for _, n in ipairs(e[1]) do
      if not doc:find("%f[%w_]" .. n:gsub("_", "%%_") .. "%f[^%w_]") then undocumented[#undocumented + 1] = n end
    end
  end
  tap.is(table.concat(undocumented, " "), "", "every name of the help table is in docs/lua_api.md")
end)

section("GRACE_LOG unknown topics", function()
  local err = capture.stderr_of("print(1)", "GRACE_LOG=ir,placment")
  if not err then tap.skip("cannot run a grace process", 2) return end
  tap.ok(err:find("unknown topic 'placment' (topics: ir, placement, regions, launch)", 1, true), "an unknown topic is named with the valid ones")
  local _, count = err:gsub("unknown topic", "")
  tap.is(count, 1, "once, and not for the known topic ir")
  tap.is(capture.stderr_of("print(1)", "GRACE_LOG=placement"), "", "known topics: nothing said")
end)

section("set_printoptions", function()
  local x = grace.tensor({1.123456789, 2.5, 300})
  local ok, err = pcall(function()
    grace.set_printoptions{precision = 2}
    tap.is(tostring(x), "tensor([  1.12,   2.50, 300.00])", "precision=2")
    grace.set_printoptions{sci_mode = true}
    tap.is(tostring(x), "tensor([1.12e+00, 2.50e+00, 3.00e+02])", "sci_mode=true (precision kept)")
    grace.set_printoptions{precision = 4}
    tap.is(tostring(x), "tensor([  1.1235,   2.5000, 300.0000])", "a call without sci_mode makes it automatic again")
    grace.set_printoptions{threshold = 5, edgeitems = 2}
    tap.is(tostring(grace.arange(10.)), "tensor([0., 1.,  ..., 8., 9.])", "threshold and edgeitems")
    grace.set_printoptions{linewidth = 30, threshold = 1000}
    tap.is(tostring(grace.arange(8.)), "tensor([0., 1., 2., 3., 4.,\n        5., 6., 7.])",
           "linewidth=30: (30 - 7) // 4 elements a line, as PyTorch's _vector_str")
    grace.set_printoptions{profile = "default"}
    tap.is(tostring(grace.arange(8.)), "tensor([0., 1., 2., 3., 4., 5., 6., 7.])", "profile=default resets")
    tap.raises(function() grace.set_printoptions{precison = 2} end, "unknown option 'precison'", "a misspelt option")
    tap.raises(function() grace.set_printoptions{precision = -1} end, "precision must be a non-negative integer",
               "a negative precision")
  end)
  grace.set_printoptions{profile = "default"}
  if not ok then error(err, 0) end
end)

section("composed ops: argument errors", function()
  local v = grace.tensor({1., 2., 3.})
  tap.raises(function() return v:dot(grace.tensor({1., 2.})) end, "dot: inconsistent tensor size", "dot of lengths 3 and 2")
  tap.raises(function() return v:dot(grace.ones(3, 1)) end, "dot: expected 1-D tensors", "dot of a 2-D tensor")
  tap.raises(function() return v:dot(grace.tensor({1, 2, 3})) end, "same dtype", "dot of float32 and int64")
  tap.raises(function() return grace.tensor({1, 2}):norm() end, "norm: expected a floating point tensor", "norm of int64")
  tap.raises(function() return v:norm("nuc") end, "norm: p must be", "norm with an unknown p")
  tap.raises(function() return v:norm(2, 2) end, "norm: dim 2 out of range", "norm over a dim out of range")
  tap.raises(function() return v:flip() end, "flip: dims are required", "flip without dims")
  tap.raises(function() return v:roll({1, 2}, 1) end, "roll: shifts and dims must have the same length", "roll mismatch")
  tap.raises(function() return grace.zeros(0):median() end, "median: a tensor with no elements", "median of nothing")
  tap.raises(function() return v:multinomial(4) end, "without replacement", "multinomial: more samples than categories")
  tap.raises(function() return grace.tensor({1., -1.}):multinomial(1) end, "multinomial: invalid distribution",
             "multinomial of a negative weight")
  tap.raises(function() return grace.tensor({1., 0.}):multinomial(2) end, "at least num_samples of them positive",
             "multinomial without replacement: too few positive weights")
  tap.raises(function() return grace.zeros(3, dtype):uniform_(2, 1) end, "uniform_: expects from <= to", "uniform_ from > to")
  tap.raises(function() return grace.zeros({3}, {dtype = "int64"}):normal_() end, "normal_: expected a floating point",
             "normal_ of int64")
  tap.raises(function() return v:unique{dim = 1} end, "unique: unknown option 'dim'", "unique with dim")
end)

section("composed ops: booleans and in-place", function()
  local a = grace.tensor({1., 2., 0/0})
  tap.is(grace.allclose(a, a), false, "allclose: NaN is not close to NaN")
  tap.is(grace.allclose(a, a, 1e-5, 1e-8, true), true, "... unless equal_nan")
  tap.is(grace.allclose(grace.tensor({math.huge}), grace.tensor({math.huge})), true, "inf is close to inf")
  local f64 = {dtype = "float64"}
  tap.is(grace.allclose(grace.tensor({1e10}, f64), grace.tensor({1.000009e10}, f64)), true, "rtol scales with |y|")
  tap.is(grace.allclose(grace.tensor({1e10}, f64), grace.tensor({1.00002e10}, f64)), false, "... and no further")
  tap.is(grace.allclose(grace.tensor({1e-8}), grace.tensor({0.})), true, "atol")
  tap.is(grace.allclose(grace.tensor({3e-8}), grace.tensor({0.})), false, "beyond atol")
  tap.is(grace.equal(grace.tensor({1, 2}), grace.tensor({1, 2})), true, "equal")
  tap.is(grace.equal(grace.tensor({1, 2}), grace.tensor({{1, 2}})), false, "equal: shapes differ")
  tap.is(grace.equal(grace.tensor({1, 2}), grace.tensor({1, 3})), false, "equal: values differ")
  local x = grace.zeros(1000)
  local v0 = x:version()
  tap.ok(rawequal(x:uniform_(-2, 3), x) and x:version() > v0, "uniform_ returns x and bumps its version")
  tap.ok(x:min():item() >= -2 and x:max():item() < 3 and math.abs(x:mean():item() - 0.5) < 0.2, "uniform_(-2, 3) range and mean")
  x:normal_(5, 0.5)
  tap.ok(math.abs(x:mean():item() - 5) < 0.1 and math.abs(x:std():item() - 0.5) < 0.1, "normal_(5, 0.5) mean and std")
  grace.manual_seed(7)
  local r1 = grace.zeros(6):uniform_():tolist()
  grace.manual_seed(7)
  local r2 = grace.rand(6):tolist()
  tap.is(table.concat(r1, ","), table.concat(r2, ","), "uniform_ draws what grace.rand draws")
end)

section("multinomial frequencies", function()
  grace.manual_seed(11)
  local p = grace.tensor({0.1, 0, 0.6, 0.3})
  local s = p:multinomial(20000, true)
  local counts = {0, 0, 0, 0}
  for _, i in ipairs(s:tolist()) do counts[i] = counts[i] + 1 end
  tap.is(counts[2], 0, "a zero weight is never drawn")
  tap.ok(math.abs(counts[1] / 20000 - 0.1) < 0.015 and math.abs(counts[3] / 20000 - 0.6) < 0.015 and
         math.abs(counts[4] / 20000 - 0.3) < 0.015, "with replacement: frequencies follow the weights")
  local w = p:multinomial(3)
  local seen, dup = {}, false
  for _, i in ipairs(w:tolist()) do dup = dup or seen[i]; seen[i] = true end
  tap.ok(not dup and not seen[2], "without replacement: distinct, never the zero weight")
  local first = {0, 0, 0, 0}
  local rows = grace.tensor({0.1, 0, 0.6, 0.3}):expand(4000, 4):contiguous():multinomial(1):reshape(-1):tolist()
  for _, i in ipairs(rows) do first[i] = first[i] + 1 end
  tap.ok(math.abs(first[3] / 4000 - 0.6) < 0.04, "without replacement: the first draw follows the weights")
end)

tap.done()
