-- compile_overhead.lua: host time of a compiled call's fast path (guard check and dispatch) on the CPU:
-- 4 tensor arguments, no ops (pure overhead) and 4 tiny ops, against eager Lua calling the same ops; and the
-- per-op cost of replaying a function with a graph break.
-- Usage: grace bench/compile_overhead.lua [iterations]
local n = tonumber(arg and arg[1]) or 200000
local a, b, c, d = grace.rand(4), grace.rand(4), grace.rand(4), grace.rand(4)

local function time(f)
  for _ = 1, 1000 do f(a, b, c, d) end            -- warm up (and trace)
  local best = math.huge
  for _ = 1, 5 do
    local t0 = grace.clock()
    for _ = 1, n do f(a, b, c, d) end
    best = math.min(best, (grace.clock() - t0) / n)
  end
  return best * 1e6
end

local function none(x, y, z, w) return x end
local function tiny(x, y, z, w) return ((x + y) * z - w):relu() end

-- a function with a graph break: its Lua code runs on every call, ops are matched and deferred (replay)
local function broken(x, y, z, w)
  local s = x + y
  for _ = 1, 9 do s = s * z + w end
  if s:sum():item() > 1e30 then return s end      -- the break: a host read
  for _ = 1, 9 do s = s * z - w end
  return s
end
local ops = 1 + 18 + 18 + 1                           -- tensor ops per call

local rows = {
  {"no ops, eager Lua call", time(none)},
  {"no ops, compiled (guards + dispatch)", time(grace.compile(none))},
  {"4 tiny ops, eager", time(tiny)},
  {"4 tiny ops, compiled", time(grace.compile(tiny))},
  {"38 tiny ops and a break, eager", time(broken)},
  {"38 tiny ops and a break, replayed", time(grace.compile(broken))},
}
print(("%-40s %10s"):format("case (4 tensor arguments of 4 floats)", "us/call"))
for _, r in ipairs(rows) do print(("%-40s %10.3f"):format(r[1], r[2])) end
print(("replay cost per op over eager: %.3f us"):format((rows[6][2] - rows[5][2]) / ops))
