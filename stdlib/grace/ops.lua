-- grace.ops: tensor ops composed from the op table's ops (dot, norm, median, flip, roll, unique, allclose, equal,
-- multinomial, uniform_, normal_). Composed here rather than added as kernels because each is what it is made of:
-- the pieces already run on the CPU and on CUDA (sort and topk fall back to the host for long rows), so these
-- trace, fuse and run on both devices, and random draws use grace's counter-based Philox generator, so the CPU and
-- the GPU draw the same numbers. The C binding (lua/lgrace.c) runs this chunk with the module table when grace
-- opens and it adds each function to grace.Tensor (methods) and to the module where the name is free.
local opened = ...
local grace = type(opened) == "table" and opened or require "grace"   -- require "grace.NAME" passes a name
local T = grace.Tensor

local function floating(dt) return dt == "float32" or dt == "float64" or dt == "float16" or dt == "bfloat16" end

local function check_float(op, x)
  if not floating(x.dtype) then
    error(("%s: expected a floating point tensor, got %s"):format(op, x.dtype), 3)
  end
end

-- a dim (1-based, negative from the end) as 1..nd, or an error naming op (level: that of error, for the user's line)
local function norm_dim(op, d, nd, level)
  level = level or 4
  if math.type(d) ~= "integer" then error(("%s: a dim must be an integer, got %s"):format(op, tostring(d)), level) end
  local r = d < 0 and d + nd + 1 or d
  if d == 0 or r < 1 or r > math.max(nd, 1) then
    error(("%s: dim %d out of range for a tensor with %d dims (dims are 1-based)"):format(op, d, nd), level)
  end
  return r
end

-- a dim or a table of dims as a sorted list of distinct 1..nd
local function dim_list(op, dims, nd)
  if type(dims) == "number" then dims = {dims} end
  if type(dims) ~= "table" then error(("%s: expected a dim or a table of dims, got %s"):format(op, type(dims)), 3) end
  local out, seen = {}, {}
  for _, d in ipairs(dims) do
    local r = norm_dim(op, d, nd)
    if seen[r] then error(("%s: dim %d appears more than once"):format(op, d), 3) end
    seen[r] = true
    out[#out + 1] = r
  end
  table.sort(out)
  return out
end

local ops = {}

-- x:dot(y): the inner product of two 1-D tensors of one dtype and length, sum(x * y).
function ops.dot(x, y)
  if not grace.is_tensor(x) or not grace.is_tensor(y) then error("dot: expected two tensors", 2) end
  if x:dim() ~= 1 or y:dim() ~= 1 then
    error(("dot: expected 1-D tensors, got shapes %s and %s"):format(tostring(x.shape), tostring(y.shape)), 2)
  end
  if x:numel() ~= y:numel() then
    error(("dot: inconsistent tensor size, expected tensors of one length, got %d and %d"):format(x:numel(),
      y:numel()), 2)
  end
  if x.dtype ~= y.dtype then
    error(("dot: expected both vectors to have the same dtype, got %s and %s"):format(x.dtype, y.dtype), 2)
  end
  local r = (x * y):sum()
  -- sum of integers gives int64; PyTorch's dot keeps the operands' dtype
  return r.dtype == x.dtype and r or r:cast(x.dtype)
end

-- max of x over dims (a list of 1..nd; nil: all), keeping them when keepdim
local function amax(x, dims, keepdim, smallest)
  local f = smallest and T.min or T.max
  if not dims then
    local r = f(x)
    if keepdim then
      local ones = {}
      for i = 1, x:dim() do ones[i] = 1 end
      r = r:reshape(ones)
    end
    return r
  end
  for i = #dims, 1, -1 do x = f(x, dims[i], keepdim) end
  return x
end

-- x:norm([p=2] [, dims] [, keepdim]): the p-norm over all elements or over dims, as torch.norm: p a number
-- (0 counts the nonzero elements), "fro" (= 2), math.huge or -math.huge (max/min of |x|).
function ops.norm(x, p, dims, keepdim)
  if not grace.is_tensor(x) then error("norm: expected a tensor", 2) end
  check_float("norm", x)
  if type(dims) == "boolean" and keepdim == nil then dims, keepdim = nil, dims end
  if p == nil or p == "fro" then p = 2 end
  if type(p) == "string" and (p == "inf" or p == "-inf") then p = p == "inf" and math.huge or -math.huge end
  if type(p) ~= "number" then error(("norm: p must be a number, \"fro\" or math.huge, got %s"):format(tostring(p)), 2) end
  if keepdim ~= nil and type(keepdim) ~= "boolean" then error("norm: keepdim must be a boolean", 2) end
  keepdim = keepdim or false
  local dl = dims ~= nil and dim_list("norm", dims, x:dim()) or nil
  local sumd = dl
  if dl and #dl == 0 then dl, sumd = nil, nil end
  local a = x:abs()
  if p == math.huge or p == -math.huge then return amax(a, dl, keepdim, p < 0) end
  if p == 0 then return a:ne(0):sum(sumd, keepdim):cast(x.dtype) end
  if p == 1 then return a:sum(sumd, keepdim) end
  if p == 2 then return (x * x):sum(sumd, keepdim):sqrt() end
  return a:pow(p):sum(sumd, keepdim):pow(1 / p)
end

-- x:median(): the lower median of all elements (0-d); x:median(dim [, keepdim]): values and 1-based indices of the
-- lower median along dim, as torch.median (a NaN in a row makes that row's median NaN). Made of sort, so it runs
-- wherever sort does.
function ops.median(x, dim, keepdim)
  if not grace.is_tensor(x) then error("median: expected a tensor", 2) end
  if dim == nil then
    local n = x:numel()
    if n == 0 then error("median: a tensor with no elements has no median (use median(dim) on non-empty dims)", 2) end
    local v = x:reshape(-1):sort()
    local r = v[(n - 1) // 2 + 1]
    if floating(x.dtype) then r = grace.where(x:ne(x):any(), 0/0, r) end
    return r
  end
  local nd = math.max(x:dim(), 1)
  local d = norm_dim("median", dim, nd, 3)
  if x:dim() == 0 then x = x:reshape({1}) end
  local n = x:size(d)
  if n == 0 then error(("median: dim %d has size 0"):format(dim), 2) end
  local v, i = x:sort(d)
  local k = (n - 1) // 2 + 1
  local vals, idx = v:narrow(d, k, 1), i:narrow(d, k, 1)
  if floating(x.dtype) then
    -- torch.median propagates NaN: such a row gives NaN and the index of its first NaN
    local isnan = x:ne(x)
    local any = isnan:any(d):unsqueeze(d)
    local _, first = isnan:int():max(d, true)
    vals = grace.where(any, 0/0, vals)
    idx = grace.where(any, first, idx)
  end
  if not keepdim then vals, idx = vals:squeeze(d), idx:squeeze(d) end
  return vals, idx
end

-- x:flip(dims): the elements in reverse order along each of dims (a dim or a table), a new tensor.
function ops.flip(x, dims)
  if not grace.is_tensor(x) then error("flip: expected a tensor", 2) end
  if dims == nil then error("flip: dims are required (a dim or a table of dims)", 2) end
  local dl = dim_list("flip", dims, x:dim())
  local r = x
  for _, d in ipairs(dl) do
    local n = x:size(d)
    r = r:index_select(d, grace.arange(n, 0, -1, {device = x.device}))
  end
  return r == x and x:clone() or r
end

-- x:roll(shifts [, dims]): elements shifted by shifts along dims, those past the end coming back at the start, as
-- torch.roll; without dims the tensor is rolled flattened and given its shape back.
function ops.roll(x, shifts, dims)
  if not grace.is_tensor(x) then error("roll: expected a tensor", 2) end
  if type(shifts) == "number" then shifts = {shifts} end
  if type(shifts) ~= "table" then error("roll: shifts must be a number or a table of numbers", 2) end
  if dims == nil then
    if #shifts ~= 1 then error("roll: without dims, shifts must be one number", 2) end
    return ops.roll(x:reshape(-1), shifts, 1):reshape(x.shape)
  end
  if type(dims) == "number" then dims = {dims} end
  if type(dims) ~= "table" or #dims ~= #shifts then
    error(("roll: shifts and dims must have the same length, got %d and %s"):format(#shifts,
      type(dims) == "table" and #dims or type(dims)), 2)
  end
  local r = x
  for k, dim in ipairs(dims) do
    local d = norm_dim("roll", dim, x:dim(), 3)
    local n = x:size(d)
    if math.type(shifts[k]) ~= "integer" then error("roll: shifts must be integers", 2) end
    local s = n > 0 and shifts[k] % n or 0
    if s ~= 0 then r = grace.cat({r:narrow(d, n - s + 1, s), r:narrow(d, 1, n - s)}, d) end
  end
  return r == x and x:clone() or r
end

-- x:unique([sorted=true] [, return_inverse=false] [, return_counts=false]) or x:unique{sorted=, return_inverse=,
-- return_counts=}: the distinct elements in ascending order (1-D), then, as asked, the 1-based position of each
-- element of x among them (x's shape) and how often each occurs (int64), as torch.unique without dim. The number
-- of distinct elements is read on the host (a graph break in a compiled function).
function ops.unique(x, sorted, return_inverse, return_counts)
  if not grace.is_tensor(x) then error("unique: expected a tensor", 2) end
  if type(sorted) == "table" then
    local o = sorted
    for k in pairs(o) do
      if k ~= "sorted" and k ~= "return_inverse" and k ~= "return_counts" then
        error(("unique: unknown option '%s' (sorted, return_inverse, return_counts)"):format(tostring(k)), 2)
      end
    end
    return_inverse, return_counts = o.return_inverse, o.return_counts
  end
  local dev, n = x.device, x:numel()
  local flat = x:reshape(-1)
  local long = {dtype = "int64", device = dev}
  if n == 0 then
    local r = {flat:clone()}
    if return_inverse then r[#r + 1] = grace.zeros(x.shape, long) end
    if return_counts then r[#r + 1] = grace.zeros({0}, long) end
    return table.unpack(r)
  end
  local v, perm = flat:sort()
  local yes = grace.ones({1}, {dtype = "bool", device = dev})
  local first, last = yes, yes   -- first (last) element of a run of equal values
  if n > 1 then
    local ne = v:narrow(1, 2, n - 1):ne(v:narrow(1, 1, n - 1))
    first, last = grace.cat({yes, ne}), grace.cat({ne, yes})
  end
  local group = first:cumsum(1)                       -- 1-based group of each sorted element
  local k = group[n]:item()
  -- the groups' firsts land in 1..k; the other elements in a spare slot k + 1, dropped
  local out = grace.zeros({k + 1}, {dtype = x.dtype, device = dev})
    :scatter(1, grace.where(first, group, k + 1), v):narrow(1, 1, k)
  local r = {out}
  if return_inverse then
    r[#r + 1] = grace.zeros({n}, long):scatter(1, perm, group):reshape(x.shape)
  end
  if return_counts then
    local ends = grace.zeros({k + 1}, long)
      :scatter(1, grace.where(last, group, k + 1), grace.arange(1, n + 1, {device = dev})):narrow(1, 1, k)
    local starts = k > 1 and grace.cat({grace.zeros({1}, long), ends:narrow(1, 1, k - 1)}) or grace.zeros({1}, long)
    r[#r + 1] = ends - starts
  end
  return table.unpack(r)
end

-- isclose as torch.isclose: |x - y| <= atol + rtol * |y|, or equal (infinities), or both NaN with equal_nan
local function isclose(x, y, rtol, atol, equal_nan)
  rtol, atol = rtol or 1e-5, atol or 1e-8
  if type(rtol) ~= "number" or type(atol) ~= "number" then error("allclose: rtol and atol must be numbers", 3) end
  local close = x:eq(y)
  if floating(x.dtype) or floating(y.dtype) or not grace.is_tensor(y) then
    local yabs = grace.is_tensor(y) and y:abs() or math.abs(y)
    close = close:logical_or((x - y):abs():le(yabs * rtol + atol))
    if equal_nan then close = close:logical_or(x:ne(x):logical_and(grace.is_tensor(y) and y:ne(y) or y ~= y)) end
  end
  return close
end

-- grace.allclose(x, y [, rtol=1e-5] [, atol=1e-8] [, equal_nan=false]): a Lua boolean, whether every element (x and
-- y broadcast) is close, as torch.allclose. Reading the answer on the host is a graph break in a compiled function.
function ops.allclose(x, y, rtol, atol, equal_nan)
  if not grace.is_tensor(x) then error("allclose: expected a tensor", 2) end
  return isclose(x, y, rtol, atol, equal_nan):all():item()
end

-- grace.equal(x, y): a Lua boolean, true when x and y have the same shape and equal elements (torch.equal).
function ops.equal(x, y)
  if not grace.is_tensor(x) or not grace.is_tensor(y) then error("equal: expected two tensors", 2) end
  if x.shape ~= y.shape then return false end
  if x:numel() == 0 then return true end
  return x:eq(y):all():item()
end

-- x:multinomial(num_samples [, replacement=false]) or x:multinomial(num_samples, {replacement=, check=true}):
-- 1-based category indices drawn from the rows of x (1-D or 2-D, non-negative weights, not necessarily summing to
-- 1), as torch.multinomial. With replacement: u * total against the cumulative sums; without, and for one
-- sample either way: the largest weight / Exp(1) keys (the exponential-races sampler; one sample is their argmax,
-- no cumulative sum or sort). Both draw with grace.rand, so a seed gives the same draws on every device.
-- check = false skips the host read that validates the weights (invalid weights then give unspecified indices),
-- so a compiled function samples without a graph break.
function ops.multinomial(x, num_samples, replacement)
  if not grace.is_tensor(x) then error("multinomial: expected a tensor", 2) end
  local check = true
  if type(replacement) == "table" then
    for k in pairs(replacement) do
      if k ~= "replacement" and k ~= "check" then
        error(("multinomial: unknown option '%s' (replacement, check)"):format(tostring(k)), 2)
      end
    end
    check = replacement.check ~= false
    replacement = replacement.replacement
  end
  check_float("multinomial", x)
  if x:dim() ~= 1 and x:dim() ~= 2 then
    error(("multinomial: prob_dist must be 1 or 2 dim, got shape %s"):format(tostring(x.shape)), 2)
  end
  if math.type(num_samples) ~= "integer" or num_samples <= 0 then
    error("multinomial: num_samples must be a positive integer, got " .. tostring(num_samples), 2)
  end
  if replacement ~= nil and type(replacement) ~= "boolean" then error("multinomial: replacement must be a boolean", 2) end
  local p = x:dim() == 1 and x:unsqueeze(1) or x
  if p.dtype == "float16" or p.dtype == "bfloat16" then p = p:float() end
  local b, c = p:size(1), p:size(2)
  if c == 0 then error("multinomial: the distribution has no categories", 2) end
  if not replacement and num_samples > c then
    error(("multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement (%d > %d)"):format(
      num_samples, c), 2)
  end
  if check then
    -- one host read for every check of the values (a graph break in a compiled function)
    local bad = p:lt(0):logical_or(p:ne(p)):logical_or(p:eq(math.huge)):any()
    local rows = p:gt(0):sum(2)
    bad = bad:logical_or(rows:eq(0):any())
    if not replacement then bad = bad:logical_or(rows:lt(num_samples):any()) end
    if bad:item() then
      error("multinomial: invalid distribution: weights must be finite and non-negative with a positive sum" ..
        (replacement and "" or ", and without replacement at least num_samples of them positive"), 2)
    end
  end
  local opts = {dtype = p.dtype, device = p.device}
  local idx
  if num_samples == 1 then
    idx = (p / grace.rand({b, c}, opts):log():neg()):argmax(2, true)
  elseif replacement then
    local cdf = p:cumsum(2)
    local u = grace.rand({b, num_samples, 1}, opts) * cdf:narrow(2, c, 1):unsqueeze(2)
    -- the category whose interval [cdf[j-1], cdf[j]) holds u: zero weights have empty intervals
    idx = (cdf:unsqueeze(2):le(u):sum(3) + 1):clamp(nil, c)
  else
    local keys = p / grace.rand({b, c}, opts):log():neg()
    local _
    _, idx = keys:topk(num_samples, 2)
  end
  return x:dim() == 1 and idx:squeeze(1) or idx
end

-- x:uniform_([from=0] [, to=1]) and x:normal_([mean=0] [, std=1]): x filled in place from grace.rand / grace.randn.
function ops.uniform_(x, from, to)
  if not grace.is_tensor(x) then error("uniform_: expected a tensor", 2) end
  check_float("uniform_", x)
  from, to = from or 0, to or 1
  if type(from) ~= "number" or type(to) ~= "number" then error("uniform_: from and to must be numbers", 2) end
  if from > to then error(("uniform_: expects from <= to, got from=%g > to=%g"):format(from, to), 2) end
  return x:copy_(grace.rand_like(x) * (to - from) + from)
end

function ops.normal_(x, mean, std)
  if not grace.is_tensor(x) then error("normal_: expected a tensor", 2) end
  check_float("normal_", x)
  mean, std = mean or 0, std or 1
  if type(mean) ~= "number" or type(std) ~= "number" then error("normal_: mean and std must be numbers", 2) end
  if std < 0 then error(("normal_: expects std >= 0, got %g"):format(std), 2) end
  return x:copy_(grace.randn_like(x) * std + mean)
end

for name, fn in pairs(ops) do
  T[name] = fn
  if rawget(grace, name) == nil then grace[name] = fn end
end
return ops
