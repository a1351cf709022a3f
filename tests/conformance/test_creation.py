#!/usr/bin/env python3
"""Creation ops vs NumPy: zeros, ones, full, empty, arange (integer and float steps), linspace, eye, *_like; and
the random ones (rand, randn, randint, rand_like, randn_like): range, shape, dtype, mean/std on 10k samples,
reproducibility with grace.manual_seed, and that two draws differ."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from conf import Suite, E, Err, Check, Cross, values, ALL, make  # noqa: E402

S = Suite(seed=99)

# ---- zeros / ones / full / empty ----
S.case("zeros(2, 3) -> float32", "grace.zeros(2, 3)", [E(np.zeros((2, 3)), "float32")])
S.case("zeros({2, 3})", "grace.zeros({2, 3})", [E(np.zeros((2, 3)), "float32")])
S.case("zeros({0, 3}) zero-size", "grace.zeros({0, 3})", [E(np.zeros((0, 3)), "float32")])
S.case("zeros({}) is 0-d", "grace.zeros({})", [E(np.array(0.0), "float32")])
S.case("ones(4) -> [4]", "grace.ones(4)", [E(np.ones(4), "float32")])
for dt in ALL:
    S.case("zeros({2,2}, {dtype=%s})" % dt, 'grace.zeros({2, 2}, {dtype="%s"})' % dt, [E(np.zeros((2, 2)), dt)])
    S.case("ones({3}, {dtype=%s})" % dt, 'grace.ones({3}, {dtype="%s"})' % dt, [E(np.ones(3), dt)])
S.case("ones with dtype alias 'half'", 'grace.ones({2}, {dtype="half"})', [E(np.ones(2), "float16")])
S.case("ones with grace.float64", "grace.ones({2}, {dtype=grace.float64})", [E(np.ones(2), "float64")])
S.case("full({2,3}, 7.5) -> float32", "grace.full({2, 3}, 7.5)", [E(np.full((2, 3), 7.5), "float32")])
S.case("full({2,2}, 7) integer -> int64", "grace.full({2, 2}, 7)", [E(np.full((2, 2), 7), "int64")])
S.case("full({2}, true) -> bool", "grace.full({2}, true)", [E(np.ones(2, bool), "bool")])
S.case("full({2,3}, 0.1, float16) rounds", 'grace.full({2, 3}, 0.1, {dtype="float16"})',
       [E(np.full((2, 3), 0.1), "float16")])
S.case("full({3}, 0.1, bfloat16) rounds", 'grace.full({3}, 0.1, {dtype="bfloat16"})', [E(np.full(3, 0.1), "bfloat16")])
S.case("full({3}, 0.1, float64) exact", 'grace.full({3}, 0.1, {dtype="float64"})', [E(np.full(3, 0.1), "float64")])
S.case("full({2}, -3, int32)", 'grace.full({2}, -3, {dtype="int32"})', [E(np.full(2, -3), "int32")])
S.case("full({2}, 200, uint8)", 'grace.full({2}, 200, {dtype="uint8"})', [E(np.full(2, 200), "uint8")])
S.case("full({2}, 2^40, int64) exact", 'grace.full({2}, 1099511627776, {dtype="int64"})',
       [E(np.full(2, 2 ** 40), "int64")])
S.case("full({0, 2}, 1.5)", "grace.full({0, 2}, 1.5)", [E(np.zeros((0, 2)), "float32")])


def shape_dtype(shape, dt):
    def fn(g):
        if g[0] != "T":
            return False, "not a tensor"
        return (g[1] == dt and tuple(g[2]) == shape), "got %s %s, expected %s %s" % (g[1], list(g[2]), dt, list(shape))
    return Check(fn, "shape/dtype")


S.case("empty({2, 3}) shape and dtype", "grace.empty({2, 3})", [shape_dtype((2, 3), "float32")])
S.case("empty(4, {dtype=int64})", 'grace.empty(4, {dtype="int64"})', [shape_dtype((4,), "int64")])

# ---- arange ----
S.case("arange(5) -> int64", "grace.arange(5)", [E(np.arange(5), "int64")])
S.case("arange(2, 7)", "grace.arange(2, 7)", [E(np.arange(2, 7), "int64")])
S.case("arange(1, 10, 3)", "grace.arange(1, 10, 3)", [E(np.arange(1, 10, 3), "int64")])
S.case("arange(10, 0, -3)", "grace.arange(10, 0, -3)", [E(np.arange(10, 0, -3), "int64")])
S.case("arange(-3, 3)", "grace.arange(-3, 3)", [E(np.arange(-3, 3), "int64")])
S.case("arange(0) -> empty", "grace.arange(0)", [E(np.arange(0), "int64")])
S.case("arange(0, 1, 0.1) -> float32, 10 values", "grace.arange(0, 1, 0.1)",
       [E(np.arange(10) * 0.1, "float32")])
S.case("arange(1.0, 2.5, 0.5) -> float32", "grace.arange(1.0, 2.5, 0.5)", [E(np.array([1.0, 1.5, 2.0]), "float32")])
S.case("arange(0.5, 3) -> float32", "grace.arange(0.5, 3)", [E(np.array([0.5, 1.5, 2.5]), "float32")])
S.case("arange(-1, 1, 0.25)", "grace.arange(-1, 1, 0.25)", [E(-1 + 0.25 * np.arange(8), "float32")])
S.case("arange(1, 0, -0.3) -> 4 values", "grace.arange(1, 0, -0.3)", [E(1 - 0.3 * np.arange(4), "float32")])
S.case("arange(5, {dtype=float64})", 'grace.arange(5, {dtype="float64"})', [E(np.arange(5), "float64")])
S.case("arange(0, 1, 0.1, {dtype=float64})", 'grace.arange(0, 1, 0.1, {dtype="float64"})',
       [E(np.arange(10) * 0.1, "float64")])
S.case("arange(2, 8, 2, {dtype=int32})", 'grace.arange(2, 8, 2, {dtype="int32"})', [E(np.arange(2, 8, 2), "int32")])
S.case("arange(6, {dtype=float16})", 'grace.arange(6, {dtype="float16"})', [E(np.arange(6), "float16")])
S.case("arange with step 0 is an error", "grace.arange(0, 5, 0)", [Err()])

# ---- linspace ----
S.case("linspace(0, 1, 5) -> float32", "grace.linspace(0, 1, 5)", [E(np.linspace(0, 1, 5), "float32")])
S.case("linspace(-1, 1, 7, float64)", 'grace.linspace(-1, 1, 7, {dtype="float64"})',
       [E(np.linspace(-1, 1, 7), "float64")])
S.case("linspace(0, 1, 11) float64 (exact endpoints)", 'grace.linspace(0, 1, 11, {dtype="float64"})',
       [E(np.linspace(0, 1, 11), "float64")])
S.case("linspace(3, -2, 6) decreasing", "grace.linspace(3, -2, 6)", [E(np.linspace(3, -2, 6), "float32")])
S.case("linspace(2, 3, 1) -> [2]", "grace.linspace(2, 3, 1)", [E(np.array([2.0]), "float32")])
S.case("linspace(0, 1, 0) -> empty", "grace.linspace(0, 1, 0)", [E(np.zeros(0), "float32")])
S.case("linspace(0, 10, 100) float32", "grace.linspace(0, 10, 100)", [E(np.linspace(0, 10, 100), "float32")])
S.case("linspace(0, 1, 5, float16)", 'grace.linspace(0, 1, 5, {dtype="float16"})',
       [E(np.linspace(0, 1, 5), "float16")])

# ---- eye ----
S.case("eye(3) -> float32", "grace.eye(3)", [E(np.eye(3), "float32")])
S.case("eye(2, 4)", "grace.eye(2, 4)", [E(np.eye(2, 4), "float32")])
S.case("eye(4, 2)", "grace.eye(4, 2)", [E(np.eye(4, 2), "float32")])
S.case("eye(3, {dtype=int64})", 'grace.eye(3, {dtype="int64"})', [E(np.eye(3), "int64")])
S.case("eye(2, 3, {dtype=bool})", 'grace.eye(2, 3, {dtype="bool"})', [E(np.eye(2, 3), "bool")])
S.case("eye(1)", "grace.eye(1)", [E(np.eye(1), "float32")])
S.case("eye(0) -> [0,0]", "grace.eye(0)", [E(np.eye(0), "float32")])

# ---- *_like ----
for dt in ["float32", "float16", "int32", "bool"]:
    x = S.rand((2, 3), dt, 0, 5) if dt != "bool" else S.rand((2, 3), "bool")
    S.case("zeros_like %s" % dt, "grace.zeros_like(x)", [E(np.zeros((2, 3)), dt)], x=x)
    S.case("ones_like %s" % dt, "grace.ones_like(x)", [E(np.ones((2, 3)), dt)], x=x)
x = S.rand((2, 3), "int32", 0, 5)
S.case("zeros_like(x, {dtype=float64})", 'grace.zeros_like(x, {dtype="float64"})', [E(np.zeros((2, 3)), "float64")],
       x=x)
S.case("full_like(int32, 3)", "grace.full_like(x, 3)", [E(np.full((2, 3), 3), "int32")], x=x)
S.case("full_like(float16, 2.5)", "grace.full_like(x, 2.5)", [E(np.full((3, 2), 2.5), "float16")],
       x=S.rand((3, 2), "float16"))
S.case("zeros_like of a transposed view", "grace.zeros_like(x)", [E(np.zeros((3, 2)), "int32")], x=x.t())
S.case("ones_like of zero-size", "grace.ones_like(x)", [E(np.zeros((0, 3)), "float32")],
       x=make(np.zeros((0, 3)), "float32"))
S.case("rand_like float64 shape/dtype", "grace.rand_like(x)", [shape_dtype((2, 4), "float64")],
       x=S.rand((2, 4), "float64"))
S.case("randn_like float16 shape/dtype", "grace.randn_like(x)", [shape_dtype((5,), "float16")],
       x=S.rand((5,), "float16"))


# ---- random numbers ----
def stats(dt, shape, lo, hi, mean, std, mean_tol, std_tol, strict_hi=True, integer=False, all_values=None):
    def fn(g):
        if g[0] != "T":
            return False, "not a tensor"
        if g[1] != dt or tuple(g[2]) != shape:
            return False, "got %s %s, expected %s %s" % (g[1], list(g[2]), dt, list(shape))
        v = values(g).reshape(-1)
        bad = []
        if np.isnan(v).any():
            bad.append("%d NaN values" % int(np.isnan(v).sum()))
        if v.min() < lo or (v.max() >= hi if strict_hi else v.max() > hi):
            bad.append("range [%g, %g] outside [%g, %g%s" % (v.min(), v.max(), lo, hi, ")" if strict_hi else "]"))
        if integer and not np.all(v == np.round(v)):
            bad.append("non-integer values")
        if mean is not None and abs(v.mean() - mean) > mean_tol:
            bad.append("mean %.5f, expected %.5f +- %g" % (v.mean(), mean, mean_tol))
        if std is not None and abs(v.std() - std) > std_tol:
            bad.append("std %.5f, expected %.5f +- %g" % (v.std(), std, std_tol))
        if all_values is not None and set(np.unique(v).astype(int)) != set(all_values):
            bad.append("values taken %s, expected all of %s" % (sorted(set(np.unique(v).astype(int))), all_values))
        if len(np.unique(v)) < min(v.size // 2, 100) and not integer:
            bad.append("only %d distinct values in %d" % (len(np.unique(v)), v.size))
        return not bad, "; ".join(bad)
    return Check(fn, "distribution")


U_STD = 1 / math.sqrt(12)
S.case("rand({100,100}) float32: [0,1), mean 1/2, std 1/sqrt(12)", "grace.manual_seed(1)\nreturn grace.rand({100, 100})",
       [stats("float32", (100, 100), 0, 1, 0.5, U_STD, 0.02, 0.01)])
S.case("rand(10000) float64", 'grace.manual_seed(2)\nreturn grace.rand(10000, {dtype="float64"})',
       [stats("float64", (10000,), 0, 1, 0.5, U_STD, 0.02, 0.01)])
S.case("rand float16 stays in [0,1)", 'grace.manual_seed(3)\nreturn grace.rand({10000}, {dtype="float16"})',
       [stats("float16", (10000,), 0, 1, 0.5, U_STD, 0.02, 0.01)])
S.case("rand bfloat16 stays in [0,1)", 'grace.manual_seed(4)\nreturn grace.rand({10000}, {dtype="bfloat16"})',
       [stats("bfloat16", (10000,), 0, 1, 0.5, U_STD, 0.02, 0.01)])
S.case("randn({100,100}) float32: mean 0, std 1", "grace.manual_seed(5)\nreturn grace.randn({100, 100})",
       [stats("float32", (100, 100), -7, 7, 0.0, 1.0, 0.05, 0.05)])
S.case("randn(10000) float64", 'grace.manual_seed(6)\nreturn grace.randn(10000, {dtype="float64"})',
       [stats("float64", (10000,), -7, 7, 0.0, 1.0, 0.05, 0.05)])
S.case("randn float16", 'grace.manual_seed(7)\nreturn grace.randn({10000}, {dtype="float16"})',
       [stats("float16", (10000,), -7, 7, 0.0, 1.0, 0.05, 0.05)])
S.case("randint(3, 10, {10000}) -> int64 in [3,10)", "grace.manual_seed(8)\nreturn grace.randint(3, 10, {10000})",
       [stats("int64", (10000,), 3, 9, 6.0, math.sqrt((7 ** 2 - 1) / 12), 0.1, 0.1, strict_hi=False, integer=True,
              all_values=list(range(3, 10)))])
S.case("randint(-5, 5, {2,3}, int32)", 'grace.manual_seed(9)\nreturn grace.randint(-5, 5, {2, 3}, {dtype="int32"})',
       [stats("int32", (2, 3), -5, 4, None, None, 0, 0, strict_hi=False, integer=True)])
S.case("randint(0, 2, {1000}) gives both 0 and 1", "grace.manual_seed(10)\nreturn grace.randint(0, 2, {1000})",
       [stats("int64", (1000,), 0, 1, 0.5, 0.5, 0.08, 0.05, strict_hi=False, integer=True, all_values=[0, 1])])
S.case("rand({0, 3}) zero-size", "grace.rand({0, 3})", [E(np.zeros((0, 3)), "float32")])
# the distribution's shape, not only its moments: 10 equal bins of the uniform each near 1000
S.case("rand histogram is flat (10 bins of 10000 samples)", "grace.manual_seed(11)\nreturn grace.rand({10000})",
       [Check(lambda g: (lambda h: (h.min() > 850 and h.max() < 1150, "bin counts %s" % list(h)))(
           np.histogram(values(g), bins=10, range=(0, 1))[0]), "histogram")])
S.case("randn: 68% within one sigma", "grace.manual_seed(12)\nreturn grace.randn({10000})",
       [Check(lambda g: (lambda f: (abs(f - 0.6827) < 0.02, "fraction within 1 sigma %.4f" % f))(
           float(np.mean(np.abs(values(g)) < 1))), "one sigma")])


def same(i, j, want_equal):
    def fn(vals):
        a, b = values(vals[i]), values(vals[j])
        if a is None or b is None:
            return False, "results are not tensors"
        if a.shape != b.shape:
            return False, "shapes differ: %s vs %s" % (a.shape, b.shape)
        eq = bool(np.array_equal(a, b))
        if want_equal:
            return eq, "same seed gave different numbers (%d of %d differ)" % (int((a != b).sum()), a.size)
        return not eq, "two draws gave identical numbers"
    return fn


def both(*fns):
    def fn(vals):
        for f in fns:
            ok, d = f(vals)
            if not ok:
                return ok, d
        return True, ""
    return fn


for name, call in [("rand", "grace.rand({1000})"), ("randn", "grace.randn({1000})"),
                   ("randint", "grace.randint(0, 1000, {1000})"), ("rand float64", 'grace.rand({1000}, {dtype="float64"})'),
                   ("randn bfloat16", 'grace.randn({1000}, {dtype="bfloat16"})')]:
    S.case("manual_seed reproduces %s; the next draw differs" % name,
           "grace.manual_seed(42)\nlocal a = %s\ngrace.manual_seed(42)\nlocal b = %s\nlocal c = %s\nreturn a, b, c"
           % (call, call, call), [Cross(both(same(0, 1, True), same(1, 2, False)))])
S.case("different seeds give different rand", "grace.manual_seed(1)\nlocal a = grace.rand({1000})\n"
       "grace.manual_seed(2)\nreturn a, grace.rand({1000})", [Cross(same(0, 1, False))])
S.case("two draws without reseeding differ", "return grace.rand({1000}), grace.rand({1000})",
       [Cross(same(0, 1, False))])
S.case("rand_like reproduces with manual_seed", "grace.manual_seed(7)\nlocal a = grace.rand_like(x)\n"
       "grace.manual_seed(7)\nreturn a, grace.rand_like(x)", [Cross(same(0, 1, True))], x=S.rand((50,), "float32"))
S.case("randn_like differs between draws", "return grace.randn_like(x), grace.randn_like(x)",
       [Cross(same(0, 1, False))], x=S.rand((50,), "float32"))

# ---- arange length and value rules (size = ceil((end - start) / step) in double; value i = start + i * step) ----
S.case("arange(1, 1.3, 0.1) has 4 values (as NumPy/PyTorch)", "grace.arange(1, 1.3, 0.1)",
       [E(1 + 0.1 * np.arange(len(np.arange(1, 1.3, 0.1))), "float32")])
S.case("arange(0, 0.3, 0.1) has 3 values", "grace.arange(0, 0.3, 0.1)", [E(0.1 * np.arange(3), "float32")])
S.case("arange(0, 100, 0.1) float32 (no drift)", "grace.arange(0, 100, 0.1)",
       [E(0.1 * np.arange(len(np.arange(0, 100, 0.1))), "float32")])
S.case("arange(0, 100, 0.1) float64 (no drift)", 'grace.arange(0, 100, 0.1, {dtype="float64"})',
       [E(0.1 * np.arange(len(np.arange(0, 100, 0.1))), "float64")])
S.case("arange(5, 1) (bounds inconsistent with the step) is an error, as PyTorch", "grace.arange(5, 1)", [Err()])
S.case("arange(0, 10, 3) int64 -> 0,3,6,9", "grace.arange(0, 10, 3)", [E(np.array([0, 3, 6, 9]), "int64")])
S.case("arange of big int64 values stays exact", "grace.arange(4611686018427387904, 4611686018427387907)",
       [E(np.array([2 ** 62, 2 ** 62 + 1, 2 ** 62 + 2]), "int64")])
S.case("arange(10, {dtype=uint8})", 'grace.arange(10, {dtype="uint8"})', [E(np.arange(10), "uint8")])
S.case("arange(0, 2, 0.25, {dtype=bfloat16})", 'grace.arange(0, 2, 0.25, {dtype="bfloat16"})',
       [E(0.25 * np.arange(8), "bfloat16")])
S.case("linspace(0, 1, 1000) float32 endpoints exact", "local l = grace.linspace(0, 1, 1000)\nreturn l[1], l[1000]",
       [E(np.array(0.0), "float32", exact=True), E(np.array(1.0), "float32", exact=True)])
S.case("linspace(-5, 5, 101) float64", 'grace.linspace(-5, 5, 101, {dtype="float64"})',
       [E(np.linspace(-5, 5, 101), "float64")])
S.case("linspace(1, 5, 5, {dtype=int64})", 'grace.linspace(1, 5, 5, {dtype="int64"})', [E(np.arange(1, 6), "int64")])
S.case("rand(3, 4) with the shape as numbers", "grace.rand(3, 4)", [shape_dtype((3, 4), "float32")])
S.case("randn(2, 3, {dtype=float64})", 'grace.randn(2, 3, {dtype="float64"})', [shape_dtype((2, 3), "float64")])
S.case("randint(5, 6, {100}) is all 5", "grace.randint(5, 6, {100})", [E(np.full(100, 5), "int64")])
S.case("randint with a range beyond 2^32", "grace.manual_seed(3)\nreturn grace.randint(0, 1099511627776, {2000})",
       [stats("int64", (2000,), 0, 2 ** 40 - 1, 2 ** 39, None, 2 ** 39 * 0.1, 0, strict_hi=False, integer=True)])
S.case("randint(low >= high) is an error", "grace.randint(5, 5, {3})", [Err()])
S.case("rand of a uint8 dtype is an error (floats only)", 'grace.rand({3}, {dtype="int64"})', [Err()])
S.case("zeros_like keeps bfloat16", "grace.zeros_like(x)", [E(np.zeros(4), "bfloat16")], x=S.rand((4,), "bfloat16"))
S.case("full_like(x, 2.5, {dtype=float64})", 'grace.full_like(x, 2.5, {dtype="float64"})', [E(np.full(4, 2.5), "float64")],
       x=S.rand((4,), "int32", 0, 3))
S.case("ones_like of an expanded view is a normal [3,4]", "grace.ones_like(x)", [E(np.ones((3, 4)), "float32")],
       x=S.rand((1, 4), "float32").expand((3, 4)))
S.case("eye(3, 3) bfloat16", 'grace.eye(3, 3, {dtype="bfloat16"})', [E(np.eye(3), "bfloat16")])

S.case("full int64 2^62+1 exact", 'grace.full({2}, 4611686018427387905, {dtype="int64"})',
       [E(np.full(2, 2 ** 62 + 1), "int64")])
S.case("full_like int64 with 2^53+1", "grace.full_like(x, 9007199254740993)", [E(np.full(3, 2 ** 53 + 1), "int64")],
       x=make(np.zeros(3), "int64"))

S.run()
