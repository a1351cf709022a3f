-- call_split.lua: where a compiled call's latency goes, per launch strategy: the host time until the call returns
-- and the time until the device is done after it (a synchronize), medians over calls. For a workload whose
-- measured launch choice disagrees with the suite's latency (bench/choice.py), it tells host work outside the
-- timed program from device time. Seeded random weights, a pool of 8 inputs as in the suite (or 1).
-- usage: grace bench/call_split.lua VARIANT [calls] [pool] [modes] [device] [small]   (modes: comma list of
--        grace.graphs modes, default off,copy,auto; device cuda (default) or cpu; "small": the workload's small
--        configuration, where on the CPU the call's host work outweighs its arithmetic)
local HERE = (arg and arg[0] or "bench/call_split.lua"):match("^(.*)/[^/]*$") or "."
package.path = HERE .. "/workloads/?.lua;" .. package.path
local want, calls, npool = arg[1] or "branch_cond", tonumber(arg[2] or "60"), tonumber(arg[3] or "8")
local modes = {}
for m in (arg[4] or "off,copy,auto"):gmatch("[^,]+") do modes[#modes + 1] = m end
local device, small = arg[5] or "cuda", arg[6] == "small"
local w, why = require("seeded").build(want, {device = device, npool = npool, small = small})
if not w then io.stderr:write("call_split.lua: ", why, "\n"); os.exit(2) end
local function med(t) table.sort(t) return t[(#t + 1) // 2] * 1e6 end

for _, mode in ipairs(modes) do
  grace.graphs(mode)
  local f = grace.compile(w.fn)
  local function call(k) return f(table.unpack(w.pool[(k - 1) % #w.pool + 1])) end
  for k = 1, 260 do call(k) end   -- past the launch decision and its re-check
  grace.synchronize()
  local host, total, gap = {}, {}, {}
  for k = 1, calls do
    local t0 = grace.clock()
    call(k)
    local t1 = grace.clock()
    grace.synchronize()
    local t2 = grace.clock()
    host[k], total[k], gap[k] = t1 - t0, t2 - t0, t2 - t1
  end
  local kept = {}
  for _, r in ipairs(f:report()) do
    if r.on_device then kept[#kept + 1] = ("%s/%s"):format(r.strategy, tostring(r.region_lowering or "-")) end
  end
  print(("CALL_SPLIT %s graphs=%s pool=%d: host until return %.1f us, then device %.1f us, call+sync %.1f us; kept %s")
        :format(want, mode, #w.pool, med(host), med(gap), med(total), table.concat(kept, " ")))
end
