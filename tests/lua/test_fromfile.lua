-- test_fromfile.lua: grace.fromfile(path, dtype, shape [, offset_bytes]) reads raw little-endian elements
-- into a new CPU tensor. Files are written here with string.pack (an encoder independent of grace), and the
-- values read back are compared with the numbers packed; then the errors: a missing file, a file too short
-- for the shape (with and without an offset), bad arguments.
local tap = require "tests.lua.tap"
local grace = require "grace"

local section = tap.section

local tmpfiles = {}
local function write(bytes)
  local path = os.tmpname()
  tmpfiles[#tmpfiles + 1] = path
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
  return path
end

local function pack_all(fmt, values)
  local parts = {}
  for i, v in ipairs(values) do parts[i] = string.pack(fmt, v) end
  return table.concat(parts)
end

local function flat(t) return t:reshape(-1):tolist() end
local function shape(t) return table.concat(t:size(), "x") end

section("float32 values, shape and device", function()
  local vals = {1.5, -2.25, 0, 3.0e7, 0.1, -1e-3}
  local path = write(pack_all("<f", vals))
  local t = grace.fromfile(path, "float32", {2, 3})
  tap.is(t.dtype, "float32", "dtype float32")
  tap.is(shape(t), "2x3", "shape 2x3")
  tap.is(t.device, "cpu", "a CPU tensor")
  tap.ok(t:is_contiguous(), "contiguous")
  local got = flat(t)
  for i, v in ipairs(vals) do
    -- string.unpack gives the float32 value the bytes hold, as a double: the exact expectation
    local want = string.unpack("<f", string.pack("<f", v))
    tap.is(got[i], want, ("element %d = %g"):format(i, want))
  end
  tap.is(t[2][1]:item(), 3.0e7, "row-major order: [2][1] is the 4th value")
end)

section("other dtypes", function()
  local i64 = {0, -1, math.maxinteger, math.mininteger, 42}
  local t = grace.fromfile(write(pack_all("<i8", i64)), "int64", {5})
  local got = flat(t)
  tap.is(t.dtype, "int64", "int64 dtype")
  for i, v in ipairs(i64) do tap.is(got[i], v, ("int64 element %d exact"):format(i)) end

  local f64 = {math.pi, -0.5, 1e300}
  got = flat(grace.fromfile(write(pack_all("<d", f64)), "float64", {3}))
  for i, v in ipairs(f64) do tap.is(got[i], v, ("float64 element %d exact"):format(i)) end

  got = flat(grace.fromfile(write(pack_all("<i4", {-7, 2147483647})), "int32", {2}))
  tap.is(got[1], -7, "int32 negative")
  tap.is(got[2], 2147483647, "int32 max")

  got = flat(grace.fromfile(write(string.char(0, 255, 7)), "uint8", {3}))
  tap.is(got[2], 255, "uint8 255")
  tap.is(got[3], 7, "uint8 7")

  -- bfloat16: the top 16 bits of a float32; 0x3FC0 is 1.5, 0xC020 is -2.5
  got = flat(grace.fromfile(write(pack_all("<I2", {0x3FC0, 0xC020})), "bfloat16", {2}))
  tap.is(got[1], 1.5, "bfloat16 0x3FC0 = 1.5")
  tap.is(got[2], -2.5, "bfloat16 0xC020 = -2.5")
  -- float16: 0x3C00 is 1, 0xC500 is -5
  got = flat(grace.fromfile(write(pack_all("<I2", {0x3C00, 0xC500})), "float16", {2}))
  tap.is(got[1], 1.0, "float16 0x3C00 = 1")
  tap.is(got[2], -5.0, "float16 0xC500 = -5")

  got = flat(grace.fromfile(write(string.char(0, 1, 2)), "bool", {3}))
  tap.ok(got[1] == false and got[2] == true and got[3] == true, "bool: nonzero bytes are true")
end)

section("offset, 0-d, empty, a longer file", function()
  local bytes = pack_all("<f", {10, 20, 30, 40, 50})
  local path = write(bytes)
  local t = grace.fromfile(path, "float32", {2}, 8)
  local got = flat(t)
  tap.ok(got[1] == 30 and got[2] == 40, "offset_bytes 8 starts at the third float")
  local s = grace.fromfile(path, "float32", {}, 16)
  tap.is(s:dim(), 0, "shape {} gives a 0-d tensor")
  tap.is(s:item(), 50.0, "0-d value at offset 16")
  tap.is(flat(grace.fromfile(path, "float32", {3}))[3], 30.0, "a file longer than needed is fine")
  local e = grace.fromfile(path, "float32", {0, 4})
  tap.is(shape(e), "0x4", "an empty shape reads nothing")
  tap.is(shape(grace.fromfile(write(""), "float32", {0})), "0", "an empty file gives an empty tensor")
  local a, b = grace.fromfile(path, "float32", {5}), grace.fromfile(path, "float32", {5})
  a:fill_(0)
  tap.is(b:sum():item(), 150.0, "each call makes a new tensor")
end)

section("errors", function()
  local path = write(pack_all("<f", {1, 2, 3}))
  tap.raises(function() grace.fromfile(path .. ".missing", "float32", {3}) end,
             {"fromfile", "cannot open", ".missing"}, "a missing file names the path")
  tap.raises(function() grace.fromfile(path, "float32", {4}) end,
             {"fromfile", "holds 12 bytes", "needs 16 bytes"}, "a short file says how many bytes")
  tap.raises(function() grace.fromfile(path, "float32", {2}, 8) end,
             {"fromfile", "holds 12 bytes", "from offset 8"}, "a short file with an offset")
  tap.raises(function() grace.fromfile(path, "float32", {1}, math.maxinteger) end,
             {"fromfile", "holds 12 bytes", "from offset " .. math.maxinteger}, "an offset near 2^63 does not wrap")
  tap.raises(function() grace.fromfile(path, "float64", {2}) end, {"holds 12 bytes", "float64"},
             "the dtype's size counts")
  tap.raises(function() grace.fromfile(path, "float33", {3}) end, {"fromfile", "unknown dtype 'float33'"},
             "an unknown dtype")
  tap.raises(function() grace.fromfile(path, "float32", 3) end, {"fromfile", "shape as a table"},
             "the shape must be a table")
  tap.raises(function() grace.fromfile(path, "float32", {-1}) end, {"fromfile", "sizes must be >= 0"},
             "a negative size")
  tap.raises(function() grace.fromfile(path, "float32", {1}, -4) end, {"fromfile", "offset_bytes must be >= 0"},
             "a negative offset")
  tap.raises(function() grace.fromfile(nil, "float32", {1}) end, {"fromfile", "expected a file path"},
             "a path that is not a string")
  tap.raises(function() grace.fromfile(path, "float32", {1}, 0, 1) end, {"fromfile", "unexpected argument 5"},
             "extra arguments")
  tap.raises(function() grace.fromfile("/", "float32", {1}) end, {"fromfile", "'/'"}, "a directory is an error")
end)

for _, p in ipairs(tmpfiles) do os.remove(p) end
tap.done()
