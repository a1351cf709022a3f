-- run.lua: the grace side of the benchmark suite (issue 8). For each workload (mlp, eos, st, gpt2_decode
-- in fp32 and bf16; one module each in this folder) it builds weights and a pool of 8 inputs (read from the
-- files bench/torch/workloads.py writes, or seeded random numbers), checks the compiled output against the
-- eager one and, when the files hold PyTorch's outputs, against PyTorch (a training step, which changes its
-- weights, on the losses of 8 steps from its initial state), then times every mode: latency per
-- call with a synchronize after each call (median; the measured mode first settles its launch choice), throughput
-- without one (total / calls, one synchronize at the end), the first call (trace + compile for compiled modes),
-- the device span of one call (events, grace.device_time, median of a separate pass), kernels per call and the
-- peak device memory of the mode.
-- Last, each compiled mode's first call in a fresh process (this script again, with --first-call-only),
-- with an empty kernel cache (cold) and with the cache that run left (warm). Prints a table, writes JSON.
-- usage: grace bench/workloads/run.lua [--device cuda|cpu|auto] [--only mlp,eos,...] [--iters N]
--          [--warmup N] [--settle N] [--json out.json] [--weights DIR] [--small] [--modes eager,compiled]
--          [--device-time-calls N] [--fresh compiled,full|none] [--fresh-timeout S] [--fresh-budget S]
--        grace bench/workloads/run.lua --first-call-only VARIANT --mode MODE [--device ...] [--weights DIR]
--          [--small]   (one fresh-process measurement: prints one line "FIRST_CALL {...}"; the kernel
--          cache is wherever GRACE_CACHE_DIR points)
-- A workload name selects all its variants (gpt2_decode = gpt2_decode_fp32 + gpt2_decode_bf16).
-- Exit status 1 when a correctness check failed or a workload raised an error: the error is recorded and
-- printed, the other workloads and modes still run, and timings are still taken and written.

local HERE = (arg and arg[0] or "bench/workloads/run.lua"):match("^(.*)/[^/]*$") or "."
local WORKLOADS = {"mlp", "eos", "st", "gpt2_decode", "cpu_input", "kv_inplace", "branch", "early_exit",
                   "greedy_loop", "train_step"}
local NPOOL = 8
-- Inference, as the PyTorch side runs under torch.no_grad(): nn's parameters require grad, and recording
-- autograd's nodes in the eager modes would time (and keep memory for) a backward that never comes. The training
-- step (train_step) turns grad mode on inside its own function.
if grace.set_grad_enabled then grace.set_grad_enabled(false) end

-- The modes timed. opts is grace.compile's options table; nil runs the Lua function eagerly. graphs is the
-- launch strategy of the compiled function's device programs (grace.graphs): the ablation of issue 8, no
-- graphs / graphs with input copies / graphs with parameter indirection / the same with cuBLASLt's nodes
-- re-pointed per call (node updates) / chosen by measurement.
local MODES = {
  {name = "eager"},
  {name = "compiled", opts = {}, graphs = "off"},
  {name = "graph_copy", opts = {}, graphs = "copy"},
  {name = "graph_indirect", opts = {}, graphs = "indirect"},
  {name = "graph_update", opts = {}, graphs = "update"},
  {name = "full", opts = {}, graphs = "auto"},
}

-- Output tolerance: max |got - want| <= tol * max |want| over the whole output.
local TOL = {
  float32 = {vs_eager = 1e-4, vs_torch = 1e-3},
  bfloat16 = {vs_eager = 4e-2, vs_torch = 6e-2},   -- bf16 vs float64 NumPy is 1.3e-2 for GPT-2 on the CPU
}

---------------------------------------------------------------------------------------------------------
-- arguments

local function usage(msg)
  io.stderr:write((msg and (msg .. "\n") or ""),
    "usage: grace bench/workloads/run.lua [--device cuda|cpu|auto] [--only mlp,eos,st,gpt2_decode[_fp32|_bf16],cpu_input,kv_inplace,...,train_step[_mlp|_gpt]]\n",
    "         [--iters N] [--warmup N] [--json out.json] [--weights DIR] [--small] [--modes eager,compiled]\n",
    "         [--device-time-calls N (default 50)] [--fresh MODES (default compiled,full; none: skip)]\n",
    "         [--rounds N (interleaved comparison of the modes; default 10, 0: skip)]\n",
    "         [--settle N (calls at most after the warm-up until the measured launch choice is made and re-checked;\n",
    "          default 400, 0: none)]\n",
    "         [--fresh-timeout S (per process, default 120)] [--fresh-budget S (all of them; default 0: no limit)]\n",
    "       grace bench/workloads/run.lua --first-call-only VARIANT --mode MODE [--device ...] [--weights DIR]\n",
    "         [--small]\n")
  os.exit(2)
end

local opt = {device = "auto", iters = 200, warmup = 10, settle = 400, small = false, device_time_calls = 50, rounds = 10,
             fresh = "compiled,full", fresh_timeout = 120, fresh_budget = 0}
do
  local a, i = arg or {}, 1
  local function value(name)
    i = i + 1
    if a[i] == nil then usage(name .. " needs a value") end
    return a[i]
  end
  while i <= #a do
    local s = a[i]
    local k, v = s:match("^%-%-([%w_-]+)=(.*)$")
    if k then s = "--" .. k; table.insert(a, i + 1, v) end
    if s == "--device" then opt.device = value(s)
    elseif s == "--only" then opt.only = value(s)
    elseif s == "--iters" then opt.iters = math.tointeger(tonumber(value(s))) or usage("--iters needs an integer")
    elseif s == "--warmup" then opt.warmup = math.tointeger(tonumber(value(s))) or usage("--warmup needs an integer")
    elseif s == "--json" then opt.json = value(s)
    elseif s == "--weights" then opt.weights = value(s)
    elseif s == "--modes" then opt.modes = value(s)
    elseif s == "--small" then opt.small = true
    elseif s == "--device-time-calls" then
      opt.device_time_calls = math.tointeger(tonumber(value(s))) or usage("--device-time-calls needs an integer")
    elseif s == "--settle" then opt.settle = math.tointeger(tonumber(value(s))) or usage("--settle needs an integer")
    elseif s == "--rounds" then opt.rounds = math.tointeger(tonumber(value(s))) or usage("--rounds needs an integer")
    elseif s == "--fresh" then opt.fresh = value(s)
    elseif s == "--fresh-timeout" then opt.fresh_timeout = tonumber(value(s)) or usage("--fresh-timeout needs a number")
    elseif s == "--fresh-budget" then opt.fresh_budget = tonumber(value(s)) or usage("--fresh-budget needs a number")
    elseif s == "--first-call-only" then opt.first_call_only = value(s)
    elseif s == "--mode" then opt.mode = value(s)
    elseif s == "-h" or s == "--help" then usage()
    else usage("unknown argument '" .. s .. "'") end
    i = i + 1
  end
  if opt.iters < 1 then usage("--iters must be >= 1") end
  if opt.warmup < 0 then usage("--warmup must be >= 0") end
  if opt.rounds < 0 then usage("--rounds must be >= 0") end
  if opt.settle < 0 then usage("--settle must be >= 0") end
  if opt.device_time_calls < 0 then usage("--device-time-calls must be >= 0") end
  if opt.first_call_only and not opt.mode then usage("--first-call-only needs --mode") end
  if opt.mode and not opt.first_call_only then usage("--mode goes with --first-call-only") end
end

local cuda_ok = grace.cuda_available and grace.cuda_available()
if opt.device == "auto" then opt.device = cuda_ok and "cuda" or "cpu" end
if opt.device ~= "cpu" and opt.device ~= "cuda" then usage("--device must be cuda, cpu or auto") end
if opt.device == "cuda" and not cuda_ok then
  io.stderr:write("run.lua: --device cuda but no usable CUDA device: ", grace.backend(), "\n")
  os.exit(2)
end

local function mode_named(m)
  for _, md in ipairs(MODES) do if md.name == m then return md end end
  usage("unknown mode '" .. m .. "'")
end

local modes = MODES
if opt.modes then
  modes = {}
  for m in opt.modes:gmatch("[^,]+") do modes[#modes + 1] = mode_named(m) end
end
-- the modes whose first call is also measured in a fresh process (cold and warm kernel cache)
local fresh_modes = {}
if opt.fresh ~= "none" and opt.fresh ~= "" then
  for m in opt.fresh:gmatch("[^,]+") do fresh_modes[#fresh_modes + 1] = mode_named(m) end
end

local clock = grace.clock
local sync = grace.synchronize or function() end
local fmt = string.format

---------------------------------------------------------------------------------------------------------
-- weights: the folder bench/torch/workloads.py writes (manifest.lua reads it)

local manifest, ref_source = nil, "pytorch"
if opt.weights then
  local Manifest = dofile(HERE .. "/manifest.lua")
  local err
  manifest, err = Manifest.read(opt.weights)
  if not manifest then io.stderr:write("run.lua: --weights: ", err, "\n"); os.exit(2) end
  ref_source = err
end
local ref_label = ref_source:match("^[^-]+")   -- "pytorch" or "numpy"; the JSON has the whole line

local function shape_str(s) return "[" .. table.concat(s, ", ") .. "]" end

-- A tensor of the workload: from the manifest when --weights was given, else seeded random numbers.
-- init: {"normal", std [, mean]}, {"uniform", lo, hi} or {"randint", lo, hi} (int64, hi exclusive).
-- Floats are cast to the variant's dtype; everything moves to the device.
local ELEMENT_BYTES = {float32 = 4, float64 = 8, float16 = 2, bfloat16 = 2, int32 = 4, int64 = 8, uint8 = 1, bool = 1}
local function nbytes(t) return t:numel() * ELEMENT_BYTES[t.dtype] end

local function make_ctx(variant)
  -- bytes counts every tensor made here (weights and the whole pool), for the floor of run_variant
  local ctx = {small = opt.small, device = opt.device, dtype = variant.dtype, variant = variant.name, npool = NPOOL,
               bytes = 0}
  function ctx.tensor(name, shape, init)
    local t
    if manifest then
      local e = manifest[name]
      if not e then
        error(fmt("--weights %s: the manifest has no tensor '%s' (written by another version of workloads.py, or "
                  .. "with%s --small?)", opt.weights, name, opt.small and "out" or ""), 0)
      end
      if shape_str(e.shape) ~= shape_str(shape) then
        error(fmt("--weights %s: '%s' has shape %s in the manifest, the workload needs %s (--small on one side only?)",
                  opt.weights, name, shape_str(e.shape), shape_str(shape)), 0)
      end
      t = grace.fromfile(e.file, e.dtype, e.shape)
    elseif init[1] == "normal" then
      t = grace.randn(shape) * init[2] + (init[3] or 0)
    elseif init[1] == "uniform" then
      t = grace.rand(shape) * (init[3] - init[2]) + init[2]
    elseif init[1] == "randint" then
      t = grace.randint(init[2], init[3], shape)
    else
      error("unknown init " .. tostring(init[1]))
    end
    if t.dtype == "float32" and ctx.dtype ~= "float32" then t = t:to(ctx.dtype) end
    ctx.bytes = ctx.bytes + nbytes(t)
    return t:to(ctx.device)
  end
  return ctx
end

-- The reference output PyTorch wrote for pool input 1 (the first result, as float32), or nil.
local function torch_reference(vname)
  if not manifest then return nil end
  local e = manifest[vname .. ".ref.1"]
  if not e then return nil end
  return grace.fromfile(e.file, e.dtype, e.shape)
end

---------------------------------------------------------------------------------------------------------
-- checks

local function compare(what, got, want, tol, floor)
  local r = {what = what, tolerance_rel_to_max = tol}
  if not grace.is_tensor(got) or not grace.is_tensor(want) then
    r.ok, r.error = false, "missing result"
    return r
  end
  if shape_str(got:size()) ~= shape_str(want:size()) then
    r.ok, r.error = false, "shape " .. shape_str(got:size()) .. " vs " .. shape_str(want:size())
    return r
  end
  local g, w = got:cpu():float(), want:cpu():float()
  r.max_abs_diff = (g - w):abs():max():item()
  r.max_abs_ref = w:abs():max():item()
  r.ok = r.max_abs_diff <= tol * math.max(r.max_abs_ref, floor or 1e-30)   -- false for NaN
  return r
end

-- A workload with state (w.reset: a training step, which updates its weights) is checked from its initial state:
-- reset before each mode's first calls, and what is compared across modes and with PyTorch's reference is the
-- first result of NPOOL calls from that state, one per pool input, stacked (PyTorch's ".ref.1" is the same).
local function reset(w) if w.reset then w.reset() end end
local function trajectory(w, f)
  w.reset()
  local r = {}
  for k, args in ipairs(w.pool) do r[k] = f(table.unpack(args)):reshape({1}) end
  return grace.cat(r)
end

---------------------------------------------------------------------------------------------------------
-- timing

local function stats_us(ts)
  table.sort(ts)
  local n = #ts
  local sum = 0
  for _, t in ipairs(ts) do sum = sum + t end
  local function q(p) return ts[math.min(n, math.floor(p * (n - 1)) + 1)] * 1e6 end
  return {latency_us_median = q(0.5), latency_us_min = ts[1] * 1e6, latency_us_p90 = q(0.9),
          latency_us_mean = sum / n * 1e6}
end

-- Whether every device program of compiled function f has made its launch decision and its one re-check (those of
-- the measured mode; a forced mode has none to make).
local function launch_settled(f)
  if type(f) == "function" or not f.report then return true end   -- the eager mode: a plain function
  for _, r in ipairs(f:report()) do
    if r.on_device and not r.no_graph and (r.strategy == "measuring" or r.recheck_pending) then return false end
  end
  return true
end

local function measure(f, pool)
  local n = #pool
  local function call(k) return f(table.unpack(pool[(k - 1) % n + 1])) end
  for k = 1, opt.warmup do call(k) end
  -- the measured mode: more calls until its launch decisions and their re-check are made (at most --settle), so
  -- that the timed calls are its steady state, as they are for the forced modes after the warm-up
  local settle = 0
  while settle < opt.settle and not launch_settled(f) do
    settle = settle + 1
    call(opt.warmup + settle)
  end
  sync()
  collectgarbage()
  local ts = {}
  for k = 1, opt.iters do
    local t0 = clock()
    call(k)
    sync()
    ts[k] = clock() - t0
  end
  collectgarbage()
  sync()
  local t0 = clock()
  for k = 1, opt.iters do call(k) end
  sync()
  local r = stats_us(ts)
  r.throughput_us_per_call = (clock() - t0) / opt.iters * 1e6
  r.calls_timed = opt.iters
  r.settle_calls = settle
  r.launch_settled = launch_settled(f)
  return r
end

-- The modes timed against each other in turn: rounds of a few synchronized calls per mode, the order rotating
-- each round, so that a drift of the device (clocks, temperature, a neighbour) falls on every mode alike; run one
-- after the other, two instances of the same strategy have differed by 3-8%, more than the 3% that issue 7's
-- launch choice is held to. fns: {name, f} in mode order, each compiled afresh and warmed up by the caller.
local function measure_interleaved(fns, pool)
  local n, per = #pool, math.max(1, opt.iters // opt.rounds)
  local ts, k = {}, 0
  for _, e in ipairs(fns) do ts[e.name] = {} end
  for r = 1, opt.rounds do
    for j = 0, #fns - 1 do
      local e = fns[(r + j - 1) % #fns + 1]
      local samples = ts[e.name]
      for _ = 1, per do
        k = k + 1
        local args = pool[(k - 1) % n + 1]
        local t0 = clock()
        e.f(table.unpack(args))
        sync()
        samples[#samples + 1] = clock() - t0
      end
    end
  end
  local out = {rounds = opt.rounds, calls_per_round = per, modes = {}}
  for name, samples in pairs(ts) do
    local st = stats_us(samples)
    out.modes[name] = {latency_us_median = st.latency_us_median, latency_us_min = st.latency_us_min}
  end
  return out
end

-- first call (and second) with a synchronize, in ms; returns the results of both calls too
local function first_calls(f, pool)
  local t0 = clock()
  local r1 = table.pack(f(table.unpack(pool[1])))
  sync()
  local t1 = clock()
  local r2 = table.pack(f(table.unpack(pool[2])))
  sync()
  local t2 = clock()
  return (t1 - t0) * 1e3, (t2 - t1) * 1e3, r1, r2
end

local function device_stats()
  if opt.device ~= "cuda" or not grace.device_stats then return nil end
  return grace.device_stats()
end

-- Per device program of compiled function f: its graph replays so far and the kernel nodes of its graph.
local function graph_replays(f)
  local t = {}
  for _, r in ipairs(f:report()) do
    t[(r.entry or 0) .. ":" .. (r.path or 0)] = {replays = r.replays or 0, kernels = r.kernels or 0}
  end
  return t
end

-- The device span of one call over a separate pass of min(--device-time-calls, --iters) calls, each after a
-- synchronize: grace.device_time, i.e. events on grace's stream just before the call and after it returns on
-- CUDA (gaps where the device waits for the host count: for a host-bound mode it nears the latency), the wall
-- clock on the CPU. On CUDA also the kernels per call over the same calls: grace's own launches
-- (device_stats().kernel_launches: cuBLASLt's kernels are not seen) plus, for programs run as CUDA graphs, each
-- replay's kernel nodes (f:report(), cuBLASLt's included).
local function measure_device(f, pool, compiled)
  local n = math.min(opt.device_time_calls, opt.iters)
  if n < 1 or not grace.device_time then return {} end
  local npool = #pool
  local s0 = device_stats()
  local g0 = compiled and s0 and graph_replays(f)
  local ts, clock_of = {}, nil
  for k = 1, n do
    sync()
    ts[k], clock_of = grace.device_time(opt.device, f, table.unpack(pool[(k - 1) % npool + 1]))
    ts[k] = ts[k] * 1e-3   -- ms -> s, for stats_us
  end
  sync()
  local st = stats_us(ts)
  local r = {device_span_us_median = st.latency_us_median, device_span_us_min = st.latency_us_min,
             device_span_us_p90 = st.latency_us_p90, device_span_calls = n,
             device_span_clock = clock_of == "cuda" and "cuda events" or "host wall clock"}
  local s1 = device_stats()
  if s0 and s1 then
    r.kernels_launched_per_call = (s1.kernel_launches - s0.kernel_launches) / n
    local graph = 0
    if g0 then
      for key, b in pairs(graph_replays(f)) do
        graph = graph + (b.replays - (g0[key] and g0[key].replays or 0)) * b.kernels
      end
    end
    r.graph_kernels_per_call = graph / n
    r.kernels_per_call = r.kernels_launched_per_call + r.graph_kernels_per_call
  end
  return r
end

---------------------------------------------------------------------------------------------------------
-- JSON (keys sorted; numbers as %.6g or integers; an empty table is {} unless it has the ARRAY metatable)

local ARRAY = {}

local function json(v, indent)
  indent = indent or ""
  local t = type(v)
  if t == "nil" then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    if math.type(v) == "integer" then return tostring(v) end
    return fmt("%.6g", v)
  end
  if t == "string" then
    return '"' .. v:gsub('[%c"\\]', function(ch)
      local m = {['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t"}
      return m[ch] or fmt("\\u%04x", ch:byte())
    end) .. '"'
  end
  local inner = indent .. "  "
  if #v > 0 or getmetatable(v) == ARRAY then
    local parts = {}
    for i = 1, #v do parts[i] = inner .. json(v[i], inner) end
    if #parts == 0 then return "[]" end
    return "[\n" .. table.concat(parts, ",\n") .. "\n" .. indent .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = inner .. json(k) .. ": " .. json(v[k], inner) end
  return "{\n" .. table.concat(parts, ",\n") .. "\n" .. indent .. "}"
end

-- The one line a --first-call-only child prints: its flat record (strings, numbers, booleans) as a Lua table
-- constructor, which the parent reads back with load in an empty environment (Lua is the parser).
local function record_line(r)
  local parts = {}
  for k, v in pairs(r) do
    local text = type(v) == "boolean" and tostring(v) or fmt("%q", type(v) == "string" and (v:gsub("\n", " ")) or v)
    parts[#parts + 1] = fmt("[%q]=%s", k, text)
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

local function record_read(line)
  local fn, err = load("return " .. line, "=FIRST_CALL line", "t", {})
  if not fn then return nil, err end
  local ok, v = pcall(fn)
  if not ok or type(v) ~= "table" then return nil, ok and "not a table" or v end
  return v
end

---------------------------------------------------------------------------------------------------------
-- main

-- The modules first, so a bad --only stops before anything runs.
local modules, selected = {}, {}
for i, wname in ipairs(WORKLOADS) do modules[i] = dofile(HERE .. "/" .. wname .. ".lua") end
if opt.only then
  local known = {}
  for _, m in ipairs(modules) do
    known[m.name] = true
    for _, v in ipairs(m.variants) do known[v.name] = true end
  end
  for s in opt.only:gmatch("[^,]+") do
    if not known[s] then usage("--only: no workload named '" .. s .. "'") end
    selected[s] = true
  end
end
local function wanted(module_name, variant_name)
  return not opt.only or selected[module_name] or selected[variant_name]
end

-- Each variant's seed comes from its name: the same random weights whatever else runs (and in a child).
local function variant_seed(name)
  local seed = 0
  for j = 1, #name do seed = seed + name:byte(j) * j end
  return seed
end

-- A variant's function compiled for a mode: named after both (the disk cache keys the launch choice by program),
-- its programs launched by the mode's strategy (grace.graphs applies to programs that first run after it).
local function compile_mode(vname, fn, mode)
  local copts = {name = vname .. ":" .. mode.name}
  for k, v in pairs(mode.opts) do copts[k] = v end
  if grace.graphs then grace.graphs(mode.graphs or "auto") end
  return grace.compile(fn, copts)
end

-- --first-call-only VARIANT --mode MODE: this process only builds one variant and times its first three calls
-- in MODE (trace + compile + run, capture for graph modes), with the kernel cache GRACE_CACHE_DIR holds; then
-- checks the first call's results against eager ones and prints one line "FIRST_CALL {...}". The parent
-- (fresh_first_call below) runs it with an empty cache dir (cold) and again with the same dir (warm).
if opt.first_call_only then
  local module, variant
  for _, md in ipairs(modules) do
    for _, v in ipairs(md.variants) do
      if v.name == opt.first_call_only then module, variant = md, v end
    end
  end
  if not variant then usage("--first-call-only: no variant named '" .. opt.first_call_only .. "'") end
  local mode = mode_named(opt.mode)
  local r = {variant = variant.name, mode = mode.name, device = opt.device}
  local ok, err = xpcall(function()
    grace.manual_seed(variant_seed(variant.name))
    local t0 = clock()
    local w = module.build(make_ctx(variant))
    sync()
    r.setup_s = clock() - t0
    local stats = {device_stats()}
    local f = w.fn
    if mode.opts then f = compile_mode(variant.name, w.fn, mode) end
    local ms, got = {}, nil
    for k = 1, 3 do
      local t1 = clock()
      local res = table.pack(f(table.unpack(w.pool[k])))
      sync()
      ms[k] = (clock() - t1) * 1e3
      stats[k + 1] = device_stats()
      got = got or res
    end
    r.first_call_ms, r.second_call_ms, r.third_call_ms = ms[1], ms[2], ms[3]
    if stats[1] then
      local function delta(k, key) return stats[k][key] - stats[1][key] end
      r.first_call_nvrtc_calls, r.first_call_nvrtc_s = delta(2, "nvrtc_calls"), delta(2, "nvrtc_seconds")
      r.first_call_disk_hits = delta(2, "disk_hits")
      r.three_calls_nvrtc_calls, r.three_calls_disk_hits = delta(4, "nvrtc_calls"), delta(4, "disk_hits")
      r.setup_nvrtc_calls = stats[1].nvrtc_calls   -- before the first call (building the inputs)
    end
    reset(w)   -- the compiled calls moved a training step's weights: eager starts where they did
    local want = table.pack(w.fn(table.unpack(w.pool[1])))
    local worst = 0
    r.check_ok = true
    for i = 1, math.max(want.n, got.n) do
      local c = compare("first call vs eager", got[i], want[i], TOL[variant.dtype].vs_eager)
      r.check_ok = r.check_ok and c.ok
      if c.max_abs_diff then worst = math.max(worst, c.max_abs_diff / math.max(c.max_abs_ref, 1e-30)) end
    end
    r.check_worst_rel = worst
  end, debug.traceback)
  if not ok then
    io.stderr:write(tostring(err), "\n")
    r.error = tostring(err):match("^[^\n]*")
  end
  io.write("FIRST_CALL ", record_line(r), "\n")
  os.exit((r.error or not r.check_ok) and 1 or 0)
end

local result = {
  system = "grace",
  grace_version = grace.version,
  backend = grace.backend(),
  device = opt.device,
  date_utc = os.date("!%Y-%m-%dT%H:%M:%SZ"),
  small = opt.small,
  iters = opt.iters,
  warmup_calls = opt.warmup,
  pool_size = NPOOL,
  weights_dir = opt.weights,
  reference_source = opt.weights and ref_source or nil,
  method = "latency_us_*: wall time of one call followed by grace.synchronize(), over --iters calls (median, min, "
    .. "p90, mean); throughput_us_per_call: wall time of --iters calls with one grace.synchronize() at the end, "
    .. "divided by --iters; first_call_ms / second_call_ms: the first two calls of a fresh function (for compiled "
    .. "modes: trace + compile + run), each with a synchronize. Each call takes the next input of a pool of "
    .. "pool_size pre-made inputs. Before the timed calls, warmup_calls calls, and for the measured mode (full) up to "
    .. "--settle more (settle_calls; launch_settled: whether that sufficed) until every device program has made its "
    .. "launch decision and its one re-check. Checks: max |got - want| <= tolerance_rel_to_max * max |want|. "
    .. "device_span_us_*: a separate pass of device_span_calls calls, each after a synchronize, timed by "
    .. "grace.device_time: on CUDA the span between events recorded on grace's stream just before the call and "
    .. "after it returns (gaps where the device waits for the host count), on the CPU the wall time. "
    .. "kernels_per_call (CUDA, same pass) = kernels_launched_per_call (grace's own launches; cuBLASLt's kernels "
    .. "are NOT counted) + graph_kernels_per_call (kernel nodes of each CUDA graph replayed, cuBLASLt's included). "
    .. "peak_allocated_bytes: the allocator's highest in-use bytes from the mode's start (peak reset there, with "
    .. "baseline_allocated_bytes already in use: weights, inputs) to the end of its timed calls. fresh_process: "
    .. "the first three calls of a compiled mode in a new process (this script with --first-call-only), with "
    .. "GRACE_CACHE_DIR an empty dir (cold), then the same dir again (warm); *_nvrtc_calls: kernels NVRTC "
    .. "compiled in that span; process_s: the whole child process.",
  device_time_calls = math.min(opt.device_time_calls, opt.iters),
  workloads = {},
}

print(fmt("grace %s, %s, device %s%s, %d timed calls (+%d warm-up) per mode, inputs from a pool of %d%s",
  grace.version, grace.backend(), opt.device, opt.small and " (--small sizes)" or "", opt.iters, opt.warmup, NPOOL,
  opt.weights and (", weights from " .. opt.weights) or ", seeded random weights"))

-- The device's first kernels and library handles are set up once, outside every measurement.
do
  local w = grace.ones({64, 64}, {device = opt.device})
  local _ = (w:matmul(w) + 1):sum():item()
  sync()
end

-- One mode of one workload: compile (unless eager), check against eager (and the reference), time. Raises on
-- a grace error; the caller records it and goes on with the next mode.
local function run_mode(entry, w, mode, tol, want1, want2, want_ref, ref, e1_ms, e2_ms)
  local f, m = w.fn, {}
  local function check(what, got, want, t) entry.checks[#entry.checks + 1] = compare(what, got, want, t) end
  -- the mode's peak device memory: from what is allocated now (weights, inputs, eager results; the previous
  -- mode's function and graphs collected first) to the highest allocation until the mode is done
  collectgarbage()
  collectgarbage()
  sync()
  local before = device_stats()   -- the variant's peak so far survives the reset in peak_seen
  if before then entry.peak_seen = math.max(entry.peak_seen or 0, before.peak_allocated) end
  if grace.reset_peak_memory then grace.reset_peak_memory() end
  local at_start = device_stats()
  if mode.opts then
    f = compile_mode(entry.name, w.fn, mode)
    reset(w)
    local before = device_stats()
    local c1, c2, got1, got2 = first_calls(f, w.pool)
    local after = device_stats()
    m.first_call_ms, m.second_call_ms = c1, c2
    if before and after then
      m.first_calls_nvrtc_compiles = after.nvrtc_calls - before.nvrtc_calls
      m.first_calls_disk_cache_hits = after.disk_hits - before.disk_hits
    end
    for i = 1, math.max(want1.n, got1.n) do
      check(fmt("%s vs eager, result %d (input 1)", mode.name, i), got1[i], want1[i], tol.vs_eager)
      check(fmt("%s vs eager, result %d (input 2)", mode.name, i), got2[i], want2[i], tol.vs_eager)
    end
    local got_ref, what = got1[1], "(input 1)"
    if w.reset then
      got_ref, what = trajectory(w, f), fmt("(results of %d steps)", #w.pool)
      check(mode.name .. " vs eager " .. what, got_ref, want_ref, tol.vs_eager)
    end
    if ref then check(mode.name .. " vs " .. ref_label .. " " .. what, got_ref, ref, tol.vs_torch) end
  else
    m.first_call_ms, m.second_call_ms = e1_ms, e2_ms
  end
  for k, v in pairs(measure(f, w.pool)) do m[k] = v end
  for k, v in pairs(measure_device(f, w.pool, mode.opts ~= nil)) do m[k] = v end
  local at_end = device_stats()
  if at_start and at_end then
    m.peak_allocated_bytes, m.baseline_allocated_bytes = at_end.peak_allocated, at_start.allocated
  end
  if mode.opts then
    -- after the timed calls (graphs recorded and replayed by now) the outputs must still be right
    reset(w)
    local again = table.pack(f(table.unpack(w.pool[1])))
    for i = 1, math.max(want1.n, again.n) do
      check(fmt("%s vs eager after %d calls, result %d (input 1)", mode.name, m.calls_timed or 0, i), again[i], want1[i],
            tol.vs_eager)
    end
    if f.report then
      m.launch = {}
      for _, r in ipairs(f:report()) do
        m.launch[#m.launch + 1] = {strategy = r.strategy, us = r.us, unavailable = r.unavailable, no_graph = r.no_graph,
                                   kernels = r.kernels, copy_bytes = r.copy_bytes, graph_bytes = r.graph_bytes,
                                   indirect_words = r.indirect_words, node_updates = r.node_updates, graphs = r.graphs, captures = r.captures,
                                   replay_host_us_min = r.replay_host_us_min, replay_host_us_mean = r.replay_host_us_mean,
                                   arena_bytes = r.arena_bytes, samples = r.samples, from_cache = r.from_cache,
                                   rechecks = r.rechecks, switches = r.switches, measure_calls = r.measure_calls,
                                   sizes = r.sizes, inherited = r.inherited, decided_by = r.decided_by}
      end
    end
    if grace.graphs then grace.graphs() end
    local s = f:stats()
    m.compile_stats = {calls = s.calls, hits = s.hits, traces = s.traces, replays = s.replays,
                       eager_calls = s.eager_calls, fell_back_to_eager = s.eager and true or false}
  end
  return m
end

local function print_entry(vname, entry)
  print(fmt("\n%s: %s", vname, entry.description or ""))
  if entry.error then print("  ERROR " .. entry.error) return end
  print(fmt("  %-14s %11s %11s %13s %13s %11s %11s %8s %8s", "mode", "latency us", "lat min us", "throughput us",
            "first call ms", "2nd call ms", "dev span us", "kernels", "peak MB"))
  for _, mode in ipairs(modes) do
    local m = entry.modes[mode.name]
    if m.error then
      print(fmt("  %-14s ERROR %s", mode.name, m.error))
    else
      local cs, note = m.compile_stats, ""
      if cs then
        note = fmt("  traces %d, hits %d/%d calls%s%s", cs.traces, cs.hits, cs.calls,
                   cs.replays > 0 and fmt(", %d replays", cs.replays) or "",
                   cs.fell_back_to_eager and ", FELL BACK TO EAGER" or "")
      end
      print(fmt("  %-14s %11.1f %11.1f %13.1f %13.2f %11.2f %11s %8s %8s%s", mode.name, m.latency_us_median,
                m.latency_us_min, m.throughput_us_per_call, m.first_call_ms, m.second_call_ms,
                m.device_span_us_median and fmt("%.1f", m.device_span_us_median) or "-",
                m.kernels_per_call and fmt("%.1f", m.kernels_per_call) or "-",
                m.peak_allocated_bytes and fmt("%.1f", m.peak_allocated_bytes / 1e6) or "-", note))
      for k, l in ipairs(m.launch or {}) do   -- per device program: how it launches, what was measured
        local us = {}
        for _, n in ipairs({"eager", "graph+copies", "graph+indirection", "graph+node updates"}) do
          if l.us[n] then us[#us + 1] = fmt("%s %.1f", n, l.us[n]) end
          if l.unavailable[n] then us[#us + 1] = n .. " unavailable: " .. l.unavailable[n] end
        end
        print(fmt("      program %d: %s, %d kernels, %d B copied/call, %d table words/call, %d library nodes re-pointed, "
                  .. "replay host %.1f us (min)%s%s", k,
                  l.strategy, l.kernels, l.copy_bytes, l.indirect_words, l.node_updates or 0, l.replay_host_us_min or 0,
                  #us > 0 and "; measured us: " .. table.concat(us, ", ") or "", l.no_graph and "; no graph: " .. l.no_graph or ""))
      end
    end
  end
  local il = entry.interleaved
  if il then
    local parts, best = {}, nil
    for _, mode in ipairs(modes) do
      local v = il.modes[mode.name]
      if v then
        parts[#parts + 1] = fmt("%s %.1f", mode.name, v.latency_us_median)
        if mode.opts and mode.graphs ~= "auto" then best = math.min(best or math.huge, v.latency_us_median) end
      end
    end
    local full = il.modes.full
    print(fmt("  interleaved (%d rounds of %d calls), median us: %s%s", il.rounds, il.calls_per_round,
              table.concat(parts, ", "), full and best and fmt("; full / best single strategy %.3f",
              full.latency_us_median / best) or ""))
  end
  print(fmt("  checks: %d, %s%s", #entry.checks, #entry.bad == 0 and "all ok" or (#entry.bad .. " FAILED"),
            entry.has_ref and "" or " (no reference output: --weights not given or without outputs)"))
  for _, b in ipairs(entry.bad) do print("    FAILED " .. b) end
end

-- The modes that ran without error, compiled again (kernels and the launch choice come from the caches by
-- now) and warmed up (enough calls for graphs to be recorded, or a choice measured where none was kept, and the
-- measured choice's one re-check made: up to --settle more calls), then timed in turn.
local function interleaved(entry, w)
  local fns = {}
  for _, mode in ipairs(modes) do
    if not entry.modes[mode.name].error then
      local f = w.fn
      if mode.opts then
        f = compile_mode(entry.name, w.fn, mode)
        local k = 0
        while k < math.max(opt.warmup, 30) or (k < math.max(opt.warmup, 30) + opt.settle and not launch_settled(f)) do
          k = k + 1
          f(table.unpack(w.pool[(k - 1) % #w.pool + 1]))
        end
        if grace.graphs then grace.graphs() end
      end
      fns[#fns + 1] = {name = mode.name, f = f}
    end
  end
  sync()
  return measure_interleaved(fns, w.pool)
end

-- A workload variant: build, eager results, every mode. Returns its JSON entry (with .bad, .has_ref for
-- printing, removed before the JSON is written).
local function run_variant(module, variant)
  grace.manual_seed(variant_seed(variant.name))
  local entry = {name = variant.name, dtype = variant.dtype, checks = setmetatable({}, ARRAY), modes = {}, bad = {}}
  local ok, err = xpcall(function()
    local tb = clock()
    local ctx = make_ctx(variant)
    local w = module.build(ctx)
    sync()
    entry.description, entry.build_s = w.description, clock() - tb
    local tol = TOL[variant.dtype]
    -- eager results first: the reference for every compiled mode
    local e1_ms, e2_ms, want1, want2 = first_calls(w.fn, w.pool)
    local want_ref, what = want1[1], "(input 1)"
    if w.reset then want_ref, what = trajectory(w, w.fn), fmt("(results of %d steps)", #w.pool) end
    -- the floor's inputs: what one call must read and write at least (weights once, or w.min_bytes; one input, the
    -- outputs) and its matmul (or pointwise) FLOPs
    local pool_all, pool1, out = 0, 0, 0
    for k, args in ipairs(w.pool) do
      for _, a in ipairs(args) do
        pool_all = pool_all + nbytes(a)
        if k == 1 then pool1 = pool1 + nbytes(a) end
      end
    end
    for i = 1, want1.n do if grace.is_tensor(want1[i]) then out = out + nbytes(want1[i]) end end
    entry.min_bytes_per_call = (w.min_bytes or ctx.bytes - pool_all) + pool1 + out
    entry.flops_per_call = w.flops
    local ref = torch_reference(variant.name)
    entry.has_ref = ref ~= nil
    if ref then
      entry.checks[#entry.checks + 1] = compare("eager vs " .. ref_label .. " " .. what, want_ref, ref, tol.vs_torch)
    end
    -- a training step: each parameter's gradient from the initial state against the reference's
    -- relative to the larger of the parameter's largest gradient and 1e-3 of the model's: a gradient that is zero
    -- but for rounding (a key projection's bias: softmax ignores what every key adds alike) is held to the model's
    -- scale, not to its own noise
    local grads, gmax = {}, 0
    for _, p in ipairs(manifest and w.grads and w.grads(table.unpack(w.pool[1])) or {}) do
      local e = manifest[variant.name .. ".grad." .. p.name]
      if e then
        local want = grace.fromfile(e.file, e.dtype, e.shape)
        grads[#grads + 1] = {p = p, want = want}
        gmax = math.max(gmax, want:float():abs():max():item())
      end
    end
    for _, g in ipairs(grads) do
      entry.checks[#entry.checks + 1] = compare(fmt("eager gradient of %s vs %s", g.p.name, ref_label), g.p.grad,
                                                g.want, tol.vs_torch, 1e-3 * gmax)
    end
    for _, mode in ipairs(modes) do
      local mok, m = xpcall(run_mode, debug.traceback, entry, w, mode, tol, want1, want2, want_ref, ref, e1_ms, e2_ms)
      if not mok then
        io.stderr:write(variant.name, " ", mode.name, ": ", tostring(m), "\n")
        m = {error = tostring(m):match("^[^\n]*")}
        entry.bad[#entry.bad + 1] = mode.name .. " raised: " .. m.error
      end
      entry.modes[mode.name] = m
    end
    if opt.rounds > 0 and #modes > 1 then
      local iok, ierr = xpcall(function() entry.interleaved = interleaved(entry, w) end, debug.traceback)
      if not iok then
        io.stderr:write(variant.name, " interleaved: ", tostring(ierr), "\n")
        entry.bad[#entry.bad + 1] = "interleaved comparison raised: " .. tostring(ierr):match("^[^\n]*")
      end
    end
  end, debug.traceback)
  if not ok then
    io.stderr:write(variant.name, ": ", tostring(err), "\n")
    entry.error = tostring(err):match("^[^\n]*")
    entry.bad[#entry.bad + 1] = "raised: " .. entry.error
  end
  for _, c in ipairs(entry.checks) do
    if not c.ok then
      entry.bad[#entry.bad + 1] = c.what .. (c.error and (": " .. c.error) or
        fmt(": max|diff| %.3g > %.3g x max|want| %.3g", c.max_abs_diff or 0 / 0, c.tolerance_rel_to_max,
            c.max_abs_ref or 0 / 0))
    end
  end
  entry.checks_ok = #entry.bad == 0
  local st = device_stats()
  if st then entry.device_peak_allocated_bytes_cumulative = math.max(entry.peak_seen or 0, st.peak_allocated) end
  entry.peak_seen = nil
  return entry
end

local rows, failed = {}, false
for _, module in ipairs(modules) do
  for _, variant in ipairs(module.variants) do
    if wanted(module.name, variant.name) then
      local entry = run_variant(module, variant)
      print_entry(variant.name, entry)   -- now: a long run shows progress
      if #entry.bad > 0 then failed = true end
      rows[#rows + 1] = {variant = variant.name, entry = entry}
      collectgarbage()
      collectgarbage()
      if grace.empty_cache then grace.empty_cache() end
    end
  end
end
for _, r in ipairs(rows) do
  local e = r.entry
  r.bad, r.has_ref = e.bad, e.has_ref
  e.bad, e.has_ref, e.name = nil, nil, nil
  result.workloads[r.variant] = e
end

-- summary: the median latency per mode, one line per workload
print(fmt("\n%-18s %s  %s", "workload", table.concat((function()
  local h = {}
  for i, m in ipairs(modes) do h[i] = fmt("%14s", m.name .. " us") end
  return h
end)(), " "), "checks"))
for _, r in ipairs(rows) do
  local cols = {}
  for i, m in ipairs(modes) do
    local v = r.entry.modes[m.name] and r.entry.modes[m.name].latency_us_median
    cols[i] = v and fmt("%14.1f", v) or fmt("%14s", "error")
  end
  print(fmt("%-18s %s  %s", r.variant, table.concat(cols, " "),
            (#r.bad == 0 and "ok" or "FAILED") .. (r.has_ref and (" (vs " .. ref_label .. " too)") or "")))
end

-- First calls in fresh processes: this script again with --first-call-only, through the shell.
local function shell_quote(v) return "'" .. (tostring(v):gsub("'", "'\\''")) .. "'" end
local function interpreter()   -- arg[-k]: the grace binary that runs this script (lowest index)
  local i = -1
  while arg and arg[i - 1] ~= nil do i = i - 1 end
  return arg and arg[i] or "grace"
end

local function fresh_first_call(vname, mode, cache_dir, timeout_s)
  -- coreutils' timeout: a child that hangs (a driver stuck in a cold compile) must not take the suite with it
  local cmd = {"GRACE_CACHE_DIR=" .. shell_quote(cache_dir), fmt("timeout -k 5 %d", math.max(1, math.floor(timeout_s))),
               shell_quote(interpreter()), shell_quote(arg[0]),
               "--first-call-only", vname, "--mode", mode.name, "--device", opt.device}
  if opt.weights then cmd[#cmd + 1] = "--weights " .. shell_quote(opt.weights) end
  if opt.small then cmd[#cmd + 1] = "--small" end
  local t0 = clock()
  local p = io.popen(table.concat(cmd, " ") .. " 2>&1", "r")
  local out = p and p:read("a") or ""
  local closed_ok, _, code = true, nil, 0
  if p then closed_ok, _, code = p:close() end
  local r
  local line = out:match("FIRST_CALL ([^\n]*)")
  if line then
    local v, err = record_read(line)
    r = v or {error = "unreadable FIRST_CALL line: " .. tostring(err)}
  else
    local last = ""
    for l in out:gmatch("[^\n]+") do if l:match("%S") then last = l end end
    r = {error = fmt("no FIRST_CALL line (exit %s%s): %s", tostring(code),
                     code == 124 and fmt(", timed out after %d s", math.floor(timeout_s)) or "", last)}
  end
  r.process_s = clock() - t0
  if not closed_ok and not r.error then
    r.error = r.check_ok == false and "the first call's results differ from eager's" or ("exit " .. tostring(code))
  end
  return r
end

local function write_json()
  if not opt.json then return end
  local f, err = io.open(opt.json, "w")
  if not f then io.stderr:write("run.lua: --json: ", err, "\n"); os.exit(2) end
  f:write(json(result), "\n")
  f:close()
  print("wrote " .. opt.json)
end

if #fresh_modes > 0 and #rows > 0 then
  write_json()   -- the timings are safe even if what follows is cut short
  local fresh_t0 = clock()
  print(fmt("\nfirst call in a fresh process (ms; trace + compile + run; cold: an empty GRACE_CACHE_DIR, warm: the "
            .. "same dir again; NVRTC: kernels compiled in the first call)"))
  print(fmt("%-18s %-14s %11s %6s %11s %6s %10s %9s %9s", "workload", "mode", "cold ms", "NVRTC", "warm ms", "NVRTC",
            "warm 2nd", "cold s", "warm s"))
  -- GPT-2 first: issue 6's first-call targets are about it, and --fresh-budget may not reach the last ones
  local order, ngpt2 = {}, 0
  for _, r in ipairs(rows) do
    if r.variant:match("^gpt2_decode") then
      ngpt2 = ngpt2 + 1
      table.insert(order, ngpt2, r)
    else
      order[#order + 1] = r
    end
  end
  for _, r in ipairs(order) do
    if not r.entry.error then
      r.entry.fresh_process = {}
      for _, mode in ipairs(fresh_modes) do
        local fr = {}
        local p = io.popen("mktemp -d \"${TMPDIR:-/tmp}/grace-firstcall.XXXXXX\" 2>/dev/null")
        local dir = p and p:read("l")
        if p then p:close() end
        if not dir or not dir:match("grace%-firstcall%.") then
          fr.error = "mktemp -d failed"
        else
          for _, temp in ipairs({"cold", "warm"}) do
            local left = opt.fresh_budget > 0 and opt.fresh_budget - (clock() - fresh_t0) or math.huge
            if left < 1 then
              fr[temp] = {skipped = fmt("over --fresh-budget %g s", opt.fresh_budget)}
            elseif temp == "warm" and fr.cold.error then
              fr[temp] = {skipped = "the cold run failed (the cache may be incomplete)"}
            else
              fr[temp] = fresh_first_call(r.variant, mode, dir, math.min(opt.fresh_timeout, left))
            end
          end
          os.execute("rm -rf " .. shell_quote(dir))
        end
        r.entry.fresh_process[mode.name] = fr
        local function num(x, f) return x and fmt(f, x) or "-" end
        local c, wm = fr.cold or {}, fr.warm or {}
        print(fmt("%-18s %-14s %11s %6s %11s %6s %10s %9s %9s", r.variant, mode.name, num(c.first_call_ms, "%.1f"),
                  num(c.first_call_nvrtc_calls, "%d"), num(wm.first_call_ms, "%.1f"), num(wm.first_call_nvrtc_calls, "%d"),
                  num(wm.second_call_ms, "%.1f"), num(c.process_s, "%.2f"), num(wm.process_s, "%.2f")))
        for _, e in ipairs({{"", fr}, {"cold: ", c}, {"warm: ", wm}}) do
          if e[2].error then
            print("    FAILED " .. e[1] .. e[2].error)
            failed = true
          elseif e[2].skipped then
            print("    skipped " .. e[1] .. e[2].skipped)
          end
        end
      end
    end
  end
end

write_json()
if failed then
  io.stderr:write("run.lua: correctness checks FAILED or a workload raised an error (see above); the rest was "
                  .. "timed and written\n")
  os.exit(1)
end
