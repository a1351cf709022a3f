-- grace.help: the one-line documentation of every function of the module and method of grace.Tensor, printed by
-- the REPL's help() (grace.help). This table is the one copy: tests/lua/test_help.lua checks that every function
-- of grace and grace.Tensor has a line here and that every name here is documented in docs/lua_api.md.
local opened = ...
local grace = type(opened) == "table" and opened or require "grace"   -- require "grace.NAME" passes a name

-- {names, line}: a line may document several names that share a signature
local entries = {
  -- creation
  {{"tensor"}, "grace.tensor(data [, opts]): a tensor from nested tables or a number (integers -> int64, floats -> float32)"},
  {{"zeros", "ones", "empty"}, "grace.zeros(shape [, opts]): a new tensor of shape (a table or numbers); opts {dtype=, device=}"},
  {{"full"}, "grace.full(shape, value [, opts]): a tensor filled with value (dtype follows the value)"},
  {{"arange"}, "grace.arange([start,] end [, step] [, opts]): start, start+step, ... below end"},
  {{"linspace"}, "grace.linspace(start, end, steps [, opts]): steps evenly spaced values from start to end"},
  {{"eye"}, "grace.eye(n [, m] [, opts]): the identity matrix"},
  {{"rand", "randn"}, "grace.rand(shape [, opts]) / grace.randn: uniform [0, 1) / standard normal (Philox, seeded by manual_seed)"},
  {{"randint"}, "grace.randint(low, high, shape [, opts]): random integers in [low, high)"},
  {{"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like"},
   "grace.zeros_like(x [, opts]): a new tensor with x's shape, dtype and device"},
  {{"is_tensor"}, "grace.is_tensor(v): whether v is a tensor"},
  {{"manual_seed"}, "grace.manual_seed(n): seeds the random numbers (the same on every backend)"},
  {{"get_rng_state", "set_rng_state"}, "grace.get_rng_state() -> seed, offset / grace.set_rng_state(seed, offset): save and restore the generator"},
  {{"fromfile"}, "grace.fromfile(path, dtype, shape [, offset_bytes]): a CPU tensor from raw little-endian elements"},
  {{"save"}, "grace.save(path, tensor_or_table [, {metadata=, format=}]): writes .safetensors, .npy or .npz (by extension)"},
  {{"load"}, "grace.load(path [, {device=, format=}]): reads .safetensors, .npy or .npz (a table of tensors, or a tensor for .npy)"},
  -- devices
  {{"cuda_available"}, "grace.cuda_available(): whether a CUDA device is usable"},
  {{"backend"}, "grace.backend(): the backends, in one line"},
  {{"device"}, "grace.device([name]): the default device (and sets it)"},
  {{"synchronize"}, "grace.synchronize(): waits for the device's queued work"},
  {{"device_stats"}, "grace.device_stats(): device memory and kernel compilation counts"},
  {{"reset_peak_memory"}, "grace.reset_peak_memory(): peak_allocated starts again from what is allocated"},
  {{"empty_cache"}, "grace.empty_cache(): gives cached device memory back to the driver"},
  {{"device_time"}, "grace.device_time([device,] fn, ...): ms, device: the device time of one call of fn"},
  {{"set_printoptions"}, "grace.set_printoptions{precision=, threshold=, edgeitems=, linewidth=, sci_mode=, profile=}: as PyTorch's"},
  {{"help"}, "help([fn or name]): an overview, or the line of a function (help(grace.matmul), help(\"matmul\"))"},
  -- facts and conversion
  {{"size"}, "x:size([d]): the size object {2, 3} (prints, compares with ==, indexes as a table) or the size of dim d"},
  {{"stride"}, "x:stride([d]): the strides in elements, or that of dim d"},
  {{"dim"}, "x:dim(): the number of dims"},
  {{"numel"}, "x:numel(): the number of elements"},
  {{"is_contiguous"}, "x:is_contiguous(): whether x is laid out in row-major order without gaps"},
  {{"item"}, "x:item(): the one element as a Lua number (boolean for bool)"},
  {{"tolist"}, "x:tolist(): nested Lua tables of the elements"},
  {{"version"}, "x:version(): the in-place version counter"},
  {{"type"}, "x:type([dtype]): the dtype name, or x:to(dtype)"},
  {{"to"}, "x:to(device_or_dtype [, dtype]): x on another device and/or in another dtype (x itself if nothing changes)"},
  {{"float", "double", "half", "bfloat16", "long", "int", "byte", "bool"}, "x:float(): x as float32 (double: float64, ...)"},
  {{"cpu", "cuda"}, "x:cpu() / x:cuda(): x on that device"},
  {{"clone"}, "x:clone(): a copy"},
  {{"contiguous"}, "x:contiguous(): x, or a row-major copy"},
  {{"cast"}, "x:cast(dtype): always a new tensor of dtype"},
  -- pointwise
  {{"add", "sub"}, "x:add(y [, alpha]): x + alpha * y, broadcast (sub: x - alpha * y)"},
  {{"mul", "div", "remainder", "pow", "maximum", "minimum"}, "x:mul(y): elementwise with NumPy broadcasting (div is true division)"},
  {{"neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "silu", "erf",
    "floor", "ceil", "round", "sign", "logical_not"}, "x:exp(): elementwise (x:exp_() in place)"},
  {{"gelu"}, "x:gelu([approximate]): GELU, approximate \"tanh\" or \"none\""},
  {{"clamp"}, "x:clamp(min, max): elementwise clamp (either may be nil)"},
  {{"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"}, "x:eq(y): elementwise comparison, bool"},
  {{"where"}, "grace.where(cond, a, b): a where cond, else b"},
  {{"masked_fill"}, "x:masked_fill(mask, value): x with value where mask"},
  {{"allclose"}, "grace.allclose(x, y [, rtol=1e-5] [, atol=1e-8] [, equal_nan]): a boolean, |x - y| <= atol + rtol * |y| everywhere"},
  {{"equal"}, "grace.equal(x, y): a boolean, same shape and equal elements"},
  -- reductions and scans
  {{"sum", "mean", "prod"}, "x:sum([dims] [, keepdim]): over dims (a dim or a table; none: all)"},
  {{"max", "min"}, "x:max([dim] [, keepdim]): the maximum, or values and 1-based indices along dim; x:max(y) elementwise"},
  {{"argmax", "argmin"}, "x:argmax([dim] [, keepdim]): 1-based index of the maximum"},
  {{"var", "std"}, "x:var([dims] [, unbiased=true] [, keepdim]): variance (std: standard deviation)"},
  {{"logsumexp"}, "x:logsumexp(dims [, keepdim]): log(sum(exp(x))), stably"},
  {{"all", "any"}, "x:all([dims]): whether all (any) elements are true"},
  {{"cumsum"}, "x:cumsum(dim): cumulative sum"},
  {{"softmax", "log_softmax"}, "x:softmax(dim): softmax along dim"},
  {{"topk"}, "x:topk(k [, dim=-1] [, largest=true]): values, 1-based indices"},
  {{"sort"}, "x:sort([dim=-1] [, descending=false]): values, 1-based indices"},
  {{"norm"}, "x:norm([p=2] [, dims] [, keepdim]): p-norm (p a number, \"fro\", math.huge or -math.huge)"},
  {{"median"}, "x:median([dim] [, keepdim]): the lower median; with dim values and 1-based indices"},
  {{"unique"}, "x:unique([sorted] [, return_inverse] [, return_counts]): sorted distinct values [, 1-based inverse] [, counts]"},
  -- linear algebra
  {{"matmul"}, "x:matmul(y): matrix product with NumPy semantics (batched, broadcast, vectors)"},
  {{"mm"}, "x:mm(y): 2-D matrix product"},
  {{"t"}, "x:t(): 2-D transpose"},
  {{"dot"}, "x:dot(y): inner product of two 1-D tensors"},
  -- shape
  {{"reshape", "view"}, "x:reshape(shape): the same elements in shape (one -1 allowed; view never copies)"},
  {{"transpose"}, "x:transpose(d1, d2): dims d1 and d2 swapped (a view)"},
  {{"permute"}, "x:permute(d1, d2, ...): dims reordered (a view)"},
  {{"flatten"}, "x:flatten([start=1] [, end=-1]): dims start..end as one"},
  {{"squeeze", "unsqueeze"}, "x:squeeze([dim]): size-1 dims removed (unsqueeze(dim): one inserted)"},
  {{"expand"}, "x:expand(shape): broadcast view (-1 keeps a size)"},
  {{"narrow"}, "x:narrow(dim, start, length): a slice along dim (a view)"},
  {{"select"}, "x:select(dim, i): index i of dim, the dim removed (x[i] for dim 1)"},
  {{"split", "chunk"}, "x:split(size [, dim=1]): a table of views (chunk(n [, dim]): n pieces)"},
  {{"cat", "stack"}, "grace.cat(list [, dim=1]): tensors joined along dim (stack: along a new dim)"},
  {{"index_select", "gather"}, "x:index_select(dim, index): elements at 1-based indices along dim"},
  {{"masked_select"}, "x:masked_select(mask): the elements where mask (broadcast with x) is true, as a 1-d tensor"},
  {{"nonzero"}, "x:nonzero(): int64 [n, x:dim()] of the 1-based positions of the nonzero elements"},
  {{"index_put_"}, "x:index_put_({idx, ...}, values [, accumulate]): writes values at index tensors or a bool mask"},
  {{"scatter"}, "x:scatter(dim, index, src): a copy of x with src written at index along dim"},
  {{"slice_scatter"}, "grace.slice_scatter(base, src, ...): base with a slice replaced by src (what x[i] = v traces to)"},
  {{"triu", "tril"}, "x:triu([k=0]): the upper (lower) triangle"},
  {{"rep", "repeat"}, "x:rep(2, 3): x tiled (PyTorch's repeat)"},
  {{"flip"}, "x:flip(dims): elements reversed along dims"},
  {{"roll"}, "x:roll(shifts [, dims]): elements shifted cyclically (flattened without dims)"},
  -- in place
  {{"copy_", "fill_", "zero_"}, "x:copy_(src): in place (fill_(v), zero_())"},
  {{"index_copy_"}, "x:index_copy_(dim, index, src): rows of src written at 1-based index, in place"},
  {{"masked_fill_", "clamp_"}, "x:masked_fill_(mask, v): in place forms"},
  {{"uniform_", "normal_"}, "x:uniform_([from=0] [, to=1]): filled in place from uniform (normal_([mean=0] [, std=1]))"},
  {{"multinomial"}, "x:multinomial(n [, replacement=false | {replacement=, check=true}]): 1-based category indices drawn from weights x (1-D or 2-D)"},
  -- nn
  {{"layer_norm"}, "grace.layer_norm(x, weight, bias [, eps=1e-5]): layer normalisation over the last dim"},
  {{"rms_norm"}, "grace.rms_norm(x, weight [, eps=1e-6]): RMS normalisation over the last dim"},
  {{"embedding"}, "grace.embedding(ids, weight): rows of weight at 1-based ids"},
  {{"attention"}, "grace.attention(q, k, v [, {mask=, scale=}]): scaled dot-product attention"},
  -- autograd
  {{"backward"}, "y:backward([grad]): gradients of y summed into the grad of every leaf that requires grad"},
  {{"requires_grad_"}, "x:requires_grad_([flag=true]): x (a leaf) records ops for autograd; x.requires_grad reads it"},
  {{"detach"}, "x:detach(): a view of x's storage that does not require grad"},
  {{"grad"}, "grace.grad(outputs, inputs [, grad_outputs]): the gradients of inputs, leaving their grad alone"},
  {{"no_grad", "enable_grad"}, "grace.no_grad(fn, ...): fn(...) with autograd's recording off (enable_grad: on)"},
  {{"is_grad_enabled", "set_grad_enabled"}, "grace.is_grad_enabled(): whether ops are recorded (set_grad_enabled(flag))"},
  -- losses
  {{"cross_entropy"}, "grace.cross_entropy(input, target [, {ignore_index=, label_smoothing=, reduction=}]): log_softmax + nll"},
  {{"nll_loss"}, "grace.nll_loss(logp, target [, {ignore_index=, reduction=}]): mean of -logp at the 1-based targets"},
  {{"mse_loss"}, "grace.mse_loss(input, target [, {reduction=}]): mean squared error"},
  {{"binary_cross_entropy_with_logits"}, "grace.binary_cross_entropy_with_logits(x, y [, {pos_weight=, reduction=}])"},
  -- compiling
  {{"compile"}, "grace.compile(fn [, opts]): a callable that traces fn into grace's IR and runs the compiled program"},
  {{"cond"}, "grace.cond(pred, then_fn, else_fn, ...): then_fn(...) or else_fn(...) by a 0-d pred; one region when compiled"},
  {{"while_loop"}, "grace.while_loop(cond_fn, body_fn, state [, {max_iters=}]): body_fn on the state while cond_fn holds"},
  {{"explain"}, "grace.explain(fn, ...): prints the partitions, breaks, placement and guards of a trace of fn"},
  {{"eager"}, "grace.eager(fn): runs fn outside the trace"},
  {{"report"}, "grace.report(f): the launch strategy and timings of compiled function f's device programs"},
  {{"graphs"}, "grace.graphs([mode]): CUDA graph strategy: auto, off, eager, copy, indirect"},
  {{"regions"}, "grace.regions([mode]): cond/while_loop lowering on CUDA: auto, host, nodes, pred"},
  {{"matmul_backend"}, "grace.matmul_backend([mode]): device matmuls by auto, grace or cublaslt"},
  {{"norm_prologue"}, "grace.norm_prologue([on]): device norms read only by GEMVs computed inside them"},
  {{"clock"}, "grace.clock(): a wall clock in seconds"},
  {{"isatty"}, "grace.isatty([stream=\"stdout\"]): whether stdout (stderr, stdin) is a terminal"},
}

local line = {}
for _, e in ipairs(entries) do
  for _, n in ipairs(e[1]) do line[n] = e[2] end
end

-- the name under which fn is in the module or the methods table
local function name_of(fn)
  for _, t in ipairs({grace, grace.Tensor}) do
    for k, v in pairs(t) do
      if v == fn and line[k] then return k end
    end
  end
  for _, t in ipairs({grace, grace.Tensor}) do
    for k, v in pairs(t) do if v == fn then return k end end
  end
end

-- the line of name: NAME_ of a pointwise op is its in-place form
local function doc(name)
  if line[name] then return line[name] end
  local base = type(name) == "string" and name:match("^(.+)_$")
  if base and line[base] and grace.Tensor[base] then return ("x:%s(...): %s in place"):format(name, base) end
end

local M = {entries = entries, doc = doc}

function M.help(what)
  if what == nil then
    print("grace " .. grace.version .. ": tensors on the CPU and CUDA, a Torch7-style Lua API (1-based dims and indices).")
    print("  x = grace.randn(2, 3); y = x:matmul(x:t()):softmax(-1); print(y, y.shape)")
    print("  f = grace.compile(fn): trace fn once and run it compiled; grace.explain(fn, ...) says how")
    print("help(grace.NAME) or help(\"NAME\") gives a function's line; the full reference is docs/lua_api.md.")
    local names = {}
    for k, v in pairs(grace) do if type(v) == "function" and line[k] then names[#names + 1] = k end end
    table.sort(names)
    local row = "functions:"
    for _, n in ipairs(names) do
      if #row + #n + 1 > 100 then print(row) row = "  " end
      row = row .. " " .. n
    end
    print(row)
    return
  end
  local name = type(what) == "string" and what or name_of(what)
  local d = name and doc(name)
  if not d then
    print(("help: no documentation for %s (help() lists the functions)"):format(tostring(name or what)))
    return
  end
  print(d)
end

grace.help = M.help
return M
