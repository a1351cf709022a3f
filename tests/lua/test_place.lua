-- test_place.lua: the placement report as a script sees it (ir/ir_place.c through grace.explain and
-- GRACE_LOG=placement). On the CPU every value is on the host, so the report says "no device partition"; where a
-- CUDA device is usable, the speech-transformer pattern (x on the device, a temperature held as a 0-d CPU tensor,
-- softmax(x / temperature)) is one device partition with the temperature a device-resident scalar at its script
-- line. The device-typed cases themselves are golden-tested from C in tests/c/test_place.c.
local tap = require "tests.lua.tap"
local grace = require "grace"

local SRC = debug.getinfo(1, "S").short_src

local capture = require "tests.lua.capture"
local explain = capture.explain
-- What a chunk run in a fresh grace process with GRACE_LOG=placement writes to stderr (nil: cannot run one).
local function placement_log(chunk) return capture.stderr_of(chunk, "GRACE_LOG=placement") end

local speech = function(x, t) return (x / t):softmax(-1) end
local SPEECH_AT = SRC .. ":" .. debug.getinfo(speech, "S").linedefined   -- where the temperature meets the device

-- on the CPU: a placement section that says there is no device partition
local rep, printed = explain(speech, grace.randn(1, 8, 64, 64), grace.tensor(2.0))
tap.ok(rep:find("\n  placement:\n", 1, true) ~= nil, "explain has a placement section")
tap.ok(rep:find("    no device partition: every value is on the CPU", 1, true) ~= nil,
       "CPU arguments only: no device partition")
tap.ok(printed:find("no device partition", 1, true) ~= nil, "explain prints the placement too")

local log = placement_log([[
local f = grace.compile(function(x, t) return (x / t):softmax(-1) end)
f(grace.randn(2, 4), grace.tensor(2.0))
]])
if log then
  tap.ok(log:find("grace: placement of function at ", 1, true) ~= nil and log:find("no device partition", 1, true) ~= nil,
         "GRACE_LOG=placement: one line per decision and the summary, on stderr")
else
  tap.skip("cannot run a second grace process")
end

if grace.cuda_available() then
  local x, t = grace.randn(1, 8, 64, 64):cuda(), grace.tensor(0.5)
  local r = explain(speech, x, t)
  tap.ok(r:find("one device partition", 1, true) ~= nil, "speech pattern: one device partition")
  tap.ok(r:find("device-resident scalar (argument table word, rewritten per call)", 1, true) ~= nil and
         r:find(SPEECH_AT, 1, true) ~= nil, "speech pattern: the temperature is a device-resident scalar, at its line")
else
  tap.skip("no CUDA device: the speech pattern on the device")
  tap.skip("no CUDA device: the temperature decision")
end

tap.done()
