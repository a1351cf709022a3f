#!/usr/bin/env python3
"""grace.tensor's dtype inference, the dtype names and aliases, tensor facts (size, dim, numel, dtype, device, shape,
#x, stride, is_contiguous, item, tolist, tostring) and conversions (to, cast, float/double/half/bfloat16/long/int/
byte/bool, type, clone) vs NumPy: float -> int truncates toward zero, float32 -> float16/bfloat16 round to nearest
even (compared exactly)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from conf import Suite, E, Idx, Err, Num, Bool, Str, Lst, Check, ALL, make, device  # noqa: E402

S = Suite(seed=55)

# ---- grace.tensor inference ----
S.case("tensor of integers -> int64", "grace.tensor({{1, 2}, {3, 4}})", [E(np.array([[1, 2], [3, 4]]), "int64")])
S.case("tensor with a float -> float32", "grace.tensor({1, 2.5, 3})", [E(np.array([1, 2.5, 3]), "float32")])
S.case("tensor of booleans -> bool", "grace.tensor({true, false})", [E(np.array([True, False]), "bool")])
S.case("tensor(3) -> 0-d int64", "grace.tensor(3)", [E(np.array(3), "int64")])
S.case("tensor(2.5) -> 0-d float32", "grace.tensor(2.5)", [E(np.array(2.5), "float32")])
S.case("tensor(true) -> 0-d bool", "grace.tensor(true)", [E(np.array(True), "bool")])
S.case("tensor of a 3-deep table", "grace.tensor({{{1}, {2}}, {{3}, {4}}})",
       [E(np.array([[[1], [2]], [[3], [4]]]), "int64")])
S.case("tensor with dtype int32", 'grace.tensor({1, 2}, {dtype="int32"})', [E(np.array([1, 2]), "int32")])
S.case("tensor of floats with dtype float16 rounds", 'grace.tensor({0.1, 1/3}, {dtype="float16"})',
       [E(np.array([0.1, 1 / 3]), "float16", exact=True)])
S.case("tensor of floats with dtype bfloat16 rounds", 'grace.tensor({0.1, 1/3}, {dtype="bfloat16"})',
       [E(np.array([0.1, 1 / 3]), "bfloat16", exact=True)])
S.case("tensor of floats with dtype float64 keeps doubles", 'grace.tensor({0.1, 1/3}, {dtype="float64"})',
       [E(np.array([0.1, 1 / 3]), "float64", exact=True)])
S.case("tensor of int64 extremes", "grace.tensor({math.maxinteger, math.mininteger})",
       [E(np.array([2 ** 63 - 1, -2 ** 63]), "int64")])
S.case("ragged nesting is an error", "grace.tensor({{1, 2}, {3}})", [Err()])
S.case("ragged depth is an error", "grace.tensor({{1, 2}, 3})", [Err()])
S.case("a string element is an error", 'grace.tensor({1, "a"})', [Err()])
S.case("an unknown dtype is an error", 'grace.tensor({1}, {dtype="float8"})', [Err()])

# ---- dtype names and aliases ----
for alias, dt in [("float", "float32"), ("double", "float64"), ("half", "float16"), ("long", "int64"),
                  ("int", "int32"), ("byte", "uint8")]:
    S.case("dtype alias %r is %s" % (alias, dt), 'grace.ones({1}, {dtype="%s"}).dtype' % alias, [Str(dt)])
for dt in ALL:
    S.case("grace.%s is the string %r" % (dt, dt), "grace.%s" % dt, [Str(dt)])

# ---- facts ----
x = S.rand((2, 3, 4), "float32")
S.case("size()", "x:size()", [Lst([Num(2), Num(3), Num(4)])], x=x)
S.case("size(2)", "x:size(2)", [Num(3)], x=x)
S.case("size(-1)", "x:size(-1)", [Num(4)], x=x)
S.case("shape", "x.shape", [Lst([Num(2), Num(3), Num(4)])], x=x)
S.case("dim()", "x:dim()", [Num(3)], x=x)
S.case("numel()", "x:numel()", [Num(24)], x=x)
S.case("#x is size(1)", "#x", [Num(2)], x=x)
S.case("dtype", "x.dtype", [Str("float32")], x=x)
S.case("device is %s" % device(), "x.device", [Str(device())], x=x)
S.case("stride() of contiguous [2,3,4]", "x:stride()", [Lst([Num(12), Num(4), Num(1)])], x=x)
S.case("stride(1)", "x:stride(1)", [Num(12)], x=x)
S.case("stride() of transpose(1,3)", "x:transpose(1,3):stride()", [Lst([Num(1), Num(4), Num(12)])], x=x)
S.case("stride() of expand has 0", "x:expand({5,3}):stride()", [Lst([Num(0), Num(1)])], x=S.rand((1, 3), "float32"))
S.case("is_contiguous() of a new tensor", "x:is_contiguous()", [Bool(True)], x=x)
S.case("is_contiguous() of transpose is false", "x:transpose(1,2):is_contiguous()", [Bool(False)], x=x)
S.case("is_contiguous() of narrow(1, ...) is true", "x:narrow(1, 2, 1):is_contiguous()", [Bool(True)], x=x)
S.case("is_contiguous() of narrow(3, ...) is false", "x:narrow(3, 2, 2):is_contiguous()", [Bool(False)], x=x)
S.case("size() of 0-d is empty", "grace.tensor(2.5):size()", [Lst([])])
S.case("dim() of 0-d is 0", "grace.tensor(2.5):dim()", [Num(0)])
S.case("numel() of [0,3] is 0", "grace.zeros({0, 3}):numel()", [Num(0)])
S.case("item() of float32 0-d", "grace.tensor(2.5):item()", [Num(2.5)])
S.case("item() of int64 is a Lua integer", "math.type(grace.tensor(7):item())", [Str("integer")])
S.case("item() of int64 value", "grace.tensor(-7):item()", [Num(-7)])
S.case("item() of bool is a boolean", "grace.tensor(true):item()", [Bool(True)])
S.case("item() of a 1-element 2-D tensor", "grace.tensor({{4.5}}):item()", [Num(4.5)])
S.case("item() of float16 0.1 is the rounded value", 'grace.tensor(0.1, {dtype="float16"}):item()',
       [Num(float(np.float16(0.1)))])
S.case("item() of more than one element is an error", "grace.tensor({1, 2}):item()", [Err()])
S.case("tolist() nested tables", "grace.tensor({{1, 2}, {3, 4}}):tolist()",
       [Lst([Lst([Num(1), Num(2)]), Lst([Num(3), Num(4)])])])
S.case("tolist() of a transposed view", "grace.tensor({{1, 2}, {3, 4}}):t():tolist()",
       [Lst([Lst([Num(1), Num(3)]), Lst([Num(2), Num(4)])])])
S.case("tolist() of bool", "grace.tensor({true, false}):tolist()", [Lst([Bool(True), Bool(False)])])


def contains(*subs):
    def fn(g):
        if g[0] != "S":
            return False, "not a string"
        missing = [s for s in subs if s not in g[1]]
        return not missing, "%r lacks %s" % (g[1][:300], missing)
    return Check(fn)


S.case("tostring is PyTorch-style", "tostring(grace.tensor({1, 2, 3}))", [contains("tensor(", "1", "2", "3")])
S.case("tostring of float16 names the dtype", 'tostring(grace.tensor({1.5}, {dtype="float16"}))',
       [contains("tensor(", "1.5", "float16")])
S.case("tostring of > 1000 elements is truncated with ...", "tostring(grace.zeros(2000))", [contains("...")])

# ---- conversions ----
src = S.arr([2.7, -2.7, 0.5, -0.5, 0.0, 100.9, -100.9, 1e-3, 3.0], "float32")
srcp = S.arr([2.7, 0.5, 0.0, 100.9, 255.0, 1.0], "float32")
CONV = [("float64", "x:double()", src), ("float16", "x:half()", src), ("bfloat16", "x:bfloat16()", src),
        ("int64", "x:long()", src), ("int32", "x:int()", src), ("uint8", "x:byte()", srcp), ("bool", "x:bool()", src),
        ("float32", "x:float()", src)]
for dt, body, s_ in CONV:
    ref = np.trunc(s_.f) if dt in ("int64", "int32", "uint8") else s_.f.astype(np.float32)
    S.case("float32 %s -> %s" % (body, dt), body, [E(ref, dt, exact=True)], x=s_)
    S.case("float32 to(%s)" % dt, 'x:to("%s")' % dt, [E(ref, dt, exact=True)], x=s_)
    S.case("float32 cast(%s)" % dt, 'x:cast("%s")' % dt, [E(ref, dt, exact=True)], x=s_)
S.case('type("float64")', 'x:type("float64")', [E(src.f, "float64")], x=src)
S.case('to("cpu") keeps the values', 'x:to("cpu")', [E(src.f, "float32")], x=src)
S.case('to("cpu", "float64")', 'x:to("cpu", "float64")', [E(src.f, "float64")], x=src)
S.case("cpu() keeps the values", "x:cpu()", [E(src.f, "float32")], x=src)
# float32 -> float16 / bfloat16 rounding of random values and of exact ties
r32 = S.randn((40,), "float32", scale=3.0)
S.case("random float32 -> float16 rounds like numpy", "x:half()", [E(r32.f, "float16", exact=True)], x=r32)
S.case("random float32 -> bfloat16 rounds to nearest even", "x:bfloat16()", [E(r32.f, "bfloat16", exact=True)], x=r32)
ties = S.arr([1 + 2 ** -11, 1 + 3 * 2 ** -11, 2049.0, 2051.0, 65519.0, 65520.0, 1e-8, -1 - 2 ** -11], "float32")
S.case("float16 ties to even and overflow to inf", "x:half()", [E(ties.f, "float16", exact=True)], x=ties)
bt = S.arr([1 + 2 ** -8, 1 + 3 * 2 ** -8, 257.0, 259.0, -1 - 2 ** -8, 3.4e38], "float32")
S.case("bfloat16 ties to even", "x:bfloat16()", [E(bt.f, "bfloat16", exact=True)], x=bt)
S.case("float64 -> float32 rounds", "x:float()", [E(np.array([0.1, 1 / 3, 1e-50]), "float32", exact=True)],
       x=S.arr([0.1, 1 / 3, 1e-50], "float64"))
S.case("float32 nan/inf -> float16", "x:half()", [E(np.array([np.nan, np.inf, -np.inf]), "float16", exact=True)],
       x=S.arr([np.nan, np.inf, -np.inf], "float32"))
S.case("float16 -> float32 exact", "x:float()", [E(S.arr([0.1, 65504.0, 6e-8], "float16").f, "float32", exact=True)],
       x=S.arr([0.1, 65504.0, 6e-8], "float16"))
S.case("bfloat16 -> float64 exact", "x:double()", [E(S.arr([0.1, 3e38, -2.5], "bfloat16").f, "float64", exact=True)],
       x=S.arr([0.1, 3e38, -2.5], "bfloat16"))
iv = S.arr([0, 1, -1, 2 ** 31 - 1, -2 ** 31, 2 ** 24 + 1], "int64")
S.case("int64 -> float64 exact", "x:double()", [E(iv.f, "float64")], x=iv)
S.case("int64 -> float32 rounds", "x:float()", [E(iv.f, "float32", exact=True)], x=iv)
S.case("int64 -> int32 (in range)", "x:int()", [E(iv.v, "int32")], x=iv)
S.case("int64 -> bool", "x:bool()", [E(iv.v != 0, "bool")], x=iv)
S.case("bool -> int64", "x:long()", [E(np.array([1, 0, 1]), "int64")], x=make(np.array([True, False, True]), "bool"))
S.case("bool -> float16", "x:half()", [E(np.array([1.0, 0.0]), "float16")], x=make(np.array([True, False]), "bool"))
S.case("uint8 -> float32", "x:float()", [E(np.array([0, 128, 255]), "float32")], x=make(np.array([0, 128, 255]), "uint8"))
S.case("uint8 -> int32", "x:int()", [E(np.array([0, 128, 255]), "int32")], x=make(np.array([0, 128, 255]), "uint8"))
S.case("int32 -> uint8 (in range)", "x:byte()", [E(np.array([0, 7, 255]), "uint8")], x=make(np.array([0, 7, 255]), "int32"))
S.case("conversion of a transposed view", "x:double()", [E(src.f[:8].reshape(2, 4).T, "float64")],
       x=make(src.f[:8].reshape(2, 4), "float32").t())
S.case("conversion of zero-size", "x:long()", [E(np.zeros((0, 3)), "int64")], x=make(np.zeros((0, 3)), "float32"))
S.case("conversion of 0-d", "x:half()", [E(np.array(2.5), "float16")], x=make(np.array(2.5), "float32"))
S.case("to(same dtype) keeps values", 'x:to("float32")', [E(src.f, "float32")], x=src)
S.case("clone keeps the values", "x:clone()", [E(src.f, "float32")], x=src)
S.case("clone has its own storage", "local c = x:clone()\nc:fill_(0)\nreturn x", [E(src.f, "float32")], x=src)
S.case("clone of a transposed view is a copy with the same values", "x:clone()", [E(src.f[:8].reshape(2, 4).T,
                                                                                    "float32")],
       x=make(src.f[:8].reshape(2, 4), "float32").t())
S.case("to(dtype) returns a new tensor (the source is unchanged)", 'local y = x:to("float64")\ny:fill_(0)\nreturn x',
       [E(src.f, "float32")], x=src)
S.case("conversion to an unknown dtype is an error", 'x:to("complex64")', [Err()], x=src)

# ---- integer conversions wrap (two's complement, as PyTorch on every backend) ----
S.case("int64 -> int32 wraps", "x:int()", [E(np.array([2 ** 32 + 5, -2 ** 31 - 1, 2 ** 31]).astype(np.int32), "int32")],
       x=S.arr([2 ** 32 + 5, -2 ** 31 - 1, 2 ** 31], "int64"))
S.case("int64 -> uint8 wraps", "x:byte()", [E(np.array([300, -1, 256]).astype(np.uint8), "uint8")],
       x=S.arr([300, -1, 256], "int64"))
S.case("int32 -> uint8 wraps", "x:byte()", [E(np.array([-2, 511]).astype(np.uint8), "uint8")],
       x=S.arr([-2, 511], "int32"))
S.case("float16 nan -> bool is true", "x:bool()", [E(np.array([True, False, True]), "bool")],
       x=S.arr([np.nan, 0.0, -0.0001], "float16"))
S.case("bfloat16 -> float16 (in range)", "x:half()", [E(S.arr([0.1, -3.5, 100.0], "bfloat16").f, "float16", exact=True)],
       x=S.arr([0.1, -3.5, 100.0], "bfloat16"))
S.case("float16 -> bfloat16 rounds", "x:bfloat16()", [E(S.arr([0.1, -3.3, 1000.5], "float16").f, "bfloat16", exact=True)],
       x=S.arr([0.1, -3.3, 1000.5], "float16"))
S.case("x:size(0) is an error", "x:size(0)", [Err()], x=S.rand((2, 3), "float32"))
S.case("stride() of a narrowed view", "x:narrow(2, 2, 2):stride()", [Lst([Num(3), Num(1)])], x=S.rand((2, 3), "float32"))
S.case("item() of uint8", "grace.tensor(200, {dtype='uint8'}):item()", [Num(200)])
S.case("tolist() of float16 gives the rounded values", "grace.tensor({0.1}, {dtype='float16'}):tolist()",
       [Lst([Num(float(np.float16(0.1)))])])

# ---- every method is also a module function taking the tensor first ----
mx = S.distinct((3, 4), "float32")
MOD = [("grace.neg(x)", E(-mx.f, "float32")), ("grace.sigmoid(x)", E(1 / (1 + np.exp(-mx.f)), "float32")),
       ("grace.relu(x)", E(np.maximum(mx.f, 0), "float32")), ("grace.sum(x, 2)", E(mx.f.sum(1), "float32")),
       ("grace.mean(x, {1, 2})", E(mx.f.mean(), "float32")), ("grace.argmax(x, 1)", Idx(mx.f.argmax(0))),
       ("grace.cumsum(x, 2)", E(np.cumsum(mx.f, 1), "float32")), ("grace.transpose(x, 1, 2)", E(mx.f.T, "float32")),
       ("grace.reshape(x, {2, 6})", E(mx.f.reshape(2, 6), "float32")), ("grace.narrow(x, 2, 2, 2)", E(mx.f[:, 1:3], "float32")),
       ("grace.triu(x, 1)", E(np.triu(mx.f, 1), "float32")), ("grace.clamp(x, -0.5, 0.5)", E(np.clip(mx.f, -0.5, 0.5), "float32")),
       ("grace.t(x)", E(mx.f.T, "float32")), ("grace.unsqueeze(x, 1)", E(mx.f[None], "float32")),
       ("grace.flatten(x)", E(mx.f.reshape(-1), "float32")), ("grace.eq(x, x)", E(np.ones((3, 4), bool), "bool")),
       ("grace.logical_not(x:gt(0))", E(~(mx.f > 0), "bool")), ("grace.cast(x, 'float64')", E(mx.f, "float64")),
       ("grace.pow(x, 2)", E(mx.f ** 2, "float32")), ("grace.div(x, 2)", E(mx.f / 2, "float32"))]
for body, e in MOD:
    S.case(body, body, [e], x=mx)
S.case("grace.max(x, 2) -> values, indices", "grace.max(x, 2)", [E(mx.f.max(1), "float32"), Idx(mx.f.argmax(1))], x=mx)
S.case("grace.topk(x, 2)", "grace.topk(x, 2)", [E(-np.sort(-mx.f, 1)[:, :2], "float32"), Idx(np.argsort(-mx.f, 1)[:, :2])],
       x=mx)
S.case("grace.sort(x, 1, true)", "grace.sort(x, 1, true)", [E(-np.sort(-mx.f, 0), "float32"), Idx(np.argsort(-mx.f, 0))],
       x=mx)
S.case("grace.index_select(x, 2, i)", "grace.index_select(x, 2, i)", [E(mx.f[:, [1, 0]], "float32")], x=mx,
       i=make(np.array([2, 1]), "int64"))

S.case("tensor({}) is an empty float32 [0]", "grace.tensor({})", [E(np.zeros(0), "float32")])
S.case("tensor({{}, {}}) is [2,0]", "grace.tensor({{}, {}})", [E(np.zeros((2, 0)), "float32")])
S.case("tolist() of 0-d is a number", "grace.tensor(2.5):tolist()", [Num(2.5)])

S.run()
