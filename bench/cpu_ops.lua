-- cpu_ops.lua: CPU time of elementwise ops and reductions on 1M float32 elements against NumPy on the same
-- machine (bench/cpu_ops.py, run with Debian's python3). Median of repeated calls; each call allocates its
-- output, as NumPy's does. Usage: grace bench/cpu_ops.lua [reps]
local reps = tonumber(arg and arg[1]) or 50
local a, b = grace.rand(1 << 20), grace.rand(1 << 20)
local m = a:reshape(1024, 1024)

local cases = {
  {"add", function() return a + b end},
  {"mul", function() return a * b end},
  {"exp", function() return a:exp() end},
  {"sum", function() return a:sum() end},
  {"softmax", function() return m:softmax(-1) end},
}

local function median(f)
  for _ = 1, 5 do f() end
  local ts = {}
  for i = 1, reps do
    local t0 = grace.clock()
    f()
    ts[i] = grace.clock() - t0
  end
  table.sort(ts)
  return ts[reps // 2 + 1]
end

local py = io.popen("sh tests/python.sh")
local python = py:read("l") or "/usr/bin/python3"
py:close()
local np = {}
local p = io.popen(python .. " bench/cpu_ops.py " .. reps)
for line in p:lines() do
  local name, t = line:match("^(%S+) (%S+)$")
  if name then np[name] = tonumber(t) end
end
p:close()

print(("grace %s, %s; NumPy via %s; median of %d calls"):format(grace.version, grace.backend(), python, reps))
print(("%-8s %12s %12s %8s"):format("op", "grace ms", "numpy ms", "ratio"))
for _, c in ipairs(cases) do
  local g = median(c[2])
  local n = np[c[1]]
  print(("%-8s %12.3f %12s %8s"):format(c[1], g * 1e3, n and ("%.3f"):format(n * 1e3) or "-",
                                       n and ("%.2f"):format(g / n) or "-"))
end
