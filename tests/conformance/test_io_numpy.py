#!/usr/bin/env python3
"""grace.load / grace.save against NumPy's own files, both ways.

NumPy writes .npy (every dtype grace shares with it, 0-d, empty, Fortran order, big-endian), np.savez and
np.savez_compressed archives; one grace program loads each, prints its elements (compared here with NumPy's values,
bit for bit) and saves them again as .npy, .npz and .safetensors; NumPy then reads grace's .npy and .npz files and
compares them with the originals (dtype, shape, values), and grace's .npy bytes must equal np.save's. grace's
.safetensors are checked by parsing them here from the spec. Last, archives NumPy wrote are damaged (a lying
uncompressed size, a flipped compressed byte, a cut) and grace must refuse each with a clear error. Prints TAP."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

GRACE = os.environ.get("GRACE", "build/grace")
n = 0
failed = 0


def check(cond, name, diag=None):
    global n, failed
    n += 1
    print(("ok %d - %s" if cond else "not ok %d - %s") % (n, name))
    if not cond:
        failed += 1
        if diag:
            print("#   " + str(diag).replace("\n", "\n#   "))


def arrays():
    rng = np.random.default_rng(7)
    out = {}
    for dt in ["float32", "float64", "float16", "int32", "int64", "uint8", "bool"]:
        if dt == "bool":
            a = rng.random((3, 4)) < 0.5
        elif dt.startswith("float"):
            a = (rng.standard_normal((3, 4)) * 100).astype(dt)
            a.flat[0], a.flat[1], a.flat[2] = np.nan, np.inf, -np.inf
        else:
            info = np.iinfo(dt)
            a = rng.integers(info.min, info.max, (3, 4), dtype=dt, endpoint=True)
            a.flat[0], a.flat[1] = info.min, info.max
        out[dt] = a
        out[dt + "_0d"] = np.array(a.flat[5], dtype=dt)
        out[dt + "_empty"] = np.zeros((0, 3), dtype=dt)
        out[dt + "_4d"] = np.resize(a, (2, 1, 3, 2))
    out["fortran"] = np.asfortranarray(np.arange(24, dtype=np.int32).reshape(2, 3, 4))
    out["bigendian"] = np.arange(6, dtype=">f8").reshape(2, 3) / 7
    out["bigendian_i4"] = np.array([1, -2, 300000], dtype=">i4")
    return out


def lua_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main():
    tmp = tempfile.mkdtemp(prefix="grace_io_")
    arrs = arrays()
    for k, a in arrs.items():
        np.save(os.path.join(tmp, k + ".npy"), a)
    plain = {k: a for k, a in arrs.items() if not k.startswith(("fortran", "bigendian"))}
    np.savez(os.path.join(tmp, "stored.npz"), **arrs)
    np.savez_compressed(os.path.join(tmp, "deflated.npz"), **arrs)
    np.savez(os.path.join(tmp, "positional.npz"), arrs["float32"], arrs["int64"])
    # One grace program: print every loaded tensor's elements (bit patterns, so NaN and -0 compare exactly), then
    # save them again.
    prog = ["local d = %s" % lua_str(tmp),
            "local function dump(tag, t)",
            "  local flat = t:reshape(-1)",
            "  local v = {}",
            "  if t.dtype == 'float16' or t.dtype == 'float32' or t.dtype == 'float64' then",
            "    for i, x in ipairs(flat:tolist()) do v[i] = x ~= x and 'nan' or string.format('%.17g', x) end",
            "  else for i, x in ipairs(flat:tolist()) do v[i] = tostring(x) end end",
            "  print(tag .. '|' .. t.dtype .. '|' .. table.concat(t:size(), ',') .. '|' .. table.concat(v, ' '))",
            "end"]
    for k in arrs:
        prog.append("do local t = grace.load(d .. '/%s.npy'); dump('npy %s', t); grace.save(d .. '/g_%s.npy', t) end" % (k, k, k))
    prog += ["for _, z in ipairs({'stored', 'deflated', 'positional'}) do",
             "  local t, _, names = grace.load(d .. '/' .. z .. '.npz')",
             "  for _, k in ipairs(names) do dump(z .. ' ' .. k, t[k]) end",
             "  grace.save(d .. '/g_' .. z .. '.npz', t)",
             "  if z == 'stored' then grace.save(d .. '/g_' .. z .. '.safetensors', t) end",
             "end"]
    with open(os.path.join(tmp, "prog.lua"), "w") as f:
        f.write("\n".join(prog) + "\n")
    r = subprocess.run([GRACE, os.path.join(tmp, "prog.lua")], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "grace loads and saves NumPy's files", r.stderr[-2000:])
    dumps = {}
    for line in r.stdout.splitlines():
        tag, dt, shp, vals = line.split("|")
        dumps[tag] = (dt, shp, vals)

    def compare_dump(tag, a):
        got = dumps.get(tag)
        if got is None:
            return check(False, tag + ": printed", "no output")
        dt, shp, vals = got
        want_dt = a.dtype.newbyteorder("=").name
        shape_ok = shp == ",".join(str(s) for s in a.shape)
        flat = np.ascontiguousarray(a).reshape(-1)
        if a.dtype.kind == "f":
            want = ["nan" if np.isnan(x) else "%.17g" % float(x) for x in flat]
        elif a.dtype.kind == "b":
            want = ["true" if x else "false" for x in flat]
        else:
            want = [str(int(x)) for x in flat]
        ok = dt == want_dt and shape_ok and vals.split(" ") == (want if want else [""])
        check(ok, tag + ": grace reads NumPy's values exactly",
              "got %s [%s] %s\nwant %s %s %s" % (dt, shp, vals[:200], want_dt, a.shape, " ".join(want)[:200]))

    for k, a in arrs.items():
        compare_dump("npy " + k, a)
    for z in ["stored", "deflated"]:
        for k, a in arrs.items():
            compare_dump(z + " " + k, a)
    compare_dump("positional arr_0", arrs["float32"])
    compare_dump("positional arr_1", arrs["int64"])

    # NumPy reads what grace wrote
    for k, a in arrs.items():
        p = os.path.join(tmp, "g_%s.npy" % k)
        try:
            b = np.load(p)
            ok = b.dtype == a.dtype.newbyteorder("=") and b.shape == a.shape and \
                np.array_equal(b, a, equal_nan=a.dtype.kind == "f")
            diag = "%s %s vs %s %s" % (b.dtype, b.shape, a.dtype, a.shape)
        except Exception as e:  # noqa: BLE001
            ok, diag = False, repr(e)
        check(ok, "NumPy reads grace's %s.npy" % k, diag)
        if k in plain:
            with open(p, "rb") as f:
                mine = f.read()
            with open(os.path.join(tmp, k + ".npy"), "rb") as f:
                theirs = f.read()
            check(mine == theirs, "grace's %s.npy is byte for byte np.save's" % k)
    for z in ["stored", "deflated"]:
        try:
            with np.load(os.path.join(tmp, "g_%s.npz" % z)) as g:
                ok = sorted(g.files) == sorted(arrs) and all(
                    g[k].dtype == a.dtype.newbyteorder("=") and g[k].shape == a.shape and
                    np.array_equal(g[k], a, equal_nan=a.dtype.kind == "f") for k, a in arrs.items())
                diag = sorted(g.files)
            with zipfile.ZipFile(os.path.join(tmp, "g_%s.npz" % z)) as zf:
                bad = zf.testzip()
                ok = ok and bad is None and all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
        except Exception as e:  # noqa: BLE001
            ok, diag = False, repr(e)
        check(ok, "NumPy reads grace's re-saved %s.npz (stored members, CRCs good)" % z, diag)

    # grace's safetensors, read here from the spec
    with open(os.path.join(tmp, "g_stored.safetensors"), "rb") as f:
        blob = f.read()
    hn = struct.unpack("<Q", blob[:8])[0]
    hdr = json.loads(blob[8:8 + hn])
    buf = blob[8 + hn:]
    codes = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I32": "<i4", "I64": "<i8", "U8": "|u1", "BOOL": "|b1"}
    good = (8 + hn) % 8 == 0
    for k, a in arrs.items():
        e = hdr[k]
        b0, b1 = e["data_offsets"]
        v = np.frombuffer(buf[b0:b1], dtype=codes[e["dtype"]]).reshape(e["shape"])
        good = good and v.dtype == a.dtype.newbyteorder("=") and np.array_equal(v, a, equal_nan=a.dtype.kind == "f")
    check(good, "grace's safetensors, parsed from the spec, hold NumPy's arrays")

    # damaged archives NumPy wrote
    with open(os.path.join(tmp, "deflated.npz"), "rb") as f:
        defl = bytearray(f.read())
    cases = []
    with zipfile.ZipFile(os.path.join(tmp, "deflated.npz")) as zf:
        info = zf.infolist()[0]
    cd = defl.rfind(b"PK\x01\x02", 0, len(defl))
    cd = defl.find(b"PK\x01\x02")
    lying = bytearray(defl)
    lying[cd + 24:cd + 28] = struct.pack("<I", 0x7fffff00)     # uncompressed size: 2 GiB from a few hundred bytes
    cases.append(("lying uncompressed size", lying, "cannot inflate"))
    lying2 = bytearray(defl)
    lying2[cd + 24:cd + 28] = struct.pack("<I", info.file_size + 8)   # plausible, but wrong
    cases.append(("uncompressed size off by 8", lying2, "not the claimed"))
    flipped = bytearray(defl)
    data_at = info.header_offset + 30 + len(info.filename) + 20 + info.compress_size // 2   # zip64 extra: 20 bytes
    flipped[data_at] ^= 0x55
    cases.append(("a flipped compressed byte", flipped, "load:"))
    cases.append(("cut in half", defl[:len(defl) // 2], "no end of central directory"))
    for name, blob, want in cases:
        p = os.path.join(tmp, "bad.npz")
        with open(p, "wb") as f:
            f.write(blob)
        r = subprocess.run([GRACE, "-e", "grace.load(%s)" % lua_str(p)], capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and want in r.stderr and "bad.npz" in r.stderr and "Sanitizer" not in r.stderr,
              "npz from NumPy, %s: a clear error" % name, r.stderr[-600:])
    subprocess.run(["rm", "-rf", tmp])
    print("1..%d" % n)
    sys.exit(1 if failed else 0)


main()
