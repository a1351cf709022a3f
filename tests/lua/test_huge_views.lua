-- test_huge_views.lua: an expanded view holds a few bytes of storage for a huge shape (2^40 elements here). An op
-- that makes it contiguous, copies it or sizes working memory from it must fail with a clear error naming the op
-- and the size, never crash and never try to fill terabytes. No memory cap is set here (tests/cli/limits.sh checks
-- the cap's messages): a block larger than the machine's memory is refused by grace's allocator, and a size that
-- overflows is refused before any allocation.
local tap = require "tests.lua.tap"
local grace = require "grace"
local raises = require("tests.lua.survive").raises

local T40 = 1 << 40   -- 2^40 elements: 4 TiB as float32, more than any test machine's memory

local function huge() return grace.zeros(1):expand(T40) end
local function huge_index() return grace.ones({1}, {dtype = "int64"}):expand(T40) end

tap.section("tensors of a huge shape", function()
  raises(function() return grace.zeros(T40) end,
    {"full: out of host memory allocating 4398046511104 bytes for shape [1099511627776]"}, "zeros(2^40)")
  raises(function() return grace.empty(T40) end, {"empty: out of host memory allocating 4398046511104 bytes"},
    "empty(2^40): refused, not reserved and left untouched")
  raises(function() return huge():contiguous() end, {"contiguous: out of host memory allocating 4398046511104 bytes"},
    "contiguous of an expanded view")
  local v = huge()
  tap.is(v:numel(), T40, "the expanded view itself is fine: numel 2^40")
  tap.is(v:reshape(-1):numel(), T40, "... and so is a view of it")
end)

tap.section("working memory sized from an expanded view", function()
  -- topk's scratch is 2 x 16 bytes per element of a row: 2^59 elements overflowed size_t (a crash before)
  raises(function() return grace.zeros(1):expand(1 << 59):topk(100) end,
    {"topk: working memory of 1152921504606846976 x 16 bytes is too large"}, "topk over a 2^59-element row")
  raises(function() return huge():topk(100) end, {"topk: out of host memory for 35184372088832 bytes of working memory"},
    "topk over a 2^40-element row")
  local src = grace.ones(3)
  raises(function() return src:index_select(1, huge_index()) end,
    {"index_select: out of host memory for 8796093022208 bytes of working memory"}, "index_select, an expanded index")
  raises(function() return src:gather(1, huge_index()) end,
    {"gather: out of host memory for 8796093022208 bytes of working memory"}, "gather, an expanded index")
  raises(function() return grace.embedding(huge_index(), grace.ones(3, 4)) end,
    {"embedding: out of host memory for 8796093022208 bytes of working memory"}, "embedding, expanded ids")
  local dst = grace.zeros(4)
  raises(function() return dst:index_copy_(1, huge_index(), huge()) end,
    {"index_copy_: out of host memory for 8796093022208 bytes of working memory"}, "index_copy_, an expanded index")
  tap.is(dst:sum():item(), 0.0, "index_copy_ left its target as it was")
  raises(function() return dst:scatter(1, huge_index(), huge()) end,
    {"scatter: out of host memory for 8796093022208 bytes of working memory"}, "scatter, an expanded index")
end)

tap.section("saving an expanded view", function()
  local dir = os.tmpname()
  os.remove(dir)
  for _, ext in ipairs {"npy", "safetensors"} do
    local path = dir .. "." .. ext
    raises(function() grace.save(path, ext == "npy" and huge() or {x = huge()}) end,
      {"save: out of host memory for 4398046511104 bytes of working memory"}, "save ." .. ext)
    tap.ok(io.open(path) == nil, "save ." .. ext .. ": no file is left behind")
  end
end)

tap.done()
