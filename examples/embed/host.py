#!/usr/bin/env python3
"""host.py: grace from a second host language, Python, through ctypes on libgrace.so: the program of c_only.c,
out[i] = sum_j tanh(2 a[i,j] + b[i,j]) a[i,j], compiled with grace_fn around a Python function (called once per
new shape while grace records its grace_run calls), run on two shapes and checked against NumPy.
Usage: python3 host.py [path/to/libgrace.so] (default: build/libgrace.so). Prints "host.py: ok" when all agree."""
import ctypes as C
import sys

import numpy as np

lib = C.CDLL(sys.argv[1] if len(sys.argv) > 1 else "build/libgrace.so")
vm_p, t_p = C.c_void_p, C.c_void_p
FLOAT32, OK = 0, 0                       # GRACE_FLOAT32, GRACE_OK (include/grace.h)
OPS = {}
for name in ("mul", "add", "tanh", "sum"):
    op = C.c_int()
    lib.grace_op_from_name(C.c_char_p(name.encode()), C.byref(op))
    OPS[name] = op.value
MAXD = 8                                 # GRACE_MAX_DIMS


class Attrs(C.Structure):                # grace_attrs, field for field
    _fields_ = [("ndims", C.c_int), ("dims", C.c_int64 * MAXD), ("nshape", C.c_int), ("shape", C.c_int64 * MAXD),
                ("a", C.c_double), ("b", C.c_double), ("c", C.c_double), ("has_a", C.c_int), ("has_b", C.c_int),
                ("exact", C.c_int), ("ia", C.c_int64), ("ib", C.c_int64), ("ic", C.c_int64),
                ("i0", C.c_int64), ("i1", C.c_int64), ("keepdim", C.c_int), ("flag", C.c_int),
                ("has_dtype", C.c_int), ("dtype", C.c_int), ("device", C.c_int)]


class Arg(C.Structure):                  # grace_arg
    _fields_ = [("kind", C.c_int), ("i", C.c_int64), ("f", C.c_double), ("t", t_p), ("host", C.c_uint64),
                ("is_mutable", C.c_int)]


ARG_TENSOR = 4
CALL = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.POINTER(Arg), C.POINTER(C.c_int), C.POINTER(Arg), C.c_int)


class Host(C.Structure):                 # grace_host: only `call` is required; the rest stay NULL
    _fields_ = [("call", CALL)] + [(n, C.c_void_p) for n in (
        "trace_begin", "trace_end", "guard_check", "guard_same", "keep", "release", "same", "where", "eager")]


for fn, res, args in [
        ("grace_vm_new", vm_p, [C.c_void_p, C.c_char_p, C.c_size_t]), ("grace_last_error", C.c_char_p, [vm_p]),
        ("grace_tensor_from_data", C.c_int, [vm_p, C.c_int, C.c_int, C.POINTER(C.c_int64), C.c_int, C.c_void_p,
                                             C.POINTER(t_p)]),
        ("grace_tensor_scalar", C.c_int, [vm_p, C.c_double, C.c_int, C.POINTER(t_p)]),
        ("grace_run", C.c_int, [vm_p, C.c_int, C.c_int, C.POINTER(t_p), C.POINTER(Attrs), C.c_int, C.POINTER(t_p)]),
        ("grace_tensor_read", C.c_int, [vm_p, t_p, C.c_int, C.c_void_p]),
        ("grace_tensor_release", None, [t_p]), ("grace_vm_free", None, [vm_p]),
        ("grace_fn_new", C.c_int, [vm_p, C.c_char_p, C.POINTER(Host), C.c_void_p, C.c_void_p, C.POINTER(C.c_void_p)]),
        ("grace_fn_call", C.c_int, [C.c_void_p, C.c_int, C.POINTER(Arg), C.POINTER(C.c_int), C.POINTER(Arg), C.c_int]),
        ("grace_fn_free", None, [C.c_void_p])]:
    getattr(lib, fn).restype, getattr(lib, fn).argtypes = res, args

err = C.create_string_buffer(256)
vm = lib.grace_vm_new(None, err, 256)
if not vm:
    sys.exit("host.py: " + err.value.decode())


def check(st, what):
    if st != OK:
        raise RuntimeError(f"{what}: {lib.grace_last_error(vm).decode()}")


def run(op, inputs, attrs=None):
    ins, out = (t_p * len(inputs))(*inputs), t_p()
    check(lib.grace_run(vm, OPS[op], len(inputs), ins, C.byref(attrs) if attrs else None, 1, C.byref(out)), op)
    return out.value


def f(a, b):
    """The program, as grace_run calls; every intermediate is released, the result handed to the caller."""
    two = t_p()
    check(lib.grace_tensor_scalar(vm, 2.0, 0, C.byref(two)), "scalar")
    t1 = run("mul", [a, two.value]); t2 = run("add", [t1, b]); t3 = run("tanh", [t2]); t4 = run("mul", [t3, a])
    attrs = Attrs(ndims=1)
    attrs.dims[0] = 1
    out = run("sum", [t4], attrs)
    for t in (two.value, t1, t2, t3, t4):
        lib.grace_tensor_release(t)
    return out


@CALL
def host_call(ud, nargs, args, nres, res, maxres):
    try:
        res[0] = Arg(kind=ARG_TENSOR, t=f(args[0].t, args[1].t))
        nres[0] = 1
        return OK
    except RuntimeError:
        return 9                         # GRACE_EHOST: the message stays in the VM


host = Host(call=host_call)
fn = C.c_void_p()
check(lib.grace_fn_new(vm, b"f", C.byref(host), None, None, C.byref(fn)), "grace_fn_new")
bad = 0
for rows, cols in ((4, 8), (3, 5)):
    k = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    a, b = (k % 7) / np.float32(7) - np.float32(0.5), (k % 5) / np.float32(10)
    want = (np.tanh(2 * a + b) * a).sum(axis=1)
    sizes = (C.c_int64 * 2)(rows, cols)
    ta, tb = t_p(), t_p()
    check(lib.grace_tensor_from_data(vm, FLOAT32, 2, sizes, FLOAT32, a.ctypes.data, C.byref(ta)), "from_data")
    check(lib.grace_tensor_from_data(vm, FLOAT32, 2, sizes, FLOAT32, b.ctypes.data, C.byref(tb)), "from_data")
    for call in range(3):                # the first call of a shape traces, the others run the program
        args = (Arg * 2)(Arg(kind=ARG_TENSOR, t=ta.value), Arg(kind=ARG_TENSOR, t=tb.value))
        res, nres = (Arg * 1)(), C.c_int()
        check(lib.grace_fn_call(fn, 2, args, C.byref(nres), res, 1), "grace_fn_call")
        got = np.empty(rows, dtype=np.float32)
        check(lib.grace_tensor_read(vm, res[0].t, FLOAT32, got.ctypes.data), "read")
        lib.grace_tensor_release(res[0].t)
        if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
            bad += 1
            print(f"# shape {rows}x{cols} call {call}: got {got}, want {want}", file=sys.stderr)
    print(f"shape {rows}x{cols}: out[0] = {got[0]:.6f} (NumPy: {want[0]:.6f})")
    lib.grace_tensor_release(ta.value)
    lib.grace_tensor_release(tb.value)
lib.grace_fn_free(fn)
lib.grace_vm_free(vm)
print("host.py:", "FAILED" if bad else "ok")
sys.exit(1 if bad else 0)
