#!/usr/bin/env python3
"""The ops composed in stdlib/grace/ops.lua vs NumPy: dot, norm (p = 2, "fro", 1, 3, 0, inf, -inf over all elements,
dims and keepdim), median (all elements; along a dim with 1-based indices, lower median, NaN), flip, roll, unique
(sorted, inverse, counts), allclose and equal (Lua booleans), and the distributions of multinomial, uniform_ and
normal_ (their draws are checked by their statistics, NumPy cannot draw grace's Philox numbers)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from conf import Suite, E, Idx, Bool, Check, Cross, values, make  # noqa: E402

S = Suite(seed=777)
SH = (3, 4, 5)


def lower_median(v, axis):
    """values and 0-based indices of the lower median along axis of distinct values"""
    n = v.shape[axis]
    order = np.argsort(v, axis=axis, kind="stable")
    i = np.take(order, [(n - 1) // 2], axis=axis)
    return np.take_along_axis(v, i, axis=axis).squeeze(axis), i.squeeze(axis)


# ---- dot ----
for dt in ["float32", "float64", "float16", "int32", "int64"]:
    a, b = S.rand((7,), dt, -3, 3), S.rand((7,), dt, -3, 3)
    ref = np.dot(a.f, b.f)
    S.case("dot %s" % dt, "a:dot(b)", [E(ref, dt, mag=np.abs(a.f * b.f).sum())], a=a, b=b)
x = S.rand((4, 6), "float32")
S.case("dot of strided views (columns)", "grace.dot(x:select(2, 2), x:select(2, 5))",
       [E(np.dot(x.f[:, 1], x.f[:, 4]), "float32", mag=np.abs(x.f[:, 1] * x.f[:, 4]).sum())], x=x)

# ---- norm ----
for dt in ["float32", "float64", "float16"]:
    x = S.rand(SH, dt)
    a = np.abs(x.f)
    S.case("norm() %s" % dt, "x:norm()", [E(np.sqrt((x.f ** 2).sum()), dt)], x=x)
    S.case("norm('fro') %s" % dt, 'x:norm("fro")', [E(np.linalg.norm(x.f.ravel()), dt)], x=x)
    S.case("norm(1, 2) %s" % dt, "x:norm(1, 2)", [E(a.sum(1), dt)], x=x)
    S.case("norm(3, {1,3}) %s" % dt, "x:norm(3, {1, 3})", [E((a ** 3).sum((0, 2)) ** (1 / 3), dt)], x=x)
    S.case("norm(2, -1, true) %s keepdim" % dt, "x:norm(2, -1, true)",
           [E(np.sqrt((x.f ** 2).sum(2, keepdims=True)), dt)], x=x)
    S.case("norm(inf, {2,3}) %s" % dt, "x:norm(math.huge, {2, 3})", [E(a.max((1, 2)), dt)], x=x)
    S.case("norm(inf) %s all" % dt, "x:norm(math.huge)", [E(a.max(), dt)], x=x)
    S.case("norm(-inf, 1, true) %s" % dt, "x:norm(-math.huge, 1, true)", [E(a.min(0, keepdims=True), dt)], x=x)
z = S.arr([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]], "float32")
S.case("norm(0) counts nonzeros", "x:norm(0)", [E(np.float64(3), "float32")], x=z)
S.case("norm(0, 2)", "x:norm(0, 2)", [E(np.array([1.0, 2.0]), "float32")], x=z)
x = S.rand((4, 5), "float32")
S.case("norm of a transposed view", "x:t():norm(2, 1)", [E(np.sqrt((x.f.T ** 2).sum(0)), "float32")], x=x)

# ---- median ----
for dt in ["float32", "float64", "float16", "int64", "int32"]:
    d = S.distinct(SH, dt, -50, 50)
    v2, i2 = lower_median(d.f, 1)
    S.case("median() %s (60 elements: lower)" % dt, "x:median()", [E(np.sort(d.f.ravel())[29], dt)], x=d)
    S.case("median(2) %s values, indices" % dt, "x:median(2)", [E(v2, dt), Idx(i2)], x=d)
    v3, i3 = lower_median(d.f, 2)
    S.case("median(-1, true) %s keepdim" % dt, "x:median(-1, true)",
           [E(v3[..., None], dt), Idx(i3[..., None])], x=d)
    v1, i1 = lower_median(d.f, 0)
    S.case("median(1) %s (odd: the middle)" % dt, "x:median(1)", [E(v1, dt), Idx(i1)], x=d)
o = S.distinct((7,), "float32")
S.case("median() odd count", "x:median()", [E(np.median(o.f), "float32")], x=o)
nanx = S.arr([[3.0, 1.0, np.nan, 2.0], [4.0, 0.5, 1.5, 9.0]], "float32")
S.case("median(2) with NaN: NaN, index of the NaN", "x:median(2)",
       [E(np.array([np.nan, 1.5]), "float32"), Idx(np.array([2, 2]))], x=nanx)
S.case("median() with NaN is NaN", "x:median()", [E(np.float64(np.nan), "float32")], x=nanx)
d = S.distinct((5, 4), "float32")
v, i = lower_median(d.f.T, 1)
S.case("median(2) of a transposed view", "x:t():median(2)", [E(v, "float32"), Idx(i)], x=d)

# ---- flip ----
for dt in ["float32", "int64", "bool", "float16"]:
    x = S.rand(SH, dt)
    S.case("flip(1) %s" % dt, "x:flip(1)", [E(np.flip(x.f, 0), dt, exact=True)], x=x)
    S.case("flip({1,3}) %s" % dt, "x:flip({1, 3})", [E(np.flip(x.f, (0, 2)), dt, exact=True)], x=x)
    S.case("flip(-1) %s" % dt, "x:flip(-1)", [E(np.flip(x.f, 2), dt, exact=True)], x=x)
x = S.rand((4, 6), "float32")
S.case("flip of a transposed view", "x:t():flip(2)", [E(np.flip(x.f.T, 1), "float32", exact=True)], x=x)
S.case("flip({}) is a copy", "local y = x:flip({}); y[1] = 0; return x",
       [E(x.f, "float32", exact=True)], x=x)

# ---- roll ----
x = S.rand(SH, "float32")
for sh, ax in [(1, 0), (-2, 2), (7, 1), ((1, 2), (0, 2)), ((-1, 3, 5), (0, 1, 2))]:
    shl = "{%s}" % ", ".join(map(str, sh)) if isinstance(sh, tuple) else str(sh)
    axl = "{%s}" % ", ".join(str(a + 1) for a in ax) if isinstance(ax, tuple) else str(ax + 1)
    S.case("roll(%s, %s)" % (shl, axl), "x:roll(%s, %s)" % (shl, axl),
           [E(np.roll(x.f, sh, ax), "float32", exact=True)], x=x)
S.case("roll(4) flattened", "x:roll(4)", [E(np.roll(x.f, 4), "float32", exact=True)], x=x)
S.case("roll(-61) flattened", "x:roll(-61)", [E(np.roll(x.f, -61), "float32", exact=True)], x=x)
xi = S.rand((6,), "int32", -5, 5)
S.case("roll(0, 1) int32 is a copy", "x:roll(0, 1)", [E(xi.f, "int32", exact=True)], x=xi)
S.case("roll(2, -1) of a transposed view", "x:t():roll(2, -1)", [E(np.roll(x.f[0].T, 2, 1), "float32", exact=True)],
       x=S.arr(x.f[0], "float32"))

# ---- unique ----
for dt in ["int64", "int32", "float32", "float64", "uint8"]:
    u = S.randint((4, 6), dt, 0, 7) if dt in ("int64", "int32", "uint8") else \
        make(S.rng.integers(-3, 4, size=(4, 6)) * 0.5, dt)
    vals, inv, cnt = np.unique(u.f, return_inverse=True, return_counts=True)
    S.case("unique() %s" % dt, "x:unique()", [E(vals, dt, exact=True)], x=u)
    S.case("unique(true, true, true) %s" % dt, "x:unique(true, true, true)",
           [E(vals, dt, exact=True), Idx(inv.reshape(4, 6)), E(cnt, "int64")], x=u)
    S.case("unique{return_counts=true} %s" % dt, "x:unique{return_counts = true}",
           [E(vals, dt, exact=True), E(cnt, "int64")], x=u)
one = S.arr([5, 5, 5], "int64")
S.case("unique of one repeated value", "x:unique(true, true, true)",
       [E(np.array([5]), "int64"), Idx(np.zeros(3)), E(np.array([3]), "int64")], x=one)
b = S.rand((9,), "bool")
vb, ib, cb = np.unique(b.v, return_inverse=True, return_counts=True)
S.case("unique bool", "x:unique(true, true, true)", [E(vb, "bool"), Idx(ib), E(cb, "int64")], x=b)
S.case("unique of nothing", "x:unique(true, true, true)",
       [E(np.zeros(0), "float32"), E(np.zeros((0, 3)), "int64"), E(np.zeros(0), "int64")],
       x=S.arr(np.zeros((0, 3)), "float32"))

# ---- allclose, equal ----
a = S.rand((3, 4), "float32")
for desc, b_v, kw, lua in [("equal inputs", a.f, {}, ""), ("off by 1e-3", a.f + 1e-3, {}, ""),
                           ("off by 1e-3, atol 1e-2", a.f + 1e-3, dict(atol=1e-2), ", 1e-5, 1e-2"),
                           ("off by 1e-4 relative, rtol 1e-3", a.f * (1 + 1e-4), dict(rtol=1e-3), ", 1e-3")]:
    bb = make(b_v, "float32")
    S.case("allclose: %s" % desc, "grace.allclose(a, b%s)" % lua,
           [Bool(bool(np.allclose(a.f, bb.f, **kw)))], a=a, b=bb)
S.case("allclose broadcasts", "grace.allclose(a, b)", [Bool(True)], a=S.arr([[1.0, 2.0], [1.0, 2.0]], "float32"),
       b=S.arr([1.0, 2.0], "float32"))
S.case("allclose with a number", "grace.allclose(a, 2)", [Bool(True)], a=S.arr([2.0, 2.0 + 1e-7], "float64"))
S.case("equal: same", "grace.equal(a, b)", [Bool(True)], a=S.arr([1, 2, 3], "int64"), b=S.arr([1, 2, 3], "int64"))
S.case("equal: one element differs", "grace.equal(a, b)", [Bool(False)], a=S.arr([1, 2, 3], "int64"),
       b=S.arr([1, 2, 4], "int64"))
S.case("equal: broadcastable shapes differ", "grace.equal(a, b)", [Bool(False)],
       a=S.arr([[1, 2]], "int64"), b=S.arr([1, 2], "int64"))


# ---- random: multinomial, uniform_, normal_ (statistics; a seed is fixed in each body) ----
def freq(weights, n, tol):
    p = np.asarray(weights, dtype=np.float64)
    p = p / p.sum()

    def fn(g):
        v = values(g)
        if v is None or g[1] != "int64":
            return False, "not an int64 tensor"
        h = np.bincount(v.astype(int).ravel() - 1, minlength=len(p))[:len(p)] / v.size
        return bool(np.all(np.abs(h - p) < tol) and v.min() >= 1 and v.max() <= len(p)), "frequencies %s" % list(h)
    return Check(fn, "category frequencies")


w = [1.0, 0.0, 3.0, 6.0]
S.case("multinomial with replacement: frequencies", "grace.manual_seed(3)\nreturn x:multinomial(20000, true)",
       [freq(w, 20000, 0.015)], x=S.arr(w, "float32"))
S.case("multinomial 2-D rows, float64", "grace.manual_seed(4)\nreturn x:multinomial(5000, true):select(1, 2)",
       [freq([0.0, 1.0, 1.0], 5000, 0.03)], x=S.arr([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]], "float64"))


def perms(k, ncat, zero):
    def fn(g):
        v = values(g)
        if v is None:
            return False, "not a tensor"
        ok = all(len(set(r)) == k and zero + 1 not in r for r in v.astype(int).tolist())
        return ok, "rows %s" % v.astype(int).tolist()[:3]
    return Check(fn, "distinct, never the zero weight")


S.case("multinomial without replacement", "grace.manual_seed(5)\nreturn x:multinomial(3)",
       [perms(3, 4, 1)], x=S.arr([[1.0, 0.0, 2.0, 3.0]] * 50, "float32"))


def dist(lo, hi, mean, std):
    def fn(g):
        v = values(g)
        ok = v.min() >= lo and v.max() < hi and abs(v.mean() - mean) < 0.05 * (hi - lo) and abs(v.std() - std) < 0.1 * std
        return bool(ok), "min %g max %g mean %g std %g" % (v.min(), v.max(), v.mean(), v.std())
    return Check(fn, "distribution")


S.case("uniform_(-1, 3)", "grace.manual_seed(6)\nreturn grace.zeros(4000):uniform_(-1, 3)",
       [dist(-1, 3, 1, 4 / np.sqrt(12))])
S.case("normal_(2, 0.5) float64", 'grace.manual_seed(6)\nreturn grace.zeros(4000, {dtype="float64"}):normal_(2, 0.5)',
       [dist(-1e9, 1e9, 2, 0.5)])

S.run()
