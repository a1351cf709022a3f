-- tap.lua: TAP output for Lua tests run by build/grace: plan, ok/is/near/raises checks, skips, sections, done().
local tap = {}
local n, failed = 0, 0

local function report(cond, name, diag)
  n = n + 1
  io.write((cond and "ok " or "not ok "), n, " - ", name or "", "\n")
  if not cond then
    failed = failed + 1
    local info = debug.getinfo(3, "Sl")
    io.write("#   failed at ", info and info.short_src or "?", " line ", info and info.currentline or "?", "\n")
    if diag then io.write("#   ", (tostring(diag):gsub("\n", "\n#   ")), "\n") end
  end
  io.flush()
  return cond
end

function tap.plan(k) io.write("1..", k, "\n") end
function tap.ok(cond, name) return report(cond and true or false, name) end

function tap.is(got, want, name)
  return report(got == want, name, ("got: %s\nexpected: %s"):format(tostring(got), tostring(want)))
end

-- |got - want| <= atol + rtol * |want|; NaN equals NaN
function tap.near(got, want, name, rtol, atol)
  rtol, atol = rtol or 1e-6, atol or 1e-9
  local good = (got ~= got and want ~= want) or math.abs(got - want) <= atol + rtol * math.abs(want)
  return report(good, name, ("got: %.9g\nexpected: %.9g"):format(got, want))
end

-- fn(...) must raise an error whose message contains every plain string in `patterns`
function tap.raises(fn, patterns, name)
  local okcall, err = pcall(fn)
  if okcall then return report(false, name, "no error raised") end
  err = tostring(err)
  if type(patterns) == "string" then patterns = {patterns} end
  for _, p in ipairs(patterns or {}) do
    if not err:find(p, 1, true) then return report(false, name, ("error %q lacks %q"):format(err, p)) end
  end
  return report(true, name)
end

function tap.skip(reason, count)
  for _ = 1, count or 1 do
    n = n + 1
    io.write("ok ", n, " # SKIP ", reason, "\n")
  end
end

-- Runs fn protected: an error outside a check fails one test named after the section, not the whole file.
function tap.section(name, fn)
  local okcall, err = xpcall(fn, debug.traceback)
  if not okcall then report(false, name .. ": raised " .. tostring(err)) end
end

function tap.diag(msg) io.write("# ", (tostring(msg):gsub("\n", "\n# ")), "\n") end

-- Prints the plan (when none was given up front) and exits with the failure count as status.
function tap.done()
  io.write("1..", n, "\n")
  io.flush()
  os.exit(failed == 0 and 0 or 1, true)   -- close the state, so leak checkers see everything freed
end

return tap
