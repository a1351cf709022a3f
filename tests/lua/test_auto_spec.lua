-- test_auto_spec.lua: a branch's other way recorded before a call takes it, on the CPU. A compiled function with
-- an early exit that never fires (`if h:abs():max():item() > c.limit then return h end`) never gets its second
-- path from real calls; where the exit's code only returns values already computed, grace records it itself after
-- three calls that go the same way (one more call of the function, the read forced the other way, its results
-- dropped), and the paths become one program with a cond region. Checked through f:stats() (ahead_paths,
-- auto_regions, replays, partition runs), a debug hook counting the Lua function's own calls (none once merged: no
-- host read), f:ir(), version counters and the generator's state (the extra call leaves neither moved), and results
-- against the function run eagerly; a call that does take the exit returns the first half's output, computed here
-- by hand; the limit and the weights stay guarded after the merge. Also each comparison (<, <=, >=, ==, ~=, not) on float and integer values, forced on its exact edge.
-- What is not recorded ahead, each with its reason and file:line in f:stats().auto_region_failure and
-- grace.explain, results equal to eager: an exit that calls a function, reads a global, assigns a table field,
-- computes, a value kept in a local (the site itself stays a break), the exit taken every time (the other way is
-- the rest of the function), an in-place write to an argument before the check (the write is not repeated: the
-- argument's version moves once per call) and a random draw before the check.
local tap = require "tests.lua.tap"
local grace = require "grace"
local auto = require "tests.lua.auto_cases"

local D = 16
-- grace.explain's text, without printing it
local function explain(...)
  local p = print
  print = function() end
  local ok, r = pcall(grace.explain, ...)
  print = p
  assert(ok, r)
  return r
end
local function maxdiff(a, b) return (a:double() - b:double()):abs():max():item() end

-- Calls of Lua function fn while body runs (a debug hook: the compiled function's Lua code runs on a replay only).
local function lua_calls(fn, body)
  local n = 0
  debug.sethook(function()
    if debug.getinfo(2, "f").func == fn then n = n + 1 end
  end, "c")
  local ok, err = pcall(body)
  debug.sethook()
  assert(ok, err)
  return n
end

-- Runs cf on each input and compares with eager fn; counter changes.
local function counted(cf, fn, inputs)
  local s0, bad = cf:stats(), 0
  for _, x in ipairs(inputs) do if maxdiff(cf(x), fn(x)) > 1e-5 then bad = bad + 1 end end
  return auto.changes(cf, s0, bad)
end

local function smalls(n)
  local t = {}
  for i = 1, n do t[i] = grace.randn(3, D) end
  return t
end

-- ---- the early exit that never fires (bench/workloads/early_exit.lua's natural form, small) ----
local Ws = {}
for i = 1, 4 do Ws[i] = grace.randn(D, D) * 0.25 end
local c = {limit = 1e9}
local function first(x) return x:matmul(Ws[1]):relu():matmul(Ws[2]):relu() end
local function rest(x) return x:matmul(Ws[3]):relu():matmul(Ws[4]):tanh() end
local function early(x)
  local h = first(x)
  if h:abs():max():item() > c.limit then return h end
  return rest(h)
end
local cf = grace.compile(early)
local xs = smalls(3)
local seed0, off0 = grace.get_rng_state()
local v0 = {}
for i, x in ipairs(xs) do v0[i] = x:version() end
local warm = counted(cf, early, xs)
local s = cf:stats()
local seed1, off1 = grace.get_rng_state()
local same_versions = true
for i, x in ipairs(xs) do same_versions = same_versions and x:version() == v0[i] end
tap.ok(warm.bad == 0 and s.ahead_paths == 1 and s.auto_regions == 0,
       ("3 calls that never exit: equal eager, and the exit's path recorded ahead after the third (%d ahead, %d merged)")
       :format(s.ahead_paths, s.auto_regions))
tap.ok(seed1 == seed0 and off1 == off0 and same_versions,
       "recording ahead moved neither the generator nor the arguments' version counters")
local c4 = counted(cf, early, smalls(1))
tap.ok(c4.bad == 0 and c4.replays == 1 and cf:stats().auto_regions == 1,
       "the 4th call (replayed, guarding both branches) merges the two paths into one program")
local later, cl
local ncalls = lua_calls(early, function() later = smalls(8); cl = counted(cf, early, later) end)
-- the eager reference calls early itself once per input
tap.ok(cl.bad == 0 and cl.replays == 0 and cl.runs == 0 and cl.eager == 0 and cl.traces == 0 and cl.hits == 8 and
       ncalls == 8, ("8 more calls run the program only: equal eager, %d replays, %d partition runs, the Lua function "
       .. "ran %d times for 8 eager references (no host read in a compiled call)"):format(cl.replays, cl.runs, ncalls))
local ir = cf:ir()
tap.ok(ir:find("= cond ", 1, true) ~= nil and ir:find("gt %", 1, true) ~= nil and not ir:find("break", 1, true),
       "f:ir() is one program with the comparison and a cond region, no break")
local big = grace.randn(3, D) * 1e13
local want = first(big)   -- the exit returns the first half's output
local s0 = cf:stats()
local got = cf(big)
tap.ok(maxdiff(got, want) <= 1e-6 * want:abs():max():item() and maxdiff(got, rest(want)) > 1 and
       cf:stats().replays == s0.replays and cf:stats().hits == s0.hits + 1,
       "a call that takes the exit returns the first half's output, from the program (no replay)")
-- the limit is guarded as before: raised past the big input's values, the next call retraces and no longer exits
c.limit = 1e300
local t0 = cf:stats().traces
got = cf(big)
tap.ok(cf:stats().traces == t0 + 1 and maxdiff(got, rest(want)) <= 1e-6 * rest(want):abs():max():item(),
       "c.limit changed after the merge: the call retraces and runs the rest of the function")
c.limit = 1e9
-- so are the weights: one the exit does not read, replaced, is the one the next call uses
Ws[4] = grace.randn(D, D) * 0.25
local xw = smalls(1)[1]
tap.ok(maxdiff(cf(xw), early(xw)) <= 1e-5, "a weight of the rest replaced after the merge: the result uses the new one")
local line = debug.getinfo(early, "S").linedefined + 2
local rep = explain(early, xs[1])
tap.ok(rep:find("test_auto_spec.lua:" .. line .. ": a branch on a value read on the host (gt 1000000000)", 1, true)
       and rep:find("its other way only returns values already computed", 1, true) ~= nil,
       "explain: the branch, and that its other way is recorded ahead")

-- the benchmark's form: nn modules, the limit read from an upvalue table
local function stack(n) return auto.stack(D, n) end
local nfirst, nrest = stack(2), stack(2)
local function bench_form(x)
  local h = nfirst(x)
  if h:abs():max():item() > c.limit then return h end
  return nrest(h)
end
local cb = grace.compile(bench_form)
local wb = counted(cb, bench_form, smalls(4))
local lb = counted(cb, bench_form, smalls(6))
tap.ok(wb.bad == 0 and lb.bad == 0 and cb:stats().auto_regions == 1 and cb:stats().ahead_paths == 1 and
       lb.replays == 0 and lb.runs == 0 and lb.hits == 6,
       ("the benchmark form (nn modules, `> c.limit`): one program after 4 calls, 6 more with no replay (%d)")
       :format(lb.replays))
local hb = grace.randn(3, D) * 1e13
tap.ok(maxdiff(cb(hb), nfirst(hb)) == 0, "the benchmark form: a call taking the exit returns the first half's output")

-- ---- each comparison, forced on its edge: calls stay on one side, then a call crosses it ----
-- (t: a float tensor or an integer one; the values the calls give, then the one that takes the exit)
local fv, iv = function(v) return grace.tensor({v}) end, function(v) return grace.tensor({v}):long() end
local ops = {
  {"v < 2.5", function(t) if t:sum():item() < 2.5 then return t end return t * 3 end, fv, {3, 4, 5}, 2.25},
  {"v <= 2", function(t) if t:sum():item() <= 2 then return t end return t * 3 end, iv, {3, 4, 5}, 2},
  {"v >= -1.5", function(t) if t:sum():item() >= -1.5 then return t end return t * 3 end, fv, {-3, -4, -2}, -1.5},
  {"v == 7", function(t) if t:sum():item() == 7 then return t end return t * 3 end, iv, {1, 2, 3}, 7},
  {"v ~= 0", function(t) if t:sum():item() ~= 0 then return t end return t * 3 end, fv, {0, 0, 0}, 1},
  {"not (v > 2.5)", function(t) if not (t:sum():item() > 2.5) then return t end return t * 3 end, iv, {3, 4, 5}, 2},
}
for _, o in ipairs(ops) do
  local name, fn, mk, stay, cross = o[1], o[2], o[3], o[4], o[5]
  local co = grace.compile(fn)
  local ins = {}
  for k, v in ipairs(stay) do ins[k] = mk(v) end
  ins[#ins + 1] = mk(stay[1])
  local w = counted(co, fn, ins)
  local x = mk(cross)
  local s1 = co:stats()
  local r = co(x)
  tap.ok(w.bad == 0 and co:stats().auto_regions == 1 and co:stats().ahead_paths == 1 and maxdiff(r, x) == 0 and
         co:stats().replays == s1.replays,
         ("%s: recorded ahead and merged (%s); a call on the other side (%g) takes it without a replay")
         :format(name, co:stats().auto_region_failure, cross))
end

-- an integer never equals 2.5: there is no value to force, the recording fails and the branch stays replayed
local function half(t) if t:sum():item() == 2.5 then return t end return t * 3 end
local chf = grace.compile(half)
local hw = counted(chf, half, {iv(1), iv(2), iv(3), iv(4), iv(5)})
tap.ok(hw.bad == 0 and chf:stats().auto_regions == 0 and chf:stats().ahead_paths == 0 and
       chf:stats().auto_region_failure:find("failed", 1, true) ~= nil,
       "an integer compared with == 2.5: nothing to force, stays replayed, with the reason ("
       .. chf:stats().auto_region_failure .. ")")

-- ---- what is not recorded ahead ----
local t = {n = 0}
local function note() end
local refused = {
  {"a call", "its code calls a function", function(x)
    local h = first(x)
    if h:abs():max():item() > 1e9 then
      note(h)
      return h
    end
    return rest(h)
  end},
  {"print", "its code reads a global", function(x)
    local h = first(x)
    if h:abs():max():item() > 1e9 then
      print("blown up")
      return h
    end
    return rest(h)
  end},
  {"return f(x)", "its code calls a function", function(x)
    local h = first(x)
    if h:abs():max():item() > 1e9 then return rest(h) end
    return h * 2
  end},
  {"a table field set", "its code assigns a table field", function(x)
    local h = first(x)
    if h:abs():max():item() > 1e9 then
      t.n = 1
      return h
    end
    return rest(h)
  end},
  {"arithmetic", "its code computes", function(x)
    local h = first(x)
    if h:abs():max():item() > 1e9 then return h * 0.5 end
    return rest(h)
  end},
}
for _, r in ipairs(refused) do
  local name, reason, fn = r[1], r[2], r[3]
  local cr = grace.compile(fn)
  local cn = counted(cr, fn, smalls(6))
  local st = cr:stats()
  local bline = debug.getinfo(fn, "S").linedefined + 2
  tap.ok(cn.bad == 0 and st.auto_regions == 0 and st.ahead_paths == 0 and cn.replays == 5 and
         st.auto_region_failure:find("test_auto_spec.lua:" .. bline .. ": the branch's other way is not recorded", 1,
                                     true) and st.auto_region_failure:find(reason, 1, true) ~= nil,
         ("%s: stays a break, every call replayed and equal to eager, with the reason (%s)"):format(
           name, st.auto_region_failure))
  tap.ok(explain(fn, smalls(1)[1]):find(reason, 1, true) ~= nil, name .. ": explain says why")
end

-- the exit in a helper the compiled function calls: its return goes back into the compiled function's code
local function check(h)
  if h:abs():max():item() > 1e9 then return h end
  return rest(h)
end
local function outer(x) return check(first(x)) * 2 end
local cou = grace.compile(outer)
local coun = counted(cou, outer, smalls(6))
tap.ok(coun.bad == 0 and cou:stats().ahead_paths == 0 and
       cou:stats().auto_region_failure:find("test_auto_spec.lua:" .. debug.getinfo(check, "S").linedefined + 1
                                            .. ": [^\n]*not out of the compiled function") ~= nil,
       "an exit inside a helper: not recorded ahead (" .. cou:stats().auto_region_failure .. ")")

-- the value kept in a local: the site itself is no predicate
local function kept(x)
  local h = first(x)
  local v = h:abs():max():item()
  if v > 1e9 then return v end
  return rest(h)
end
local ck = grace.compile(kept)
local ckn = counted(ck, kept, smalls(6))
tap.ok(ckn.bad == 0 and ck:stats().auto_regions == 0 and ck:stats().ahead_paths == 0 and
       explain(kept, smalls(1)[1]):find("stored in the local 'v'", 1, true) ~= nil,
       "the value kept in a local (`if v > 1e9 then return v end`): stays a break, explain says why")

-- the exit taken every time: the way not seen is the rest of the function, which calls
local function exits(x)
  local h = first(x)
  if h:abs():max():item() > 1 then return h end
  return rest(h)
end
local bigs = {}
for i = 1, 6 do bigs[i] = grace.randn(3, D) * 1e3 end
local ce = grace.compile(exits)
local cen = counted(ce, exits, bigs)
tap.ok(cen.bad == 0 and ce:stats().auto_regions == 0 and ce:stats().ahead_paths == 0 and
       ce:stats().auto_region_failure:find("calls a function", 1, true) ~= nil,
       "the exit taken every call: the rest of the function is not recorded ahead (" .. ce:stats().auto_region_failure .. ")")

-- an in-place write to the argument before the check: a second run would write twice
local function bump(x)
  x:add_(1)
  local h = first(x)
  if h:abs():max():item() > 1e9 then return h end
  return rest(h)
end
local cbump = grace.compile(bump)
local bad, moved = 0, 0
for _ = 1, 6 do
  local x = grace.randn(3, D)
  local x2, v = x:clone(), x:version()
  if maxdiff(cbump(x), bump(x2)) > 1e-5 or maxdiff(x, x2) ~= 0 then bad = bad + 1 end
  moved = moved + (x:version() - v)
end
local bst = cbump:stats()
tap.ok(bad == 0 and moved == 6 and bst.ahead_paths == 0 and bst.auto_regions == 0 and
       bst.auto_region_failure:find("writes in place to an argument", 1, true) ~= nil,
       ("an in-place write to the argument before the check: equal eager, written once per call (version moved %d "
        .. "times in 6 calls), not recorded ahead (%s)"):format(moved, bst.auto_region_failure))

-- a random draw before the check
local function noisy(x)
  local h = first(x) + grace.randn(D) * 1e-3
  if h:abs():max():item() > 1e9 then return h end
  return rest(h)
end
local cno = grace.compile(noisy)
bad = 0
for _ = 1, 6 do
  local x = grace.randn(3, D)
  local sd, of = grace.get_rng_state()
  local got_n = cno(x)
  local sd2, of2 = grace.get_rng_state()
  grace.set_rng_state(sd, of)
  local want_n = noisy(x)
  local sd3, of3 = grace.get_rng_state()
  if maxdiff(got_n, want_n) > 1e-5 or sd2 ~= sd3 or of2 ~= of3 then bad = bad + 1 end
end
local nst = cno:stats()
tap.ok(bad == 0 and nst.ahead_paths == 0 and nst.auto_region_failure:find("draws random numbers", 1, true) ~= nil,
       "a random draw before the check: the same draws as eager, not recorded ahead (" .. nst.auto_region_failure .. ")")
tap.ok(explain(noisy, grace.randn(3, D)):find("draws random numbers (randn at", 1, true) ~= nil,
       "explain: the draw and its place")

-- Lua code before the check that adds a key to a table (never read back): the watched calls see it, so nothing is
-- recorded ahead (that call would add one key more) and nothing merges (a program would add none)
local trail = {}
local function trailed(x)
  trail[x] = true
  local h = first(x)
  if h:abs():max():item() > 1e9 then return h end
  return rest(h)
end
local ctr = grace.compile(trailed)
local ctn = counted(ctr, function(x) local h = first(x) return rest(h) end, smalls(6))
local keys = 0
for _ in pairs(trail) do keys = keys + 1 end
tap.ok(ctn.bad == 0 and keys == 6 and ctr:stats().ahead_paths == 0 and ctr:stats().auto_regions == 0,
       ("a table written before the check: one key per call (%d for 6), nothing recorded ahead (%s)"):format(
         keys, ctr:stats().auto_region_failure))

-- auto_regions = false: nothing is recorded ahead
local coff = grace.compile(early, {auto_regions = false})
local cof = counted(coff, early, smalls(6))
tap.ok(cof.bad == 0 and coff:stats().ahead_paths == 0 and cof.replays == 5, "auto_regions = false: nothing recorded ahead")

tap.done()
