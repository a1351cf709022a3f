#!/usr/bin/env python3
"""Reductions vs NumPy: sum/mean/prod/max/min/argmax/argmin/var/std/logsumexp/all/any over one dim, several dims,
all dims and keepdim; cumsum, softmax/log_softmax (middle and last dim), topk and sort (values + 1-based indices on
distinct values); integer result dtypes (sum/prod/cumsum of ints -> int64); non-contiguous, 0-d and zero-size
inputs."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from conf import Suite, E, Idx, Err, FLOATS, INTS, TOL_TRANSC, make  # noqa: E402

S = Suite(seed=2024)
SH = (3, 4, 5)


def lse(x, axis, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis)


def softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def absum(x, axis=None, keepdims=False):
    return np.sum(np.abs(x), axis=axis, keepdims=keepdims)


# ---- float reductions ----
for dt in FLOATS:
    x = S.rand(SH, dt, -2, 2)
    T = TOL_TRANSC[dt]
    # sum / mean: one dim, several dims, all, keepdim, negative dim
    S.case("sum(2) %s" % dt, "x:sum(2)", [E(x.f.sum(1), dt, mag=absum(x.f, 1))], x=x)
    S.case("sum(-1) %s" % dt, "x:sum(-1)", [E(x.f.sum(2), dt, mag=absum(x.f, 2))], x=x)
    S.case("sum({1,3}) %s" % dt, "x:sum({1,3})", [E(x.f.sum((0, 2)), dt, mag=absum(x.f, (0, 2)))], x=x)
    S.case("sum() all dims %s -> 0-d" % dt, "x:sum()", [E(x.f.sum(), dt, mag=absum(x.f))], x=x)
    S.case("sum(2, true) keepdim %s" % dt, "x:sum(2, true)",
           [E(x.f.sum(1, keepdims=True), dt, mag=absum(x.f, 1, True))], x=x)
    S.case("sum({1,3}, true) keepdim %s" % dt, "x:sum({1,3}, true)",
           [E(x.f.sum((0, 2), keepdims=True), dt, mag=absum(x.f, (0, 2), True))], x=x)
    S.case("mean(3) %s" % dt, "x:mean(3)", [E(x.f.mean(2), dt, mag=absum(x.f, 2) / 5)], x=x)
    S.case("mean({2,3}) %s" % dt, "x:mean({2,3})", [E(x.f.mean((1, 2)), dt, mag=absum(x.f, (1, 2)) / 20)], x=x)
    S.case("mean() %s" % dt, "x:mean()", [E(x.f.mean(), dt, mag=absum(x.f) / 60)], x=x)
    S.case("mean(1, true) %s" % dt, "x:mean(1, true)",
           [E(x.f.mean(0, keepdims=True), dt, mag=absum(x.f, 0, True) / 3)], x=x)
    p = S.rand((3, 5), dt, 0.5, 1.5)
    p = make(p.f * np.where(S.rng.random((3, 5)) < 0.3, -1, 1), dt)
    S.case("prod(2) %s" % dt, "x:prod(2)", [E(p.f.prod(1), dt)], x=p)
    S.case("prod() %s" % dt, "x:prod()", [E(p.f.prod(), dt)], x=p)
    S.case("prod(1, true) %s" % dt, "x:prod(1, true)", [E(p.f.prod(0, keepdims=True), dt)], x=p)
    # max/min/argmax/argmin on distinct values
    d = S.distinct(SH, dt)
    S.case("max() %s -> 0-d" % dt, "x:max()", [E(d.f.max(), dt)], x=d)
    S.case("min() %s -> 0-d" % dt, "x:min()", [E(d.f.min(), dt)], x=d)
    S.case("max(2) values, indices %s" % dt, "x:max(2)", [E(d.f.max(1), dt), Idx(d.f.argmax(1))], x=d)
    S.case("min(3) values, indices %s" % dt, "x:min(3)", [E(d.f.min(2), dt), Idx(d.f.argmin(2))], x=d)
    S.case("max(-1, true) keepdim %s" % dt, "x:max(-1, true)",
           [E(d.f.max(2, keepdims=True), dt), Idx(d.f.argmax(2)[..., None])], x=d)
    S.case("min(1, true) keepdim %s" % dt, "x:min(1, true)",
           [E(d.f.min(0, keepdims=True), dt), Idx(d.f.argmin(0)[None])], x=d)
    S.case("argmax() %s (flat, 1-based)" % dt, "x:argmax()", [Idx(np.array(d.f.argmax()))], x=d)
    S.case("argmin() %s (flat, 1-based)" % dt, "x:argmin()", [Idx(np.array(d.f.argmin()))], x=d)
    S.case("argmax(2) %s" % dt, "x:argmax(2)", [Idx(d.f.argmax(1))], x=d)
    S.case("argmin(-1, true) %s" % dt, "x:argmin(-1, true)", [Idx(d.f.argmin(2)[..., None])], x=d)
    # var / std
    S.case("var(2) unbiased %s" % dt, "x:var(2)", [E(x.f.var(1, ddof=1), dt)], x=x)
    S.case("var(2, false) biased %s" % dt, "x:var(2, false)", [E(x.f.var(1), dt)], x=x)
    S.case("var(3, true, true) keepdim %s" % dt, "x:var(3, true, true)",
           [E(x.f.var(2, ddof=1, keepdims=True), dt)], x=x)
    S.case("var({1,3}) %s" % dt, "x:var({1,3})", [E(x.f.var((0, 2), ddof=1), dt)], x=x)
    S.case("var() all dims unbiased %s" % dt, "x:var()", [E(x.f.var(ddof=1), dt)], x=x)
    S.case("var({1,2,3}, false) %s" % dt, "x:var({1,2,3}, false)", [E(x.f.var(), dt)], x=x)
    S.case("std(2) unbiased %s" % dt, "x:std(2)", [E(x.f.std(1, ddof=1), dt, tol=T)], x=x)
    S.case("std(-1, false) %s" % dt, "x:std(-1, false)", [E(x.f.std(2), dt, tol=T)], x=x)
    S.case("std({2,3}, true, true) %s" % dt, "x:std({2,3}, true, true)",
           [E(x.f.std((1, 2), ddof=1, keepdims=True), dt, tol=T)], x=x)
    S.case("std() %s" % dt, "x:std()", [E(x.f.std(ddof=1), dt, tol=T)], x=x)
    # logsumexp
    S.case("logsumexp(2) %s" % dt, "x:logsumexp(2)", [E(lse(x.f, 1), dt, tol=T)], x=x)
    S.case("logsumexp({1,3}) %s" % dt, "x:logsumexp({1,3})", [E(lse(x.f, (0, 2)), dt, tol=T)], x=x)
    S.case("logsumexp(-1, true) %s" % dt, "x:logsumexp(-1, true)", [E(lse(x.f, 2, True), dt, tol=T)], x=x)
    # cumsum, softmax, log_softmax
    S.case("cumsum(2) %s" % dt, "x:cumsum(2)", [E(np.cumsum(x.f, 1), dt, mag=np.cumsum(np.abs(x.f), 1))], x=x)
    S.case("cumsum(-1) %s" % dt, "x:cumsum(-1)", [E(np.cumsum(x.f, 2), dt, mag=np.cumsum(np.abs(x.f), 2))], x=x)
    S.case("softmax(2) middle dim %s" % dt, "x:softmax(2)", [E(softmax(x.f, 1), dt, tol=T)], x=x)
    S.case("softmax(-1) last dim %s" % dt, "x:softmax(-1)", [E(softmax(x.f, 2), dt, tol=T)], x=x)
    S.case("log_softmax(2) middle dim %s" % dt, "x:log_softmax(2)",
           [E(x.f - lse(x.f, 1, True), dt, tol=T)], x=x)
    S.case("log_softmax(3) last dim %s" % dt, "x:log_softmax(3)",
           [E(x.f - lse(x.f, 2, True), dt, tol=T)], x=x)
    # topk / sort on distinct values
    srt = np.sort(d.f, axis=2)
    asr = np.argsort(d.f, axis=2)
    S.case("topk(3) %s (last dim, largest)" % dt, "x:topk(3)",
           [E(srt[..., ::-1][..., :3], dt), Idx(asr[..., ::-1][..., :3])], x=d)
    S.case("topk(2, 1) %s" % dt, "x:topk(2, 1)",
           [E(-np.sort(-d.f, axis=0)[:2], dt), Idx(np.argsort(-d.f, axis=0)[:2])], x=d)
    S.case("topk(2, -1, false) smallest %s" % dt, "x:topk(2, -1, false)",
           [E(srt[..., :2], dt), Idx(asr[..., :2])], x=d)
    S.case("sort() %s (last dim, ascending)" % dt, "x:sort()", [E(srt, dt), Idx(asr)], x=d)
    S.case("sort(2, true) %s descending" % dt, "x:sort(2, true)",
           [E(-np.sort(-d.f, axis=1), dt), Idx(np.argsort(-d.f, axis=1))], x=d)
    S.case("sort(1) %s" % dt, "x:sort(1)", [E(np.sort(d.f, axis=0), dt), Idx(np.argsort(d.f, axis=0))], x=d)

# ---- integer and bool reductions ----
for dt in INTS + ["bool"]:
    x = S.rand((3, 4, 5), dt, 0 if dt == "uint8" else -20, 20) if dt != "bool" else S.rand((3, 4, 5), "bool")
    S.case("sum(2) %s -> int64" % dt, "x:sum(2)", [E(x.i.sum(1), "int64")], x=x)
    S.case("sum() %s -> int64" % dt, "x:sum()", [E(x.i.sum(), "int64")], x=x)
    S.case("sum({1,3}, true) %s -> int64" % dt, "x:sum({1,3}, true)",
           [E(x.i.sum((0, 2), keepdims=True), "int64")], x=x)
    S.case("cumsum(3) %s -> int64" % dt, "x:cumsum(3)", [E(np.cumsum(x.i, 2), "int64")], x=x)
    S.case("cumsum(1) %s -> int64" % dt, "x:cumsum(1)", [E(np.cumsum(x.i, 0), "int64")], x=x)
    p = S.rand((3, 4), dt, 1, 3) if dt != "bool" else S.rand((3, 4), "bool")
    S.case("prod(2) %s -> int64" % dt, "x:prod(2)", [E(p.i.prod(1), "int64")], x=p)
    S.case("prod() %s -> int64" % dt, "x:prod()", [E(p.i.prod(), "int64")], x=p)
    if dt == "bool":
        continue
    d = S.distinct((3, 4, 5), dt, 0 if dt == "uint8" else -100)
    S.case("max() %s" % dt, "x:max()", [E(d.v.max(), dt)], x=d)
    S.case("min(2) values, indices %s" % dt, "x:min(2)", [E(d.v.min(1), dt), Idx(d.v.argmin(1))], x=d)
    S.case("max(3, true) %s" % dt, "x:max(3, true)",
           [E(d.v.max(2, keepdims=True), dt), Idx(d.v.argmax(2)[..., None])], x=d)
    S.case("argmax(1) %s" % dt, "x:argmax(1)", [Idx(d.v.argmax(0))], x=d)
    S.case("argmin() %s" % dt, "x:argmin()", [Idx(np.array(d.v.argmin()))], x=d)
    srt, asr = np.sort(d.v, axis=2), np.argsort(d.v, axis=2)
    S.case("topk(2) %s" % dt, "x:topk(2)", [E(srt[..., ::-1][..., :2], dt), Idx(asr[..., ::-1][..., :2])], x=d)
    S.case("sort() %s" % dt, "x:sort()", [E(srt, dt), Idx(asr)], x=d)
    S.case("sort(-1, true) %s" % dt, "x:sort(-1, true)", [E(srt[..., ::-1], dt), Idx(asr[..., ::-1])], x=d)
i64 = S.rand((6, 7), "int64", -10 ** 12, 10 ** 12)
S.case("sum of large int64 stays exact", "x:sum()", [E(i64.v.sum(), "int64")], x=i64)

# ---- all / any ----
bl = make(S.rng.random((3, 4)) < 0.85, "bool")
S.case("all() bool -> 0-d bool", "x:all()", [E(bl.v.all(), "bool")], x=bl)
S.case("any() bool", "x:any()", [E(bl.v.any(), "bool")], x=bl)
S.case("all(2) bool", "x:all(2)", [E(bl.v.all(1), "bool")], x=bl)
bs = make(S.rng.random((3, 4)) < 0.2, "bool")
S.case("any(1) bool", "x:any(1)", [E(bs.v.any(0), "bool")], x=bs)
S.case("all({1,2}) bool", "x:all({1,2})", [E(bl.v.all((0, 1)), "bool")], x=bl)
S.case("all(1) of ones is true", "x:all(1)", [E(np.ones(4, bool), "bool")], x=make(np.ones((3, 4), bool), "bool"))
S.case("any(2) of zeros is false", "x:any(2)", [E(np.zeros(3, bool), "bool")],
       x=make(np.zeros((3, 4), bool), "bool"))
fz = make(np.where(S.rng.random((3, 4)) < 0.25, 0.0, S.rng.uniform(-1, 1, (3, 4))), "float32")
S.case("all(2) float32 (nonzero is true) -> bool", "x:all(2)", [E((fz.f != 0).all(1), "bool")], x=fz)
S.case("any(1) float32 -> bool", "x:any(1)", [E((fz.f != 0).any(0), "bool")], x=fz)
iz = make(np.where(S.rng.random((3, 4)) < 0.3, 0, 5), "int64")
S.case("all() int64 -> bool", "x:all()", [E((iz.v != 0).all(), "bool")], x=iz)
S.case("any(2) int64 -> bool", "x:any(2)", [E((iz.v != 0).any(1), "bool")], x=iz)

# ---- module functions, NaN, dims errors ----
x = S.rand((4, 6), "float32")
S.case("grace.sum(x, 2)", "grace.sum(x, 2)", [E(x.f.sum(1), "float32", mag=absum(x.f, 1))], x=x)
S.case("grace.softmax(x, 1)", "grace.softmax(x, 1)", [E(softmax(x.f, 0), "float32")], x=x)
S.case("grace.log_softmax(x, -1)", "grace.log_softmax(x, -1)", [E(x.f - lse(x.f, 1, True), "float32")], x=x)
S.case("grace.logsumexp(x, 2)", "grace.logsumexp(x, 2)", [E(lse(x.f, 1), "float32")], x=x)
S.case("sum(0) is an error (dims are 1-based)", "x:sum(0)", [Err()], x=x)
S.case("sum(3) on a 2-D tensor is an error", "x:sum(3)", [Err()], x=x)
S.case("softmax(0) is an error", "x:softmax(0)", [Err()], x=x)
xn = S.arr([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], "float32")
S.case("sum propagates nan", "x:sum(2)", [E(np.array([np.nan, 15.0]), "float32")], x=xn)
S.case("mean propagates nan", "x:mean(2)", [E(np.array([np.nan, 5.0]), "float32")], x=xn)
S.case("softmax of large logits is stable", "x:softmax(2)", [E(softmax(np.array([[1000.0, 1001.0, 999.0]]), 1),
                                                                 "float32", tol=TOL_TRANSC["float32"])],
       x=S.arr([[1000.0, 1001.0, 999.0]], "float32"))
S.case("logsumexp of large values is stable", "x:logsumexp(2)",
       [E(np.array([1001.0 + np.log(1 + np.exp(-1) + np.exp(-2))]), "float32")],
       x=S.arr([[1000.0, 1001.0, 999.0]], "float32"))
S.case("log_softmax with -inf entries", "x:log_softmax(2)",
       [E(np.array([[-np.inf, np.log(0.5), np.log(0.5)]]), "float32")],
       x=S.arr([[-np.inf, 2.0, 2.0]], "float32"))

# ---- non-contiguous inputs ----
base = S.rand((5, 4), "float32")
xt = base.t()  # [4,5]
S.case("sum(2) of transposed", "x:sum(2)", [E(xt.f.sum(1), "float32", mag=absum(xt.f, 1))], x=xt)
S.case("mean(1) of transposed", "x:mean(1)", [E(xt.f.mean(0), "float32", mag=absum(xt.f, 0) / 4)], x=xt)
S.case("var(2) of transposed", "x:var(2)", [E(xt.f.var(1, ddof=1), "float32")], x=xt)
S.case("softmax(2) of transposed", "x:softmax(2)", [E(softmax(xt.f, 1), "float32")], x=xt)
S.case("cumsum(2) of transposed", "x:cumsum(2)", [E(np.cumsum(xt.f, 1), "float32", mag=np.cumsum(np.abs(xt.f), 1))],
       x=xt)
dn = S.distinct((4, 8), "float32").narrow(2, 3, 5)
S.case("max(2) of narrowed", "x:max(2)", [E(dn.f.max(1), "float32"), Idx(dn.f.argmax(1))], x=dn)
S.case("sort(2) of narrowed", "x:sort(2)", [E(np.sort(dn.f, 1), "float32"), Idx(np.argsort(dn.f, 1))], x=dn)
S.case("topk(2, 1) of narrowed", "x:topk(2, 1)",
       [E(-np.sort(-dn.f, 0)[:2], "float32"), Idx(np.argsort(-dn.f, 0)[:2])], x=dn)
ex = S.rand((1, 5), "float32").expand((4, 5))
S.case("sum(1) of expanded [1,5]->[4,5]", "x:sum(1)", [E(ex.f.sum(0), "float32", mag=absum(ex.f, 0))], x=ex)
S.case("softmax(1) of expanded", "x:softmax(1)", [E(softmax(ex.f, 0), "float32")], x=ex)
p3 = S.rand((2, 3, 4), "float64")
S.case("logsumexp(2) of permuted 3-D float64", "x:logsumexp(2)",
       [E(lse(np.transpose(p3.f, (2, 0, 1)), 1), "float64")], x=p3.permute(3, 1, 2))
# ---- 0-d and zero-size ----
z0 = make(np.array(2.5), "float32")
S.case("sum() of 0-d", "x:sum()", [E(np.array(2.5), "float32")], x=z0)
S.case("max() of 0-d", "x:max()", [E(np.array(2.5), "float32")], x=z0)
S.case("mean() of 0-d", "x:mean()", [E(np.array(2.5), "float32")], x=z0)
ze = make(np.zeros((0, 3)), "float32")
S.case("sum(1) of [0,3] -> zeros [3]", "x:sum(1)", [E(np.zeros(3), "float32")], x=ze)
S.case("sum() of [0,3] -> 0", "x:sum()", [E(np.array(0.0), "float32")], x=ze)
S.case("sum(2) of [0,3] -> [0]", "x:sum(2)", [E(np.zeros(0), "float32")], x=ze)
S.case("mean(1) of [0,3] -> nan [3]", "x:mean(1)", [E(np.full(3, np.nan), "float32")], x=ze)
S.case("prod(1) of [0,3] -> ones [3]", "x:prod(1)", [E(np.ones(3), "float32")], x=ze)
S.case("max(2) of [0,3] -> empty values and indices", "x:max(2)", [E(np.zeros(0), "float32"), Idx(np.zeros(0))],
       x=ze)
S.case("cumsum(1) of [0,3]", "x:cumsum(1)", [E(np.zeros((0, 3)), "float32")], x=ze)
S.case("softmax(2) of [0,3]", "x:softmax(2)", [E(np.zeros((0, 3)), "float32")], x=ze)
S.case("sum(1) of int64 [0,3] -> int64 zeros", "x:sum(1)", [E(np.zeros(3), "int64")],
       x=make(np.zeros((0, 3)), "int64"))
S.case("all() of empty is true", "x:all()", [E(np.array(True), "bool")], x=make(np.zeros((0, 3)), "bool"))
S.case("any() of empty is false", "x:any()", [E(np.array(False), "bool")], x=make(np.zeros((0, 3)), "bool"))

# ---- half-precision accumulation (PyTorch accumulates float16/bfloat16 in float32) ----
S.case("sum of 4096 float16 ones is 4096 (no float16 accumulation)", 'grace.ones({4096}, {dtype="float16"}):sum()',
       [E(np.array(4096.0), "float16")])
S.case("sum of 1024 bfloat16 ones is 1024", 'grace.ones({1024}, {dtype="bfloat16"}):sum()', [E(np.array(1024.0), "bfloat16")])
S.case("mean of 4096 float16 ones is 1", 'grace.ones({4096}, {dtype="float16"}):mean()', [E(np.array(1.0), "float16")])
S.case("cumsum of 3000 float16 ones", 'grace.ones({3000}, {dtype="float16"}):cumsum(1)',
       [E(np.arange(1, 3001), "float16")])
S.case("cumsum of 600 bfloat16 ones", 'grace.ones({600}, {dtype="bfloat16"}):cumsum(1)',
       [E(np.arange(1, 601), "bfloat16")])
hv = S.rand((4, 64), "float16", 200, 1000)
S.case("var of large float16 values (no overflow of squares)", "x:var(2)", [E(hv.f.var(1, ddof=1), "float16")], x=hv)
S.case("std of large float16 values", "x:std(2)", [E(hv.f.std(1, ddof=1), "float16")], x=hv)
S.case("mean of large float16 values (sum exceeds 65504)", "x:mean(2)", [E(hv.f.mean(1), "float16")], x=hv)
hl = make(hv.f / 10, "float16")
S.case("softmax of large float16 logits", "x:softmax(2)", [E(softmax(hl.f, 1), "float16")], x=hl)
S.case("logsumexp of large float16 values", "x:logsumexp(2)", [E(lse(hv.f, 1), "float16")], x=hv)
S.case("sum of float16 values beyond 65504 is inf", "x:sum()", [E(np.array(np.inf), "float16")], x=hv)

# ---- NaN in max/min/argmax/sort/topk (NaN propagates and counts as the largest, as in PyTorch) ----
nn_ = S.arr([[1.0, np.nan, 3.0, -1.0], [2.0, 0.5, -4.0, 8.0]], "float32")
S.case("max(2) with nan gives nan and its index", "x:max(2)", [E(np.array([np.nan, 8.0]), "float32"),
                                                               Idx(np.array([1, 3]))], x=nn_)
S.case("min(2) with nan gives nan and its index", "x:min(2)", [E(np.array([np.nan, -4.0]), "float32"),
                                                               Idx(np.array([1, 2]))], x=nn_)
S.case("max() with nan is nan", "x:max()", [E(np.array(np.nan), "float32")], x=nn_)
S.case("argmax(2) with nan points at the nan", "x:argmax(2)", [Idx(np.array([1, 3]))], x=nn_)
S.case("argmin(2) with nan points at the nan", "x:argmin(2)", [Idx(np.array([1, 2]))], x=nn_)
S.case("sort(2) puts nan last", "x:sort(2)", [E(np.sort(nn_.f, 1), "float32"), Idx(np.argsort(nn_.f, 1))], x=nn_)
S.case("sort(2, true) puts nan first", "x:sort(2, true)",
       [E(np.array([[np.nan, 3.0, 1.0, -1.0], [8.0, 2.0, 0.5, -4.0]]), "float32"),
        Idx(np.array([[1, 2, 0, 3], [3, 0, 1, 2]]))], x=nn_)
S.case("topk(1) picks nan as the largest", "x:topk(1)", [E(np.array([[np.nan], [8.0]]), "float32"),
                                                         Idx(np.array([[1], [3]]))], x=nn_)

# ---- degenerate sizes ----
v1 = S.rand((5,), "float32")
S.case("var of one element (unbiased) is nan", "x:var()", [E(np.array(np.nan), "float32")],
       x=make(np.array([2.5]), "float32"))
S.case("var of one element (biased) is 0", "x:var(1, false)", [E(np.array(0.0), "float32")],
       x=make(np.array([2.5]), "float32"))
S.case("std(1) over a size-1 dim is nan", "x:std(1)", [E(np.full(3, np.nan), "float32")], x=S.rand((1, 3), "float32"))
S.case("sum(1) of 1-D -> 0-d", "x:sum(1)", [E(np.array(v1.f.sum()), "float32")], x=v1)
S.case("max(1) of 1-D -> 0-d value and index", "x:max(1)", [E(np.array(v1.f.max()), "float32"),
                                                            Idx(np.array(v1.f.argmax()))], x=v1)
S.case("argmax(1) of 1-D -> 0-d", "x:argmax(1)", [Idx(np.array(v1.f.argmax()))], x=v1)
S.case("softmax(1) of 1-D", "x:softmax(1)", [E(softmax(v1.f, 0), "float32")], x=v1)
S.case("cumsum(1) of 1-D", "x:cumsum(1)", [E(np.cumsum(v1.f), "float32")], x=v1)
x3 = S.rand((2, 3, 4), "float32")
S.case("sum({1,2,3}, true) keeps all dims as 1", "x:sum({1,2,3}, true)",
       [E(x3.f.sum(keepdims=True), "float32", mag=np.abs(x3.f).sum(keepdims=True))], x=x3)
S.case("sum({-1,1}) negative and positive dims", "x:sum({-1,1})", [E(x3.f.sum((2, 0)), "float32")], x=x3)
S.case("sum over a size-1 dim", "x:sum(2)", [E(x3.f[:, :1].sum(1), "float32")], x=x3.narrow(2, 1, 1))
S.case("sum with a repeated dim is an error", "x:sum({1,1})", [Err()], x=x3)
S.case("softmax of an all -inf row is nan", "x:softmax(2)", [E(np.array([[np.nan, np.nan], [0.5, 0.5]]), "float32")],
       x=S.arr([[-np.inf, -np.inf], [1.0, 1.0]], "float32"))
S.case("logsumexp of an all -inf row is -inf", "x:logsumexp(2)", [E(np.array([-np.inf, 1 + np.log(2)]), "float32")],
       x=S.arr([[-np.inf, -np.inf], [1.0, 1.0]], "float32"))
S.case("max of an inf row", "x:max(2)", [E(np.array([np.inf, -1.0]), "float32"), Idx(np.array([1, 0]))],
       x=S.arr([[1.0, np.inf], [-1.0, -np.inf]], "float32"))
S.case("topk(k = size) equals a descending sort", "x:topk(4)", [E(-np.sort(-x3.f, 2), "float32"),
                                                                Idx(np.argsort(-x3.f, 2))], x=x3)
S.case("topk(k > size) is an error", "x:topk(5)", [Err()], x=x3)
S.case("sort of [0,3] along dim 2", "x:sort(2)", [E(np.zeros((0, 3)), "float32"), Idx(np.zeros((0, 3)))],
       x=make(np.zeros((0, 3)), "float32"))
S.case("cumsum of a transposed int32 -> int64", "x:cumsum(1)", [E(np.cumsum(np.arange(12).reshape(3, 4).T, 0),
                                                                   "int64")],
       x=make(np.arange(12).reshape(3, 4), "int32").t())

# ---- int64 reductions stay exact beyond 2^53 ----
bg = make(np.array([[2 ** 60 + 1, 2 ** 55 + 3, -(2 ** 58) + 5], [2 ** 53 + 1, 2 ** 53 + 2, 2 ** 53 + 3]]), "int64")
S.case("int64 sum beyond 2^53", "x:sum(2)", [E(bg.v.sum(1), "int64")], x=bg)
S.case("int64 sum() beyond 2^53", "x:sum()", [E(np.array(bg.v.sum()), "int64")], x=bg)
S.case("int64 cumsum beyond 2^53", "x:cumsum(2)", [E(np.cumsum(bg.v, 1), "int64")], x=bg)
S.case("int64 max/argmax beyond 2^53 (2^53+1 < 2^53+3)", "x:max(2)", [E(bg.v.max(1), "int64"), Idx(bg.v.argmax(1))], x=bg)
S.case("int64 min(1) beyond 2^53", "x:min(1)", [E(bg.v.min(0), "int64"), Idx(bg.v.argmin(0))], x=bg)
S.case("int64 sort beyond 2^53", "x:sort(2, true)", [E(-np.sort(-bg.v, 1), "int64"), Idx(np.argsort(-bg.v, 1))], x=bg)
S.case("int64 topk beyond 2^53", "x:topk(1)", [E(np.sort(bg.v, 1)[:, -1:], "int64"), Idx(np.argsort(bg.v, 1)[:, -1:])], x=bg)
S.case("int64 prod exact", "x:prod()", [E(np.array(3 ** 20 * 7 ** 10), "int64")],
       x=make(np.array([3 ** 10, 3 ** 10, 7 ** 10]), "int64"))

# ---- reductions over several dims of a permuted (non-contiguous) 3-D tensor ----
pq = S.rand((3, 4, 5), "float32")
pv = np.transpose(pq.f, (2, 0, 1))  # x:permute(3,1,2) -> [5,3,4]
S.case("sum({1,3}) of a permuted tensor", "x:sum({1,3})", [E(pv.sum((0, 2)), "float32", mag=np.abs(pv).sum((0, 2)))],
       x=pq.permute(3, 1, 2))
S.case("mean({2,3}, true) of a permuted tensor", "x:mean({2,3}, true)", [E(pv.mean((1, 2), keepdims=True), "float32",
                                                                          mag=np.abs(pv).mean((1, 2), keepdims=True))],
       x=pq.permute(3, 1, 2))
S.case("var({1,2}) of a permuted tensor", "x:var({1,2})", [E(pv.var((0, 1), ddof=1), "float32")], x=pq.permute(3, 1, 2))
S.case("amax over dim 1 of a permuted tensor", "x:max(1)", [E(pv.max(0), "float32"), Idx(pv.argmax(0))],
       x=pq.permute(3, 1, 2))
S.case("logsumexp({1,3}) of a permuted tensor", "x:logsumexp({1,3})", [E(lse(pv, (0, 2)), "float32")],
       x=pq.permute(3, 1, 2))
S.case("softmax(1) of a permuted float16 tensor", "x:softmax(1)", [E(softmax(np.transpose(S.arr(pq.f, "float16").f,
                                                                                          (2, 0, 1)), 0), "float16")],
       x=S.arr(pq.f, "float16").permute(3, 1, 2))
S.case("cumsum(3) of a permuted tensor", "x:cumsum(3)", [E(np.cumsum(pv, 2), "float32")], x=pq.permute(3, 1, 2))
S.case("all(2) of a transposed bool", "x:all(2)", [E(bl.v.T.all(1), "bool")], x=bl.t())

S.run()
