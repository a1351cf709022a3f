-- test_compile.lua: grace.compile as a user sees it. For each kind of guard, a change that must retrace and
-- one that must not (with correct results either way); inputs and captured tensors mutated between calls;
-- outputs held across calls; dynamic scalar promotion, dynamic=false, dynamic={k}; the cache limit and the
-- eager fallback; graph breaks (item, tolist, tostring) with their file:line in f:ir() (nil plus the
-- reason, or the replayed paths' IR) and in grace.explain, and right results over many values; in-place
-- updates of arguments and captured tensors (a KV cache written with index_copy_, a running statistic)
-- against the same eager calls on copies, version counters included; Lua errors inside the traced
-- function; upvalue rebinding, module tables, several results, helper functions, compiled functions
-- calling compiled functions; and the state a function can depend on beyond its arguments (upvalues it
-- writes, fields of tables it reads, aliasing arguments, tensors it creates, host reads of captures).
-- Every expected value comes from running the same Lua function eagerly on the same (copied) inputs.
local tap = require "tests.lua.tap"
local grace = require "grace"

local SRC = debug.getinfo(1, "S").short_src   -- this script's name as grace reports locations

local section = tap.section

local function shape(t) return table.concat(t:size(), "x") end

-- Exact equality of results: tensors by dtype, shape and every value (NaN equals NaN, -0 equals 0), other
-- values by raw equality and number subtype.
local function same(a, b)
  if grace.is_tensor(a) or grace.is_tensor(b) then
    if not (grace.is_tensor(a) and grace.is_tensor(b)) then return false end
    if a.dtype ~= b.dtype or shape(a) ~= shape(b) then return false end
    local x, y = a:reshape(-1):tolist(), b:reshape(-1):tolist()
    for i = 1, #y do
      if x[i] ~= y[i] and not (x[i] ~= x[i] and y[i] ~= y[i]) then return false end
    end
    return true
  end
  if type(a) == "number" and type(b) == "number" then return a == b and math.type(a) == math.type(b) end
  return rawequal(a, b)
end

local function desc(v)
  if grace.is_tensor(v) then return v.dtype .. " " .. shape(v) .. " " .. tostring(v) end
  if type(v) == "number" then return math.type(v) .. " " .. tostring(v) end
  return type(v) .. " " .. tostring(v)
end

-- tap check: got equals want exactly
local function teq(got, want, name)
  local ok = same(got, want)
  if not tap.ok(ok, name) then tap.diag("got:      " .. desc(got) .. "\nexpected: " .. desc(want)) end
  return ok
end

-- All results of two calls packed; checks count and each value.
local function results_eq(got, want, name)
  local ok = got.n == want.n
  for i = 1, math.max(got.n, want.n) do ok = ok and same(got[i], want[i]) end
  if not tap.ok(ok, name) then
    local lines = {("got %d results, expected %d"):format(got.n, want.n)}
    for i = 1, math.max(got.n, want.n) do
      lines[#lines + 1] = ("  [%d] got %s | expected %s"):format(i, desc(got[i]), desc(want[i]))
    end
    tap.diag(table.concat(lines, "\n"))
  end
end

local function clones(...)
  local r = table.pack(...)
  for i = 1, r.n do if grace.is_tensor(r[i]) then r[i] = r[i]:clone() end end
  return r
end

local function traces(f) return f:stats().traces end
local function hits(f) return f:stats().hits end

-- grace.explain prints its report, and chunks run in fresh processes write to stderr: captured, not mixed into
-- the TAP stream
local capture = require "tests.lua.capture"
local explain, stderr_of = capture.explain, capture.stderr_of

local function count_lines(text, plain)
  local n = 0
  for line in text:gmatch("[^\n]+") do if line:find(plain, 1, true) then n = n + 1 end end
  return n
end

grace.manual_seed(1234)

-- ---------------------------------------------------------------------------------------------------------
section("tensor arguments: dtype, shape and strides guarded, new contents are not", function()
  local fn = function(x, y) return (x * y + x):sum(1) end
  local f = grace.compile(fn)
  local a, b = grace.randn(2, 3), grace.randn(2, 3)
  teq(f(a, b), fn(a, b), "first call (trace) equals eager")
  tap.is(traces(f), 1, "one trace")
  local a2, b2 = grace.randn(2, 3), grace.randn(2, 3)
  teq(f(a2, b2), fn(a2, b2), "same shapes, new contents: right result")
  tap.is(traces(f), 1, "same shapes, new contents: no retrace")
  tap.is(hits(f), 1, "...a cache hit")
  tap.ok(f:ir() ~= nil, "the function compiled (f:ir() gives IR text)")
  local c, d = grace.randn(4, 3), grace.randn(4, 3)
  teq(f(c, d), fn(c, d), "new shape: right result")
  tap.is(traces(f), 2, "new shape retraces")
  tap.ok(f:stats().last_guard_failure:find("argument 1", 1, true) ~= nil, "last_guard_failure names argument 1")
  local e, g = grace.randn({2, 3}, {dtype = "float64"}), grace.randn({2, 3}, {dtype = "float64"})
  teq(f(e, g), fn(e, g), "new dtype: right result (float64)")
  tap.is(traces(f), 3, "new dtype retraces")
  local s1, s2 = grace.randn(3, 2):t(), grace.randn(3, 2):t()
  tap.ok(not s1:is_contiguous(), "(a transposed argument is strided)")
  teq(f(s1, s2), fn(s1, s2), "strided arguments of the same shape: right result")
  tap.is(traces(f), 4, "strided arguments retrace (contiguity is guarded)")
  local s3, s4 = grace.randn(3, 2):t(), grace.randn(3, 2):t()
  teq(f(s3, s4), fn(s3, s4), "other tensors with the same strides: right result")
  tap.is(traces(f), 4, "same strides: no retrace")
  local a3, b3 = grace.randn(2, 3), grace.randn(2, 3)
  teq(f(a3, b3), fn(a3, b3), "back to contiguous [2, 3]: right result")
  tap.is(traces(f), 4, "back to contiguous: the first entry is reused")
  tap.is(f:stats().entries, 4, "four cache entries")
  local i1, i2 = grace.randint(-5, 5, {2, 3}), grace.randint(-5, 5, {2, 3})
  teq(f(i1, i2), fn(i1, i2), "int64 arguments: right result")
  tap.is(traces(f), 5, "int64 retraces")
  if grace.cuda_available() then
    local ok, cx = pcall(function() return a:cuda() end)
    if ok and pcall(function() return cx + 1 end) then
      local cy = b:cuda()
      local r = f(cx, cy)
      tap.is(traces(f), 6, "a cuda tensor retraces (device is guarded)")
      local diff = (r:cpu() - fn(a, b)):abs():max():item()
      tap.ok(diff <= 1e-5, "cuda result equals the cpu eager result (within 1e-5)")
    else
      tap.skip("the cuda backend does not run ops yet", 2)
    end
  else
    tap.skip("no cuda device: device guard not tested", 2)
  end
end)

section("number arguments with dynamic=false: guarded by value and subtype", function()
  local fn = function(x, k) return x * k + k end
  local f = grace.compile(fn, {dynamic = false})
  local x = grace.randn(3)
  teq(f(x, 2), fn(x, 2), "k = 2: right result")
  local x2 = grace.randn(3)
  teq(f(x2, 2), fn(x2, 2), "k = 2, new tensor contents: right result")
  tap.is(traces(f), 1, "same number: no retrace")
  teq(f(x, 3), fn(x, 3), "k = 3: right result")
  tap.is(traces(f), 2, "a new value retraces")
  local xi = grace.randint(-4, 4, {3})
  teq(f(xi, 2), fn(xi, 2), "int64 tensor, k = 2 (integer): int64 result")
  local n = traces(f)
  teq(f(xi, 2.0), fn(xi, 2.0), "int64 tensor, k = 2.0 (float): float32 result as eager")
  tap.is(traces(f), n + 1, "2.0 after 2 retraces (the number subtype is guarded)")
  tap.is(#f:stats().dynamic_args, 0, "dynamic=false: no dynamic arguments")
end)

section("booleans, strings, nil, tables and functions as arguments", function()
  local fn = function(x, flag, mode, opt)
    local y = flag and x + 1 or x - 1
    if mode == "relu" then y = y:relu() else y = -y end
    if opt ~= nil then y = y * 10 end
    return y
  end
  local f = grace.compile(fn)
  local x = grace.randn(4)
  teq(f(x, true, "relu", nil), fn(x, true, "relu", nil), "true, 'relu', nil")
  local x2 = grace.randn(4)
  local relu2 = ("re"):rep(1) .. ("lu"):lower()   -- an equal string made at run time
  teq(f(x2, true, relu2, nil), fn(x2, true, relu2, nil), "an equal string made at run time")
  tap.is(traces(f), 1, "booleans, strings and nil of the same value: no retrace")
  teq(f(x, false, "relu", nil), fn(x, false, "relu", nil), "false")
  tap.is(traces(f), 2, "a boolean that changes retraces")
  teq(f(x, false, "neg", nil), fn(x, false, "neg", nil), "'neg'")
  tap.is(traces(f), 3, "a string that changes retraces")
  teq(f(x, false, "neg", 1), fn(x, false, "neg", 1), "nil -> 1")
  tap.is(traces(f), 4, "nil that becomes a value retraces")
  teq(f(x, true, "relu", nil), fn(x, true, "relu", nil), "back to the first values")
  tap.is(traces(f), 4, "the first entry is reused")
  teq(f(x, true, "relu"), fn(x, true, "relu"), "one argument fewer")
  tap.is(traces(f), 5, "the number of arguments is guarded")

  local g = function(x, cfg, act) return act(x * cfg.scale) end
  local cg = grace.compile(g)
  local cfg = {scale = 2}
  local relu = function(t) return t:relu() end
  teq(cg(x, cfg, relu), g(x, cfg, relu), "a table and a function argument")
  teq(cg(x2, cfg, relu), g(x2, cfg, relu), "the same table and function, new tensor")
  tap.is(traces(cg), 1, "same identities: no retrace")
  local cfg3 = {scale = 3}
  teq(cg(x, cfg3, relu), g(x, cfg3, relu), "another table")
  tap.is(traces(cg), 2, "another table retraces (identity)")
  local neg = function(t) return -t end
  teq(cg(x, cfg3, neg), g(x, cfg3, neg), "another function")
  tap.is(traces(cg), 3, "another function retraces (identity)")
end)

section("globals read by the function", function()
  GRACE_T_SCALE, GRACE_T_MODE, GRACE_T_FLAG = 2, "add", true
  GRACE_T_W = grace.randn(3)
  GRACE_T_CFG = {bias = 1.5}
  local fn = function(x)
    local y = x * GRACE_T_SCALE + GRACE_T_W
    if GRACE_T_MODE == "add" then y = y + GRACE_T_CFG.bias else y = y - GRACE_T_CFG.bias end
    if GRACE_T_FLAG then y = y:relu() end
    return y
  end
  local f = grace.compile(fn)
  local x = grace.randn(3)
  teq(f(x), fn(x), "first call")
  local x2 = grace.randn(3)
  teq(f(x2), fn(x2), "new tensor contents")
  tap.is(traces(f), 1, "unchanged globals: no retrace")
  GRACE_T_SCALE = 3
  teq(f(x), fn(x), "a global number changed: right result")
  tap.is(traces(f), 2, "a global number changed: retrace")
  GRACE_T_SCALE = 3.0
  teq(f(x), fn(x), "3 -> 3.0: right result")
  tap.is(traces(f), 3, "a global number's subtype changed: retrace")
  GRACE_T_MODE = "sub"
  teq(f(x), fn(x), "a global string changed: right result")
  tap.is(traces(f), 4, "a global string changed: retrace")
  GRACE_T_FLAG = false
  teq(f(x), fn(x), "a global boolean changed: right result")
  tap.is(traces(f), 5, "a global boolean changed: retrace")
  GRACE_T_W:mul_(-2)
  teq(f(x), fn(x), "a global tensor modified in place: new contents read")
  tap.is(traces(f), 5, "a global tensor modified in place: no retrace")
  GRACE_T_W = grace.randn(3)
  teq(f(x), fn(x), "a global tensor replaced: right result")
  tap.is(traces(f), 6, "a global tensor replaced: retrace")
  GRACE_T_CFG = {bias = -4}
  teq(f(x), fn(x), "a global table replaced: right result")
  tap.is(traces(f), 7, "a global table replaced: retrace (identity)")
  GRACE_T_SCALE, GRACE_T_MODE, GRACE_T_FLAG, GRACE_T_W, GRACE_T_CFG = nil, nil, nil, nil, nil
end)

section("numbers, strings and booleans in upvalues (of the function and of helpers)", function()
  local scale, mode, flag = 2, "relu", false
  local k = 0.5
  local function helper(t) return t * k end
  local fn = function(x)
    local y = helper(x) * scale
    if mode == "relu" then y = y:relu() end
    if flag then y = -y end
    return y
  end
  local f = grace.compile(fn)
  local x = grace.randn(5)
  teq(f(x), fn(x), "first call")
  local x2 = grace.randn(5)
  teq(f(x2), fn(x2), "new tensor")
  tap.is(traces(f), 1, "unchanged upvalues: no retrace")
  scale = 3
  teq(f(x), fn(x), "upvalue number changed: right result")
  tap.is(traces(f), 2, "upvalue number changed: retrace")
  mode = "none"
  teq(f(x), fn(x), "upvalue string changed: right result")
  tap.is(traces(f), 3, "upvalue string changed: retrace")
  flag = true
  teq(f(x), fn(x), "upvalue boolean changed: right result")
  tap.is(traces(f), 4, "upvalue boolean changed: retrace")
  k = -1.5
  teq(f(x), fn(x), "a helper's upvalue number changed: right result")
  tap.is(traces(f), 5, "a helper's upvalue number changed: retrace")
end)

section("captured tensors: modified in place, rebound, replaced in tables", function()
  local w = grace.randn(3, 3)
  local model = {layers = {{w = grace.randn(3, 3)}, {w = grace.randn(3, 3), scale = 2}}}
  local fn = function(x)
    local h = x:matmul(w)
    for _, l in ipairs(model.layers) do h = h:matmul(l.w):tanh() end
    return h
  end
  local f = grace.compile(fn)
  local x = grace.randn(2, 3)
  teq(f(x), fn(x), "first call")
  teq(f(x), fn(x), "second call")
  tap.is(traces(f), 1, "one trace")
  tap.ok(f:ir() ~= nil, "compiled (weights in an upvalue and in tables reached from one)")
  w:mul_(2)
  teq(f(x), fn(x), "upvalue tensor modified in place: new contents read")
  model.layers[2].w:add_(1)
  teq(f(x), fn(x), "tensor in a table modified in place: new contents read")
  tap.is(traces(f), 1, "in-place changes of captured tensors: no retrace")
  w = grace.randn(3, 3)
  teq(f(x), fn(x), "upvalue rebound to a new tensor: right result")
  tap.is(traces(f), 2, "upvalue rebound: retrace")
  model.layers[2].w = grace.randn(3, 3)
  teq(f(x), fn(x), "model.layers[2].w replaced: right result")
  tap.is(traces(f), 3, "model.layers[2].w replaced: retrace")
  local x2 = grace.randn(2, 3)
  teq(f(x2), fn(x2), "new input after the replacements")
  tap.is(traces(f), 3, "...no retrace")
end)

section("the same input tensor mutated in place between calls", function()
  local fn = function(x) return x:exp() * 2 - x end
  local f = grace.compile(fn)
  local x = grace.randn(4)
  teq(f(x), fn(x), "first call")
  for i = 1, 3 do
    x:add_(0.5 * i)
    teq(f(x), fn(x), "after x:add_ #" .. i .. ": the new contents are read")
  end
  x:copy_(grace.randn(4))
  teq(f(x), fn(x), "after x:copy_")
  tap.is(traces(f), 1, "no retrace")
end)

section("outputs held across calls are never overwritten", function()
  local fn = function(x, y) local h = x:matmul(y) return h:relu(), h:t(), (h * 2):sum(1) end
  local f = grace.compile(fn)
  local ins, outs = {}, {}
  for i = 1, 10 do
    ins[i] = {grace.randn(3, 4), grace.randn(4, 2)}
    outs[i] = table.pack(f(ins[i][1], ins[i][2]))
  end
  tap.is(traces(f), 1, "10 calls, one trace")
  for i = 1, 10 do
    results_eq(outs[i], table.pack(fn(ins[i][1], ins[i][2])), "output of call " .. i .. " still equals eager")
  end
end)

section("dynamic scalars (opt-in): a changing learning rate and temperature", function()
  local sgd = function(w, g, lr) return w - g * lr end
  local f = grace.compile(sgd, {dynamic = true})
  local w, g = grace.randn(5), grace.randn(5)
  local all = true
  for i = 1, 20 do
    local lr = 0.01 * i + 0.001
    local got, want = f(w, g, lr), sgd(w, g, lr)
    if not same(got, want) then all = false tap.diag(("lr %g: got %s, want %s"):format(lr, desc(got), desc(want))) end
  end
  tap.ok(all, "20 learning rates: every result equals eager")
  tap.is(traces(f), 2, "exactly 2 traces for 20 values")
  local dyn = f:stats().dynamic_args
  tap.ok(#dyn == 1 and dyn[1] == 3, "dynamic_args = {3}")
  tap.is(f:stats().hits, 18, "18 hits")

  -- by default a number stays guarded by value: Lua may branch on it, which no recording shows
  local fo = grace.compile(sgd, {cache_limit = 4})
  all = true
  for i = 1, 20 do
    local lr = 0.02 * i
    if not same(fo(w, g, lr), sgd(w, g, lr)) then all = false end
  end
  tap.ok(all, "default: 20 learning rates, every result equals eager")
  tap.is(traces(fo), 4, "default: a trace per value up to the cache limit, then eagerly")
  tap.ok(fo:stats().eager, "default: eager after the cache limit")

  local sample = function(logits, temp) return (logits / temp):softmax(-1) end
  local s = grace.compile(sample, {dynamic = true})
  local logits = grace.randn(2, 6)
  all = true
  for i = 1, 20 do
    local t = 0.25 + 0.1 * i
    if not same(s(logits, t), sample(logits, t)) then all = false end
  end
  tap.ok(all, "20 temperatures: every result equals eager")
  tap.is(traces(s), 2, "temperature: exactly 2 traces")
  teq(s(logits, 1), sample(logits, 1), "an integer temperature after floats: right result")

  local h = grace.compile(function(x, k) return x * k end, {dynamic = {2}})
  local x = grace.randn(3)
  all = true
  for i = 1, 10 do if not same(h(x, i + 0.5), x * (i + 0.5)) then all = false end end
  tap.ok(all, "dynamic={2}: right results")
  tap.is(traces(h), 2, "dynamic={2}: two traces (two recordings to compare) for 10 values")
  tap.ok(#h:stats().dynamic_args == 1 and h:stats().dynamic_args[1] == 2, "dynamic={2}: dynamic_args = {2}")

  local xi = grace.randint(-5, 5, {4})
  local hi = grace.compile(function(x, k) return x + k end, {dynamic = true})
  for k = 1, 4 do teq(hi(xi, k), xi + k, "int64 tensor + dynamic integer " .. k) end
  teq(hi(xi, 0.5), xi + 0.5, "then a float: float32 result as eager")
end)

section("dynamic=false and the cache limit: eager forever, results still right", function()
  local fn = function(x, s) return x * s end
  local f = grace.compile(fn, {dynamic = false, cache_limit = 4})
  local x = grace.randn(3)
  local all = true
  for i = 1, 7 do
    local v = i + 0.25
    if not same(f(x, v), fn(x, v)) then all = false end
    if i <= 4 and traces(f) ~= i then all = false tap.diag(("after %d values: %d traces"):format(i, traces(f))) end
  end
  tap.ok(all, "dynamic=false: each new value retraces until the limit, results right")
  tap.is(traces(f), 4, "4 traces (the cache limit)")
  tap.is(f:stats().eager, true, "then stats().eager is true")
  tap.is(f:stats().eager_calls, 3, "the 3 calls after the limit ran eagerly")
  teq(f(x, 1.25), fn(x, 1.25), "a cached value after the limit: right result")

  -- dynamic=false: every size is its own trace
  local g = grace.compile(function(x) return x:sum(1) * 2 end, {cache_limit = 3, dynamic = false})
  for n = 1, 6 do
    local t = grace.randn(n, 2)
    teq(g(t), t:sum(1) * 2, "shape [" .. n .. ", 2]: right result")
  end
  tap.is(traces(g), 3, "shapes: 3 traces")
  tap.ok(g:stats().eager == true, "shapes: eager after the cache limit")
  tap.ok(g:stats().last_guard_failure ~= "", "last_guard_failure says what changed")

  local err = stderr_of([[
    local f = grace.compile(function(x) return x + 1 end, {cache_limit = 2, dynamic = false})
    for n = 1, 6 do f(grace.zeros(n)) end
  ]])
  if err then
    tap.is(count_lines(err, "cache limit"), 1, "the cache limit is reported once on stderr")
  else
    tap.skip("cannot start a grace process")
  end
end)

section("graph breaks: item, tolist, tostring give right results and say where", function()
  local where = {}
  local fi = function(x)
    local s = x:sum():item() where.item = debug.getinfo(1, "l").currentline
    return x * s
  end
  local ft = function(x)
    local l = x:tolist() where.tolist = debug.getinfo(1, "l").currentline
    return x + l[1]
  end
  local fs = function(x)
    local s = tostring(x) where.tostring = debug.getinfo(1, "l").currentline
    return x + #s
  end
  for _, case in ipairs({{"item", fi}, {"tolist", ft}, {"tostring", fs}}) do
    local name, fn = case[1], case[2]
    local f = grace.compile(fn)
    local a, b = grace.tensor({1.5, -2.0, 3.0}), grace.tensor({0.25, 4.0, -1.0})
    teq(f(a), fn(a), name .. ": first call right")
    teq(f(b), fn(b), name .. ": second call (new contents) right")
    teq(f(a), fn(a), name .. ": third call right")
    -- f:ir() is nil plus a reason naming the break; or, where breaks are replayed, IR text marking the break
    local ir, why = f:ir()
    local loc = SRC .. ":" .. tostring(where[name])
    local told = (ir == nil and type(why) == "string" and why:find(loc, 1, true) ~= nil) or
      (type(ir) == "string" and ir:find("break", 1, true) ~= nil and ir:find(loc, 1, true) ~= nil)
    if not tap.ok(told, name .. ": f:ir() names the break at " .. loc) then
      tap.diag("f:ir() gave: " .. tostring(ir) .. ", " .. tostring(why))
    end
    local st = f:stats()
    tap.ok(st.eager_calls + (st.replays or 0) >= 2, name .. ": later calls run the Lua function (eager_calls or replays)")
    local rep = explain(fn, a)
    if not tap.ok(type(rep) == "string" and rep:find(loc, 1, true) ~= nil, name .. ": grace.explain's report names " .. loc) then
      tap.diag("report: " .. tostring(rep))
    end
    tap.ok(rep:find("eager", 1, true) ~= nil or rep:find("break", 1, true) ~= nil,
      name .. ": grace.explain says it breaks (or runs eagerly)")
  end
  local err = stderr_of([[
    local f = grace.compile(function(x) return x * x:sum():item() end)
    for i = 1, 5 do f(grace.ones(3) * i) end
  ]])
  if err then
    local n = count_lines(err, "graph break") + count_lines(err, "runs eagerly")
    if not tap.ok(n <= 1, "a break is reported at most once on stderr (not on every call)") then tap.diag("stderr: " .. err) end
  else
    tap.skip("cannot start a grace process")
  end
end)

section("functions with breaks stay right over many different values", function()
  local scale = function(x) local s = x:sum():item() return x * s + 1 end
  local branch = function(x) if x:sum():item() > 0 then return x * 2 end return x:neg() - 1 end
  local list = function(x) local t = x:tolist() local y = x for i = 1, #t do if t[i] > 0 then y = y + t[i] end end return y end
  for _, case in ipairs({{"item as a scale", scale}, {"item in a branch", branch}, {"tolist in a loop", list}}) do
    local f = grace.compile(case[2])
    local bad = 0
    for _ = 1, 30 do
      local x = grace.randn(3)
      if not same(f(x), case[2](x)) then bad = bad + 1 end
    end
    tap.is(bad, 0, case[1] .. ": 30 calls with new values, every result equals eager")
  end
  local fw = function(cache, pos, kv)
    cache:index_copy_(1, pos, kv)
    local m = cache:abs():max():item()
    cache:mul_(0.5)
    return cache / m
  end
  local h = grace.compile(fw)
  local cc, ce = grace.zeros(4, 2), grace.zeros(4, 2)
  local bad, vbad = 0, 0
  for i = 1, 8 do
    local pos, kv = grace.tensor({(i - 1) % 4 + 1}), grace.randn(1, 2)
    local vc, ve = cc:version(), ce:version()
    if not (same(h(cc, pos, kv), fw(ce, pos, kv)) and same(cc, ce)) then bad = bad + 1 end
    if cc:version() - vc ~= ce:version() - ve then vbad = vbad + 1 end
  end
  tap.is(bad, 0, "writes before and after a break: results and the cache equal eager")
  tap.is(vbad, 0, "writes before and after a break: version bumps equal eager")
end)

section("grace.explain of a compilable function", function()
  local w = grace.randn(3, 3)
  local fn = function(x, k) return (x:matmul(w) * k):relu():sum(2) end
  local rep, printed = explain(fn, grace.randn(2, 3), 2)
  tap.ok(type(rep) == "string" and rep:find("partition", 1, true) ~= nil, "the report gives the partition")
  tap.ok(rep:find("float32", 1, true) ~= nil and rep:find("argument 2", 1, true) ~= nil, "the report lists the guards")
  tap.ok(printed:find("partition", 1, true) ~= nil, "grace.explain prints the report too")
  local f = grace.compile(fn)
  local rep2 = explain(f, grace.randn(2, 3), 2)
  tap.ok(rep2:find("partition", 1, true) ~= nil, "explain of a compiled function explains its Lua function")
  tap.is(traces(f), 0, "explain does not trace into the compiled function's cache")
end)

section("a KV cache written with index_copy_ at a position given as an index tensor", function()
  local step = function(cache, pos, kv, q)
    cache:index_copy_(1, pos, kv)
    return q:matmul(cache:t()):softmax(-1)
  end
  local f = grace.compile(step)
  local cc, ce = grace.zeros(6, 4), grace.zeros(6, 4)
  local ok_all, ver_all = true, true
  for p = 1, 6 do
    local pos, kv, q = grace.tensor({p}), grace.randn(1, 4), grace.randn(1, 4)
    local vc, ve = cc:version(), ce:version()
    local rc, re = f(cc, pos, kv, q), step(ce, pos, kv, q)
    if not (same(rc, re) and same(cc, ce)) then ok_all = false tap.diag("step " .. p .. ": result or cache differs") end
    if cc:version() - vc ~= ce:version() - ve then
      ver_all = false
      tap.diag(("step %d: cache version +%d, eager +%d"):format(p, cc:version() - vc, ce:version() - ve))
    end
  end
  tap.ok(ok_all, "6 steps: results and cache contents equal eager")
  tap.ok(ver_all, "6 steps: the cache's version counter bumps as eager")
  tap.is(traces(f), 1, "one trace for 6 positions")
  tap.ok(f:ir() ~= nil, "the step compiled")

  -- the cache captured in an upvalue instead of passed
  local function make(cache)
    return function(pos, kv) cache:index_copy_(1, pos, kv) return cache:sum(2) end
  end
  local c1, c2 = grace.zeros(5, 3), grace.zeros(5, 3)
  local fc, fe = grace.compile(make(c1)), make(c2)
  ok_all, ver_all = true, true
  for p = 1, 5 do
    local pos, kv = grace.tensor({p}), grace.randn(1, 3)
    local v1, v2 = c1:version(), c2:version()
    if not (same(fc(pos, kv), fe(pos, kv)) and same(c1, c2)) then ok_all = false end
    if c1:version() - v1 ~= c2:version() - v2 then ver_all = false end
  end
  tap.ok(ok_all, "captured cache: results and contents equal eager")
  tap.ok(ver_all, "captured cache: version bumps equal eager")
  tap.is(traces(fc), 1, "captured cache: one trace")

  local bad = grace.tensor({9})
  tap.raises(function() return f(cc, bad, grace.randn(1, 4), grace.randn(1, 4)) end, "index_copy_",
    "a position out of range raises an error naming index_copy_ (as eager)")
  local pos, kv, q = grace.tensor({2}), grace.randn(1, 4), grace.randn(1, 4)
  local cc2, ce2 = cc:clone(), cc:clone()
  teq(f(cc2, pos, kv, q), step(ce2, pos, kv, q), "the next call after the error works")
  teq(cc2, ce2, "...and writes the cache")
end)

section("a running statistic on a captured tensor: stat:mul_(0.9):add_(x:mean() * 0.1)", function()
  local function make(stat)
    return function(x)
      stat:mul_(0.9):add_(x:mean() * 0.1)
      return x - stat
    end
  end
  local sc, se = grace.zeros(3), grace.zeros(3)
  local f, e = grace.compile(make(sc)), make(se)
  local ok_all, ver_all = true, true
  for i = 1, 6 do
    local x = grace.randn(4, 3)
    local vc, ve = sc:version(), se:version()
    local rc, re = f(x), e(x)
    if not (same(rc, re) and same(sc, se)) then ok_all = false tap.diag("step " .. i .. ": " .. desc(sc) .. " vs " .. desc(se)) end
    if sc:version() - vc ~= se:version() - ve then
      ver_all = false
      tap.diag(("step %d: stat version +%d, eager +%d"):format(i, sc:version() - vc, se:version() - ve))
    end
  end
  tap.ok(ok_all, "6 steps: results and the statistic equal eager")
  tap.ok(ver_all, "6 steps: the statistic's version counter bumps as eager (2 in-place ops per call)")
  tap.is(traces(f), 1, "one trace")
  tap.ok(f:ir() ~= nil, "compiled")
  sc:fill_(1) se:fill_(1)
  local x = grace.randn(4, 3)
  teq(f(x), e(x), "after the statistic is reset from outside: right result")
  teq(sc, se, "...and the statistic is right")
end)

section("in-place updates of an argument: values, version counters, the tensor returned", function()
  local fn = function(x) x:add_(1) x:mul_(2) return x end
  local f = grace.compile(fn)
  for i = 1, 3 do
    local xc = grace.randn(3)
    local xe = xc:clone()
    local vc, ve = xc:version(), xe:version()
    local rc, re = f(xc), fn(xe)
    teq(xc, xe, "call " .. i .. ": the argument is updated as eager")
    teq(rc, re, "call " .. i .. ": the result equals eager")
    tap.is(xc:version() - vc, xe:version() - ve, "call " .. i .. ": version bumps equal eager (two in-place ops)")
    tap.ok(rawequal(rc, xc) == rawequal(re, xe), "call " .. i .. ": returning the argument returns that same tensor object")
  end
  local g = grace.compile(function(x, y) return x, y * 2 end)
  local a, b = grace.randn(2), grace.randn(2)
  g(a, b)
  local ra = g(a, b)
  tap.ok(rawequal(ra, a), "returning an unmodified argument returns the same object (x == result as eager)")
end)

section("a Lua error inside the traced function", function()
  local fn = function(x, y)
    if x:size(1) ~= 3 then error("expected 3 rows, got " .. x:size(1)) end
    return x:matmul(y)
  end
  local f = grace.compile(fn)
  local ok, err = pcall(f, grace.randn(2, 2), grace.randn(2, 2))
  tap.ok(not ok and tostring(err):find("expected 3 rows, got 2", 1, true) ~= nil, "first call: pcall catches the message")
  tap.ok(not ok and tostring(err):find(SRC, 1, true) ~= nil, "...with the script location")
  local x, y = grace.randn(3, 2), grace.randn(2, 4)
  teq(f(x, y), fn(x, y), "the next call with good arguments works")
  local x2, y2 = grace.randn(3, 2), grace.randn(2, 4)
  teq(f(x2, y2), fn(x2, y2), "and the one after")
  tap.ok(f:ir() ~= nil, "it compiled")
  local h = hits(f)
  tap.ok(h >= 1, "the second good call is a cache hit")
  ok, err = pcall(f, grace.randn(5, 2), grace.randn(2, 4))
  tap.ok(not ok and tostring(err):find("expected 3 rows, got 5", 1, true) ~= nil, "a later retrace raising: caught")
  ok, err = pcall(f, grace.randn(3, 3), grace.randn(2, 4))
  tap.ok(not ok and tostring(err):find("matmul", 1, true) ~= nil, "an op error in a retrace: caught, names the op")
  teq(f(x2, y2), fn(x2, y2), "good arguments again: right result")
  tap.is(hits(f), h + 1, "...from the cached entry")
  -- an error after an in-place write: eager semantics (the write happened), and nothing is left behind
  local g = function(x) x:add_(1) if x:sum():item() > 1e9 then error("never") end error("after write") end
  local cg = grace.compile(g)
  local a = grace.zeros(2)
  ok, err = pcall(cg, a)
  tap.ok(not ok and tostring(err):find("after write", 1, true) ~= nil, "an error after a write: caught")
  teq(a, grace.ones(2), "...the write happened, as eagerly")
  local ff = grace.compile(function(x) return x * 3 end)
  teq(ff(grace.ones(2)), grace.full({2}, 3.0), "compiling works normally afterwards (no trace left active)")
end)

section("an op error in a compiled call: message and the writes made before it", function()
  local fn = function(x, cache, idx, src) x:add_(1) cache:index_copy_(1, idx, src) return x * 1 end
  local f = grace.compile(fn)
  f(grace.zeros(2), grace.zeros(3, 2), grace.tensor({1}), grace.ones(1, 2))
  local xc, xe = grace.zeros(2), grace.zeros(2)
  local cc, ce = grace.zeros(3, 2), grace.zeros(3, 2)
  local okc, errc = pcall(f, xc, cc, grace.tensor({7}), grace.ones(1, 2))
  local oke, erre = pcall(fn, xe, ce, grace.tensor({7}), grace.ones(1, 2))
  tap.ok(not okc and not oke, "an index out of range raises, compiled as eagerly")
  tap.ok(tostring(errc):find("index_copy_", 1, true) ~= nil and tostring(errc):find(SRC, 1, true) ~= nil,
    "the compiled error names the op and the script")
  teq(xc, xe, "the in-place write before the failing op happened, as eagerly")
  teq(cc, ce, "the cache is left as eagerly")
  local x, c = grace.zeros(2), grace.zeros(3, 2)
  local xe2, ce2 = grace.zeros(2), grace.zeros(3, 2)
  teq(f(x, c, grace.tensor({2}), grace.ones(1, 2)), fn(xe2, ce2, grace.tensor({2}), grace.ones(1, 2)), "the next call works")
end)

section("a module table passed as an argument", function()
  local function mlp(m, x)
    for _, l in ipairs(m.layers) do x = (x:matmul(l.w) + l.b):relu() end
    return x * m.scale
  end
  local model = {layers = {{w = grace.randn(4, 4), b = grace.randn(4)}, {w = grace.randn(4, 2), b = grace.randn(2)}}, scale = 0.5}
  local f = grace.compile(mlp)
  local x = grace.randn(3, 4)
  teq(f(model, x), mlp(model, x), "first call")
  local x2 = grace.randn(3, 4)
  teq(f(model, x2), mlp(model, x2), "second call")
  tap.is(traces(f), 1, "one trace")
  tap.ok(f:ir() ~= nil, "compiled (weights found in the argument)")
  model.layers[1].b:add_(1)
  teq(f(model, x), mlp(model, x), "a weight modified in place: right result")
  tap.is(traces(f), 1, "...no retrace")
  model.layers[2].w = grace.randn(4, 2)
  teq(f(model, x), mlp(model, x), "a weight replaced in the table: right result")
  tap.is(traces(f), 2, "...retrace")
  model.scale = 2
  teq(f(model, x), mlp(model, x), "a number field of the module changed: right result")
  local other = {layers = {{w = grace.randn(4, 4), b = grace.randn(4)}, {w = grace.randn(4, 2), b = grace.randn(2)}}, scale = 0.5}
  teq(f(other, x), mlp(other, x), "another module of the same shapes: right result")

  local nn = require "grace.nn"
  local lin = nn.Linear(4, 3)
  local fl = function(t) return lin(t):relu() end
  local cl = grace.compile(fl)
  teq(cl(x), fl(x), "an nn.Linear in an upvalue: first call")
  teq(cl(x2), fl(x2), "an nn.Linear in an upvalue: second call")
  tap.ok(cl:ir() ~= nil and traces(cl) == 1, "an nn.Linear compiles (one trace)")
end)

section("several results: tensors, numbers, nil, strings, booleans", function()
  local fn = function(x, n)
    local y = x * 2
    return y, n, nil, "label", true, y:sum(), 2.5, n + 1, math.maxinteger
  end
  local f = grace.compile(fn)
  for i = 1, 3 do
    local x = grace.randn(3)
    results_eq(table.pack(f(x, 7)), table.pack(fn(x, 7)), "call " .. i .. ": every result, in order, with trailing values")
  end
  tap.is(traces(f), 1, "one trace")
  local g = function(x) return nil, x + 1, nil end
  local cg = grace.compile(g)
  for i = 1, 2 do
    local x = grace.randn(2)
    results_eq(table.pack(cg(x)), table.pack(g(x)), "leading and trailing nils kept, call " .. i)
  end
  local none = grace.compile(function(x) local _ = x + 1 end)
  tap.is(select("#", none(grace.ones(1))), 0, "no results: first call")
  tap.is(select("#", none(grace.ones(1))), 0, "no results: compiled call")
end)

section("a function calling another local function (weights in its upvalues)", function()
  local w1, w2 = grace.randn(3, 3), grace.randn(3)
  local function block(x) return (x:matmul(w1) + w2):tanh() end
  local function net(x) return block(block(x)) * 2 end
  local f = grace.compile(net)
  local x = grace.randn(2, 3)
  teq(f(x), net(x), "first call")
  local x2 = grace.randn(2, 3)
  teq(f(x2), net(x2), "second call")
  tap.ok(f:ir() ~= nil and traces(f) == 1, "compiled with one trace")
  w2:mul_(-1)
  teq(f(x), net(x), "the helper's weight modified in place: right result")
  w1 = grace.randn(3, 3)
  teq(f(x), net(x), "the helper's weight rebound: right result")
  tap.is(traces(f), 2, "the helper's weight rebound: retrace")
end)

section("a compiled function calling another compiled function", function()
  local inner_fn = function(x) return x:exp() - 1 end
  local inner = grace.compile(inner_fn)
  local outer_fn = function(x) return inner(x) + inner(x * 2) end
  local outer = grace.compile(outer_fn)
  local ref = function(x) return inner_fn(x) + inner_fn(x * 2) end
  for i = 1, 4 do
    local x = grace.randn(3)
    teq(outer(x), ref(x), "call " .. i .. ": right result")
  end
  tap.is(traces(outer), 1, "the outer function traced once")
  tap.is(hits(outer), 3, "...then hit")
  tap.ok(outer:ir() ~= nil, "the outer function compiled (the inner one inlined)")
  local x = grace.randn(3)
  teq(inner(x), inner_fn(x), "the inner function still works on its own")
end)

section("random numbers: compiled calls draw as the eager calls do", function()
  local fn = function(x) return x + grace.randn(3) end
  local f = grace.compile(fn)
  local x = grace.zeros(3)
  grace.manual_seed(7)
  local c = {f(x), f(x), f(x)}
  grace.manual_seed(7)
  local e = {fn(x), fn(x), fn(x)}
  for i = 1, 3 do teq(c[i], e[i], "call " .. i .. " draws the same numbers as eager call " .. i) end
  local fs = function(x) grace.manual_seed(11) return x + grace.rand(3) end
  local cs = grace.compile(fs)
  local first = cs(x)
  local again = cs(x)
  teq(again, fs(x), "a function that reseeds itself: the compiled call equals eager")
  teq(again, first, "...and repeats its first result")
end)

-- ---------------------------------------------------------------------------------------------------------
-- State a function can depend on beyond its arguments: each must retrace (or run eagerly), never go stale.
section("upvalues and globals the function itself writes", function()
  local function make()
    local count = 0
    return function(x) count = count + 1 return x * count end
  end
  local fc, fe = grace.compile(make()), make()
  local x = grace.ones(2)
  for i = 1, 3 do teq(fc(x), fe(x), "an upvalue counter written by the function, call " .. i) end
  GRACE_T_STEP_C, GRACE_T_STEP_E = 0, 0
  local gc = grace.compile(function(t) GRACE_T_STEP_C = GRACE_T_STEP_C + 1 return t * GRACE_T_STEP_C end)
  local ge = function(t) GRACE_T_STEP_E = GRACE_T_STEP_E + 1 return t * GRACE_T_STEP_E end
  for i = 1, 3 do teq(gc(x), ge(x), "a global counter written by the function, call " .. i) end
  tap.is(GRACE_T_STEP_C, GRACE_T_STEP_E, "the global counter advanced as eagerly")
  GRACE_T_STEP_C, GRACE_T_STEP_E = nil, nil
end)

section("fields of tables and functions the function reads", function()
  local x = grace.tensor({-1.0, 0.5, 2.0})
  local cfg = {scale = 2}
  local fn = function(t) return t * cfg.scale end
  local f = grace.compile(fn)
  teq(f(x), fn(x), "an upvalue config table: first call")
  cfg.scale = 5
  teq(f(x), fn(x), "cfg.scale changed: right result")

  local g = function(t, c) return t * c.scale end
  local cg = grace.compile(g)
  local c = {scale = 2}
  teq(cg(x, c), g(x, c), "a config table argument: first call")
  c.scale = -3
  teq(cg(x, c), g(x, c), "the argument table's field changed: right result")

  local opt = {mode = "relu"}
  local h = function(t) if opt.mode == "relu" then return t:relu() end return -t end
  local ch = grace.compile(h)
  teq(ch(x), h(x), "a string field: first call")
  opt.mode = "neg"
  teq(ch(x), h(x), "the string field changed: right result")

  local m = {w = grace.full({3}, 2.0), act = function(t) return t:relu() end}
  local k = function(t) return m.act(t * m.w) end
  local ck = grace.compile(k)
  teq(ck(x), k(x), "a module with a function field: first call")
  m.act = function(t) return -t end
  teq(ck(x), k(x), "the module's function field replaced: right result")

  local act = function(t) return t:relu() end
  local a = function(t) return act(t) end
  local ca = grace.compile(a)
  teq(ca(x), a(x), "an upvalue Lua function: first call")
  act = function(t) return t:tanh() end
  teq(ca(x), a(x), "the upvalue rebound to another Lua function: right result")
end)

section("arguments that alias each other", function()
  local fn = function(x, y) x:add_(1) return y * 2 end
  local f = grace.compile(fn)
  f(grace.randn(3), grace.randn(3))   -- traced with distinct tensors
  local a = grace.tensor({1.0, 2.0, 3.0})
  local ea = a:clone()
  local got, want = f(a, a), fn(ea, ea)
  teq(got, want, "the same tensor passed twice after a trace with distinct ones: right result")
  teq(a, ea, "...and the argument updated as eagerly")
  local b = grace.tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0})
  local eb = b:clone()
  got, want = f(b:narrow(1, 1, 3), b:narrow(1, 2, 3)), fn(eb:narrow(1, 1, 3), eb:narrow(1, 2, 3))
  teq(got, want, "overlapping views of one tensor: right result")
  teq(b, eb, "...and the base updated as eagerly")
end)

section("captured tensors that are also passed as arguments", function()
  local u = grace.tensor({5.0, 6.0})
  local fn = function(x) return x + u end
  local f = grace.compile(fn)
  teq(f(u), fn(u), "the captured tensor passed as the argument on the first call")
  local z = grace.zeros(2)
  teq(f(z), fn(z), "then another argument: the captured tensor is still read")
  local z2 = grace.ones(2)
  teq(f(z2), fn(z2), "and another")

  local w = grace.tensor({1.0, 2.0})
  local g = function(x) x:add_(1) return w * 2 end
  local cg = grace.compile(g)
  cg(grace.zeros(2))   -- traced with an argument distinct from w
  local wc = w:clone()
  local got = cg(w)
  local w_after = w:clone()
  w:copy_(wc)
  local want = g(w)
  teq(got, want, "the captured tensor passed as the argument the function writes: right result")
  teq(w_after, w, "...and the captured tensor updated as eagerly")

  local base = grace.zeros(4)
  local h = function(x) base:add_(1) return x * 1 end
  local ch = grace.compile(h)
  ch(grace.zeros(2))   -- traced with an unrelated argument
  local b0 = base:clone()
  local r = ch(base:narrow(1, 1, 2))
  base:copy_(b0)
  teq(r, h(base:narrow(1, 1, 2)), "an argument that is a view of a captured tensor the function writes")
end)

section("tensors the function creates from Lua data", function()
  local fn = function(x) local acc = grace.tensor({0.0, 0.0, 0.0}) acc:add_(x) return acc * 1 end
  local f = grace.compile(fn)
  for i = 1, 3 do
    local x = grace.full({3}, i * 1.0)
    teq(f(x), fn(x), "a tensor made by grace.tensor and updated in place, call " .. i)
  end
  local g = function(x) return x + 1, grace.tensor({1.0, 2.0, 3.0}) end
  local cg = grace.compile(g)
  local x = grace.ones(3)
  local _, c1 = cg(x)
  c1:add_(10)
  local _, c2 = cg(x)
  teq(c2, grace.tensor({1.0, 2.0, 3.0}), "a returned grace.tensor is fresh on every call (not the caller's modified copy)")
  local _, c3 = cg(x)
  c3:mul_(0)
  local _, c4 = cg(x)
  teq(c4, grace.tensor({1.0, 2.0, 3.0}), "...on a compiled call too")
end)

section("writes through views of a copy (reshape of a strided tensor copies)", function()
  local fn = function(x)
    local y = x:t():reshape(6)   -- x:t() is strided: reshape copies
    y:narrow(1, 1, 2):fill_(0)   -- writes the copy only
    return x + 0, y
  end
  local f = grace.compile(fn)
  for i = 1, 3 do
    local xc = grace.arange(6):float():reshape(2, 3) + i
    local xe = xc:clone()
    results_eq(table.pack(f(xc)), table.pack(fn(xe)), "call " .. i .. ": results equal eager")
    teq(xc, xe, "call " .. i .. ": the argument is left as eager leaves it")
  end
end)

-- By default a number argument is guarded by value, so Lua code that uses the number as a number (returns it,
-- branches on it, indexes with it, loops over it) behaves as eagerly. The first two values of each sequence
-- lead the function the same way; the later ones do not. (With dynamic=true the caller promises the
-- opposite: that the numbers only flow into tensor ops; docs/lua_api.md says so, and the cases below where
-- Lua computes with the number would not hold there.)
for _, variant in ipairs({{"default options", nil}}) do
  local tag, opts = variant[1], variant[2]
  section("numbers used as Lua numbers inside the function (" .. tag .. ")", function()
    local x = grace.tensor({1.0, 2.0, -0.5})
    local function check(fn, values, what)
      local f = grace.compile(fn, opts)
      for _, v in ipairs(values) do
        results_eq(table.pack(f(x, v)), table.pack(fn(x, v)), ("%s: %s (%s)"):format(what, tostring(v), tag))
      end
    end
    check(function(t, s) return t * s, s * 2, s end, {0.5, 1.0, 1.5, 2.0}, "numbers computed from s come back as numbers")
    check(function(t, n) local y = t for _ = 1, n do y = y * 2 end return y end, {1, 2, 3, 4}, "a loop count")
    check(function(t, k) return t:narrow(1, k, 2) end, {1, 2, 1, 2}, "a narrow start")
    check(function(t, k) return t + math.abs(k) end, {1, 2, -3, 4}, "x + math.abs(k)")
    check(function(t, lr) return t * math.max(lr, 0.05) end, {0.5, 0.25, 0.01, 0.125}, "x * math.max(lr, 0.05)")
    check(function(t, v) if v > 1 then return t * v end return t - v end, {2.5, 3.5, 0.25, 0.75}, "a branch on v > 1")
    check(function(t, k) if k == 0 then return t * 1 end return t / k end, {1, 2, 0, 4}, "a branch on k == 0")
    local lut = {[1] = 10, [2] = 20}
    check(function(t, k) return t * (lut[k] or 1) end, {1, 2, 3, 1}, "a table looked up by k")
    check(function(t, k) if math.type(k) == "integer" then return t + 100 end return t end, {1, 2, 3.5, 4}, "math.type(k)")
    local big = math.tointeger(2 ^ 53)
    local xi = grace.zeros({2}, {dtype = "int64"})
    local add = function(t, n) return t + n end
    local a = grace.compile(add, opts)
    for _, n in ipairs({big + 1, big + 3, big + 5}) do
      teq(a(xi, n), add(xi, n), ("an int64 tensor + a changing integer %d past 2^53 (%s)"):format(n, tag))
    end
    teq(grace.compile(function(t) return t + (big + 1) end, opts)(xi), grace.tensor({big + 1, big + 1}),
      "an integer constant past 2^53 is exact (" .. tag .. ")")
  end)
end

section("host reads of captured tensors and of tensor metadata", function()
  local w = grace.tensor({2.0})
  local fn = function(t) return t * w:item() end
  local f = grace.compile(fn)
  local x = grace.ones(2)
  teq(f(x), fn(x), "w:item() of an upvalue tensor: first call")
  w:fill_(5)
  teq(f(x), fn(x), "w changed in place: the value read by item() is current")
  local vf = function(t) return t * 1, t:version() end
  local cv = grace.compile(vf)
  local y = grace.ones(2)
  cv(y)
  y:add_(1)
  results_eq(table.pack(cv(y)), table.pack(vf(y)), "x:version() read inside the function is current")
end)

section("compile's arguments and inspection", function()
  tap.raises(function() return grace.compile(42) end, "compile", "compile(42) is an error")
  tap.raises(function() return grace.compile(function() end, "x") end, "options", "options must be a table")
  tap.raises(function() return grace.compile(function() end, {cache_limit = 0}) end, "cache_limit", "cache_limit >= 1")
  local f = grace.compile(function(x) return x + 1 end, {name = "named_fn"})
  local ir, why = f:ir()
  tap.ok(ir == nil and type(why) == "string", "f:ir() before any call: nil and a reason")
  f(grace.ones(2))
  tap.ok(tostring(f):find("named_fn", 1, true) ~= nil, "tostring(f) uses opts.name")
  tap.ok((f:ir(1) or ""):find("add", 1, true) ~= nil, "f:ir(1) is the first entry's IR text")
  tap.is(f:ir(2), nil, "f:ir(2) of a function with one entry is nil")
  local st = f:stats()
  tap.ok(st.calls == 1 and st.traces == 1 and st.hits == 0 and st.entries == 1 and st.eager == false and
    st.eager_calls == 0 and type(st.dynamic_args) == "table", "stats() after one call")
  local t0 = grace.clock()
  tap.ok(type(t0) == "number" and grace.clock() >= t0, "grace.clock() is a monotonic number of seconds")
end)

section("a product of a view written through: bitwise equal to eager", function()
  local fn = function(x, y)
    local v = x:t()                 -- [4, 8], strided
    v:narrow(1, 1, 1):fill_(1.5)    -- a write through the view
    return v:matmul(y)              -- [4, 8] x [8, 1]
  end
  local f = grace.compile(fn)
  f(grace.randn(8, 4), grace.randn(8, 1))
  local bad = 0
  for seed = 1, 5 do
    grace.manual_seed(seed)
    local x, y = grace.randn(8, 4), grace.randn(8, 1)
    if not same(f(x:clone(), y), fn(x:clone(), y)) then bad = bad + 1 end
  end
  tap.is(bad, 0, "5 calls: the compiled product is bitwise the eager one (same kernels, same operand layout)")
end)

section("float arguments: -0.0 and 0.0 differ", function()
  local fn = function(x, s) return 1 / (x * s) end
  local f = grace.compile(fn)
  local one = grace.ones(1)
  teq(f(one, 0.0), fn(one, 0.0), "s = 0.0 gives +inf")
  teq(f(one, -0.0), fn(one, -0.0), "s = -0.0 gives -inf")
end)

section("library tables are not guarded", function()
  -- a function reaching the grace module (an upvalue, as any stdlib helper has) guards only its own state: the
  -- module's hundreds of functions are code (a value of package.loaded), not state to check on every call
  local G, w = require "grace", grace.randn(4)
  local plain = function(x) return x * w end
  local with_lib = function(x) local _ = G.is_tensor; return x * w end
  local x = grace.randn(4)
  local function guards(fn) return tonumber(explain(fn, x):match("(%d+) captured values")) end
  tap.is(guards(with_lib), guards(plain), "the grace module as an upvalue adds no guards")
  local polluted = false
  for k in pairs(package) do if type(k) ~= "string" then polluted = true end end
  tap.ok(not polluted, "finding the libraries leaves package as it was")
end)

tap.done()
