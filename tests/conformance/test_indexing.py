#!/usr/bin/env python3
"""Indexing vs NumPy: x[{...}] with integers, Torch7 ranges {first, last} (inclusive, 1-based, negatives from the
end), {} for all of a dim, bool masks and int64 index tensors; assignment through the same forms (a number, or a
tensor broadcast to the selection); masked_select (mask broadcast with x, as PyTorch), nonzero (1-based positions)
and index_put_ (with accumulate); empty selections, and out-of-range keys as errors naming the dim and its size.
A Torch7 range {f, l} is NumPy's [f-1:l] with negatives counted as size + f + 1."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from conf import Suite, E, Err, make  # noqa: E402

S = Suite(seed=4242)


def rng(f, last, n):
    """Torch7's {f, last} on a dim of size n as a Python slice."""
    s = f + n + 1 if f < 0 else f
    e = last + n + 1 if last < 0 else last
    return slice(s - 1, e)


# ---- reads with integers, ranges and {} ----
for dt in ["float32", "int64", "float16", "bool"]:
    x = S.rand((3, 4, 5), dt, -9, 9)
    v = x.v
    S.case("x[{2, 3}] %s" % dt, "x[{2, 3}]", [E(v[1, 2], dt)], x=x)
    S.case("x[{-1, -2, 1}] %s (0-d)" % dt, "x[{-1, -2, 1}]", [E(v[-1, -2, 0], dt)], x=x)
    S.case("x[{{1, 2}, 3}] %s" % dt, "x[{{1, 2}, 3}]", [E(v[0:2, 2], dt)], x=x)
    S.case("x[{{}, {2, -1}}] %s" % dt, "x[{{}, {2, -1}}]", [E(v[:, rng(2, -1, 4)], dt)], x=x)
    S.case("x[{{-2, -1}, {}, {3}}] %s" % dt, "x[{{-2, -1}, {}, {3}}]", [E(v[rng(-2, -1, 3), :, 2:3], dt)], x=x)
    S.case("x[{{}, {}, -1}] %s" % dt, "x[{{}, {}, -1}]", [E(v[:, :, -1], dt)], x=x)
x = S.rand((4, 6), "float64")
S.case("x[{}] is all of x", "x[{}]", [E(x.f, "float64")], x=x)
S.case("x[{{-3, -2}}] negative range", "x[{{-3, -2}}]", [E(x.f[rng(-3, -2, 4)], "float64")], x=x)
S.case("x[{{2, 1}}] empty range", "x[{{2, 1}}]", [E(x.f[1:1], "float64")], x=x)
S.case("x[{{5, 4}}] empty range at the end", "x[{{5, 4}}]", [E(x.f[4:4], "float64")], x=x)
S.case("x[{{}, {3, -4}}] empty by negatives", "x[{{}, {3, -4}}]", [E(x.f[:, rng(3, -4, 6)], "float64")], x=x)
S.case("x[{2}] on a transposed view", "x[{2}]", [E(x.f.T[1], "float64")], x=x.t())
S.case("a range read is a view (a write through it is seen)", "local r = x[{{2, 3}, {2, 4}}]; r:fill_(7); return x",
       [E(np.where((np.arange(4)[:, None] >= 1) & (np.arange(4)[:, None] <= 2) & (np.arange(6) >= 1) &
                   (np.arange(6) <= 3), 7.0, x.f), "float64")], x=x)

# ---- index tensors ----
for dt in ["float32", "int64", "bfloat16"]:
    x = S.rand((4, 5), dt, -9, 9)
    ix = np.array([3, 0, 3, 1])
    S.case("x[idx] %s" % dt, "x[i]", [E(x.v[ix], dt)], x=x, i=make(ix + 1, "int64"))
    S.case("x[{{}, idx}] %s" % dt, "x[{{}, i}]", [E(x.v[:, ix], dt)], x=x, i=make(ix + 1, "int64"))
    S.case("x[{2, idx}] %s" % dt, "x[{2, i}]", [E(x.v[1, ix], dt)], x=x, i=make(ix + 1, "int64"))
    i2 = np.array([[0, 4], [2, 2], [1, 3]])
    S.case("x[{{}, idx2d}] %s" % dt, "x[{{}, i}]", [E(x.v[:, i2], dt)], x=x, i=make(i2 + 1, "int64"))
x = S.rand((3, 4, 2), "float32")
S.case("x[{{2, 3}, idx, 1}]", "x[{{2, 3}, i, 1}]", [E(x.f[1:3][:, [3, 0]][:, :, 0], "float32")], x=x,
       i=make(np.array([4, 1]), "int64"))
S.case("x[idx] with an int32 index", "x[i]", [E(x.f[[2, 2]], "float32")], x=x, i=make(np.array([3, 3]), "int32"))
S.case("x[idx] with an empty index", "x[i]", [E(x.f[np.zeros(0, dtype=int)], "float32")], x=x,
       i=make(np.zeros(0), "int64"))
S.case("x[idx] out of range is an error", "x[i]", [Err("out of range for dim 1 of size 3")], x=x,
       i=make(np.array([1, 4]), "int64"))
S.case("x[idx] with index 0 is an error (1-based)", "x[i]", [Err("out of range")], x=x, i=make(np.array([0]), "int64"))

# ---- bool masks ----
for dt in ["float32", "int64", "float16", "uint8"]:
    x = S.rand((3, 4), dt, -5, 5)
    m = S.rand((3, 4), "bool")
    S.case("x[mask] %s" % dt, "x[m]", [E(x.v[m.v], dt)], x=x, m=m)
    S.case("x:masked_select(mask) %s" % dt, "x:masked_select(m)", [E(x.v[m.v], dt)], x=x, m=m)
x = S.rand((3, 4, 2), "float32")
m1 = S.rand((3,), "bool")
m2 = S.rand((4, 2), "bool")
m3 = S.rand((3, 4), "bool")
S.case("x[mask over dim 1]", "x[m]", [E(x.f[m1.v], "float32")], x=x, m=m1)
S.case("x[{{}, mask over dims 2-3}]", "x[{{}, m}]", [E(x.f[:, m2.v], "float32")], x=x, m=m2)
S.case("x[mask over dims 1-2]", "x[m]", [E(x.f[m3.v], "float32")], x=x, m=m3)
S.case("x[{2, mask}]", "x[{2, m}]", [E(x.f[1][m2.v], "float32")], x=x, m=m2)
S.case("x[all-false mask] is empty", "x[m]", [E(x.f[np.zeros((3, 4, 2), bool)], "float32")], x=x,
       m=make(np.zeros((3, 4, 2), bool), "bool"))
S.case("x[mask of the wrong size] is an error", "x[m]", [Err("does not match")], x=x,
       m=make(np.ones((2,), bool), "bool"))
mp3 = S.rand((2, 4, 3), "bool")
S.case("x[mask] on a permuted view", "x[m]", [E(x.permute(3, 2, 1).f[mp3.v], "float32")], x=x.permute(3, 2, 1), m=mp3)
# masked_select broadcasts the mask with x (PyTorch), x[mask] does not
xb = S.rand((3, 4), "float64")
mb = S.rand((4,), "bool")
S.case("masked_select with a broadcast mask [4]", "x:masked_select(m)",
       [E(xb.f[np.broadcast_to(mb.v, (3, 4))], "float64")], x=xb, m=mb)
mc = S.rand((3, 1), "bool")
S.case("masked_select with a broadcast mask [3, 1]", "x:masked_select(m)",
       [E(xb.f[np.broadcast_to(mc.v, (3, 4))], "float64")], x=xb, m=mc)
xr = S.rand((4,), "float64")
S.case("masked_select broadcasts x too ([4] with mask [3, 4])", "x:masked_select(m)",
       [E(np.broadcast_to(xr.f, (3, 4))[m3.v], "float64")], x=xr, m=m3)
S.case("masked_select with a non-bool mask is an error", "x:masked_select(m)", [Err("mask must be bool")], x=xb,
       m=make(np.ones((3, 4)), "int64"))
S.case("masked_select with shapes that do not broadcast is an error", "x:masked_select(m)", [Err()], x=xb,
       m=make(np.ones((3,), bool), "bool"))

# ---- nonzero (1-based in Lua) ----
for dt in ["float32", "int64", "bool", "float64"]:
    x = S.rand((3, 4), dt, -1, 1)
    S.case("nonzero %s" % dt, "x:nonzero()", [E(np.argwhere(x.v != 0) + 1, "int64")], x=x)
x3 = S.rand((2, 3, 2), "int64", -1, 1)
S.case("nonzero 3-D", "x:nonzero()", [E(np.argwhere(x3.v != 0) + 1, "int64")], x=x3)
S.case("nonzero of zeros: [0, 2]", "x:nonzero()", [E(np.zeros((0, 2), np.int64), "int64")],
       x=make(np.zeros((2, 3)), "float32"))
S.case("nonzero of a 0-d tensor: [1, 0]", "x:nonzero()", [E(np.zeros((1, 0), np.int64), "int64")],
       x=make(np.array(2.5), "float32"))
S.case("nonzero counts NaN", "x:nonzero()", [E(np.array([[1], [3]]), "int64")],
       x=make(np.array([np.nan, 0.0, -1.0]), "float32"))
S.case("nonzero of a transposed view", "x:nonzero()", [E(np.argwhere(x3.v[:, :, 0].T != 0) + 1, "int64")],
       x=x3.sel(3, 1).t())


# ---- assignment ----
def put(v, key, val):
    r = v.copy()
    r[key] = val
    return r


x = S.rand((3, 4), "float32")
S.case("local _ = 0; x[{1, {2, 4}}] = 0", "local _ = 0; x[{1, {2, 4}}] = 0; return x", [E(put(x.f, (0, slice(1, 4)), 0), "float32")], x=x)
S.case("local _ = 0; x[{{}, -1}] = t (broadcast)", "local _ = 0; x[{{}, -1}] = t; return x", [E(put(x.f, (slice(None), -1), 5.5), "float32")],
       x=x, t=make(np.array([5.5]), "float32"))
S.case("local _ = 0; x[{{2, 3}, {}}] = row (broadcast)", "local _ = 0; x[{{2, 3}, {}}] = t; return x",
       [E(put(x.f, slice(1, 3), np.arange(4.0)), "float32")], x=x, t=make(np.arange(4.0), "float32"))
S.case("local _ = 0; x[{{2, 1}}] = 9 (empty) changes nothing", "local _ = 0; x[{{2, 1}}] = 9; return x", [E(x.f, "float32")], x=x)
m = S.rand((3, 4), "bool")
S.case("local _ = 0; x[mask] = -1", "local _ = 0; x[m] = -1; return x", [E(put(x.f, m.v, -1), "float32")], x=x, m=m)
S.case("local _ = 0; x[mask] = values", "local _ = 0; x[m] = t; return x", [E(put(x.f, m.v, np.arange(m.v.sum()) + 0.5), "float32")], x=x,
       m=m, t=make(np.arange(m.v.sum()) + 0.5, "float32"))
S.case("local _ = 0; x[mask] = values of the wrong count is an error", "local _ = 0; x[m] = t; return x", [Err("do not broadcast")], x=x,
       m=m, t=make(np.arange(m.v.sum() + 1) + 0.5, "float32"))
mr = S.rand((3,), "bool")
S.case("local _ = 0; x[row mask] = row", "local _ = 0; x[m] = t; return x", [E(put(x.f, mr.v, np.arange(4.0)), "float32")], x=x, m=mr,
       t=make(np.arange(4.0), "float32"))
mcol = S.rand((4,), "bool")
S.case("local _ = 0; x[{2, mask}] = 3", "local _ = 0; x[{2, m}] = 3; return x", [E(put(x.f, (1, mcol.v), 3), "float32")], x=x, m=mcol)
S.case("local _ = 0; x[{{}, mask}] = 0", "local _ = 0; x[{{}, m}] = 0; return x", [E(put(x.f, (slice(None), mcol.v), 0), "float32")], x=x,
       m=mcol)
ix = np.array([3, 0])
S.case("local _ = 0; x[{{}, idx}] = block", "local _ = 0; x[{{}, i}] = t; return x",
       [E(put(x.f, (slice(None), ix), np.arange(6.0).reshape(3, 2)), "float32")], x=x, i=make(ix + 1, "int64"),
       t=make(np.arange(6.0).reshape(3, 2), "float32"))
S.case("local _ = 0; x[idx] = row (broadcast)", "local _ = 0; x[i] = t; return x", [E(put(x.f, [2, 0], np.arange(4.0)), "float32")], x=x,
       i=make(np.array([3, 1]), "int64"), t=make(np.arange(4.0), "float32"))
S.case("local _ = 0; x[{2, idx}] = 7", "local _ = 0; x[{2, i}] = 7; return x", [E(put(x.f, (1, ix), 7), "float32")], x=x,
       i=make(ix + 1, "int64"))
xi = S.rand((2, 3, 4), "int64", -9, 9)
S.case("local _ = 0; x[{{}, idx, {2, 3}}] = t int64", "local _ = 0; x[{{}, i, {2, 3}}] = t; return x",
       [E(put(xi.v, (slice(None), [2, 0], slice(1, 3)), np.arange(8).reshape(2, 2, 2)), "int64")], x=xi,
       i=make(np.array([3, 1]), "int64"), t=make(np.arange(8).reshape(2, 2, 2), "int64"))
S.case("local _ = 0; x[{4, 1}] = 0 is an error naming dim 1", "local _ = 0; x[{4, 1}] = 0", [Err("out of range for dim 1 of size 3")], x=x)
S.case("local _ = 0; x[{1, {1, 5}}] = 0 is an error naming dim 2", "local _ = 0; x[{1, {1, 5}}] = 0", [Err("for dim 2 of size 4")], x=x)
S.case("local _ = 0; x[{1, 1, 1}] = 0 is an error (too many indices)", "local _ = 0; x[{1, 1, 1}] = 0", [Err("indices for a tensor of 2 dims")],
       x=x)
S.case("x[{0}] is an error (1-based)", "x[{0}]", [Err("1-based")], x=x)
S.case("x[{1.5}] is an error", "x[{1.5}]", [Err("integer")], x=x)
S.case("x[{2^40}] is an error", "x[{1 << 40}]", [Err("out of range for dim 1")], x=x)
S.case("x[{{1, 2, 3}}] is an error", "x[{{1, 2, 3}}]", [Err("a range is {first, last}")], x=x)

# ---- index_put_ ----
xp = S.rand((4, 3), "float64")
i0, i1 = np.array([0, 2, 0]), np.array([1, 2, 1])
vals = np.array([1.5, 2.5, 3.5])
r_write = xp.f.copy()
for a, b, c in zip(i0, i1, vals):
    r_write[a, b] = c
r_acc = xp.f.copy()
np.add.at(r_acc, (i0, i1), vals)
S.case("index_put_ two index tensors (last write wins)", "return x:index_put_({i, j}, v)", [E(r_write, "float64")],
       x=xp, i=make(i0 + 1, "int64"), j=make(i1 + 1, "int64"), v=make(vals, "float64"))
S.case("index_put_ accumulate (repeated positions add up)", "return x:index_put_({i, j}, v, true)",
       [E(r_acc, "float64")], x=xp, i=make(i0 + 1, "int64"), j=make(i1 + 1, "int64"), v=make(vals, "float64"))
S.case("index_put_ broadcast indices [2,1] x [3]", "return x:index_put_({i, j}, 0)",
       [E(put(xp.f, (np.array([[1], [3]]), np.array([0, 1, 2])), 0), "float64")], x=xp,
       i=make(np.array([[2], [4]]), "int64"), j=make(np.array([1, 2, 3]), "int64"))
S.case("index_put_ rows with a row of values", "return x:index_put_({i}, v)",
       [E(put(xp.f, [1, 3], np.array([7.0, 8.0, 9.0])), "float64")], x=xp, i=make(np.array([2, 4]), "int64"),
       v=make(np.array([7.0, 8.0, 9.0]), "float64"))
mp = S.rand((4, 3), "bool")
S.case("index_put_ with a bool mask", "return x:index_put_({m}, 2)", [E(put(xp.f, mp.v, 2), "float64")], x=xp, m=mp)
xa = S.rand((5,), "int64", -3, 3)
ra = xa.v.copy()
np.add.at(ra, [0, 0, 4, 0], [1, 2, 3, 4])
S.case("index_put_ accumulate int64", "return x:index_put_({i}, v, true)", [E(ra, "int64")], x=xa,
       i=make(np.array([1, 1, 5, 1]), "int64"), v=make(np.array([1, 2, 3, 4]), "int64"))
xh = S.rand((5,), "float16")
rh = xh.f.copy()
np.add.at(rh, [1, 1], [0.5, 0.25])
S.case("index_put_ accumulate float16", "return x:index_put_({i}, v, true)", [E(rh, "float16")], x=xh,
       i=make(np.array([2, 2]), "int64"), v=make(np.array([0.5, 0.25]), "float16"))
S.case("index_put_ out of range names the dim", "return x:index_put_({i, j}, 0)", [Err("out of range for dim 2 of size 3")],
       x=xp, i=make(np.array([1]), "int64"), j=make(np.array([4]), "int64"))
S.case("index_put_ with a float index is an error", "return x:index_put_({i}, 0)", [Err("must be int64, int32 or bool")],
       x=xp, i=make(np.array([1.0]), "float32"))
S.case("index_put_ with too many indices is an error", "return x:index_put_({i, i, i}, 0)", [Err("3 index tensors")],
       x=xp, i=make(np.array([1]), "int64"))
S.case("index_put_ with values that do not broadcast is an error", "return x:index_put_({i}, v)",
       [Err("do not broadcast")], x=xp, i=make(np.array([1, 2]), "int64"), v=make(np.ones(4), "float64"))
S.case("index_put_ with a mask of the wrong shape is an error", "return x:index_put_({m}, 0)", [Err("does not match")],
       x=xp, m=make(np.ones((3, 3), bool), "bool"))
S.case("index_put_ with an empty index changes nothing", "return x:index_put_({i}, 5)", [E(xp.f, "float64")], x=xp,
       i=make(np.zeros(0), "int64"))
S.run()
