-- readme.lua: runs the ```lua code blocks of README.md, in order, as one chunk (a block sees the locals of the
-- blocks before it), and checks what each prints against its `-->` comments: every `-->` comment of a block is
-- one printed line, in order; `--> ...` stands for any number of lines, `--> text ...` for a line that starts
-- with text. Lines compare with runs of whitespace as one space (print's tabs are written as spaces in the
-- README). A block whose first line is
-- `-- needs a CUDA device` is skipped without one. The chunk keeps README.md's line numbers, so an error or a
-- `file:line` in the output names the README's line. Prints TAP. Usage: grace tests/cli/readme.lua [README.md]
local path = arg[1] or "README.md"
local lines = {}
for l in io.lines(path) do lines[#lines + 1] = l end

local blocks, cur = {}, nil
for i, l in ipairs(lines) do
  if not cur and l:match("^```lua%s*$") then
    cur = {open = i, lines = {}}
  elseif cur and l:match("^```%s*$") then
    cur.close = i
    cur.gpu = (cur.lines[1] or ""):match("^%-%- needs a CUDA device") ~= nil
    blocks[#blocks + 1] = cur
    cur = nil
  elseif cur then
    cur.lines[#cur.lines + 1] = l
  end
end

local function norm(s) return (s:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")) end

local has_cuda = grace.cuda_available and grace.cuda_available()
local src = {}
for i = 1, #lines do src[i] = "" end
for k, b in ipairs(blocks) do
  b.want = {}
  local run = not b.gpu or has_cuda
  src[b.open] = ("__readme_block(%d)"):format(k)
  for j, l in ipairs(b.lines) do
    local w = l:match("%-%->%s?(.*)$")
    if w then b.want[#b.want + 1] = norm(w) end
    if run then src[b.open + j] = l end
  end
  b.got = {}
end

local current
function __readme_block(k) current = blocks[k] end
local real_print = print
print = function(...)
  local n, parts = select("#", ...), {}
  for i = 1, n do parts[i] = tostring((select(i, ...))) end
  local text = table.concat(parts, "\t")
  if not current then real_print(text) return end
  for l in (text .. "\n"):gmatch("(.-)\n") do current.got[#current.got + 1] = norm(l) end
end

-- does got[i..] match want[j..]? ("..." in want matches any number of lines)
local function match(got, i, want, j)
  if j > #want then return i > #got end
  if want[j] == "..." then
    for k = i, #got + 1 do if match(got, k, want, j + 1) then return true end end
    return false
  end
  local prefix = want[j]:match("^(.-) %.%.%.$")   -- "text ...": a line that starts with text
  local same = i <= #got and (got[i] == want[j] or (prefix ~= nil and got[i]:sub(1, #prefix) == prefix))
  return same and match(got, i + 1, want, j + 1)
end

local chunk, err = load(table.concat(src, "\n"), "@" .. path)
local failed_at, trace
if chunk then
  local ok, e = xpcall(chunk, debug.traceback)
  if not ok then failed_at, trace = current, e end
else
  trace = err
end
print = real_print

print("1.." .. (#blocks + 1))
print((#blocks > 0 and "ok" or "not ok") .. " 1 - " .. path .. " has lua code blocks (" .. #blocks .. ")")
local bad, fi = 0, nil
for i, b in ipairs(blocks) do if b == failed_at then fi = i end end
for k, b in ipairs(blocks) do
  local name = ("%d - the block at %s:%d prints what its --> comments say"):format(k + 1, path, b.open)
  if b.gpu and not has_cuda then
    print("ok " .. name .. " # SKIP needs a CUDA device")
  elseif not chunk or k == fi then
    bad = bad + 1
    print("not ok " .. name)
    print("# " .. tostring(trace):gsub("\n", "\n# "))
  elseif fi and k > fi then
    bad = bad + 1
    print("not ok " .. name .. " (not run: an earlier block failed)")
  elseif match(b.got, 1, b.want, 1) then
    print("ok " .. name)
  else
    bad = bad + 1
    print("not ok " .. name)
    print("# printed:")
    for _, l in ipairs(b.got) do print("#   " .. l) end
    print("# expected (from the --> comments):")
    for _, l in ipairs(b.want) do print("#   " .. l) end
  end
end
os.exit(bad == 0 and 0 or 1)
