-- survive.lua: checks for tests that feed grace input meant to break it: after each error (or result) the VM must
-- still work. Kept apart from tap.lua, which knows nothing of grace.
local tap = require "tests.lua.tap"
local grace = require "grace"
local M = {}

-- One check that a small computation still gives its value after the case `name`.
function M.still_works(name)
  local ok, v = pcall(function() return (grace.ones(2, 2) + 1):sum():item() end)
  tap.ok(ok and v == 8, name .. ": the VM still works after it")
end

-- fn must raise an error matching each of patterns (plain text), and the VM still work after it.
function M.raises(fn, patterns, name)
  tap.raises(fn, patterns, name)
  M.still_works(name)
end
return M
