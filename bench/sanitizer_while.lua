-- sanitizer_while.lua: a compiled grace.while_loop whose body holds a grace.cond, run as one CUDA graph with
-- conditional nodes (graphs forced), 10 calls over loop counts 0..37; each call's count printed against the
-- expected one. A repro for compute-sanitizer: run alone under memcheck it is clean; several copies at once under
-- memcheck on one GPU fault at the first replay (an illegal address, or an out-of-bounds 8-byte read by the
-- predicate's kernel), while the same copies without the tool pass.
-- usage: grace bench/sanitizer_while.lua [cw|w|c|cwdev] [copy|indirect] [empty]   (empty: grace.empty_cache()
--        after every call, which gives the device memory cached by grace back to the driver)
--   cw: cond inside a while, the count a CPU 0-d tensor; w: the while alone; c: a cond alone; cwdev: the count
--   on the device
local case, mode, empty = arg[1] or "cw", arg[2] or "copy", arg[3] == "empty"
grace.graphs(mode)
local x0 = grace.randn(1000):to("cuda")
local body_cond = function(i, v)
  return i + 1, grace.cond(i:remainder(2):eq(0), function(u) return u * 1.01 + 0.5 end,
                           function(u) return u * 0.99 - 0.25 end, v)
end
local body_plain = function(i, v) return i + 1, v * 1.5 - 0.25 end
local f
if case == "cw" or case == "cwdev" then
  f = function(x, k) return grace.while_loop(function(i, v) return i:lt(k) end, body_cond, {grace.tensor(0):to(x.device), x}) end
elseif case == "w" then
  f = function(x, k) return grace.while_loop(function(i, v) return i:lt(k) end, body_plain, {grace.tensor(0):to(x.device), x}) end
else
  f = function(x, k) return grace.cond(k:gt(3), function(u) return u * 1.01 + 0.5 end, function(u) return u * 0.99 - 0.25 end, x) end
end
local cf = grace.compile(f)
local COUNTS = {0, 1, 37, 5, 0, 37, 1, 2, 37, 0}
for c, n in ipairs(COUNTS) do
  local k = grace.tensor(n)
  if case == "cwdev" then k = k:to("cuda") end
  local i, v = cf(x0, k)
  grace.synchronize()
  if empty then grace.empty_cache() end
  print(("CW %s %s call %d: count %d, got %s"):format(case, mode, c, n, tostring(grace.is_tensor(i) and i:numel() == 1 and i:item() or "-")))
end
local r = cf:report()[1] or {}
print(("CW %s %s done: lowering %s, captures %s, replays %s"):format(case, mode, tostring(r.region_lowering), tostring(r.captures), tostring(r.replays)))
