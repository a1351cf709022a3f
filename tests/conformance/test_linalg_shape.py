#!/usr/bin/env python3
"""Linear algebra (matmul in all NumPy cases, mm, t) and shape ops (reshape, view, transpose, permute, flatten,
squeeze, unsqueeze, expand, narrow, select/x[i], split, chunk, cat, stack, index_select, gather, scatter, triu,
tril, rep, contiguous) vs NumPy, on several dtypes, with non-contiguous, 0-d and zero-size inputs, and the view
contract: a write through a view is seen by its base."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from conf import Suite, E, Err, Lst, Bool, FLOATS, ALL, make  # noqa: E402

S = Suite(seed=777)


def mm_mag(a, b):
    return np.matmul(np.abs(a), np.abs(b))


# ---- matmul ----
MM = [("1-D . 1-D -> 0-d", (4,), (4,)), ("2-D @ 1-D", (3, 4), (4,)), ("1-D @ 2-D", (4,), (4, 5)),
      ("2-D @ 2-D", (3, 4), (4, 5)), ("batched 3-D @ 3-D", (2, 3, 4), (2, 4, 5)),
      ("broadcast 3-D @ 2-D", (2, 3, 4), (4, 5)), ("broadcast 2-D @ 3-D", (3, 4), (2, 4, 5)),
      ("broadcast [2,1,3,4] @ [3,4,5]", (2, 1, 3, 4), (3, 4, 5)), ("3-D @ 1-D", (2, 3, 4), (4,)),
      ("1-D @ 3-D", (4,), (2, 4, 5)), ("[1,3,4] @ [2,4,2] broadcast batch", (1, 3, 4), (2, 4, 2))]
for dt in FLOATS:
    for desc, sa, sb in MM:
        a, b = S.rand(sa, dt), S.rand(sb, dt)
        S.case("matmul %s %s" % (desc, dt), "a:matmul(b)",
               [E(np.matmul(a.f, b.f), dt, mag=mm_mag(a.f, b.f))], a=a, b=b)
    a, b = S.rand((6, 9), dt), S.rand((9, 7), dt)
    S.case("mm [6,9] x [9,7] %s" % dt, "a:mm(b)", [E(a.f @ b.f, dt, mag=mm_mag(a.f, b.f))], a=a, b=b)
a, b = S.rand((17, 33), "float32"), S.rand((33, 19), "float32")
S.case("mm [17,33] x [33,19] float32 (odd sizes)", "a:mm(b)", [E(a.f @ b.f, "float32", mag=mm_mag(a.f, b.f))],
       a=a, b=b)
a, b = S.rand((3, 4), "int64", -5, 5), S.rand((4, 2), "int64", -5, 5)
S.case("matmul int64 2-D", "a:matmul(b)", [E(a.v @ b.v, "int64")], a=a, b=b)
a, b = S.rand((4, 3), "float32"), S.rand((5, 4), "float32")
S.case("matmul transposed @ transposed", "a:matmul(b)", [E(a.t().f @ b.t().f, "float32", mag=mm_mag(a.t().f, b.t().f))],
       a=a.t(), b=b.t())
c = S.rand((3, 8), "float64").narrow(2, 3, 4)
d = S.rand((4, 5), "float64")
S.case("matmul narrowed @ contiguous float64", "a:matmul(b)", [E(c.f @ d.f, "float64")], a=c, b=d)
e = S.rand((1, 4, 5), "float32").expand((3, 4, 5))
f = S.rand((3, 2, 4), "float32")
S.case("batched matmul with an expanded operand", "a:matmul(b)", [E(f.f @ e.f, "float32", mag=mm_mag(f.f, e.f))],
       a=f, b=e)
S.case("grace.matmul(a, b)", "grace.matmul(a, b)", [E(f.f @ e.f, "float32", mag=mm_mag(f.f, e.f))], a=f, b=e)
S.case("matmul [0,4] @ [4,5] -> [0,5]", "a:matmul(b)", [E(np.zeros((0, 5)), "float32")],
       a=make(np.zeros((0, 4)), "float32"), b=S.rand((4, 5), "float32"))
S.case("matmul [3,0] @ [0,5] -> zeros [3,5]", "a:matmul(b)", [E(np.zeros((3, 5)), "float32")],
       a=make(np.zeros((3, 0)), "float32"), b=make(np.zeros((0, 5)), "float32"))
S.case("matmul inner-dim mismatch is an error", "a:matmul(b)", [Err()], a=S.rand((3, 4), "float32"),
       b=S.rand((5, 2), "float32"))
S.case("mm of 3-D is an error (2-D only)", "a:mm(b)", [Err()], a=S.rand((2, 3, 4), "float32"),
       b=S.rand((4, 2), "float32"))
S.case("matmul of 0-d is an error", "a:matmul(b)", [Err()], a=make(np.array(2.0), "float32"),
       b=S.rand((2,), "float32"))
x = S.rand((3, 5), "float32")
S.case("t() of 2-D", "x:t()", [E(x.f.T, "float32")], x=x)
S.case("t():t() round trip", "x:t():t()", [E(x.f, "float32")], x=x)
S.case("t() of 1-D unchanged", "x:t()", [E(x.f[0], "float32")], x=x.sel(1, 1))
S.case("t() of 0-d unchanged", "x:t()", [E(np.array(2.0), "float32")], x=make(np.array(2.0), "float32"))
S.case("t() result is a view (not contiguous)", "x:t():is_contiguous()", [Bool(False)], x=x)

# ---- reshape / view ----
x = S.rand((2, 3, 4), "float32")
S.case("reshape({4,6})", "x:reshape({4,6})", [E(x.f.reshape(4, 6), "float32")], x=x)
S.case("reshape(4, 6) (numbers)", "x:reshape(4, 6)", [E(x.f.reshape(4, 6), "float32")], x=x)
S.case("reshape({-1,4})", "x:reshape({-1,4})", [E(x.f.reshape(-1, 4), "float32")], x=x)
S.case("reshape({24})", "x:reshape({24})", [E(x.f.reshape(24), "float32")], x=x)
S.case("reshape of transposed (copies)", "x:reshape({3,8})", [E(np.swapaxes(x.f, 1, 2).reshape(3, 8), "float32")],
       x=x.t(2, 3))
S.case("view({6,4})", "x:view({6,4})", [E(x.f.reshape(6, 4), "float32")], x=x)
S.case("view(2, -1)", "x:view(2, -1)", [E(x.f.reshape(2, -1), "float32")], x=x)
S.case("view of transposed needing a copy is an error", "x:view({24})", [Err()], x=x.t(2, 3))
S.case("reshape with two -1 is an error", "x:reshape({-1,-1})", [Err()], x=x)
S.case("reshape to a wrong size is an error", "x:reshape({5,5})", [Err()], x=x)
S.case("reshape of 0-d to {1}", "x:reshape({1})", [E(np.array([2.5]), "float32")], x=make(np.array(2.5), "float32"))
S.case("reshape of [0,3] to {3,0}", "x:reshape({3,0})", [E(np.zeros((3, 0)), "float32")],
       x=make(np.zeros((0, 3)), "float32"))
S.case("reshape of [0,3] to {-1,3}", "x:reshape({-1,3})", [E(np.zeros((0, 3)), "float32")],
       x=make(np.zeros((0, 3)), "float32"))

# ---- transpose / permute / flatten / squeeze / unsqueeze ----
S.case("transpose(1,3)", "x:transpose(1,3)", [E(np.swapaxes(x.f, 0, 2), "float32")], x=x)
S.case("transpose(-1,-2)", "x:transpose(-1,-2)", [E(np.swapaxes(x.f, 2, 1), "float32")], x=x)
S.case("transpose(2,2) is a no-op", "x:transpose(2,2)", [E(x.f, "float32")], x=x)
S.case("transpose(0,1) is an error", "x:transpose(0,1)", [Err()], x=x)
S.case("permute(3,1,2)", "x:permute(3,1,2)", [E(np.transpose(x.f, (2, 0, 1)), "float32")], x=x)
S.case("permute(2,3,1) then contiguous", "x:permute(2,3,1):contiguous()", [E(np.transpose(x.f, (1, 2, 0)),
                                                                            "float32")], x=x)
S.case("permute with a repeated dim is an error", "x:permute(1,1,2)", [Err()], x=x)
S.case("flatten()", "x:flatten()", [E(x.f.reshape(-1), "float32")], x=x)
S.case("flatten(2)", "x:flatten(2)", [E(x.f.reshape(2, 12), "float32")], x=x)
S.case("flatten(1, 2)", "x:flatten(1, 2)", [E(x.f.reshape(6, 4), "float32")], x=x)
S.case("flatten of transposed", "x:flatten()", [E(np.swapaxes(x.f, 0, 2).reshape(-1), "float32")], x=x.t(1, 3))
S.case("flatten of 0-d -> [1]", "x:flatten()", [E(np.array([2.5]), "float32")], x=make(np.array(2.5), "float32"))
y = S.rand((1, 3, 1, 2), "float32")
S.case("squeeze()", "x:squeeze()", [E(y.f.reshape(3, 2), "float32")], x=y)
S.case("squeeze(3)", "x:squeeze(3)", [E(y.f.reshape(1, 3, 2), "float32")], x=y)
S.case("squeeze(-4)", "x:squeeze(-4)", [E(y.f.reshape(3, 1, 2), "float32")], x=y)
S.case("squeeze(2) of a size-3 dim is a no-op", "x:squeeze(2)", [E(y.f, "float32")], x=y)
S.case("unsqueeze(1)", "x:unsqueeze(1)", [E(x.f[None], "float32")], x=x)
S.case("unsqueeze(3)", "x:unsqueeze(3)", [E(x.f[:, :, None], "float32")], x=x)
S.case("unsqueeze(-1) appends a dim", "x:unsqueeze(-1)", [E(x.f[..., None], "float32")], x=x)
S.case("unsqueeze(4) appends a dim", "x:unsqueeze(4)", [E(x.f[..., None], "float32")], x=x)
S.case("unsqueeze(1) of 0-d", "x:unsqueeze(1)", [E(np.array([2.5]), "float32")], x=make(np.array(2.5), "float32"))
S.case("unsqueeze of a transposed view", "x:unsqueeze(2)", [E(np.swapaxes(x.f, 0, 2)[:, None], "float32")],
       x=x.t(1, 3))

# ---- expand / narrow / select / x[i] ----
c = S.rand((3, 1), "float32")
S.case("expand({3,4})", "x:expand({3,4})", [E(np.broadcast_to(c.f, (3, 4)), "float32")], x=c)
S.case("expand(3, 4) (numbers)", "x:expand(3, 4)", [E(np.broadcast_to(c.f, (3, 4)), "float32")], x=c)
S.case("expand({2,-1,4}) adds a leading dim", "x:expand({2,-1,4})", [E(np.broadcast_to(c.f, (2, 3, 4)), "float32")],
       x=c)
S.case("expand then contiguous", "x:expand({3,4}):contiguous()", [E(np.broadcast_to(c.f, (3, 4)), "float32")], x=c)
S.case("expand of a non-1 dim is an error", "x:expand({4,4})", [Err()], x=c)
S.case("expand of 0-d", "x:expand({2,3})", [E(np.full((2, 3), 2.5), "float32")], x=make(np.array(2.5), "float32"))
S.case("narrow(2, 2, 2)", "x:narrow(2, 2, 2)", [E(x.f[:, 1:3], "float32")], x=x)
S.case("narrow(-1, 1, 3)", "x:narrow(-1, 1, 3)", [E(x.f[..., 0:3], "float32")], x=x)
S.case("narrow(1, 2, 0) -> zero-size", "x:narrow(1, 2, 0)", [E(x.f[1:1], "float32")], x=x)
S.case("narrow past the end is an error", "x:narrow(2, 3, 2)", [Err()], x=x)
S.case("select(2, 3)", "x:select(2, 3)", [E(x.f[:, 2], "float32")], x=x)
S.case("select(-1, 4)", "x:select(-1, 4)", [E(x.f[..., 3], "float32")], x=x)
S.case("x[2]", "x[2]", [E(x.f[1], "float32")], x=x)
S.case("x[-1] (from the end)", "x[-1]", [E(x.f[-1], "float32")], x=x)
S.case("x[1][3] -> [4]", "x[1][3]", [E(x.f[0, 2], "float32")], x=x)
S.case("x[2][3][4] -> 0-d", "x[2][3][4]", [E(np.array(x.f[1, 2, 3]), "float32")], x=x)
S.case("x[3] out of range is an error", "x[3]", [Err()], x=x)
S.case("select(1, 0) is an error (1-based)", "x:select(1, 0)", [Err()], x=x)
S.case("x[2] of a transposed view", "x[2]", [E(np.swapaxes(x.f, 0, 2)[1], "float32")], x=x.t(1, 3))

# ---- split / chunk ----
s = S.rand((7, 3), "float32")
S.case("split(3) -> 3,3,1", "x:split(3)", [Lst([E(s.f[0:3], "float32"), E(s.f[3:6], "float32"),
                                              E(s.f[6:7], "float32")])], x=s)
S.case("split(2, 2) -> 2,1", "x:split(2, 2)", [Lst([E(s.f[:, 0:2], "float32"), E(s.f[:, 2:3], "float32")])], x=s)
S.case("chunk(3) of 7 -> 3,3,1", "x:chunk(3)", [Lst([E(s.f[0:3], "float32"), E(s.f[3:6], "float32"),
                                                    E(s.f[6:7], "float32")])], x=s)
S.case("chunk(2) of 7 -> 4,3", "x:chunk(2)", [Lst([E(s.f[0:4], "float32"), E(s.f[4:7], "float32")])], x=s)
S.case("chunk(3, -1) of 3 columns", "x:chunk(3, -1)", [Lst([E(s.f[:, k:k + 1], "float32") for k in range(3)])], x=s)
S.case("split of a transposed view", "x:split(2, 2)",
       [Lst([E(s.f.T[:, 0:2], "float32"), E(s.f.T[:, 2:4], "float32"), E(s.f.T[:, 4:6], "float32"),
             E(s.f.T[:, 6:7], "float32")])], x=s.t())

# ---- cat / stack on several dtypes ----
for dt in ALL:
    p = S.rand((2, 3), dt, 0, 9) if dt != "bool" else S.rand((2, 3), "bool")
    q = S.rand((1, 3), dt, 0, 9) if dt != "bool" else S.rand((1, 3), "bool")
    r = S.rand((2, 2), dt, 0, 9) if dt != "bool" else S.rand((2, 2), "bool")
    S.case("cat dim 1 %s" % dt, "grace.cat({p, q, p})", [E(np.concatenate([p.v, q.v, p.v], 0), dt)], p=p, q=q)
    S.case("cat dim 2 %s" % dt, "grace.cat({p, r}, 2)", [E(np.concatenate([p.v, r.v], 1), dt)], p=p, r=r)
    S.case("stack dim 1 %s" % dt, "grace.stack({p, p:clone()})", [E(np.stack([p.v, p.v], 0), dt)], p=p)
    S.case("transpose + contiguous %s" % dt, "p:t():contiguous()", [E(p.v.T, dt)], p=p)
p, q = S.rand((2, 3), "float32"), S.rand((2, 3), "float32")
S.case("stack dim 2", "grace.stack({p, q}, 2)", [E(np.stack([p.f, q.f], 1), "float32")], p=p, q=q)
S.case("stack dim 3 (new last dim)", "grace.stack({p, q}, 3)", [E(np.stack([p.f, q.f], 2), "float32")], p=p, q=q)
S.case("stack dim -1", "grace.stack({p, q}, -1)", [E(np.stack([p.f, q.f], 2), "float32")], p=p, q=q)
S.case("stack of 0-d tensors -> [3]", "grace.stack({grace.tensor(1.5), grace.tensor(2.5), grace.tensor(-1.0)})",
       [E(np.array([1.5, 2.5, -1.0]), "float32")])
S.case("cat dim -1", "grace.cat({p, q}, -1)", [E(np.concatenate([p.f, q.f], 1), "float32")], p=p, q=q)
S.case("cat of transposed and contiguous", "grace.cat({p:t(), q:t()}, 2)",
       [E(np.concatenate([p.f.T, q.f.T], 1), "float32")], p=p, q=q)
S.case("cat with a zero-size [0,3] tensor", "grace.cat({p, z, q})", [E(np.concatenate([p.f, q.f], 0), "float32")],
       p=p, q=q, z=make(np.zeros((0, 3)), "float32"))
S.case("cat of a single tensor", "grace.cat({p})", [E(p.f, "float32")], p=p)
S.case("cat with mismatched sizes is an error", "grace.cat({p, r})", [Err()], p=p, r=S.rand((2, 2), "float32"))
S.case("stack with mismatched shapes is an error", "grace.stack({p, r})", [Err()], p=p, r=S.rand((2, 2), "float32"))

# ---- index_select / gather / scatter ----
for dt in ["float32", "float16", "bfloat16", "int64", "bool", "uint8"]:
    src = S.rand((4, 5), dt, 0, 9) if dt != "bool" else S.rand((4, 5), "bool")
    ix = np.array([3, 0, 2, 3])
    S.case("index_select(1, idx) %s" % dt, "x:index_select(1, i)", [E(src.v[ix], dt)], x=src,
           i=make(ix + 1, "int64"))
    S.case("index_select(2, idx) %s" % dt, "x:index_select(2, i)", [E(src.v[:, [4, 1]], dt)], x=src,
           i=make(np.array([5, 2]), "int64"))
    gi = S.rng.integers(0, 5, (4, 3))
    S.case("gather(2, idx) %s" % dt, "x:gather(2, i)", [E(np.take_along_axis(src.v, gi, 1), dt)], x=src,
           i=make(gi + 1, "int64"))
src = S.rand((4, 5), "float32")
S.case("index_select with an int32 index", "x:index_select(1, i)", [E(src.f[[1, 1, 3]], "float32")], x=src,
       i=make(np.array([2, 2, 4]), "int32"))
S.case("index_select on a transposed view", "x:index_select(2, i)", [E(src.f.T[:, [0, 3]], "float32")], x=src.t(),
       i=make(np.array([1, 4]), "int64"))
S.case("index_select with an empty index", "x:index_select(1, i)", [E(src.f[[]], "float32")], x=src,
       i=make(np.zeros(0), "int64"))
S.case("index_select with index 0 is an error (1-based)", "x:index_select(1, i)", [Err()], x=src,
       i=make(np.array([0, 1]), "int64"))
S.case("index_select out of range is an error", "x:index_select(1, i)", [Err()], x=src,
       i=make(np.array([5]), "int64"))
gi = S.rng.integers(0, 4, (2, 5))
S.case("gather(1, idx)", "x:gather(1, i)", [E(np.take_along_axis(src.f, gi, 0), "float32")], x=src,
       i=make(gi + 1, "int64"))
gi3 = S.rng.integers(0, 3, (2, 3, 2))
t3 = S.rand((2, 3, 4), "float64")
S.case("gather(2, idx) 3-D with a smaller index", "x:gather(2, i)",
       [E(np.take_along_axis(t3.f[:, :, :2], gi3, 1), "float64")], x=t3, i=make(gi3 + 1, "int64"))
S.case("gather on a transposed source", "x:gather(2, i)", [E(np.take_along_axis(src.f.T, gi.T[:, :2] % 4, 1),
                                                             "float32")],
       x=src.t(), i=make(gi.T[:, :2] % 4 + 1, "int64"))
# scatter: every destination position written at most once (deterministic)
base = S.rand((3, 5), "float32")
perm = np.stack([S.rng.permutation(5)[:3] for _ in range(3)])  # [3,3], unique per row
vals = S.rand((3, 3), "float32")
exp = base.f.copy()
np.put_along_axis(exp, perm, vals.f, 1)
S.case("scatter(2, idx, src) out of place", "x:scatter(2, i, s)", [E(exp, "float32")], x=base, i=make(perm + 1, "int64"),
       s=vals)
S.case("scatter leaves its input unchanged", "local r = x:scatter(2, i, s)\nreturn x", [E(base.f, "float32")],
       x=base, i=make(perm + 1, "int64"), s=vals)
exp2 = base.f.copy()
np.put_along_axis(exp2, perm, -7.0, 1)
S.case("scatter(2, idx, number)", "x:scatter(2, i, -7)", [E(exp2, "float32")], x=base, i=make(perm + 1, "int64"))
permc = np.stack([S.rng.permutation(3)[:2] for _ in range(5)], axis=1)  # [2,5], unique per column
vals2 = S.rand((2, 5), "float32")
exp3 = base.f.copy()
np.put_along_axis(exp3, permc, vals2.f, 0)
S.case("scatter(1, idx, src)", "x:scatter(1, i, s)", [E(exp3, "float32")], x=base, i=make(permc + 1, "int64"),
       s=vals2)
ib = S.rand((3, 5), "int64", -9, 9)
exp4 = ib.v.copy()
np.put_along_axis(exp4, perm, 42, 1)
S.case("scatter int64 with a number", "x:scatter(2, i, 42)", [E(exp4, "int64")], x=ib, i=make(perm + 1, "int64"))

# ---- triu / tril ----
m = S.rand((4, 5), "float32")
for k in (0, 1, -1, 2):
    S.case("triu(%d) [4,5]" % k, "x:triu(%d)" % k, [E(np.triu(m.f, k), "float32")], x=m)
    S.case("tril(%d) [4,5]" % k, "x:tril(%d)" % k, [E(np.tril(m.f, k), "float32")], x=m)
S.case("triu() default k=0", "x:triu()", [E(np.triu(m.f), "float32")], x=m)
S.case("tril() default k=0", "x:tril()", [E(np.tril(m.f), "float32")], x=m)
m3 = S.rand((2, 3, 3), "int64", -9, 9)
S.case("tril() batched 3-D int64", "x:tril()", [E(np.tril(m3.v), "int64")], x=m3)
S.case("triu(1) of a transposed view", "x:triu(1)", [E(np.triu(m.f.T, 1), "float32")], x=m.t())
S.case("tril(0) of bool", "x:tril()", [E(np.tril(np.ones((3, 3), bool)), "bool")], x=make(np.ones((3, 3)), "bool"))

# ---- rep (= PyTorch repeat) ----
r = S.rand((2, 3), "float32")
S.case("rep(2, 3)", "x:rep(2, 3)", [E(np.tile(r.f, (2, 3)), "float32")], x=r)
S.case('x["repeat"](x, 2, 1)', 'x["repeat"](x, 2, 1)', [E(np.tile(r.f, (2, 1)), "float32")], x=r)
S.case("rep(2, 1, 2) adds a leading dim", "x:rep(2, 1, 2)", [E(np.tile(r.f, (2, 1, 2)), "float32")], x=r)
S.case("rep({1, 2}) with a table", "x:rep({1, 2})", [E(np.tile(r.f, (1, 2)), "float32")], x=r)
S.case("rep of [3] by (2, 2) -> [2,6]", "x:rep(2, 2)", [E(np.tile(r.f[0], (2, 2)), "float32")], x=r.sel(1, 1))
S.case("rep of a transposed int64 view", "x:rep(1, 2)", [E(np.tile(m3.v[0].T, (1, 2)), "int64")], x=m3.sel(1, 1).t())
S.case("rep with fewer repeats than dims is an error", "x:rep(2)", [Err()], x=r)

# ---- contiguous and the view contract ----
S.case("contiguous() of transposed is contiguous", "x:t():contiguous():is_contiguous()", [Bool(True)], x=r)
S.case("contiguous() of transposed keeps the values", "x:t():contiguous()", [E(r.f.T, "float32")], x=r)
S.case("a write through x[i] on a view is seen by the base",
       "local v = x:narrow(2, 2, 2)\nv[1] = 9.5\nreturn x", [E(np.where(
           (np.arange(2)[:, None] == 0) & (np.arange(3)[None] >= 1), 9.5, r.f), "float32")], x=r)
S.case("a write through a transposed view is seen by the base",
       "local v = x:t()\nv[2] = -1\nreturn x", [E(np.where(np.arange(3)[None] == 1, -1.0, r.f), "float32")], x=r)
S.case("a write through reshape (view) is seen by the base",
       "local v = x:view({6})\nv[4] = 0.25\nreturn x", [E(np.where(np.arange(6).reshape(2, 3) == 3, 0.25, r.f),
                                                            "float32")], x=r)
S.case("a write into the base is seen by a select view",
       "local v = x:select(2, 3)\nx[2] = 4\nreturn v", [E(np.array([r.f[0, 2], 4.0]), "float32")], x=r)
S.case("x[i] = tensor broadcasts", "x[1] = grace.tensor({7, 8, 9}, {dtype='float32'})\nreturn x",
       [E(np.vstack([[7, 8, 9], r.f[1]]), "float32")], x=r)
S.case("x[i] = number on int64", "x[2] = 5\nreturn x", [E(np.vstack([m3.v[0, 0], [5, 5, 5], m3.v[0, 2]]), "int64")],
       x=make(m3.v[0], "int64"))
S.case("contiguous() of a contiguous tensor keeps its identity or values", "x:contiguous()", [E(r.f, "float32")], x=r)

# ---- more matmul: half-precision accumulation, vector cases in float16, odd layouts ----
S.case("matmul float16 with K=4096 accumulates in float32", 'local a = grace.ones({2, 4096}, {dtype="float16"})\n'
       'local b = grace.ones({4096, 3}, {dtype="float16"})\nreturn a:matmul(b)', [E(np.full((2, 3), 4096.0), "float16")])
S.case("matmul bfloat16 with K=1024", 'local a = grace.ones({2, 1024}, {dtype="bfloat16"})\n'
       'local b = grace.ones({1024, 3}, {dtype="bfloat16"})\nreturn a:matmul(b)', [E(np.full((2, 3), 1024.0), "bfloat16")])
S.case("dot of 4096 float16 ones", 'local a = grace.ones({4096}, {dtype="float16"})\nreturn a:matmul(a)',
       [E(np.array(4096.0), "float16")])
v16, m16 = S.rand((5,), "float16"), S.rand((5, 3), "float16")
S.case("matmul 1-D @ 2-D float16", "a:matmul(b)", [E(v16.f @ m16.f, "float16")], a=v16, b=m16)
p4 = S.rand((3, 2, 4), "float32")
q4 = S.rand((2, 4, 5), "float32")
S.case("batched matmul with permuted batch layout", "a:matmul(b)",
       [E(np.transpose(p4.f, (1, 0, 2)) @ q4.f, "float32", mag=np.abs(np.transpose(p4.f, (1, 0, 2))) @ np.abs(q4.f))],
       a=p4.permute(2, 1, 3), b=q4)
S.case("matmul with a broadcast batch of stride 0", "a:matmul(b)", [E(np.broadcast_to(p4.f[:1], (3, 2, 4)) @ q4.f[0],
                                                                      "float32")],
       a=p4.narrow(1, 1, 1).expand((3, 2, 4)), b=q4.sel(1, 1))
S.case("matmul [2,3] @ [3,0] -> [2,0]", "a:matmul(b)", [E(np.zeros((2, 0)), "float32")], a=S.rand((2, 3), "float32"),
       b=make(np.zeros((3, 0)), "float32"))
S.case("matmul of a 0-batch [0,2,3] @ [3,4]", "a:matmul(b)", [E(np.zeros((0, 2, 4)), "float32")],
       a=make(np.zeros((0, 2, 3)), "float32"), b=S.rand((3, 4), "float32"))

# ---- more views ----
g = S.rand((4, 6), "float32")
S.case("view splitting a dim of a transposed tensor is allowed", "x:t():view({3, 2, 4})",
       [E(g.f.T.reshape(3, 2, 4), "float32")], x=g)
S.case("view of a row-narrowed (contiguous) tensor", "x:narrow(1, 2, 2):view({12})", [E(g.f[1:3].reshape(12), "float32")],
       x=g)
S.case("view merging dims of a column-narrowed tensor is an error", "x:narrow(2, 1, 3):view({12})", [Err()], x=g)
S.case("transpose of a narrow of an expand", "x:expand({3, 4, 6}):narrow(3, 2, 3):transpose(1, 3)",
       [E(np.transpose(np.broadcast_to(g.f, (3, 4, 6))[:, :, 1:4], (2, 1, 0)), "float32")], x=g)
S.case("reshape of an expanded tensor", "x:expand({2, 4, 6}):reshape({8, 6})",
       [E(np.broadcast_to(g.f, (2, 4, 6)).reshape(8, 6), "float32")], x=g)
S.case("expand of a transposed view", "x:t():unsqueeze(1):expand({2, 6, 4})",
       [E(np.broadcast_to(g.f.T, (2, 6, 4)), "float32")], x=g)
S.case("select of a negative index on dim 2", "x:select(2, -2)", [E(g.f[:, -2], "float32")], x=g)
S.case("narrow with a negative dim", "x:narrow(-1, 5, 2)", [E(g.f[:, 4:6], "float32")], x=g)
S.case("transpose of zero-size [0,3]", "x:t()", [E(np.zeros((3, 0)), "float32")], x=make(np.zeros((0, 3)), "float32"))
S.case("contiguous of zero-size transposed", "x:t():contiguous()", [E(np.zeros((3, 0)), "float32")],
       x=make(np.zeros((0, 3)), "float32"))
S.case("squeeze of 0-d is 0-d", "x:squeeze()", [E(np.array(2.5), "float32")], x=make(np.array(2.5), "float32"))
S.case("split(5) of a size-3 dim -> one chunk", "x:split(5)", [Lst([E(s.f[:3], "float32")])], x=s.narrow(1, 1, 3))
S.case("chunk(5) of a size-3 dim -> 3 chunks", "x:chunk(5)", [Lst([E(s.f[k:k + 1], "float32") for k in range(3)])],
       x=s.narrow(1, 1, 3))
S.case("split views share storage with the input", "local parts = x:split(2)\nparts[2]:fill_(0)\nreturn x",
       [E(np.where(np.arange(7)[:, None] // 2 == 1, 0.0, s.f), "float32")], x=s)
S.case("x[i] = int tensor into float32 converts", "x[2] = grace.tensor({1, 2, 3})\nreturn x",
       [E(np.vstack([r.f[0], [1.0, 2.0, 3.0]]), "float32")], x=r)
S.case("x[i] = v on a transposed view", "local v = x:t()\nv[1] = 0\nreturn x",
       [E(np.where(np.arange(3)[None] == 0, 0.0, r.f), "float32")], x=r)
S.case("x[i] = v with a [1] tensor broadcast", "x[1] = grace.tensor({5.5})\nreturn x",
       [E(np.vstack([[5.5] * 3, r.f[1]]), "float32")], x=r)
S.case("index_select on dim 3 of 3-D", "x:index_select(3, i)", [E(t3.f[:, :, [3, 0, 0]], "float64")], x=t3,
       i=make(np.array([4, 1, 1]), "int64"))
S.case("gather with negative dim", "x:gather(-1, i)", [E(np.take_along_axis(src.f, gi.T[:4, :2] % 5, 1), "float32")],
       x=src, i=make(gi.T[:4, :2] % 5 + 1, "int64"))
S.case("cat of three different widths along dim 2", "grace.cat({a, b, c}, 2)",
       [E(np.concatenate([p.f, q.f[:, :1], p.f[:, :2]], 1), "float32")], a=p, b=q.narrow(2, 1, 1), c=p.narrow(2, 1, 2))
S.case("stack of transposed views", "grace.stack({p:t(), q:t()})", [E(np.stack([p.f.T, q.f.T]), "float32")], p=p, q=q)
S.case("triu of a zero-size matrix", "x:triu()", [E(np.zeros((0, 3)), "float32")], x=make(np.zeros((0, 3)), "float32"))
S.case("tril(-5) of [3,5] is all zero", "x:tril(-5)", [E(np.zeros((3, 5)), "float32")], x=m.narrow(1, 1, 3))
S.case("triu(10) of [3,5] is all zero", "x:triu(10)", [E(np.zeros((3, 5)), "float32")], x=m.narrow(1, 1, 3))
S.case("rep of 0-d by (2, 3)", "x:rep(2, 3)", [E(np.full((2, 3), 2.5), "float32")], x=make(np.array(2.5), "float32"))
S.case("rep with a zero count", "x:rep(0, 2)", [E(np.zeros((0, 6)), "float32")], x=r)

S.case("matmul int64 beyond 2^53", "a:matmul(b)", [E(np.array([[2 ** 53 + 1 + 3 * (2 ** 52 + 1)]]), "int64")],
       a=make(np.array([[2 ** 53 + 1, 3]]), "int64"), b=make(np.array([[1], [2 ** 52 + 1]]), "int64"))
S.case("index_select of int64 beyond 2^53", "x:index_select(1, i)", [E(np.array([2 ** 62 + 1, 2 ** 53 + 1]), "int64")],
       x=make(np.array([2 ** 53 + 1, 2 ** 62 + 1]), "int64"), i=make(np.array([2, 1]), "int64"))
S.case("cat of int64 beyond 2^53", "grace.cat({x, x})", [E(np.array([2 ** 53 + 1, 2 ** 62 + 1] * 2), "int64")],
       x=make(np.array([2 ** 53 + 1, 2 ** 62 + 1]), "int64"))
S.case("scatter of a large int64 number", "x:scatter(1, i, 9007199254740993)", [E(np.array([2 ** 53 + 1, 0]), "int64")],
       x=make(np.zeros(2), "int64"), i=make(np.array([1]), "int64"))

S.run()
