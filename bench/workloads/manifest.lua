-- manifest.lua: the weights folder bench/torch/workloads.py writes (--weights DIR), read by run.lua and
-- gpt2_generate.lua: DIR/manifest.txt, one line per tensor, "name dtype d1,d2,... file" ("scalar" for a 0-d
-- shape), each file the raw little-endian elements; '#' starts a comment line, "# reference_source WHO" says who
-- computed the reference outputs.
local M = {}

-- M.read(dir): entries (name -> {dtype, shape, file}) and the reference source ("pytorch" when unsaid), or nil
-- and a message.
function M.read(dir)
  local path = dir .. "/manifest.txt"
  local f, err = io.open(path, "r")
  if not f then return nil, err end
  local entries, source, ln = {}, "pytorch", 0
  for line in f:lines() do
    ln = ln + 1
    local src = line:match("^#%s*reference_source%s+(%S+)")
    if src then source = src end
    if line:match("%S") and not line:match("^%s*#") then
      local name, dtype, shape, file = line:match("^(%S+)%s+(%S+)%s+(%S+)%s+(%S+)%s*$")
      if not name then f:close() return nil, ("%s:%d: expected 'name dtype shape file', got '%s'"):format(path, ln, line) end
      local dims = {}
      if shape ~= "scalar" then
        for dstr in shape:gmatch("[^,]+") do
          local v = math.tointeger(tonumber(dstr))
          if not v then f:close() return nil, ("%s:%d: bad shape '%s'"):format(path, ln, shape) end
          dims[#dims + 1] = v
        end
      end
      entries[name] = {dtype = dtype, shape = dims, file = dir .. "/" .. file}
    end
  end
  f:close()
  return entries, source
end

-- M.load(entry): the entry's tensor (a new CPU tensor).
function M.load(e) return grace.fromfile(e.file, e.dtype, e.shape) end

return M
