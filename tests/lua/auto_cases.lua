-- auto_cases.lua: what the tests of automatic regions (test_auto_cond.lua, test_auto_spec.lua) share: the changes of
-- a compiled function's counters over some calls, and the benchmark's stack of layers.
local nn = require "grace.nn"
local M = {}

-- cf's counters now less stats s0 (cf:stats() before the calls), and bad (the calls that differed from eager).
function M.changes(cf, s0, bad)
  local s1 = cf:stats()
  return {bad = bad, replays = s1.replays - s0.replays, runs = s1.partition_runs - s0.partition_runs,
          eager = s1.eager_calls - s0.eager_calls, hits = s1.hits - s0.hits, traces = s1.traces - s0.traces}
end

-- n layers of nn.Linear(D, D) then nn.GELU().
function M.stack(D, n)
  local seq = {}
  for _ = 1, n do seq[#seq + 1] = nn.Linear(D, D); seq[#seq + 1] = nn.GELU() end
  return nn.Sequential(seq)
end
return M
