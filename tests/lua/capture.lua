-- capture.lua: what a test sees of output it must not mix into the TAP stream: what a call prints, and what a Lua
-- chunk run in a fresh grace process writes to stderr.
local grace = require "grace"
local M = {}

-- Calls fn(...) with print redirected; returns the printed text (lines joined by "\n") then fn's results. An error
-- in fn is raised again after print is restored.
function M.printed(fn, ...)
  local saved, lines = print, {}
  print = function(...) lines[#lines + 1] = table.concat({...}, "\t") end
  local res = table.pack(pcall(fn, ...))
  print = saved
  if not res[1] then error(res[2], 0) end
  return table.concat(lines, "\n"), table.unpack(res, 2, res.n)
end

-- grace.explain(...) without its printing: the report it returns, and the text it printed.
function M.explain(...)
  local text, rep = M.printed(grace.explain, ...)
  return rep, text
end

-- What chunk, run by a fresh grace process (this test's interpreter) with the environment assignments env
-- prefixed (e.g. "GRACE_LOG=placement"), writes to stderr; nil when no process can be run.
local GRACE_BIN = arg and arg[-1]
function M.stderr_of(chunk, env)
  if not GRACE_BIN or not io.popen then return nil end
  local path = os.tmpname()
  local fh = assert(io.open(path, "w"))
  fh:write(chunk)
  fh:close()
  local p = io.popen(("%s%q %q 2>&1 >/dev/null"):format(env and env .. " " or "", GRACE_BIN, path), "r")
  if not p then os.remove(path) return nil end
  local out = p:read("a")
  p:close()
  os.remove(path)
  return out
end

return M
