-- run.lua: the grace side of the benchmark suite (issue 8). For each workload (mlp, eos, st, gpt2_decode
-- in fp32 and bf16; one module each in this folder) it builds weights and a pool of 8 inputs (read from the
-- files bench/torch/workloads.py writes, or seeded random numbers), checks the compiled output against the
-- eager one and, when the files hold PyTorch's outputs, against PyTorch, then times every mode: latency per
-- call with a synchronize after each call (median), throughput without one (total / calls, one synchronize
-- at the end), and the first call (trace + compile for compiled modes). Prints a table, writes JSON.
-- usage: grace bench/workloads/run.lua [--device cuda|cpu|auto] [--only mlp,eos,...] [--iters N]
--          [--warmup N] [--json out.json] [--weights DIR] [--small] [--modes eager,compiled]
-- A workload name selects all its variants (gpt2_decode = gpt2_decode_fp32 + gpt2_decode_bf16).
-- Exit status 1 when a correctness check failed or a workload raised an error: the error is recorded and
-- printed, the other workloads and modes still run, and timings are still taken and written.

local HERE = (arg and arg[0] or "bench/workloads/run.lua"):match("^(.*)/[^/]*$") or "."
local WORKLOADS = {"mlp", "eos", "st", "gpt2_decode"}
local NPOOL = 8

-- The modes timed. opts is grace.compile's options table; nil runs the Lua function eagerly. graphs is the
-- launch strategy of the compiled function's device programs (grace.graphs): the ablation of issue 8, no
-- graphs / graphs with input copies / graphs with parameter indirection / chosen by measurement.
local MODES = {
  {name = "eager"},
  {name = "compiled", opts = {}, graphs = "off"},
  {name = "graph_copy", opts = {}, graphs = "copy"},
  {name = "graph_indirect", opts = {}, graphs = "indirect"},
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
    "usage: grace bench/workloads/run.lua [--device cuda|cpu|auto] [--only mlp,eos,st,gpt2_decode[_fp32|_bf16]]\n",
    "         [--iters N] [--warmup N] [--json out.json] [--weights DIR] [--small] [--modes eager,compiled]\n")
  os.exit(2)
end

local opt = {device = "auto", iters = 200, warmup = 10, small = false}
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
    elseif s == "-h" or s == "--help" then usage()
    else usage("unknown argument '" .. s .. "'") end
    i = i + 1
  end
  if opt.iters < 1 then usage("--iters must be >= 1") end
  if opt.warmup < 0 then usage("--warmup must be >= 0") end
end

local cuda_ok = grace.cuda_available and grace.cuda_available()
if opt.device == "auto" then opt.device = cuda_ok and "cuda" or "cpu" end
if opt.device ~= "cpu" and opt.device ~= "cuda" then usage("--device must be cuda, cpu or auto") end
if opt.device == "cuda" and not cuda_ok then
  io.stderr:write("run.lua: --device cuda but no usable CUDA device: ", grace.backend(), "\n")
  os.exit(2)
end

local modes = MODES
if opt.modes then
  modes = {}
  for m in opt.modes:gmatch("[^,]+") do
    local found
    for _, md in ipairs(MODES) do if md.name == m then found = md end end
    if not found then usage("unknown mode '" .. m .. "'") end
    modes[#modes + 1] = found
  end
end

local clock = grace.clock
local sync = grace.synchronize or function() end
local fmt = string.format

---------------------------------------------------------------------------------------------------------
-- weights: DIR/manifest.txt, one line per tensor: "name dtype d1,d2,... file" ("scalar" for a 0-d shape),
-- each file the raw little-endian elements; '#' starts a comment line.

local manifest, ref_source = nil, "pytorch"
if opt.weights then
  local path = opt.weights .. "/manifest.txt"
  local f, err = io.open(path, "r")
  if not f then io.stderr:write("run.lua: --weights: ", err, "\n"); os.exit(2) end
  manifest = {}
  local ln = 0
  for line in f:lines() do
    ln = ln + 1
    local src = line:match("^#%s*reference_source%s+(%S+)")
    if src then ref_source = src end
    if line:match("%S") and not line:match("^%s*#") then
      local name, dtype, shape, file = line:match("^(%S+)%s+(%S+)%s+(%S+)%s+(%S+)%s*$")
      if not name then error(fmt("%s:%d: expected 'name dtype shape file', got '%s'", path, ln, line), 0) end
      local dims = {}
      if shape ~= "scalar" then
        for dstr in shape:gmatch("[^,]+") do
          dims[#dims + 1] = math.tointeger(tonumber(dstr)) or error(fmt("%s:%d: bad shape '%s'", path, ln, shape), 0)
        end
      end
      manifest[name] = {dtype = dtype, shape = dims, file = opt.weights .. "/" .. file}
    end
  end
  f:close()
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
  local ctx = {small = opt.small, device = opt.device, dtype = variant.dtype, npool = NPOOL, bytes = 0}
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

local function compare(what, got, want, tol)
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
  r.ok = r.max_abs_diff <= tol * math.max(r.max_abs_ref, 1e-30)   -- false for NaN
  return r
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

local function measure(f, pool)
  local n = #pool
  local function call(k) return f(table.unpack(pool[(k - 1) % n + 1])) end
  for k = 1, opt.warmup do call(k) end
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
  return r
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
    .. "pool_size pre-made inputs. Checks: max |got - want| <= tolerance_rel_to_max * max |want|.",
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
local function run_mode(entry, w, mode, tol, want1, want2, ref, e1_ms, e2_ms)
  local f, m = w.fn, {}
  local function check(what, got, want, t) entry.checks[#entry.checks + 1] = compare(what, got, want, t) end
  if mode.opts then
    local copts = {name = entry.name .. ":" .. mode.name}
    for k, v in pairs(mode.opts) do copts[k] = v end
    if grace.graphs then grace.graphs(mode.graphs or "auto") end
    f = grace.compile(w.fn, copts)
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
    if ref then check(mode.name .. " vs " .. ref_label .. " (input 1)", got1[1], ref, tol.vs_torch) end
  else
    m.first_call_ms, m.second_call_ms = e1_ms, e2_ms
  end
  for k, v in pairs(measure(f, w.pool)) do m[k] = v end
  if mode.opts then
    -- after the timed calls (graphs recorded and replayed by now) the outputs must still be right
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
                                   indirect_words = r.indirect_words, graphs = r.graphs, captures = r.captures,
                                   replay_host_us_min = r.replay_host_us_min, replay_host_us_mean = r.replay_host_us_mean}
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
  print(fmt("  %-14s %14s %14s %14s %14s %12s", "mode", "latency us", "lat min us", "throughput us",
            "first call ms", "2nd call ms"))
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
      print(fmt("  %-14s %14.1f %14.1f %14.1f %14.2f %12.2f%s", mode.name, m.latency_us_median, m.latency_us_min,
                m.throughput_us_per_call, m.first_call_ms, m.second_call_ms, note))
      for k, l in ipairs(m.launch or {}) do   -- per device program: how it launches, what was measured
        local us = {}
        for _, n in ipairs({"eager", "graph+copies", "graph+indirection"}) do
          if l.us[n] then us[#us + 1] = fmt("%s %.1f", n, l.us[n]) end
          if l.unavailable[n] then us[#us + 1] = n .. " unavailable: " .. l.unavailable[n] end
        end
        print(fmt("      program %d: %s, %d kernels, %d B copied/call, %d table words/call, replay host %.1f us%s%s", k,
                  l.strategy, l.kernels, l.copy_bytes, l.indirect_words, l.replay_host_us_mean or 0,
                  #us > 0 and "; measured us: " .. table.concat(us, ", ") or "", l.no_graph and "; no graph: " .. l.no_graph or ""))
      end
    end
  end
  print(fmt("  checks: %d, %s%s", #entry.checks, #entry.bad == 0 and "all ok" or (#entry.bad .. " FAILED"),
            entry.has_ref and "" or " (no reference output: --weights not given or without outputs)"))
  for _, b in ipairs(entry.bad) do print("    FAILED " .. b) end
end

-- A workload variant: build, eager results, every mode. Returns its JSON entry (with .bad, .has_ref for
-- printing, removed before the JSON is written).
local function run_variant(module, variant)
  local seed = 0
  for j = 1, #variant.name do seed = seed + variant.name:byte(j) * j end
  grace.manual_seed(seed)
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
    -- the floor's inputs: what one call must read and write at least (weights once, one input, the
    -- outputs) and its matmul (or pointwise) FLOPs
    local pool_all, pool1, out = 0, 0, 0
    for k, args in ipairs(w.pool) do
      for _, a in ipairs(args) do
        pool_all = pool_all + nbytes(a)
        if k == 1 then pool1 = pool1 + nbytes(a) end
      end
    end
    for i = 1, want1.n do if grace.is_tensor(want1[i]) then out = out + nbytes(want1[i]) end end
    entry.min_bytes_per_call = ctx.bytes - pool_all + pool1 + out
    entry.flops_per_call = w.flops
    local ref = torch_reference(variant.name)
    entry.has_ref = ref ~= nil
    if ref then
      entry.checks[#entry.checks + 1] = compare("eager vs " .. ref_label .. " (input 1)", want1[1], ref, tol.vs_torch)
    end
    for _, mode in ipairs(modes) do
      local mok, m = xpcall(run_mode, debug.traceback, entry, w, mode, tol, want1, want2, ref, e1_ms, e2_ms)
      if not mok then
        io.stderr:write(variant.name, " ", mode.name, ": ", tostring(m), "\n")
        m = {error = tostring(m):match("^[^\n]*")}
        entry.bad[#entry.bad + 1] = mode.name .. " raised: " .. m.error
      end
      entry.modes[mode.name] = m
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
  if st then entry.device_peak_allocated_bytes_cumulative = st.peak_allocated end
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

if opt.json then
  local f, err = io.open(opt.json, "w")
  if not f then io.stderr:write("run.lua: --json: ", err, "\n"); os.exit(2) end
  f:write(json(result), "\n")
  f:close()
  print("wrote " .. opt.json)
end
if failed then
  io.stderr:write("run.lua: correctness checks FAILED or a workload raised an error (see above); the rest was "
                  .. "timed and written\n")
  os.exit(1)
end
