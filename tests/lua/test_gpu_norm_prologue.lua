-- test_gpu_norm_prologue.lua: layer norm (and RMS norm) as the prologue of the device GEMVs that read it
-- (docs/lua_api.md, "Matrix products"). layer_norm -> linear for K in {64, 768, 1000, 4096}, 1, 3, 8 rows, float32
-- and bfloat16: the compiled function against the same function run eagerly on the device, and against the same
-- function compiled with the prologue off (grace.norm_prologue(false): the norm decomposed into its row kernel),
-- launched kernel by kernel (the GEMV_NT path; with one row the compiled call launches one kernel fewer, with more
-- the norm keeps its kernel) and as a CUDA graph
-- (weights settled: the GEMV_RW path where rows are short); RMS norm too, and grouped-query q, k, v projections of
-- one RMS norm. Then a GPT-2-like decode step (grace.gpt2's blocks, d 768, 2 layers): compiled against eager, and
-- the kernels per call fall by the 2 * layers + 1 norms.
-- Without a usable CUDA device it prints a TAP skip plan.
--
-- Tolerances, |got - want| <= atol + rtol * |want|: float32 rtol 1e-4, atol 1e-4 * sqrt(K) * max|want| (sums of K
-- products, reassociated; the statistics in float32 here, in double in the row kernel); bfloat16 rtol 6e-2, atol
-- 6e-2 * max|want| (the normalised row is rounded to bfloat16 as the norm's result is, and a statistic a rounding
-- apart may move an element by one bfloat16 step).
local tap = require "tests.lua.tap"
local grace = require "grace"
local gpt2 = require "grace.gpt2"

local H = require "tests.lua.gpu_harness"
local DEV = H.DEV

-- whether got is want within the tolerance of dtype dt, and the largest difference
local function near(got, want, K, dt)
  local g, w = got:cpu():double(), want:cpu():double()
  local m = math.max(H.absmax(w), 1e-3)
  local rtol, atol = 1e-4, 1e-4 * math.sqrt(K) * m
  if dt == "bfloat16" then rtol, atol = 6e-2, 6e-2 * m end
  local d = (g - w):abs()
  local bad = (d - (w:abs() * rtol + atol)):max():item()
  return bad <= 0, d:max():item()
end
-- kernels one call of f launches (graphs off: every kernel is a launch), after a warm-up call
local function launches(f, ...)
  f(...)
  grace.synchronize()
  local s0 = grace.device_stats().kernel_launches
  local r = f(...)
  grace.synchronize()
  return grace.device_stats().kernel_launches - s0, r
end

grace.matmul_backend("grace")   -- no timing against cuBLASLt: the kernel counts stay those of grace's kernels

local function linear_case(K, rows, dt, norm, graphs)
  local N = 96
  local x = H.to_dev((grace.randn(rows, K) * 2 + 0.5):to(dt))
  local w = H.to_dev((grace.randn(K) * 0.1 + 1):to(dt))
  local b = H.to_dev((grace.randn(K) * 0.1):to(dt))
  local W = H.to_dev((grace.randn(N, K) * (1 / math.sqrt(K))):to(dt))
  local bias = H.to_dev((grace.randn(N) * 0.1):to(dt))
  local function fn(x_, w_, b_, W_, bias_)
    local h = norm == "rms" and grace.rms_norm(x_, w_) or grace.layer_norm(x_, w_, b_)
    return h:matmul(W_:t()) + bias_
  end
  local label = ("%s K %d, %d rows, %s%s"):format(norm, K, rows, dt, graphs == "off" and "" or ", graph")
  grace.graphs(graphs)
  local want = fn(x, w, b, W, bias)   -- eager on the device: the norm kernel, then the product
  -- the switch is read when a program is built: at the first call
  local on, off = grace.compile(function(...) return fn(...) end), grace.compile(function(...) return fn(...) end)
  grace.norm_prologue(true)
  local n_on, got = launches(on, x, w, b, W, bias)
  grace.norm_prologue(false)
  local n_off, ref = launches(off, x, w, b, W, bias)
  grace.norm_prologue()
  for _ = 1, 2 do got = on(x, w, b, W, bias) end   -- graphs: captured by now, replayed
  local ok1, d1 = near(got, want, K, dt)
  tap.ok(ok1, ("%s: compiled with the prologue equals eager (max |diff| %.3g)"):format(label, d1))
  local ok2, d2 = near(got, ref, K, dt)
  tap.ok(ok2, ("%s: equals the compiled program without it (max |diff| %.3g)"):format(label, d2))
  if graphs == "off" and DEV ~= "cpu" and rows == 1 then
    tap.is(n_on, n_off - 1, label .. ": one kernel fewer a call (the norm's)")
  elseif graphs == "off" and DEV ~= "cpu" then
    tap.is(n_on, n_off, label .. ": the norm keeps its kernel (more than one row)")
  end
end

for _, dt in ipairs({"float32", "bfloat16"}) do
  for _, K in ipairs({64, 768, 1000, 4096}) do
    for _, rows in ipairs({1, 3, 8}) do linear_case(K, rows, dt, "layer", "off") end
    linear_case(K, 2, dt, "layer", "indirect")
  end
  linear_case(768, 1, dt, "rms", "off")
  linear_case(768, 4, dt, "rms", "indirect")
end
grace.graphs()

-- Grouped-query projections of one RMS norm (q [768 -> 768], k and v [768 -> 128]): one kernel group, each GEMV
-- normalising its rows.
for _, dt in ipairs({"float32", "bfloat16"}) do
  for _, graphs in ipairs({"off", "indirect"}) do
    local K = 768
    local x = H.to_dev((grace.randn(1, 1, K) * 2):to(dt))
    local w = H.to_dev((grace.randn(K) * 0.1 + 1):to(dt))
    local Wq = H.to_dev((grace.randn(K, K) * (1 / math.sqrt(K))):to(dt))
    local Wk = H.to_dev((grace.randn(128, K) * (1 / math.sqrt(K))):to(dt))
    local Wv = H.to_dev((grace.randn(128, K) * (1 / math.sqrt(K))):to(dt))
    local function fn(x_, w_, q_, k_, v_)
      local h = grace.rms_norm(x_, w_)
      return h:matmul(q_:t()), h:matmul(k_:t()), h:matmul(v_:t())
    end
    grace.graphs(graphs)
    local want = {fn(x, w, Wq, Wk, Wv)}
    local on, off = grace.compile(function(...) return fn(...) end), grace.compile(function(...) return fn(...) end)
    grace.norm_prologue(true)
    local n_on = launches(on, x, w, Wq, Wk, Wv)
    local got = {on(x, w, Wq, Wk, Wv)}
    grace.norm_prologue(false)
    local n_off = launches(off, x, w, Wq, Wk, Wv)
    local ref = {off(x, w, Wq, Wk, Wv)}
    grace.norm_prologue()
    local label = ("grouped-query q, k, v, %s%s"):format(dt, graphs == "off" and "" or ", graph")
    for i, name in ipairs({"q", "k", "v"}) do
      local ok1, d1 = near(got[i], want[i], K, dt)
      local ok2, d2 = near(got[i], ref[i], K, dt)
      tap.ok(ok1 and ok2, ("%s: %s equals eager and the program without the prologue (%.3g, %.3g)"):format(label, name,
                                                                                                          d1, d2))
    end
    if graphs == "off" and DEV ~= "cpu" then tap.is(n_on, n_off - 1, label .. ": one kernel fewer a call") end
  end
end
grace.graphs()

-- A GPT-2-like decode step: the new token against `cached` past keys and values per layer (as
-- bench/workloads/gpt2_decode.lua), grace.gpt2's blocks and head.
do
  local c = {layers = 2, d = 768, heads = 12, vocab = 1024, max_pos = 64}
  local cached, hd = 16, 768 // 12
  for _, dt in ipairs({"float32", "bfloat16"}) do
    local model = gpt2.new(c, {dtype = dt, device = DEV})
    local scale = 1 / math.sqrt(hd)
    local function step(ids, past_k, past_v)
      local x = grace.embedding(ids, model.p.wte) + model.p.wpe:narrow(1, cached + 1, 1)
      local function attend(i, q, k, v)
        local Kc = grace.cat({past_k[i], k}, 3)
        local Vc = grace.cat({past_v[i], v}, 3)
        return ((q:matmul(Kc:transpose(-2, -1)) * scale):softmax(-1)):matmul(Vc)
      end
      for i = 1, c.layers do x = model:block(i, x, attend) end
      return model:head(x)
    end
    local ids = H.to_dev(grace.tensor({{7}}, {dtype = "int64"}))
    local pk = H.to_dev(grace.randn(c.layers, 1, c.heads, cached, hd):to(dt))
    local pv = H.to_dev(grace.randn(c.layers, 1, c.heads, cached, hd):to(dt))
    grace.graphs("off")
    local want = step(ids, pk, pv)
    local on, off = grace.compile(function(...) return step(...) end), grace.compile(function(...) return step(...) end)
    grace.norm_prologue(true)
    local n_on, got = launches(on, ids, pk, pv)
    grace.norm_prologue(false)
    local n_off, ref = launches(off, ids, pk, pv)
    grace.norm_prologue()
    grace.graphs()
    local label = "GPT-2-like decode step, " .. dt
    local ok1, d1 = near(got, want, c.d, dt)
    tap.ok(ok1, ("%s: compiled with the prologue equals eager (max |diff| %.3g)"):format(label, d1))
    local ok2, d2 = near(got, ref, c.d, dt)
    tap.ok(ok2, ("%s: equals the compiled step without it (max |diff| %.3g)"):format(label, d2))
    tap.diag(("%s: %d kernels a call with the prologue, %d without"):format(label, n_on, n_off))
    tap.ok(DEV == "cpu" or n_off - n_on >= 2 * c.layers + 1,
           ("%s: the kernels per call fall by the %d norms at least (%d -> %d)"):format(label, 2 * c.layers + 1, n_off,
                                                                                      n_on))
  end
end

grace.matmul_backend()
tap.done()
