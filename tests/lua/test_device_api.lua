-- test_device_api.lua: the device-facing Lua API as it behaves on any machine (docs/lua_api.md): grace.device_time
-- (CPU wall time, errors passed through, "cuda" without a device an error), grace.reset_peak_memory and
-- device_stats' kernel_launches, grace.graphs and grace.matmul_backend (modes and a bad name), f:report /
-- grace.report for a function whose programs never ran on a device. What they measure on a GPU is checked by
-- tests/lua/test_gpu_graphs.lua, tests/c/test_cg_matmul.c and the benchmark suite.
local tap = require "tests.lua.tap"
local grace = require "grace"

-- device_time on the CPU: the wall time of the call, in ms
local ran = false
local ms, dev = grace.device_time("cpu", function(n) ran = n == 7; grace.rand(1000):sum() end, 7)
tap.ok(ran and type(ms) == "number" and ms >= 0 and dev == "cpu", "device_time('cpu', fn, ...) calls fn(...) and gives ms, 'cpu'")
local t0 = grace.clock()
local slept = grace.device_time("cpu", function() local t = grace.clock(); while grace.clock() - t < 0.02 do end end)
tap.ok(slept >= 19 and slept <= (grace.clock() - t0) * 1e3 + 1, ("a 20 ms busy loop measures %.1f ms"):format(slept))
local ok, err = pcall(grace.device_time, "cpu", function() error("boom") end)
tap.ok(not ok and tostring(err):find("boom", 1, true), "an error in fn is raised as it is")
if not grace.cuda_available() then
  ok, err = pcall(grace.device_time, "cuda", function() end)
  tap.ok(not ok and tostring(err):find("no usable device", 1, true), "'cuda' without a device is an error saying so")
  local _, d = grace.device_time(function() end)
  tap.is(d, "cpu", "the default device is the CPU when no CUDA device is usable")
end

-- device statistics and the peak
grace.reset_peak_memory()
local s = grace.device_stats()
tap.ok(type(s.kernel_launches) == "number" and s.kernel_launches >= 0, "device_stats has kernel_launches")
tap.ok(type(s.peak_allocated) == "number" and s.peak_allocated >= s.allocated, "peak_allocated >= allocated after a reset")

-- launch modes
for _, m in ipairs({"auto", "off", "eager", "copy", "indirect", "update"}) do
  tap.ok(pcall(grace.graphs, m), "grace.graphs('" .. m .. "') is accepted")
end
ok, err = pcall(grace.graphs, "sometimes")
tap.ok(not ok and tostring(err):find("unknown mode 'sometimes'", 1, true), "an unknown mode is an error naming it")
grace.graphs()

-- the matrix product's implementation
for _, m in ipairs({"auto", "grace", "cublaslt"}) do
  tap.ok(pcall(grace.matmul_backend, m), "grace.matmul_backend('" .. m .. "') is accepted")
end
ok, err = pcall(grace.matmul_backend, "mkl")
tap.ok(not ok and tostring(err):find("unknown implementation 'mkl'", 1, true),
       "an unknown implementation is an error naming it")
grace.matmul_backend()

-- reports for programs that never ran on a device
local f = grace.compile(function(x) return x * 2 + 1 end)
f(grace.ones(3)); f(grace.ones(3))
tap.is(#f:report(), 0, "f:report() lists no device program for a CPU-only function")
local text, r = require("tests.lua.capture").printed(grace.report, f)
tap.ok(type(r) == "table" and #r == 0, "grace.report returns the same list")
tap.ok(text:find("no program has run on the CUDA device yet", 1, true), "and prints that nothing ran on the device")
ok, err = pcall(grace.report, function() end)
tap.ok(not ok, "grace.report of a plain function is an error")
tap.done()
