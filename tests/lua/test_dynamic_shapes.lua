-- test_dynamic_shapes.lua: symbolic sizes in grace.compile. A batch that changes 1..64 through an MLP and a
-- transformer block, and a key/value cache growing 1..300 through an attention step, each take at most 2 traces
-- (counted by the compiled function's stats) and give what the same Lua function gives eagerly. Relations guard:
-- a broadcast that needs two sizes equal retraces (or fails as eager does) when they differ, never a wrong result;
-- a size read on the host specialises that dim (a program with the traced number baked in never runs at another
-- size); opts.dynamic = false keeps one trace per size; opts.dynamic = {x = {1}} is symbolic from the first trace;
-- grace.explain shows the symbols, their bounds and relations.
local tap = require "tests.lua.tap"
local grace = require "grace"
local nn = require "grace.nn"

local section = tap.section

local function maxdiff(a, b) return (a - b):abs():max():item() end
local function traces(f) return f:stats().traces end

section("an MLP over batch sizes 1..64", function()
  grace.manual_seed(11)
  local mlp = nn.MLP(12, 24)
  local f = grace.compile(function(x) return mlp(x) end)
  local worst = 0
  for b = 1, 64 do
    local x = grace.randn({b, 12})
    worst = math.max(worst, maxdiff(f(x), mlp(x)))
  end
  tap.ok(worst <= 1e-5, "every batch size equals eager (largest difference " .. worst .. ")")
  tap.ok(traces(f) <= 2, "at most 2 traces (" .. traces(f) .. ")")
  tap.is(f:stats().symbolic_entries, 1, "one entry has symbolic sizes")
  tap.is(f:stats().dynamic_dims[1] and f:stats().dynamic_dims[1][1], 1, "argument 1's dim 1 is symbolic")
  tap.is(f:stats().calls - f:stats().hits, traces(f), "every other call hit a cached entry")
end)

section("a transformer block over batch sizes 1..64", function()
  grace.manual_seed(12)
  local blk = nn.TransformerBlock(16, 2)
  local f = grace.compile(function(x) return blk(x) end)
  local worst = 0
  for b = 1, 64 do
    local x = grace.randn({b, 5, 16})
    worst = math.max(worst, maxdiff(f(x), blk(x)))
  end
  tap.ok(worst <= 1e-4, "every batch size equals eager (largest difference " .. worst .. ")")
  tap.ok(traces(f) <= 2, "at most 2 traces (" .. traces(f) .. ")")
  tap.is(f:stats().symbolic_entries, 1, "one entry has symbolic sizes")
  local text = grace.explain(f, grace.randn({3, 5, 16}))
  tap.ok(text:find("argument 1 is a tensor float32 [s1, 5, 16]", 1, true), "explain shows the symbolic guard")
  tap.ok(text:find("s1 >= 2 (traced at 3): argument 1 dim 1", 1, true), "explain shows the symbol and its bound")
end)

section("a cache growing 1..300 through an attention step", function()
  grace.manual_seed(13)
  local D = 8
  local Wq, Wv = grace.randn({D, D}), grace.randn({D, D})
  local function step(K, V, x)
    K = grace.cat({K, x}, 1)
    V = grace.cat({V, x:matmul(Wv)}, 1)
    local att = (x:matmul(Wq):matmul(K:t()) / math.sqrt(D)):softmax(-1)
    return att:matmul(V), K, V
  end
  local f = grace.compile(step)
  local K, V = grace.zeros({1, D}), grace.zeros({1, D})
  local worst = 0
  for _ = 1, 300 do
    local x = grace.randn({1, D})
    local o, K2, V2 = f(K, V, x)
    local oe, Ke = step(K, V, x)
    worst = math.max(worst, maxdiff(o, oe), maxdiff(K2, Ke))
    K, V = K2, V2
  end
  tap.is(K:size(1), 301, "the cache grew to 301 rows")
  tap.ok(worst <= 1e-5, "every length equals eager (largest difference " .. worst .. ")")
  tap.ok(traces(f) <= 2, "at most 2 traces (" .. traces(f) .. ")")
  local text = grace.explain(f, K, V, grace.randn({1, D}))
  tap.ok(text:find("s2 == s1", 1, true), "explain shows the relation the matmul over both caches needs")
  tap.ok(text:find("s3 = s1 + 1", 1, true), "explain shows the derived size of the grown cache")
  -- the relation guards: caches of different lengths are not the traced program's
  tap.raises(function() f(grace.zeros({5, D}), grace.zeros({6, D}), grace.randn({1, D})) end, {"matmul"},
             "caches of different lengths fail as eager fails")
end)

section("a broadcast that needs two sizes equal", function()
  local function add(x, y) return x + y end
  local f = grace.compile(add)
  local a, b = grace.randn({3, 4}), grace.randn({3, 4})
  tap.ok(maxdiff(f(a, b), add(a, b)) == 0, "[3,4] + [3,4]")
  a, b = grace.randn({5, 4}), grace.randn({5, 4})
  tap.ok(maxdiff(f(a, b), add(a, b)) == 0, "[5,4] + [5,4]: retraced symbolic")
  tap.is(f:stats().symbolic_entries, 1, "the second trace is symbolic")
  local n = traces(f)
  a, b = grace.randn({9, 4}), grace.randn({9, 4})
  tap.ok(maxdiff(f(a, b), add(a, b)) == 0, "[9,4] + [9,4]: right")
  tap.is(traces(f), n, "[9,4] + [9,4]: no retrace")
  tap.raises(function() f(grace.randn({6, 4}), grace.randn({7, 4})) end, {"broadcast"},
             "[6,4] + [7,4] fails as eager fails, not a wrong result")
  tap.ok(f:stats().last_guard_failure:find("s1", 1, true), "the guard failure names the relation: " ..
         f:stats().last_guard_failure)
  a, b = grace.randn({6, 4}), grace.randn({1, 4})
  tap.ok(maxdiff(f(a, b), add(a, b)) == 0, "[6,4] + [1,4] (a size 1 broadcasts): right")
  tap.ok(traces(f) > n, "[6,4] + [1,4] retraced (size 1 is never symbolic)")
  local text = grace.explain(f, grace.randn({4, 4}), grace.randn({4, 4}))
  tap.ok(text:find("s2 == s1", 1, true), "explain shows the relation")
end)

section("a size read on the host is specialised", function()
  local function scale(x) return x * x:size(1) end
  local f = grace.compile(scale)
  local all = true
  for n = 2, 7 do
    local x = grace.randn({n, 3})
    if maxdiff(f(x), scale(x)) ~= 0 then all = false end
  end
  tap.ok(all, "x * x:size(1) is right at every size")
  tap.is(f:stats().symbolic_entries, 0, "no entry keeps the size symbolic")
  tap.is(traces(f), 6, "one trace per size, as the host computes with it")
  local text = grace.explain(f, grace.randn({4, 3}))
  tap.ok(text:find("argument 1 is a tensor float32 [4, 3]", 1, true), "explain: guarded by value")

  -- a size the host reads only for a dim that stays static keeps the others symbolic
  local function cols(x) return x:sum(2) * x:size(2) end
  local g = grace.compile(cols)
  all = true
  for n = 2, 20 do
    local x = grace.randn({n, 3})
    if maxdiff(g(x), cols(x)) ~= 0 then all = false end
  end
  tap.ok(all, "x:sum(2) * x:size(2) right at every size")
  tap.ok(traces(g) <= 2, "at most 2 traces (" .. traces(g) .. ")")
end)

section("a reshape to sizes the host computed is specialised", function()
  local function flat(x) local n = x:size(1) return x:reshape({n * 3}) * 2 end
  local f = grace.compile(flat)
  local all = true
  for n = 2, 5 do
    local x = grace.randn({n, 3})
    if maxdiff(f(x), flat(x)) ~= 0 then all = false end
  end
  tap.ok(all, "reshape({n * 3}) right at every size")
  tap.is(f:stats().symbolic_entries, 0, "no symbolic entry")
  -- with -1 the reshape follows the size: one symbolic entry
  local function flat2(x) return x:reshape({-1}) * 2 end
  local g = grace.compile(flat2)
  all = true
  for n = 2, 9 do
    local x = grace.randn({n, 3})
    if maxdiff(g(x), flat2(x)) ~= 0 then all = false end
  end
  tap.ok(all, "reshape({-1}) right at every size")
  tap.ok(traces(g) <= 2, "reshape({-1}): at most 2 traces (" .. traces(g) .. ")")
  tap.ok(grace.explain(g, grace.randn({4, 3})):find("s2 = 3*s1", 1, true), "explain: the flattened size is 3*s1")
end)

section("sizes the binding computes with", function()
  -- zeros_like makes its shape from x's sizes: specialised, right at every size
  local f = grace.compile(function(x) return grace.zeros_like(x) + 1, x * 2 end)
  local all = true
  for n = 2, 6 do
    local a, b = f(grace.randn({n, 2}))
    if a:size(1) ~= n or b:size(1) ~= n then all = false end
  end
  tap.ok(all, "zeros_like(x) has x's rows at every size")
  tap.is(f:stats().symbolic_entries, 0, "zeros_like: no symbolic entry")
  -- a negative index is resolved by the op at run time: it stays symbolic
  local g = grace.compile(function(x) return x[-1] * 3 end)
  all = true
  for n = 2, 6 do
    local x = grace.randn({n, 2})
    if maxdiff(g(x), x[n] * 3) ~= 0 then all = false end
  end
  tap.ok(all, "x[-1] is the last row at every size")
  tap.ok(traces(g) <= 2, "x[-1]: at most 2 traces (" .. traces(g) .. ")")
  -- chunk computes the pieces' lengths from the size: specialised
  local function halves(x) local p = x:chunk(2, 1) return p[1]:sum(1) + p[2]:sum(1) end
  local h = grace.compile(halves)
  all = true
  for n = 2, 9 do
    local x = grace.randn({n, 2})
    if maxdiff(h(x), halves(x)) > 1e-6 then all = false end
  end
  tap.ok(all, "chunk(2) right at every size")
  tap.is(h:stats().symbolic_entries, 0, "chunk: no symbolic entry")
end)

section("opts.dynamic", function()
  local function f0(x) return x:relu() + 1 end
  local f = grace.compile(f0, {dynamic = false})
  for n = 2, 6 do f(grace.randn({n})) end
  tap.is(traces(f), 5, "dynamic = false: one trace per size")
  tap.is(f:stats().symbolic_entries, 0, "dynamic = false: nothing symbolic")

  local g = grace.compile(function(x, y) return x:relu() + y end, {dynamic = {x = {1}}})
  local all = true
  for n = 2, 9 do
    local x, y = grace.randn({n, 2}), grace.randn({2})
    if maxdiff(g(x, y), x:relu() + y) ~= 0 then all = false end
  end
  tap.ok(all, "dynamic = {x = {1}}: right at every size")
  tap.is(traces(g), 1, "dynamic = {x = {1}}: symbolic from the first trace")

  local h = grace.compile(function(x) return x * 2 end, {dynamic = {[1] = {1, 2}}})
  for n = 2, 5 do h(grace.randn({n, n + 1})) end
  tap.is(traces(h), 1, "dynamic = {[1] = {1, 2}}: both dims symbolic, one trace")
  tap.raises(function() grace.compile(function(x) return x end, {dynamic = {nope = {1}}}) end,
             {"nope", "not a parameter"}, "a name that is no parameter is refused")
  tap.raises(function() grace.compile(function(x) return x end, {dynamic = {x = {0}}}) end,
             {"dim of argument 1"}, "dim 0 is refused (dims are 1-based)")
end)

tap.done()
