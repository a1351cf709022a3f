#!/usr/bin/env python3
"""In-place ops (add_, sub_, mul_, div_, copy_ with broadcast and dtype conversion, fill_, zero_, index_copy_,
masked_fill_, clamp_: values, the returned tensor is x itself, the version counter, writes through views) and the
neural-network functions (layer_norm, rms_norm with NumPy formulas, embedding) vs NumPy."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from conf import Suite, E, Err, Bool, Num, FLOATS, TOL_TRANSC, make  # noqa: E402

S = Suite(seed=4321)

# ---- add_ / sub_ / mul_ / div_ ----
OPS = {"add_": np.add, "sub_": np.subtract, "mul_": np.multiply, "div_": np.divide}
for dt in FLOATS:
    x = S.rand((3, 4), dt)
    y = make(S.rng.uniform(0.5, 2, (4,)) * S.rng.choice([-1, 1], 4), dt)
    for op, fn in OPS.items():
        S.case("%s %s [3,4] with broadcast [4]" % (op, dt), "local r = x:%s(y)\nreturn x, rawequal(r, x)" % op,
               [E(fn(x.f, y.f), dt), Bool(True)], x=x, y=y)
        S.case("%s %s with a number" % (op, dt), "x:%s(1.5)\nreturn x" % op, [E(fn(x.f, 1.5), dt)], x=x)
for dt in ["int64", "int32", "uint8"]:
    x = S.rand((3, 4), dt, 0 if dt == "uint8" else -9, 9)
    y = S.rand((3, 1), dt, 0 if dt == "uint8" else -9, 9)
    S.case("add_ %s with broadcast [3,1]" % dt, "x:add_(y)\nreturn x", [E(x.v + y.v, dt)], x=x, y=y)
    S.case("sub_ %s" % dt, "x:sub_(y)\nreturn x", [E(x.v - y.v, dt)], x=x, y=y)
    S.case("mul_ %s by 3" % dt, "x:mul_(3)\nreturn x", [E(x.v * np.array(3, x.v.dtype), dt)], x=x)
x = S.rand((3, 4), "float32")
y64 = S.rand((3, 4), "float64")
S.case("add_ float32 with a float64 tensor keeps float32", "x:add_(y)\nreturn x", [E(x.f + y64.f, "float32")], x=x,
       y=y64)
S.case("mul_ float16 with a float32 tensor keeps float16", "x:mul_(y)\nreturn x", [E(S.arr(x.f, "float16").f * x.f,
                                                                                   "float16")],
       x=S.arr(x.f, "float16"), y=x)
S.case("add_ int64 with an int32 tensor keeps int64", "x:add_(y)\nreturn x", [E(np.arange(6) + 3, "int64")],
       x=make(np.arange(6), "int64"), y=make(np.full(6, 3), "int32"))
S.case("add_ float32 with an int64 tensor", "x:add_(y)\nreturn x", [E(x.f + 2, "float32")], x=x,
       y=make(np.full((3, 4), 2), "int64"))
S.case("uint8 add_ wraps", "x:add_(10)\nreturn x", [E(np.array([250, 255, 0], np.uint8) + np.uint8(10), "uint8")],
       x=make(np.array([250, 255, 0]), "uint8"))
S.case("add_ that would need to broadcast x is an error", "x:add_(y)", [Err()], x=S.rand((4,), "float32"),
       y=S.rand((3, 4), "float32"))
S.case("add_ bumps the version counter", "local v0 = x:version()\nx:add_(1)\nreturn x:version() > v0", [Bool(True)],
       x=x)
S.case("every in-place op bumps the version counter",
       "local n = 0\nlocal ops = {function() x:add_(1) end, function() x:sub_(1) end, function() x:mul_(2) end,\n"
       "  function() x:div_(2) end, function() x:copy_(x:clone()) end, function() x:fill_(1) end,\n"
       "  function() x:zero_() end, function() x:masked_fill_(m, 1) end, function() x:clamp_(0, 1) end,\n"
       "  function() x:index_copy_(1, i, x:narrow(1, 1, 1):clone()) end}\n"
       "for _, f in ipairs(ops) do local v = x:version(); f(); if x:version() > v then n = n + 1 end end\n"
       "return n", [Num(10)],
       x=x, m=make(np.ones((3, 4), bool), "bool"), i=make(np.array([2]), "int64"))
S.case("add_ on a narrowed view writes the base", "x:narrow(2, 2, 2):add_(100)\nreturn x",
       [E(x.f + np.where(np.isin(np.arange(4), [1, 2]), 100, 0), "float32")], x=x)
S.case("mul_ on a transposed view writes the base", "x:t():mul_(y)\nreturn x",
       [E(x.f * S.arr([1, 2, 3], "float32").f[:, None], "float32")], x=x, y=S.arr([1, 2, 3], "float32"))
S.case("add_ of a tensor to itself", "x:add_(x)\nreturn x", [E(2 * x.f, "float32")], x=x)
S.case("add_ on 0-d", "x:add_(1)\nreturn x", [E(np.array(3.5), "float32")], x=make(np.array(2.5), "float32"))
S.case("add_ on zero-size", "x:add_(1)\nreturn x", [E(np.zeros((0, 3)), "float32")],
       x=make(np.zeros((0, 3)), "float32"))
S.case("div_ float64 by zero", "x:div_(0)\nreturn x", [E(np.array([np.inf, -np.inf, np.nan]), "float64")],
       x=S.arr([1.0, -1.0, 0.0], "float64"))

# ---- copy_ ----
S.case("copy_ same shape and dtype", "local r = x:copy_(y)\nreturn x, rawequal(r, x)", [E(y64.f, "float64"),
                                                                                       Bool(True)],
       x=make(np.zeros((3, 4)), "float64"), y=y64)
S.case("copy_ broadcasts [4] into [3,4]", "x:copy_(y)\nreturn x", [E(np.broadcast_to(y64.f[0], (3, 4)), "float64")],
       x=make(np.zeros((3, 4)), "float64"), y=y64.sel(1, 1))
S.case("copy_ int64 into float32 (conversion)", "x:copy_(y)\nreturn x", [E(np.arange(12).reshape(3, 4), "float32")],
       x=make(np.zeros((3, 4)), "float32"), y=make(np.arange(12).reshape(3, 4), "int64"))
tv = S.arr([2.7, -2.7, 0.5, -0.5, 100.9, -100.9], "float32")
S.case("copy_ float32 into int32 truncates toward zero", "x:copy_(y)\nreturn x", [E(np.trunc(tv.f), "int32")],
       x=make(np.zeros(6), "int32"), y=tv)
S.case("copy_ float32 into int64 truncates toward zero", "x:copy_(y)\nreturn x", [E(np.trunc(tv.f), "int64")],
       x=make(np.zeros(6), "int64"), y=tv)
S.case("copy_ float32 into float16 rounds to nearest even", "x:copy_(y)\nreturn x",
       [E(y64.f.astype(np.float32), "float16", exact=True)], x=make(np.zeros((3, 4)), "float16"),
       y=make(y64.f, "float32"))
S.case("copy_ float32 into bfloat16 rounds to nearest even", "x:copy_(y)\nreturn x",
       [E(y64.f.astype(np.float32), "bfloat16", exact=True)], x=make(np.zeros((3, 4)), "bfloat16"),
       y=make(y64.f, "float32"))
S.case("copy_ float64 into float32", "x:copy_(y)\nreturn x", [E(y64.f, "float32", exact=True)],
       x=make(np.zeros((3, 4)), "float32"), y=y64)
S.case("copy_ bool into float32", "x:copy_(y)\nreturn x", [E(np.array([1.0, 0.0, 1.0]), "float32")],
       x=make(np.zeros(3), "float32"), y=make(np.array([True, False, True]), "bool"))
S.case("copy_ float32 into bool (nonzero is true)", "x:copy_(y)\nreturn x",
       [E(np.array([True, False, True, True]), "bool")], x=make(np.zeros(4), "bool"),
       y=S.arr([0.5, 0.0, -2.0, np.nan], "float32"))
S.case("copy_ int64 into uint8 (in range)", "x:copy_(y)\nreturn x", [E(np.array([0, 7, 255]), "uint8")],
       x=make(np.zeros(3), "uint8"), y=make(np.array([0, 7, 255]), "int64"))
S.case("copy_ into a transposed view", "x:t():copy_(y)\nreturn x", [E(np.arange(12.0).reshape(4, 3).T, "float64")],
       x=make(np.zeros((3, 4)), "float64"), y=make(np.arange(12.0).reshape(4, 3), "float64"))
S.case("copy_ from a transposed view", "x:copy_(y)\nreturn x", [E(np.arange(12.0).reshape(4, 3).T, "float32")],
       x=make(np.zeros((3, 4)), "float32"), y=make(np.arange(12.0).reshape(4, 3), "float32").t())
S.case("copy_ into a narrowed view writes the base", "x:narrow(1, 2, 1):copy_(y)\nreturn x",
       [E(np.array([[0, 0, 0], [1, 2, 3], [0, 0, 0]]), "int64")], x=make(np.zeros((3, 3)), "int64"),
       y=make(np.array([1, 2, 3]), "int64"))
S.case("copy_ with a shape that does not broadcast is an error", "x:copy_(y)", [Err()],
       x=make(np.zeros((3, 4)), "float32"), y=S.rand((3,), "float32"))

# ---- fill_ / zero_ ----
for dt, lit, val in [("float32", "2.5", 2.5), ("float16", "0.1", 0.1), ("bfloat16", "0.1", 0.1), ("float64", "0.1", 0.1),
                     ("int64", "-7", -7), ("int32", "9", 9), ("uint8", "200", 200), ("bool", "true", True)]:
    x = S.rand((2, 3), dt, 0, 5) if dt != "bool" else S.rand((2, 3), "bool")
    S.case("fill_(%s) %s" % (lit, dt), "local r = x:fill_(%s)\nreturn x, rawequal(r, x)" % lit,
           [E(np.full((2, 3), val), dt), Bool(True)], x=x)
    S.case("zero_() %s" % dt, "local r = x:zero_()\nreturn x, rawequal(r, x)", [E(np.zeros((2, 3)), dt), Bool(True)],
           x=x)
x = S.rand((3, 4), "float32")
S.case("fill_ on a narrowed view writes the base", "x:narrow(2, 3, 2):fill_(-1)\nreturn x",
       [E(np.where(np.arange(4) >= 2, -1.0, x.f), "float32")], x=x)
S.case("zero_ on a transposed row writes a column of the base", "x:t()[2]:zero_()\nreturn x",
       [E(np.where(np.arange(4) == 1, 0.0, x.f), "float32")], x=x)
S.case("fill_ on 0-d", "x:fill_(4)\nreturn x", [E(np.array(4.0), "float32")], x=make(np.array(2.5), "float32"))
S.case("fill_ on zero-size", "x:fill_(4)\nreturn x", [E(np.zeros((0, 3)), "float32")],
       x=make(np.zeros((0, 3)), "float32"))

# ---- index_copy_ ----
base = S.rand((5, 3), "float32")
src = S.rand((2, 3), "float32")
exp = base.f.copy()
exp[[3, 0]] = src.f
S.case("index_copy_(1, idx, src)", "local r = x:index_copy_(1, i, s)\nreturn x, rawequal(r, x)",
       [E(exp, "float32"), Bool(True)], x=base, i=make(np.array([4, 1]), "int64"), s=src)
src2 = S.rand((5, 2), "float32")
exp2 = base.f.copy()
exp2[:, [2, 1]] = src2.f
S.case("index_copy_(2, idx, src)", "x:index_copy_(2, i, s)\nreturn x", [E(exp2, "float32")], x=base,
       i=make(np.array([3, 2]), "int64"), s=src2)
ib = S.rand((4, 2), "int64", -9, 9)
exp3 = ib.v.copy()
exp3[[1]] = [100, 200]
S.case("index_copy_ int64", "x:index_copy_(1, i, s)\nreturn x", [E(exp3, "int64")], x=ib,
       i=make(np.array([2]), "int64"), s=make(np.array([[100, 200]]), "int64"))
S.case("index_copy_ with index 0 is an error (1-based)", "x:index_copy_(1, i, s)", [Err()], x=base,
       i=make(np.array([0, 1]), "int64"), s=src)

# ---- masked_fill_ / clamp_ ----
m = S.rand((1, 4), "bool")
for dt, lit, val in [("float32", "-1.5", -1.5), ("float16", "-1.5", -1.5), ("int64", "7", 7), ("bool", "false", False)]:
    x = S.rand((3, 4), dt, 0, 5) if dt != "bool" else S.rand((3, 4), "bool")
    S.case("masked_fill_ %s with a broadcast mask" % dt, "local r = x:masked_fill_(m, %s)\nreturn x, rawequal(r, x)" % lit,
           [E(np.where(m.v, val, x.v), dt), Bool(True)], x=x, m=m)
x = S.rand((3, 4), "float32", -3, 3)
S.case("clamp_(-1, 1)", "local r = x:clamp_(-1, 1)\nreturn x, rawequal(r, x)", [E(np.clip(x.f, -1, 1), "float32"),
                                                                              Bool(True)], x=x)
S.case("clamp_(nil, 0)", "x:clamp_(nil, 0)\nreturn x", [E(np.minimum(x.f, 0), "float32")], x=x)
S.case("clamp_(2) int64", "x:clamp_(2)\nreturn x", [E(np.maximum(np.arange(-3, 5), 2), "int64")],
       x=make(np.arange(-3, 5), "int64"))
S.case("masked_fill_ on a transposed view", "x:t():masked_fill_(mm, 0)\nreturn x",
       [E(np.where(np.array([[True], [False], [True]]), 0.0, x.f), "float32")], x=x,
       mm=make(np.array([True, False, True]), "bool"))

# ---- layer_norm / rms_norm / embedding ----


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def rms_norm(x, w, eps):
    y = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps)
    return y * w if w is not None else y


for dt in FLOATS:
    T = TOL_TRANSC[dt]
    x = S.rand((3, 4, 8), dt, -2, 2)
    w, b = S.rand((8,), dt, 0.5, 1.5), S.rand((8,), dt, -0.5, 0.5)
    S.case("layer_norm %s with weight and bias" % dt, "grace.layer_norm(x, w, b)",
           [E(layer_norm(x.f, w.f, b.f, 1e-5), dt, tol=T)], x=x, w=w, b=b)
    S.case("layer_norm %s without weight/bias" % dt, "grace.layer_norm(x, nil, nil)",
           [E(layer_norm(x.f, None, None, 1e-5), dt, tol=T)], x=x)
    S.case("layer_norm %s eps=0.1" % dt, "grace.layer_norm(x, w, b, 0.1)",
           [E(layer_norm(x.f, w.f, b.f, 0.1), dt, tol=T)], x=x, w=w, b=b)
    S.case("rms_norm %s with weight" % dt, "grace.rms_norm(x, w)", [E(rms_norm(x.f, w.f, 1e-6), dt, tol=T)], x=x, w=w)
    S.case("rms_norm %s without weight" % dt, "grace.rms_norm(x, nil)", [E(rms_norm(x.f, None, 1e-6), dt, tol=T)],
           x=x)
    S.case("rms_norm %s eps=0.5" % dt, "grace.rms_norm(x, w, 0.5)", [E(rms_norm(x.f, w.f, 0.5), dt, tol=T)], x=x, w=w)
x = S.rand((6, 5), "float32")
w, b = S.rand((6,), "float32", 0.5, 1.5), S.rand((6,), "float32")
S.case("layer_norm of a transposed input [5,6]", "grace.layer_norm(x, w, b)",
       [E(layer_norm(x.f.T, w.f, b.f, 1e-5), "float32")], x=x.t(), w=w, b=b)
S.case("rms_norm of a transposed input [5,6]", "grace.rms_norm(x, w)", [E(rms_norm(x.f.T, w.f, 1e-6), "float32")],
       x=x.t(), w=w)
S.case("layer_norm of a constant row is 0 (+ bias)", "grace.layer_norm(x, nil, b)",
       [E(np.broadcast_to(b.f, (2, 6)), "float32")], x=make(np.full((2, 6), 3.0), "float32"), b=b)
S.case("layer_norm of 1-D", "grace.layer_norm(x, w, b)", [E(layer_norm(x.f[:, 0], w.f, b.f, 1e-5), "float32")],
       x=x.sel(2, 1), w=w, b=b)
S.case("rms_norm of zero-size [0,6]", "grace.rms_norm(x, w)", [E(np.zeros((0, 6)), "float32")],
       x=make(np.zeros((0, 6)), "float32"), w=w)

wt = S.rand((10, 4), "float32")
ids = S.rng.integers(0, 10, (2, 3))
S.case("embedding 2-D ids -> [2,3,4]", "grace.embedding(i, w)", [E(wt.f[ids], "float32")], i=make(ids + 1, "int64"),
       w=wt)
S.case("embedding 1-D ids (first and last rows)", "grace.embedding(i, w)", [E(wt.f[[0, 9, 4, 0]], "float32")],
       i=make(np.array([1, 10, 5, 1]), "int64"), w=wt)
S.case("embedding 0-d id -> [4]", "grace.embedding(i, w)", [E(wt.f[6], "float32")], i=make(np.array(7), "int64"),
       w=wt)
S.case("embedding with int32 ids", "grace.embedding(i, w)", [E(wt.f[ids], "float32")], i=make(ids + 1, "int32"),
       w=wt)
for dt in ["float16", "bfloat16", "float64"]:
    wd = S.rand((10, 4), dt)
    S.case("embedding %s weight" % dt, "grace.embedding(i, w)", [E(wd.f[ids], dt)], i=make(ids + 1, "int64"), w=wd)
S.case("embedding with a transposed weight", "grace.embedding(i, w)", [E(wt.f.T[[1, 3]], "float32")],
       i=make(np.array([2, 4]), "int64"), w=wt.t())
S.case("embedding with non-contiguous ids", "grace.embedding(i, w)", [E(wt.f[ids.T], "float32")],
       i=make(ids + 1, "int64").t(), w=wt)
S.case("embedding id 0 is an error (1-based)", "grace.embedding(i, w)", [Err()], i=make(np.array([0]), "int64"),
       w=wt)
S.case("embedding id past the end is an error", "grace.embedding(i, w)", [Err()], i=make(np.array([11]), "int64"),
       w=wt)
S.case("grace.gelu(x) module function", "grace.gelu(x)",
       [E(0.5 * x.f * (1 + np.vectorize(math.erf)(x.f / math.sqrt(2))), "float32")], x=x)

# ---- more in-place and normalisation edge cases ----
S.case("layer_norm with weight only", "grace.layer_norm(x, w, nil)", [E(layer_norm(x.f.T, w.f, None, 1e-5), "float32")],
       x=x.t(), w=w)
S.case("layer_norm with bias only", "grace.layer_norm(x, nil, b)", [E(layer_norm(x.f.T, None, b.f, 1e-5), "float32")],
       x=x.t(), b=b)
hx = S.rand((3, 64), "float16", 200, 1000)
hw = S.rand((64,), "float16", 0.5, 1.5)
S.case("rms_norm of large float16 values (no overflow of squares)", "grace.rms_norm(x, w)",
       [E(rms_norm(hx.f, hw.f, 1e-6), "float16")], x=hx, w=hw)
S.case("layer_norm of large float16 values", "grace.layer_norm(x, w, nil)",
       [E(layer_norm(hx.f, hw.f, None, 1e-5), "float16")], x=hx, w=hw)
S.case("layer_norm with a mismatched weight is an error", "grace.layer_norm(x, w, nil)", [Err()],
       x=S.rand((2, 6), "float32"), w=S.rand((5,), "float32"))
S.case("embedding with an empty id list", "grace.embedding(i, w)", [E(np.zeros((0, 4)), "float32")],
       i=make(np.zeros(0), "int64"), w=wt)
S.case("embedding with float ids is an error", "grace.embedding(i, w)", [Err()], i=S.arr([1.0, 2.0], "float32"), w=wt)
ic = base.f.copy()
ic[:, 1] = [7.0, 8.0, 9.0, 10.0, 11.0]
S.case("index_copy_ into a transposed view writes the base", "x:t():index_copy_(1, i, s)\nreturn x",
       [E(ic, "float32")], x=base, i=make(np.array([2]), "int64"), s=make(np.array([[7.0, 8.0, 9.0, 10.0, 11.0]]), "float32"))

S.case("fill_ int64 with 2^62+1 exact", "x:fill_(4611686018427387905)\nreturn x", [E(np.full(3, 2 ** 62 + 1), "int64")],
       x=make(np.zeros(3), "int64"))
S.case("add_ int64 beyond 2^53", "x:add_(9007199254740993)\nreturn x", [E(np.array([1, 2, 3]) + 2 ** 53 + 1, "int64")],
       x=make(np.array([1, 2, 3]), "int64"))
S.case("copy_ int64 into int64 beyond 2^53", "x:copy_(y)\nreturn x", [E(np.array([2 ** 62 + 1, -(2 ** 53) - 1]), "int64")],
       x=make(np.zeros(2), "int64"), y=make(np.array([2 ** 62 + 1, -(2 ** 53) - 1]), "int64"))

S.run()
