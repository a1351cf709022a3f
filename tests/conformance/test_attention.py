#!/usr/bin/env python3
"""The attention op (grace.attention, and the attention pass in compiled functions) against NumPy: softmax(q @ k^T
* scale, masked) @ v computed in float64 from the rounded inputs. Cases: no mask, a causal keep-mask, a per-batch
mask with a 0-d tensor scale, transposed operands, k and v shared by the heads, more keys than one block of 256,
Dv over 256, float64 and bfloat16, a fully masked row (NaN, as softmax over -inf gives), no keys (zeros); and
functions written the unfused way (masked_fill then softmax then matmul; where(mask, s, -inf) with the scores
divided by a 0-d tensor), run through grace.compile, which the attention pass turns into one op. Each result is
held to its dtype's tolerance scaled by sum |p| |v| (the output is a weighted sum whose terms may cancel)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from conf import Suite, E  # noqa: E402

S = Suite(seed=4242)


def attention(q, k, v, scale=None, keep=None):
    """(result, magnitude): softmax(q @ k^T * scale where keep) @ v in float64 (scale defaults to 1/sqrt(D)) and
    sum |p| |v|, the scale of the result's rounding."""
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if s.shape[-1] == 0:   # no keys: the product of empty rows
        z = np.zeros(s.shape[:-1] + (v.shape[-1],))
        return z, z
    if keep is not None:
        s = np.where(np.broadcast_to(keep, s.shape), s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return np.matmul(p, v), np.matmul(np.abs(p), np.abs(v))


def case(desc, body, dt, q, k, v, scale=None, keep=None, **more):
    ref, mag = attention(q.f, k.f, v.f, scale, keep)
    S.case("%s %s" % (desc, dt), body, [E(ref, dt, mag=mag)], q=q, k=k, v=v, **more)


for dt in ("float32", "float64", "bfloat16"):
    q, k, v = S.randn((2, 3, 5, 8), dt), S.randn((2, 3, 11, 8), dt), S.randn((2, 3, 11, 6), dt)
    case("attention", "grace.attention(q, k, v)", dt, q, k, v)
    q, k, v = S.randn((2, 4, 3, 16), dt), S.randn((2, 1, 5, 16), dt), S.randn((2, 1, 5, 16), dt)
    case("attention with k and v shared by the heads", "grace.attention(q, k, v)", dt, q, k, v)

dt = "float32"
q, k, v = S.randn((1, 2, 7, 8), dt), S.randn((1, 2, 7, 8), dt), S.randn((1, 2, 7, 8), dt)
causal = np.tril(np.ones((7, 7), dtype=bool))
case("attention causal (mask keeps where true)", "grace.attention(q, k, v, {mask = m})", dt, q, k, v, keep=causal,
     m=S.arr(causal, "bool"))
q, k, v = S.randn((2, 2, 4, 8), dt), S.randn((2, 2, 6, 8), dt), S.randn((2, 2, 6, 3), dt)
m = S.rand((2, 1, 4, 6), "bool")
case("attention per-batch mask, 0-d tensor scale", "grace.attention(q, k, v, {mask = m, scale = s})", dt, q, k, v,
     scale=0.4, keep=m.v, m=m, s=S.arr(0.4, dt))
q, k, v = S.randn((8, 5), dt).t(), S.randn((8, 9), dt).t(), S.randn((4, 9), dt).t()
case("attention of transposed operands, scale 1.5", "grace.attention(q, k, v, {scale = 1.5})", dt, q, k, v, scale=1.5)
q, k, v = S.randn((3, 32), dt), S.randn((600, 32), dt), S.randn((600, 7), dt)
case("attention over 600 keys (blocks of 256)", "grace.attention(q, k, v)", dt, q, k, v)
q, k, v = S.randn((2, 16), dt), S.randn((10, 16), dt), S.randn((10, 300), dt)
case("attention with Dv 300 (chunks of 256)", "grace.attention(q, k, v)", dt, q, k, v)
q, k, v = S.randn((3, 8), dt), S.randn((0, 8), dt), S.randn((0, 5), dt)
case("attention with no keys", "grace.attention(q, k, v)", dt, q, k, v)
q, k, v = S.randn((3, 8), dt), S.randn((4, 8), dt), S.randn((4, 5), dt)
keep = np.array([[1, 1, 0, 1], [0, 0, 0, 0], [1, 0, 1, 0]], dtype=bool)
case("attention with a fully masked row (NaN there)", "grace.attention(q, k, v, {mask = m})", dt, q, k, v, keep=keep,
     m=S.arr(keep, "bool"))

# the unfused forms, compiled: the first call traces, the second runs the program with the attention op (not
# under CONF_COMPILE, test_compiled.py's run, which compiles every case body itself)
if not os.environ.get("CONF_COMPILE"):
    q, k, v = S.randn((2, 3, 6, 16), dt), S.randn((2, 3, 9, 16), dt), S.randn((2, 3, 9, 8), dt)
    fill = np.triu(np.ones((6, 9), dtype=bool), 4)
    case("compiled masked_fill(s * 0.25, mask, -inf):softmax():matmul(v)",
         "local f = grace.compile(function(q, k, v, m)\n"
         "  return (q:matmul(k:transpose(-2, -1)) * 0.25):masked_fill(m, -math.huge):softmax(-1):matmul(v)\nend)\n"
         "f(q, k, v, m)\nlocal r = f(q, k, v, m)\nassert(f:stats().hits == 1, 'the compiled program did not run')\n"
         "return r", dt, q, k, v, scale=0.25, keep=~fill, m=S.arr(fill, "bool"))
    keep = np.tril(np.ones((6, 9), dtype=bool), 3)
    case("compiled where(mask, s / t, -inf):softmax():matmul(v) with t a 0-d tensor",
         "local f = grace.compile(function(q, k, v, m, t)\n"
         "  return grace.where(m, q:matmul(k:transpose(-2, -1)) / t, -math.huge):softmax(-1):matmul(v)\nend)\n"
         "f(q, k, v, m, t)\nlocal r = f(q, k, v, m, t)\nassert(f:stats().hits == 1, 'the compiled program did not run')\n"
         "return r", dt, q, k, v, scale=1 / 2.5, keep=keep, m=S.arr(keep, "bool"),
         t=S.arr(2.5, dt))

S.run()
