#!/usr/bin/env python3
"""Pointwise ops vs NumPy: unary math on every float dtype (and ints -> float32), binary arithmetic with PyTorch
promotion, wrapped numbers, operators, comparisons, logical ops, clamp, where, masked_fill, integer edge cases,
broadcasting, non-contiguous / 0-d / zero-size inputs."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from conf import (Suite, E, Err, Bool, FLOATS, INTS, ALL, TOL_TRANSC, result_type, float_of, make,  # noqa: E402
                  round_to, NP, is_float)

S = Suite(seed=1234)
erf = np.vectorize(math.erf, otypes=[np.float64])


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def gelu(x):
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


# name -> (lua body, numpy fn on float64, (lo, hi) input range, transcendental)
UNARY = {
    "neg": ("x:neg()", lambda x: -x, (-3, 3), False),
    "abs": ("x:abs()", np.abs, (-3, 3), False),
    "exp": ("x:exp()", np.exp, (-4, 4), True),
    "log": ("x:log()", np.log, (0.05, 5), True),
    "log1p": ("x:log1p()", np.log1p, (-0.9, 4), True),
    "sqrt": ("x:sqrt()", np.sqrt, (0, 6), True),
    "rsqrt": ("x:rsqrt()", lambda x: 1 / np.sqrt(x), (0.1, 6), True),
    "sin": ("x:sin()", np.sin, (-4, 4), True),
    "cos": ("x:cos()", np.cos, (-4, 4), True),
    "tan": ("x:tan()", np.tan, (-1.4, 1.4), True),
    "tanh": ("x:tanh()", np.tanh, (-3, 3), True),
    "sigmoid": ("x:sigmoid()", sigmoid, (-6, 6), True),
    "relu": ("x:relu()", lambda x: np.maximum(x, 0), (-3, 3), False),
    "gelu": ("x:gelu()", gelu, (-4, 4), True),
    "gelu(none)": ('x:gelu("none")', gelu, (-4, 4), True),
    "gelu(tanh)": ('x:gelu("tanh")', gelu_tanh, (-4, 4), True),
    "silu": ("x:silu()", lambda x: x * sigmoid(x), (-5, 5), True),
    "erf": ("x:erf()", erf, (-2.5, 2.5), True),
    "floor": ("x:floor()", np.floor, (-4, 4), False),
    "ceil": ("x:ceil()", np.ceil, (-4, 4), False),
    "round": ("x:round()", np.round, (-4, 4), False),
    "sign": ("x:sign()", np.sign, (-3, 3), False),
}

# ---- unary ops on every float dtype ----
for dt in FLOATS:
    for name, (body, fn, (lo, hi), transc) in UNARY.items():
        x = S.rand((3, 5), dt, lo, hi)
        S.case("%s %s [3,5]" % (name, dt), body, [E(fn(x.f), dt, tol=TOL_TRANSC[dt] if transc else None)], x=x)

# the same through module functions and on non-contiguous / 0-d / zero-size inputs
x = S.rand((4, 3), "float32", -3, 3)
S.case("grace.exp(x) float32", "grace.exp(x)", [E(np.exp(x.f), "float32")], x=x)
S.case("grace.tanh(x) float32", "grace.tanh(x)", [E(np.tanh(x.f), "float32")], x=x)
S.case("grace.abs(x) float32", "grace.abs(x)", [E(np.abs(x.f), "float32")], x=x)
xt = S.rand((5, 4), "float32", -3, 3).t(1, 2)
S.case("exp of transposed float32 [4,5]", "x:exp()", [E(np.exp(xt.f), "float32")], x=xt)
xd = S.rand((5, 4), "float64", -3, 3)
S.case("sigmoid of transposed float64 [4,5]", "x:sigmoid()", [E(sigmoid(xd.t().f), "float64")], x=xd.t())
xn = S.rand((4, 7), "float16", -3, 3).narrow(2, 2, 4)
S.case("tanh of narrowed float16 [4,4]", "x:tanh()", [E(np.tanh(xn.f), "float16")], x=xn)
xe = S.rand((1, 5), "bfloat16", -3, 3).expand((3, 5))
S.case("neg of expanded bfloat16 [3,5]", "-x", [E(-xe.f, "bfloat16")], x=xe)
xs = S.rand((3, 6), "float32", -3, 3).sel(2, 4)
S.case("abs of selected column float32", "x:abs()", [E(np.abs(xs.f), "float32")], x=xs)
x0 = make(np.array(2.5), "float32")
S.case("exp of 0-d float32", "x:exp()", [E(np.exp(x0.f), "float32")], x=x0)
S.case("neg of 0-d grace.tensor(2.5) (float32 by default)", "-x", [E(np.array(-2.5), "float32")],
       x="grace.tensor(2.5)")
xz = make(np.zeros((0, 3)), "float32")
S.case("exp of zero-size [0,3]", "x:exp()", [E(np.ones((0, 3)), "float32")], x=xz)
S.case("sqrt of zero-size float16 [0,3]", "x:sqrt()", [E(np.ones((0, 3)), "float16")],
       x=make(np.zeros((0, 3)), "float16"))

# round: halves go to even (as PyTorch/NumPy)
for dt in FLOATS:
    h = S.arr([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.25, -0.75, 1.75, 2.0], dt)
    S.case("round half to even %s" % dt, "x:round()", [E(np.round(h.f), dt)], x=h)
# special values
sp = S.arr([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0], "float32")
S.case("exp of inf/-inf/nan float32", "x:exp()", [E(np.exp(sp.f), "float32")], x=sp)
S.case("relu of inf/-inf/nan float32 (nan stays nan)", "x:relu()",
       [E(np.where(np.isnan(sp.f), np.nan, np.maximum(sp.f, 0)), "float32")], x=sp)
S.case("log of 0, -1 float32 (-inf, nan)", "x:log()", [E(np.array([-np.inf, np.nan, 0.0]), "float32")],
       x=S.arr([0.0, -1.0, 1.0], "float32"))
S.case("sqrt of -1 float64 is nan", "x:sqrt()", [E(np.array([np.nan, 2.0]), "float64")],
       x=S.arr([-1.0, 4.0], "float64"))
S.case("sign of 0, -0, nan-free float32", "x:sign()", [E(np.sign(np.array([0.0, -0.0, 3.0, -2.0])), "float32")],
       x=S.arr([0.0, -0.0, 3.0, -2.0], "float32"))

# ---- unary ops on integers ----
for dt in INTS:
    lo, hi = (0, 9) if dt == "uint8" else (-9, 9)
    x = S.rand((3, 4), dt, lo, hi)
    S.case("neg %s" % dt, "x:neg()", [E(np.negative(x.v), dt)], x=x)
    S.case("unary minus %s" % dt, "-x", [E(np.negative(x.v), dt)], x=x)
    S.case("abs %s" % dt, "x:abs()", [E(np.abs(x.v), dt)], x=x)
    S.case("relu %s" % dt, "x:relu()", [E(np.maximum(x.v, 0).astype(NP[dt]), dt)], x=x)
    S.case("sign %s" % dt, "x:sign()", [E(np.sign(x.v), dt)], x=x)
    for f in ("floor", "ceil", "round"):
        S.case("%s %s (identity, stays %s)" % (f, dt, dt), "x:%s()" % f, [E(x.v, dt)], x=x)
# math ops on integers give float32
for dt in ["int64", "int32", "uint8", "bool"]:
    if dt == "bool":
        x = S.rand((3, 4), "bool")
    else:
        x = S.rand((3, 4), dt, 1 if dt == "uint8" else -3, 6)
    names = ["exp", "sqrt", "sin", "cos", "tanh", "sigmoid", "erf"] if dt == "int64" else ["exp", "sqrt", "sigmoid"]
    if dt != "bool":
        names += ["log1p"] if dt == "uint8" else []
    for name in names:
        body, fn, _, _ = UNARY[name]
        S.case("%s of %s gives float32" % (name, dt), body, [E(fn(x.f), "float32", tol=TOL_TRANSC["float32"])], x=x)
xp = S.rand((3, 4), "int64", 1, 9)
S.case("log of int64 gives float32", "x:log()", [E(np.log(xp.f), "float32")], x=xp)
S.case("rsqrt of int32 gives float32", "x:rsqrt()", [E(1 / np.sqrt(xp.f), "float32")],
       x=make(xp.v, "int32"))

# logical_not on every dtype
for dt in ALL:
    x = S.rand((2, 5), dt, -2, 2) if dt != "bool" else S.rand((2, 5), "bool")
    x = make(np.where(S.rng.random((2, 5)) < 0.3, 0, x.v), dt)
    S.case("logical_not %s" % dt, "x:logical_not()", [E(np.logical_not(x.v), "bool")], x=x)

# ---- binary ops on each dtype, [3,1] with [1,4] broadcasting ----
BIN = ["add", "sub", "mul", "div", "remainder", "pow", "maximum", "minimum"]
CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
       "ge": np.greater_equal}


def bin_ref(op, a, b, rt):
    """Reference for op on inputs a, b (Inp) with result dtype rt."""
    if is_float(rt):
        x, y = a.f, b.f
        f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "remainder": np.remainder,
             "pow": np.power, "maximum": np.maximum, "minimum": np.minimum}[op]
        with np.errstate(all="ignore"):
            return f(x, y)
    x, y = a.v.astype(NP[rt]), b.v.astype(NP[rt])
    f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "remainder": np.remainder, "pow": np.power,
         "maximum": np.maximum, "minimum": np.minimum}[op]
    return f(x, y)


for dt in FLOATS + INTS:
    for op in BIN:
        if is_float(dt):
            a = S.rand((3, 1), dt, -3, 3)
            if op in ("div", "remainder"):
                b = make(S.rng.uniform(0.5, 2.5, (1, 4)) * S.rng.choice([-1, 1], (1, 4)), dt)
            elif op == "pow":
                a = S.rand((3, 1), dt, 0.2, 2.5)
                b = S.rand((1, 4), dt, -2, 2)
            else:
                b = S.rand((1, 4), dt, -3, 3)
        else:
            lo = 0 if dt == "uint8" else -9
            a = S.rand((3, 1), dt, lo, 9)
            if op in ("div", "remainder"):
                b = make(S.rng.integers(1, 5, (1, 4)) * (1 if dt == "uint8" else S.rng.choice([-1, 1], (1, 4))), dt)
            elif op == "pow":
                b = S.rand((1, 4), dt, 0, 3)
            else:
                b = S.rand((1, 4), dt, lo, 9)
        rt = float_of(dt) if op == "div" else dt
        S.case("%s %s [3,1] with [1,4]" % (op, dt), "a:%s(b)" % op, [E(bin_ref(op, a, b, rt), rt)], a=a, b=b)
    a = S.rand((5,), dt, -3, 3)
    b = S.rand((2, 5), dt, -3, 3)
    b = make(np.where(S.rng.random((2, 5)) < 0.4, np.broadcast_to(a.v, (2, 5)), b.v), dt)  # some equal pairs
    for op, fn in CMP.items():
        S.case("%s %s [5] with [2,5]" % (op, dt), "a:%s(b)" % op, [E(fn(a.v, b.v), "bool")], a=a, b=b)
# comparisons on bool and logical_and/or on every dtype
ab, bb = S.rand((3, 1), "bool"), S.rand((1, 4), "bool")
for op, fn in CMP.items():
    if op in ("eq", "ne"):
        S.case("%s bool" % op, "a:%s(b)" % op, [E(fn(ab.v, bb.v), "bool")], a=ab, b=bb)
for dt in ALL:
    a = make(np.where(S.rng.random((3, 1)) < 0.4, 0, S.rand((3, 1), dt, 1, 3).v), dt)
    b = make(np.where(S.rng.random((1, 4)) < 0.4, 0, S.rand((1, 4), dt, 1, 3).v), dt)
    S.case("logical_and %s" % dt, "a:logical_and(b)", [E(np.logical_and(a.v, b.v), "bool")], a=a, b=b)
    S.case("logical_or %s" % dt, "a:logical_or(b)", [E(np.logical_or(a.v, b.v), "bool")], a=a, b=b)
a = S.rand((2, 3), "float32")
b = make(np.where(S.rng.random((2, 3)) < 0.5, 0, 1), "int64")
S.case("logical_and float32 with int64", "a:logical_and(b)", [E(np.logical_and(a.v, b.v), "bool")], a=a, b=b)

# ---- operators, alpha, module functions, numbers on either side ----
a = S.rand((2, 3), "float32", -3, 3)
b = make(S.rng.uniform(0.5, 2, (2, 3)), "float32")
S.case("a + b operator", "a + b", [E(a.f + b.f, "float32")], a=a, b=b)
S.case("a - b operator", "a - b", [E(a.f - b.f, "float32")], a=a, b=b)
S.case("a * b operator", "a * b", [E(a.f * b.f, "float32")], a=a, b=b)
S.case("a / b operator", "a / b", [E(a.f / b.f, "float32")], a=a, b=b)
S.case("a % b operator (floor mod)", "a % b", [E(np.remainder(a.f, b.f), "float32")], a=a, b=b)
S.case("b ^ a operator", "b ^ a", [E(np.power(b.f, a.f), "float32", tol=TOL_TRANSC["float32"])], a=a, b=b)
S.case("add with alpha", "a:add(b, 2.5)", [E(a.f + 2.5 * b.f, "float32")], a=a, b=b)
S.case("sub with alpha", "a:sub(b, 3)", [E(a.f - 3 * b.f, "float32")], a=a, b=b)
S.case("grace.add(a, b)", "grace.add(a, b)", [E(a.f + b.f, "float32")], a=a, b=b)
S.case("grace.maximum(a, b)", "grace.maximum(a, b)", [E(np.maximum(a.f, b.f), "float32")], a=a, b=b)
S.case("grace.pow(b, 2)", "grace.pow(b, 2)", [E(b.f ** 2, "float32")], b=b)
S.case("2 - a (number on the left)", "2 - a", [E(2 - a.f, "float32")], a=a)
S.case("2 / b (number on the left)", "2 / b", [E(2 / b.f, "float32")], b=b)
S.case("2 ^ a (number on the left)", "2 ^ a", [E(2.0 ** a.f, "float32")], a=a)
S.case("5.5 % b (number on the left)", "5.5 % b", [E(np.remainder(5.5, b.f), "float32")], b=b)
S.case("a * 0.5 + 1", "a * 0.5 + 1", [E(a.f * 0.5 + 1, "float32")], a=a)
S.case("a ^ 2", "a ^ 2", [E(a.f ** 2, "float32")], a=a)
S.case("a ^ 3 (negative base, integer exponent)", "a ^ 3", [E(a.f ** 3, "float32")], a=a)
S.case("b ^ 0.5", "b ^ 0.5", [E(np.sqrt(b.f), "float32")], b=b)
S.case("a:pow(b) tensor exponent, negative base -> nan for fractional", "a:pow(b)",
       [E(np.power(a.f, b.f), "float32", tol=TOL_TRANSC["float32"])], a=a, b=b)
S.case("x < y raises an error naming lt", "a < b", [Err("lt")], a=a, b=b)
S.case("x <= y raises an error naming le", "a <= b", [Err("le")], a=a, b=b)
S.case("== is identity (same tensor)", "a == a", [Bool(True)], a=a)
S.case("== is identity (equal values, different tensors)", "a == a:clone()", [Bool(False)], a=a)

# ---- type promotion: tensor-tensor ----
PAIRS = [("int32", "int64"), ("uint8", "int32"), ("uint8", "int64"), ("bool", "uint8"), ("bool", "float16"),
         ("float16", "bfloat16"), ("float16", "float32"), ("bfloat16", "float32"), ("float32", "float64"),
         ("int64", "float16"), ("int32", "bfloat16"), ("int64", "float32"), ("uint8", "float64"),
         ("int32", "float64"), ("bool", "int32")]
for da, db in PAIRS:
    a = S.rand((2, 3), da, 0, 5) if da != "bool" else S.rand((2, 3), "bool")
    b = S.rand((2, 3), db, 0, 5) if db != "bool" else S.rand((2, 3), "bool")
    rt = result_type(da, db)
    x, y = a.v.astype(np.float64), b.v.astype(np.float64)
    S.case("%s + %s -> %s" % (da, db, rt), "a + b", [E(x + y, rt)], a=a, b=b)
    S.case("%s * %s -> %s" % (db, da, rt), "b * a", [E(x * y, rt)], a=a, b=b)
    S.case("%s:eq(%s) compares in %s" % (da, db, rt), "a:eq(b)", [E(round_to(x, rt) == round_to(y, rt), "bool")],
           a=a, b=b)
# ---- wrapped numbers (PyTorch semantics: a number never widens within its category) ----
WR = [("int64", "2.5", 2.5), ("int32", "2.5", 2.5), ("uint8", "0.5", 0.5), ("bool", "1.5", 1.5),
      ("int32", "2", 2), ("uint8", "3", 3), ("bool", "2", 2), ("float16", "3", 3), ("float16", "2.5", 2.5),
      ("bfloat16", "2.5", 2.5), ("bfloat16", "3", 3), ("float32", "7", 7), ("float64", "0.1", 0.1),
      ("int64", "-4", -4)]
for dt, lit, num in WR:
    a = S.rand((2, 3), dt, 0, 5) if dt != "bool" else S.rand((2, 3), "bool")
    rt = result_type(dt, num)
    S.case("%s * %s -> %s" % (dt, lit, rt), "a * %s" % lit, [E(a.v.astype(np.float64) * num, rt)], a=a)
    S.case("%s + %s (number first) -> %s" % (lit, dt, rt), "%s + a" % lit, [E(a.v.astype(np.float64) + num, rt)],
           a=a)
f16 = S.rand((4,), "float16", -2, 2)
S.case("float16 * 3 keeps float16 (the product is rounded once)", "a * 3", [E(f16.f * 3, "float16")], a=f16)
S.case("float16 + 0.0001 stays float16", "a + 0.0001",
       [E(f16.f + 1e-4, "float16")], a=f16)
# 0-d tensors take part only when of a higher category
i32 = S.rand((3,), "int32", -5, 5)
f32 = S.rand((3,), "float32")
S.case("int32 [3] + 0-d float64 -> float64", "a + grace.tensor(1.25, {dtype='float64'})",
       [E(i32.f + 1.25, result_type("int32", ("0d", "float64")))], a=i32)
S.case("float32 [3] + 0-d float64 -> float32", "a + grace.tensor(0.1, {dtype='float64'})",
       [E(f32.f + 0.1, result_type("float32", ("0d", "float64")))], a=f32)
S.case("int32 [3] + 0-d int64 -> int32", "a + grace.tensor(7)", [E(i32.i + 7, result_type("int32", ("0d", "int64")))],
       a=i32)
S.case("0-d float32 + 0-d float64 -> float64", "grace.tensor(1.5) + grace.tensor(0.25, {dtype='float64'})",
       [E(np.array(1.75), "float64")])
S.case("0-d int64 + 2.5 -> float32", "grace.tensor(3) + 2.5", [E(np.array(5.5), "float32")])

# ---- true division of ints; int div by zero; floor-mod signs; integer pow; uint8 wraparound ----
ia = S.arr([7, -7, 7, -7, 0, 9, -9, 1], "int64")
ib = S.arr([2, 2, -2, -2, 3, 4, 4, 3], "int64")
S.case("int64 / int64 is true division -> float32", "a / b", [E(ia.f / ib.f, "float32")], a=ia, b=ib)
S.case("int32 / int32 -> float32", "a:div(b)", [E(ia.f / ib.f, "float32")], a=make(ia.v, "int32"),
       b=make(ib.v, "int32"))
S.case("int64 / 2 -> float32", "a / 2", [E(ia.f / 2, "float32")], a=ia)
S.case("int64 / 0 -> inf, -inf, nan", "a / 0", [E(np.array([np.inf, -np.inf, np.nan]), "float32")],
       a=S.arr([3, -3, 0], "int64"))
S.case("float32 / 0 -> inf, -inf, nan", "a / b", [E(np.array([np.inf, -np.inf, np.nan, -np.inf]), "float32")],
       a=S.arr([1.0, -2.0, 0.0, 1.0], "float32"), b=S.arr([0.0, 0.0, 0.0, -0.0], "float32"))
S.case("int64 % int64 floor-mod signs", "a % b", [E(np.remainder(ia.v, ib.v), "int64")], a=ia, b=ib)
S.case("int32 remainder floor-mod signs", "a:remainder(b)", [E(np.remainder(ia.v, ib.v), "int32")],
       a=make(ia.v, "int32"), b=make(ib.v, "int32"))
S.case("int64 % 3 (number)", "a % 3", [E(np.remainder(ia.v, 3), "int64")], a=ia)
S.case("int64 % -3 (negative number)", "a % -3", [E(np.remainder(ia.v, -3), "int64")], a=ia)
fa = S.arr([5.5, -5.5, 5.5, -5.5, 0.0, 3.0], "float64")
fb = S.arr([2.0, 2.0, -2.0, -2.0, 1.5, 1.5], "float64")
S.case("float64 % floor-mod signs", "a % b", [E(np.remainder(fa.f, fb.f), "float64")], a=fa, b=fb)
S.case("float32 remainder floor-mod signs", "a:remainder(b)", [E(np.remainder(fa.f, fb.f), "float32")],
       a=make(fa.v, "float32"), b=make(fb.v, "float32"))
pa = S.arr([2, -3, 5, 0, 1, -1, 7, 10], "int64")
pb = S.arr([3, 3, 0, 2, 9, 4, 2, 1], "int64")
S.case("int64 pow int64 (integer pow)", "a:pow(b)", [E(np.power(pa.v, pb.v), "int64")], a=pa, b=pb)
S.case("int64 ^ 2 stays int64", "a ^ 2", [E(pa.v ** 2, "int64")], a=pa)
S.case("int64 ^ 0.5 -> float32", "b ^ 0.5", [E(np.sqrt(pb.f), "float32")], b=pb)
S.case("2 ^ int64 stays int64", "2 ^ b", [E(2 ** pb.v, "int64")], b=pb)
S.case("int32 pow int32", "a:pow(b)", [E(np.power(pa.v, pb.v), "int32")], a=make(pa.v, "int32"),
       b=make(pb.v, "int32"))
S.case("int64 pow large exponent (3^39 exact)", "a:pow(39)", [E(np.array([3 ** 39, -(3 ** 39)]), "int64")],
       a=S.arr([3, -3], "int64"))
u = S.arr([250, 255, 3, 128], "uint8")
S.case("uint8 250 + 10 wraps", "a + 10", [E(u.v + np.uint8(10), "uint8")], a=u)
S.case("uint8 - uint8 wraps", "a - b", [E(u.v - S.arr([5, 0, 4, 200], "uint8").v, "uint8")], a=u,
       b=S.arr([5, 0, 4, 200], "uint8"))
S.case("uint8 * uint8 wraps", "a * b", [E(u.v * np.array([2, 2, 100, 2], np.uint8), "uint8")], a=u,
       b=S.arr([2, 2, 100, 2], "uint8"))
S.case("uint8 neg wraps", "-a", [E(np.negative(u.v), "uint8")], a=u)
S.case("int32 overflow wraps", "a + b", [E(np.array([2 ** 31 - 1], np.int32) + np.array([1], np.int32), "int32")],
       a=S.arr([2 ** 31 - 1], "int32"), b=S.arr([1], "int32"))
S.case("uint8 / uint8 true division", "a / b", [E(u.f / 3, "float32")], a=u, b=S.arr([3, 3, 3, 3], "uint8"))

# ---- maximum/minimum NaN propagation, comparisons with NaN ----
na = S.arr([1.0, np.nan, 3.0, np.nan], "float32")
nb = S.arr([np.nan, 2.0, 1.0, np.nan], "float32")
S.case("maximum propagates nan", "a:maximum(b)", [E(np.maximum(na.f, nb.f), "float32")], a=na, b=nb)
S.case("minimum propagates nan", "a:minimum(b)", [E(np.minimum(na.f, nb.f), "float32")], a=na, b=nb)
S.case("eq with nan is false", "a:eq(b)", [E(na.f == nb.f, "bool")], a=na, b=nb)
S.case("ne with nan is true", "a:ne(b)", [E(na.f != nb.f, "bool")], a=na, b=nb)
S.case("lt with nan is false", "a:lt(b)", [E(np.less(na.f, nb.f), "bool")], a=na, b=nb)
S.case("maximum int32 with float16 promotes", "a:maximum(b)", [E(np.maximum(i32.f, 0.5), "float16")],
       a=i32, b=S.arr([0.5, 0.5, 0.5], "float16"))
S.case("gt with a number", "a:gt(0.5)", [E(f32.f > 0.5, "bool")], a=f32)
S.case("int64 lt float number 2.5", "a:lt(2.5)", [E(i32.f < 2.5, "bool")], a=make(i32.v, "int64"))
S.case("eq with 0-d tensor", "a:eq(grace.tensor(2))", [E(np.array([True, False, True]), "bool")],
       a=make(np.array([2, 1, 2]), "int64"))

# ---- clamp ----
for dt in FLOATS:
    x = S.rand((3, 4), dt, -3, 3)
    S.case("clamp(-1, 1.5) %s" % dt, "x:clamp(-1, 1.5)", [E(np.clip(x.f, -1, 1.5), dt)], x=x)
    S.case("clamp(nil, 0.5) %s" % dt, "x:clamp(nil, 0.5)", [E(np.minimum(x.f, 0.5), dt)], x=x)
    S.case("clamp(-0.5) %s" % dt, "x:clamp(-0.5)", [E(np.maximum(x.f, -0.5), dt)], x=x)
for dt in INTS:
    x = S.rand((3, 4), dt, 0 if dt == "uint8" else -9, 9)
    S.case("clamp(2, 6) %s" % dt, "x:clamp(2, 6)", [E(np.clip(x.v, 2, 6), dt)], x=x)
    S.case("clamp(nil, 4) %s" % dt, "x:clamp(nil, 4)", [E(np.minimum(x.v, 4), dt)], x=x)
x = S.rand((4, 3), "float32", -3, 3).t()
S.case("grace.clamp on transposed input", "grace.clamp(x, -1, 1)", [E(np.clip(x.f, -1, 1), "float32")], x=x)

# ---- where ----
c = S.rand((3, 1), "bool")
a = S.rand((1, 4), "float32")
b = S.rand((3, 4), "float32")
S.case("where bool [3,1], f32 [1,4], f32 [3,4]", "grace.where(c, a, b)", [E(np.where(c.v, a.f, b.f), "float32")],
       c=c, a=a, b=b)
S.case("where(c, a, 0.0) number", "grace.where(c, a, 0.0)", [E(np.where(c.v, a.f, 0.0), "float32")], c=c, a=a)
S.case("where(c, 1.5, b) number first", "grace.where(c, 1.5, b)", [E(np.where(c.v, 1.5, b.f), "float32")],
       c=c, b=b)
S.case("where(c, 1.0, 0.0) two numbers -> float32", "grace.where(c, 1.0, 0.0)",
       [E(np.broadcast_to(np.where(c.v, 1.0, 0.0), (3, 1)), "float32")], c=c)
S.case("where(c, 1, 0) two integers -> int64", "grace.where(c, 1, 0)",
       [E(np.where(c.v, 1, 0), "int64")], c=c)
h = S.rand((1, 4), "float16")
S.case("where(c, f16, 0) stays float16", "grace.where(c, h, 0)", [E(np.where(c.v, h.f, 0.0), "float16")], c=c, h=h)
S.case("where(c, f16, f32) -> float32", "grace.where(c, h, b)", [E(np.where(c.v, h.f, b.f), "float32")],
       c=c, h=h, b=b)
il = S.rand((3, 4), "int64", -5, 5)
S.case("where(c, int64, 2.5) -> float32", "grace.where(c, il, 2.5)", [E(np.where(c.v, il.f, 2.5), "float32")],
       c=c, il=il)
S.case("where(c, int64, int32) -> int64", "grace.where(c, il, i)",
       [E(np.where(c.v, il.v, np.array([1, 2, 3, 4])), "int64")], c=c, il=il, i=S.arr([[1, 2, 3, 4]], "int32"))
cm = S.rand((3, 4), "bool")
S.case("where with a non-contiguous condition", "grace.where(c, a, b)",
       [E(np.where(cm.t().v, b.t().f, 0.5), "float32")], c=cm.t(), a=b.t(), b="0.5")

# ---- masked_fill ----
for dt in ["float32", "float16", "bfloat16", "float64", "int64", "int32", "uint8", "bool"]:
    x = S.rand((3, 4), dt, 0, 5) if dt != "bool" else S.rand((3, 4), "bool")
    m = S.rand((1, 4), "bool")
    val, vlit = (True, "true") if dt == "bool" else ((3, "3") if not is_float(dt) else (-1.5, "-1.5"))
    S.case("masked_fill %s with mask [1,4]" % dt, "x:masked_fill(m, %s)" % vlit,
           [E(np.where(m.v, val, x.v), dt)], x=x, m=m)
x = S.rand((3, 4), "float32")
m = S.rand((3, 4), "bool")
S.case("masked_fill with -inf", "x:masked_fill(m, -1/0)", [E(np.where(m.v, -np.inf, x.f), "float32")], x=x, m=m)
S.case("masked_fill int64 with 2", "x:masked_fill(m, 2)",
       [E(np.where(m.v, 2, S.arr(np.arange(12).reshape(3, 4), "int64").v), "int64")],
       x=S.arr(np.arange(12).reshape(3, 4), "int64"), m=m)
S.case("grace.masked_fill on transposed input", "grace.masked_fill(x, m, 0)",
       [E(np.where(m.t().v, 0, x.t().f), "float32")], x=x.t(), m=m.t())

# ---- broadcasting shapes, 0-d and zero-size tensors for binary ops ----
a = S.rand((3, 1), "float32")
b = S.rand((1, 4), "float32")
S.case("[3,1] * [1,4] -> [3,4]", "a * b", [E(a.f * b.f, "float32")], a=a, b=b)
a5, b25 = S.rand((5,), "float64"), S.rand((2, 5), "float64")
S.case("[5] - [2,5] -> [2,5]", "a - b", [E(a5.f - b25.f, "float64")], a=a5, b=b25)
a3 = S.rand((2, 1, 3), "float32")
b3 = S.rand((4, 1), "float32")
S.case("[2,1,3] + [4,1] -> [2,4,3]", "a + b", [E(a3.f + b3.f, "float32")], a=a3, b=b3)
S.case("incompatible shapes [3] + [4] is an error", "a + b", [Err()], a=S.rand((3,), "float32"),
       b=S.rand((4,), "float32"))
x0 = make(np.array(2.5), "float32")
S.case("0-d * [3,1]", "a * b", [E(x0.f * a.f, "float32")], a=x0, b=a)
S.case("0-d + 0-d -> 0-d", "a + a", [E(x0.f * 2, "float32")], a=x0)
z = make(np.zeros((0, 3)), "float32")
S.case("zero-size [0,3] + [3] -> [0,3]", "a + b", [E(np.zeros((0, 3)), "float32")], a=z,
       b=S.rand((3,), "float32"))
S.case("zero-size [0,3] + [1,3] -> [0,3]", "a + b", [E(np.zeros((0, 3)), "float32")], a=z,
       b=S.rand((1, 3), "float32"))
S.case("zero-size [0,3]:lt(1) -> bool [0,3]", "a:lt(1)", [E(np.zeros((0, 3), bool), "bool")], a=z)
# non-contiguous binary inputs
p = S.rand((4, 3), "float32")
q = S.rand((3, 6), "float32")
S.case("transposed + narrowed", "a + b", [E(p.t().f + q.narrow(2, 2, 4).f, "float32")], a=p.t(),
       b=q.narrow(2, 2, 4))
S.case("expanded * transposed", "a * b", [E(np.broadcast_to(S.arr([[1.5], [2.0], [-1.0]], "float32").f, (3, 4))
                                            * p.t().f, "float32")],
       a=S.arr([[1.5], [2.0], [-1.0]], "float32").expand((3, 4)), b=p.t())
r3 = S.rand((2, 3, 4), "float16")
S.case("permuted float16 - number", "a - 1", [E(np.transpose(r3.f, (2, 0, 1)) - 1, "float16")], a=r3.permute(3, 1, 2))
S.case("selected row / transposed column (float64)", "a / b",
       [E(S.arr([1.0, 2.0, 4.0], "float64").f / np.array([0.5, 0.25, 8.0]), "float64")],
       a=S.arr([[9, 9, 9], [1.0, 2.0, 4.0]], "float64").sel(1, 2),
       b=S.arr([[0.5, 1], [0.25, 1], [8.0, 1]], "float64").sel(2, 1))

# ---- every dtype pair: promotion matrix for add, div, eq, maximum ----
for da in ALL:
    for db in ALL:
        a = S.rand((2, 3), da, 0, 4) if da != "bool" else S.rand((2, 3), "bool")
        b = S.rand((3,), db, 1, 4) if db != "bool" else make(np.array([True, True, False]), "bool")
        rt = result_type(da, db)
        x, y = a.v.astype(np.float64), b.v.astype(np.float64)
        if not (da == "bool" and db == "bool"):  # bool + bool is logical or in PyTorch; not a case here
            S.case("pair %s + %s -> %s" % (da, db, rt), "a + b",
                   [E(a.v.astype(NP[rt]) + b.v.astype(NP[rt]) if not is_float(rt) else x + y, rt)], a=a, b=b)
        S.case("pair %s / %s -> %s" % (da, db, float_of(rt)), "a / b", [E(x / y, float_of(rt))], a=a, b=b)
        S.case("pair %s:eq(%s)" % (da, db), "a:eq(b)", [E(round_to(x, rt) == round_to(y, rt), "bool")], a=a, b=b)
        if rt != "bool":
            S.case("pair maximum(%s, %s) -> %s" % (da, db, rt), "a:maximum(b)", [E(np.maximum(x, y), rt)], a=a, b=b)

# ---- every dtype with integer and float Lua numbers ----
for dt in ALL:
    a = S.rand((2, 3), dt, 1, 6) if dt != "bool" else S.rand((2, 3), "bool")
    x = a.v.astype(np.float64)
    for lit, num, op, fn in [("2", 2, "+", np.add), ("2.5", 2.5, "+", np.add), ("3", 3, "*", np.multiply),
                             ("1.5", 1.5, "-", np.subtract), ("2", 2, "/", np.divide), ("0.5", 0.5, "/", np.divide),
                             ("3", 3, "%", np.remainder), ("2.5", 2.5, "%", np.remainder), ("2", 2, "^", np.power),
                             ("0.5", 0.5, "^", np.power)]:
        if dt == "bool" and op in ("-", "%", "^"):
            continue
        rt = result_type(dt, num)
        if op == "/":
            rt = float_of(rt)
        if is_float(rt):
            ref = fn(x, float(num))
        else:
            ref = fn(a.v.astype(NP[rt]), np.array(num, dtype=NP[rt]))
        S.case("%s %s %s -> %s" % (dt, op, lit, rt), "a %s %s" % (op, lit), [E(ref, rt)], a=a)

# ---- special values of the math functions ----
big = S.arr([-1000.0, -100.0, -20.0, 20.0, 100.0, 1000.0], "float32")
S.case("exp overflows to inf, underflows to 0", "x:exp()", [E(np.exp(big.f), "float32")], x=big)
S.case("sigmoid saturates without nan", "x:sigmoid()", [E(1 / (1 + np.exp(-big.f)), "float32")], x=big)
S.case("tanh saturates without nan", "x:tanh()", [E(np.tanh(big.f), "float32")], x=big)
S.case("silu of large values", "x:silu()", [E(big.f / (1 + np.exp(-big.f)), "float32")], x=big)
S.case("gelu of large values", "x:gelu()", [E(np.where(big.f > 0, big.f, 0.0), "float32")], x=big)
S.case("gelu tanh of large values", 'x:gelu("tanh")', [E(np.where(big.f > 0, big.f, 0.0), "float32")], x=big)
S.case("erf of large values", "x:erf()", [E(np.sign(big.f), "float32")], x=big)
S.case("sigmoid float16 of large values", "x:sigmoid()", [E(1 / (1 + np.exp(-big.f)), "float16")],
       x=make(big.v, "float16"))
S.case("exp float16 overflows to inf above 11.09", "x:exp()", [E(np.exp(np.array([11.0, 11.5, -20.0])), "float16")],
       x=S.arr([11.0, 11.5, -20.0], "float16"))
S.case("rsqrt(0) is inf, rsqrt(inf) is 0", "x:rsqrt()", [E(np.array([np.inf, 0.0, 0.5]), "float32")],
       x=S.arr([0.0, np.inf, 4.0], "float32"))
S.case("log1p of tiny values is accurate", "x:log1p()", [E(np.log1p(np.array([1e-10, -1e-12, 1e-30])), "float64")],
       x=S.arr([1e-10, -1e-12, 1e-30], "float64"))
S.case("log1p float32 of tiny values", "x:log1p()", [E(np.log1p(np.array([1e-7, -3e-8, 1e-20])), "float32")],
       x=S.arr([1e-7, -3e-8, 1e-20], "float32"))
sv = S.arr([np.inf, -np.inf, np.nan, -0.0, 2.5, -2.5], "float32")
for f, fn in [("floor", np.floor), ("ceil", np.ceil), ("round", np.round), ("abs", np.abs), ("neg", np.negative)]:
    S.case("%s of inf/-inf/nan/-0" % f, "x:%s()" % f, [E(fn(sv.f), "float32")], x=sv)
S.case("clamp keeps nan", "x:clamp(-1, 1)", [E(np.clip(sv.f, -1, 1), "float32")], x=sv)
S.case("0 ^ 0 is 1 (float)", "x ^ 0", [E(np.array([1.0, 1.0, 1.0]), "float32")], x=S.arr([0.0, 2.0, -3.0], "float32"))
S.case("0 ^ 0 is 1 (int64)", "x:pow(0)", [E(np.array([1, 1, 1]), "int64")], x=S.arr([0, 2, -3], "int64"))
S.case("negative base ^ fractional is nan", "x ^ (1/3)", [E(np.power(np.array([-8.0, 8.0]), 1 / 3), "float64")],
       x=S.arr([-8.0, 8.0], "float64"))
S.case("x ^ -1 float", "x ^ -1", [E(1 / np.array([2.0, -4.0, 0.5]), "float32")], x=S.arr([2.0, -4.0, 0.5], "float32"))
S.case("sqrt(-0.0) is -0.0, sqrt(inf) is inf", "x:sqrt()", [E(np.array([-0.0, np.inf]), "float32")],
       x=S.arr([-0.0, np.inf], "float32"))
S.case("remainder with inf divisor", "a % b", [E(np.remainder(np.array([3.0, -3.0]), np.array([np.inf, np.inf])),
                                                 "float64")],
       a=S.arr([3.0, -3.0], "float64"), b=S.arr([np.inf, np.inf], "float64"))
S.case("where with a 0-d condition broadcasts", "grace.where(c, a, b)",
       [E(np.where(True, S.arr([1.0, 2.0], "float32").f, 0.0) * np.ones((2, 2)), "float32")],
       c=make(np.array(True), "bool"), a=S.arr([1.0, 2.0], "float32"), b=make(np.zeros((2, 2)), "float32"))
S.case("comparison of int64 with a float number", "a:eq(2.0)", [E(np.array([False, True, False]), "bool")],
       a=S.arr([1, 2, 3], "int64"))
S.case("comparison of int64 with 2.5", "a:ge(2.5)", [E(np.array([False, False, True]), "bool")],
       a=S.arr([1, 2, 3], "int64"))

# ---- int64 stays exact beyond 2^53 (no double intermediates) ----
B53 = 2 ** 53
bi = S.arr([B53 + 1, -B53 - 3, 2 ** 62 + 7, -(2 ** 62) - 9, 5], "int64")
bj = S.arr([B53, 1, 2 ** 61 + 3, 2, -(2 ** 60) - 1], "int64")
S.case("int64 add beyond 2^53", "a + b", [E(bi.v + bj.v, "int64")], a=bi, b=bj)
S.case("int64 sub beyond 2^53", "a - b", [E(bi.v - bj.v, "int64")], a=bi, b=bj)
S.case("int64 mul beyond 2^53", "a * 3", [E(bi.v * 3, "int64")], a=bi)
S.case("int64 + a large Lua integer", "a + 9007199254740993", [E(bi.v + (B53 + 1), "int64")], a=bi)
S.case("int64 remainder beyond 2^53", "a % 1000003", [E(np.remainder(bi.v, 1000003), "int64")], a=bi)
S.case("int64 remainder by a large divisor", "a:remainder(b)", [E(np.remainder(bi.v, bj.v), "int64")], a=bi, b=bj)
S.case("int64 maximum beyond 2^53", "a:maximum(b)", [E(np.maximum(bi.v, bj.v), "int64")], a=bi, b=bj)
S.case("int64 eq distinguishes 2^53 and 2^53+1", "a:eq(b)", [E(np.array([False, True]), "bool")],
       a=S.arr([B53, B53 + 1], "int64"), b=S.arr([B53 + 1, B53 + 1], "int64"))
S.case("int64 lt distinguishes 2^53 and 2^53+1", "a:lt(b)", [E(np.array([True, False]), "bool")],
       a=S.arr([B53, B53 + 1], "int64"), b=S.arr([B53 + 1, B53 + 1], "int64"))
S.case("int64 abs/neg beyond 2^53", "-(a:abs())", [E(-np.abs(bi.v), "int64")], a=bi)
S.case("int64 clamp with large bounds", "a:clamp(-4611686018427387904, 9007199254740993)",
       [E(np.clip(bi.v, -(2 ** 62), B53 + 1), "int64")], a=bi)
S.case("int64 masked_fill with a large value", "a:masked_fill(m, 4611686018427387905)",
       [E(np.where([True, False, True, False, False], 2 ** 62 + 1, bi.v), "int64")], a=bi,
       m=make(np.array([True, False, True, False, False]), "bool"))
S.case("where with large int64 numbers", "grace.where(m, 9007199254740993, a)",
       [E(np.where([True, False, True, False, False], B53 + 1, bi.v), "int64")], a=bi,
       m=make(np.array([True, False, True, False, False]), "bool"))
S.case("int64 pow exact (3^37)", "a:pow(37)", [E(np.array([3 ** 37]), "int64")], a=S.arr([3], "int64"))
S.case("int64 sign beyond 2^53", "a:sign()", [E(np.sign(bi.v), "int64")], a=bi)

S.run()
