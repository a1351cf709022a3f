-- test_errors.lua: every misuse of the tensor API raises a Lua error whose message names the op and the
-- shapes/dtypes involved and carries this script's file:line; after each error the VM still works.
local tap = require "tests.lua.tap"
local grace = require "grace"

-- fn must be a one-line function: the error must point at the line it is defined on.
local function check(fn, patterns, name)
  local line = debug.getinfo(fn, "S").linedefined
  local want = {"test_errors.lua:" .. line .. ":"}
  for _, p in ipairs(patterns) do want[#want + 1] = p end
  tap.raises(fn, want, name)
  local ok, v = pcall(function() return (grace.ones(2, 2) + 1):sum():item() end)
  tap.ok(ok and v == 8, name .. ": the VM still works after the error")
end

local x = grace.zeros(2, 3)
local v3 = grace.zeros(3)

-- shapes
check(function() return x + grace.zeros(4) end, {"add", "[2, 3]", "[4]"}, "shape mismatch in add (operator)")
check(function() return grace.mul(x, grace.ones(3, 2)) end, {"mul", "[2, 3]", "[3, 2]"}, "shape mismatch in grace.mul")
check(function() return v3:add_(grace.zeros(2, 3)) end, {"add_", "[3]", "[2, 3]"}, "in place result larger than x")
check(function() return x:reshape(4, 2) end, {"reshape", "[4, 2]", "[2, 3]"}, "reshape to a wrong size")
check(function() return x:t():view(6) end, {"view", "reshape"}, "view of a non-contiguous tensor")
check(function() return x:expand(4, 3) end, {"expand", "[2, 3]", "[4, 3]"}, "expand of a non-1 dim")
check(function() return grace.zeros(2, 3):matmul(grace.zeros(2, 2)) end, {"matmul", "[2, 3]", "[2, 2]"}, "matmul inner dims")
check(function() return v3:mm(grace.zeros(3, 3)) end, {"mm", "[3]", "[3, 3]"}, "mm of a 1-D tensor")
check(function() return grace.zeros(2, 2, 2):t() end, {"t", "[2, 2, 2]"}, "t() of a 3-D tensor")
check(function() return grace.cat({x, grace.zeros(2, 4)}) end, {"cat"}, "cat of mismatched shapes")
check(function() return x:split({1, 1}, 2) end, {"split", "[2, 3]"}, "split sizes that do not sum up")

-- dims and positions
check(function() return x:sum(0) end, {"sum: dim 0 is invalid (dims are 1-based)"}, "dim 0")
check(function() return grace.sum(x, 0) end, {"sum: dim 0 is invalid"}, "dim 0 through the module function")
check(function() return x:sum(3) end, {"sum", "dim 3", "2-d"}, "dim out of range")
check(function() return x:sum(-3) end, {"sum", "dim -3", "2-d"}, "negative dim out of range")
check(function() return x:softmax(5) end, {"softmax", "dim 5"}, "softmax dim out of range")
check(function() return x:transpose(1, 0) end, {"transpose", "dim 0"}, "transpose with dim 0")
check(function() return x:size(3) end, {"size", "dim 3"}, "size(d) out of range")
check(function() return x:sum(1, "yes") end, {"sum", "keepdim", "string"}, "keepdim of the wrong type")
check(function() return v3[5] end, {"select", "index 5", "size 3"}, "x[5] on size 3")
check(function() return v3[-4] end, {"select", "index -4", "size 3"}, "x[-4] on size 3")
check(function() return v3[0] end, {"index 0", "1-based"}, "x[0]")
check(function() return v3[1.5] end, {"select", "1.5"}, "x[1.5]")
check(function() v3[4] = 1 end, {"select", "index 4"}, "x[4] = v on size 3")
check(function() return x:narrow(2, 3, 2) end, {"narrow", "size 3"}, "narrow past the end")
check(function() return x:narrow(2, 0, 1) end, {"narrow", "start 0", "1-based"}, "narrow start 0")
check(function() return x:index_select(2, grace.tensor({4})) end, {"index_select", "4"}, "index_select out of range")
check(function() return grace.tensor(1)[1] end, {"select", "0-d"}, "indexing a 0-d tensor")

-- argument types
check(function() return x:add("a") end, {"add", "string"}, "x:add(\"a\")")
check(function() return x + "a" end, {"add", "string"}, "x + \"a\"")
check(function() return x * {} end, {"mul", "table"}, "x * {}")
check(function() return grace.zeros("x") end, {"zeros", "string"}, "grace.zeros(\"x\")")
check(function() return grace.add(1, 2) end, {"add", "two numbers"}, "grace.add of two numbers")
check(function() return grace.zeros(2, -1) end, {"zeros", "[2, -1]"}, "a negative size")
check(function() return grace.zeros(2, {dtyp = "float32"}) end, {"zeros", "dtyp"}, "an unknown option")
check(function() return grace.cat({x, 3}) end, {"cat", "element 2"}, "cat of a non-tensor")
check(function() return x:gelu("fast") end, {"gelu", "fast"}, "gelu approximate")
check(function() return x:clamp() end, {"clamp"}, "clamp without bounds")
check(function() x.foo = 1 end, {"foo"}, "assigning a field")
check(function() x[1] = "a" end, {"string"}, "assigning a string")
check(function() return #grace.tensor(1) end, {"0-d"}, "# of a 0-d tensor")

-- values and dtypes
check(function() return x:item() end, {"item", "6 elements", "[2, 3]"}, "item() of a multi-element tensor")
check(function() return grace.zeros(2, 0):max(2) end, {"max", "[2, 0]"}, "max over an empty dim")
check(function() return grace.zeros(0):max() end, {"max", "[0]"}, "max of an empty tensor")
check(function() return grace.zeros(2, 2):matmul(grace.zeros(2, 2, {dtype = "float64"})) end, {"matmul", "float32", "float64"},
      "matmul float32 with float64")
check(function() return grace.zeros(3, {dtype = "int64"}):add_(0.5) end, {"add_", "float32", "int64"},
      "in place float result into int64")
check(function() return grace.zeros(2, {dtype = "float17"}) end, {"zeros", "float17"}, "unknown dtype name")
check(function() return x:to("float17") end, {"to", "float17"}, "unknown dtype in to()")
check(function() return x:cast("complex") end, {"cast", "complex"}, "unknown dtype in cast()")
check(function() return grace.randint(5, 2, {3}) end, {"randint", "5", "2"}, "randint with an empty range")
check(function() return grace.tensor({{1, 2}, {3}}) end, {"tensor", "ragged", "[2]"}, "ragged grace.tensor")
check(function() return grace.tensor({{1, 2}, 3}) end, {"tensor", "ragged", "[2]", "number"}, "a number where a row belongs")
check(function() return grace.tensor({{1, 2}, {3, {4}}}) end, {"tensor", "[2][2]"}, "too deep at one place")
check(function() return grace.tensor({1, "a"}) end, {"tensor", "string"}, "a string in grace.tensor")

-- comparisons
check(function() return x < x end, {"x:lt(y)"}, "x < y")
check(function() return x <= x end, {"x:le(y)"}, "x <= y")

-- without a usable CUDA device, device tensors are a clear error naming the op (the VM stays usable)
if not grace.cuda_available() then
  check(function() return grace.zeros(3):cuda() end, {"to", "CUDA device is not usable"}, "x:cuda() with no device")
  check(function() return grace.ones(2, {device = "cuda"}) end, {"CUDA device is not usable"}, "a constructor on cuda with no device")
  check(function() return grace.zeros(2):to("cuda") + 1 end, {"to", "CUDA device is not usable"}, "to('cuda') with no device")
end

-- use after close
local closed
do
  local t <close> = grace.ones(2)
  closed = t
end
check(function() return closed:sum() end, {"sum", "closed"}, "a closed tensor")
check(function() return closed + 1 end, {"add", "closed"}, "a closed tensor in an operator")

-- errors raised while temporaries are held (wrapped numbers, intermediate results) leak nothing (ASan)
for _ = 1, 50 do
  pcall(function() return grace.zeros(3, {dtype = "int64"}):add_(0.5) end)
  pcall(function() return grace.zeros(3):add(grace.zeros(2), 2) end)
  pcall(function() return grace.where(grace.tensor({true}), 1, "b") end)
end
tap.is((grace.ones(3) * 2):sum():item(), 6.0, "the VM works after many errors")

tap.done()
