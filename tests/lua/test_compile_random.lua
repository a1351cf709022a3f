-- test_compile_random.lua: property tests of grace.compile. A seeded generator builds 200 random programs
-- (5 to 40 ops over random broadcast-compatible shapes of 1-4 dims; float32, float64, int64, float16 and
-- bfloat16) from pointwise ops, Lua number constants, comparisons with where, reductions over a dim,
-- softmax, matmul, views (transpose, reshape, unsqueeze/squeeze, narrow) and cat. Each program is a Lua
-- closure over a list of op descriptors; it is compiled and called on 3 sets of fresh random inputs of the
-- same shapes (the first call traces, the next two replay the IR), and every result is compared with the
-- eager result of the same closure on the same inputs: exactly for integer programs, allclose for floats
-- (rtol 1e-5; float64 1e-12; float16/bfloat16 1e-2). The compiled path runs the same kernels, so results
-- should be bitwise equal: results that are only close are reported as a diagnostic. Each compiled program
-- must also really compile (an IR, one trace, the later calls hits). A failure prints the program.
-- A second batch of 600 programs all have in-place ops (on inputs, intermediates and through chains of views,
-- some of which copy), checking the written inputs and their version counters against eager too. A third
-- batch of 300 adds captured tensors (upvalues, changed in place between calls), a number argument that
-- changes every call (half with dynamic=true) and graph breaks (a branch on item()), over 4 calls.
-- GRACE_COMPILE_SEED=n reruns with another seed; GRACE_COMPILE_NPROG, _NINPLACE, _NFEATURES: batch sizes.
local tap = require "tests.lua.tap"
local grace = require "grace"

local SEED = tonumber(os.getenv("GRACE_COMPILE_SEED") or "") or 20240611
local NPROG = tonumber(os.getenv("GRACE_COMPILE_NPROG") or "") or 200
local NINPLACE = tonumber(os.getenv("GRACE_COMPILE_NINPLACE") or "") or 600   -- a second batch, all with writes
local NFEATURES = tonumber(os.getenv("GRACE_COMPILE_NFEATURES") or "") or 300   -- a third: captures, numbers, breaks
math.randomseed(SEED)
local R = math.random

local MAXNUMEL = 1500

-- ---- shapes ----
local function numel(s) local n = 1 for _, v in ipairs(s) do n = n * v end return n end
local function copy(s) local r = {} for i, v in ipairs(s) do r[i] = v end return r end
local function sstr(s) return "[" .. table.concat(s, ",") .. "]" end

-- NumPy broadcasting of two shapes, or nil
local function bshape(a, b)
  local n = math.max(#a, #b)
  local r = {}
  for i = 1, n do
    local x = a[#a - n + i] or 1
    local y = b[#b - n + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then return nil end
    r[i] = (x == 1) and y or x
  end
  return r
end

local function matmul_shape(a, b)
  if #a < 2 or #b < 2 then return nil end
  if a[#a] ~= b[#b - 1] then return nil end
  local ba, bb = {}, {}
  for i = 1, #a - 2 do ba[i] = a[i] end
  for i = 1, #b - 2 do bb[i] = b[i] end
  local batch = bshape(ba, bb)
  if not batch then return nil end
  batch[#batch + 1] = a[#a - 1]
  batch[#batch + 1] = b[#b]
  return batch
end

-- ---- the interpreter a program closes over ----
local UNARY = {
  neg = function(x) return -x end,
  abs = function(x) return x:abs() end,
  expc = function(x) return x:clamp(-10, 10):exp() end,
  tanh = function(x) return x:tanh() end,
  sigmoid = function(x) return x:sigmoid() end,
  relu = function(x) return x:relu() end,
  sqrtabs = function(x) return x:abs():sqrt() end,
}
local BIN = {
  add = function(a, b) return a + b end,
  sub = function(a, b) return a - b end,
  mul = function(a, b) return a * b end,
  div = function(a, b) return a / b end,
  maximum = function(a, b) return a:maximum(b) end,
}

local function apply(d, v, k)
  local a = v[d.a]
  local op = d.op
  if op == "bin" then return BIN[d.fn](a, v[d.b])
  elseif op == "karg" then return a * k   -- the program's number argument
  elseif op == "brk" then   -- a graph break: a value read on the host decides the branch
    if d.int then
      if a:sum():item() % 2 == 0 then return a + 1 end
      return a * 2
    end
    if a:mean():item() > 0 then return a * 0.5 end
    return a - 1
  elseif op == "binc" then
    if d.rev then return BIN[d.fn](d.k, a) end
    return BIN[d.fn](a, d.k)
  elseif op == "un" then return UNARY[d.fn](a)
  elseif op == "where" then return grace.where(a:gt(v[d.b]), a, v[d.b])
  elseif op == "wherec" then return grace.where(a:lt(d.k), a * d.k2, a)
  elseif op == "red" then
    if d.fn == "max" then local m = a:max(d.dim, d.keep) return m end
    return a[d.fn](a, d.dim, d.keep)
  elseif op == "softmax" then return a:softmax(d.dim)
  elseif op == "matmul" then return a:matmul(v[d.b])
  elseif op == "mmT" then return a:matmul(a:transpose(-1, -2))
  elseif op == "transpose" then return a:transpose(d.d1, d.d2)
  elseif op == "reshape" then return a:reshape(d.shape)
  elseif op == "unsqueeze" then return a:unsqueeze(d.dim)
  elseif op == "squeeze" then return a:squeeze(d.dim)
  elseif op == "narrow" then return a:narrow(d.dim, d.start, d.len)
  elseif op == "cat" then return grace.cat({a, v[d.b]}, d.dim)
  -- in place (programs with p.inplace): the value written is returned (a view for the narrow fill)
  elseif op == "iconst" then return a[d.fn .. "_"](a, d.k)
  elseif op == "ibin" then return a[d.fn .. "_"](a, v[d.b])
  elseif op == "iun" then return a[d.fn .. "_"](a)
  elseif op == "ifill" then return a:narrow(d.dim, d.start, d.len):fill_(d.k)
  elseif op == "iclamp" then return a:clamp_(d.k, d.k2)
  elseif op == "ichain" then   -- views (some of which copy: reshape of a strided tensor), then a write
    for _, st in ipairs(d.steps) do
      if st[1] == "transpose" then a = a:transpose(st[2], st[3])
      elseif st[1] == "reshape" then a = a:reshape(st[2])
      elseif st[1] == "narrow" then a = a:narrow(st[2], st[3], st[4])
      elseif st[1] == "unsqueeze" then a = a:unsqueeze(st[2])
      elseif st[1] == "select" then a = a:select(st[2], st[3])
      end
    end
    if d.fn == "fill" then return a:fill_(d.k) end
    return a[d.fn .. "_"](a, d.k)
  end
  error("unknown op " .. tostring(op))
end

-- The program as a Lua closure: arguments are the input tensors (then the number argument when it has one);
-- captured tensors (caps) follow the inputs in the list of values.
local function make_program(p, caps)
  local ops, nin, outs, ncap, karg = p.ops, p.nin, p.outs, p.ncap, p.karg
  local base = nin + ncap
  return function(...)
    local v = {...}
    local k
    if karg then k = v[nin + 1] v[nin + 1] = nil end
    for j = 1, ncap do v[nin + j] = caps[j] end
    for i = 1, #ops do v[base + i] = apply(ops[i], v, k) end
    local r = {}
    for i, o in ipairs(outs) do r[i] = v[o] end
    return table.unpack(r, 1, #outs)
  end
end

-- ---- the generator ----
local function pick(t) return t[R(#t)] end

local FLOAT_CONSTS = {0.5, -1.25, 2, 3.0, -0.75, 1.5, 0.1, -2}
local INT_CONSTS = {-3, -2, -1, 1, 2, 3, 5}

local function describe(p)
  local lines = {("program %d: dtype %s%s, seed %d, inputs:"):format(p.index, p.dtype, p.inplace and " (in place ops)" or "", SEED)}
  for i = 1, p.nin do lines[#lines + 1] = ("  v%d = input %s"):format(i, sstr(p.shapes[i])) end
  for j = 1, p.ncap do lines[#lines + 1] = ("  v%d = captured %s (upvalue)"):format(p.nin + j, sstr(p.shapes[p.nin + j])) end
  if p.karg then lines[#lines + 1] = ("  k = a number argument (changes every call%s)"):format(p.dynamic and "; dynamic=true" or "") end
  for i, d in ipairs(p.ops) do
    local parts = {}
    for _, k in ipairs({"fn", "a", "b", "k", "k2", "rev", "dim", "keep", "d1", "d2", "start", "len"}) do
      if d[k] ~= nil then parts[#parts + 1] = k .. "=" .. tostring(d[k]) end
    end
    if d.shape then parts[#parts + 1] = "shape=" .. sstr(d.shape) end
    if d.steps then
      local st = {}
      for _, x in ipairs(d.steps) do
        local q = {}
        for j = 2, #x do q[#q + 1] = type(x[j]) == "table" and sstr(x[j]) or tostring(x[j]) end
        st[#st + 1] = x[1] .. "(" .. table.concat(q, ",") .. ")"
      end
      parts[#parts + 1] = "views=" .. table.concat(st, ":")
    end
    local at = p.nin + p.ncap + i
    lines[#lines + 1] = ("  v%d = %s %s -> %s"):format(at, d.op, table.concat(parts, " "), sstr(p.shapes[at]))
  end
  local o = {}
  for _, k in ipairs(p.outs) do o[#o + 1] = "v" .. k end
  lines[#lines + 1] = "  return " .. table.concat(o, ", ")
  return table.concat(lines, "\n")
end

-- Tries to make one op on the program so far; returns the descriptor and its result shape, or nil.
local function try_op(p, isint, isfloat)
  local shapes = p.shapes
  local nv = #shapes
  local ai = (R() < 0.6) and nv or R(nv)
  local a = shapes[ai]
  if p.inplace and R() < 0.2 then   -- an in-place op on any value (inputs and views included)
    local r = R(7)
    if r >= 6 then   -- a chain of 1-3 views, then a write through it
      local strided = {}   -- prefer strided values: a reshape of one copies, a write to the copy must not reach it
      for j = 1, nv do if p.strided[j] then strided[#strided + 1] = j end end
      if #strided > 0 and R() < 0.5 then ai = pick(strided) a = shapes[ai] end
      local steps, sh = {}, copy(a)
      for _ = 1, R(3) do
        local k = R(5)
        if k == 1 and #sh >= 2 then
          local d1, d2 = R(#sh), R(#sh)
          steps[#steps + 1] = {"transpose", d1, d2}
          sh[d1], sh[d2] = sh[d2], sh[d1]
        elseif k == 2 then
          local n = numel(sh)
          local divs = {}
          for q = 1, n do if n % q == 0 then divs[#divs + 1] = q end end
          local q = pick(divs)
          steps[#steps + 1] = {"reshape", {q, n // q}}
          sh = {q, n // q}
        elseif k == 3 and #sh >= 1 then
          local dim = R(#sh)
          local len = R(sh[dim])
          local start = R(sh[dim] - len + 1)
          steps[#steps + 1] = {"narrow", dim, start, len}
          sh[dim] = len
        elseif k == 4 and #sh >= 1 and #sh <= 3 then
          local dim = R(#sh + 1)
          steps[#steps + 1] = {"unsqueeze", dim}
          table.insert(sh, dim, 1)
        elseif k == 5 and #sh >= 2 then
          local dim = R(#sh)
          steps[#steps + 1] = {"select", dim, R(sh[dim])}
          table.remove(sh, dim)
        end
      end
      local fn = pick({"fill", "add", "mul"})
      return {op = "ichain", a = ai, steps = steps, fn = fn, k = isint and pick(INT_CONSTS) or pick(FLOAT_CONSTS)}, sh
    elseif r == 1 then
      return {op = "iconst", fn = pick({"add", "sub", "mul"}), a = ai, k = isint and pick(INT_CONSTS) or pick(FLOAT_CONSTS)}, copy(a)
    elseif r == 2 then
      local cands = {}
      for j = 1, nv do
        local s = bshape(a, shapes[j])
        if s and sstr(s) == sstr(a) then cands[#cands + 1] = j end
      end
      return {op = "ibin", fn = pick(isint and {"add", "sub", "mul"} or {"add", "sub", "mul", "maximum"}), a = ai, b = pick(cands)}, copy(a)
    elseif r == 3 then
      return {op = "iun", fn = pick(isint and {"neg", "abs"} or {"neg", "abs", "tanh", "relu", "sigmoid"}), a = ai}, copy(a)
    elseif r == 4 then
      if #a == 0 then return nil end
      local dim = R(#a)
      local len = R(a[dim])
      local start = R(a[dim] - len + 1)
      local s = copy(a)
      s[dim] = len
      return {op = "ifill", a = ai, dim = dim, start = start, len = len, k = isint and pick(INT_CONSTS) or pick(FLOAT_CONSTS)}, s
    else
      local lo = isint and R(-3, 0) or pick({-1, -0.5, 0})
      return {op = "iclamp", a = ai, k = lo, k2 = lo + (isint and R(1, 4) or pick({0.5, 1, 2}))}, copy(a)
    end
  end
  if p.karg and R() < 0.08 then return {op = "karg", a = ai}, copy(a) end
  if p.brk and R() < 0.05 then return {op = "brk", a = ai, int = isint or nil}, copy(a) end
  local kind = R(100)
  if kind <= 22 then   -- binary with another value
    local cands = {}
    for j = 1, nv do if bshape(a, shapes[j]) then cands[#cands + 1] = j end end
    local bj = pick(cands)
    local fns = isint and {"add", "sub", "mul", "maximum"} or {"add", "sub", "mul", "div", "maximum"}
    return {op = "bin", fn = pick(fns), a = ai, b = bj}, bshape(a, shapes[bj])
  elseif kind <= 34 then   -- with a Lua number
    local fns = isint and {"add", "sub", "mul"} or {"add", "sub", "mul", "div"}
    local fn = pick(fns)
    local k = isint and pick(INT_CONSTS) or pick(FLOAT_CONSTS)
    local rev = fn ~= "div" and R() < 0.4 or nil
    return {op = "binc", fn = fn, a = ai, k = k, rev = rev}, copy(a)
  elseif kind <= 46 then   -- unary
    local fns = isint and {"neg", "abs", "relu"} or {"neg", "abs", "expc", "tanh", "sigmoid", "relu", "sqrtabs"}
    return {op = "un", fn = pick(fns), a = ai}, copy(a)
  elseif kind <= 52 then   -- where with a comparison
    if R() < 0.5 or isint then
      local cands = {}
      for j = 1, nv do if bshape(a, shapes[j]) then cands[#cands + 1] = j end end
      local bj = pick(cands)
      return {op = "where", a = ai, b = bj}, bshape(a, shapes[bj])
    end
    return {op = "wherec", a = ai, k = pick({0, 0.5, -0.25}), k2 = pick({0.5, -1, 0.1})}, copy(a)
  elseif kind <= 60 then   -- reduction over a dim
    if #a == 0 then return nil end
    local fns = isint and {"sum", "max"} or {"sum", "mean", "max"}
    local dim = R(#a)
    if R() < 0.3 then dim = dim - #a - 1 end   -- negative dims too
    local keep = R() < 0.7
    local s = {}
    local pd = dim < 0 and dim + #a + 1 or dim
    for i = 1, #a do if i ~= pd then s[#s + 1] = a[i] elseif keep then s[#s + 1] = 1 end end
    return {op = "red", fn = pick(fns), a = ai, dim = dim, keep = keep}, s
  elseif kind <= 64 then   -- softmax
    if isint or #a == 0 then return nil end
    local dim = R(#a)
    if R() < 0.3 then dim = -1 end
    return {op = "softmax", a = ai, dim = dim}, copy(a)
  elseif kind <= 72 then   -- matmul
    if #a < 2 then return nil end
    local cands = {}
    for j = 1, nv do
      local s = matmul_shape(a, shapes[j])
      if s and numel(s) <= MAXNUMEL then cands[#cands + 1] = j end
    end
    if #cands > 0 and R() < 0.6 then
      local bj = pick(cands)
      return {op = "matmul", a = ai, b = bj}, matmul_shape(a, shapes[bj])
    end
    local s = copy(a)
    s[#s] = a[#a - 1]
    return {op = "mmT", a = ai}, s
  elseif kind <= 77 then   -- transpose
    if #a < 2 then return nil end
    local d1, d2 = R(#a), R(#a)
    local s = copy(a)
    s[d1], s[d2] = a[d2], a[d1]
    return {op = "transpose", a = ai, d1 = d1, d2 = d2}, s
  elseif kind <= 82 then   -- reshape
    local n = numel(a)
    local s
    local r = R(3)
    if r == 1 then s = {n}
    else
      local divs = {}
      for k = 1, n do if n % k == 0 then divs[#divs + 1] = k end end
      local k = pick(divs)
      s = (r == 2) and {k, n // k} or {n // k, 1, k}
    end
    if #s > 4 then return nil end
    local shape = copy(s)
    if R() < 0.3 then shape[R(#shape)] = -1 end
    return {op = "reshape", a = ai, shape = shape}, s
  elseif kind <= 86 then   -- unsqueeze / squeeze
    local ones = {}
    for i = 1, #a do if a[i] == 1 then ones[#ones + 1] = i end end
    if #ones > 0 and R() < 0.5 then
      local d = pick(ones)
      local s = {}
      for i = 1, #a do if i ~= d then s[#s + 1] = a[i] end end
      return {op = "squeeze", a = ai, dim = d}, s
    end
    if #a >= 4 then return nil end
    local d = R(#a + 1)
    local s = {}
    for i = 1, d - 1 do s[#s + 1] = a[i] end
    s[#s + 1] = 1
    for i = d, #a do s[#s + 1] = a[i] end
    return {op = "unsqueeze", a = ai, dim = d}, s
  elseif kind <= 92 then   -- narrow
    if #a == 0 then return nil end
    local dim = R(#a)
    local len = R(a[dim])
    local start = R(a[dim] - len + 1)
    local s = copy(a)
    s[dim] = len
    return {op = "narrow", a = ai, dim = dim, start = start, len = len}, s
  else   -- cat with a value of the same shape except at dim
    if #a == 0 then return nil end
    local dim = R(#a)
    local cands = {}
    for j = 1, nv do
      local b = shapes[j]
      local ok = #b == #a
      for i = 1, #a do if ok and i ~= dim and a[i] ~= b[i] then ok = false end end
      if ok then cands[#cands + 1] = j end
    end
    local bj = pick(cands)   -- a itself is always a candidate
    local s = copy(a)
    s[dim] = a[dim] + shapes[bj][dim]
    return {op = "cat", a = ai, b = bj, dim = dim}, s
  end
end

local function gen_program(index, mode)
  local r = R(100)
  local dtype = r <= 55 and "float32" or r <= 75 and "float64" or r <= 87 and "int64" or r <= 94 and "float16" or "bfloat16"
  local isint = dtype == "int64"
  local p = {index = index, dtype = dtype, shapes = {}, ops = {}, inplace = mode == "inplace" or R() < 0.4, strided = {},
    mode = mode or "mixed", ncap = 0}
  if mode == "features" then   -- captured tensors, a number argument (dynamic or not), graph breaks
    p.ncap = R(0, 2)
    p.karg = R() < 0.7
    p.dynamic = p.karg and R() < 0.5
    p.brk = R() < 0.6
    p.inplace = R() < (p.brk and 0.2 or 0.5)   -- writes through views with breaks run eagerly (and say so)
  end
  -- inputs: shapes broadcastable to a base shape (some dims 1, some leading dims dropped)
  local nd = R(4)
  local base = {}
  for i = 1, nd do base[i] = R(5) end
  p.nin = R(3)
  for i = 1, p.nin do
    local s = {}
    local drop = (R() < 0.3) and R(0, nd - 1) or 0
    for d = drop + 1, nd do s[#s + 1] = (R() < 0.25) and 1 or base[d] end
    p.shapes[i] = s
  end
  for j = 1, p.ncap do   -- captured tensors: shapes like the inputs'
    p.shapes[p.nin + j] = copy(p.shapes[R(p.nin)])
  end
  local nops = R(5, 40)
  local tries = 0
  while #p.ops < nops and tries < 2000 do
    tries = tries + 1
    local d, s = try_op(p, isint, not isint)
    if d and s and numel(s) <= MAXNUMEL and #s <= 4 then
      p.ops[#p.ops + 1] = d
      p.shapes[#p.shapes + 1] = s
      p.strided[#p.shapes] = d.op == "transpose" or d.op == "narrow" or d.op == "ichain" or nil
    end
  end
  local nv = #p.shapes
  p.outs = {nv}
  if R() < 0.5 and nv > p.nin + p.ncap + 1 then p.outs[2] = R(p.nin + p.ncap + 1, nv - 1) end
  if R() < 0.2 then p.outs[#p.outs + 1] = R(nv) end   -- sometimes an input or a repeat
  return p
end

local function make_inputs(p, first, count)
  local args = {}
  for i = first or 1, (first or 1) + (count or p.nin) - 1 do
    local s = p.shapes[i]
    if p.dtype == "int64" then args[i] = grace.randint(-5, 6, s)
    elseif p.dtype == "float16" or p.dtype == "bfloat16" then args[i] = grace.randn(s):to(p.dtype)
    else args[i] = grace.randn(s, {dtype = p.dtype}) end
  end
  if first then   -- a list from 1
    local r = {}
    for i = first, first + count - 1 do r[#r + 1] = args[i] end
    return r
  end
  return args
end

local RTOL = {float32 = 1e-5, float64 = 1e-12, float16 = 1e-2, bfloat16 = 1e-2}

-- Compares a compiled result with the eager one; returns ok, bitwise, message
local function compare(got, want, dtype)
  if not grace.is_tensor(got) then return false, false, "compiled result is a " .. type(got) .. ", not a tensor" end
  if got.dtype ~= want.dtype then return false, false, ("dtype %s, eager %s"):format(got.dtype, want.dtype) end
  if sstr(got:size()) ~= sstr(want:size()) then
    return false, false, ("shape %s, eager %s"):format(sstr(got:size()), sstr(want:size()))
  end
  local g, w = got:reshape(-1):tolist(), want:reshape(-1):tolist()
  local bitwise, worst, where = true, 0, nil
  local rtol = RTOL[dtype]
  for i = 1, #w do
    local x, y = g[i], w[i]
    if x ~= y and not (x ~= x and y ~= y) then
      bitwise = false
      if dtype == "int64" then return false, false, ("element %d: %s, eager %s"):format(i, tostring(x), tostring(y)) end
      local bad = (x ~= x) or (y ~= y) or math.abs(x - y) > 1e-6 * (rtol / 1e-5) + rtol * math.abs(y)
      if x == math.huge or x == -math.huge or y == math.huge or y == -math.huge then bad = true end
      if bad then return false, false, ("element %d: %.17g, eager %.17g"):format(i, x, y) end
      local rel = math.abs(x - y) / math.max(math.abs(y), 1e-30)
      if rel > worst then worst, where = rel, i end
    end
  end
  if not bitwise then return true, false, ("close but not bitwise equal (worst relative difference %.3g at element %d)"):format(worst, where) end
  return true, true, nil
end

local KVALUES = {float = {0.5, -1.5, 2.0, 0.25, 3.0, -0.75, 1.0, 1.25}, int = {2, -1, 3, 1, -2, 4, 0, 5}}

local t0 = grace.clock()
local counts = {}
local compiled_n, not_bitwise, gen_errors, inplace_n, inplace_eager, feature_n = 0, 0, 0, 0, 0, 0
local version_bad, version_first = 0, nil

-- Runs program p compiled and eagerly on `ncalls` sets of fresh inputs; returns the problems found.
local function run_program(p)
  local index = p.index
  -- compiled and eager closures: the same program over separate copies of the captured tensors
  local caps_c = make_inputs(p, p.nin + 1, p.ncap)
  local caps_e = {}
  for j, c in ipairs(caps_c) do caps_e[j] = c:clone() end
  local prog_c, prog_e = make_program(p, caps_c), make_program(p, caps_e)
  local f = grace.compile(prog_c, p.dynamic and {dynamic = true} or nil)
  local problems = {}
  local ncalls = p.mode == "features" and 4 or 3
  for call = 1, ncalls do
    if call > 1 and p.ncap > 0 and R() < 0.5 then   -- captured tensors changed in place between calls
      local fresh = make_inputs(p, p.nin + 1, p.ncap)
      for j = 1, p.ncap do caps_c[j]:copy_(fresh[j]) caps_e[j]:copy_(fresh[j]) end
    end
    local args = make_inputs(p)
    local eargs = {}
    for i, a in ipairs(args) do eargs[i] = a:clone() end
    local nargs = p.nin
    if p.karg then
      nargs = nargs + 1
      local kv = KVALUES[p.dtype == "int64" and "int" or "float"]
      args[nargs], eargs[nargs] = kv[(index + call) % #kv + 1], kv[(index + call) % #kv + 1]
    end
    local watched_c, watched_e = {}, {}   -- inputs, then captured tensors
    for i = 1, p.nin do watched_c[#watched_c + 1], watched_e[#watched_e + 1] = args[i], eargs[i] end
    for j = 1, p.ncap do watched_c[#watched_c + 1], watched_e[#watched_e + 1] = caps_c[j], caps_e[j] end
    local ev, cv = {}, {}
    for i = 1, #watched_c do ev[i], cv[i] = watched_e[i]:version(), watched_c[i]:version() end
    local eok, eres = pcall(function() return table.pack(prog_e(table.unpack(eargs, 1, nargs))) end)
    if not eok then
      problems[#problems + 1] = "the generator made a program that fails eagerly: " .. tostring(eres)
      gen_errors = gen_errors + 1
      break
    end
    local cok, cres = pcall(function() return table.pack(f(table.unpack(args, 1, nargs))) end)
    if not cok then
      problems[#problems + 1] = ("call %d: the compiled function raised: %s"):format(call, tostring(cres))
      break
    end
    if cres.n ~= eres.n then
      problems[#problems + 1] = ("call %d: %d results, eager %d"):format(call, cres.n, eres.n)
    end
    for k = 1, eres.n do
      local ok, bitwise, msg = compare(cres[k], eres[k], p.dtype)
      if not ok then problems[#problems + 1] = ("call %d, result %d: %s"):format(call, k, msg)
      elseif not bitwise then
        not_bitwise = not_bitwise + 1
        tap.diag(("program %d call %d result %d: %s"):format(index, call, k, msg))
        if not p.told then p.told = true tap.diag(describe(p)) end
      end
    end
    -- the inputs and captured tensors afterwards (programs with in-place ops write them), and their versions
    for i = 1, #watched_c do
      local what = i <= p.nin and ("input %d"):format(i) or ("captured tensor %d"):format(i - p.nin)
      local ok, _, msg = compare(watched_c[i], watched_e[i], p.dtype)
      if not ok then problems[#problems + 1] = ("call %d: %s afterwards: %s"):format(call, what, msg) end
      local dc, de = watched_c[i]:version() - cv[i], watched_e[i]:version() - ev[i]
      if dc ~= de and #problems == 0 then   -- counted apart from (and only without) wrong values
        version_bad = version_bad + 1
        version_first = version_first or ("program %d call %d %s: version +%d, eager +%d\n%s"):format(index, call, what, dc, de, describe(p))
      end
    end
  end
  local st = f:stats()
  local ir, why = f:ir()
  if #problems == 0 and p.mode ~= "features" then
    if not ir then
      if p.inplace then   -- some writes through views are documented to run eagerly
        inplace_eager = inplace_eager + 1
        tap.diag(("program %d (in place ops) runs eagerly: %s"):format(index, tostring(why)))
      else problems[#problems + 1] = "did not compile: " .. tostring(why) end
    elseif st.traces ~= 1 or st.hits ~= ncalls - 1 then
      problems[#problems + 1] = ("expected 1 trace and %d hits, got %d traces, %d hits (last guard failure: %s)")
        :format(ncalls - 1, st.traces, st.hits, tostring(st.last_guard_failure))
    end
  end
  if ir then compiled_n = compiled_n + 1 end
  return problems
end

local batches = {{"mixed", NPROG}, {"inplace", NINPLACE}, {"features", NFEATURES}}
local index = 0
for _, batch in ipairs(batches) do
  for _ = 1, batch[2] do
    index = index + 1
    local p = gen_program(index, batch[1] ~= "mixed" and batch[1] or nil)
    counts[p.dtype] = (counts[p.dtype] or 0) + 1
    if p.inplace then inplace_n = inplace_n + 1 end
    if p.mode == "features" then feature_n = feature_n + 1 end
    local problems = run_program(p)
    local traits = {p.dtype}
    if p.inplace then traits[#traits + 1] = "in place" end
    if p.ncap > 0 then traits[#traits + 1] = p.ncap .. " captured" end
    if p.karg then traits[#traits + 1] = p.dynamic and "dynamic number" or "number" end
    if p.brk then traits[#traits + 1] = "breaks" end
    local name = ("program %d (%s, %d ops, %d inputs) %s and matches eager"):format(index, table.concat(traits, ", "),
      #p.ops, p.nin, (p.inplace or p.mode == "features") and "runs" or "compiles")
    if not tap.ok(#problems == 0, name) then
      tap.diag(table.concat(problems, "\n"))
      tap.diag(describe(p))
    end
  end
end

local parts = {}
for k, v in pairs(counts) do parts[#parts + 1] = k .. " " .. v end
table.sort(parts)
tap.diag(("%d programs (%s; %d with in-place ops, %d of them eager; %d with captures, numbers and breaks); %d compiled; %d results close but not bitwise equal; %.1f s")
  :format(index, table.concat(parts, ", "), inplace_n, inplace_eager, feature_n, compiled_n, not_bitwise, grace.clock() - t0))
tap.is(gen_errors, 0, "the generator only makes programs that run eagerly")
tap.ok((counts.int64 or 0) > 0 and (counts.float16 or 0) + (counts.bfloat16 or 0) > 0 and (counts.float64 or 0) > 0,
  "the programs cover float32, float64, int64 and half types")
tap.ok(inplace_n > 0 and inplace_eager < inplace_n, "programs with in-place ops were generated and most compile")
if not tap.is(version_bad, 0, "version counters of written inputs and captures bump as many times as eager") then
  tap.diag("first mismatch: " .. version_first)
end
tap.done()
