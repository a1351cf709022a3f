#!/usr/bin/env python3
"""test_generate.py: the generation helpers of grace.generate and the GPT-2 model of grace.gpt2 against NumPy.

top_k and top_p (which tokens a row keeps: the k largest logits; the smallest set of most probable tokens whose
probabilities reach p, found by NumPy with a sort and a cumulative sum, where grace bisects a threshold without
sorting), temperature, and the logits of a two-layer GPT-2 (weights made here, handed to gpt2.new as a table)
for the whole sequence and, through a static KV cache, token by token, recomputed in float64 NumPy.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from conf import Suite, E  # noqa: E402

S = Suite(seed=2424)
G = 'local gen = require "grace.generate"\n'


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def top_k_keep(x, k):
    kth = -np.sort(-x, axis=-1)[..., k - 1:k]
    return x >= kth


def top_p_keep(x, p):
    probs = softmax(x)
    order = np.argsort(-probs, axis=-1, kind="stable")
    sp = np.take_along_axis(probs, order, -1)
    before = np.cumsum(sp, -1) - sp        # mass of the more probable tokens
    keep_sorted = before < p               # a token is needed while the mass before it falls short of p
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, -1)
    return keep


# ---- top-k, top-p, temperature: the kept sets, as a bool mask ----
for shape, k in [((4, 30), 1), ((4, 30), 5), ((2, 3, 50), 17), ((3, 7), 7)]:
    x = S.distinct(shape, "float32", -4, 4)
    S.case("top_k %d of %s" % (k, shape), G + "return gen.top_k(x, %d):gt(-math.huge)" % k,
           [E(top_k_keep(x.f, k), "bool")], x=x)

for shape, p, scale in [((6, 40), 0.5, 3), ((6, 40), 0.9, 3), ((4, 200), 0.95, 2), ((3, 25), 0.3, 6),
                        ((2, 3, 60), 0.8, 4)]:
    x = S.distinct(shape, "float32", -scale, scale)
    keep = top_p_keep(x.f, p)
    # the bisection's resolution: a row whose mass crosses p within 1e-6 of a token's probability is ambiguous
    probs = softmax(x.f)
    sp = -np.sort(-probs, -1)
    assert np.all(np.abs(np.cumsum(sp, -1) - p) > 1e-5), "pick another seed: a boundary is ambiguous"
    S.case("top_p %.2f of %s" % (p, shape), G + "return gen.top_p(x, %r):gt(-math.huge)" % p,
           [E(keep, "bool")], x=x)

x = S.distinct((3, 20), "float32", -3, 3)
S.case("top_p after top_k and temperature, and the result's values",
       G + "local l = gen.top_p(gen.top_k(gen.temperature(x, 0.7), 8), 0.8)\n"
           "return l:gt(-math.huge), grace.where(l:gt(-math.huge), l, 0)",
       [E(top_p_keep(np.where(top_k_keep(x.f / 0.7, 8), x.f / 0.7, -np.inf), 0.8), "bool"),
        E(np.where(top_p_keep(np.where(top_k_keep(x.f / 0.7, 8), x.f / 0.7, -np.inf), 0.8), x.f / 0.7, 0),
          "float32")], x=x)


# ---- GPT-2: logits of the whole sequence and through a static cache ----
L, D, H, V, P = 2, 16, 4, 23, 12
HD = D // H
rng = np.random.default_rng(77)
W = {}


def w(name, shape, std, mean=0.0):
    W[name] = S.arr((rng.standard_normal(shape) * std + mean).astype(np.float32), "float32")
    return name


names = [w("wte", (V, D), 0.5), w("wpe", (P, D), 0.3)]
for i in range(1, L + 1):
    for n, shape, std, mean in [("ln1_w", (D,), 0.1, 1), ("ln1_b", (D,), 0.1, 0), ("attn_w", (3 * D, D), 0.3, 0),
                                ("attn_b", (3 * D,), 0.1, 0), ("proj_w", (D, D), 0.3, 0), ("proj_b", (D,), 0.1, 0),
                                ("ln2_w", (D,), 0.1, 1), ("ln2_b", (D,), 0.1, 0), ("fc_w", (4 * D, D), 0.3, 0),
                                ("fc_b", (4 * D,), 0.1, 0), ("fcp_w", (D, 4 * D), 0.2, 0), ("fcp_b", (D,), 0.1, 0)]:
        names.append(w("b%d_%s" % (i, n), shape, std, mean))
names += [w("lnf_w", (D,), 0.1, 1), w("lnf_b", (D,), 0.1)]
ids0 = rng.integers(0, V, (2, 7))
ids = S.arr(ids0 + 1, "int64")


def np_gpt2(ids0):
    f = {k: v.f for k, v in W.items()}

    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b
    B, T = ids0.shape
    x = f["wte"][ids0] + f["wpe"][:T]
    mask = np.tril(np.ones((T, T), bool))
    for i in range(1, L + 1):
        b = {n: f["b%d_%s" % (i, n)] for n in BLOCK_NAMES}
        qkv = ln(x, b["ln1_w"], b["ln1_b"]) @ b["attn_w"].T + b["attn_b"]
        q, k, v = (qkv[..., j * D:(j + 1) * D].reshape(B, T, H, HD).transpose(0, 2, 1, 3) for j in range(3))
        s = np.where(mask, q @ k.transpose(0, 1, 3, 2) / math.sqrt(HD), -np.inf)
        o = (softmax(s) @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
        x = x + o @ b["proj_w"].T + b["proj_b"]
        h = ln(x, b["ln2_w"], b["ln2_b"]) @ b["fc_w"].T + b["fc_b"]
        h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
        x = x + h @ b["fcp_w"].T + b["fcp_b"]
    return ln(x, f["lnf_w"], f["lnf_b"]) @ f["wte"].T


BLOCK_NAMES = ["ln1_w", "ln1_b", "attn_w", "attn_b", "proj_w", "proj_b", "ln2_w", "ln2_b", "fc_w", "fc_b", "fcp_w",
               "fcp_b"]
BLOCKS = ", ".join("{%s}" % ", ".join("%s = b%d_%s" % (n, i, n) for n in BLOCK_NAMES) for i in range(1, L + 1))
BUILD = """local gpt2 = require "grace.gpt2"
local m = gpt2.new({layers = %d, d = %d, heads = %d, vocab = %d, max_pos = %d},
                   {params = {wte = wte, wpe = wpe, blocks = {%s}, ln_f_w = lnf_w, ln_f_b = lnf_b}})
""" % (L, D, H, V, P, BLOCKS)
TOL = dict(rtol=1e-4, atol=1e-4, ulps=0)
ref = np_gpt2(ids0)
mag = np.abs(ref).max()
S.case("gpt2 logits of the whole sequence", BUILD + "return m:forward(ids, 1)",
       [E(ref, "float32", tol=TOL, mag=mag)], ids=ids, **W)
S.case("gpt2 logits through a static cache: 4 tokens, then 1, then 2",
       BUILD + """local ck, cv = m:new_cache("static", 2, 9)
local a = m:forward(ids:narrow(2, 1, 4), grace.tensor(1), "static", ck, cv)
local b = m:forward(ids:narrow(2, 5, 1), grace.tensor(5), "static", ck, cv)
local c = m:forward(ids:narrow(2, 6, 2), grace.tensor(6), "static", ck, cv)
return grace.cat({a, b, c}, 2)""", [E(ref, "float32", tol=TOL, mag=mag)], ids=ids, **W)
S.case("gpt2 logits through a growing cache: 3 tokens, then 4",
       BUILD + """local ck, cv = m:new_cache("growing", 2, 0)
local a, b
a, ck, cv = m:forward(ids:narrow(2, 1, 3), 1, "growing", ck, cv)
b, ck, cv = m:forward(ids:narrow(2, 4, 4), 4, "growing", ck, cv)
return grace.cat({a, b}, 2)""", [E(ref, "float32", tol=TOL, mag=mag)], ids=ids, **W)

S.run()
