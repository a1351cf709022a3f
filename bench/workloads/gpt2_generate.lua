-- gpt2_generate.lua: benchmark "gpt2_generate", the grace side (bench/torch/gpt2_generate.py is PyTorch's):
-- GPT-2 small (grace.gpt2, the weights of gpt2_decode) generating 256 tokens after a 16-token prompt with
-- grace.generate, greedy, for batch 1 and 8, float32 and bfloat16, a static KV cache (and, with --cache, a
-- growing one). Per configuration and mode: the first run (trace and compile included: its time to first token),
-- then --reps timed runs: time to first token (the prefill call, synchronized) and tokens per second (all rows'
-- new tokens over the whole run; decoding alone too), medians. Also the traces and CUDA graph records that
-- happened after the first 3 tokens of the first run (through the timed runs): the target is none.
-- Modes: compiled (grace.generate's compiled prefill and decode) and eager (the same loop uncompiled).
-- With --weights DIR (written by gpt2_generate.py, or workloads.py for gpt2_decode's weights) the model and the
-- prompts are PyTorch's, and the greedy tokens are compared with PyTorch's when the folder has them.
-- usage: grace bench/workloads/gpt2_generate.lua [--device cuda|cpu] [--small] [--batch 1,8]
--          [--dtype float32,bfloat16] [--cache static[,growing]] [--modes compiled,eager] [--prompt 16]
--          [--new 256] [--reps 3] [--warmup 24] [--graphs auto] [--weights DIR] [--json out.json]
-- --warmup N: compiled generations between the first run and the timed ones, which settle the prefill's
-- compilation and launch decision (default 24: one call traced, then 7 measured calls of each strategy).
-- --small: the tiny config of gpt2_decode (2 layers, d 64, vocab 512), 8-token prompt, 16 new tokens.
-- --graphs MODE: grace.graphs' launch strategy for the compiled steps (auto: measured over their first calls, so
-- CUDA graphs may be recorded after the 3rd token of a first process; indirect: recorded at once).
-- --report: after each compiled configuration, how each step's device programs launch (strategy, kernels, the
-- measured time of each strategy, groups run an op at a time and why), to stderr.
local gpt2 = require "grace.gpt2"
local gen = require "grace.generate"

local HERE = (arg and arg[0] or "bench/workloads/gpt2_generate.lua"):match("^(.*)/[^/]*$") or "."
local fmt = string.format

local function usage(msg)
  io.stderr:write(msg and (msg .. "\n") or "", "usage: grace bench/workloads/gpt2_generate.lua [--device cuda|cpu] ",
    "[--small] [--batch 1,8] [--dtype float32,bfloat16] [--cache static,growing] [--modes compiled,eager] ",
    "[--prompt N] [--new N] [--reps N] [--graphs auto|off|eager|copy|indirect] [--weights DIR] [--json out.json] ",
    "[--report]\n")
  os.exit(2)
end

local opt = {device = "auto", batch = "1,8", dtype = "float32,bfloat16", cache = "static", modes = "compiled,eager",
             reps = 3, warmup = 24, graphs = "auto"}
local flags = {small = true, report = true}
do
  local a, i = arg or {}, 1
  while i <= #a do
    local k, v = a[i]:match("^%-%-([%w_-]+)=(.*)$")
    k = k or a[i]:match("^%-%-([%w_-]+)$")
    if not k then usage("unexpected argument '" .. a[i] .. "'") end
    if flags[k] then opt[k] = true
    elseif k == "help" then usage()
    else
      if v == nil then i = i + 1; v = a[i] end
      if v == nil then usage("--" .. k .. " needs a value") end
      if opt[k] == nil and k ~= "weights" and k ~= "json" and k ~= "prompt" and k ~= "new" then
        usage("unknown option --" .. k)
      end
      opt[k] = v
    end
    i = i + 1
  end
end
local function list(s) local r = {} for x in tostring(s):gmatch("[^,]+") do r[#r + 1] = x end return r end
local function int(v, what) return math.tointeger(tonumber(v)) or usage(what .. " needs an integer") end
opt.reps = int(opt.reps, "--reps")
opt.warmup = int(opt.warmup, "--warmup")
opt.prompt = int(opt.prompt or (opt.small and 8 or 16), "--prompt")
opt.new = int(opt.new or (opt.small and 16 or 256), "--new")
if grace.graphs then   -- applies to the steps compiled from here on
  local ok, err = pcall(grace.graphs, opt.graphs)
  if not ok then usage("--graphs: " .. tostring(err)) end
end
local cuda_ok = grace.cuda_available and grace.cuda_available()
if opt.device == "auto" then opt.device = cuda_ok and "cuda" or "cpu" end
if opt.device == "cuda" and not cuda_ok then usage("--device cuda but no usable CUDA device: " .. grace.backend()) end

-- the sizes of gpt2_decode (one model for both benchmarks, and one set of weights on file)
local CONFIG = opt.small and {layers = 2, d = 64, heads = 4, vocab = 512, max_pos = 64}
                          or {layers = 12, d = 768, heads = 12, vocab = 50257, max_pos = 1024}

local Manifest = dofile(HERE .. "/manifest.lua")
local manifest
if opt.weights then
  local err
  manifest, err = Manifest.read(opt.weights)
  if not manifest then usage("--weights: " .. err) end
end
local function from_file(name, shape)
  local e = manifest[name] or error(fmt("--weights %s: no tensor '%s'", opt.weights, name), 0)
  if table.concat(e.shape, ",") ~= table.concat(shape, ",") then
    error(fmt("--weights %s: '%s' has shape [%s], expected [%s] (--small on one side only?)", opt.weights, name,
              table.concat(e.shape, ","), table.concat(shape, ",")), 0)
  end
  return Manifest.load(e)
end

local function build_model(dtype)
  grace.manual_seed(2)
  local o = {dtype = dtype, device = opt.device}
  if manifest then o.make = function(name, shape) return from_file("gpt2." .. name, shape) end end
  return gpt2.new(CONFIG, o)
end

local function prompt_ids(B)
  if manifest then return from_file(("gpt2_generate.prompt.b%d.p%d"):format(B, opt.prompt), {B, opt.prompt}) + 1 end
  grace.manual_seed(1000 + B)
  return grace.randint(1, CONFIG.vocab + 1, {B, opt.prompt})
end

-- counts of a compiled step: traces, and CUDA graph captures over its device programs
local function counts(steps)
  local t, g = 0, 0
  for _, f in pairs(steps) do
    if type(f) ~= "function" then   -- a compiled function (eager mode has the plain ones)
      t = t + f:stats().traces
      for _, r in ipairs(f:report()) do g = g + (r.captures or 0) end
    end
  end
  return t, g
end

-- how each compiled step's device programs launch, for --report
local function print_report(label, steps)
  for name, f in pairs(steps) do
    if type(f) ~= "function" then
      for k, r in ipairs(f:report()) do
        local us = {}
        for n, v in pairs(r.us or {}) do us[#us + 1] = fmt("%s %.1f", n, v) end
        table.sort(us)
        io.stderr:write(fmt("%s %s program %d: %s, %d kernels, %d groups an op at a time%s%s%s\n", label, name, k,
          tostring(r.strategy), r.kernels or 0, r.unfused or 0, r.unfused_why and (" (" .. r.unfused_why .. ")") or "",
          #us > 0 and ("; measured us: " .. table.concat(us, ", ")) or "", r.no_graph and ("; no graph: " .. r.no_graph) or ""))
      end
    end
  end
end

local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s[(#s + 1) // 2]
end

local function run_config(dtype, B, kind, mode)
  local r = {dtype = dtype, batch = B, cache = kind, mode = mode, prompt = opt.prompt, new_tokens = opt.new}
  local model = build_model(dtype)
  local prompt = prompt_ids(B)
  local gopts = {max_new_tokens = opt.new, temperature = 0, cache = kind, compile = mode == "compiled"}
  -- the first run: traces and compiles; the counts are taken after its third token
  local at3, steps
  gopts.on_token = function(i, _, info)
    steps = info.steps
    if i == 3 then at3 = {counts(steps)} end
  end
  local ids, info = gen.generate(model, prompt, gopts)
  r.first_run_first_token_ms = info.first_token_s * 1e3
  r.first_run_tokens_per_s = info.tokens_per_s
  gopts.on_token = nil
  -- warm-up: the prefill runs once a generation, so its program is compiled in the second one and its launch
  -- strategy measured over the calls after; whole generations (the cache's size is the run's) settle that
  for _ = 1, mode == "compiled" and opt.warmup or 0 do gen.generate(model, prompt, gopts) end
  local w_traces, w_records = counts(steps)
  local ttft, tps, dtps, first = {}, {}, {}, nil
  for k = 1, opt.reps do
    local again, inf = gen.generate(model, prompt, gopts)
    if k == 1 then first = again; r.first_run_equals_timed = grace.equal(again, ids) end
    if k == 2 then r.tokens_repeat = grace.equal(again, first) end
    ttft[k], tps[k] = inf.first_token_s * 1e3, inf.tokens_per_s
    dtps[k] = inf.new_tokens > 1 and B * (inf.new_tokens - 1) / inf.decode_s or 0
  end
  if opt.reps < 2 then r.tokens_repeat = true end
  r.first_token_ms, r.tokens_per_s, r.decode_tokens_per_s = median(ttft), median(tps), median(dtps)
  local t1, g1 = counts(steps)
  r.traces_total, r.graph_records_total = t1, g1
  r.traces_timed, r.graph_records_timed = t1 - w_traces, g1 - w_records
  if opt.report and mode == "compiled" then print_report(fmt("%s b%d %s", dtype, B, kind), steps) end
  if at3 then
    r.traces_after_3_tokens, r.graph_records_after_3_tokens = t1 - at3[1], g1 - at3[2]
  end
  return r, ids
end

local result = {system = "grace", device = opt.device, backend = grace.backend(), small = opt.small or false,
                graphs = opt.graphs,
                config = CONFIG, prompt = opt.prompt, new_tokens = opt.new, reps = opt.reps,
                method = "greedy generation with grace.generate; the first run traces and compiles (first_run_*; "
                  .. "the counts *_after_3_tokens run from its 3rd token through the timed runs), warmup runs "
                  .. "(the prefill's compilation and launch decision; *_timed: the counts in the timed "
                  .. "runs, after them), then reps timed runs: first_token_ms (prefill, synchronized), tokens_per_s (batch * new tokens / whole "
                  .. "run), decode_tokens_per_s (batch * (new - 1) / decode time); medians",
                runs = {}}
local failed = false
print(fmt("gpt2_generate (grace %s, %s): prompt %d, %d new tokens, greedy, %s", grace.version, grace.backend(),
          opt.prompt, opt.new, manifest and ("weights from " .. opt.weights) or "seeded random weights"))
print(fmt("%-9s %5s %-8s %-9s %10s %10s %11s %9s %13s %13s %s", "dtype", "batch", "cache", "mode", "TTFT ms",
          "tokens/s", "decode t/s", "1st TTFT", "trace/rec>3t", "trace/rec tm", "check"))
for _, dtype in ipairs(list(opt.dtype)) do
  for _, b in ipairs(list(opt.batch)) do
    local B = int(b, "--batch")
    for _, kind in ipairs(list(opt.cache)) do
      local tokens = {}
      for _, mode in ipairs(list(opt.modes)) do
        local ok, r, ids = xpcall(run_config, debug.traceback, dtype, B, kind, mode)
        if not ok then
          io.stderr:write(fmt("%s b%d %s %s: %s\n", dtype, B, kind, mode, r))
          r = {dtype = dtype, batch = B, cache = kind, mode = mode, error = tostring(r):match("^[^\n]*")}
          failed = true
        else
          tokens[mode] = ids
          local checks = {}
          if not r.tokens_repeat then checks[#checks + 1] = "RUNS DIFFER" end
          if r.first_run_equals_timed == false then checks[#checks + 1] = "first run differs" end
          if tokens.compiled and mode ~= "compiled" then
            r.equal_to_compiled = grace.equal(ids, tokens.compiled)
            checks[#checks + 1] = r.equal_to_compiled and "= compiled" or "differs from compiled"
          end
          local tname = ("gpt2_generate.tokens.%s.b%d.p%d.n%d"):format(dtype, B, opt.prompt, opt.new)
          if manifest and manifest[tname] then
            local want = Manifest.load(manifest[tname]) + 1
            local got = ids:cpu():narrow(2, opt.prompt + 1, opt.new)
            local same = got:eq(want):sum():item()
            r.tokens_equal_to_pytorch = same
            checks[#checks + 1] = fmt("%d/%d tokens = PyTorch's", same, want:numel())
          end
          r.check = table.concat(checks, ", ")
        end
        result.runs[#result.runs + 1] = r
        if r.error then
          print(fmt("%-9s %5d %-8s %-9s ERROR %s", dtype, B, kind, mode, r.error))
        else
          print(fmt("%-9s %5d %-8s %-9s %10.2f %10.1f %11.1f %9.1f %13s %13s %s", dtype, B, kind, mode,
                    r.first_token_ms, r.tokens_per_s, r.decode_tokens_per_s, r.first_run_first_token_ms,
                    fmt("%s/%s", r.traces_after_3_tokens or "-", r.graph_records_after_3_tokens or "-"),
                    fmt("%d/%d", r.traces_timed, r.graph_records_timed), r.check))
        end
        collectgarbage()
        if grace.empty_cache then grace.empty_cache() end
      end
    end
  end
end

local function json(v, ind)
  ind = ind or ""
  local t = type(v)
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    return math.type(v) == "integer" and tostring(v) or fmt("%.6g", v)
  elseif t == "string" then return (fmt("%q", v):gsub("\\\n", "\\n"))
  elseif t ~= "table" then return tostring(v) end
  local inner, parts = ind .. "  ", {}
  if #v > 0 then
    for i = 1, #v do parts[i] = inner .. json(v[i], inner) end
    return "[\n" .. table.concat(parts, ",\n") .. "\n" .. ind .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys)
  for i, k in ipairs(keys) do parts[i] = inner .. fmt("%q", k) .. ": " .. json(v[k], inner) end
  return "{\n" .. table.concat(parts, ",\n") .. "\n" .. ind .. "}"
end
if opt.json then
  local f = assert(io.open(opt.json, "w"))
  f:write(json(result), "\n")
  f:close()
  print("wrote " .. opt.json)
end
if failed then os.exit(1) end
