-- graph_replay.lua: host time per call of a compiled device program replayed as a CUDA graph (issue 7: at most
-- 5 us plus 0.05 us per indirected pointer), against eager launches and graphs fed by input copies. The
-- program sums k inputs of 256 floats (one fused kernel, k + 1 pointers), so the device's share is tiny and
-- the host's enqueue time is what is measured: N calls are timed without a synchronize (the device queue does
-- not fill at these counts), then the device is drained outside the timing. The figure includes the compiled
-- function's own call path (guards, argument checks, result tensors), as a user sees it.
-- Usage: grace bench/graph_replay.lua [calls]
local N = tonumber(arg and arg[1]) or 200
if not grace.cuda_available() then print("graph_replay: no CUDA device; nothing to measure") return end
grace.manual_seed(0)

local function prog(k)
  local names = {}
  for i = 1, k do names[i] = "x" .. i end
  local src = "return function(" .. table.concat(names, ", ") .. ") return " .. table.concat(names, " + ") .. " end"
  return load(src)()
end

local function host_us(f, args)
  for _ = 1, 30 do f(table.unpack(args)) end
  grace.synchronize()
  local best = math.huge
  for _ = 1, 7 do
    local t0 = grace.clock()
    for _ = 1, N do f(table.unpack(args)) end
    local t = (grace.clock() - t0) / N * 1e6
    grace.synchronize()
    if t < best then best = t end
  end
  return best
end

print(("graph_replay: %s, %d calls per measurement, best of 7; host microseconds per call, no synchronize"):format(
  grace.backend(), N))
print("whole call (compiled-function call path included) and, in brackets, replay() alone (table, copy, launch;")
print("min over the calls, timed inside grace); bound: the issue's 5 us + 0.05 us per indirected pointer")
print(("%-6s %-8s %10s %18s %18s %8s  %s"):format("inputs", "pointers", "eager", "copies", "indirect", "bound",
  "indirect: table words, bytes copied per call"))
for _, k in ipairs({2, 4, 16, 30}) do
  local args = {}
  for i = 1, k do args[i] = grace.randn(256):cuda() end
  local row = {}
  for _, mode in ipairs({"off", "copy", "indirect"}) do
    grace.graphs(mode)
    local f = grace.compile(prog(k))
    row[mode] = host_us(f, args)
    local r = f:report()[1] or {}
    row[mode .. "_replay"] = r.replay_host_us_min
    if mode == "indirect" then row.words, row.bytes, row.strategy = r.indirect_words, r.copy_bytes, r.strategy end
  end
  grace.graphs()
  print(("%-6d %-8d %10.2f %9.2f (%5.2f) %9.2f (%5.2f) %8.2f  %s words, %s B (%s)"):format(k, k + 1, row.off, row.copy,
    row.copy_replay or 0, row.indirect, row.indirect_replay or 0, 5 + 0.05 * (k + 1), tostring(row.words),
    tostring(row.bytes), tostring(row.strategy)))
end
