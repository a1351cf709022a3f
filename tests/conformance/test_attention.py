#!/usr/bin/env python3
"""test_attention.py: the attention op (grace.attention, and the attention pass in compiled functions) on the CPU
against an independent NumPy float64 computation of softmax(q @ k^T * scale, masked) @ v.

A Lua program (run by $GRACE) makes seeded inputs and dumps them with %.17g, then the results of: grace.attention
(no mask, a causal keep-mask, a per-batch mask, a 0-d tensor scale, transposed operands, k and v shared by the
heads, more keys than one block of 256, Dv over 256, float64 and bfloat16 inputs, a fully masked row, no keys),
and compiled functions written the unfused way (masked_fill then softmax then matmul, where(mask, s, -inf),
scores divided by a 0-d CPU tensor), which the attention pass turns into one op. float32: rtol 1e-5, atol 1e-6;
float64 1e-12; bfloat16 results against NumPy on the same bfloat16 inputs: rtol 2e-2, atol 1e-2. A fully masked
row must be NaN (softmax over -inf), no keys must give zeros. Speaks TAP, exits 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

LUA = r'''
local function flat(v, out)
  if type(v) == "table" then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end
local function dump(name, t)
  local vals = flat(t:double():tolist(), {})
  for i, v in ipairs(vals) do vals[i] = string.format("%.17g", v) end
  io.write("T ", name, " ", table.concat(t:size(), ","), " ", t.dtype, " ", table.concat(vals, " "), "\n")
end
local function section(name, fn)
  local ok, err = pcall(fn)
  if not ok then io.write("E ", name, " ", (tostring(err):gsub("\n", " | ")), "\n") end
  io.flush()
end
local function case(name, q, k, v, opts)
  dump(name .. ".q", q); dump(name .. ".k", k); dump(name .. ".v", v)
  if opts and opts.mask then dump(name .. ".mask", opts.mask) end
  if opts and opts.scale then dump(name .. ".scale", grace.is_tensor(opts.scale) and opts.scale or grace.tensor(opts.scale)) end
  dump(name .. ".out", grace.attention(q, k, v, opts))
end

section("eager", function()
  grace.manual_seed(7)
  case("plain", grace.randn(2, 3, 5, 8), grace.randn(2, 3, 11, 8), grace.randn(2, 3, 11, 6))
  case("causal", grace.randn(1, 2, 7, 8), grace.randn(1, 2, 7, 8), grace.randn(1, 2, 7, 8),
       {mask = grace.ones({7, 7}):tril():bool()})
  case("batchmask", grace.randn(2, 2, 4, 8), grace.randn(2, 2, 6, 8), grace.randn(2, 2, 6, 3),
       {mask = grace.rand(2, 1, 4, 6):lt(0.7), scale = grace.tensor(0.4)})
  case("transposed", grace.randn(8, 5):t(), grace.randn(8, 9):t(), grace.randn(4, 9):t(), {scale = 1.5})
  case("shared", grace.randn(2, 4, 3, 16), grace.randn(2, 1, 5, 16), grace.randn(2, 1, 5, 16))
  case("longkeys", grace.randn(3, 32), grace.randn(600, 32), grace.randn(600, 7))
  case("widev", grace.randn(2, 16), grace.randn(10, 16), grace.randn(10, 300))
  case("f64", grace.randn(2, 5, 8):double(), grace.randn(2, 7, 8):double(), grace.randn(2, 7, 4):double())
  case("bf16", grace.randn(2, 5, 16):bfloat16(), grace.randn(2, 9, 16):bfloat16(), grace.randn(2, 9, 8):bfloat16())
  case("deadrow", grace.randn(3, 8), grace.randn(4, 8), grace.randn(4, 5),
       {mask = grace.tensor({{1, 1, 0, 1}, {0, 0, 0, 0}, {1, 0, 1, 0}}):bool()})
  case("nokeys", grace.randn(3, 8), grace.randn(0, 8), grace.randn(0, 5))
end)

section("compiled", function()
  grace.manual_seed(8)
  local m = grace.ones({6, 9}):triu(4):bool()
  local f1 = grace.compile(function(q, k, v)
    return (q:matmul(k:transpose(-2, -1)) * 0.25):masked_fill(m, -math.huge):softmax(-1):matmul(v)
  end)
  local keep = grace.ones({6, 9}):tril(3):bool()
  local f2 = grace.compile(function(q, k, v, t)
    local s = q:matmul(k:transpose(-2, -1)) / t
    return grace.where(keep, s, -math.huge):softmax(-1):matmul(v)
  end)
  dump("c.fillmask", m:double()); dump("c.keepmask", keep:double())
  for i = 1, 3 do   -- the first call traces; the next run the compiled program
    local q, k, v = grace.randn(2, 3, 6, 16), grace.randn(2, 3, 9, 16), grace.randn(2, 3, 9, 8)
    local t = grace.tensor(0.5 + i)
    dump("c" .. i .. ".q", q); dump("c" .. i .. ".k", k); dump("c" .. i .. ".v", v); dump("c" .. i .. ".t", t)
    dump("c" .. i .. ".f1", f1(q, k, v)); dump("c" .. i .. ".f2", f2(q, k, v, t))
  end
  io.write("S hits ", f1:stats().hits + f2:stats().hits, "\n")
end)
'''


def run_grace(grace):
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(LUA)
        path = f.name
    try:
        p = subprocess.run([grace, path], capture_output=True, text=True, timeout=600)
    finally:
        os.unlink(path)
    tensors, errors, stats = {}, {}, {}
    for line in p.stdout.splitlines():
        if line.startswith("T "):
            parts = line.split(" ")
            name, shape, dtype, vals = parts[1], parts[2], parts[3], [x for x in parts[4:] if x]
            dims = [int(s) for s in shape.split(",")] if shape else []
            tensors[name] = (np.array([float(v) for v in vals], dtype=np.float64).reshape(dims), dtype)
        elif line.startswith("E "):
            _, sec, msg = line.split(" ", 2)
            errors[sec] = msg
        elif line.startswith("S "):
            _, key, val = line.split(" ")
            stats[key] = int(val)
    return p, tensors, errors, stats


def attention(q, k, v, scale=None, keep=None):
    """softmax(q @ k^T * scale where keep) @ v in float64; scale defaults to 1/sqrt(D)."""
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if s.shape[-1] == 0:   # no keys: the product of empty rows
        return np.zeros(s.shape[:-1] + (v.shape[-1],))
    if keep is not None:
        s = np.where(np.broadcast_to(keep, s.shape), s, -np.inf)
    with np.errstate(invalid="ignore"):
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - m)
        p = e / e.sum(axis=-1, keepdims=True)
    return np.matmul(p, v)


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, name, diag=None):
        self.n += 1
        print(("ok %d - %s" if cond else "not ok %d - %s") % (self.n, name))
        if not cond:
            self.failed += 1
            if diag:
                print("#   " + str(diag).replace("\n", "\n#   "))
        sys.stdout.flush()
        return cond

    def done(self):
        print("1..%d" % self.n)
        sys.exit(0 if self.failed == 0 else 1)


TOL = {"float32": (1e-5, 1e-6), "float64": (1e-12, 1e-13), "bfloat16": (2e-2, 1e-2)}


def main():
    tap = Tap()
    grace = os.environ.get("GRACE")
    if not grace or not os.access(grace, os.X_OK):
        print("1..0 # SKIP GRACE is not set to the grace binary")
        return
    proc, got, errors, stats = run_grace(grace)
    tap.ok(proc.returncode == 0 and not errors, "the Lua program ran",
           "rc %d\nstderr: %s\nerrors: %s" % (proc.returncode, proc.stderr[-2000:], errors))

    def close(name, want):
        if name not in got:
            return tap.ok(False, name, "not produced by the Lua program")
        g, dt = got[name]
        if g.shape != want.shape:
            return tap.ok(False, name, "shape %s, expected %s" % (list(g.shape), list(want.shape)))
        rtol, atol = TOL.get(dt, TOL["float32"])
        nan_g, nan_w = np.isnan(g), np.isnan(want)
        if not np.array_equal(nan_g, nan_w):
            return tap.ok(False, name, "NaN at %d places, expected %d" % (nan_g.sum(), nan_w.sum()))
        err = np.abs(np.where(nan_w, 0, g - want))
        good = bool(np.all(err <= atol + rtol * np.abs(np.where(nan_w, 0, want))))
        return tap.ok(good, name, "max abs error %.3g (max |ref| %.3g)" % (err.max() if err.size else 0,
                                                                          np.nanmax(np.abs(want)) if want.size else 0))

    def eager(name, masked=False, scaled=False):
        try:
            q, k, v = (got[name + "." + r][0] for r in "qkv")
            keep = got[name + ".mask"][0] != 0 if masked else None
            scale = float(got[name + ".scale"][0]) if scaled else None
            close(name + ".out", attention(q, k, v, scale, keep))
        except KeyError as e:
            tap.ok(False, name + " (reference)", "missing %s; Lua error: %s" % (e, errors.get("eager")))

    for name in ("plain", "shared", "longkeys", "widev", "f64", "bf16", "nokeys"):
        eager(name)
    eager("causal", masked=True)
    eager("batchmask", masked=True, scaled=True)
    eager("transposed", scaled=True)
    eager("deadrow", masked=True)
    tap.ok("deadrow.out" in got and bool(np.all(np.isnan(got["deadrow.out"][0][1]))) and
           not np.any(np.isnan(got["deadrow.out"][0][[0, 2]])), "a row with every key masked is NaN, the others are not")

    try:
        fill, keep = got["c.fillmask"][0] != 0, got["c.keepmask"][0] != 0
        for i in (1, 2, 3):
            q, k, v, t = (got["c%d.%s" % (i, r)][0] for r in ("q", "k", "v", "t"))
            close("c%d.f1" % i, attention(q, k, v, 0.25, ~fill))
            close("c%d.f2" % i, attention(q, k, v, 1.0 / float(t), keep))
    except KeyError as e:
        tap.ok(False, "compiled (reference)", "missing %s; Lua error: %s" % (e, errors.get("compiled")))
    tap.ok(stats.get("hits", 0) >= 4, "the compiled functions ran their programs (%d hits)" % stats.get("hits", 0))
    tap.done()


if __name__ == "__main__":
    main()
