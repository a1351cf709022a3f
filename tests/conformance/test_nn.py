#!/usr/bin/env python3
"""test_nn.py: grace.nn against an independent NumPy float64 re-implementation.

A Lua program (run by $GRACE) seeds, builds Linear, Sequential, MLP, Embedding, MultiheadAttention (causal and
not) and a GPT-2 TransformerBlock (d 32, 4 heads, seq 5), and dumps every parameter (from :named_parameters()),
input and output with %.17g. This script recomputes each forward pass in NumPy from the dumped parameters and
compares (float32 modules: rtol 1e-4, atol 1e-5; float64 ones: rtol 1e-9, atol 1e-11). The KV cache is
checked both ways: decoding token by token must give the NumPy full-sequence result, and the cache must hold
the keys/values NumPy computes. Speaks TAP, exits 1 on any failure.
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

LUA = r'''
local nn = require "grace.nn"
local function flat(v, out)
  if type(v) == "table" then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end
local function dump(name, t)
  local vals = flat(t:tolist(), {})
  for i, v in ipairs(vals) do vals[i] = string.format("%.17g", v) end
  io.write("T ", name, " ", table.concat(t:size(), ","), " ", t.dtype, " ", table.concat(vals, " "), "\n")
end
local function dump_params(prefix, m)
  local map, names = m:named_parameters()
  io.write("P ", prefix, " ", table.concat(names, ","), "\n")
  for _, n in ipairs(names) do dump(prefix .. "." .. n, map[n]) end
end
local function section(name, fn)
  local ok, err = pcall(fn)
  if not ok then io.write("E ", name, " ", (tostring(err):gsub("\n", " | ")), "\n") end
  io.flush()
end

section("linear", function()
  grace.manual_seed(1234)
  local lin = nn.Linear(7, 5)
  dump_params("linear", lin)
  local x = grace.randn({3, 7})
  dump("linear.x", x)
  dump("linear.y", lin(x))
  local x3 = grace.randn({2, 3, 7})
  dump("linear.x3", x3)
  dump("linear.y3", lin(x3))
  local nb = nn.Linear(7, 2, {bias = false})
  dump_params("nobias", nb)
  dump("nobias.y", nb(x))
end)

section("sequential", function()
  grace.manual_seed(99)
  local seq = nn.Sequential(nn.Linear(6, 10), nn.SiLU(), nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 3), nn.GELU())
  dump_params("seq", seq)
  local x = grace.randn({4, 6})
  dump("seq.x", x)
  dump("seq.y", seq(x))
end)

section("mlp", function()
  grace.manual_seed(7)
  local mlp = nn.MLP(12, 48, {activation = "gelu_tanh"})
  dump_params("mlp", mlp)
  local x = grace.randn({2, 3, 12})
  dump("mlp.x", x)
  dump("mlp.y", mlp(x))
end)

section("norms", function()
  grace.manual_seed(21)
  local ln, rms = nn.LayerNorm(9), nn.RMSNorm(9)
  ln.weight:copy_(grace.randn({9}) * 0.5 + 1)
  ln.bias:copy_(grace.randn({9}) * 0.5)
  rms.weight:copy_(grace.randn({9}) * 0.5 + 1)
  dump_params("ln", ln)
  dump_params("rms", rms)
  local x = grace.randn({3, 9}) * 2 + 1
  dump("norm.x", x)
  dump("ln.y", ln(x))
  dump("rms.y", rms(x))
end)

section("embedding", function()
  grace.manual_seed(3)
  local emb = nn.Embedding(11, 4)
  dump_params("emb", emb)
  local ids = grace.tensor({{1, 11, 4}, {4, 2, 7}})
  dump("emb.ids", ids)
  dump("emb.y", emb(ids))
end)

local D, H, B, T = 32, 4, 2, 5

section("attention", function()
  grace.manual_seed(42)
  local causal = nn.MultiheadAttention(D, H, {causal = true})
  local plain = nn.MultiheadAttention(D, H, {causal = false})
  dump_params("attn_c", causal)
  dump_params("attn_n", plain)
  local x = grace.randn({B, T, D})
  dump("attn.x", x)
  dump("attn_c.y", causal(x))
  dump("attn_n.y", plain(x))
end)

section("block", function()
  grace.manual_seed(2024)
  local blk = nn.TransformerBlock(D, H)
  -- non-trivial LayerNorm affine parameters, so the check covers them
  for _, ln in ipairs({blk.ln_1, blk.ln_2}) do
    ln.weight:copy_(grace.randn({D}) * 0.3 + 1)
    ln.bias:copy_(grace.randn({D}) * 0.3)
  end
  dump_params("block", blk)
  local x = grace.randn({B, T, D})
  dump("block.x", x)
  dump("block.y", blk(x))

  -- KV cache: prefill 2 tokens, a chunk of 2 more (queries after the cached keys), then one token
  local ck, cv = blk:new_cache(B, T + 2)
  dump("cache.prefill", blk(x:narrow(2, 1, 2), {cache_k = ck, cache_v = cv, pos = 1}))
  dump("cache.chunk", blk(x:narrow(2, 3, 2), {cache_k = ck, cache_v = cv, pos = 3}))
  dump("cache.step5", blk(x:narrow(2, 5, 1), {cache_k = ck, cache_v = cv, pos = 5}))
  dump("cache.k", ck)
  dump("cache.v", cv)

  -- float64 copy of the same block: tight tolerance
  blk:to("float64")
  dump_params("block64", blk)
  dump("block64.y", blk(x:double()))
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
    tensors, params, errors = {}, {}, {}
    for line in p.stdout.splitlines():
        if line.startswith("T "):
            parts = line.split(" ")
            name, shape, dtype, vals = parts[1], parts[2], parts[3], parts[4:]
            dims = [int(s) for s in shape.split(",")] if shape else []
            tensors[name] = (np.array([float(v) for v in vals], dtype=np.float64).reshape(dims), dtype)
        elif line.startswith("P "):
            _, prefix, names = line.split(" ", 2)
            params[prefix] = names.split(",") if names else []
        elif line.startswith("E "):
            _, sec, msg = line.split(" ", 2)
            errors[sec] = msg
    return p, tensors, params, errors


# ---- NumPy reference (float64) -------------------------------------------------------------------------
def linear(x, p, name):
    y = x @ p[name + ".weight"].T
    b = p.get(name + ".bias")
    return y if b is None else y + b


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def layer_norm(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def rms_norm(x, w, eps=1e-6):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w


def softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def heads(t, nh):
    b, n, d = t.shape
    return t.reshape(b, n, nh, d // nh).transpose(0, 2, 1, 3)


def attention(x, p, pre, nh, causal):
    """Returns the output and the per-head keys and values [B, H, T, hd]."""
    b, n, d = x.shape
    q = heads(linear(x, p, pre + ".q_proj"), nh)
    k = heads(linear(x, p, pre + ".k_proj"), nh)
    v = heads(linear(x, p, pre + ".v_proj"), nh)
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // nh)
    if causal:
        s = np.where(np.triu(np.ones((n, n), dtype=bool), k=1), -np.inf, s)
    o = (softmax(s) @ v).transpose(0, 2, 1, 3).reshape(b, n, d)
    return linear(o, p, pre + ".out_proj"), k, v


def block(x, p, pre, nh):
    a, k, v = attention(layer_norm(x, p[pre + ".ln_1.weight"], p[pre + ".ln_1.bias"]), p, pre + ".attn", nh, True)
    h = x + a
    m = layer_norm(h, p[pre + ".ln_2.weight"], p[pre + ".ln_2.bias"])
    m = linear(gelu_tanh(linear(m, p, pre + ".mlp.fc1")), p, pre + ".mlp.fc2")
    return h + m, k, v


# ---- TAP -----------------------------------------------------------------------------------------------
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


def main():
    tap = Tap()
    grace = os.environ.get("GRACE")
    if not grace or not os.access(grace, os.X_OK):
        print("1..0 # SKIP GRACE is not set to the grace binary")
        return
    proc, got, names, errors = run_grace(grace)
    tap.ok(proc.returncode == 0 and not errors, "the Lua program ran",
           "rc %d\nstderr: %s\nerrors: %s" % (proc.returncode, proc.stderr[-2000:], errors))

    def params(prefix):
        return {prefix + "." + n: got[prefix + "." + n][0] for n in names.get(prefix, []) if prefix + "." + n in got}

    def close(name, want, rtol=1e-4, atol=1e-5, dtype="float32"):
        if name not in got:
            return tap.ok(False, name, "not produced by the Lua program")
        g, gdt = got[name]
        if gdt != dtype:
            return tap.ok(False, name, "dtype %s, expected %s" % (gdt, dtype))
        if g.shape != want.shape:
            return tap.ok(False, name, "shape %s, expected %s" % (list(g.shape), list(want.shape)))
        err = np.abs(g - want)
        good = bool(np.all(err <= atol + rtol * np.abs(want)))
        return tap.ok(good, name, "max abs error %.3g (max |ref| %.3g)" % (err.max(), np.abs(want).max()))

    def check(section, fn):
        try:
            fn()
        except Exception as e:  # missing dump, bad shape in the reference: report, go on
            tap.ok(False, section + " (reference)", "%s: %s\nLua error: %s" % (type(e).__name__, e, errors.get(section)))

    def t(name):
        return got[name][0]

    # Linear
    def c_linear():
        p = params("linear")
        tap.ok(names.get("linear") == ["weight", "bias"], "Linear names", names.get("linear"))
        w = p["linear.weight"]
        tap.ok(w.shape == (5, 7) and np.all(np.abs(w) <= 1 / math.sqrt(7)), "Linear init U(-1/sqrt(in), 1/sqrt(in))")
        close("linear.y", linear(t("linear.x"), p, "linear"))
        close("linear.y3", linear(t("linear.x3"), p, "linear"))
        close("nobias.y", linear(t("linear.x"), params("nobias"), "nobias"))
    check("linear", c_linear)

    def c_seq():
        p = params("seq")
        x = t("seq.x")
        y = silu(linear(x, p, "seq.1"))
        y = np.maximum(linear(y, p, "seq.3"), 0)
        y = gelu(linear(y, p, "seq.5"))
        close("seq.y", y)
    check("sequential", c_seq)

    def c_mlp():
        p = params("mlp")
        close("mlp.y", linear(gelu_tanh(linear(t("mlp.x"), p, "mlp.fc1")), p, "mlp.fc2"))
    check("mlp", c_mlp)

    def c_norms():
        x = t("norm.x")
        pl, pr = params("ln"), params("rms")
        close("ln.y", layer_norm(x, pl["ln.weight"], pl["ln.bias"]))
        close("rms.y", rms_norm(x, pr["rms.weight"]))
    check("norms", c_norms)

    def c_emb():
        ids = t("emb.ids").astype(np.int64)
        w = params("emb")["emb.weight"]
        close("emb.y", w[ids - 1], rtol=0, atol=0)
    check("embedding", c_emb)

    def c_attn():
        x = t("attn.x")
        close("attn_c.y", attention(x, params("attn_c"), "attn_c", 4, True)[0])
        close("attn_n.y", attention(x, params("attn_n"), "attn_n", 4, False)[0])
    check("attention", c_attn)

    def c_block():
        p = params("block")
        tap.ok(len(names.get("block", [])) == 16, "TransformerBlock has 16 parameter tensors", names.get("block"))
        x = t("block.x")
        want, k, v = block(x, p, "block", 4)
        close("block.y", want)
        close("cache.prefill", want[:, 0:2])
        close("cache.chunk", want[:, 2:4])
        close("cache.step5", want[:, 4:5])
        # the cache holds the keys/values of ln_1(x), zeros past the last position
        b, h, n, hd = k.shape
        ck = np.zeros((b, h, n + 2, hd))
        cv = np.zeros((b, h, n + 2, hd))
        ck[:, :, :n], cv[:, :, :n] = k, v
        close("cache.k", ck)
        close("cache.v", cv)
        p64 = params("block64")
        same = all(np.array_equal(p64["block64" + n[5:]], p[n]) for n in p)
        tap.ok(same and len(p64) == len(p), ":to('float64') keeps the values")
        close("block64.y", block(x, p64, "block64", 4)[0], rtol=1e-9, atol=1e-11, dtype="float64")
    check("block", c_block)

    tap.done()


if __name__ == "__main__":
    main()
