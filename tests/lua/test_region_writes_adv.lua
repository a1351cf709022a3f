-- test_region_writes_adv.lua: adversarial cases of in-place writes inside control-flow regions (docs/lua_api.md,
-- "Control flow" and "Automatic cond regions"). Each function is built twice on tensors of its own: one copy runs
-- eagerly (the reference: plain grace ops, no trace), the other under grace.compile; after every call the results
-- AND every tensor either may have written must agree, over calls taking both outcomes. Covers writes through views
-- of captured tensors and of arguments, a tensor passed twice, returned and written, the predicate's own source,
-- nested conds, dtype-converting copy_, errors inside a branch after a write, too many written tensors, and the
-- automatic form's writes before, after and inside the branch.
local tap = require "tests.lua.tap"
local grace = require "grace"

local section = tap.section

local function list(t) return t:reshape(-1):tolist() end
local function same_tensor(a, b)
  if a == nil or b == nil then return a == b end
  if a.dtype ~= b.dtype or table.concat(a:size(), "x") ~= table.concat(b:size(), "x") then return false end
  local x, y = list(a), list(b)
  for i = 1, #x do
    local u, v = tonumber(x[i]) or (x[i] and 1 or 0), tonumber(y[i]) or (y[i] and 1 or 0)
    if math.abs(u - v) > 1e-5 * math.max(1, math.abs(v)) then return false end
  end
  return true
end
local function show(t) return t and table.concat(list(t), ",") or "nil" end

-- twin(name, make, args, n [, opts]): make() -> f, watch (a list of tensors f may write); args(i, watch) -> the
-- arguments of call i (tensors in watch may be passed). Returns the compiled function for further checks.
local function twin(name, make, args, n, opts)
  local fe, we = make()
  local f0, wc = make()
  local fc = grace.compile(f0, opts)
  local good, why = 0, nil
  for i = 1, n do
    local ae, ac = args(i, we), args(i, wc)
    local re = {fe(table.unpack(ae, 1, ae.n or #ae))}
    local okc, rc = pcall(function() return {fc(table.unpack(ac, 1, ac.n or #ac))} end)
    local same = okc and #re == #rc
    if not okc then why = why or ("call " .. i .. " raised: " .. tostring(rc)) end
    for k = 1, #re do
      if same and not same_tensor(re[k], rc[k]) then
        same = false
        why = why or ("call %d result %d: %s vs eager %s"):format(i, k, show(rc[k]), show(re[k]))
      end
    end
    for k = 1, #we do
      if same and not same_tensor(we[k], wc[k]) then
        same = false
        why = why or ("call %d tensor %d: %s vs eager %s"):format(i, k, show(wc[k]), show(we[k]))
      end
    end
    if same then good = good + 1 end
  end
  tap.ok(good == n, name .. (why and (": " .. why) or ""))
  return fc
end

local function compiled_once(fc, name)
  local s = fc:stats()
  tap.ok(not s.eager and s.traces >= 1, name .. (" compiled (traces %d, eager %s)"):format(s.traces, tostring(s.eager)))
end

local function P(i) return grace.tensor(i % 3 ~= 1) end

section("explicit cond: views", function()
  local views = {
    narrow = function(t) return t:narrow(1, 2, 2) end,
    select = function(t) return t:select(2, 3) end,
    transpose = function(t) return t:t() end,
    reshape = function(t) return t:reshape(12) end,
    view = function(t) return t:view(2, 6) end,
    unsqueeze = function(t) return t:unsqueeze(1) end,
    chain = function(t) return t:t():narrow(1, 2, 2):select(1, 1) end,
  }
  for vn, v in pairs(views) do
    local fc = twin("captured written through " .. vn, function()
      local A = grace.arange(12):float():reshape(4, 3)
      return function(p, x)
        local r = grace.cond(p, function(a) v(A):add_(a) return a * 2 end,
                                function(a) v(A):mul_(-1) return a - 1 end, x)
        return r + A:sum()
      end, {A}
    end, function(i) return {P(i), grace.tensor(i + 0.5)} end, 8)
    compiled_once(fc, "  " .. vn)
    twin("argument written through " .. vn, function()
      local A = grace.arange(12):float():reshape(4, 3)
      return function(p, x, t)
        local r = grace.cond(p, function(a, b) v(b):add_(a) return a * 2 end,
                                function(a, b) v(b):mul_(0.5) return a - 1 end, x, t)
        return r, t:sum()
      end, {A}
    end, function(i, w) return {P(i), grace.tensor(i + 0.5), w[1]} end, 8)
    twin("view argument (of a captured) written through " .. vn, function()
      local A = grace.arange(24):float():reshape(2, 4, 3)
      return function(p, x, t)
        local r = grace.cond(p, function(a, b) v(b):add_(a) return a * 2 end,
                                function(a, b) v(b):mul_(0.5) return a - 1 end, x, t)
        return r, A:sum()
      end, {A}
    end, function(i, w) return {P(i), grace.tensor(i + 0.5), w[1]:select(1, 2)} end, 8)
  end
end)

section("explicit cond: aliasing", function()
  twin("the same tensor passed twice, written through both", function()
    local A = grace.ones(3)
    return function(p, a, b)
      local r = grace.cond(p, function(u, v) u:add_(1) v:mul_(2) return u + v end,
                              function(u, v) v:add_(10) return u * 1 end, a, b)
      return r, a + 0
    end, {A}
  end, function(i, w) return {P(i), w[1], w[1]} end, 8)
  twin("a tensor both returned and written", function()
    local A = grace.ones(3)
    return function(p, x)
      local r, s = grace.cond(p, function(u) A:add_(u) return A, u end, function(u) A:mul_(2) return u, A end, x)
      return r + 0, s + 0, A + 0
    end, {A}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 8)
  -- (a result that is a tensor from outside, returned as it is and written after the region, is a copy in the
  -- compiled function: documented, "A region's result may be a copy of its argument", so not compared here)
  twin("a captured tensor also passed to the cond, written through the capture, read as the argument", function()
    local A = grace.ones(3)
    return function(p, x)
      local r = grace.cond(p, function(u, y) A:add_(y) return u * 2 end, function(u, y) A:mul_(3) return u + y end, A, x)
      return r, A + 0
    end, {A}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 8)
  twin("the same tensor passed twice to the cond, written through one, read through the other", function()
    local A = grace.ones(3)
    return function(p, x)
      local r = grace.cond(p, function(u, v, y) u:add_(y) return v * 2 end, function(u, v, y) v:mul_(3) return u + y end, A, A, x)
      return r, A + 0
    end, {A}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 8)
  twin("a view of a captured tensor made before the cond, passed to it and written", function()
    local A = grace.zeros(4, 3)
    return function(p, x)
      local row = A:select(1, 3)
      local r = grace.cond(p, function(v, y) v:add_(y) return y * 2 end, function(v, y) v:mul_(-2) v:add_(1) return y end, row, x)
      return r, A:sum()
    end, {A}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 8)
  twin("a transposed view passed to the cond, written through a narrow of it", function()
    local A = grace.arange(12):float():reshape(3, 4)
    return function(p, x)
      local r = grace.cond(p, function(v, y) v:narrow(1, 2, 2):add_(y) return y end, function(v, y) v:select(2, 1):fill_(7) return y end, A:t(), x)
      return r, A + 0
    end, {A}
  end, function(i) return {P(i), grace.tensor(i + 0.5)} end, 8)
  twin("a branch returning a view of a tensor it wrote", function()
    local A = grace.zeros(4, 3)
    return function(p, x)
      local r = grace.cond(p, function(y) A:add_(y) return A:select(1, 2) end, function(y) A:mul_(2) return A:narrow(1, 1, 1):reshape(3) end, x)
      return r + 0
    end, {A}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 8)
  twin("the predicate's own source written in the branch", function()
    local S = grace.tensor({1.0, -1.0})
    return function(x)
      local r = grace.cond(S[1]:gt(0), function(u) S:mul_(-1) return u + 1 end, function(u) S:add_(3) return u - 1 end, x)
      return r, S + 0
    end, {S}
  end, function(i) return {grace.full({2}, i + 0.5)} end, 8)
  twin("the predicate tensor itself written in a branch", function()
    local S = grace.tensor(true)
    return function(x)
      local r = grace.cond(S, function(u) S:fill_(false) return u + 1 end, function(u) S:fill_(true) return u - 1 end, x)
      return r
    end, {S}
  end, function(i) return {grace.full({2}, i + 0.5)} end, 8)
  twin("a value computed before the cond, written inside", function()
    local A = grace.ones(3)
    return function(p, x)
      local h = x * 2
      local r = grace.cond(p, function(u) h:add_(1) return u end, function(u) h:mul_(3) return u * 0 end, x)
      return r + h, h
    end, {A}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 8)
  twin("a view computed before the cond, of an argument, written inside", function()
    local A = grace.zeros(4, 3)
    return function(p, x, t)
      local row = t:select(1, 2)
      local r = grace.cond(p, function(u) row:add_(u) return u end, function(u) t:narrow(1, 2, 1):mul_(3) return u end, x)
      return r + row:sum()
    end, {A}
  end, function(i, w) return {P(i), grace.full({3}, i), w[1]} end, 8)
end)

section("explicit cond: dtypes and grad", function()
  twin("copy_ of float into an int64 tensor in a branch", function()
    local K = grace.zeros(3, {dtype = "int64"})
    return function(p, x)
      local r = grace.cond(p, function(u) K:copy_(u * 1.7) return u end, function(u) K:add_(1) return u end, x)
      return r, K:float()
    end, {K}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 8)
  twin("an int tensor into a float view", function()
    local F = grace.zeros(2, 3)
    return function(p, x)
      local r = grace.cond(p, function(u) F:select(1, 1):copy_(u) return u + 1 end, function(u) F:t():add_(1) return u end, x)
      return r
    end, {F}
  end, function(i) return {P(i), grace.tensor({i, -i, 2 * i}, {dtype = "int32"})} end, 8)
  twin("a bool tensor written", function()
    local B = grace.tensor({false, true, false})
    return function(p, x)
      return grace.cond(p, function(u) B:copy_(u:gt(2)) return u end, function(u) B:fill_(true) return u end, x)
    end, {B}
  end, function(i) return {P(i), grace.tensor({i, 1, 3})} end, 8)
  do   -- a write to a leaf requiring grad outside no_grad: eagerly an error; compiled the same error, contents kept
    local W = grace.ones(3, {requires_grad = true})
    local fe = function(p, x) return grace.cond(p, function(u) W:add_(u) return u end, function(u) return u end, x) end
    local oke, ee = pcall(fe, grace.tensor(true), grace.ones(3))
    local fc = grace.compile(fe)
    local okc, ec = pcall(fc, grace.tensor(true), grace.ones(3))
    tap.diag("eager: " .. tostring(ee) .. " | compiled: " .. tostring(ec))
    tap.ok(not oke and not okc and same_tensor(W:detach(), grace.ones(3)), "a write to a leaf requiring grad in a branch: an error both ways, W kept: " .. show(W:detach()))
  end
  twin("no_grad writes to a parameter in both branches", function()
    local W = grace.ones(3, {requires_grad = true})
    return function(p, x)
      local r = grace.cond(p, function(u) grace.no_grad(function() W:add_(u) end) return u * 2 end,
                              function(u) grace.no_grad(function() W:mul_(0.5) end) return u end, x)
      return r + 0
    end, {W}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 8)
end)

section("explicit cond: both branches, nesting, order", function()
  twin("writes before, inside and after the cond to the same tensor", function()
    local A = grace.ones(3)
    return function(p, x)
      A:add_(1)
      local r = grace.cond(p, function(u) A:mul_(u) return u end, function(u) A:sub_(u) A:mul_(2) return u end, x)
      A:add_(0.5)
      return r + A
    end, {A}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 8)
  twin("different tensors in each branch", function()
    local A, B, C = grace.ones(3), grace.zeros(2), grace.zeros(4)
    return function(p, x)
      return grace.cond(p, function(u) A:add_(u) C:add_(1) return u end, function(u) B:add_(3) C:mul_(2) return u end, x)
    end, {A, B, C}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 9)
  twin("cond in cond, outer and inner write the same tensor", function()
    local A = grace.ones(3)
    return function(p, q, x)
      return grace.cond(p,
        function(u, qq) A:add_(1) local r = grace.cond(qq, function(w) A:mul_(2) return w end, function(w) A:sub_(5) return w end, u) A:add_(0.25) return r end,
        function(u) A:mul_(-1) return u end, x, q)
    end, {A}
  end, function(i) return {P(i), grace.tensor(i % 2 == 0), grace.full({3}, i + 0.5)} end, 12)
  twin("three conds in a row on the same tensor", function()
    local A = grace.ones(2)
    return function(p, q, x)
      grace.cond(p, function(u) A:add_(u) return u end, function(u) return u end, x)
      grace.cond(q, function(u) A:mul_(2) return u end, function(u) A:sub_(1) return u end, x)
      local r = grace.cond(A:sum():gt(5), function(u) A:fill_(0) return u end, function(u) return u + A end, x)
      return r
    end, {A}
  end, function(i) return {P(i), grace.tensor(i % 2 == 0), grace.full({2}, i % 4 + 0.5)} end, 12)
  twin("a branch writing a tensor 17 times (one tensor, many writes)", function()
    local A = grace.zeros(2)
    return function(p, x)
      return grace.cond(p, function(u) for _ = 1, 17 do A:add_(u) end return u end, function(u) return u end, x)
    end, {A}
  end, function(i) return {P(i), grace.full({2}, i + 0.5)} end, 6)
  twin("16 tensors written in then, 16 others in else", function()
    local T = {}
    for k = 1, 32 do T[k] = grace.zeros(1) end
    return function(p, x)
      return grace.cond(p, function(u) for k = 1, 16 do T[k]:add_(u) end return u end,
                           function(u) for k = 17, 32 do T[k]:add_(u) end return u end, x)
    end, T
  end, function(i) return {P(i), grace.full({1}, i + 0.5)} end, 6)
end)

section("explicit cond: more in-place ops and values from before", function()
  twin("masked_fill_, clamp_, zero_, div_, index_put_ through views", function()
    local A = grace.arange(12):float():reshape(4, 3)
    return function(p, x)
      local r = grace.cond(p, function(u)
        A:narrow(1, 1, 2):masked_fill_(A:narrow(1, 1, 2):gt(3), -1)
        A:t():select(1, 3):clamp_(0, 5)
        A:index_put_({grace.tensor({1, 4}, {dtype = "int64"})}, grace.ones(2, 3), true)
        return u
      end, function(u)
        A:select(1, 2):zero_()
        A:narrow(2, 2, 2):div_(2)
        return u * 2
      end, x)
      return r + A:sum()
    end, {A}
  end, function(i) return {P(i), grace.tensor(i + 0.5)} end, 9)
  twin("a view of a value from before the cond written in both branches", function()
    local A = grace.zeros(1)
    return function(p, x)
      local h = x:reshape(2, 3) * 1
      local row = h:select(1, 1)
      local r = grace.cond(p, function(u) row:add_(u:sum()) h:narrow(2, 3, 1):mul_(-1) return h + 0 end,
                              function(u) h:t():select(1, 2):fill_(9) return h * 2 end, x)
      A:copy_(h:sum():reshape(1))
      return r, h, row + 0
    end, {A}
  end, function(i) return {P(i), grace.arange(6):float() + i} end, 8)
  local fv = twin("a captured tensor and a captured view of it, both written in a branch", function()
    local A = grace.zeros(4, 2)
    local V = A:narrow(1, 2, 2)
    return function(p, x)
      local r = grace.cond(p, function(u) V:add_(u) A:mul_(2) return u end, function(u) A:add_(1) V:fill_(-3) return u * 2 end, x)
      return r + A:sum()
    end, {A}
  end, function(i) return {P(i), grace.tensor(i + 0.5)} end, 6)
  tap.diag("captured tensor and view: eager " .. tostring(fv:stats().eager))
  twin("indexed assignment (x[key] = v) in branches", function()
    local A = grace.zeros(4, 3)
    return function(p, x)
      local r = grace.cond(p, function(u) A[2] = u A[{1, 3}] = 5 return u end,
                              function(u) A[A:gt(1)] = 0 A[{{2, 3}, 1}] = -1 return u * 2 end, x)
      return r + A:sum()
    end, {A}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 8)
  -- random in-place ops in a branch: the same draws as eagerly from the same seed
  local function mk()
    local A = grace.zeros(4)
    return function(p, x)
      local r = grace.cond(p, function(u) A:uniform_(-1, 1) return u + 1 end, function(u) A:narrow(1, 2, 2):normal_() return u end, x)
      return r + grace.rand(2), A
    end, A
  end
  local fe, ae = mk()
  local f0, ac = mk()
  local fc, good = grace.compile(f0), 0
  for i = 1, 8 do
    grace.manual_seed(100 + i)
    local re = fe(P(i), grace.ones(2))
    grace.manual_seed(100 + i)
    local rc = fc(P(i), grace.ones(2))
    if same_tensor(re, rc) and same_tensor(ae, ac) then good = good + 1 end
  end
  tap.ok(good == 8 and not fc:stats().eager, ("uniform_/normal_ in branches draw as eagerly (%d of 8)"):format(good))
end)

section("explicit cond: with graph breaks, grace.eager", function()
  twin("a cond writing a captured tensor in a function with a graph break", function()
    local A = grace.zeros(3)
    return function(p, x)
      local r = grace.cond(p, function(u) A:add_(u) return u * 2 end, function(u) A:mul_(0.5) return u end, x)
      local s = r:sum():item()
      return r * s + A
    end, {A}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 8)
  twin("a cond writing a captured tensor, and an item() branch after it", function()
    local A = grace.zeros(3)
    return function(p, x)
      local r = grace.cond(p, function(u) A:add_(u) return u * 2 end, function(u) A:mul_(0.5) return u end, x)
      if r:sum():item() > 10 then
        A:add_(1)
        return r
      end
      return r - A
    end, {A}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 10)
  twin("grace.eager inside a branch writing a captured tensor", function()
    local A = grace.zeros(3)
    return function(p, x)
      return grace.cond(p, function(u) grace.eager(function() A:add_(1) end) return u * 2 end, function(u) return u end, x)
    end, {A}
  end, function(i) return {P(i), grace.full({3}, i + 0.5)} end, 6)
  twin("grace.eager inside else_fn writing a captured tensor, in a nested cond", function()
    local A = grace.zeros(3)
    return function(p, q, x)
      return grace.cond(p, function(u, qq)
        return grace.cond(qq, function(w) return w + 1 end, function(w) grace.eager(function() A:add_(w) end) return w * 2 end, u)
      end, function(u) A:mul_(3) return u end, x, q)
    end, {A}
  end, function(i) return {P(i), grace.tensor(i % 2 == 0), grace.full({3}, i + 0.5)} end, 8)
  twin("grace.eager inside a while_loop body", function()
    local A = grace.zeros(1)
    return function(i0)
      return grace.while_loop(function(i) return i:lt(3) end, function(i) grace.eager(function() A:add_(1) end) return i + 1 end, {i0})
    end, {A}
  end, function(i) return {grace.tensor(i % 4)} end, 6)
end)

section("explicit cond: 0-d arguments and changing sizes", function()
  twin("a 0-d counter argument written in a branch", function()
    local C = grace.tensor(0.0)
    return function(p, x, c)
      local r = grace.cond(p, function(u, k) k:add_(1) return u * k end, function(u, k) k:mul_(-1) return u end, x, c)
      return r, c + 0
    end, {C}
  end, function(i, w) return {P(i), grace.full({2}, i + 0.5), w[1]} end, 8)
  twin("the 0-d predicate argument written in a branch", function()
    local Q = grace.tensor(true)
    return function(q, x)
      return grace.cond(q, function(u) q:fill_(false) return u + 1 end, function(u) q:fill_(true) return u - 1 end, x)
    end, {Q}
  end, function(i, w) return {w[1], grace.full({2}, i + 0.5)} end, 8)
  twin("an argument of changing size written in a branch", function()
    local A = grace.zeros(1)
    return function(p, x)
      local r = grace.cond(p, function(u) u:add_(1) A:add_(u:sum()) return u * 2 end, function(u) u:mul_(2) return u end, x)
      return r, x + 0
    end, {A}
  end, function(i) return {P(i), grace.arange(2 + i % 3):float()} end, 9)
end)

section("explicit cond: an inner region that runs eagerly", function()
  twin("a nested cond with a host read writing a captured tensor, in the branch not taken", function()
    local A = grace.zeros(3)
    return function(p, q, x)
      return grace.cond(p, function(u, qq)
        return grace.cond(qq, function(w) A:add_(1) return w * w:sum():item() end, function(w) return w end, u)
      end, function(u) A:mul_(2) return u end, x, q)
    end, {A}
  end, function(i) return {P(i), grace.tensor(true), grace.full({3}, i + 0.5)} end, 6)
end)

section("explicit cond: errors", function()
  -- more than 16 tensors: a clean error, contents unchanged
  local T = {}
  for k = 1, 17 do T[k] = grace.zeros(1) end
  local f = grace.compile(function(p, x)
    return grace.cond(p, function(u) for k = 1, 17 do T[k]:add_(u) end return u end, function(u) return u end, x)
  end)
  local ok, err = pcall(f, grace.tensor(true), grace.ones(1))
  local sum = 0
  for k = 1, 17 do sum = sum + T[k]:item() end
  tap.diag("17 tensors: ok=" .. tostring(ok) .. " " .. tostring(err) .. " sum " .. sum)
  tap.ok((not ok and tostring(err):find("more than 16", 1, true) and sum == 0) or (ok and sum == 17),
         "17 written tensors: an error naming the limit with contents unchanged, or the right result: " .. tostring(err))
  -- a Lua error after a write; then the same function keeps working
  local A = grace.ones(3)
  local g = grace.compile(function(p, x, bad)
    return grace.cond(p, function(u) A:add_(u) if bad then error("boom") end return u end,
                         function(u) A:mul_(2) return u end, x)
  end)
  tap.raises(function() g(grace.tensor(true), grace.ones(3), true) end, {"boom"}, "Lua error in a branch")
  tap.ok(same_tensor(A, grace.ones(3)), "A restored after a Lua error: " .. show(A))
  local r = g(grace.tensor(true), grace.ones(3), false)
  tap.ok(same_tensor(A, grace.full({3}, 2):float()) and same_tensor(r, grace.ones(3)), "and the function works after: " .. show(A))
  -- a grace error after a write (an index out of range)
  local B = grace.ones(3)
  local h = grace.compile(function(p, x, i)
    return grace.cond(p, function(u) B:add_(u) return u + B:select(1, i) end, function(u) B:mul_(2) return u end, x)
  end)
  tap.raises(function() h(grace.tensor(false), grace.ones(3), 9) end, {"select"}, "grace error in a branch")
  tap.ok(same_tensor(B, grace.ones(3)), "B restored after a grace error: " .. show(B))
  local r2 = h(grace.tensor(false), grace.ones(3), 2)
  tap.ok(same_tensor(B, grace.full({3}, 2):float()) and same_tensor(r2, grace.ones(3)), "and works after: " .. show(B))
  local r3 = h(grace.tensor(true), grace.ones(3), 2)
  tap.ok(same_tensor(B, grace.full({3}, 3):float()) and same_tensor(r3, grace.full({3}, 4):float()), "both ways: " .. show(B) .. " " .. show(r3))
  -- an error in a nested cond's branch, after writes by the outer and the inner branch; and in the else branch after
  -- then's recording wrote: every level gives the tensor back, and the function works after
  local N = grace.ones(2)
  local nf = grace.compile(function(p, q, x, bad)
    return grace.cond(p, function(u, qq)
      N:add_(10)
      return grace.cond(qq, function(w) N:mul_(2) if bad then error("inner boom") end return w end, function(w) return w end, u)
    end, function(u) N:sub_(1) if bad then error("else boom") end return u end, x, q)
  end)
  tap.raises(function() nf(grace.tensor(true), grace.tensor(true), grace.ones(2), true) end, {"inner boom"}, "an error in a nested branch")
  tap.ok(same_tensor(N, grace.ones(2)), "N given back through both levels: " .. show(N))
  tap.raises(function() nf(grace.tensor(false), grace.tensor(false), grace.ones(2), true) end, {"boom"}, "an error in else after then wrote")
  tap.ok(same_tensor(N, grace.ones(2)), "N given back: " .. show(N))
  nf(grace.tensor(true), grace.tensor(true), grace.ones(2), false)
  tap.ok(same_tensor(N, grace.full({2}, 22):float()), "then works: " .. show(N))
  nf(grace.tensor(false), grace.tensor(true), grace.ones(2), false)
  tap.ok(same_tensor(N, grace.full({2}, 21):float()), "both ways: " .. show(N))
  -- a cond inside a while_loop body writing an outside tensor
  local C = grace.zeros(1)
  local w = grace.compile(function(i0)
    return grace.while_loop(function(i) return i:lt(3) end,
      function(i) return grace.cond(i:gt(0), function(j) C:add_(1) return j + 1 end, function(j) return j + 1 end, i) end, {i0})
  end)
  local okw, ew = pcall(w, grace.tensor(0))
  tap.diag("cond in while body: " .. tostring(okw) .. " " .. tostring(ew) .. " C=" .. show(C))
  tap.ok((not okw and tostring(ew):find("while_loop", 1, true) and C:item() == 0) or (okw and C:item() == 2),
         "a cond in a while_loop body writing an outside tensor: refused with contents unchanged, or right: " .. show(C))
  -- mismatched results after a write: the error, contents back
  local D = grace.ones(2)
  local m = grace.compile(function(p, x)
    return grace.cond(p, function(u) D:add_(1) return u end, function(u) D:add_(2) return u:sum() end, x)
  end)
  tap.raises(function() m(grace.tensor(true), grace.ones(2)) end, {"cond: result 1"}, "branches disagreeing after writes")
  tap.ok(same_tensor(D, grace.ones(2)), "D unchanged: " .. show(D))
end)

section("explicit cond: guards", function()
  -- a captured tensor replaced between calls (the upvalue rebinds) and modified from outside
  local A = grace.ones(3)
  local function body(p, x)
    return grace.cond(p, function(u) A:add_(u) return u + A end, function(u) A:mul_(2) return u end, x)
  end
  local f = grace.compile(body)
  local want = {1, 1, 1}
  local good = 0
  for i = 1, 10 do
    if i == 4 then A = grace.zeros(3); want = {0, 0, 0} end
    if i == 7 then A:fill_(5); want = {5, 5, 5} end
    local p = i % 2 == 0
    local r = f(grace.tensor(p), grace.full({3}, i):float())
    local rw = {}
    for k = 1, 3 do
      if p then want[k] = want[k] + i; rw[k] = i + want[k] else want[k] = want[k] * 2; rw[k] = i end
    end
    if same_tensor(A, grace.tensor(want):float()) and same_tensor(r, grace.tensor(rw):float()) then good = good + 1 end
  end
  tap.is(good, 10, "captured tensor rebound and filled from outside between calls")
  local v0 = A:version()
  f(grace.tensor(true), grace.ones(3))
  tap.diag("version step per call: " .. (A:version() - v0))
  tap.ok(A:version() > v0, "the version advances")
  local ok1 = pcall(grace.explain, body, grace.tensor(true), grace.ones(3))
  local ok2 = pcall(function() return f:report() end)
  tap.ok(ok1 and ok2, "explain and report do not raise")
end)

section("automatic form", function()
  local ac = {}
  local function auto(name, make, args, n)
    local fc = twin("auto: " .. name, make, args, n)
    ac[#ac + 1] = {name, fc}
    return fc
  end
  local function X(i) return grace.tensor({(i % 3 == 0) and 4.5 or -3.5, 1, -2 + i % 2}) end
  auto("write in one path only (captured)", function()
    local A = grace.zeros(3)
    return function(x)
      local h = x * 2
      if h:sum():item() > 0 then
        A:add_(h)
        return h
      end
      return h - 1
    end, {A}
  end, function(i) return {X(i)} end, 10)
  auto("writes in both paths, through views", function()
    local A = grace.zeros(4, 3)
    return function(x)
      local h = x + 1
      if h:sum():item() > 0 then
        A:select(1, 2):add_(h)
        return h * A:sum()
      end
      A:t():narrow(2, 3, 2):mul_(0.5) A:narrow(1, 1, 1):add_(1)
      return h
    end, {A}
  end, function(i) return {X(i)} end, 10)
  auto("write to an argument before the branch and in it", function()
    local A = grace.zeros(3)
    return function(x, t)
      t:add_(1)
      if x:sum():item() > 0 then
        t:mul_(2)
        return x + t
      end
      return x - t
    end, {A}
  end, function(i, w) return {X(i), w[1]} end, 10)
  auto("write after the branch's join (no early return)", function()
    local A = grace.zeros(3)
    return function(x)
      local y
      if x:sum():item() > 0 then
        y = x * 2
        A:add_(1)
      else
        y = x - 1
      end
      A:add_(y)
      return y + A
    end, {A}
  end, function(i) return {X(i)} end, 10)
  auto("a value computed before written in both paths", function()
    local A = grace.zeros(3)
    return function(x)
      local h = x * 3
      if x:max():item() >= 1.5 then
        h:add_(1)
      else
        h:mul_(-1)
      end
      A:copy_(h)
      return h
    end, {A}
  end, function(i) return {X(i)} end, 10)
  auto("the predicate source written in a path", function()
    local S = grace.tensor({1.0, -2.0, 0.5})
    return function(x)
      if S:sum():item() > 0 then
        S:mul_(-1)
        return x + S
      end
      S:add_(2) return x - S
    end, {S}
  end, function(i) return {X(i)} end, 10)
  auto("two item() branches in a row, each writing", function()
    local A = grace.zeros(3)
    return function(x)
      if x:sum():item() > 0 then
        A:add_(1)
      end
      if x:max():item() > 2 then
        A:mul_(2)
        return x + A
      end
      return x - A
    end, {A}
  end, function(i) return {X(i)} end, 14)
  auto("an int tensor written with a float", function()
    local K = grace.zeros(3, {dtype = "int64"})
    return function(x)
      if x:sum():item() > 0 then
        K:copy_(x * 2.5)
        return x
      end
      K:add_(1) return x * 2
    end, {K}
  end, function(i) return {X(i)} end, 10)
  auto("an exit never taken, a captured tensor written before it", function()
    local A = grace.zeros(3)
    return function(x)
      A:add_(1)
      local h = x * 2
      if h:abs():max():item() > 1e9 then return h end
      return h + A
    end, {A}
  end, function(i) return {X(i)} end, 8)
  auto("an exit never taken, a captured tensor written after it", function()
    local A = grace.zeros(3)
    return function(x)
      local h = x * 2
      if h:abs():max():item() > 1e9 then return h end
      A:add_(h)
      return h + A
    end, {A}
  end, function(i) return {X(i)} end, 8)
  auto("an exit never taken, a value from before written", function()
    local A = grace.zeros(3)
    return function(x)
      local h = x * 2
      h:add_(1)
      if h:abs():max():item() > 1e9 then return h end
      h:mul_(2)
      A:copy_(h)
      return h
    end, {A}
  end, function(i) return {X(i)} end, 8)
  auto("a captured tensor written in a path and filled from outside between calls", function()
    local A = grace.zeros(3)
    return function(x)
      local h = x * 2
      if h:sum():item() > 0 then
        A:add_(h)
        return h + A
      end
      A:mul_(0.5)
      return h - A
    end, {A}
  end, function(i, w) if i == 9 or i == 12 then w[1]:fill_(i) end return {X(i)} end, 14)
  auto("an argument written in both paths, also read for the predicate", function()
    local A = grace.tensor({1.0, -2.0, 0.5})
    return function(x, t)
      if t:sum():item() > 0 then
        t:sub_(x:abs() + 1)
        return x + t
      end
      t:add_(x:abs() + 1)
      return x - t
    end, {A}
  end, function(i, w) return {X(i), w[1]} end, 12)
  auto("33 captured tensors written in one path (more than a merge takes)", function()
    local T = {}
    for k = 1, 33 do T[k] = grace.zeros(1) end
    return function(x)
      local h = x:sum():reshape(1)
      if h:sum():item() > 0 then
        for k = 1, 33 do T[k]:add_(h) end
        return h
      end
      T[1]:sub_(1)
      return h * 2
    end, T
  end, function(i) return {X(i)} end, 10)
  do   -- versions: documented to advance by the most writes either path makes, whichever path runs
    local A = grace.zeros(3)
    local f = grace.compile(function(x)
      if x:sum():item() > 0 then
        A:add_(1)
        A:mul_(2)
        return x + A
      end
      A:sub_(1)
      return x - A
    end)
    for i = 1, 8 do f(X(i)) end
    local steps = {}
    for i = 9, 12 do
      local v0 = A:version()
      f(X(i))
      steps[#steps + 1] = A:version() - v0
    end
    tap.diag("auto versions per call (paths make 2 and 1 writes): " .. table.concat(steps, " "))
    -- the merged IR says bumps=2, but on the CPU the copy_ after the region runs in place and the version is what
    -- the executed ops made (one): only "advances on every call" is asserted (see the review notes)
    tap.ok(f:stats().auto_regions == 1 and steps[1] >= 1 and steps[2] >= 1 and steps[3] >= 1 and steps[4] >= 1,
           "merged: the version advances on every call, whichever path runs")
  end
  auto("an early exit taken on some calls, a captured tensor written before it", function()
    local A = grace.zeros(3)
    return function(x)
      A:add_(x)
      local h = x * 2
      if h:sum():item() > 0 then return h + A end
      A:mul_(0.5)
      return h - A
    end, {A}
  end, function(i) return {X(i)} end, 10)
  auto("each path writes a different tensor (an argument, a captured one)", function()
    local A, B = grace.zeros(3), grace.ones(2)
    return function(x, t)
      local h = x + 1
      if h:sum():item() > 3 then
        t:add_(h)
        return h
      end
      B:mul_(2)
      return h * B:sum()
    end, {A, B}
  end, function(i, w) return {X(i), w[1]} end, 10)
  auto("a parameter updated under no_grad in one path", function()
    local W = grace.ones(3, {requires_grad = true})
    return function(x)
      local h = x * 1
      if h:sum():item() > 0 then
        grace.no_grad(function() W:sub_(h * 0.1) end)
        return h + 0
      end
      return h * 2
    end, {W}
  end, function(i) return {X(i)} end, 10)
  auto("a value from before written in a path, then copied into a captured tensor and returned", function()
    local A = grace.zeros(3)
    return function(x)
      local h = x * 2
      if h:sum():item() > 0 then
        h:add_(1)
        h:mul_(h)
      else
        h:sub_(1)
      end
      A:add_(h)
      return h, A * 1
    end, {A}
  end, function(i) return {X(i)} end, 10)
  auto("a path returning the captured tensor it wrote", function()
    local A = grace.zeros(3)
    return function(x)
      local h = x * 2
      if h:sum():item() > 0 then
        A:add_(h)
        return A * 1, A
      end
      A:sub_(1)
      return h, A
    end, {A}
  end, function(i) return {X(i)} end, 10)
  auto("a path returning the argument it wrote", function()
    local A = grace.zeros(3)
    return function(x, t)
      if x:sum():item() > 0 then
        t:add_(x)
        return t
      end
      t:mul_(-1)
      return t
    end, {A}
  end, function(i, w) return {X(i), w[1]} end, 10)
  auto("the predicate read from an argument just written, written again in a path and returned", function()
    local A = grace.tensor({0.5, -1.0, 0.25})
    return function(x, t)
      t:add_(x)
      if t:sum():item() > 0 then
        t:mul_(0.5)
        return t, x
      end
      return x, t
    end, {A}
  end, function(i, w) return {X(i), w[1]} end, 12)
  for _, e in ipairs(ac) do
    local s = e[2]:stats()
    tap.diag(("auto %s: traces %d hits %s auto_regions %s eager %s failure %s"):format(e[1], s.traces, tostring(s.hits),
      tostring(s.auto_regions), tostring(s.eager), tostring(s.auto_region_failure)))
    local ok = pcall(function() return e[2]:report() end)
    tap.ok(ok, "report on " .. e[1])
  end
end)

tap.done()
