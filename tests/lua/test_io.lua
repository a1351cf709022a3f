-- test_io.lua: grace.save / grace.load (safetensors, .npy, .npz) and nn's state_dict / load_state_dict.
-- Round trips for every dtype and layout; a safetensors file compared byte for byte with bytes built here from the
-- spec (string.pack, a JSON string written by hand); hand-made truncated and lying files, each of which must give a
-- clear error (run under ASan/UBSan to show no read past the mapping). NumPy's side is tests/conformance/test_io_numpy.py.
local tap = require "tests.lua.tap"
local grace = require "grace"
local nn = require "grace.nn"

local section = tap.section
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p " .. dir))
local function path(name) return dir .. "/" .. name end
local function write(name, bytes)
  local f = assert(io.open(path(name), "wb"))
  f:write(bytes)
  f:close()
  return path(name)
end
local function read(p)
  local f = assert(io.open(p, "rb"))
  local s = f:read("a")
  f:close()
  return s
end
local function shape(t) return "[" .. table.concat(t:size(), ",") .. "]" end
local function equal(a, b) return shape(a) == shape(b) and (a - b):abs():max():item() == 0 end
local function same(a, b)   -- dtype, shape and every element (NaN equal to NaN)
  if a.dtype ~= b.dtype or shape(a) ~= shape(b) then return false end
  local x, y = a:reshape(-1):tolist(), b:reshape(-1):tolist()
  for i = 1, #x do
    if x[i] ~= y[i] and not (x[i] ~= x[i] and y[i] ~= y[i]) then return false end
  end
  return #x == #y
end

local DTYPES = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool"}
local function sample(dt, ...)   -- distinct values that each dtype holds exactly, NaN and infinities for floats
  local n = 1
  for _, s in ipairs({...}) do n = n * s end
  local vals = {}
  for i = 1, n do
    if dt == "bool" then vals[i] = i % 3 == 0
    elseif dt == "uint8" then vals[i] = (i * 37) % 256
    elseif dt == "int32" then vals[i] = (i % 2 == 0 and -1 or 1) * (i * 1000003)
    elseif dt == "int64" then vals[i] = (i % 2 == 0 and -1 or 1) * (i * 10000000019)
    else vals[i] = (i % 2 == 0 and -1 or 1) * i * 0.375 end
  end
  local t = grace.tensor(vals, {dtype = dt})
  if dt:find("float") and n >= 4 then
    t[1] = 0 / 0
    t[2] = math.huge
    t[3] = -math.huge
  end
  return t:reshape(...)
end

section("round trips: every dtype, every format", function()
  for _, dt in ipairs(DTYPES) do
    local cases = {
      {"2x3", sample(dt, 2, 3)},
      {"0-d", sample(dt, 1):reshape({})},
      {"empty 0x4", grace.zeros({0, 4}, {dtype = dt})},
      {"transposed view", sample(dt, 3, 4):t()},
      {"4-d", sample(dt, 2, 1, 3, 2)},
    }
    local all = {}
    for _, c in ipairs(cases) do all[c[1]] = c[2] end
    grace.save(path(dt .. ".safetensors"), all)
    local back = grace.load(path(dt .. ".safetensors"))
    for _, c in ipairs(cases) do tap.ok(same(back[c[1]], c[2]), "safetensors " .. dt .. " " .. c[1]) end
    if dt == "bfloat16" then
      tap.raises(function() grace.save(path("bf.npy"), all["2x3"]) end, {"NumPy has no bfloat16", "x:float()"},
                 "npy: bfloat16 is refused with a way out")
      tap.raises(function() grace.save(path("bf.npz"), all) end, "NumPy has no bfloat16", "npz: bfloat16 refused")
      tap.ok(io.open(path("bf.npz")) == nil, "a refused save leaves no file")
    else
      for _, c in ipairs(cases) do
        grace.save(path("x.npy"), c[2])
        tap.ok(same(grace.load(path("x.npy")), c[2]), "npy " .. dt .. " " .. c[1])
      end
      grace.save(path(dt .. ".npz"), all)
      local z = grace.load(path(dt .. ".npz"))
      for _, c in ipairs(cases) do tap.ok(same(z[c[1]], c[2]), "npz " .. dt .. " " .. c[1]) end
    end
  end
end)

section("a lone tensor, names, metadata, order", function()
  local t = sample("float32", 2, 2)
  grace.save(path("one.safetensors"), t)
  local back, meta, names = grace.load(path("one.safetensors"))
  tap.ok(same(back.arr_0, t) and #names == 1, "a tensor saved to .safetensors is the entry 'arr_0'")
  tap.is(next(meta), nil, "no metadata: an empty table")
  grace.save(path("m.safetensors"), {["layers.1.weight"] = t, ["a/b"] = t, ["é"] = t},
             {metadata = {format = "pt", note = "x\"y"}})
  back, meta, names = grace.load(path("m.safetensors"))
  tap.is(table.concat(names, " "), "a/b layers.1.weight é", "names saved sorted, returned in file order")
  tap.is(meta.format .. meta.note, "ptx\"y", "metadata strings round trip (with a quote)")
  tap.ok(same(back["layers.1.weight"], t), "dotted names")
  grace.save(path("fmt.bin"), {a = t}, {format = "npz"})
  tap.ok(same(grace.load(path("fmt.bin"), {format = "npz"}).a, t), "opts.format overrides the extension")
  grace.save(path("UP.NPY"), t)
  tap.ok(same(grace.load(path("UP.NPY")), t), "extensions are case-insensitive")
end)

section("safetensors bytes equal the spec's, built independently", function()
  local a = grace.tensor({{1.5, -2}, {0.25, 8}}, {dtype = "float32"})
  local b = grace.tensor({7, -9, 2 ^ 40}, {dtype = "int64"})
  local c = grace.tensor({true, false, true}, {dtype = "bool"})
  grace.save(path("exact.safetensors"), {a = a, b = b, c = c}, {metadata = {k = "v"}})
  local json = '{"__metadata__":{"k":"v"},' ..
    '"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},' ..
    '"b":{"dtype":"I64","shape":[3],"data_offsets":[16,40]},' ..
    '"c":{"dtype":"BOOL","shape":[3],"data_offsets":[40,43]}}'
  json = json .. string.rep(" ", (8 - #json % 8) % 8)
  local want = string.pack("<I8", #json) .. json .. string.pack("<ffff", 1.5, -2, 0.25, 8) ..
    string.pack("<i8i8i8", 7, -9, 2 ^ 40) .. "\1\0\1"
  local got = read(path("exact.safetensors"))
  tap.is(#got, #want, "file length")
  tap.ok(got == want, "every byte as the spec lays it out")
  tap.is((8 + #json) % 8, 0, "the buffer starts 8-byte aligned")
  -- and grace reads a file built the same way by hand, float16 and bfloat16 bits included
  local h = '{"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"g":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}}'
  local p = write("hand.safetensors", string.pack("<I8", #h) .. h .. string.pack("<I2I2I2I2", 0x3c00, 0xc000, 0x3f80, 0x4040))
  local t = grace.load(p)
  tap.is(table.concat(t.h:tolist(), ","), "1.0,-2.0", "F16 bits 3c00 c000 are 1, -2")
  tap.is(table.concat(t.g:tolist(), ","), "1.0,3.0", "BF16 bits 3f80 4040 are 1, 3")
end)

-- A safetensors file with header text h and a buffer of n bytes.
local function st(name, h, n) return write(name, string.pack("<I8", #h) .. h .. string.rep("\0", n or 0)) end
local function entry(name, dt, shp, b, e)
  return ('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%s,%s]}'):format(name, dt, shp, b, e)
end

section("malformed safetensors: clear errors", function()
  local cases = {
    {"short file", write("s1.safetensors", "\1\0\0"), "too short"},
    {"header length past the end", write("s2.safetensors", string.pack("<I8", 1000) .. "{}"), "past the end"},
    {"header length 2^63", write("s3.safetensors", string.pack("<I8", math.mininteger) .. "{}"), "past the end"},
    {"bad JSON", st("s4.safetensors", '{"a":{"dtype":"F32",', 0), "not valid JSON"},
    {"not an object", st("s5.safetensors", '[1,2]', 0), "not a JSON object"},
    {"offsets past the end", st("s6.safetensors", "{" .. entry("a", "F32", "2", 0, 8) .. "}", 4), "outside the 4-byte buffer"},
    {"end before begin", st("s7.safetensors", "{" .. entry("a", "F32", "0", 8, 4) .. "}", 8), "outside"},
    {"negative offset", st("s8.safetensors", "{" .. entry("a", "F32", "1", -4, 0) .. "}", 4), "non-negative integers"},
    {"overlap", st("s9.safetensors", "{" .. entry("a", "F32", "2", 0, 8) .. "," .. entry("b", "F32", "2", 4, 12) .. "}", 12),
     "overlap"},
    {"hole", st("s10.safetensors", "{" .. entry("a", "F32", "1", 0, 4) .. "," .. entry("b", "F32", "1", 8, 12) .. "}", 12),
     "belong to no tensor"},
    {"trailing bytes", st("s11.safetensors", "{" .. entry("a", "F32", "1", 0, 4) .. "}", 8), "end at byte 4 of a 8-byte"},
    {"shape and size disagree", st("s12.safetensors", "{" .. entry("a", "F32", "3", 0, 8) .. "}", 8), "spans 8 bytes"},
    {"shape product overflows", st("s13.safetensors", "{" .. entry("a", "F64", "4294967296,4294967296,4294967296", 0, 8) ..
      "}", 8), "too many elements"},
    {"shape past int64", st("s14.safetensors", "{" .. entry("a", "U8", "99999999999999999999", 0, 1) .. "}", 1), "JSON"},
    {"fractional shape", st("s15.safetensors", "{" .. entry("a", "U8", "1.5", 0, 1) .. "}", 1), "not a non-negative integer"},
    {"unknown dtype", st("s16.safetensors", "{" .. entry("a", "I16", "1", 0, 2) .. "}", 2), "dtype I16"},
    {"duplicate name", st("s17.safetensors", "{" .. entry("a", "U8", "1", 0, 1) .. "," .. entry("a", "U8", "1", 1, 2) .. "}", 2),
     "duplicate"},
    {"metadata not strings", st("s18.safetensors", '{"__metadata__":{"k":1}}', 0), "not a string"},
    {"missing fields", st("s19.safetensors", '{"a":{"dtype":"F32"}}', 0), "lacks"},
    {"9 dims", st("s20.safetensors", "{" .. entry("a", "U8", "1,1,1,1,1,1,1,1,1", 0, 1) .. "}", 1), "9 dims"},
  }
  for _, c in ipairs(cases) do tap.raises(function() grace.load(c[2]) end, {c[3], c[2]}, "safetensors: " .. c[1]) end
  tap.raises(function() grace.load(path("nothere.safetensors")) end, {"cannot open", "nothere"}, "missing file")
  tap.raises(function() grace.load(dir .. "/") end, "cannot tell the format", "no extension")
end)

-- A .npy image with header dict d (padded as NumPy does) and data bytes.
local function npy(d, data, version)
  version = version or 1
  local pre = version == 1 and 10 or 12
  local hl = #d + 1
  local pad = (64 - (pre + hl) % 64) % 64
  local len = version == 1 and string.pack("<I2", hl + pad) or string.pack("<I4", hl + pad)
  return "\x93NUMPY" .. string.char(version, 0) .. len .. d .. string.rep(" ", pad) .. "\n" .. (data or "")
end

section("hand-written .npy: versions, byte order, Fortran order, errors", function()
  local p = write("v2.npy", npy("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", string.pack("<i4i4i4", 1, -2, 3), 2))
  tap.is(table.concat(grace.load(p):tolist(), ","), "1,-2,3", "version 2 header")
  p = write("be.npy", npy("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", string.pack(">dd", 1.25, -3)))
  tap.is(table.concat(grace.load(p):tolist(), ","), "1.25,-3.0", "big-endian float64 is swapped")
  p = write("f.npy", npy("{'descr': '<i8', 'fortran_order': True, 'shape': (2, 3), }",
                         string.pack("<i8i8i8i8i8i8", 1, 4, 2, 5, 3, 6)))
  local t = grace.load(p)
  tap.is(shape(t) .. table.concat(t:reshape(-1):tolist(), ","), "[2,3]1,2,3,4,5,6", "Fortran order becomes row-major")
  local bad = {
    {"no magic", write("n1.npy", "PK\3\4 not numpy at all"), "no \\x93NUMPY magic"},
    {"version 9", write("n2.npy", "\x93NUMPY\9\0\0\0"), "version 9.0"},
    {"header past the end", write("n3.npy", "\x93NUMPY\1\0\255\255{'descr'"), "past the end"},
    {"truncated data", write("n4.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", "abcd")),
     "needs 16 bytes"},
    {"complex dtype", write("n5.npy", npy("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", "12345678")), "'<c8'"},
    {"structured dtype", write("n6.npy", npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", "1234")),
     "structured"},
    {"huge shape", write("n7.npy", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }")),
     "too many elements"},
    {"shape overflows int64", write("n8.npy", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }")),
     "not a tuple"},
    {"not a dict", write("n9.npy", npy("descr='<f4'")), "not the dict NumPy writes"},
    {"key missing", write("n10.npy", npy("{'descr': '<f4', 'shape': (1,), }", "1234")), "not the dict"},
    {"unknown key", write("n11.npy", npy("{'descr': '<f4', 'x': 1, 'fortran_order': False, 'shape': (1,), }", "1234")),
     "unexpected key 'x'"},
    {"empty file", write("n12.npy", ""), "no \\x93NUMPY magic"},
  }
  for _, c in ipairs(bad) do tap.raises(function() grace.load(c[2]) end, c[3], "npy: " .. c[1]) end
end)

section("malformed .npz: clear errors", function()
  grace.save(path("good.npz"), {a = sample("float32", 4), b = sample("int64", 3)})
  local good = read(path("good.npz"))
  local cases = {
    {"not a zip", write("z1.npz", "hello"), "not an .npz (zip) file"},
    {"truncated to half", write("z2.npz", good:sub(1, #good // 2)), "no end of central directory"},
    {"directory cut", write("z3.npz", good:sub(1, #good - 30) .. good:sub(-22)), "truncated"},
  }
  -- flip one data byte of member a: the CRC check catches it
  local at = good:find("NUMPY", 1, true) + 130
  cases[#cases + 1] = {"corrupt data", write("z4.npz", good:sub(1, at - 1) .. string.char((good:byte(at) + 1) % 256) ..
                       good:sub(at + 1)), "CRC-32 mismatch"}
  -- the directory claims the first member starts past the end of the file
  local cd = good:find("PK\1\2", 1, true)
  cases[#cases + 1] = {"offset past the end", write("z5.npz", good:sub(1, cd + 41) .. string.pack("<I4", 0x7fffffff) ..
                       good:sub(cd + 46)), "local header is missing"}
  -- the directory claims a huge compressed size
  cases[#cases + 1] = {"size past the end", write("z6.npz", good:sub(1, cd + 19) .. string.pack("<I4", 0x7ffffff0) ..
                       good:sub(cd + 24)), "runs past the end"}
  for _, c in ipairs(cases) do tap.raises(function() grace.load(c[2]) end, c[3], "npz: " .. c[1]) end
end)

section("save errors leave nothing behind", function()
  local t = sample("float32", 2)
  tap.raises(function() grace.save(path("t.npy"), {a = t}) end, "holds one tensor", "a table to .npy")
  tap.raises(function() grace.save(path("t.npz"), {a = t, b = 3}) end, "'b' is a number, not a tensor", "a non-tensor value")
  tap.raises(function() grace.save(path("t.npz"), {t}) end, "keys must be tensor names", "a list")
  tap.raises(function() grace.save(path("t.txt"), t) end, "cannot tell the format", "unknown extension")
  tap.raises(function() grace.save(path("t.npz"), {a = t}, {metadata = {k = "v"}}) end, "only .safetensors files hold metadata",
             "metadata outside safetensors")
  tap.raises(function() grace.save(path("t.safetensors"), {__metadata__ = t}) end, "reserved", "a tensor named __metadata__")
  tap.raises(function() grace.save(dir .. "/no/such/dir/t.npy", t) end, "cannot create", "a missing folder")
  tap.raises(function() grace.load(path("x.npy"), {device = "tpu"}) end, "device must be", "a bad device")
  local p = io.popen("ls " .. dir .. " | grep -c tmp-")
  tap.is(p:read("l"), "0", "no temporary file is left by a failed save")
  p:close()
  grace.save(path("keep.npy"), t)
  pcall(grace.save, path("keep.npy"), t:bfloat16())
  tap.ok(same(grace.load(path("keep.npy")), t), "a failed save keeps the previous file")
end)

section("a large tensor through the mapping", function()
  local big = grace.arange(0, 3 * 1024 * 1024, 1, {dtype = "float32"}):reshape(3, 1024, 1024)
  grace.save(path("big.safetensors"), {big = big, small = grace.ones(3)})
  local back = grace.load(path("big.safetensors"))
  tap.ok(equal(back.big, big), "12 MiB float32 round trip")
  grace.save(path("big.npz"), {big = big})
  tap.ok(equal(grace.load(path("big.npz")).big, big), "and through .npz")
end)

section("state_dict and load_state_dict", function()
  grace.manual_seed(1)
  local function model() return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2))) end
  local m = model()
  local sd, names = m:state_dict()
  tap.is(table.concat(names, " "), "1.weight 1.bias 3.1.weight 3.1.bias 3.2.weight 3.2.bias", "dotted names as PyTorch")
  for _, fmt in ipairs({"safetensors", "npz"}) do
    grace.save(path("model." .. fmt), sd)
    local m2 = model()
    local res = m2:load_state_dict(grace.load(path("model." .. fmt)))
    tap.is(#res.missing_keys + #res.unexpected_keys, 0, fmt .. ": nothing missing or unexpected")
    local x = grace.randn(5, 4)
    tap.ok(equal(m2(x), m(x)), fmt .. ": the loaded model computes the same")
  end
  local m2 = model()
  local before = m2["1"].weight:clone()
  local bad = {["1.weight"] = grace.zeros(3, 5), ["1.bias"] = sd["1.bias"], extra = grace.zeros(1)}
  tap.raises(function() m2:load_state_dict(bad) end,
             {"missing keys: '3.1.weight', '3.1.bias', '3.2.weight', '3.2.bias'", "unexpected keys: 'extra'",
              "size mismatch for '1.weight': the state dict has shape [3, 5], the parameter [3, 4]", "nothing was loaded"},
             "strict: one error names missing, unexpected and mis-shaped keys")
  tap.ok(equal(m2["1"].weight, before), "and nothing was copied")
  tap.raises(function() m2:load_state_dict(bad, {strict = false}) end, "size mismatch for '1.weight'",
             "non-strict still refuses a wrong shape")
  local res = m2:load_state_dict({["1.bias"] = sd["1.bias"], extra = grace.zeros(1)}, {strict = false})
  tap.is(#res.missing_keys .. " " .. res.unexpected_keys[1], "5 extra", "non-strict returns the missing and unexpected keys")
  tap.ok(equal(m2["1"].bias, sd["1.bias"]), "and copies what matches")
  local m64 = model():to("float64")
  m64:load_state_dict(sd)
  tap.is(m64["1"].weight.dtype, "float64", "a state dict is cast to the parameter's dtype")
end)

section("device option", function()
  local ok = pcall(grace.zeros, 1, {device = "cuda"})
  if not ok then return tap.skip("no CUDA device", 1) end
  grace.save(path("dev.safetensors"), {a = sample("float32", 3)})
  local t = grace.load(path("dev.safetensors"), {device = "cuda"}).a
  tap.is(t.device, "cuda", "load(..., {device='cuda'}) puts the tensors there")
end)

os.execute("rm -rf " .. dir)
tap.done()
