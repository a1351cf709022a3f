-- test_adversarial.lua: inputs found by fuzzing that crashed the interpreter or gave silent wrong results. Lua's
-- promise is that no script can crash it: each input here must give a Lua error with a clear message (naming the
-- op) or the right result, and the VM must work after it.
local tap = require "tests.lua.tap"
local grace = require "grace"
local survive = require "tests.lua.survive"
local still_works, raises = survive.still_works, survive.raises

local BIG = 1 << 62
local MAX, MIN = math.maxinteger, math.mininteger

local function gives(fn, check, name)
  local ok, v = pcall(fn)
  tap.ok(ok and check(v), name .. (ok and "" or ": " .. tostring(v)))
  still_works(name)
end

tap.section("1. shape arithmetic that overflows int64", function()
  local x = grace.zeros(4)
  raises(function() return x:narrow(1, 3, MAX) end, {"narrow", "out of range"}, "narrow: start + length past int64")
  raises(function() return x:narrow(1, 2, BIG) end, {"narrow", "out of range"}, "narrow: a huge length")
  raises(function() return x:reshape(BIG, 4, -1) end, {"reshape", "too large"}, "reshape: the known sizes wrap to 0")
  raises(function() return x:reshape(BIG, 8, 2^60 | 0) end, {"reshape"}, "reshape: the product wraps to 4")
  raises(function() return grace.zeros(1, 1):expand(BIG, 4) end, {"expand", "too large"},
         "expand: 2^64 elements (was a silent empty tensor)")
  raises(function() return grace.zeros(1, 1):expand(BIG, 4):sum():item() end, {"expand", "too large"},
         "expand then sum (was 0)")
  raises(function() return grace.zeros(2):rep(BIG) end, {"repeat", "too many"}, "rep: the size wraps negative")
  raises(function() return grace.zeros(2, 2):rep(BIG, 4) end, {"repeat"}, "rep: a product past 2^60")
  raises(function() return grace.zeros(4):split({BIG, BIG, 4}) end, {"split"}, "split: sizes whose sum wraps")
  raises(function() return grace.arange(0, 2 ^ 62) end, {"arange", "too many"}, "arange: 2^62 elements")
  raises(function() return grace.arange(MIN, MAX) end, {"arange", "too many"}, "arange: mininteger to maxinteger")
  raises(function() return grace.arange(0, 1e300) end, {"arange", "too many"}, "arange: a float bound past int64")
  raises(function() return grace.zeros(BIG, 0):tril() end, {"too large"}, "tril of [2^62, 0]")
  raises(function() return grace.zeros(BIG, 0, BIG) end, {"too large"}, "zeros of [2^62, 0, 2^62]")
  gives(function() return grace.zeros(4):chunk(MAX) end, function(t) return #t == 4 and t[1]:numel() == 1 end,
        "chunk into maxinteger pieces (was SIGFPE)")
  gives(function() return grace.zeros(4):split(MAX) end, function(t) return #t == 1 and t[1]:numel() == 4 end,
        "split into pieces of maxinteger")
  gives(function() return grace.zeros(5):chunk(2) end, function(t) return #t == 2 and t[2]:numel() == 2 end,
        "chunk still rounds up")
  gives(function() return grace.arange(MAX - 3, MAX) end,
        function(t) return t:numel() == 3 and t[3]:item() == MAX - 1 end, "arange near maxinteger")
  raises(function() return grace.zeros(2, 2):view(BIG, BIG) end, {"view"}, "view: sizes whose product wraps")
  raises(function() return grace.zeros(3):expand(2, BIG, 3) end, {"expand", "too large"}, "expand a new leading dim")
end)

tap.section("2. empty dims: no division by zero, no loop over nothing", function()
  local B = 1 << 40
  local function empty(shape)
    return function(t)
      local sz = t:size()
      if #sz ~= #shape then return false end
      for i = 1, #shape do if sz[i] ~= shape[i] then return false end end
      return true
    end
  end
  gives(function() return grace.zeros(B, 0):cumsum(2) end, empty{B, 0}, "cumsum over dim 2 of [2^40, 0] (was a hang)")
  gives(function() return grace.zeros(B, 0):cumsum(1) end, empty{B, 0}, "cumsum over dim 1 of [2^40, 0]")
  gives(function() return grace.zeros(B, 0):softmax(1) end, empty{B, 0}, "softmax over dim 1 of [2^40, 0] (was SIGFPE)")
  gives(function() return grace.zeros(B, 0):log_softmax(1) end, empty{B, 0}, "log_softmax over dim 1 of [2^40, 0]")
  gives(function() return grace.zeros(B, 0):softmax(2) end, empty{B, 0}, "softmax over the empty dim")
  gives(function() return grace.zeros(B, 0):sum(1) end, empty{0}, "sum over the long dim of [2^40, 0]")
  gives(function() return grace.zeros(0, 5):mean(1) end, function(t) local v = t[5]:item() return t:numel() == 5 and v ~= v end,
        "mean over the empty dim of [0, 5] is nan")
  gives(function() return grace.zeros(B, 0) * 2 + 1 end, empty{B, 0}, "pointwise on [2^40, 0]")
  gives(function() return grace.zeros(B, 0):t():contiguous() end, empty{0, B}, "contiguous of a transposed [2^40, 0]")
  gives(function() return grace.zeros(B, 0):matmul(grace.zeros(0, 0)) end, empty{B, 0}, "matmul [2^40, 0] x [0, 0]")
  gives(function() return grace.zeros(B, 0):sort(2) end, empty{B, 0}, "sort of [2^40, 0]")
  gives(function() return grace.zeros(3, 0):sum(2) end, function(t) return t:size(1) == 3 and t:sum():item() == 0 end,
        "sum over an empty dim is 0")
  gives(function() return grace.zeros(3, 0):prod(2) end, function(t) return t:sum():item() == 3 end,
        "prod over an empty dim is 1")
  gives(function() return grace.zeros(3, 0):mean(2) end, function(t) local v = t[1]:item() return v ~= v end,
        "mean over an empty dim is nan")
  gives(function() return grace.zeros(4, 0):cumsum(1) end, empty{4, 0}, "cumsum of [4, 0]")
  gives(function() return grace.zeros(0, 4):softmax(2) end, empty{0, 4}, "softmax of [0, 4]")
  raises(function() return grace.zeros(3, 0):max(2) end, {"max", "zero-size dim"}, "max over an empty dim")
  raises(function() return grace.zeros(B, 0):tolist() end, {"tolist", "[1099511627776, 0]", "tables"},
         "tolist of [2^40, 0] (was memory without bound)")
  gives(function() return grace.zeros(3, 0):tolist() end, function(t) return #t == 3 and #t[1] == 0 end,
        "tolist of [3, 0]")
  gives(function() return grace.zeros(0):tolist() end, function(t) return #t == 0 end, "tolist of [0]")
end)

tap.section("3. Lua code run in the middle of a binding call", function()
  -- an __index that closes the list's first tensor once it was read, and makes tensors nothing else holds
  local a = grace.ones(2)
  local proxy = setmetatable({}, {
    __len = function() return 3 end,
    __index = function(_, i)
      if i == 1 then return a end
      do local z <close> = a end; collectgarbage(); collectgarbage()
      return grace.full({2}, i)
    end})
  gives(function() return grace.cat(proxy) end,
        function(t) local l = t:tolist() return #l == 6 and l[1] == 1 and l[2] == 1 and l[3] == 2 and l[6] == 3 end,
        "cat: __index closes an element already read")
  -- a shape table whose metamethods close the tensor being reshaped
  local x = grace.arange(0, 6)
  local shape = setmetatable({}, {
    __len = function() do local z <close> = x end; collectgarbage(); return 2 end,
    __index = function(_, i) collectgarbage(); return i == 1 and 2 or 3 end})
  gives(function() return x:reshape(shape) end, function(t) return t:size(1) == 2 and t[2][3]:item() == 5 end,
        "reshape: __len closes the input")
  -- finalizers that call grace, run by the allocations of binding calls holding wrapped numbers
  local made = 0
  local function litter(n)
    for _ = 1, n do
      setmetatable({}, {__gc = function() made = made + 1; local _ = (grace.ones(3) * 2 + 1):sum() end})
    end
  end
  local ok, err = pcall(function()
    local y, c = grace.ones(4), grace.zeros(4):bool()
    local s = 0
    for i = 1, 300 do
      litter(20)
      s = s + (y * 1.5 + i):sum():item() + grace.where(c, y, 2.5):sum():item()
    end
    return s
  end)
  tap.ok(ok and made > 0, "binary ops and where with finalizers calling grace" .. (ok and "" or ": " .. tostring(err)))
  -- a compiled call with dynamic numbers while finalizers run
  local f = grace.compile(function(t, p, q) return t * p + q end, {dynamic = true})
  local ok2, v2 = pcall(function()
    local r = 0
    for i = 1, 50 do litter(20); r = f(grace.ones(3), i + 0.5, 0.25):sum():item() end
    return r
  end)
  tap.ok(ok2 and v2 == 3 * 50.75, "compiled calls with dynamic numbers and finalizers calling grace")
  -- now, not at lua_close: tensors a finalizer makes while the state closes are never collected
  collectgarbage(); collectgarbage()
  -- an error raised by a metamethod in the middle of a call leaves nothing behind that a later call frees twice
  for i = 1, 3 do
    local bad = setmetatable({}, {__len = function() return 2 end, __index = function() error("boom " .. i) end})
    raises(function() return grace.ones(2):reshape(bad) end, {"boom"}, "an error from __index, round " .. i)
  end
  tap.is(getmetatable(grace.ones(1)).__gc, nil, "getmetatable(x) does not give __gc")
  tap.is(getmetatable(grace.ones(1)).__name, "grace.Tensor", "getmetatable(x).__name is still grace.Tensor")
  raises(function() return setmetatable(grace.ones(1), {}) end, {"table expected"}, "setmetatable on a tensor")
end)

tap.section("4. limits of fixed-size arrays", function()
  local f = grace.compile(function(t, ...)
    for _, v in ipairs({...}) do t = t + v end
    return t
  end, {dynamic = true})
  local args = {}
  for i = 1, 40 do args[i] = i + 0.5 end
  gives(function() return f(grace.zeros(2), table.unpack(args)) end, function(t) return t[1]:item() == 840 end,
        "40 dynamic numbers (was: internal error: too many temporaries)")
  local list = {}
  for i = 1, 100 do list[i] = grace.full({1}, i) end
  gives(function() return grace.cat(list) end, function(t) return t:numel() == 100 and t[100]:item() == 100 end,
        "cat of 100 tensors")
  local g = grace.compile(function(...) return grace.cat({...}) * 2 end)
  gives(function() g(table.unpack(list)); return g(table.unpack(list)) end,
        function(t) return t:numel() == 100 and t[100]:item() == 200 end, "a compiled cat of 100 tensors (verify of >64 inputs)")
  gives(function() return grace.ones(2) + 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8 + 9 + 10 + 11 + 12 + 13 + 14 + 15 + 16 + 17 end,
        function(t) return t[1]:item() == 154 end, "17 numbers in one expression")
end)

tap.done()
