-- test_gpu_empty.lua: tensors with no elements on CUDA (a zero dim first, last or in the middle, and a zero
-- reduced over): every op family eagerly and compiled, against the same op on CPU copies, which decide whether the
-- op succeeds (an op that errors on the CPU must error on the device too) and what
-- the result is (its shape and dtype, and its elements where a reduction over nothing gives some: sums 0, products
-- 1, matmul with an empty inner dim zeros). Without a usable CUDA device it prints a TAP skip plan;
-- GRACE_TEST_DEVICE=cpu runs it CPU against CPU (a check of this file).
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"

local DEV, to_dev, flat = H.DEV, H.to_dev, H.flat

local function same(got, want)
  if got.dtype ~= want.dtype or H.shape(got) ~= H.shape(want) then
    return false, ("%s %s vs %s %s"):format(got.dtype, H.shape(got), want.dtype, H.shape(want))
  end
  local a, b = flat(got:cpu()), flat(want)
  for i = 1, #b do
    if a[i] ~= b[i] and not (a[i] ~= a[i] and b[i] ~= b[i]) then return false, ("element %d: %s vs %s"):format(i, a[i], b[i]) end
  end
  return true
end

-- Runs f on CPU tensors and on device copies (eagerly and compiled); the results must agree.
local function check(name, f, ...)
  local args = table.pack(...)
  local dargs = {}
  for i = 1, args.n do dargs[i] = grace.is_tensor(args[i]) and to_dev(args[i]) or args[i] end
  local want = table.pack(pcall(f, table.unpack(args, 1, args.n)))
  for _, how in ipairs({"eager", "compiled"}) do
    local g = how == "eager" and f or grace.compile(f)
    local got = table.pack(pcall(g, table.unpack(dargs, 1, args.n)))
    if not want[1] then
      tap.ok(not got[1], ("%s (%s): an error on the device as on the CPU"):format(name, how),
             got[1] and "" or nil)
    elseif not got[1] then
      tap.ok(false, ("%s (%s): runs on the device"):format(name, how), tostring(got[2]))
    else
      local good, why = got.n == want.n, "result count"
      for i = 2, want.n do
        if good and grace.is_tensor(want[i]) then
          good, why = same(got[i], want[i])
          if good and got[i].device ~= DEV then good, why = false, "result on " .. got[i].device end
        end
      end
      tap.ok(good, ("%s (%s): as on the CPU"):format(name, how), not good and why or nil)
    end
  end
end

local E0 = grace.randn({0, 5})       -- zero rows
local E1 = grace.randn({4, 0})       -- zero columns
local E2 = grace.randn({3, 0, 2})    -- zero in the middle
local X = grace.randn({4, 5})

-- pointwise, broadcasting included
check("exp of [0,5]", function(a) return a:exp() end, E0)
check("add [0,5] + [5]", function(a, b) return a + b end, E0, grace.randn({5}))
check("mul [4,0] * [4,1]", function(a, b) return a * b end, E1, grace.randn({4, 1}))
check("where over [3,0,2]", function(a) return grace.where(a:gt(0), a, 0) end, E2)
check("a fused chain over [3,0,2]", function(a) return ((a * 2 + 1):tanh() - a):abs() end, E2)
check("cast of [0,5] to float16", function(a) return a:cast("float16") end, E0)
-- reductions over an empty dim and of empty tensors
check("sum over an empty dim", function(a) return a:sum(2) end, E1)
check("sum of all of [0,5]", function(a) return a:sum() end, E0)
check("prod over an empty dim", function(a) return a:prod(2) end, E1)
check("mean over a non-empty dim of [0,5]", function(a) return a:mean(2) end, E0)
check("max of an empty tensor (an error)", function(a) return a:max() end, E0)
check("argmax over an empty dim (an error)", function(a) return a:argmax(2) end, E1)
check("softmax over rows of [0,5]", function(a) return a:softmax(2) end, E0)
check("softmax over empty rows of [4,0]", function(a) return a:softmax(2) end, E1)
check("cumsum of [3,0,2]", function(a) return a:cumsum(3) end, E2)
check("layer_norm of [0,5]", function(a) return grace.layer_norm(a, {5}) end, E0)
-- matrix products
check("[0,5] @ [5,3]", function(a, b) return a:matmul(b) end, E0, grace.randn({5, 3}))
check("[4,0] @ [0,3]: zeros", function(a, b) return a:matmul(b) end, E1, grace.randn({0, 3}))
check("[4,5] @ [5,0]", function(a, b) return a:matmul(b) end, X, grace.randn({5, 0}))
check("batched [3,0,2] @ [2,4]", function(a, b) return a:matmul(b) end, E2, grace.randn({2, 4}))
-- shapes and indexing
check("cat of [0,5] and [4,5]", function(a, b) return grace.cat({a, b}, 1) end, E0, X)
check("cat of two [4,0] along 2", function(a) return grace.cat({a, a}, 2) end, E1)
check("transpose and contiguous of [3,0,2]", function(a) return a:transpose(1, 3):contiguous() end, E2)
check("reshape [0,5] to [5,0]", function(a) return a:reshape(5, 0) end, E0)
check("index_select with no indices", function(a, i) return a:index_select(1, i) end, X, grace.zeros({0}, {dtype = "int64"}))
check("embedding of no ids", function(i, w) return grace.embedding(i, w) end, grace.zeros({2, 0}, {dtype = "int64"}),
      grace.randn({7, 3}))
check("gather with an empty index", function(a, i) return a:gather(2, i) end, X, grace.zeros({4, 0}, {dtype = "int64"}))
check("sort of [4,0]", function(a) return a:sort(2) end, E1)
check("topk 0 of [4,5]", function(a) return a:topk(0) end, X)
check("x[i] = v over a [0,5] view", function(a) local b = a:clone(); b:narrow(1, 1, 0):fill_(3); return b end, X)
-- creation
check("zeros and arange with nothing", function() return grace.zeros({0, 3}, {device = DEV}) end)

tap.done()
