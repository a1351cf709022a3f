#!/usr/bin/env python3
"""Larger tensors (about 69k elements, above the CPU backend's parallel and vectorised thresholds) vs NumPy, so
the multi-threaded chunking, SIMD bodies and tails and the strided paths of the kernels are exercised:
pointwise (contiguous, transposed, broadcast; float32, float16, int64), reductions over each dim and all dims,
softmax/log_softmax/logsumexp/cumsum, sort/topk, layer_norm/rms_norm, matmul big enough to run in parallel, casts
and copies. Inputs are shared (written once into the Lua program)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from conf import Suite, E, Idx, TOL_TRANSC, make  # noqa: E402

S = Suite(seed=31337)
R, C = 300, 230  # 69000 elements: pointwise kernels split work above 2 * 32768

A = S.share(S.rand((R, C), "float32", -3, 3))
H = S.share(S.rand((R, C), "float16", -3, 3))
I = S.share(S.rand((R, C), "int64", -1000, 1000))
B = S.share(S.rand((C,), "float32", -3, 3))
W = S.share(S.rand((C,), "float32", 0.5, 1.5))
T32 = TOL_TRANSC["float32"]


def softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def lse(x, axis, keepdims=False):
    m = x.max(axis, keepdims=True)
    r = np.log(np.exp(x - m).sum(axis, keepdims=True)) + m
    return r if keepdims else r.squeeze(axis)


# pointwise
S.case("exp float32 [300,230]", "a:exp()", [E(np.exp(A.f), "float32", tol=T32)], a=A)
S.case("exp of transposed float32 [230,300]", "a:t():exp()", [E(np.exp(A.f.T), "float32", tol=T32)], a=A)
S.case("add float32 [300,230] + [230]", "a + b", [E(A.f + B.f, "float32")], a=A, b=B)
S.case("transposed float32 * 2 + 1", "a:t() * 2 + 1", [E(A.f.T * 2 + 1, "float32")], a=A)
S.case("sigmoid float32", "a:sigmoid()", [E(1 / (1 + np.exp(-A.f)), "float32", tol=T32)], a=A)
S.case("gelu tanh float32", 'a:gelu("tanh")',
       [E(0.5 * A.f * (1 + np.tanh(np.sqrt(2 / np.pi) * (A.f + 0.044715 * A.f ** 3))), "float32", tol=T32)], a=A)
S.case("float16 * float16", "h * h", [E(H.f * H.f, "float16")], h=H)
S.case("exp float16", "h:exp()", [E(np.exp(H.f), "float16")], h=H)
S.case("float16 + float32 -> float32", "h + a", [E(H.f + A.f, "float32")], h=H, a=A)
S.case("int64 * 3 - i", "i * 3 - i", [E(I.v * 3 - I.v, "int64")], i=I)
S.case("int64 % 7 (floor mod)", "i % 7", [E(np.remainder(I.v, 7), "int64")], i=I)
S.case("int64 / 8 -> float32", "i / 8", [E(I.f / 8, "float32")], i=I)
S.case("gt(0) count", "a:gt(0):sum()", [E(np.array((A.f > 0).sum()), "int64")], a=A)
S.case("where(a > 0, a, 0)", "grace.where(a:gt(0), a, 0)", [E(np.where(A.f > 0, A.f, 0), "float32")], a=A)
S.case("float32 -> float16 cast", "a:half()", [E(A.f.astype(np.float32), "float16", exact=True)], a=A)
S.case("float32 -> bfloat16 cast", "a:bfloat16()", [E(A.f.astype(np.float32), "bfloat16", exact=True)], a=A)
S.case("transposed contiguous copy", "a:t():contiguous()", [E(A.f.T, "float32", exact=True)], a=A)
S.case("int64 transposed contiguous copy", "i:t():contiguous()", [E(I.v.T, "int64")], i=I)

# reductions
absA = np.abs(A.f)
S.case("sum(1) float32", "a:sum(1)", [E(A.f.sum(0), "float32", mag=absA.sum(0))], a=A)
S.case("sum(2) float32", "a:sum(2)", [E(A.f.sum(1), "float32", mag=absA.sum(1))], a=A)
S.case("sum() float32 of 69000 values", "a:sum()", [E(A.f.sum(), "float32", mag=absA.sum())], a=A)
S.case("mean() float32", "a:mean()", [E(A.f.mean(), "float32", mag=absA.mean())], a=A)
S.case("sum(1) of transposed", "a:t():sum(1)", [E(A.f.T.sum(0), "float32", mag=absA.T.sum(0))], a=A)
S.case("sum() float16 -> float16", "h:sum()", [E(H.f.sum(), "float16")], h=H)
S.case("sum(2) float16", "h:sum(2)", [E(H.f.sum(1), "float16")], h=H)
S.case("sum() int64 exact", "i:sum()", [E(np.array(I.v.sum()), "int64")], i=I)
S.case("sum(1) int64", "i:sum(1)", [E(I.v.sum(0), "int64")], i=I)
S.case("var(2) float32", "a:var(2)", [E(A.f.var(1, ddof=1), "float32")], a=A)
S.case("var() float32 of all", "a:var()", [E(A.f.var(ddof=1), "float32")], a=A)
S.case("std(1, false) float32", "a:std(1, false)", [E(A.f.std(0), "float32", tol=T32)], a=A)
S.case("max(2) values and indices", "a:max(2)", [E(A.f.max(1), "float32"), Idx(A.f.argmax(1))], a=A)
S.case("min(1) values and indices", "a:min(1)", [E(A.f.min(0), "float32"), Idx(A.f.argmin(0))], a=A)
S.case("argmax() flat", "a:argmax()", [Idx(np.array(A.f.argmax()))], a=A)
S.case("max() int64", "i:max()", [E(np.array(I.v.max()), "int64")], i=I)
S.case("softmax(2) float32", "a:softmax(2)", [E(softmax(A.f, 1), "float32", tol=T32)], a=A)
S.case("softmax(1) float32", "a:softmax(1)", [E(softmax(A.f, 0), "float32", tol=T32)], a=A)
S.case("log_softmax(-1) float32", "a:log_softmax(-1)", [E(A.f - lse(A.f, 1, True), "float32", tol=T32)], a=A)
S.case("softmax(2) float16", "h:softmax(2)", [E(softmax(H.f, 1), "float16")], h=H)
S.case("logsumexp(2) float32", "a:logsumexp(2)", [E(lse(A.f, 1), "float32", tol=T32)], a=A)
S.case("cumsum(2) float32", "a:cumsum(2)", [E(np.cumsum(A.f, 1), "float32", mag=np.cumsum(absA, 1))], a=A)
S.case("cumsum(1) float32", "a:cumsum(1)", [E(np.cumsum(A.f, 0), "float32", mag=np.cumsum(absA, 0))], a=A)
S.case("cumsum(2) int64", "i:cumsum(2)", [E(np.cumsum(I.v, 1), "int64")], i=I)
S.case("sort(2) values and indices", "a:sort(2)", [E(np.sort(A.f, 1), "float32"), Idx(np.argsort(A.f, 1))], a=A)
S.case("topk(5, 1)", "a:topk(5, 1)", [E(-np.sort(-A.f, 0)[:5], "float32"), Idx(np.argsort(-A.f, 0)[:5])], a=A)

# normalisation
mu = A.f.mean(1, keepdims=True)
S.case("layer_norm [300,230] float32", "grace.layer_norm(a, w, b)",
       [E((A.f - mu) / np.sqrt(A.f.var(1, keepdims=True) + 1e-5) * W.f + B.f, "float32", tol=T32)], a=A, w=W, b=B)
S.case("rms_norm [300,230] float32", "grace.rms_norm(a, w)",
       [E(A.f / np.sqrt((A.f ** 2).mean(1, keepdims=True) + 1e-6) * W.f, "float32", tol=T32)], a=A, w=W)
S.case("layer_norm float16", "grace.layer_norm(h, nil, nil)",
       [E((H.f - H.f.mean(1, keepdims=True)) / np.sqrt(H.f.var(1, keepdims=True) + 1e-5), "float16")], h=H)

# matmul large enough for the parallel path
M1, M2 = S.rand((130, 70), "float32"), S.rand((70, 150), "float32")
S.case("matmul [130,70] @ [70,150] float32", "a:matmul(b)",
       [E(M1.f @ M2.f, "float32", mag=np.abs(M1.f) @ np.abs(M2.f))], a=M1, b=M2)
S.case("matmul transposed operands [130,70] @ [70,150]", "a:t():matmul(b:t())",
       [E(M1.f @ M2.f, "float32", mag=np.abs(M1.f) @ np.abs(M2.f))], a=make(M1.f.T, "float32"),
       b=make(M2.f.T, "float32"))
M3, M4 = S.rand((4, 33, 65), "float32"), S.rand((65, 97), "float32")
S.case("matmul [4,33,65] @ [65,97] float32", "a:matmul(b)",
       [E(M3.f @ M4.f, "float32", mag=np.abs(M3.f) @ np.abs(M4.f))], a=M3, b=M4)
M5, M6 = S.rand((96, 64), "float64"), S.rand((64, 80), "float64")
S.case("matmul [96,64] @ [64,80] float64", "a:matmul(b)", [E(M5.f @ M6.f, "float64", mag=np.abs(M5.f) @ np.abs(M6.f))],
       a=M5, b=M6)
M7, M8 = S.rand((64, 48), "float16"), S.rand((48, 72), "float16")
S.case("matmul [64,48] @ [48,72] float16", "a:matmul(b)", [E(M7.f @ M8.f, "float16")], a=M7, b=M8)
M9, M10 = S.rand((64, 48), "bfloat16"), S.rand((48, 72), "bfloat16")
S.case("matmul [64,48] @ [48,72] bfloat16", "a:matmul(b)", [E(M9.f @ M10.f, "bfloat16")], a=M9, b=M10)

# long sorts and wide topk (algorithms may switch with the length)
F = S.share(S.distinct((20000,), "float32", -100, 100))  # distinct: ties would make indices ambiguous
S.case("sort of 20000 float32 values", "f:sort()", [E(np.sort(F.f), "float32"), Idx(np.argsort(F.f, kind="stable"))], f=F)
S.case("sort(1, true) of 20000 values", "f:sort(1, true)", [E(np.sort(F.f)[::-1], "float32"),
                                                           Idx(np.argsort(F.f, kind="stable")[::-1])], f=F)
S.case("topk(100) of 20000 values", "f:topk(100)", [E(np.sort(F.f)[::-1][:100], "float32"),
                                                   Idx(np.argsort(F.f, kind="stable")[::-1][:100])], f=F)
S.case("topk(100, 2) of [300,230] rows", "a:topk(100, 2)", [E(-np.sort(-A.f, 1)[:, :100], "float32"),
                                                           Idx(np.argsort(-A.f, 1)[:, :100])], a=A)
S.case("max() and argmax() of 20000 values", "f:max(), f:argmax()", [E(np.array(F.f.max()), "float32"),
                                                                   Idx(np.array(F.f.argmax()))], f=F)
S.case("cumsum of 20000 float32 values", "f:cumsum(1)", [E(np.cumsum(F.f), "float32", mag=np.cumsum(np.abs(F.f)))], f=F)
S.case("sum of 20000 float16 values", "f:half():sum()", [E(np.array(S.arr(F.f, "float16").f.sum()), "float16")], f=F)

S.run()
