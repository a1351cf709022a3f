-- grace.nn: neural network modules (Linear, norms, activations, Dropout, Sequential, MLP, attention with a KV cache,
-- a GPT-2 style TransformerBlock, the losses as modules) and nn.init, written only against the public grace tensor
-- API, so the same code runs eagerly and under tracing, on every backend. Parameters require grad (autograd), as
-- PyTorch's nn.Parameter; modules start in training mode (module:eval() for inference: Dropout does nothing).
local grace = require "grace"

local nn = {}

local sqrt, fmt = math.sqrt, string.format

-- Errors name the caller's file:line rather than this file: a shape mistake is the script's, not ours.
-- getinfo is kept here: a sandbox (grace_lua_sandbox) loads this module, then takes `debug` from scripts.
local getinfo = debug.getinfo
local THIS = getinfo(1, "S").source
local function fail(msg)
  local level = 2
  while true do
    local info = getinfo(level, "Sl")
    if not info then break end
    if info.source ~= THIS and info.what ~= "C" and info.currentline > 0 then
      msg = info.short_src .. ":" .. info.currentline .. ": " .. msg
      break
    end
    level = level + 1
  end
  error(msg, 0)
end

local function shape_str(t)
  return "[" .. table.concat(t:size(), ", ") .. "]"
end

-- The binding's userdata is named "grace.Tensor"; anything else that quacks (a size method) is accepted too,
-- so a tracer's handles or a test double pass.
local function is_tensor(x)
  local tx = type(x)
  if tx ~= "userdata" and tx ~= "table" then return false end
  local mt = getmetatable(x)
  if type(mt) == "table" and mt.__name == "grace.Tensor" then return true end
  if tx == "table" and mt == nil then return false end
  local ok, sz = pcall(function() return x.size end)
  return ok and type(sz) == "function"
end

local function check_int(v, what, min)
  if math.type(v) ~= "integer" and not (type(v) == "number" and v == math.floor(v)) then
    fail(fmt("%s must be an integer, got %s", what, tostring(v)))
  end
  if min and v < min then fail(fmt("%s must be >= %d, got %d", what, min, v)) end
  return math.tointeger(v)
end

---------------------------------------------------------------------------------------------------------
-- Classes: a class is a table used as the metatable of its instances. Metamethods are looked up with
-- rawget, so __call/__tostring are copied into every class rather than inherited through __index.

local function class(name, parent)
  local cls = {}
  cls.__index = cls
  cls.__name = name
  cls.__call = function(self, ...) return self:forward(...) end
  cls.__tostring = function(self) return self:repr() end
  cls._class_name = name
  return setmetatable(cls, {
    __index = parent,
    __call = function(c, ...)
      local obj = setmetatable({_param_names = {}, _child_names = {}, training = true}, c)
      obj:__init(...)
      return obj
    end,
    __tostring = function() return "class " .. name end,
  })
end

-- nn.class(name, parent) lets scripts define their own modules: set __init and forward on the result.
nn.class = class
local Module = class("Module", nil)
nn.Module = Module

function Module:__init() end
function Module:forward() fail(self._class_name .. ": forward is not implemented") end

-- Registration order is the parameter order: parameters of a module first, then each child's, as PyTorch.
function Module:add_parameter(name, t)
  if rawget(self, name) == nil then table.insert(self._param_names, name) end
  if is_tensor(t) and t.is_leaf and t.dtype:find("float") then t:requires_grad_() end
  rawset(self, name, t)
  return t
end

function Module:add_module(name, m)
  if rawget(self, name) == nil then table.insert(self._child_names, name) end
  rawset(self, name, m)
  return m
end

-- fn(full_name, owner, key) for every parameter, depth first in registration order.
function Module:_walk(prefix, fn)
  for _, k in ipairs(self._param_names) do
    if rawget(self, k) ~= nil then fn(prefix .. k, self, k) end
  end
  for _, k in ipairs(self._child_names) do
    local child = rawget(self, k)
    if child ~= nil then child:_walk(prefix .. k .. ".", fn) end
  end
end

-- A flat list; a tensor shared by two modules appears once (as PyTorch).
function Module:parameters()
  local list, seen = {}, {}
  self:_walk("", function(_, owner, k)
    local t = owner[k]
    if not seen[t] then seen[t] = true; list[#list + 1] = t end
  end)
  return list
end

-- name -> tensor; the second result lists the names in parameter order (a Lua table has none).
function Module:named_parameters()
  local map, names = {}, {}
  self:_walk("", function(name, owner, k)
    map[name] = owner[k]
    names[#names + 1] = name
  end)
  return map, names
end

function Module:num_parameters()
  local n = 0
  for _, t in ipairs(self:parameters()) do n = n + t:numel() end
  return n
end

-- Casts/moves every parameter and rebinds it in its module; shared tensors stay shared.
function Module:to(...)
  local args, n = {...}, select("#", ...)
  local memo = {}
  self:_walk("", function(_, owner, k)
    local t = rawget(owner, k)
    local r = memo[t]
    if r == nil then
      r = grace.no_grad(function() return t:to(table.unpack(args, 1, n)) end)
      if r ~= t and t.requires_grad and r.dtype:find("float") then r:requires_grad_() end   -- a new leaf
      memo[t] = r
    end
    rawset(owner, k, r)
  end)
  return self
end

-- Copies tensors from a name -> tensor table (as named_parameters gives) into the parameters, with shape
-- checks; strict (the default) also requires every parameter to be present and no extra name.
function Module:load_parameters(map, strict)
  if strict == nil then strict = true end
  local own, names = self:named_parameters()
  for _, name in ipairs(names) do
    local t, src = own[name], map[name]
    if src == nil then
      if strict then fail(fmt("%s:load_parameters: missing parameter '%s'", self._class_name, name)) end
    else
      if not is_tensor(src) then src = grace.tensor(src) end
      if shape_str(src) ~= shape_str(t) then
        fail(fmt("%s:load_parameters: '%s' has shape %s, the parameter has %s",
                 self._class_name, name, shape_str(src), shape_str(t)))
      end
      grace.no_grad(function() t:copy_(src) end)
    end
  end
  if strict then
    for name in pairs(map) do
      if own[name] == nil then fail(fmt("%s:load_parameters: unexpected parameter '%s'", self._class_name, name)) end
    end
  end
  return self
end

-- Clears every parameter's gradient: set_to_none (the default) makes grad nil; false zeroes it in place. The
-- optimizers' zero_grad does the same (grace.optim is opened with grace, before this module can be required).
function Module:zero_grad(set_to_none)
  grace.optim.zero_grad(self:parameters(), set_to_none)
  return self
end

-- Training mode (the default) or not (eval): for this module and its children; Dropout reads it.
function Module:train(mode)
  if mode == nil then mode = true end
  rawset(self, "training", mode and true or false)
  for _, k in ipairs(self._child_names) do
    local child = rawget(self, k)
    if child ~= nil then child:train(mode) end
  end
  return self
end
function Module:eval() return self:train(false) end

-- PyTorch's state_dict: dotted name ("layers.1.weight") -> the parameter itself, not a copy (grace.save it, or
-- clone the entries to keep a snapshot); the second result lists the names in parameter order.
function Module:state_dict()
  return self:named_parameters()
end

local function quoted(list)
  local q = {}
  for i, k in ipairs(list) do q[i] = "'" .. k .. "'" end
  return table.concat(q, ", ")
end

-- Copies a state dict (from state_dict or grace.load) into the parameters, casting to each parameter's dtype and
-- device. Everything is checked before anything is copied, and one error lists every problem: missing and
-- unexpected keys (when strict, the default) and keys whose shape differs (always), as PyTorch's. Returns
-- {missing_keys = {...}, unexpected_keys = {...}} (names in parameter order, resp. sorted).
function Module:load_state_dict(sd, opts)
  local who = self._class_name .. ":load_state_dict"
  if type(sd) ~= "table" then fail(fmt("%s: expected a table of name -> tensor, got %s", who, type(sd))) end
  local strict = true
  if type(opts) == "table" then
    if opts.strict ~= nil then strict = opts.strict and true or false end
  elseif type(opts) == "boolean" then
    strict = opts
  elseif opts ~= nil then
    fail(fmt("%s: expected options {strict=true|false}, got %s", who, type(opts)))
  end
  local own, names = self:named_parameters()
  local missing, unexpected, wrong = {}, {}, {}
  for _, name in ipairs(names) do
    local src = sd[name]
    if src == nil then
      missing[#missing + 1] = name
    elseif not is_tensor(src) then
      wrong[#wrong + 1] = fmt("'%s' is a %s, not a tensor", name, type(src))
    elseif shape_str(src) ~= shape_str(own[name]) then
      wrong[#wrong + 1] = fmt("size mismatch for '%s': the state dict has shape %s, the parameter %s", name,
                              shape_str(src), shape_str(own[name]))
    end
  end
  for k in pairs(sd) do
    if own[k] == nil then unexpected[#unexpected + 1] = tostring(k) end
  end
  table.sort(unexpected)
  local errs = {}
  if strict and #missing > 0 then errs[#errs + 1] = "missing keys: " .. quoted(missing) end
  if strict and #unexpected > 0 then errs[#errs + 1] = "unexpected keys: " .. quoted(unexpected) end
  for _, w in ipairs(wrong) do errs[#errs + 1] = w end
  if #errs > 0 then fail(fmt("%s: nothing was loaded: %s", who, table.concat(errs, "; "))) end
  grace.no_grad(function()   -- loading is no op autograd records (the sources may be parameters too)
    for _, name in ipairs(names) do
      if sd[name] ~= nil then own[name]:copy_(sd[name]) end
    end
  end)
  return {missing_keys = missing, unexpected_keys = unexpected}
end

function Module:extra_repr() return "" end

-- PyTorch's layout: "Name(extra)" or "Name(\n  extra\n  (child): repr\n)".
function Module:repr()
  local lines = {}
  local extra = self:extra_repr()
  if extra ~= "" then
    for line in (extra .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line end
  end
  local nextra = #lines
  for _, k in ipairs(self._child_names) do
    local child = rawget(self, k)
    if child ~= nil then
      lines[#lines + 1] = "(" .. k .. "): " .. child:repr():gsub("\n", "\n  ")
    end
  end
  local s = self._class_name .. "("
  if #lines == 1 and nextra == 1 then
    s = s .. lines[1]
  elseif #lines > 0 then
    s = s .. "\n  " .. table.concat(lines, "\n  ") .. "\n"
  end
  return s .. ")"
end

---------------------------------------------------------------------------------------------------------
-- Helpers for initialisation: both draw from the grace generator, so grace.manual_seed fixes them.

local function uniform(shape, bound)
  return grace.rand(shape) * (2 * bound) - bound
end

local function check_features(name, x, want, what)
  if not is_tensor(x) then fail(fmt("%s: expected a tensor input, got %s", name, type(x))) end
  if x:dim() < 1 or x:size(-1) ~= want then
    fail(fmt("%s: input of shape %s has %s features in its last dim, expected %d (%s)", name, shape_str(x),
             x:dim() < 1 and "no" or tostring(x:size(-1)), want, what))
  end
end

-- Applies the optional {dtype=, device=} of a constructor after the (float32, default device) init, so
-- the random stream does not depend on them.
local function place(m, opts)
  if opts and opts.device then m:to(opts.device) end
  if opts and opts.dtype then m:to(opts.dtype) end
  return m
end

---------------------------------------------------------------------------------------------------------
-- Dropout(p=0.5): in training mode, each element zeroed with probability p and the rest scaled by 1 / (1 - p);
-- in eval mode the identity.
local Dropout = class("Dropout", Module)
nn.Dropout = Dropout

function Dropout:__init(p)
  p = p or 0.5
  if type(p) ~= "number" or p < 0 or p > 1 then fail(fmt("Dropout: p must be a number in [0, 1], got %s", tostring(p))) end
  self.p = p
end

function Dropout:forward(x)
  if not self.training or self.p == 0 then return x end
  if self.p == 1 then return x * 0 end
  local keep = grace.rand_like(x):ge(self.p)
  return grace.where(keep, x * (1 / (1 - self.p)), 0)
end

function Dropout:extra_repr() return fmt("p=%g", self.p) end

---------------------------------------------------------------------------------------------------------
-- Linear: y = x W^T + b, W [out, in]; PyTorch's default init: U(-1/sqrt(in), 1/sqrt(in)) for W and b.
local Linear = class("Linear", Module)
nn.Linear = Linear

function Linear:__init(in_features, out_features, opts)
  self.in_features = check_int(in_features, "Linear: in_features", 1)
  self.out_features = check_int(out_features, "Linear: out_features", 1)
  local bias = true
  if opts and opts.bias ~= nil then bias = opts.bias and true or false end
  local bound = 1 / sqrt(self.in_features)
  self:add_parameter("weight", uniform({self.out_features, self.in_features}, bound))
  if bias then self:add_parameter("bias", uniform({self.out_features}, bound)) end
  place(self, opts)
end

function Linear:forward(x)
  check_features("Linear", x, self.in_features, "weight " .. shape_str(self.weight))
  local y = x:matmul(self.weight:t())
  if self.bias then y = y + self.bias end
  return y
end

function Linear:extra_repr()
  return fmt("in_features=%d, out_features=%d, bias=%s", self.in_features, self.out_features,
             tostring(self.bias ~= nil))
end

---------------------------------------------------------------------------------------------------------
-- Embedding: rows of a [num_embeddings, dim] table selected by 1-based ids; N(0, 1) init as PyTorch.
local Embedding = class("Embedding", Module)
nn.Embedding = Embedding

function Embedding:__init(num_embeddings, embedding_dim, opts)
  self.num_embeddings = check_int(num_embeddings, "Embedding: num_embeddings", 1)
  self.embedding_dim = check_int(embedding_dim, "Embedding: embedding_dim", 1)
  self:add_parameter("weight", grace.randn({self.num_embeddings, self.embedding_dim}))
  place(self, opts)
end

function Embedding:forward(ids)
  if type(ids) == "table" and not is_tensor(ids) then ids = grace.tensor(ids) end
  return grace.embedding(ids, self.weight)
end

function Embedding:extra_repr()
  return fmt("%d, %d", self.num_embeddings, self.embedding_dim)
end

---------------------------------------------------------------------------------------------------------
-- LayerNorm / RMSNorm over the last dim, with a learnable scale (and shift for LayerNorm).
local LayerNorm = class("LayerNorm", Module)
nn.LayerNorm = LayerNorm

function LayerNorm:__init(d, eps, opts)
  if type(eps) == "table" then eps, opts = nil, eps end
  self.normalized_shape = check_int(d, "LayerNorm: normalized_shape", 1)
  self.eps = eps or 1e-5
  self:add_parameter("weight", grace.ones({self.normalized_shape}))
  self:add_parameter("bias", grace.zeros({self.normalized_shape}))
  place(self, opts)
end

function LayerNorm:forward(x)
  check_features("LayerNorm", x, self.normalized_shape, "normalized_shape")
  return grace.layer_norm(x, self.weight, self.bias, self.eps)
end

function LayerNorm:extra_repr()
  return fmt("(%d,), eps=%g, elementwise_affine=true", self.normalized_shape, self.eps)
end

local RMSNorm = class("RMSNorm", Module)
nn.RMSNorm = RMSNorm

function RMSNorm:__init(d, eps, opts)
  if type(eps) == "table" then eps, opts = nil, eps end
  self.normalized_shape = check_int(d, "RMSNorm: normalized_shape", 1)
  self.eps = eps or 1e-6
  self:add_parameter("weight", grace.ones({self.normalized_shape}))
  place(self, opts)
end

function RMSNorm:forward(x)
  check_features("RMSNorm", x, self.normalized_shape, "normalized_shape")
  return grace.rms_norm(x, self.weight, self.eps)
end

function RMSNorm:extra_repr()
  return fmt("(%d,), eps=%g, elementwise_affine=true", self.normalized_shape, self.eps)
end

---------------------------------------------------------------------------------------------------------
-- Activations (no parameters).
local ReLU = class("ReLU", Module)
nn.ReLU = ReLU
function ReLU:forward(x) return x:relu() end

local GELU = class("GELU", Module)
nn.GELU = GELU
function GELU:__init(approximate)
  approximate = approximate or "none"
  if approximate ~= "none" and approximate ~= "tanh" then
    fail(fmt("GELU: approximate must be 'none' or 'tanh', got '%s'", tostring(approximate)))
  end
  self.approximate = approximate
end
function GELU:forward(x) return x:gelu(self.approximate) end
function GELU:extra_repr() return fmt("approximate='%s'", self.approximate) end

local SiLU = class("SiLU", Module)
nn.SiLU = SiLU
function SiLU:forward(x) return x:silu() end

-- "gelu" is the exact (erf) GELU as PyTorch's default; "gelu_tanh" is GPT-2's approximation.
local function activation(a)
  if type(a) == "table" and getmetatable(a) and a.forward then return a end
  if a == nil or a == "gelu" then return GELU("none") end
  if a == "gelu_tanh" or a == "gelu_new" then return GELU("tanh") end
  if a == "relu" then return ReLU() end
  if a == "silu" or a == "swish" then return SiLU() end
  fail(fmt("unknown activation '%s' (expected gelu, gelu_tanh, relu, silu or a module)", tostring(a)))
end
nn.activation = activation

---------------------------------------------------------------------------------------------------------
-- Sequential: children named "1", "2", ... (1-based like everything else); also indexable as seq[i].
local Sequential = class("Sequential", Module)
nn.Sequential = Sequential

function Sequential:__init(...)
  self.n = 0
  local mods = {...}
  if select("#", ...) == 1 and type(mods[1]) == "table" and getmetatable(mods[1]) == nil then mods = mods[1] end
  for _, m in ipairs(mods) do self:add(m) end
end

function Sequential:add(m)
  if type(m) ~= "table" or type(m.forward) ~= "function" then
    fail(fmt("Sequential: element %d is not a module (%s)", self.n + 1, type(m)))
  end
  self.n = self.n + 1
  self:add_module(tostring(self.n), m)
  self[self.n] = m
  return self
end

-- Only the input flows through, as PyTorch: extra arguments (a KV cache) belong to one module, not all.
function Sequential:forward(x)
  for i = 1, self.n do x = self[i](x) end
  return x
end

Sequential.__len = function(self) return self.n end

---------------------------------------------------------------------------------------------------------
-- MLP: Linear(d, hidden), activation, Linear(hidden, d).
local MLP = class("MLP", Module)
nn.MLP = MLP

function MLP:__init(d, hidden, opts)
  opts = opts or {}
  local lopts = {bias = opts.bias}
  self:add_module("fc1", Linear(d, hidden, lopts))
  self:add_module("act", activation(opts.activation))
  self:add_module("fc2", Linear(hidden, opts.out or d, lopts))
  place(self, opts)
end

function MLP:forward(x)
  return self.fc2(self.act(self.fc1(x)))
end

---------------------------------------------------------------------------------------------------------
-- MultiheadAttention on batch-first [B, T, D] input, heads split by reshape/transpose, optional causal
-- mask and key/value caches [B, heads, max_seq, D/heads] written in place at positions pos .. pos+T-1.
local MHA = class("MultiheadAttention", Module)
nn.MultiheadAttention = MHA

function MHA:__init(d, heads, opts)
  opts = opts or {}
  self.embed_dim = check_int(d, "MultiheadAttention: embed_dim", 1)
  self.num_heads = check_int(heads, "MultiheadAttention: num_heads", 1)
  if self.embed_dim % self.num_heads ~= 0 then
    fail(fmt("MultiheadAttention: embed_dim %d is not divisible by num_heads %d", self.embed_dim, self.num_heads))
  end
  self.head_dim = self.embed_dim // self.num_heads
  self.causal = opts.causal and true or false
  local lopts = {bias = opts.bias}
  self:add_module("q_proj", Linear(d, d, lopts))
  self:add_module("k_proj", Linear(d, d, lopts))
  self:add_module("v_proj", Linear(d, d, lopts))
  self:add_module("out_proj", Linear(d, d, lopts))
  place(self, opts)
end

-- Zeroed caches for this module: returns cache_k, cache_v of shape [batch, heads, max_seq, head_dim].
function MHA:new_cache(batch, max_seq, opts)
  opts = opts or {}
  local w = self.q_proj.weight
  local o = {dtype = opts.dtype or w.dtype, device = opts.device or w.device}
  local shape = {batch, self.num_heads, max_seq, self.head_dim}
  return grace.zeros(shape, o), grace.zeros(shape, o)
end

function MHA:forward(x, opts)
  if not is_tensor(x) then fail("MultiheadAttention: expected a tensor input, got " .. type(x)) end
  if x:dim() ~= 3 or x:size(3) ~= self.embed_dim then
    fail(fmt("MultiheadAttention: input of shape %s, expected [batch, seq, %d]", shape_str(x), self.embed_dim))
  end
  -- the batch size is not read (-1 in the reshapes): a compiled caller keeps it symbolic
  local T, D = x:size(2), self.embed_dim
  local H, hd = self.num_heads, self.head_dim
  local function heads(t) return t:reshape({-1, T, H, hd}):transpose(2, 3) end   -- [B, H, T, hd]
  local q = heads(self.q_proj(x))
  local k = heads(self.k_proj(x))
  local v = heads(self.v_proj(x))

  local pos = 1
  if opts and (opts.cache_k ~= nil or opts.cache_v ~= nil) then
    local ck, cv = opts.cache_k, opts.cache_v
    if not (is_tensor(ck) and is_tensor(cv)) then
      fail("MultiheadAttention: cache_k and cache_v must both be tensors")
    end
    pos = check_int(opts.pos or 1, "MultiheadAttention: pos", 1)
    local B = x:size(1)
    for _, c in ipairs({ck, cv}) do
      if c:dim() ~= 4 or c:size(1) ~= B or c:size(2) ~= H or c:size(4) ~= hd then
        fail(fmt("MultiheadAttention: cache of shape %s, expected [%d, %d, max_seq, %d] for input %s",
                 shape_str(c), B, H, hd, shape_str(x)))
      end
    end
    if ck:size(3) ~= cv:size(3) then
      fail(fmt("MultiheadAttention: cache_k %s and cache_v %s differ", shape_str(ck), shape_str(cv)))
    end
    if pos + T - 1 > ck:size(3) then
      fail(fmt("MultiheadAttention: positions %d..%d do not fit a cache of shape %s", pos, pos + T - 1, shape_str(ck)))
    end
    grace.no_grad(function()   -- the cache is for inference: its keys and values carry no gradient
      ck:narrow(3, pos, T):copy_(k)
      cv:narrow(3, pos, T):copy_(v)
    end)
    k = ck:narrow(3, 1, pos + T - 1)
    v = cv:narrow(3, 1, pos + T - 1)
  elseif opts and opts.pos ~= nil and opts.pos ~= 1 then
    fail("MultiheadAttention: pos given without cache_k/cache_v")
  end
  local S = pos + T - 1

  local scores = q:matmul(k:transpose(-2, -1)) * (1 / sqrt(hd))       -- [B, H, T, S]
  -- query i sits at absolute position pos+i-1, so key j is in its future when j - i >= pos; with one
  -- query (decode) nothing is masked.
  if self.causal and T > 1 then
    local mask = grace.ones({T, S}, {device = x.device}):triu(pos):bool()
    scores = scores:masked_fill(mask, -math.huge)
  end
  local out = scores:softmax(-1):matmul(v)                                 -- [B, H, T, hd]
  out = out:transpose(2, 3):reshape({-1, T, D})
  return self.out_proj(out)
end

function MHA:extra_repr()
  return fmt("embed_dim=%d, num_heads=%d, causal=%s", self.embed_dim, self.num_heads, tostring(self.causal))
end

---------------------------------------------------------------------------------------------------------
-- TransformerBlock, GPT-2 pre-norm: h = x + attn(ln_1(x)); y = h + mlp(ln_2(h)), MLP with tanh GELU.
local Block = class("TransformerBlock", Module)
nn.TransformerBlock = Block

function Block:__init(d, heads, opts)
  opts = opts or {}
  local causal = opts.causal
  if causal == nil then causal = true end
  local ratio = opts.mlp_ratio or 4
  local eps = opts.eps or 1e-5
  self:add_module("ln_1", LayerNorm(d, eps))
  self:add_module("attn", MHA(d, heads, {causal = causal, bias = opts.bias}))
  self:add_module("ln_2", LayerNorm(d, eps))
  local hidden = math.tointeger(ratio * d) or fail(fmt("TransformerBlock: mlp_ratio %s * %d is not an integer", ratio, d))
  self:add_module("mlp", MLP(d, hidden, {activation = opts.activation or "gelu_tanh", bias = opts.bias}))
  place(self, opts)
end

-- opts: the attention's {cache_k=, cache_v=, pos=}.
function Block:forward(x, opts)
  local h = x + self.attn(self.ln_1(x), opts)
  return h + self.mlp(self.ln_2(h))
end

function Block:new_cache(batch, max_seq, opts)
  return self.attn:new_cache(batch, max_seq, opts)
end

---------------------------------------------------------------------------------------------------------
-- GPT(vocab, max_seq [, {d=64, heads=4, layers=2}]): a small decoder-only language model to train from scratch:
-- token and position embeddings, causal TransformerBlocks, a final LayerNorm and a linear head; every matrix
-- (embeddings included) drawn from N(0, 0.02) as GPT-2's. forward(ids [B, T] of 1-based ids, T <= max_seq) gives
-- the logits [B, T, vocab].
local GPT = class("GPT", Module)
nn.GPT = GPT

function GPT:__init(vocab, max_seq, opts)
  opts = opts or {}
  self.vocab = check_int(vocab, "GPT: vocab", 1)
  self.max_seq = check_int(max_seq, "GPT: max_seq", 1)
  local d = check_int(opts.d or 64, "GPT: d", 1)
  local heads = check_int(opts.heads or 4, "GPT: heads", 1)
  local layers = check_int(opts.layers or 2, "GPT: layers", 1)
  self:add_module("tok", Embedding(vocab, d))
  self:add_module("pos", Embedding(max_seq, d))
  local blocks = {}
  for i = 1, layers do blocks[i] = Block(d, heads, {causal = true}) end
  self:add_module("blocks", Sequential(blocks))
  self:add_module("ln_f", LayerNorm(d))
  self:add_module("head", Linear(d, vocab))
  for _, p in ipairs(self:parameters()) do
    if p:dim() == 2 then nn.init.normal_(p, 0, 0.02) end
  end
  place(self, opts)
end

function GPT:forward(ids)
  if not is_tensor(ids) or ids:dim() ~= 2 then
    fail(fmt("GPT: expected ids of shape [batch, seq], got %s", is_tensor(ids) and shape_str(ids) or type(ids)))
  end
  local T = ids:size(2)
  if T > self.max_seq then fail(fmt("GPT: a sequence of %d ids, longer than max_seq %d", T, self.max_seq)) end
  local h = self.tok(ids) + self.pos(grace.arange(1, T + 1, {device = ids.device}))
  return self.head(self.ln_f(self.blocks(h)))
end

function GPT:extra_repr() return fmt("vocab=%d, max_seq=%d", self.vocab, self.max_seq) end

---------------------------------------------------------------------------------------------------------
-- The losses as modules: loss = nn.CrossEntropyLoss(opts); loss(input, target) is grace.cross_entropy(input,
-- target, opts), and so on.
local function loss_module(name, fn)
  local L = class(name, Module)
  function L:__init(opts) self.opts = opts end
  function L:forward(input, target) return grace[fn](input, target, self.opts) end
  nn[name] = L
end
loss_module("CrossEntropyLoss", "cross_entropy")
loss_module("NLLLoss", "nll_loss")
loss_module("MSELoss", "mse_loss")
loss_module("BCEWithLogitsLoss", "binary_cross_entropy_with_logits")

---------------------------------------------------------------------------------------------------------
-- nn.init: fills a tensor in place (without recording it for autograd) and returns it, as torch.nn.init. fan_in
-- and fan_out are a weight's sizes(2) * receptive field and sizes(1) * receptive field ([out, in, ...]).
local init = {}
nn.init = init

local function fans(t)
  if t:dim() < 2 then fail(fmt("nn.init: fan in and fan out need a tensor of 2 or more dims, got shape %s", shape_str(t))) end
  local rf = 1
  for d = 3, t:dim() do rf = rf * t:size(d) end
  return t:size(2) * rf, t:size(1) * rf
end

local function fill(t, f)
  if not is_tensor(t) then fail("nn.init: expected a tensor, got " .. type(t)) end
  grace.no_grad(function() f(t) end)
  return t
end

local gains = {linear = 1, sigmoid = 1, tanh = 5 / 3, relu = sqrt(2)}
local function gain_of(nonlinearity, a)
  if nonlinearity == "leaky_relu" then return sqrt(2 / (1 + (a or 0.01) ^ 2)) end
  local g = gains[nonlinearity or "leaky_relu"]
  if not g then fail(fmt("nn.init: unknown nonlinearity '%s'", tostring(nonlinearity))) end
  return g
end
function init.calculate_gain(nonlinearity, a) return gain_of(nonlinearity, a) end

function init.uniform_(t, a, b) return fill(t, function(x) x:uniform_(a or 0, b or 1) end) end
function init.normal_(t, mean, std) return fill(t, function(x) x:normal_(mean or 0, std or 1) end) end
function init.constant_(t, v) return fill(t, function(x) x:fill_(v) end) end
function init.zeros_(t) return init.constant_(t, 0) end
function init.ones_(t) return init.constant_(t, 1) end
function init.xavier_uniform_(t, gain)
  local fi, fo = fans(t)
  local b = (gain or 1) * sqrt(6 / (fi + fo))
  return init.uniform_(t, -b, b)
end
function init.xavier_normal_(t, gain)
  local fi, fo = fans(t)
  return init.normal_(t, 0, (gain or 1) * sqrt(2 / (fi + fo)))
end
-- kaiming_*(t [, a=0] [, mode="fan_in"] [, nonlinearity="leaky_relu"])
local function kaiming_std(t, a, mode, nonlinearity)
  local fi, fo = fans(t)
  local fan = (mode or "fan_in") == "fan_in" and fi or fo
  return gain_of(nonlinearity or "leaky_relu", a or 0) / sqrt(fan)
end
function init.kaiming_uniform_(t, a, mode, nonlinearity)
  local b = sqrt(3) * kaiming_std(t, a, mode, nonlinearity)
  return init.uniform_(t, -b, b)
end
function init.kaiming_normal_(t, a, mode, nonlinearity)
  return init.normal_(t, 0, kaiming_std(t, a, mode, nonlinearity))
end

return nn
