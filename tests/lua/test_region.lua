-- test_region.lua: grace.cond and grace.while_loop (docs/lua_api.md, "Control flow"). Eagerly, against values
-- computed here in plain Lua: both outcomes, predicates of bool, float and integer dtype and Lua booleans, loops of
-- 0, 1 and many iterations, max_iters, nesting both ways, and every error with the message it must give. Compiled
-- (grace.compile), against the same Lua functions run eagerly: one trace for calls that take different branches or
-- loop a different number of times, hits without retracing, the region in f:ir(), tensors from outside a branch
-- passed as explicit arguments, nested regions, random numbers inside regions drawing what the eager call draws
-- (and leaving the generator where it leaves it), in-place writes to tensors from outside a branch (written back
-- once after the region; refused in a while_loop), and what cannot be compiled (a host read inside a branch, a region
-- in a function with graph breaks) running eagerly with its reason.
local tap = require "tests.lua.tap"
local grace = require "grace"

local section = tap.section

local function list(t) return t:reshape(-1):tolist() end

-- plain Lua elementwise maps over lists
local function map2(a, b, f) local r = {} for i = 1, #a do r[i] = f(a[i], b[i]) end return r end
local function same_list(a, b, tol)
  if #a ~= #b then return false end
  for i = 1, #a do
    if math.abs(a[i] - b[i]) > (tol or 0) * math.max(1, math.abs(b[i])) then return false end
  end
  return true
end
local function same_tensor(a, b)
  return a.dtype == b.dtype and table.concat(a:size(), "x") == table.concat(b:size(), "x") and same_list(list(a), list(b))
end

local XV, YV = {1.5, -2, 3, 0.25}, {10, 0.5, -3, 8}
local function X() return grace.tensor(XV) end
local function Y() return grace.tensor(YV) end
local add = function(a, b) return a + b end
local mul = function(a, b) return a * b end

section("cond eagerly", function()
  local preds = {
    {grace.tensor(true), true, "bool true"}, {grace.tensor(false), false, "bool false"},
    {grace.tensor(2.5), true, "float 2.5"}, {grace.tensor(0.0), false, "float 0"},
    {grace.tensor(3), true, "int 3"}, {grace.tensor(0), false, "int 0"},
    {true, true, "Lua true"}, {0, false, "Lua 0"},
  }
  for _, p in ipairs(preds) do
    local r = grace.cond(p[1], function(a, b) return a + b end, function(a, b) return a * b end, X(), Y())
    tap.ok(same_list(list(r), map2(XV, YV, p[2] and add or mul)), "cond with a " .. p[3] .. " predicate")
  end
  local a, b = grace.cond(grace.tensor(true), function(x, k) return x * k, x:sum() end,
                          function(x, k) return x, x:sum() end, X(), 2)
  tap.ok(same_list(list(a), map2(XV, XV, function(u) return u * 2 end)) and b:item() == 2.75,
         "several results, and a Lua number passed through as an argument")
  tap.raises(function() grace.cond(grace.tensor({true, false}), add, mul, X(), Y()) end,
             {"cond: the predicate must be a 0-d tensor", "bool [2]"}, "a 1-d predicate")
  tap.raises(function() grace.cond(grace.tensor(true), function() return 1 end, mul, X(), Y()) end,
             {"then_fn returns a number as result 1"}, "a branch returning a number")
  tap.raises(function() grace.cond(grace.tensor(true), "f", mul) end, {"function expected"}, "a branch that is no function")
end)

section("while_loop eagerly", function()
  -- i counts up to 5, acc adds y each time: the count of iterations is 5 - i0 (or 0)
  local function run(i0, opts)
    return grace.while_loop(function(i, acc, y) return i:lt(5) end,
                            function(i, acc, y) return i + 1, acc + y, y end,
                            {grace.tensor(i0), X(), Y()}, opts)
  end
  local function want(n) local r = {} for k = 1, 4 do r[k] = XV[k] + n * YV[k] end return r end
  for _, c in ipairs({{5, 0}, {4, 1}, {-15, 20}}) do
    local i, acc = run(c[1])
    tap.ok(i:item() == math.max(5, c[1]) and same_list(list(acc), want(c[2]), 1e-6), ("%d iterations"):format(c[2]))
  end
  local i = run(2, {max_iters = 3})
  tap.is(i:item(), 5, "exactly max_iters iterations run")
  tap.raises(function() run(1, {max_iters = 3}) end, {"while_loop", "max_iters=3"}, "past max_iters is an error")
  tap.raises(function() grace.while_loop(function(x) return x:sum():lt(100) end, function(x) return x:narrow(1, 1, 2) end,
                                         {X()}) end,
             {"body_fn changes state 1 from float32 [4] to float32 [2]"}, "a body changing the state's shape")
  tap.raises(function() grace.while_loop(function(x) return x:lt(100) end, function(x) return x end, {X()}) end,
             {"cond_fn's result must be a 0-d tensor", "bool [4]"}, "a cond returning a vector")
  tap.raises(function() grace.while_loop(function(x) return x:sum():lt(100) end, function(x) return x:int() end, {X()}) end,
             {"body_fn changes state 1 from float32 [4] to int32 [4]"}, "a body changing the state's dtype")
  tap.raises(function() grace.while_loop(add, add, {1}) end, {"state[1] is a number, not a tensor"}, "a number in the state")
  tap.raises(function() grace.while_loop(add, add, {X()}, {max_iters = -1}) end, {"max_iters must be an integer >= 0"},
             "a negative max_iters")
end)

-- y doubled until its sum passes `limit`, counting the doublings; cond picks per iteration
local function doubling(x, limit)
  return grace.while_loop(function(n, v) return v:sum():lt(limit) end,
                          function(n, v) return n + 1, grace.cond(n:remainder(2):eq(0), function(u) return u * 2 end,
                                                                   function(u) return u * 3 end, v) end,
                          {grace.tensor(0), x})
end

section("nested regions eagerly", function()
  local n, v = doubling(grace.tensor({1.0, 1, 1, 1}), 100)
  -- by hand: 4 -> 8 (x2) -> 24 (x3) -> 48 (x2) -> 144 (x3): 4 iterations, elements 36
  tap.is(n:item(), 4, "cond inside while: iterations")
  tap.ok(same_list(list(v), {36, 36, 36, 36}), "cond inside while: values")
  local r = grace.cond(grace.tensor(true), function(x) return select(2, doubling(x, 50)) end, function(x) return x end,
                       grace.tensor({1.0, 1, 1, 1}))
  tap.ok(same_list(list(r), {36, 36, 36, 36}), "while inside cond")
end)

-- Compiles f, calls it on each input list, and compares every result with the eager call of f; returns the
-- compiled function.
local function against_eager(name, f, inputs)
  local cf = grace.compile(f)
  local good = true
  for k, args in ipairs(inputs) do
    local want = table.pack(f(table.unpack(args)))
    local got = table.pack(cf(table.unpack(args)))
    for j = 1, want.n do
      if not same_tensor(got[j], want[j]) then
        good = false
        tap.diag(("%s call %d result %d: got %s want %s"):format(name, k, j, tostring(got[j]), tostring(want[j])))
      end
    end
  end
  tap.ok(good, name .. ": compiled results equal eager ones")
  return cf
end

section("compiled cond", function()
  local w = grace.tensor({2.0, 2, 2, 2})   -- from outside the branch: an explicit argument of the region
  local f = function(p, x, y)
    local r = grace.cond(p, function(a, b) return a + b * w end, function(a, b) return (a - b):abs() end, x, y)
    return r * 3 + x
  end
  for _, pc in ipairs({{"bool", grace.tensor(true), grace.tensor(false)}, {"float", grace.tensor(0.5), grace.tensor(0.0)},
                       {"int", grace.tensor(7), grace.tensor(0)}}) do
    local cf = against_eager("cond, " .. pc[1] .. " predicate", f,
                             {{pc[2], X(), Y()}, {pc[3], X(), Y()}, {pc[2], Y(), X()}, {pc[3], Y(), X()}})
    local s = cf:stats()
    tap.ok(s.traces == 1 and s.hits == 3 and s.eager_calls == 0,
           ("%s: one trace, then hits (traces %d, hits %d, eager %d)"):format(pc[1], s.traces, s.hits, s.eager_calls))
    local ir = cf:ir()
    tap.ok(ir and ir:find("= cond %%0, %%1, %%2, %%3 : f32%[4%]") and ir:find("func @then") and ir:find("func @else"),
           pc[1] .. ": the IR holds the region, w passed in as an argument")
  end
  -- a branch returning its argument unchanged
  against_eager("a branch returning its argument", function(p, x)
    local r = grace.cond(p, function(a) return a end, function(a) return a + 1 end, x)
    return r, x * 2
  end, {{grace.tensor(true), X()}, {grace.tensor(false), X()}})
end)

section("compiled while_loop", function()
  local f = function(x, limit) return doubling(x, limit) end
  local cf = against_eager("cond inside while", f, {{grace.tensor({1.0, 1, 1, 1}), 100}, {grace.tensor({1.0, 2, 3, 4}), 100},
                                                     {grace.tensor({50.0, 50, 50, 50}), 100}, {grace.tensor({0.5, 0, 0, 0}), 100}})
  local s = cf:stats()
  tap.ok(s.traces == 1 and s.hits == 3, ("loops of 4, 3, 0 and 8 iterations share one trace (traces %d, hits %d)"):format(s.traces, s.hits))
  tap.ok(cf:ir():find("= while") and cf:ir():find("= cond"), "the IR holds the while with a cond in its body")
  local g = function(p, x)
    return grace.cond(p, function(v) return select(2, doubling(v, 1000)) end, function(v) return v - 1 end, x)
  end
  local cg = against_eager("while inside cond", g, {{grace.tensor(true), X():abs()}, {grace.tensor(false), X()},
                                                     {grace.tensor(true), Y():abs()}})
  tap.is(cg:stats().traces, 1, "while inside cond: one trace")
  local bounded = grace.compile(function(x) return grace.while_loop(function(v) return v:sum():lt(1000) end,
                                                                    function(v) return v * 2 end, {x}, {max_iters = 4}) end)
  tap.ok(same_list(list(bounded(grace.tensor({100.0, 100}))), {800, 800}), "compiled max_iters: within the bound")
  tap.raises(function() bounded(grace.tensor({1.0, 1})) end, {"max_iters=4"}, "compiled max_iters: past the bound")
end)

section("compiled errors", function()
  tap.raises(function() grace.compile(function(p, x)
      return grace.cond(p, function(a) return a end, function(a) return a:narrow(1, 1, 2) end, x) end)(grace.tensor(true), X())
  end, {"result 1 is float32 [4] from then_fn but float32 [2] from else_fn"}, "branches of different shapes")
  tap.raises(function() grace.compile(function(p, x)
      return grace.cond(p, function(a) return a end, function(a) return a:double() end, x) end)(grace.tensor(true), X())
  end, {"float32 [4] from then_fn but float64 [4] from else_fn"}, "branches of different dtypes")
  tap.raises(function() grace.compile(function(p, x)
      return grace.cond(p, function(a) return a, a end, function(a) return a end, x) end)(grace.tensor(false), X())
  end, {"then_fn returns 2 tensors, else_fn 1"}, "branches returning different counts")
  tap.raises(function() grace.compile(function(x)
      return grace.while_loop(function(v) return v:sum():lt(10) end, function(v) return v:sum() end, {x}) end)(X())
  end, {"body_fn changes state 1 from float32 [4] to float32 []"}, "a body changing the state's shape")
  tap.raises(function() grace.compile(function(p, x)
      return grace.cond(p, add, mul, x, x) end)(grace.tensor({1, 0}), X())
  end, {"predicate must be a 0-d tensor", "int64 [2]"}, "a non-0-d predicate")
  local outside = X()
  tap.raises(function() grace.compile(function(x)
      return grace.while_loop(function(v) return v:sum():lt(100) end, function(v) outside:add_(1) return v * 2 end, {x})
    end)(X())
  end, {"while_loop function writes in place to a tensor from outside it", "carry the tensor in the loop's state"},
     "an in-place write to a tensor from outside a while_loop's body")
  tap.ok(same_list(list(outside), XV), "and the tensor has its contents back")
end)

section("in-place writes inside a cond", function()
  -- a cache written at a position in one branch (and a row of it scaled through a view in the other, with a
  -- counter): the compiled function against the same Lua run eagerly on tensors of its own
  local function make()
    local cache, count = grace.zeros(4, 3), grace.zeros(1)
    local function f(p, x, pos)
      local r = grace.cond(p, function(a, i) cache:index_copy_(1, i, a) return a * 2 end,
                              function(a, i) count:add_(1) cache:select(1, 1):mul_(0.5) return a + 1 end, x, pos)
      return r + cache:sum()   -- read after the region: what the branch wrote
    end
    return f, cache, count
  end
  local fe, ce, ke = make()
  local f0, cc, kc = make()
  local f = grace.compile(f0)
  local good, v0 = 0, cc:version()
  for i = 1, 9 do
    local p, x = grace.tensor(i % 3 ~= 0), grace.full({1, 3}, i)
    local pos = grace.tensor({i % 4 + 1}, {dtype = "int64"})
    local want, got = fe(p, x, pos), f(p, x, pos)
    if same_tensor(got, want) and same_tensor(cc, ce) and same_tensor(kc, ke) then good = good + 1 end
  end
  tap.is(good, 9, "9 calls taking both branches: results, the cache and the counter as eagerly")
  local s = f:stats()
  tap.ok(s.traces == 1 and not s.eager and s.hits == 8, ("one trace, 8 hits, no eager fallback (traces %d, hits %d)"):format(
    s.traces, s.hits))
  local ir = f:ir() or ""
  local _, writes = ir:gsub("\n%s*write ", "")
  tap.ok(ir:find("cond", 1, true) and ir:find("copy_", 1, true) and writes == 2,
         "the program: the region returns both tensors, each copied back once (" .. writes .. " writes)")
  tap.ok(cc:version() > v0, "the cache's version advanced")
  -- nested: an argument written in one branch, a captured tensor written in both and in both branches of a cond
  -- nested in one of them
  local function nested()
    local c = grace.zeros(3)
    return function(p, q, x, arg)
      local r = grace.cond(p,
        function(a, b)
          b:add_(1)
          return grace.cond(q, function(u) c:add_(u) return u * 2 end, function(u) c:mul_(2) return u end, a)
        end,
        function(a, b) b:mul_(3) c:fill_(7) return a - 1 end, x, arg)
      return r, arg + 0, c + 0
    end, c
  end
  local ne, nce = nested()
  local n0, ncc = nested()
  local nf = grace.compile(n0)
  local ae, ac, ngood = grace.ones(3), grace.ones(3), 0
  for i = 1, 12 do
    local p, q, x = grace.tensor(i % 2 == 0), grace.tensor(i % 3 == 0), grace.full({3}, i + 0.5)
    local w, g = {ne(p, q, x, ae)}, {nf(p, q, x, ac)}
    if same_tensor(g[1], w[1]) and same_tensor(g[2], w[2]) and same_tensor(g[3], w[3]) and same_tensor(ncc, nce) then
      ngood = ngood + 1
    end
  end
  tap.ok(ngood == 12 and nf:stats().traces == 1 and not nf:stats().eager,
         ("nested conds writing an argument and a captured tensor: 12 calls as eagerly, one trace (%d)"):format(ngood))
  -- a parameter (a leaf requiring grad) updated under no_grad in one branch: saved, given back and written back
  -- outside autograd too
  local w = grace.ones(3, {requires_grad = true})
  local q = grace.compile(function(p, x)
    return grace.cond(p, function(a) grace.no_grad(function() w:add_(1) end) return a * 2 end, function(a) return a end, x)
  end)
  local sums = {}
  for i = 1, 4 do q(grace.tensor(i % 2 == 0), grace.ones(3)); sums[i] = w:sum():item() end
  tap.ok(same_list(sums, {3, 6, 6, 9}) and w.requires_grad and q:stats().traces == 1,
         "a parameter updated under no_grad in a branch: written on the calls that take it (" .. table.concat(sums, ", ") .. ")")
  -- random branches of in-place writes (a seeded generator: each function built twice, on tensors of its own, one
  -- compiled): 40 functions of 6 calls each, the predicate random per call
  local rng = 20261127
  local function rnd(n) rng = (rng * 1103515245 + 12345) % 2147483648 return rng % n + 1 end
  local OPS = {
    function(T, x) T.A:add_(x) end,
    function(T) T.A:mul_(0.5) end,
    function(T) T.A:select(1, 2):fill_(3) end,
    function(T, x) T.A:index_copy_(1, grace.tensor({3}, {dtype = "int64"}), x:narrow(1, 1, 1)) end,
    function(T, x) T.B:add_(x:sum(1)) end,
    function(T) T.C:add_(1) end,
    function(T) T.A:t():mul_(-1) end,
  }
  local function build(plan)
    local T = {A = grace.zeros(4, 3), B = grace.zeros(3), C = grace.zeros(1, {dtype = "int64"})}
    local function branch(ops) return function(x) for _, o in ipairs(ops) do OPS[o](T, x) end return x * 2 + T.A:sum() end end
    return function(p, x)
      local r = grace.cond(p, branch(plan[1]), branch(plan[2]), x)
      return r + T.B:sum()
    end, T
  end
  local rgood = 0
  for _ = 1, 40 do
    local plan = {{}, {}}
    for b = 1, 2 do for k = 1, rnd(4) - 1 do plan[b][k] = rnd(#OPS) end end
    local fe, te = build(plan)
    local f0, tc = build(plan)
    local fc, same = grace.compile(f0), true
    for _ = 1, 6 do
      local p, x = grace.tensor(rnd(2) == 1), grace.full({4, 3}, rnd(5) - 2.5)
      same = same and same_tensor(fc(p, x), fe(p, x)) and same_tensor(tc.A, te.A) and same_tensor(tc.B, te.B) and
             same_tensor(tc.C, te.C)
    end
    if same and fc:stats().traces == 1 and not fc:stats().eager then rgood = rgood + 1 end
  end
  tap.is(rgood, 40, "40 random functions of in-place writes in both branches: as eagerly, one trace each")
  -- a branch raising after its write: the tensor has its contents back and the error reaches the caller
  local t = X()
  local g = grace.compile(function(p, x)
    return grace.cond(p, function(a) t:add_(1) error("stop here") end, function(a) return a end, x)
  end)
  tap.raises(function() g(grace.tensor(true), X()) end, {"stop here"}, "a branch raising after an in-place write")
  tap.ok(same_list(list(t), XV), "and the tensor it wrote has its contents back")
end)

section("what runs eagerly", function()
  local f = grace.compile(function(p, x)
    return grace.cond(p, function(a) return a * a:sum():item() end, function(a) return a end, x)
  end)
  tap.ok(same_list(list(f(grace.tensor(true), X())), map2(XV, XV, function(u) return u * 2.75 end)), "host read in a branch: right")
  local ir, why = f:ir()
  tap.ok(ir == nil and tostring(why):find("reads a tensor on the host", 1, true) and tostring(why):find("inside a cond", 1, true),
         "host read in a branch: runs eagerly, and says why: " .. tostring(why))
  local g = grace.compile(function(p, x)
    local r = grace.cond(p, function(a) return a + 1 end, function(a) return a - 1 end, x)
    return r * r:sum():item()
  end)
  local want = map2(XV, XV, function(u) return u + 1 end)
  local s = 0 for _, v in ipairs(want) do s = s + v end
  tap.ok(same_list(list(g(grace.tensor(true), X())), map2(want, want, function(u) return u * s end)), "region and break: right")
  local _, gwhy = g:ir()
  tap.ok(tostring(gwhy):find("graph breaks cannot be replayed yet", 1, true), "region and break: says why: " .. tostring(gwhy))
  -- a Lua number read by a branch: a literal of the sub-program, so a new value traces again
  local k = grace.compile(function(p, x, n) return grace.cond(p, function(a) return a * n end, function(a) return a end, x) end)
  tap.ok(same_list(list(k(grace.tensor(true), X(), 2)), map2(XV, XV, function(u) return u * 2 end)) and
         same_list(list(k(grace.tensor(true), X(), 3)), map2(XV, XV, function(u) return u * 3 end)),
         "a number used inside a branch: right for each value")
end)

section("random numbers inside regions", function()
  -- the generator's state saved and set again replays the same draws
  grace.manual_seed(5)
  local s0, o0 = grace.get_rng_state()
  local a = list(grace.rand(3))
  local _, o1 = grace.get_rng_state()
  grace.set_rng_state(s0, o0)
  tap.ok(s0 == 5 and o1 == o0 + 1 and same_list(list(grace.rand(3)), a), "get_rng_state / set_rng_state replay a draw")
  tap.raises(function() grace.set_rng_state(1, -1) end, {"cannot be negative"}, "a negative offset is refused")
  -- each branch draws as the eager call would, and what follows the region goes on from the branch taken
  local function f(p, x)
    local y = grace.cond(p, function(u) return u + grace.rand(4) end,
                            function(u) return u - grace.randn(4) * 2 + grace.rand(4) end, x)
    return y * grace.rand(4)
  end
  local cf = grace.compile(f)
  local good = 0
  for i, pv in ipairs({true, false, false, true, false}) do
    grace.manual_seed(100 + i)
    local want = list(f(grace.tensor(pv), X()))
    local _, ow = grace.get_rng_state()
    grace.manual_seed(100 + i)
    local got = list(cf(grace.tensor(pv), X()))
    local _, og = grace.get_rng_state()
    if same_list(got, want, 1e-6) and og == ow then good = good + 1
    else tap.diag(("call %d (%s): offsets %d vs %d"):format(i, tostring(pv), og, ow)) end
  end
  local s = cf:stats()
  tap.ok(good == 5, "cond with draws in both branches: each call's values and generator offset as eager (" .. good .. "/5)")
  tap.ok(s.traces == 1 and s.hits == 4 and s.eager_calls == 0,
         ("... from one trace (traces %d, hits %d, eager %d)"):format(s.traces, s.hits, s.eager_calls))
  -- a loop draws once an iteration, as many as it runs
  local function g(n, x)
    local _, r = grace.while_loop(function(i) return i:lt(n) end,
                                  function(i, u) return i + 1, u + grace.rand(4) end, {grace.zeros({}), x})
    return r
  end
  local cg = grace.compile(g)
  good = 0
  for i, n in ipairs({3, 0, 1, 5}) do
    grace.manual_seed(200 + i)
    local want = list(g(grace.tensor(n * 1.0), X()))
    local _, ow = grace.get_rng_state()
    grace.manual_seed(200 + i)
    local got = list(cg(grace.tensor(n * 1.0), X()))
    local _, og = grace.get_rng_state()
    if same_list(got, want, 1e-6) and og == ow then good = good + 1 end
  end
  tap.ok(good == 4 and cg:stats().traces == 1,
         ("while_loop drawing in its body, 3, 0, 1 and 5 iterations: as eager, one trace (%d/4, traces %d)"):format(
           good, cg:stats().traces))
end)

section("the IR text of a compiled region round-trips", function()
  local cf = grace.compile(function(x) return doubling(x, 100) end)
  cf(grace.tensor({1.0, 2, 3, 4}))
  local text = cf:ir()
  tap.ok(text and text:find("    func @body {", 1, true) and text:find("        func @then {", 1, true),
         "nested sub-programs print indented")
end)

section("grace.explain and GRACE_LOG=regions say how each region runs", function()
  local capture = require "tests.lua.capture"
  local f = function(x) return doubling(x, 100) end
  local text = capture.explain(grace.compile(f), grace.tensor({1.0, 2, 3, 4}))
  tap.ok(text:find("regions:", 1, true) and text:find("while_loop at [^\n]*: runs on the CPU"),
         "explain: a CPU program's while_loop: the interpreter branches on the host")
  local err = capture.stderr_of([[
    local grace = require "grace"
    local f = grace.compile(function(p, x) return grace.cond(p, function(a) return a + 1 end,
                                                             function(a) return a - 1 end, x) end)
    f(grace.tensor(true), grace.ones(3))
  ]], "GRACE_LOG=regions")
  if err then
    tap.ok(err:find("grace: regions of [^\n]*: cond at [^\n]*: runs on the CPU"), "GRACE_LOG=regions: one line per region")
  else tap.skip("no process to run for GRACE_LOG") end
end)

tap.done()
