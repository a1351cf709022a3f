-- test_regions_mode.lua: grace.regions(mode), how cond / while_loop regions of device programs are lowered (docs/
-- lua_api.md, "Control flow"): every valid name is taken, an unknown one is an error naming the valid ones, and on
-- the CPU every mode leaves compiled results as the interpreter computes them (the lowerings are CUDA's; values
-- checked against plain Lua). The lowerings themselves are checked by tests/c/test_pred_fake.c and
-- tests/c/test_cond_fake.c (fake driver) and tests/lua/test_gpu_pred.lua (a GPU).
local tap = require "tests.lua.tap"
local grace = require "grace"

for _, m in ipairs({"auto", "host", "nodes", "pred"}) do
  tap.ok(pcall(grace.regions, m), ("grace.regions(%q) is taken"):format(m))
end
tap.ok(pcall(grace.regions), "grace.regions() goes back to GRACE_REGIONS")
local ok, err = pcall(grace.regions, "predicated")
tap.ok(not ok and tostring(err):find("unknown mode 'predicated' (auto, host, nodes or pred)", 1, true) ~= nil,
       "an unknown mode is an error naming the valid ones (" .. tostring(err) .. ")")

local XV = {1.5, -2, 3, 0.25}
local f = function(x)
  return grace.cond(x:sum():gt(0), function(a) return a * 2 + 1 end, function(a) return a end, x)
end
for _, m in ipairs({"host", "nodes", "pred"}) do
  grace.regions(m)
  local cf = grace.compile(f)
  local bad = 0
  for k = 1, 4 do
    local sign = k % 2 == 0 and 1 or -1
    local xs = {}
    for i = 1, #XV do xs[i] = XV[i] * sign end
    local sum = 0
    for i = 1, #xs do sum = sum + xs[i] end
    local got = cf(grace.tensor(xs)):tolist()
    for i = 1, #xs do
      local want = sum > 0 and xs[i] * 2 + 1 or xs[i]
      if math.abs(got[i] - want) > 1e-6 then bad = bad + 1 end
    end
  end
  tap.is(bad, 0, ("regions %q: a compiled cond on the CPU takes both ways as plain Lua computes them"):format(m))
  local st, ir = cf:stats(), cf:ir() or ""
  tap.ok(st.traces == 1 and st.hits == 3 and st.eager_calls == 0 and ir:find("= cond") ~= nil,
         ("regions %q: compiled once, as a program with the cond region (traces %d, hits %d)"):format(m, st.traces, st.hits))
end
grace.regions()
tap.done()
