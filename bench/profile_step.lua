-- profile_step.lua: one workload's compiled call launched kernel by kernel (graphs off), for a profiler
-- (bench/device.sh profile runs it under Nsight Compute). Builds the variant with seeded random weights on the
-- device, compiles its step, calls it `calls` times, and prints how many kernels the last call launched, so the
-- profiler's last rows can be read as that call's kernels; then the same call's latency with graphs (auto).
-- usage: grace bench/profile_step.lua VARIANT [calls] [graph]   (VARIANT: gpt2_decode_bf16, st, mlp, ...; with
--        "graph" only the latency of a call as a graph is printed, for running outside the profiler)
local HERE = (arg and arg[0] or "bench/profile_step.lua"):match("^(.*)/[^/]*$") or "."
package.path = HERE .. "/workloads/?.lua;" .. package.path
local want, calls, graph_only = arg[1] or "gpt2_decode_bf16", tonumber(arg[2] or "3"), arg[3] == "graph"
local w, why = require("seeded").build(want, {device = "cuda", npool = 1})
if not w then io.stderr:write("profile_step.lua: ", why, "\n"); os.exit(2) end
local args = w.pool[1]

if not graph_only then
  grace.graphs("off")
  local step = grace.compile(w.fn)
  local before
  for _ = 1, calls do
    grace.synchronize()
    before = grace.device_stats().kernel_launches
    step(table.unpack(args))
  end
  grace.synchronize()
  print(("PROFILE_LAST_CALL_KERNELS %d"):format(grace.device_stats().kernel_launches - before))
  for i, r in ipairs(step:report()) do   -- groups that ran an op at a time say why here
    io.stderr:write(("program %d: %d kernels, %d groups an op at a time%s\n"):format(i, r.kernels, r.unfused,
      r.unfused_why and (": " .. r.unfused_why) or ""))
  end
  return
end

-- the same program as graphs, for the time a call takes when launches cost nothing on the host
grace.graphs("auto")
local g = grace.compile(w.fn)
-- past the launch decision (about 11 calls a candidate) and its one re-check (100 calls later)
for _ = 1, 160 do g(table.unpack(args)) end
grace.synchronize()
local t = {}
for i = 1, 50 do
  t[i] = grace.device_time(function() g(table.unpack(args)) end)
end
table.sort(t)
print(("PROFILE_GRAPH_CALL_US %.1f"):format(t[25] * 1e3))
local kernels = 0   -- what one replay launches (the boundaries' count for profile_summary.py --gaps)
for _, r in ipairs(g:report()) do kernels = kernels + (r.kernels or 0) end
print(("PROFILE_GRAPH_KERNELS %d"):format(kernels))
