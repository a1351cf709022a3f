-- test_adversarial.lua: inputs found by fuzzing that crashed the interpreter or gave silent wrong results. Lua's
-- promise is that no script can crash it: each input here must give a Lua error with a clear message (naming the
-- op) or the right result, and the VM must work after it.
local tap = require "tests.lua.tap"
local grace = require "grace"

local BIG = 1 << 62
local MAX, MIN = math.maxinteger, math.mininteger

local function still_works(name)
  local ok, v = pcall(function() return (grace.ones(2, 2) + 1):sum():item() end)
  tap.ok(ok and v == 8, name .. ": the VM still works after it")
end

-- fn must raise an error matching each of patterns (plain text)
local function raises(fn, patterns, name)
  tap.raises(fn, patterns, name)
  still_works(name)
end

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

tap.done()
