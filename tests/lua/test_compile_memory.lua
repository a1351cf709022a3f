-- test_compile_memory.lua: outputs of compiled calls that the caller drops are freed soon, as eager results are,
-- without a collection cycle per result.
-- A compiled call's results are small userdata to Lua's collector; unless it is told their bytes (lg_account),
-- a loop of calls keeps every output alive until a full collection (measured before the fix: 300 calls with a
-- 4 MB output grew the process by 1.2 GB). The bound below (256 MB over 1.2 GB of outputs made) is far from both.
local tap = require "tests.lua.tap"
local grace = require "grace"

local function rss_mb()
  local h = io.open("/proc/self/status")
  if not h then return nil end
  local s = h:read("a")
  h:close()
  local kb = s:match("VmRSS:%s+(%d+)")
  return kb and tonumber(kb) / 1024
end

if not rss_mb() then
  tap.skip("no /proc/self/status to read the resident size from", 2)
elseif os.getenv("GRACE_SANITIZED") then
  -- AddressSanitizer keeps freed blocks in its quarantine (256 MB by default): the resident size says nothing here
  tap.skip("under a sanitizer (make asan) the resident size includes its quarantine", 2)
else
  local f = grace.compile(function(a, b) return (a * b + 1):sqrt() end)
  local a, b = grace.rand(1 << 20), grace.rand(1 << 20)
  f(a, b); f(a, b)
  collectgarbage()
  local r0 = rss_mb()
  for _ = 1, 300 do local y = f(a, b) end
  local grew = rss_mb() - r0
  tap.ok(grew < 256, ("300 compiled calls making 4 MB outputs each, dropped: the process grew %.0f MB (< 256)"):format(grew))
  -- eager results, the same check (they were already accounted): the two paths behave alike
  collectgarbage()
  r0 = rss_mb()
  for _ = 1, 300 do local y = (a * b + 1):sqrt() end
  grew = rss_mb() - r0
  tap.ok(grew < 256, ("300 eager expressions making 4 MB results, dropped: the process grew %.0f MB (< 256)"):format(grew))
end

-- Told per tensor, the collector ran most of a cycle for each large result (358 us per 4 MB result with 10 000
-- objects in the heap); the bytes now go to it in batches of at least 64 MB. Cycles are counted with an object
-- whose finalizer counts and makes its successor: 160 results of 4 MB (640 MB) may take 640 / 64 = 10 batches,
-- each at most one cycle, plus a cycle of slack; per result it was about one cycle each.
do
  local cycles = 0
  local function sentinel() setmetatable({}, {__gc = function() cycles = cycles + 1; sentinel() end}) end
  local keep = {}
  for i = 1, 10000 do keep[i] = {i} end   -- a heap worth collecting
  collectgarbage()
  sentinel()
  cycles = 0
  for _ = 1, 160 do local y = grace.empty({1 << 20}) end
  tap.ok(cycles >= 1 and cycles <= 11, ("160 results of 4 MB dropped: %d collection cycles (1 to 11)"):format(cycles))
end
tap.done()
