-- test_gpu_graphs.lua: compiled device programs run as CUDA graphs (gpu/gpu_graph.c), under each launch strategy
-- forced ("copy": inputs copied into placeholders; "indirect": pointers through the argument table) and chosen
-- by measurement ("auto"). What a graph must survive: fresh inputs every call; the same input mutated in place
-- between calls; outputs held across 100 calls and compared with eager at the end; two compiled functions
-- interleaved; a function with a break taking both branches; a Lua error between calls; a captured weight
-- updated in place; a host number (0-d CPU tensor) and a dynamic scalar changing every call; a new input
-- layout recording another graph, bounded by GRACE_GRAPH_LIMIT's default. References are the same Lua functions
-- run eagerly on CPU copies (float32; tolerance rtol 1e-4, atol 1e-4 * sqrt(K) for products over K terms).
-- Without a usable CUDA device it prints a TAP skip plan.
local tap = require "tests.lua.tap"
local grace = require "grace"
local H = require "tests.lua.gpu_harness"
local DEV, SEED, to_dev = H.DEV, H.SEED, H.to_dev

local function maxdiff(got, want)
  if got.device ~= DEV and DEV ~= "cpu" then return math.huge, "on " .. got.device end
  local g = got:cpu():double()
  local w = want:double()
  if H.shape(g) ~= H.shape(w) then return math.huge, "shape " .. H.shape(g) .. " vs " .. H.shape(w) end
  return (g - w):abs():max():item(), nil
end

local function close(name, got, want, atol)
  local d, why = maxdiff(got, want)
  local tol = (atol or 1e-4) + 1e-4 * H.absmax(want)
  if not tap.ok(d <= tol, name) then tap.diag(why or ("max |got - want| = %g > %g"):format(d, tol)) end
end

local function report_of(f)
  local r = f:report()
  return r[#r] or {}
end

-- a program with a matmul, a bias and activation epilogue, a row softmax scaled by a host number, a reduction
local K = 64
local function make_prog(W1, b1, W2)
  return function(x, temp)
    local h = (x:matmul(W1) + b1):relu()
    local att = (h:matmul(W2) / temp):softmax(-1)
    return att, (att * h):sum(-1)
  end
end

local MODES = DEV == "cpu" and {"auto"} or {"copy", "indirect", "auto"}
for _, mode in ipairs(MODES) do
  grace.graphs(mode)
  local W1c, b1c, W2c = grace.randn(K, K) * 0.2, grace.randn(K), grace.randn(K, K) * 0.2
  local W1, b1, W2 = to_dev(W1c), to_dev(b1c), to_dev(W2c)
  local fe = make_prog(W1c, b1c, W2c)
  local fc = grace.compile(make_prog(W1, b1, W2))

  -- fresh inputs from a pool of 8, a host temperature changing every call, outputs held over 100 calls
  local pool, poolc = {}, {}
  for i = 1, 8 do poolc[i] = grace.randn(5, K); pool[i] = to_dev(poolc[i]) end
  local held, want = {}, {}
  local bad_now = 0
  for i = 1, 100 do
    local temp = grace.tensor(0.5 + (i % 7) * 0.25)
    local a, s = fc(pool[(i - 1) % 8 + 1], temp)
    local ea, es = fe(poolc[(i - 1) % 8 + 1], temp)
    if maxdiff(a, ea) > 1e-4 or maxdiff(s, es) > 1e-3 then bad_now = bad_now + 1 end
    held[i], want[i] = {a, s}, {ea, es}
  end
  tap.ok(bad_now == 0, mode .. ": 100 calls with fresh inputs and a changing host number match eager (" .. bad_now .. " differ)")
  local bad_end = 0
  for i = 1, 100 do
    if maxdiff(held[i][1], want[i][1]) > 1e-4 or maxdiff(held[i][2], want[i][2]) > 1e-3 then bad_end = bad_end + 1 end
  end
  tap.ok(bad_end == 0, mode .. ": outputs held across 100 calls are still right (" .. bad_end .. " overwritten)")
  local rep = report_of(fc)
  if DEV ~= "cpu" then
    -- the first call traces (running eagerly); the other 99 run the compiled program
    tap.ok(rep.on_device and rep.calls >= 99, mode .. ": the report covers the program (" .. tostring(rep.calls) .. " calls)")
    if mode == "auto" then
      tap.ok(rep.decided, "auto: a strategy was chosen after measuring (" .. tostring(rep.strategy) .. ")")
      local best = math.huge
      for _, us in pairs(rep.us) do best = math.min(best, us) end
      local chosen_us = rep.us[rep.strategy]
      -- (a simpler strategy within 3% of the fastest median is a tie it wins)
      tap.ok(chosen_us ~= nil and chosen_us <= best * 1.03, "auto: the chosen strategy measured fastest, or within 3%")
      local counted = true
      for k in pairs(rep.us) do counted = counted and (rep.samples[k] or 0) >= 5 end
      tap.ok(counted and rep.rechecks ~= nil and rep.switches ~= nil and (rep.from_cache or rep.measure_calls > 0),
        ("auto: each median comes with its timed calls (%s), the re-checks (%s) and the calls measuring (%s)"):format(
        tostring(rep.samples[rep.strategy]), tostring(rep.rechecks), tostring(rep.measure_calls)))
      tap.diag(("auto measured: eager %s us, copies %s us, indirection %s us; chose %s"):format(
        tostring(rep.us.eager), tostring(rep.us["graph+copies"]), tostring(rep.us["graph+indirection"]), rep.strategy))
    else
      local name = mode == "copy" and "graph+copies" or "graph+indirection"
      tap.ok(rep.strategy == name and rep.graphs >= 1, mode .. ": runs as " .. name .. " (" .. tostring(rep.strategy) ..
        (rep.unavailable[name] and (": " .. rep.unavailable[name]) or "") .. ")")
      tap.ok(rep.kernels >= 3, mode .. ": the graph holds the program's kernels (" .. tostring(rep.kernels) .. ")")
      if mode == "indirect" then
        tap.ok(rep.copy_bytes < 1024, mode .. ": under 1 KB copied per call (" .. tostring(rep.copy_bytes) .. ")")
      else
        tap.ok(rep.copy_bytes >= 5 * K * 4, mode .. ": the inputs are copied (" .. tostring(rep.copy_bytes) .. " bytes)")
      end
    end
  end

  -- the same input tensor mutated in place between calls
  local x, xc = to_dev(poolc[1]), poolc[1]:clone()
  local temp = grace.tensor(1.0)
  for i = 1, 6 do
    local a = fc(x, temp)
    close(mode .. ": input mutated in place between calls, call " .. i, a, (fe(xc, temp)))
    x:add_(0.5); xc:add_(0.5)
  end

  -- a captured weight updated in place: the next calls see it
  for i = 1, 4 do
    W1:mul_(1.1); W1c:mul_(1.1)
    local a, s = fc(pool[2], temp)
    local ea, es = fe(poolc[2], temp)
    close(mode .. ": captured weight updated in place, call " .. i, s, es, 1e-3)
  end

  -- a new input layout (batch 3, then a transposed view) records again; old layouts keep working
  local x3c = grace.randn(3, K)
  local xtb = grace.randn(K, 4)
  local xtd = to_dev(xtb)
  for i = 1, 4 do
    close(mode .. ": batch 3, call " .. i, (fc(to_dev(x3c), temp)), (fe(x3c, temp)))
    close(mode .. ": transposed input, call " .. i, (fc(xtd:t(), temp)), (fe(xtb:t(), temp)))
    close(mode .. ": batch 5 again, call " .. i, (fc(pool[3], temp)), (fe(poolc[3], temp)))
  end
  if DEV ~= "cpu" then
    local r = report_of(fc)
    tap.ok(r.graphs <= 8, mode .. ": graphs held stay bounded (" .. tostring(r.graphs) .. ")")
  end

  -- two compiled functions interleaved, each with its own graphs
  local g1 = grace.compile(function(a, b) return (a * b + 1):tanh() end)
  local g2 = grace.compile(function(a, b) return a:matmul(b):sigmoid() end)
  local A, B = grace.randn(16, 16), grace.randn(16, 16)
  local Ad, Bd = to_dev(A), to_dev(B)
  local outs = {}
  for i = 1, 12 do outs[#outs + 1] = {g1(Ad, Bd), (A * B + 1):tanh()}; outs[#outs + 1] = {g2(Bd, Ad), B:matmul(A):sigmoid()} end
  local worst = 0
  for _, o in ipairs(outs) do worst = math.max(worst, (maxdiff(o[1], o[2]))) end
  tap.ok(worst <= 1e-4, mode .. ": two compiled functions interleaved, 24 held outputs right (max diff " .. worst .. ")")

  -- a function with a break taking both branches: its device programs on either side are graphed too
  local br = grace.compile(function(a)
    local y = (a * 2):exp()
    if y:sum():item() > 20 then return (y - 1):log() else return y * 3 end
  end)
  local brs = 0
  for i = 1, 12 do
    local v = grace.full({8}, i % 2 == 0 and 1.0 or -1.0)
    local got = br(to_dev(v))
    local w = (v * 2):exp()
    w = w:sum():item() > 20 and (w - 1):log() or w * 3
    if maxdiff(got, w) <= 1e-4 then brs = brs + 1 end
  end
  tap.ok(brs == 12, mode .. ": a break taking both branches, 12 calls right (" .. brs .. ")")

  -- a Lua error between calls (raised inside the compiled function's Lua side) leaves it working
  local err_f = grace.compile(function(a, fail)
    local y = a:relu() + 1
    if fail then error("stop here") end
    return y * 2
  end)
  local errs, good = 0, 0
  for i = 1, 10 do
    local v = grace.randn(33)
    local ok, got = pcall(err_f, to_dev(v), i % 3 == 0)
    if not ok then errs = errs + 1
    elseif maxdiff(got, (v:relu() + 1) * 2) <= 1e-5 then good = good + 1 end
  end
  tap.ok(errs == 3 and good == 7, mode .. ": Lua errors between calls (" .. errs .. " raised, " .. good .. " of 7 right)")

  -- an index op in the graph: its range check comes back without a wait, and a bad id fails at the first wait for
  -- the device after it (here: reading the call's result), before any value computed with it reaches the host
  local E = grace.randn(10, 6)
  local Ed = to_dev(E)
  local emb = grace.compile(function(ids) return grace.embedding(ids, Ed):sum(-1) * 2 end)
  local egood, ebad = 0, nil
  for i = 1, 10 do
    local ids = grace.tensor({{(i % 10) + 1, ((i * 3) % 10) + 1}}):long()
    if maxdiff(emb(to_dev(ids)), grace.embedding(ids, E):sum(-1) * 2) <= 1e-5 then egood = egood + 1 end
  end
  local okb, errb = pcall(function() return emb(to_dev(grace.tensor({{1, 11}}):long())):cpu() end)
  ebad = not okb and tostring(errb):find("out of range", 1, true) ~= nil
  local after = maxdiff(emb(to_dev(grace.tensor({{2, 3}}):long())), grace.embedding(grace.tensor({{2, 3}}):long(), E):sum(-1) * 2)
  tap.ok(egood == 10 and ebad and after <= 1e-5, mode .. (": embedding: 10 calls right (%d), a bad id fails its call (%s), " ..
    "the next call right"):format(egood, tostring(errb)))
  -- with the flags read late, a replay does not wait for the device: a sync is counted only at the read
  if mode ~= "auto" then   -- (auto measures its strategies on these calls, each launch to completion)
    local ids = to_dev(grace.tensor({{2, 3}}):long())
    local s0 = grace.device_stats().syncs
    local kept = {}
    for i = 1, 5 do kept[i] = emb(ids) end
    local s1 = grace.device_stats().syncs
    tap.ok(s1 - s0 == 0, mode .. (": 5 calls with an index check, %d waits for the device"):format(s1 - s0))
  end

  -- random numbers in a graph: each replay draws what the eager call would (the seed and the generator's offset
  -- are per-call table words), a new seed included
  local rfn = function(a) return a + grace.rand(a:size(), {device = a.device}) end
  local rc = grace.compile(rfn)
  local av = grace.randn(257)
  local ad = to_dev(av)
  local rgot = {}
  grace.manual_seed(SEED + 7)
  for i = 1, 12 do
    if i == 7 then grace.manual_seed(SEED + 8) end
    rgot[i] = rc(ad)
  end
  grace.manual_seed(SEED + 7)
  local rgood = 0
  for i = 1, 12 do
    if i == 7 then grace.manual_seed(SEED + 8) end
    if maxdiff(rgot[i], rfn(av)) == 0 then rgood = rgood + 1 end
  end
  tap.ok(rgood == 12, mode .. ": random numbers drawn in 12 calls (a new seed at call 7) equal eager CPU draws (" ..
    rgood .. ")")

  -- an output that is a view of an input (no fresh memory can stand for it): right on every call
  local vw = grace.compile(function(a) return a:t(), a * 2 end)
  local vgood = 0
  for i = 1, 14 do
    local v = grace.randn(3, 5)
    local t, d = vw(to_dev(v))
    if maxdiff(t, v:t()) == 0 and maxdiff(d, v * 2) == 0 then vgood = vgood + 1 end
  end
  tap.ok(vgood == 14, mode .. ": an output that is a view of an input, 14 calls right (" .. vgood .. ")")

  -- a dynamic scalar (a Lua number promoted after two traces) changing every call
  local dyn = grace.compile(function(a, lr) return a - a:tanh() * lr end, {dynamic = {2}})
  local dgood = 0
  local av = grace.randn(1000)
  for i = 1, 12 do
    local lr = 0.01 * i
    if maxdiff(dyn(to_dev(av), lr), av - av:tanh() * lr) <= 1e-5 then dgood = dgood + 1 end
  end
  tap.ok(dgood == 12, mode .. ": a dynamic scalar changing every call, 12 calls right (" .. dgood .. ")")

  -- softmax and a normalization over two long rows: each row split over blocks that wait for each other (a
  -- cooperative launch), recorded in the graph and replayed with fresh inputs
  local lr = grace.compile(function(a)
    local e = (a - a:max(-1, true)):exp()
    local c = a - a:mean(-1, true)
    return e / e:sum(-1, true), c / ((c * c):mean(-1, true) + 1e-5):sqrt()
  end)
  local lgood = 0
  for i = 1, 8 do
    local v = grace.randn(2, 100003) * (i % 3 + 1)
    local e = (v - v:max(-1, true)):exp()
    local c = v - v:mean(-1, true)
    local s, n = lr(to_dev(v))
    if maxdiff(s, e / e:sum(-1, true)) <= 1e-6 and maxdiff(n, c / ((c * c):mean(-1, true) + 1e-5):sqrt()) <= 1e-4 then
      lgood = lgood + 1
    end
  end
  tap.ok(lgood == 8, mode .. ": softmax and normalization over 2 rows of 100003, 8 calls right (" .. lgood .. ")")
end
grace.graphs()

-- the measured choice is kept with the kernels: the same program compiled again (as another process would)
-- starts decided, without measuring
if DEV ~= "cpu" then
  local name = ("graph-cache-test-%d"):format(SEED)   -- a fresh program text: the first one measures
  local prog = function(a, b) return (a:matmul(b) + 1):relu():sum(-1) end
  local A, B = to_dev(grace.randn(8, 32)), to_dev(grace.randn(32, 16))
  local f1 = grace.compile(prog, {name = name})
  for _ = 1, 60 do f1(A, B) end   -- enough calls for every strategy to be measured (4: 1 + 4 * (9 + 3))
  local r1 = report_of(f1)
  local f2 = grace.compile(prog, {name = name})
  local got = f2(A, B); f2(A, B)
  local r2 = report_of(f2)
  tap.ok(r1.decided and not r1.from_cache and r2.decided and r2.from_cache and r2.strategy == r1.strategy,
    ("a second compile of the same program takes the first one's choice from the cache (%s / %s, from_cache %s)"):format(
      tostring(r1.strategy), tostring(r2.strategy), tostring(r2.from_cache)))
  close("the cached choice runs right", got, (A:cpu():matmul(B:cpu()) + 1):relu():sum(-1))
end

-- GRACE_LOG=launch: the decision (measured now, or read from the launch cache) and its one re-check, 100 calls after
-- it, on stderr (in a process of its own, the program named afresh per seed)
if DEV ~= "cpu" then
  local capture = require "tests.lua.capture"
  local chunk = ([[
local grace = require "grace"
local f = grace.compile(function(a, b) return (a:matmul(b) + 1):relu():sum(-1) end, {name = "launch-log-%d"})
local a, b = grace.randn(8, 32):to("cuda"), grace.randn(32, 16):to("cuda")
for _ = 1, 200 do f(a, b) end
grace.synchronize()
]]):format(SEED)
  local err = capture.stderr_of(chunk, "GRACE_LOG=launch")
  if not err then tap.skip("cannot run a grace process", 1)
  else
    tap.ok(err:find("grace launch: ", 1, true) and (err:find(": kept ", 1, true) or err:find("from the launch cache", 1, true))
           and err:find("re-check", 1, true), "GRACE_LOG=launch: the decision and its re-check on stderr: " .. err:gsub("\n", " | "))
  end
end

-- graphs of both strategies alive at once share the VM's arena: one fed by copies (scratch of 4 to 64 KB, one
-- graph per row count) recorded first, then one with indirection, whose argument table must not be scratch
-- memory of the first (its fixed words would be overwritten by the first's replays), then the two interleaved
if DEV ~= "cpu" then
  local W1c, W2c = grace.randn(64, 1024) * 0.1, grace.randn(1024, 64) * 0.1
  local W1, W2 = to_dev(W1c), to_dev(W2c)
  local mlp = function(W1_, W2_) return function(x) return x:matmul(W1_):relu():matmul(W2_) end end
  grace.graphs("copy")
  local fcopy = grace.compile(mlp(W1, W2))
  local rows, xs, xcs = {1, 2, 4, 8, 16}, {}, {}
  for i, r in ipairs(rows) do xcs[i] = grace.randn(r, 64); xs[i] = to_dev(xcs[i]); fcopy(xs[i]); fcopy(xs[i]) end
  grace.graphs("indirect")
  local find = grace.compile(function(x) return (mlp(W1, W2)(x) * 0.5):tanh() end)
  for i = 1, #rows do find(xs[i]); find(xs[i]) end
  grace.graphs()
  local good, total = 0, 0
  for rep = 1, 4 do
    for i = 1, #rows do
      local a, b = fcopy(xs[i]), find(xs[i])
      local wa = mlp(W1c, W2c)(xcs[i])
      total = total + 2
      if maxdiff(a, wa) <= 1e-3 then good = good + 1 end
      if maxdiff(b, (wa * 0.5):tanh()) <= 1e-3 then good = good + 1 end
    end
  end
  local rc, ri = report_of(fcopy), report_of(find)
  tap.ok(rc.strategy == "graph+copies" and ri.strategy == "graph+indirection",
    "graphs of both strategies alive at once (" .. tostring(rc.strategy) .. ", " .. tostring(ri.strategy) .. ")")
  tap.ok(good == total, ("both strategies' graphs interleaved over one arena: %d of %d calls right"):format(good, total))
end

-- a program that writes into its argument runs as a graph that writes the argument's own storage
if DEV ~= "cpu" then
  grace.graphs("indirect")
  local upd = grace.compile(function(w, g) w:sub_(g * 0.1); return w:sum() end)
  local w0, g0 = grace.randn(64), grace.randn(64)
  local w, g = to_dev(w0), to_dev(g0)
  local v0 = w:version()
  for _ = 1, 5 do upd(w, g) end
  grace.graphs()
  local want = w0 - g0 * 0.1 * 5
  local r = report_of(upd)
  tap.ok(r.strategy == "graph+indirection" and (r.captures or 0) >= 1 and r.no_graph == nil,
         "in-place updates of arguments run as a graph (" .. tostring(r.strategy) .. ", " .. tostring(r.no_graph) .. ")")
  tap.ok(maxdiff(w, want) <= 1e-4 and w:version() == v0 + 5,
         "... into the argument itself: five updates, values and version as eager (" .. maxdiff(w, want) .. ")")
end

tap.done()
