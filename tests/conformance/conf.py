"""conf.py: shared machinery of grace's NumPy conformance suite (tests/conformance/test_*.py).

How the suite works
-------------------
Each test file builds a `Suite`, declares cases and calls `suite.run()`:

    S = Suite(seed=1234)
    a = S.rand((3, 4), "float16")            # an input: values drawn with numpy, pre-rounded to float16
    b = S.rand((4,), "float16")
    S.case("add f16 broadcast", "return a + b", [E(a.f + b.f, "float16")], a=a, b=b)
    S.run()

* An input (`Inp`) carries the numpy values (`.v` in the numpy dtype, `.f` as float64, `.i` as int64) and a Lua
  expression that builds the same tensor in grace: `grace.tensor(<nested literal>, {dtype="..."})`, with floats
  printed with repr() so they round-trip exactly (values are pre-rounded to the dtype: float16 through numpy's
  float16, bfloat16 by round-to-nearest-even of the float32 bits). 0-d inputs use `grace.tensor(number, opts)`,
  zero-size inputs `grace.zeros({0, 3}, opts)`. View helpers (`.t(d1, d2)`, `.narrow(dim, start, len)`,
  `.expand(shape)`, `.permute(...)`, `.sel(dim, i)`) apply the same view on both sides, so a case can feed
  non-contiguous tensors to an op. Dims and positions in these helpers are grace's (1-based). `S.share(inp)` makes
  a large input whose literal is written once and built once, shared by the cases that use it (read-only).
* A case is a Lua function body (its inputs are bound as locals named after the keyword arguments; each case
  builds fresh inputs, so in-place cases cannot leak into each other) plus a list of expectations, one per value
  the body returns:
    E(ref, dtype, tol=None, mag=None, exact=False)
                                        a tensor: same shape, same dtype string, values within the tolerance of
                                        `dtype` (reference `ref` is computed in float64 / exact integers by the
                                        test and rounded to `dtype` here; `mag` optionally gives a per-element
                                        magnitude scale for rtol, e.g. sum|terms| for reductions and matmul;
                                        exact=True demands bit-equal floats, for casts and copies)
    Idx(ref0)                           an index tensor from grace (int64, 1-based) vs 0-based numpy indices
    Num(v, tol=0) / Bool(v) / Str(s)    a Lua number / boolean / string
    Err(substr=None)                    the body must raise an error (only where docs/lua_api.md says so)
    Lst([...])                          a Lua table of values (split, chunk, size())
    Check(fn, what)                     custom: fn(parsed value) -> (ok, diagnostic)  (random numbers)
    Cross(fn, what)                     the case's only expectation: fn(all returned values) -> (ok, diagnostic)
  A one-line body that is an expression gets `return ` prepended ("x:exp()" is "return x:exp()").
* `run()` writes ONE Lua program for the whole file, runs `$GRACE prog.lua` once (timeout 120 s), parses the
  printed results (tensors via x:tolist(), floats with just enough digits to round-trip their dtype: %.17g for
  float64, %.9g float32, %.5g float16, %.4g bfloat16; the parsed value is rounded back to the dtype) and prints TAP (`ok k - desc` / `not ok k - desc` with `# ` diagnostics: max abs/rel error,
  shapes, dtypes, the first mismatching position). The program prints `@@B k` before case k; if grace dies
  (a crash or a hang), the case that was running is reported as failed and the program is restarted at the next
  case (CONF_START env var), so one crash costs one case, not the file. Exit status 1 if any case failed.
  Set CONF_KEEP=1 to keep the generated Lua program (its path is printed as a diagnostic); CONF_DEVICE=cuda runs
  grace with `--device cuda` (every tensor the cases create lands there; results are read back with tolist()).
  CONF_COMPILE=1 runs every case body through grace.compile (traced on a first call, the second call's results
  are compared), so the same references check the tracer and the compiled path.

Adding a case: pick the file of the op family, build inputs with `S.rand / S.randint / S.arr`, write the Lua body
(`return x:op(...)`), compute the reference with numpy from the inputs' `.f` (floats) or `.v` (exact integer
semantics, e.g. uint8 wraparound), and state the dtype PyTorch would give (`promote()`, `result_type()` and
`float_of()` below implement PyTorch's promotion rules, wrapped numbers and 0-d tensors included). Keep tensors
small (a few hundred elements at most; test_large.py holds the few large ones, as shared inputs). Then run the file:
    GRACE=$PWD/build/grace $(sh tests/python.sh) tests/conformance/test_pointwise.py

Tolerances (per result dtype) are in TOL below; float16/bfloat16 additionally allow 1 ulp of the result dtype.
Reference values never come from grace itself: they come from numpy (computed in float64 from the rounded inputs
and then rounded to the result dtype) or from independent reasoning.
"""
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

np.seterr(all="ignore")

# ---------------------------------------------------------------------------------------------------------------
# Tolerances: |got - ref| <= atol + rtol * max(|ref|, mag); for float16/bfloat16 also accepted within `ulps` ulp of
# the result dtype. "transc" is used for transcendental functions (exp, log, tanh, erf, softmax, ...).
TOL = {
    "float64": dict(rtol=1e-12, atol=1e-12, ulps=0),
    "float32": dict(rtol=1e-5, atol=1e-6, ulps=0),
    "float16": dict(rtol=1e-3, atol=1e-3, ulps=1),
    "bfloat16": dict(rtol=1e-2, atol=1e-2, ulps=1),
}
TOL_TRANSC = {
    "float64": dict(rtol=1e-12, atol=1e-12, ulps=0),
    "float32": dict(rtol=1e-5, atol=1e-6, ulps=0),
    "float16": dict(rtol=1e-3, atol=1e-3, ulps=1),
    "bfloat16": dict(rtol=1e-2, atol=1e-2, ulps=1),
}
TIMEOUT = 120

FLOATS = ["float32", "float64", "float16", "bfloat16"]
INTS = ["int32", "int64", "uint8"]
ALL = FLOATS + INTS + ["bool"]
NP = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": np.float32,
      "int32": np.int32, "int64": np.int64, "uint8": np.uint8, "bool": np.bool_}


def is_float(dt):
    return dt in FLOATS


def device():
    return os.environ.get("CONF_DEVICE") or "cpu"


def device_args():
    return ["--device", os.environ["CONF_DEVICE"]] if os.environ.get("CONF_DEVICE") else []


# ---------------------------------------------------------------------------------------------------------------
# dtype rounding

def to_bf16(a):
    """float array -> float32 array holding the bfloat16 round-to-nearest-even of float32(a)."""
    shape = np.shape(a)
    a = np.asarray(a, dtype=np.float64).astype(np.float32).reshape(-1)
    bits = a.view(np.uint32).astype(np.uint64)
    s16 = np.uint64(16)
    bits = ((bits + np.uint64(0x7FFF) + ((bits >> s16) & np.uint64(1))) >> s16) << s16
    out = (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32).copy()
    out[np.isnan(a)] = np.nan
    return out.reshape(shape)


def round_to(a, dt):
    """Reference values (float64 or integer numpy data) rounded/cast to grace dtype dt; returned in NP[dt]."""
    a = np.asarray(a)
    if dt == "bfloat16":
        return to_bf16(a)
    if dt in ("float16", "float32", "float64"):
        return a.astype(np.float64).astype(NP[dt])
    if dt == "bool":
        return a.astype(np.bool_)
    if a.dtype.kind == "f":  # float -> int: truncation toward zero (C cast)
        a = np.trunc(a)
        return a.astype(np.int64).astype(NP[dt])
    return a.astype(np.int64).astype(NP[dt]) if a.dtype != NP[dt] else a


def ulp(ref, dt):
    r = np.abs(np.asarray(ref, dtype=np.float64))
    if dt == "float16":
        return np.spacing(r.astype(np.float16)).astype(np.float64)
    if dt == "bfloat16":
        return np.spacing(r.astype(np.float32)).astype(np.float64) * 65536.0
    if dt == "float32":
        return np.spacing(r.astype(np.float32)).astype(np.float64)
    return np.spacing(r)


# ---------------------------------------------------------------------------------------------------------------
# PyTorch type promotion

_RANK = {"bool": 0, "uint8": 1, "int32": 2, "int64": 3}


def promote(a, b):
    """torch.promote_types for grace's dtypes."""
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    fa, fb = is_float(a), is_float(b)
    if fa and fb:
        if "float64" in (a, b):
            return "float64"
        return "float32"  # f16+bf16, f16+f32, bf16+f32
    if fa:
        return a
    if fb:
        return b
    return a if _RANK[a] > _RANK[b] else b


def category(dt):
    return 0 if dt == "bool" else (2 if is_float(dt) else 1)


def result_type(*operands):
    """PyTorch's result_type. Each operand: a dtype string (a tensor with dims), ("0d", dtype) for a 0-d tensor,
    or a Lua number: a Python int (integer) / float (float) / bool, i.e. a wrapped number."""
    dim = zero = wrapped = None

    def p(x, y):
        return y if x is None else promote(x, y)

    for o in operands:
        if isinstance(o, bool):
            wrapped = p(wrapped, "bool")
        elif isinstance(o, int):
            wrapped = p(wrapped, "int64")
        elif isinstance(o, float):
            wrapped = p(wrapped, "float32")  # default dtype
        elif isinstance(o, tuple):
            zero = p(zero, o[1])
        else:
            dim = p(dim, o)

    def combine(higher, lower):
        if higher is not None and is_float(higher):
            return higher
        if higher == "bool" or (lower is not None and is_float(lower)):
            if higher is None:
                return lower
            return promote(higher, lower) if lower is not None else higher
        if higher is not None:
            return higher
        return lower

    return combine(dim, combine(zero, wrapped))


def float_of(dt):
    """Result dtype of a float-only op (exp, div, ...): integers and bool give the default float32."""
    return dt if is_float(dt) else "float32"


# ---------------------------------------------------------------------------------------------------------------
# Lua literals

def lua_num(x, dt):
    if dt == "bool":
        return "true" if bool(x) else "false"
    if not is_float(dt):
        return str(int(x))
    x = float(x)
    if math.isnan(x):
        return "(0/0)"
    if math.isinf(x):
        return "(1/0)" if x > 0 else "(-1/0)"
    return repr(x)


def lua_lit(a, dt):
    a = np.asarray(a)
    if a.ndim == 0:
        return lua_num(a[()], dt)
    if a.size == 0:
        return "{" + ",".join(lua_lit(s, dt) for s in a) + "}"
    flat = a.reshape(-1)
    if dt == "bool":
        items = ["true" if x else "false" for x in flat.tolist()]
    elif not is_float(dt):
        items = [str(int(x)) for x in flat.tolist()]
    else:
        items = [repr(x) for x in flat.astype(np.float64).tolist()]
        if not np.isfinite(flat).all():
            items = [lua_num(float(x), dt) if not math.isfinite(x) else t for x, t in zip(flat.tolist(), items)]
    # group innermost-first into nested braces
    for size in reversed(a.shape[1:]):
        items = ["{" + ",".join(items[k:k + size]) + "}" for k in range(0, len(items), size)]
    return "{" + ",".join(items) + "}"


def lua_shape(shape):
    return "{" + ",".join(str(int(s)) for s in shape) + "}"


def lua_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ---------------------------------------------------------------------------------------------------------------
# Inputs

class Inp:
    """A tensor input: numpy value `v` (numpy dtype NP[dt]; bfloat16 is held as bf16-rounded float32) and the Lua
    expression `lua` building the same tensor (possibly a view) in grace."""

    def __init__(self, v, dt, lua=None):
        self.dt = dt
        self.v = np.asarray(v)
        if lua is None:
            if self.v.ndim == 0:
                lua = "grace.tensor(%s, {dtype=%s})" % (lua_num(self.v[()], dt), lua_str(dt))
            elif self.v.size == 0:
                lua = "grace.zeros(%s, {dtype=%s})" % (lua_shape(self.v.shape), lua_str(dt))
            else:
                lua = "grace.tensor(%s, {dtype=%s})" % (lua_lit(self.v, dt), lua_str(dt))
        self.lua = lua

    @property
    def f(self):
        return self.v.astype(np.float64)

    @property
    def i(self):
        return self.v.astype(np.int64)

    @property
    def shape(self):
        return self.v.shape

    def _view(self, suffix, v):
        return Inp(v, self.dt, "(%s)%s" % (self.lua, suffix))

    def t(self, d1=1, d2=2):
        return self._view(":transpose(%d,%d)" % (d1, d2), np.swapaxes(self.v, d1 - 1, d2 - 1))

    def permute(self, *dims):
        return self._view(":permute(%s)" % ",".join(map(str, dims)), np.transpose(self.v, [d - 1 for d in dims]))

    def narrow(self, dim, start, length):
        sl = [slice(None)] * self.v.ndim
        sl[dim - 1] = slice(start - 1, start - 1 + length)
        return self._view(":narrow(%d,%d,%d)" % (dim, start, length), self.v[tuple(sl)])

    def expand(self, shape):
        return self._view(":expand(%s)" % lua_shape(shape), np.broadcast_to(self.v, shape))

    def sel(self, dim, i):
        return self._view(":select(%d,%d)" % (dim, i), np.take(self.v, i - 1, axis=dim - 1))


def make(v, dt):
    """An input holding numpy data v rounded to dt."""
    return Inp(round_to(v, dt), dt)


# ---------------------------------------------------------------------------------------------------------------
# Expectations

class E:
    def __init__(self, ref, dtype, tol=None, mag=None, exact=False):
        self.dtype = dtype
        self.raw = np.asarray(ref)
        self.ref = round_to(self.raw, dtype)
        self.tol = tol
        self.mag = None if mag is None else np.asarray(mag, dtype=np.float64)
        self.exact = exact


class Idx(E):
    """1-based int64 indices from grace vs 0-based numpy indices."""

    def __init__(self, ref0):
        super().__init__(np.asarray(ref0, dtype=np.int64) + 1, "int64")


class Num:
    def __init__(self, v, tol=0.0):
        self.v, self.tol = v, tol


class Bool:
    def __init__(self, v):
        self.v = bool(v)


class Str:
    def __init__(self, s):
        self.s = s


class Err:
    def __init__(self, substr=None):
        self.substr = substr


class Lst:
    def __init__(self, items):
        self.items = list(items)


class Check:
    def __init__(self, fn, what=""):
        self.fn, self.what = fn, what


class Cross:
    """The only expectation of a case that returns several values: fn(list of parsed values) -> (ok, diagnostic).
    Parsed tensors are ("T", dtype, shape, tokens); use values() to get a float64 array."""

    def __init__(self, fn, what=""):
        self.fn, self.what = fn, what


def values(got):
    """A parsed tensor's values as a float64 numpy array of its shape (None if it is not a tensor)."""
    if got[0] != "T":
        return None
    v = _parse_floats(got[3], got[1]) if got[3] else np.zeros(0)
    return v.reshape(got[2]) if v.size == int(np.prod(got[2])) else v


class Any:
    """Accept whatever value (e.g. a returned tensor checked elsewhere)."""


# ---------------------------------------------------------------------------------------------------------------
# The Lua side

LUA_PRELUDE = r"""
local CASES = {}
local SHF, SHV = {}, {}
local function shared(k)  -- inputs shared by several cases are built once, on first use, inside the case's pcall
  local v = SHV[k]
  if v == nil then v = SHF[k](); SHV[k] = v end
  return v
end
local DIGITS = {float64 = "%.17g", float32 = "%.9g", float16 = "%.5g", bfloat16 = "%.4g"}
local function fmt(v, g)
  local t = type(v)
  if t == "boolean" then return v and "1" or "0" end
  if t == "number" then
    if math.type(v) == "integer" then return string.format("%d", v) end
    if v ~= v then return "nan" end
    if v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
    return string.format(g or "%.17g", v)
  end
  return "?" .. type(v)
end
local function flat(v, out, g)
  if type(v) == "table" then for i = 1, #v do flat(v[i], out, g) end else out[#out + 1] = fmt(v, g) end
  return out
end
local function clean(s) return (tostring(s):gsub("[\r\n]+", " | ")) end
local function is_tensor(v)
  if type(v) ~= "userdata" then return false end
  local ok, d = pcall(function() return v.dtype end)
  return ok and type(d) == "string"
end
local emit
emit = function(v, depth)
  if is_tensor(v) then
    local ok, line = pcall(function()
      local shp = v:size()
      local vals
      -- enough significant digits to round-trip the dtype (Python rounds the parsed value back to it)
      local g = DIGITS[v.dtype] or "%.17g"
      if v:dim() == 0 then vals = {fmt(v:item(), g)} else vals = flat(v:tolist(), {}, g) end
      local s = {}
      for i = 1, #shp do s[i] = tostring(shp[i]) end
      return "@@T " .. v.dtype .. " [" .. table.concat(s, ",") .. "] " .. table.concat(vals, " ")
    end)
    if ok then io.write(line, "\n") else io.write("@@X reading the result tensor failed: ", clean(line), "\n") end
  elseif type(v) == "table" and depth < 4 then
    io.write("@@L ", #v, "\n")
    for i = 1, #v do emit(v[i], depth + 1) end
  elseif type(v) == "number" then io.write("@@N ", fmt(v), "\n")
  elseif type(v) == "boolean" then io.write("@@N ", fmt(v), " bool\n")
  elseif type(v) == "string" then io.write("@@S ", clean(v), "\n")
  else io.write("@@X a ", type(v), " value: ", clean(tostring(v)), "\n") end
end
local function run_all()
  local start = tonumber(os.getenv("CONF_START") or "1") or 1
  for k = start, #CASES do
    io.write("@@B ", k, "\n"); io.flush()
    local res = table.pack(pcall(CASES[k]))
    if res[1] then
      io.write("@@R ", k, " ok ", res.n - 1, "\n")
      for i = 2, res.n do emit(res[i], 0) end
    else
      io.write("@@R ", k, " err ", clean(res[2]), "\n")
    end
    io.write("@@E ", k, "\n"); io.flush()
  end
  io.write("@@DONE\n"); io.flush()
end
"""


class Case:
    def __init__(self, desc, body, expects, inputs):
        self.desc, self.body, self.expects, self.inputs = desc, body, expects, inputs


def _parse_values(lines, pos, n):
    """Parse n values starting at lines[pos]; returns (values, newpos)."""
    vals = []
    for _ in range(n):
        if pos >= len(lines):
            vals.append(("X", "missing value"))
            continue
        ln = lines[pos]
        pos += 1
        if ln.startswith("@@T "):
            parts = ln[4:].split(" ")
            dt, shp = parts[0], parts[1]
            shape = tuple(int(s) for s in shp[1:-1].split(",") if s != "")
            vals.append(("T", dt, shape, [p for p in parts[2:] if p != ""]))
        elif ln.startswith("@@L "):
            m = int(ln[4:])
            sub, pos = _parse_values(lines, pos, m)
            vals.append(("L", sub))
        elif ln.startswith("@@N "):
            parts = ln[4:].split(" ")
            vals.append(("N", parts[0], len(parts) > 1 and parts[1] == "bool"))
        elif ln.startswith("@@S "):
            vals.append(("S", ln[4:]))
        else:
            vals.append(("X", ln[4:] if ln.startswith("@@X ") else ln))
    return vals, pos


def _fnum(s):
    try:
        return float(s)
    except ValueError:
        return float("nan") if "nan" in s else None


def _parse_floats(toks, dt):
    """Printed values -> float64 array, rounded back to dt when dt is a narrower float (the Lua side prints just
    enough digits to identify a value of dt)."""
    try:
        v = np.array(toks, dtype=np.float64)
    except ValueError:
        v = np.array([_fnum(t) if _fnum(t) is not None else np.nan for t in toks], dtype=np.float64)
    if dt in ("float32", "float16", "bfloat16"):
        v = round_to(v, dt).astype(np.float64)
    return v


def _idx(flat_i, shape):
    if not shape:
        return "()"
    return "(" + ",".join(str(int(i) + 1) for i in np.unravel_index(flat_i, shape)) + ")"


def _desc_value(v):
    if v[0] == "T":
        return "tensor %s %s" % (v[1], list(v[2]))
    if v[0] == "N":
        return "number %s" % v[1]
    if v[0] == "L":
        return "table of %d" % len(v[1])
    if v[0] == "S":
        return "string %r" % v[1]
    return "unreadable (%s)" % v[1]


def compare_tensor(got, e, what):
    """Returns a list of diagnostic lines (empty when it matches)."""
    if got[0] != "T":
        return ["%s: expected a tensor %s %s, got %s" % (what, e.dtype, list(e.ref.shape), _desc_value(got))]
    _, dt, shape, toks = got
    diag = []
    if dt != e.dtype:
        diag.append("%s: dtype %s, expected %s" % (what, dt, e.dtype))
    if tuple(shape) != tuple(e.ref.shape):
        diag.append("%s: shape %s, expected %s" % (what, list(shape), list(e.ref.shape)))
        return diag
    n = int(np.prod(shape)) if shape else 1
    if len(toks) != n:
        diag.append("%s: %d values printed for shape %s" % (what, len(toks), list(shape)))
        return diag
    ref = e.ref.reshape(-1)
    if n == 0:
        return diag
    vals = _parse_floats(toks, dt)
    exp_is_float = is_float(e.dtype) and not e.exact
    if not exp_is_float:
        if e.exact and is_float(e.dtype):
            refd = ref.astype(np.float64)
            bad = np.nonzero(~((vals == refd) | (np.isnan(vals) & np.isnan(refd))))[0]
        else:
            # exact comparison; integer tokens parsed as int to avoid float rounding on int64
            refv = ref.astype(np.int64)
            try:
                gotv = np.array(toks, dtype=np.int64)
                bad = np.nonzero(gotv != refv)[0]
            except (ValueError, OverflowError):
                gotv = [int(t) if re.fullmatch(r"-?\d+", t) else None for t in toks]
                bad = [k for k in range(n) if gotv[k] != refv[k]]
        if len(bad):
            k = int(bad[0])
            diag.append("%s (%s %s, exact): %d of %d values differ; first at %s: got %s, expected %s"
                        % (what, e.dtype, list(shape), len(bad), n, _idx(k, shape), toks[k],
                           ref[k] if not (e.exact and is_float(e.dtype)) else repr(float(ref[k]))))
        return diag
    refd = ref.astype(np.float64)
    tol = e.tol or TOL[e.dtype]
    nan_r, nan_g = np.isnan(refd), np.isnan(vals)
    bad = nan_r != nan_g
    inf_r = np.isinf(refd)
    bad |= inf_r & ~nan_g & (vals != refd)
    bad |= np.isinf(vals) & ~inf_r & ~nan_r
    fin = ~nan_r & ~inf_r & ~nan_g & ~np.isinf(vals)
    err = np.where(fin, np.abs(vals - refd), 0.0)
    scale = np.abs(refd)
    if e.mag is not None:
        scale = np.maximum(scale, np.broadcast_to(e.mag, e.ref.shape).reshape(-1))
    allow = tol["atol"] + tol["rtol"] * np.where(fin, scale, 0.0)
    if tol["ulps"]:
        allow = np.maximum(allow, tol["ulps"] * np.where(fin, ulp(refd, e.dtype), 0.0))
    bad |= fin & (err > allow)
    if bad.any():
        k = int(np.argmax(bad))
        rel = np.where(fin & (np.abs(refd) > 0), err / np.where(np.abs(refd) > 0, np.abs(refd), 1.0), 0.0)
        diag.append("%s (%s %s): %d of %d values out of tolerance (rtol %g atol %g%s); max abs err %.6g, max rel "
                    "err %.6g; first at %s: got %s, expected %.17g"
                    % (what, e.dtype, list(shape), int(bad.sum()), n, tol["rtol"], tol["atol"],
                       (" or %d ulp" % tol["ulps"]) if tol["ulps"] else "", float(err.max()), float(rel.max()),
                       _idx(k, shape), toks[k], refd[k]))
    return diag


def compare(got, e, what):
    if isinstance(e, Any):
        return []
    if isinstance(e, Check):
        try:
            ok, d = e.fn(got)
        except Exception as ex:
            ok, d = False, "check raised %r on %s" % (ex, _desc_value(got))
        return [] if ok else ["%s%s: %s" % (what, (" " + e.what) if e.what else "", d)]
    if isinstance(e, E):
        return compare_tensor(got, e, what)
    if isinstance(e, Num):
        if got[0] != "N" or got[2]:
            return ["%s: expected number %r, got %s" % (what, e.v, _desc_value(got))]
        if isinstance(e.v, int) and not isinstance(e.v, bool) and e.tol == 0:
            try:
                ok = int(got[1]) == e.v
            except ValueError:
                ok = False
            return [] if ok else ["%s: got %s, expected integer %d" % (what, got[1], e.v)]
        g = _fnum(got[1])
        ok = g is not None and (abs(g - e.v) <= e.tol or (math.isnan(g) and math.isnan(e.v)))
        return [] if ok else ["%s: got %s, expected %r" % (what, got[1], e.v)]
    if isinstance(e, Bool):
        if got[0] != "N" or not got[2]:
            return ["%s: expected boolean %s, got %s" % (what, e.v, _desc_value(got))]
        return [] if (got[1] == "1") == e.v else ["%s: got %s, expected %s" % (what, got[1] == "1", e.v)]
    if isinstance(e, Str):
        if got[0] != "S" or got[1] != e.s:
            return ["%s: expected string %r, got %s" % (what, e.s, _desc_value(got))]
        return []
    if isinstance(e, Lst):
        if got[0] != "L":
            return ["%s: expected a table of %d, got %s" % (what, len(e.items), _desc_value(got))]
        if len(got[1]) != len(e.items):
            return ["%s: table of %d, expected %d" % (what, len(got[1]), len(e.items))]
        d = []
        for j, (g, x) in enumerate(zip(got[1], e.items)):
            d += compare(g, x, "%s[%d]" % (what, j + 1))
        return d
    raise TypeError("bad expectation %r" % (e,))


class Suite:
    def __init__(self, seed=1234):
        self.rng = np.random.default_rng(seed)
        self.cases = []
        self.shared = []

    # --- inputs ---
    def rand(self, shape, dt, lo=-2.0, hi=2.0):
        """Random values of dtype dt: floats uniform in [lo, hi), ints in [lo, hi], bools 50/50."""
        if dt == "bool":
            return Inp(self.rng.random(shape) < 0.5, dt)
        if not is_float(dt):
            lo_i, hi_i = int(lo), int(hi)
            if dt == "uint8":
                lo_i = max(lo_i, 0)
            return Inp(self.rng.integers(lo_i, hi_i + 1, size=shape).astype(NP[dt]), dt)
        return make(self.rng.uniform(lo, hi, size=shape), dt)

    def randn(self, shape, dt, scale=1.0):
        return make(self.rng.standard_normal(shape) * scale, dt)

    def randint(self, shape, dt, lo, hi):
        return self.rand(shape, dt, lo, hi)

    def distinct(self, shape, dt, lo=-2.0, hi=2.0):
        """Floats with all values distinct after rounding to dt (for sort/topk/max indices)."""
        n = int(np.prod(shape))
        if is_float(dt):
            grid = np.linspace(lo, hi, 4 * n + 8)
            grid = np.unique(round_to(grid, dt).astype(np.float64))
            vals = self.rng.choice(grid, size=n, replace=False)
        else:
            lo_i = max(int(lo), 0) if dt == "uint8" else int(lo)
            vals = self.rng.choice(np.arange(lo_i, lo_i + 4 * n + 8), size=n, replace=False)
        return make(vals.reshape(shape), dt)

    def arr(self, v, dt):
        return make(np.asarray(v), dt)

    def share(self, inp):
        """The same input, built once by the Lua program and shared by every case that uses it (for large inputs:
        their literal is written once). Cases must not modify a shared input in place."""
        self.shared.append(inp.lua)
        return Inp(inp.v, inp.dt, "shared(%d)" % len(self.shared))

    # --- cases ---
    def case(self, desc, body, expects, **inputs):
        if not isinstance(expects, (list, tuple)):
            expects = [expects]
        if "\n" not in body and not body.lstrip().startswith(("return", "local")):
            body = "return " + body
        self.cases.append(Case(desc, body, list(expects), inputs))

    # --- running ---
    def lua_program(self):
        out = [LUA_PRELUDE]
        for k, lua in enumerate(self.shared, 1):
            out.append("SHF[%d] = function() return %s end\n" % (k, lua))
        compiled = bool(os.environ.get("CONF_COMPILE"))
        for c in self.cases:
            out.append("CASES[#CASES + 1] = function()\n")
            decl = "".join("  local %s = %s\n" % (name, inp.lua if isinstance(inp, Inp) else inp)
                           for name, inp in c.inputs.items())
            body = "  " + c.body.replace("\n", "\n  ") + "\n"
            if not compiled:
                out.append(decl + body + "end\n")
                continue
            # CONF_COMPILE=1: the body becomes a function of its inputs run through grace.compile; the first call
            # traces it, the second (on fresh inputs, so in-place cases see the same data) runs the compiled entry
            # and gives the result that is compared.
            names = ", ".join(c.inputs)
            out.append("  local function mk()\n" + decl.replace("\n  ", "\n    ").replace("  local", "    local", 1)
                       + "    return %s\n  end\n" % names)
            out.append("  local f = grace.compile(function(%s)\n  %s  end)\n" % (names, body.replace("\n  ", "\n    ")))
            out.append("  f(mk())\n  return f(mk())\nend\n")
        out.append("run_all()\n")
        return "".join(out)

    def _grace(self):
        g = os.environ.get("GRACE")
        if not g:
            here = os.path.dirname(os.path.abspath(__file__))
            g = os.path.join(here, "..", "..", "build", "grace")
        return os.path.abspath(g)

    def run(self):
        grace = self._grace()
        prog = self.lua_program()
        fd, path = tempfile.mkstemp(prefix="grace_conf_", suffix=".lua")
        with os.fdopen(fd, "w") as f:
            f.write(prog)
        results = {}      # k -> (status, payload)
        notes = []
        start, restarts = 1, 0
        n = len(self.cases)
        try:
            while start <= n and restarts <= 40:
                env = dict(os.environ, CONF_START=str(start))
                try:
                    p = subprocess.run([grace] + device_args() + [path], capture_output=True, text=True, timeout=TIMEOUT, env=env,
                                       errors="replace")
                    stdout, stderr, rc, hung = p.stdout, p.stderr, p.returncode, False
                except subprocess.TimeoutExpired as ex:
                    stdout = ex.stdout.decode(errors="replace") if isinstance(ex.stdout, bytes) else (ex.stdout or "")
                    stderr = ex.stderr.decode(errors="replace") if isinstance(ex.stderr, bytes) else (ex.stderr or "")
                    rc, hung = None, True
                except OSError as ex:
                    notes.append("cannot run %s: %s" % (grace, ex))
                    break
                lines = [ln for ln in stdout.split("\n") if ln.startswith("@@")]
                last_begun, done, pos = None, False, 0
                while pos < len(lines):
                    ln = lines[pos]
                    pos += 1
                    if ln.startswith("@@B "):
                        last_begun = int(ln[4:])
                    elif ln.startswith("@@R "):
                        m = re.match(r"@@R (\d+) (ok|err) ?(.*)$", ln)
                        k = int(m.group(1))
                        if m.group(2) == "ok":
                            vals, pos = _parse_values(lines, pos, int(m.group(3)))
                            results[k] = ("ok", vals)
                        else:
                            results[k] = ("err", m.group(3))
                    elif ln.startswith("@@E "):
                        last_begun = None
                    elif ln == "@@DONE":
                        done = True
                if done:
                    break
                tail = " | ".join(stderr.strip().split("\n")[-6:])
                why = ("hung (killed after %d s)" % TIMEOUT if hung else
                       "was killed by signal %d" % -rc if rc < 0 else "died (exit status %s)" % rc)
                if last_begun is None:
                    # died outside a case (e.g. a syntax error in the program, or the binary is missing)
                    notes.append("grace %s before running case %d: %s" % (why, start, tail))
                    break
                results[last_begun] = ("crash", "grace %s during this case: %s" % (why, tail))
                start = last_begun + 1
                restarts += 1
        finally:
            if os.environ.get("CONF_KEEP"):
                notes.append("Lua program kept at %s" % path)
            else:
                os.unlink(path)
        return self.report(results, notes)

    def report(self, results, notes):
        n = len(self.cases)
        print("1..%d" % n)
        for note in notes:
            print("# " + note)
        failed = 0
        for k, c in enumerate(self.cases, 1):
            diag = []
            r = results.get(k)
            if r is None:
                diag.append("no result (grace did not run this case)")
            elif r[0] == "crash":
                diag.append(r[1])
            elif r[0] == "err":
                if len(c.expects) == 1 and isinstance(c.expects[0], Err):
                    sub = c.expects[0].substr
                    if sub and sub.lower() not in r[1].lower():
                        diag.append("error message lacks %r: %s" % (sub, r[1]))
                else:
                    diag.append("error: " + r[1])
            else:
                vals = r[1]
                if len(c.expects) == 1 and isinstance(c.expects[0], Err):
                    diag.append("expected an error, got %d value(s): %s"
                                % (len(vals), ", ".join(_desc_value(v) for v in vals)))
                elif len(c.expects) == 1 and isinstance(c.expects[0], Cross):
                    try:
                        ok, d = c.expects[0].fn(vals)
                    except Exception as ex:  # a malformed result must not stop the report
                        ok, d = False, "check raised %r on %s" % (ex, ", ".join(_desc_value(v) for v in vals))
                    if not ok:
                        diag.append("%s%s" % ((c.expects[0].what + ": ") if c.expects[0].what else "", d))
                elif len(vals) != len(c.expects):
                    diag.append("returned %d value(s), expected %d: %s"
                                % (len(vals), len(c.expects), ", ".join(_desc_value(v) for v in vals)))
                else:
                    for j, (g, e) in enumerate(zip(vals, c.expects)):
                        diag += compare(g, e, "result %d" % (j + 1) if len(vals) > 1 else "result")
            if diag:
                failed += 1
                print("not ok %d - %s" % (k, c.desc))
                print("#   lua: %s" % c.body.replace("\n", " ")[:200])
                for d in diag:
                    print("#   " + d[:1500])
            else:
                print("ok %d - %s" % (k, c.desc))
        sys.stdout.flush()
        sys.exit(1 if failed else 0)
