#!/usr/bin/env python3
"""workloads.py: the PyTorch side of grace's benchmark suite (issue 8).

The workloads of bench/workloads/*.lua (mlp, eos, st, gpt2_decode in float32 and bfloat16, cpu_input,
kv_inplace, the control-flow ones of wl_control.py, the training step of wl_train.py) with the
same shapes, dtypes, weights and inputs, timed in three modes: eager, torch.compile (default) and
torch.compile(mode="reduce-overhead"), the same way as bench/workloads/run.lua times grace: latency per
call with torch.cuda.synchronize() after each call (lower median of --iters), throughput without it (total
/ calls, one synchronize at the end), the first two calls (compile for the compiled modes), the device span
of one call (torch.cuda.Event pairs, a separate pass), the peak device memory of each mode, and, after all
the timings (the profiler may slow what runs after it), the CUDA kernels of one call of each mode
(torch.profiler, on a second compile of the mode). With --fresh VARIANTS, the first calls of the compiled modes are also timed
in a fresh process (this script with --first-call-only), with an empty inductor cache (cold:
TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR in a new folder) and again with that folder (warm).

Weights and the pool of 8 inputs are made with NumPy from fixed per-tensor seeds. With --weights DIR they
are written there (one raw little-endian .bin per tensor, listed in DIR/manifest.txt as
"name dtype d1,d2,... file", "scalar" for 0-d) together with PyTorch's eager output for pool input 1 of each
workload ("<workload>.ref.1", the first result, as float32; for the training step the losses of 8 steps from
the initial weights, and "<workload>.grad.<weight>", each parameter's gradient after one forward and backward from
them), so `grace bench/workloads/run.lua --weights DIR` checks grace against PyTorch on the same numbers. Token ids are 0-based on file.

usage: python3 bench/torch/workloads.py [--device cuda|cpu] [--only mlp,eos,...] [--iters N] [--warmup N]
           [--json out.json] [--weights DIR] [--small] [--modes eager,compile,reduce-overhead]
           [--device-time-calls N] [--no-profile] [--fresh gpt2_decode_fp32,...] [--fresh-modes compile,...]
       python3 bench/torch/workloads.py --first-call-only VARIANT --modes MODE [--device ...] [--small]
           (one fresh-process measurement: prints one line "FIRST_CALL_JSON {...}"; inductor's caches are
           wherever TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR point)
       python3 bench/torch/workloads.py --write-only --weights DIR [--small]   (NumPy only: no torch, no
           timing; the references come from NumPy float64 versions of the models; for testing grace's loader
           and checks on a machine without torch)
"""
import argparse
import datetime
import gc
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import zlib

import numpy as np

import wl_control   # the control-flow workloads (branch, early_exit, greedy_loop)
import wl_train     # the training step (train_step_mlp, train_step_gpt)

NPOOL = 8
WORKLOADS = (["mlp", "eos", "st", "gpt2_decode", "cpu_input", "kv_inplace"] + wl_control.WORKLOADS
             + wl_train.WORKLOADS)
VARIANTS = {  # workload -> [(variant name, dtype name)]
    "mlp": [("mlp", "float32")],
    "eos": [("eos", "float32")],
    "st": [("st", "float32")],
    "gpt2_decode": [("gpt2_decode_fp32", "float32"), ("gpt2_decode_bf16", "bfloat16")],
    "cpu_input": [("cpu_input", "float32")],
    "kv_inplace": [("kv_inplace", "float32")],
    **wl_control.VARIANTS,
    **wl_train.VARIANTS,
}
ALL_MODES = ["eager", "compile", "reduce-overhead"]
# same tolerance rule as run.lua: max |got - want| <= tol * max |want|
TOL_VS_EAGER = {"float32": 1e-4, "bfloat16": 4e-2}


# ---------------------------------------------------------------------------------------------------
# sizes (the same as config() in bench/workloads/<name>.lua)

def config(name, small):
    if name in wl_control.WORKLOADS:
        return wl_control.config(name, small)
    if name in wl_train.WORKLOADS:
        return wl_train.config(name, small)
    if name == "mlp":
        return dict(layers=8, d=64, batch=8) if small else dict(layers=8, d=1024, batch=8)
    if name == "eos":
        return dict(n=4096 if small else 1048576)
    if name == "st":
        return (dict(layers=2, d=64, heads=4, ffn=128, seq=16, batch=1) if small
                else dict(layers=6, d=512, heads=8, ffn=2048, seq=64, batch=1))
    if name == "gpt2_decode":
        return (dict(layers=2, d=64, heads=4, vocab=512, cached=16, max_pos=64) if small
                else dict(layers=12, d=768, heads=12, vocab=50257, cached=128, max_pos=1024))
    if name == "cpu_input":
        return config("mlp", small)
    if name == "kv_inplace":
        return (dict(layers=2, d=64, heads=4, vocab=512, cached=16, max_seq=32, max_pos=64) if small
                else dict(layers=12, d=768, heads=12, vocab=50257, cached=128, max_seq=256, max_pos=1024))
    raise ValueError(name)


# ---------------------------------------------------------------------------------------------------
# tensor specs: (name, shape, init) in the order the Lua modules ask for them; init as in run.lua:
# ("normal", std[, mean]), ("uniform", lo, hi), ("randint", lo, hi) (int64, hi exclusive)

def mlp_specs(s, prefix, c):
    """The weights of the mlp model under prefix (mlp, cpu_input)."""
    d = c["d"]
    for i in range(1, c["layers"] + 1):
        s.append((f"{prefix}.fc{i}.weight", (d, d), ("normal", math.sqrt(2 / d))))
        s.append((f"{prefix}.fc{i}.bias", (d,), ("normal", 0.02)))


def gpt2_specs(s, prefix, c):
    """The weights of a GPT-2 under prefix (gpt2_decode, kv_inplace)."""
    d, L = c["d"], c["layers"]

    def ln(p):
        s.append((p + ".weight", (d,), ("normal", 0.1, 1)))
        s.append((p + ".bias", (d,), ("normal", 0.1)))
    s.append((f"{prefix}.wte", (c["vocab"], d), ("normal", 0.02)))
    s.append((f"{prefix}.wpe", (c["max_pos"], d), ("normal", 0.01)))
    for i in range(1, L + 1):
        p = f"{prefix}.h{i}."
        ln(p + "ln1")
        s.append((p + "attn.weight", (3 * d, d), ("normal", 0.02)))
        s.append((p + "attn.bias", (3 * d,), ("normal", 0.02)))
        s.append((p + "proj.weight", (d, d), ("normal", 0.02)))
        s.append((p + "proj.bias", (d,), ("normal", 0.02)))
        ln(p + "ln2")
        s.append((p + "fc.weight", (4 * d, d), ("normal", 0.02)))
        s.append((p + "fc.bias", (4 * d,), ("normal", 0.02)))
        s.append((p + "fcproj.weight", (d, 4 * d), ("normal", 0.02)))
        s.append((p + "fcproj.bias", (d,), ("normal", 0.02)))
    ln(f"{prefix}.ln_f")


def specs(name, c):
    if name in wl_control.WORKLOADS:
        return wl_control.specs(name, c)
    if name in wl_train.WORKLOADS:
        return wl_train.specs(name, c)
    s = []
    if name == "mlp":
        mlp_specs(s, "mlp", c)
        for k in range(1, NPOOL + 1):
            s.append((f"mlp.x.{k}", (c["batch"], c["d"]), ("normal", 1)))
    elif name == "eos":
        for k in range(1, NPOOL + 1):
            s.append((f"eos.T.{k}", (c["n"],), ("uniform", 0, 30)))
            s.append((f"eos.S.{k}", (c["n"],), ("uniform", 30, 40)))
            s.append((f"eos.p.{k}", (c["n"],), ("uniform", 0, 1000)))
    elif name == "st":
        d, f = c["d"], c["ffn"]

        def linear(p, nin, nout):
            s.append((p + ".weight", (nout, nin), ("normal", 1 / math.sqrt(nin))))
            s.append((p + ".bias", (nout,), ("normal", 0.02)))

        def ln(p):
            s.append((p + ".weight", (d,), ("normal", 0.1, 1)))
            s.append((p + ".bias", (d,), ("normal", 0.1)))
        for i in range(1, c["layers"] + 1):
            p = f"st.l{i}."
            ln(p + "ln1"); linear(p + "qkv", d, 3 * d); linear(p + "proj", d, d)
            ln(p + "ln2"); linear(p + "fc1", d, f); linear(p + "fc2", f, d)
        ln("st.ln_f")
        for k in range(1, NPOOL + 1):
            s.append((f"st.x.{k}", (c["batch"], c["seq"], d), ("normal", 1)))
    elif name == "cpu_input":
        mlp_specs(s, "cpuin", c)
        for k in range(1, NPOOL + 1):
            s.append((f"cpuin.x.{k}", (c["batch"], c["d"]), ("normal", 1)))
    elif name == "kv_inplace":
        d, H, L = c["d"], c["heads"], c["layers"]
        gpt2_specs(s, "kv", c)
        for i in range(1, L + 1):
            s.append((f"kv.cache_k.{i}", (1, H, c["max_seq"], d // H), ("normal", 1)))
            s.append((f"kv.cache_v.{i}", (1, H, c["max_seq"], d // H), ("normal", 1)))
        for k in range(1, NPOOL + 1):
            s.append((f"kv.ids.{k}", (1, 1), ("randint", 0, c["vocab"])))
    elif name == "gpt2_decode":
        d, H, L = c["d"], c["heads"], c["layers"]
        gpt2_specs(s, "gpt2", c)
        cache = (L, 1, H, c["cached"], d // H)
        for k in range(1, NPOOL + 1):
            s.append((f"gpt2.ids.{k}", (1, 1), ("randint", 0, c["vocab"])))
            s.append((f"gpt2.past_k.{k}", cache, ("normal", 1)))
            s.append((f"gpt2.past_v.{k}", cache, ("normal", 1)))
    return s


def generate(name, shape, init):
    """One tensor as a NumPy array, from a seed derived from its name (independent of order and subset)."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    kind = init[0]
    if kind == "normal":
        mean = init[2] if len(init) > 2 else 0.0
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(init[1]) + np.float32(mean)
    if kind == "uniform":
        return rng.uniform(init[1], init[2], shape).astype(np.float32)
    if kind == "randint":
        return rng.integers(init[1], init[2], shape, dtype=np.int64)
    raise ValueError(kind)


class WeightDir:
    """DIR/manifest.txt plus one raw .bin per tensor (little-endian, row-major). An existing manifest written
    for the same sizes is merged (its entries kept unless rewritten), so runs with different --only can
    share one folder."""

    def __init__(self, path, small):
        self.path, self.small = path, small
        self.entries = {}   # name -> manifest line, in insertion order
        self.source = None
        os.makedirs(path, exist_ok=True)
        old = os.path.join(path, "manifest.txt")
        if os.path.exists(old):
            with open(old) as f:
                lines = f.read().splitlines()
            if lines and f"small={int(small)}:" in lines[0]:
                for line in lines[1:]:
                    if line.startswith("# reference_source "):
                        self.source = line.split()[2]
                    elif line.strip() and not line.startswith("#"):
                        self.entries[line.split()[0]] = line

    def add(self, name, arr):
        dt = {np.dtype(np.float32): ("float32", "<f4"), np.dtype(np.int64): ("int64", "<i8")}[arr.dtype]
        fname = name + ".bin"
        np.ascontiguousarray(arr, dtype=dt[1]).tofile(os.path.join(self.path, fname))
        shape = ",".join(str(int(x)) for x in arr.shape) if arr.ndim else "scalar"
        self.entries[name] = f"{name} {dt[0]} {shape} {fname}"

    def close(self, source):
        """source: who computed the references (one word, read by run.lua)."""
        if self.source and self.source != source:
            source = f"{source}+{self.source}"   # a merge of two runs says so
        now = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}"
        lines = [f"# written by bench/torch/workloads.py {now} small={int(self.small)}: name dtype shape file",
                 f"# reference_source {source}"] + list(self.entries.values())
        tmp = os.path.join(self.path, "manifest.txt.tmp")
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, os.path.join(self.path, "manifest.txt"))
        return len(self.entries)


# ---------------------------------------------------------------------------------------------------
# NumPy float64 versions of the models, for --write-only: a reference independent of both grace and
# PyTorch (written as "<variant>.ref.1" when torch is not used), so the file path and run.lua's reference
# check can be tested on a machine without torch. A PyTorch run writes PyTorch's outputs instead.

def bf16_round(a):
    """float32 -> nearest bfloat16 (ties to even), kept as float32."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return u.view(np.float32)


def numpy_reference(wname, dtype_name, A, c):
    """The first result for pool input 1, in float64; None for the training step (no NumPy version: its backward
    and AdamW would be a second implementation to trust)."""
    if wname in wl_train.WORKLOADS:
        return None
    if wname in wl_control.WORKLOADS:
        return wl_control.numpy_reference(wname, A, c)
    def W(name):
        a = A[name]
        if a.dtype == np.float32 and dtype_name == "bfloat16":
            a = bf16_round(a)
        return a.astype(np.float64) if a.dtype == np.float32 else a

    erf = np.vectorize(math.erf)

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * W(p + ".weight") + W(p + ".bias")

    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def lin(x, p):
        return x @ W(p + ".weight").T + W(p + ".bias")

    if wname in ("mlp", "cpu_input"):
        pre = "mlp" if wname == "mlp" else "cpuin"
        x = W(f"{pre}.x.1")
        for i in range(1, c["layers"] + 1):
            x = lin(x, f"{pre}.fc{i}")
            x = 0.5 * x * (1 + erf(x / math.sqrt(2)))
        return x
    if wname == "kv_inplace":
        d, H, S, pos = c["d"], c["heads"], c["max_seq"], c["cached"]   # pool input 1: position `cached`
        hd = d // H
        wte = W("kv.wte")
        x = wte[A["kv.ids.1"]] + W("kv.wpe")[pos:pos + 1]                   # [1, 1, d]
        masked = (np.arange(S) > pos).reshape(1, 1, 1, S)
        for i in range(1, c["layers"] + 1):
            p = f"kv.h{i}."
            qkv = lin(ln(x, p + "ln1"), p + "attn")
            q, k, v = (qkv[..., j * d:(j + 1) * d].reshape(1, 1, H, hd).transpose(0, 2, 1, 3) for j in range(3))
            K, V = W(f"kv.cache_k.{i}").copy(), W(f"kv.cache_v.{i}").copy()
            K[:, :, pos:pos + 1] = k
            V[:, :, pos:pos + 1] = v
            att = np.where(masked, -np.inf, q @ K.transpose(0, 1, 3, 2) / math.sqrt(hd))
            o = (softmax(att) @ V).transpose(0, 2, 1, 3).reshape(1, 1, d)
            x = x + lin(o, p + "proj")
            h = lin(ln(x, p + "ln2"), p + "fc")
            h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
            x = x + lin(h, p + "fcproj")
        return ln(x, "kv.ln_f") @ wte.T
    if wname == "eos":
        T, S, p = W("eos.T.1"), W("eos.S.1"), W("eos.p.1")
        rw = (((T * -1.120083e-6 + 1.001685e-4) * T - 9.095290e-3) * T + 6.793952e-2) * T + 999.842594
        A_ = ((T * -8.2467e-7 + 7.6438e-5) * T - 4.0899e-3) * T + 8.24493e-1
        B = (T * -1.6546e-6 + 1.0227e-4) * T - 5.72466e-3
        r0 = rw + S * (A_ + np.sqrt(S) * B + S * 4.8314e-4)
        Kw = ((T * 1.360477e-2 - 2.327105) * T + 148.4206) * T + 19652.21
        K0 = Kw + S * (((T * -6.1670e-5 + 1.09987e-2) * T - 0.603459) * T + 54.6746)
        pb = p * 0.1
        K = K0 + pb * (T * 1.43713e-3 + 3.239908)
        return r0 / (1 - pb / K)
    if wname == "st":
        x, d, H = W("st.x.1"), c["d"], c["heads"]
        hd, (B_, Tn) = d // H, x.shape[:2]
        scale = float(np.float32(1 / math.sqrt(hd)))
        for i in range(1, c["layers"] + 1):
            p = f"st.l{i}."
            qkv = lin(ln(x, p + "ln1"), p + "qkv")
            q, k, v = (qkv[..., j * d:(j + 1) * d].reshape(B_, Tn, H, hd).transpose(0, 2, 1, 3) for j in range(3))
            o = (softmax(q @ k.transpose(0, 1, 3, 2) * scale) @ v).transpose(0, 2, 1, 3).reshape(B_, Tn, d)
            x = x + lin(o, p + "proj")
            x = x + lin(np.maximum(lin(ln(x, p + "ln2"), p + "fc1"), 0), p + "fc2")
        return ln(x, "st.ln_f")
    if wname == "gpt2_decode":
        d, H, pos = c["d"], c["heads"], c["cached"]
        hd = d // H
        ids, pk, pv = A["gpt2.ids.1"], W("gpt2.past_k.1"), W("gpt2.past_v.1")
        wte = W("gpt2.wte")
        x = wte[ids] + W("gpt2.wpe")[pos:pos + 1]                        # [1, 1, d]
        for i in range(1, c["layers"] + 1):
            p = f"gpt2.h{i}."
            qkv = lin(ln(x, p + "ln1"), p + "attn")
            q, k, v = (qkv[..., j * d:(j + 1) * d].reshape(1, 1, H, hd).transpose(0, 2, 1, 3) for j in range(3))
            K = np.concatenate([pk[i - 1], k], axis=2)
            V = np.concatenate([pv[i - 1], v], axis=2)
            o = (softmax(q @ K.transpose(0, 1, 3, 2) / math.sqrt(hd)) @ V).transpose(0, 2, 1, 3).reshape(1, 1, d)
            x = x + lin(o, p + "proj")
            h = lin(ln(x, p + "ln2"), p + "fc")
            h = 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
            x = x + lin(h, p + "fcproj")
        return ln(x, "gpt2.ln_f") @ wte.T
    raise ValueError(wname)


# ---------------------------------------------------------------------------------------------------
# timing helpers (the same statistics as run.lua)

def stats_us(ts):
    ts = sorted(ts)
    n = len(ts)

    def q(p):
        return ts[min(n - 1, math.floor(p * (n - 1)))] * 1e6
    return {"latency_us_median": q(0.5), "latency_us_min": ts[0] * 1e6, "latency_us_p90": q(0.9),
            "latency_us_mean": sum(ts) / n * 1e6}


def fresh_first_call(args, vname, mode, cache_dir, timeout):
    """The first calls of vname in mode, in a new process of this script (--first-call-only) whose inductor and
    Triton caches are in cache_dir: its FIRST_CALL_JSON line as a dict, with process_s (the whole process) or
    error."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir, TRITON_CACHE_DIR=os.path.join(cache_dir, "triton"))
    cmd = [sys.executable, os.path.abspath(__file__), "--first-call-only", vname, "--modes", mode,
           "--device", args.device] + (["--small"] if args.small else [])
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "process_s": time.perf_counter() - t0}
    r = None
    for line in p.stdout.splitlines():
        if line.startswith("FIRST_CALL_JSON "):
            try:
                r = json.loads(line[len("FIRST_CALL_JSON "):])
            except ValueError as e:
                r = {"error": f"unreadable FIRST_CALL_JSON line: {e}"}
    if r is None:
        tail = [ln for ln in (p.stdout + "\n" + p.stderr).splitlines() if ln.strip()]
        r = {"error": f"no FIRST_CALL_JSON line (exit {p.returncode}): {tail[-1] if tail else ''}"}
    elif p.returncode != 0 and "error" not in r:
        r["error"] = ("the first call's results differ from eager's" if r.get("check_ok") is False
                      else f"exit {p.returncode}")
    r["process_s"] = time.perf_counter() - t0
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--only", default=None, help="comma-separated workloads or variants")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--json", default=None)
    ap.add_argument("--weights", default=None, help="write weights, inputs and references to this folder")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--modes", default=",".join(ALL_MODES))
    ap.add_argument("--write-only", action="store_true", help="write --weights (NumPy only) and stop")
    ap.add_argument("--device-time-calls", type=int, default=50,
                    help="calls of the device-span pass (at most --iters; 0: none)")
    ap.add_argument("--no-profile", action="store_true", help="do not count kernels with torch.profiler")
    ap.add_argument("--profile-budget", type=float, default=0,
                    help="seconds for counting kernels after the timings (0: no limit); later modes are skipped")
    ap.add_argument("--fresh", default="", help="variants whose compiled modes' first calls are also timed in a "
                    "fresh process, cold and warm inductor cache (default: none)")
    ap.add_argument("--fresh-modes", default="compile,reduce-overhead")
    ap.add_argument("--fresh-timeout", type=float, default=300, help="seconds per fresh process")
    ap.add_argument("--fresh-budget", type=float, default=0,
                    help="seconds for all fresh processes together (0: no limit); later ones are skipped")
    ap.add_argument("--first-call-only", default=None, metavar="VARIANT",
                    help="(internal) time the first calls of VARIANT in --modes' one mode and print one JSON line")
    args = ap.parse_args()
    modes = args.modes.split(",")
    for m in modes:
        if m not in ALL_MODES:
            ap.error(f"unknown mode {m!r} (expected {', '.join(ALL_MODES)})")
    if args.iters < 1 or args.warmup < 0 or args.device_time_calls < 0:
        ap.error("--iters must be >= 1, --warmup and --device-time-calls >= 0")
    fresh = [v for v in args.fresh.split(",") if v]
    fresh_modes = [m for m in args.fresh_modes.split(",") if m]
    known_variants = {v for w in WORKLOADS for v, _ in VARIANTS[w]}
    for v in fresh + ([args.first_call_only] if args.first_call_only else []):
        if v not in known_variants:
            ap.error(f"no variant named {v!r} (expected {', '.join(sorted(known_variants))})")
    for m in fresh_modes:
        if m not in ALL_MODES:
            ap.error(f"--fresh-modes: unknown mode {m!r}")
    if args.first_call_only:
        if len(modes) != 1:
            ap.error("--first-call-only needs exactly one mode in --modes")
        args.only = args.first_call_only

    only = set(args.only.split(",")) if args.only else None
    known = set(WORKLOADS) | {v for w in WORKLOADS for v, _ in VARIANTS[w]}
    if only is not None and only - known:
        ap.error(f"--only: no workload named {', '.join(sorted(only - known))}")
    plan = [(w, v, dt) for w in WORKLOADS for v, dt in VARIANTS[w] if only is None or w in only or v in only]

    wdir = WeightDir(args.weights, args.small) if args.weights else None
    arrays = {}   # name -> numpy array, shared by the variants of a workload
    for w in dict.fromkeys(w for w, _, _ in plan):
        for name, shape, init in specs(w, config(w, args.small)):
            arrays[name] = generate(name, shape, init)
            if wdir:
                wdir.add(name, arrays[name])
    if args.write_only:
        if not wdir:
            ap.error("--write-only needs --weights DIR")
        for w, v, dt in plan:
            ref = numpy_reference(w, dt, arrays, config(w, args.small))
            if ref is not None:
                wdir.add(f"{v}.ref.1", ref.astype(np.float32))
        n = wdir.close("numpy-float64")
        print(f"wrote {args.weights}: {n} tensors (references from NumPy float64: --write-only)")
        return 0

    import torch
    import torch.nn.functional as F
    from torch import nn

    # Full float32 matmuls (no TF32), as grace computes them.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("workloads.py: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def P(t):
        return nn.Parameter(t, requires_grad=False)

    # ---- the models (the same ops, in the same order, as the Lua modules) ----
    class Mlp(nn.Module):
        def __init__(self, T, c):
            super().__init__()
            self.layers = nn.ModuleList()
            for i in range(1, c["layers"] + 1):
                lin = nn.Linear(c["d"], c["d"], device="meta")
                lin.weight, lin.bias = P(T[f"mlp.fc{i}.weight"]), P(T[f"mlp.fc{i}.bias"])
                self.layers.append(lin)
            self.act = nn.GELU()

        def forward(self, x):
            for lin in self.layers:
                x = self.act(lin(x))
            return x

    def eos(T, S, p):  # the expression text of bench/workloads/eos.lua, unchanged
        rw = (((T * -1.120083e-6 + 1.001685e-4) * T - 9.095290e-3) * T + 6.793952e-2) * T + 999.842594
        A = ((T * -8.2467e-7 + 7.6438e-5) * T - 4.0899e-3) * T + 8.24493e-1
        B = (T * -1.6546e-6 + 1.0227e-4) * T - 5.72466e-3
        sS = S.sqrt()
        r0 = rw + S * (A + sS * B + S * 4.8314e-4)
        Kw = ((T * 1.360477e-2 - 2.327105) * T + 148.4206) * T + 19652.21
        K0 = Kw + S * (((T * -6.1670e-5 + 1.09987e-2) * T - 0.603459) * T + 54.6746)
        pb = p * 0.1
        K = K0 + pb * (T * 1.43713e-3 + 3.239908)
        return r0 / (1 - pb / K)

    class Eos(nn.Module):
        def forward(self, T, S, p):
            return eos(T, S, p)

    def linear(T, name, nin, nout):
        m = nn.Linear(nin, nout, device="meta")
        m.weight, m.bias = P(T[name + ".weight"]), P(T[name + ".bias"])
        return m

    def layer_norm(T, name, d):
        m = nn.LayerNorm(d, eps=1e-5, device="meta")
        m.weight, m.bias = P(T[name + ".weight"]), P(T[name + ".bias"])
        return m

    class StLayer(nn.Module):
        def __init__(self, T, p, c):
            super().__init__()
            d, f = c["d"], c["ffn"]
            self.ln1, self.ln2 = layer_norm(T, p + "ln1", d), layer_norm(T, p + "ln2", d)
            self.qkv, self.proj = linear(T, p + "qkv", d, 3 * d), linear(T, p + "proj", d, d)
            self.fc1, self.fc2 = linear(T, p + "fc1", d, f), linear(T, p + "fc2", f, d)

    class St(nn.Module):
        def __init__(self, T, c):
            super().__init__()
            self.d, self.H = c["d"], c["heads"]
            self.hd = self.d // self.H
            self.layers = nn.ModuleList(StLayer(T, f"st.l{i}.", c) for i in range(1, c["layers"] + 1))
            self.ln_f = layer_norm(T, "st.ln_f", self.d)
            # 0-d float32 tensor on the CPU, not a buffer: .to(device) leaves it there (the PyGraph pattern)
            self.scale = torch.tensor(1 / math.sqrt(self.hd), dtype=torch.float32)

        def forward(self, x):
            B, Tn, d, H, hd = x.shape[0], x.shape[1], self.d, self.H, self.hd
            for L in self.layers:
                q, k, v = L.qkv(L.ln1(x)).split(d, dim=-1)
                q = q.reshape(B, Tn, H, hd).transpose(1, 2)
                k = k.reshape(B, Tn, H, hd).transpose(1, 2)
                v = v.reshape(B, Tn, H, hd).transpose(1, 2)
                att = ((q @ k.transpose(-2, -1)) * self.scale).softmax(-1)
                o = (att @ v).transpose(1, 2).reshape(B, Tn, d)
                x = x + L.proj(o)
                x = x + L.fc2(torch.relu(L.fc1(L.ln2(x))))
            return self.ln_f(x)

    class Gpt2Decode(nn.Module):
        def __init__(self, T, c):
            super().__init__()
            self.d, self.H, self.L = c["d"], c["heads"], c["layers"]
            self.hd = self.d // self.H
            self.pos = c["cached"]          # 0-based position of the new token
            self.scale = 1 / math.sqrt(self.hd)
            self.w = nn.ParameterDict({k.replace("gpt2.", "").replace(".", "_"): P(v)
                                       for k, v in T.items() if k.startswith("gpt2.") and ".ids." not in k
                                       and ".past_" not in k})

        def forward(self, ids, past_k, past_v):
            w, d, H, hd = self.w, self.d, self.H, self.hd
            x = F.embedding(ids, w["wte"]) + w["wpe"][self.pos:self.pos + 1]       # [1, 1, d]
            new_k, new_v = [], []
            for i in range(1, self.L + 1):
                p = f"h{i}_"
                h = F.layer_norm(x, (d,), w[p + "ln1_weight"], w[p + "ln1_bias"], 1e-5)
                q, k, v = F.linear(h, w[p + "attn_weight"], w[p + "attn_bias"]).split(d, dim=-1)
                q = q.reshape(1, 1, H, hd).transpose(1, 2)
                k = k.reshape(1, 1, H, hd).transpose(1, 2)
                v = v.reshape(1, 1, H, hd).transpose(1, 2)
                new_k.append(k)
                new_v.append(v)
                K = torch.cat([past_k[i - 1], k], dim=2)
                V = torch.cat([past_v[i - 1], v], dim=2)
                att = ((q @ K.transpose(-2, -1)) * self.scale).softmax(-1)
                o = (att @ V).transpose(1, 2).reshape(1, 1, d)
                x = x + F.linear(o, w[p + "proj_weight"], w[p + "proj_bias"])
                h = F.layer_norm(x, (d,), w[p + "ln2_weight"], w[p + "ln2_bias"], 1e-5)
                m = F.gelu(F.linear(h, w[p + "fc_weight"], w[p + "fc_bias"]), approximate="tanh")
                x = x + F.linear(m, w[p + "fcproj_weight"], w[p + "fcproj_bias"])
            x = F.layer_norm(x, (d,), w["ln_f_weight"], w["ln_f_bias"], 1e-5)
            return F.linear(x, w["wte"]), torch.stack(new_k), torch.stack(new_v)

    class CpuInput(Mlp):
        """The mlp model fed a host tensor every call, moved to the device inside forward (PyGraph's case)."""
        def forward(self, x):
            return super().forward(x.to(dev))

    class KvInplace(nn.Module):
        """A GPT-2 decode step with a static cache written in place at a 0-d position (gpt-fast's recipe)."""
        def __init__(self, T, c):
            super().__init__()
            self.d, self.H, self.L, self.S = c["d"], c["heads"], c["layers"], c["max_seq"]
            self.hd = self.d // self.H
            self.scale = 1 / math.sqrt(self.hd)
            self.w = nn.ParameterDict({k.replace("kv.", "").replace(".", "_"): P(v) for k, v in T.items()
                                       if k.startswith("kv.") and ".ids." not in k and ".cache_" not in k})
            for i in range(1, self.L + 1):
                self.register_buffer(f"ck{i}", T[f"kv.cache_k.{i}"].clone())
                self.register_buffer(f"cv{i}", T[f"kv.cache_v.{i}"].clone())
            self.register_buffer("slots", torch.arange(self.S, device=dev))

        def forward(self, ids, pos):
            w, d, H, hd = self.w, self.d, self.H, self.hd
            at = pos.reshape(1)
            x = F.embedding(ids, w["wte"]) + w["wpe"].index_select(0, at)       # [1, 1, d]
            masked = (self.slots > pos).reshape(1, 1, 1, self.S)
            for i in range(1, self.L + 1):
                p = f"h{i}_"
                h = F.layer_norm(x, (d,), w[p + "ln1_weight"], w[p + "ln1_bias"], 1e-5)
                q, k, v = F.linear(h, w[p + "attn_weight"], w[p + "attn_bias"]).split(d, dim=-1)
                q = q.reshape(1, 1, H, hd).transpose(1, 2)
                K, V = getattr(self, f"ck{i}"), getattr(self, f"cv{i}")
                K.index_copy_(2, at, k.reshape(1, 1, H, hd).transpose(1, 2))
                V.index_copy_(2, at, v.reshape(1, 1, H, hd).transpose(1, 2))
                att = ((q @ K.transpose(-2, -1)) * self.scale).masked_fill(masked, float("-inf")).softmax(-1)
                o = (att @ V).transpose(1, 2).reshape(1, 1, d)
                x = x + F.linear(o, w[p + "proj_weight"], w[p + "proj_bias"])
                h = F.layer_norm(x, (d,), w[p + "ln2_weight"], w[p + "ln2_bias"], 1e-5)
                m = F.gelu(F.linear(h, w[p + "fc_weight"], w[p + "fc_bias"]), approximate="tanh")
                x = x + F.linear(m, w[p + "fcproj_weight"], w[p + "fcproj_bias"])
            x = F.layer_norm(x, (d,), w["ln_f_weight"], w["ln_f_bias"], 1e-5)
            return F.linear(x, w["wte"])

    def build(wname, dtype_name, c, vname):
        dt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]

        def tensor(name):
            t = torch.from_numpy(arrays[name]).to(dev)
            return t.to(dt) if t.is_floating_point() else t
        names = [n for n, _, _ in specs(wname, c)]
        T = {n: tensor(n) for n in names}
        if wname in wl_control.WORKLOADS:
            return wl_control.build(wname, vname, T, c, torch, nn, F, P)
        if wname in wl_train.WORKLOADS:
            return wl_train.build(wname, vname, T, c, torch, nn, F)
        if wname == "mlp":
            return (Mlp(T, c), [(T[f"mlp.x.{k}"],) for k in range(1, NPOOL + 1)],
                    f"{c['layers']} x (Linear {c['d']}->{c['d']} + GELU), batch {c['batch']}")
        if wname == "eos":
            return (Eos(), [(T[f"eos.T.{k}"], T[f"eos.S.{k}"], T[f"eos.p.{k}"]) for k in range(1, NPOOL + 1)],
                    f"equation of state, 47 pointwise ops over 3 x {c['n']} elements")
        if wname == "st":
            return (St(T, c), [(T[f"st.x.{k}"],) for k in range(1, NPOOL + 1)],
                    f"{c['layers']} pre-norm encoder layers, d {c['d']}, {c['heads']} heads, FFN {c['ffn']}, "
                    f"batch {c['batch']}, seq {c['seq']}, scale a 0-d CPU tensor")
        if wname == "cpu_input":
            Tm = {k.replace("cpuin.", "mlp."): v for k, v in T.items()}
            return (CpuInput(Tm, c), [(T[f"cpuin.x.{k}"].cpu(),) for k in range(1, NPOOL + 1)],
                    f"{c['layers']} x (Linear {c['d']}->{c['d']} + GELU), batch {c['batch']}, "
                    f"the input a host tensor moved inside forward")
        if wname == "kv_inplace":
            pool = [(T[f"kv.ids.{k}"], torch.tensor(c["cached"] + k - 1, device=dev)) for k in range(1, NPOOL + 1)]
            return (KvInplace(T, c), pool,
                    f"GPT-2 decode step, {c['layers']} layers, d {c['d']}, {c['heads']} heads, vocab {c['vocab']}, "
                    f"static cache of {c['max_seq']} written in place at a 0-d position, {dtype_name}")
        if wname == "gpt2_decode":
            pool = [(T[f"gpt2.ids.{k}"], T[f"gpt2.past_k.{k}"], T[f"gpt2.past_v.{k}"]) for k in range(1, NPOOL + 1)]
            return (Gpt2Decode(T, c), pool,
                    f"GPT-2 decode step, {c['layers']} layers, d {c['d']}, {c['heads']} heads, vocab {c['vocab']}, "
                    f"{c['cached']} cached tokens, {dtype_name}")
        raise ValueError(wname)

    def results(out):
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def compile_mode(model, mode):
        """model for a mode: itself (eager), or torch.compile of it (mode= for reduce-overhead); a training step
        (wl_train) compiles its step function on a fresh model and optimizer (its .compiled)."""
        if mode == "eager":
            return model
        if hasattr(model, "compiled"):
            return model.compiled(mode)
        return torch.compile(model, **({} if mode == "compile" else {"mode": mode}))

    # A workload with state (.reset: a training step, which changes its weights) is checked from its initial
    # state: reset before each mode's first calls; what is compared across modes and written for grace is the
    # first result of NPOOL calls from that state, one per pool input, stacked (run.lua does the same).
    def reset(f):
        if hasattr(f, "reset"):
            f.reset()

    def trajectory(f, pool):
        f.reset()
        return torch.stack([results(f(*a))[0].clone().reshape(()) for a in pool])

    def dynamo_counters():
        """Graphs dynamo compiled, graph breaks and CUDA graph captures inductor skipped, so far (counters of
        torch._dynamo.utils; absent ones count 0)."""
        from torch._dynamo.utils import counters
        return {"graphs_compiled": counters["stats"].get("unique_graphs", 0),
                "graph_breaks": sum(counters["graph_break"].values()),
                "cudagraph_skips": counters["inductor"].get("cudagraph_skips", 0)}

    def first_calls(f, pool):
        """The first two calls, each synchronized, in ms; results cloned (CUDA Graph outputs are reused)."""
        t0 = time.perf_counter()
        r1 = results(f(*pool[0]))
        sync()
        t1 = time.perf_counter()
        r1 = [r.clone() for r in r1]
        t1b = time.perf_counter()
        r2 = results(f(*pool[1]))
        sync()
        t2 = time.perf_counter()
        r2 = [r.clone() for r in r2]
        return (t1 - t0) * 1e3, (t2 - t1b) * 1e3, r1, r2

    def measure(f, pool):
        n = len(pool)
        for k in range(args.warmup):
            f(*pool[k % n])
        sync()
        gc.collect()
        ts = []
        for k in range(args.iters):
            t0 = time.perf_counter()
            f(*pool[k % n])
            sync()
            ts.append(time.perf_counter() - t0)
        gc.collect()
        sync()
        t0 = time.perf_counter()
        for k in range(args.iters):
            f(*pool[k % n])
        sync()
        r = stats_us(ts)
        r["throughput_us_per_call"] = (time.perf_counter() - t0) / args.iters * 1e6
        r["calls_timed"] = args.iters
        return r

    def compare(what, got, want, tol):
        r = {"what": what, "tolerance_rel_to_max": tol}
        if tuple(got.shape) != tuple(want.shape):
            r.update(ok=False, error=f"shape {list(got.shape)} vs {list(want.shape)}")
            return r
        g, w = got.float().cpu(), want.float().cpu()
        r["max_abs_diff"] = (g - w).abs().max().item()
        r["max_abs_ref"] = w.abs().max().item()
        r["ok"] = bool(r["max_abs_diff"] <= tol * max(r["max_abs_ref"], 1e-30))   # False for NaN
        return r

    def measure_device(f, pool):
        """The device span of one call over a separate pass of min(--device-time-calls, --iters) calls, each after
        a synchronize, as run.lua measures grace with grace.device_time: on CUDA two torch.cuda.Events on the
        current stream, recorded just before the call and after it returns (gaps where the GPU waits for the
        host count: for a host-bound mode it nears the latency); on the CPU the wall time."""
        n = min(args.device_time_calls, args.iters)
        if n < 1:
            return {}
        ts = []
        for k in range(n):
            sync()
            inp = pool[k % len(pool)]
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                f(*inp)
                b.record()
                b.synchronize()
                ts.append(a.elapsed_time(b) * 1e-3)
            else:
                t0 = time.perf_counter()
                f(*inp)
                ts.append(time.perf_counter() - t0)
        sync()
        st = stats_us(ts)
        return {"device_span_us_median": st["latency_us_median"], "device_span_us_min": st["latency_us_min"],
                "device_span_us_p90": st["latency_us_p90"], "device_span_calls": n,
                "device_span_clock": "cuda events" if cuda else "host wall clock"}

    def count_kernels(f, pool):
        """The CUDA kernels of one call and the sum of their durations, from torch.profiler (kernels replayed
        inside CUDA graphs included), and the CUDA graph launches of the call (cudaGraphLaunch runtime calls).
        Copies and memsets are not kernels."""
        from torch.profiler import ProfilerActivity, profile
        sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            f(*pool[0])
            sync()
        dev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        kernels = [e for e in dev if not e.name.startswith(("Memcpy", "Memset", "Activity Buffer"))]
        if not kernels:   # a profiler that saw nothing is not a count of zero
            return {"kernels_note": "torch.profiler saw no CUDA kernel"}
        return {"kernels_per_call": len(kernels),
                "profiled_kernel_us_sum": sum(e.time_range.elapsed_us() for e in kernels),
                "profiled_copies_per_call": len(dev) - len(kernels),
                "graph_launches_per_call": sum(1 for e in prof.events() if e.name.startswith("cudaGraphLaunch"))}

    def kernels_phase():
        """Kernels per call for every mode that ran, after all the timings: torch.profiler can leave CUPTI attached
        once it stops (PyTorch issue 144455: calls 10-20% slower afterwards), which would slow every call timed
        after it. Each mode is compiled again (inductor's caches are warm by now) and called three times (compile,
        warm-up, CUDA graph recording for reduce-overhead) before the profiled call. The modes run in order over
        all workloads (eager first: the profiler has started once before this phase records a graph, which it
        must have to see the graph's kernels, PyTorch issue 100441), within --profile-budget."""
        note = None if cuda and not args.no_profile else ("--no-profile" if cuda else "no CUDA device")
        t0 = time.perf_counter()
        built = {}
        for mode in modes:
            for wname, vname, dtype_name in plan:
                m = result["workloads"][vname]["modes"].get(mode)
                if m is None or "error" in m:
                    continue
                if note:
                    m["kernels_note"] = note
                    continue
                if args.profile_budget > 0 and time.perf_counter() - t0 > args.profile_budget:
                    m["kernels_note"] = f"skipped: over --profile-budget {args.profile_budget:.0f} s"
                    continue
                f = None
                try:
                    if vname not in built:
                        built[vname] = build(wname, dtype_name, config(wname, args.small), vname)[:2]
                    model, pool = built[vname]
                    torch._dynamo.reset()
                    f = compile_mode(model, mode)
                    for k in range(3):
                        f(*pool[k % len(pool)])
                    m.update(count_kernels(f, pool))
                except Exception as e:   # optional: the rest of the run goes on
                    m["kernels_note"] = f"counting failed: {type(e).__name__}: {e}".split("\n")[0]
                f = None
        built.clear()
        torch._dynamo.reset()
        gc.collect()
        if cuda and not note:
            print(f"kernels per call counted with torch.profiler in {time.perf_counter() - t0:.1f} s")

    if args.first_call_only:   # one fresh-process measurement (see fresh_first_call)
        wname, vname, dtype_name = plan[0]
        mode = modes[0]
        r = {"variant": vname, "mode": mode, "device": args.device, "torch_version": torch.__version__}
        try:
            with torch.no_grad():
                t0 = time.perf_counter()
                model, pool, _ = build(wname, dtype_name, config(wname, args.small), vname)
                sync()
                r["setup_s"] = time.perf_counter() - t0
                f = compile_mode(model, mode)
                ms, got = [], None
                for k in range(3):
                    t1 = time.perf_counter()
                    out = results(f(*pool[k]))
                    sync()
                    ms.append((time.perf_counter() - t1) * 1e3)
                    if got is None:
                        got = [o.clone() for o in out]   # CUDA Graph outputs are overwritten by the next replay
                r["first_call_ms"], r["second_call_ms"], r["third_call_ms"] = ms
                reset(model)   # a training step's first call started from the initial state: so does eager's
                want = results(model(*pool[0]))
                checks = [compare("first call vs eager", g_, w_, TOL_VS_EAGER[dtype_name]) for g_, w_ in zip(got, want)]
                r["check_ok"] = len(got) == len(want) and all(c["ok"] for c in checks)
                r["check_worst_rel"] = max((c.get("max_abs_diff", 0) / max(c.get("max_abs_ref", 0), 1e-30)
                                            for c in checks), default=0.0)
        except Exception as e:
            traceback.print_exc()
            r["error"] = f"{type(e).__name__}: {e}".split("\n")[0]
        print("FIRST_CALL_JSON " + json.dumps(r, sort_keys=True), flush=True)
        return 0 if "error" not in r and r.get("check_ok") else 1

    result = {
        "system": "pytorch",
        "torch_version": torch.__version__,
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if cuda else "cpu",
        "date_utc": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}",
        "small": args.small,
        "iters": args.iters,
        "warmup_calls": args.warmup,
        "pool_size": NPOOL,
        "weights_dir": args.weights,
        "float32_matmul": "highest (no TF32)",
        "method": "latency_us_*: wall time of one call followed by torch.cuda.synchronize(), over --iters calls "
                  "(lower median, min, p90, mean); throughput_us_per_call: wall time of --iters calls with one "
                  "synchronize at the end, divided by --iters; first_call_ms / second_call_ms: the first two "
                  "calls of a fresh function (compiled modes: compile + run), each synchronized. Each call takes "
                  "the next input of a pool of pool_size pre-made inputs; run under torch.no_grad() (a training "
                  "step turns grad mode on for itself, outside its compiled function). A training step (state: its "
                  "weights) is "
                  "checked from its initial state on the losses of pool_size steps. graphs_compiled, graph_breaks, "
                  "cudagraph_skips: torch._dynamo.utils.counters over a compiled mode's calls; "
                  "graph_launches_per_call: cudaGraphLaunch calls of one call under torch.profiler. "
                  "device_span_us_*: a separate pass of device_span_calls calls, each after a synchronize, timed "
                  "with two torch.cuda.Events on the current stream just before the call and after it returns "
                  "(gaps where the GPU waits for the host count), on the CPU the wall time. kernels_per_call: "
                  "CUDA kernel events of one call under torch.profiler (graph replays included; copies and "
                  "memsets not), profiled_kernel_us_sum their durations; counted after all timings on the mode "
                  "compiled again and called three times first (kernels_note: why not counted). peak_allocated_bytes: "
                  "torch.cuda.max_memory_allocated() from the mode's start (reset_peak_memory_stats there, with "
                  "baseline_allocated_bytes already in use) to the end of its timed calls. fresh_process: the first "
                  "three calls of a compiled mode in a new process (--first-call-only), with TORCHINDUCTOR_CACHE_DIR "
                  "and TRITON_CACHE_DIR in an empty folder (cold), then the same folder again (warm); process_s: the "
                  "whole child process (Python start, import torch, weights).",
        "device_time_calls": min(args.device_time_calls, args.iters),
        "workloads": {},
    }
    def write_json(quiet=False):
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=2, sort_keys=True)
                f.write("\n")
            if not quiet:
                print(f"wrote {args.json}")

    def save_weights():
        return wdir.close(f"pytorch-{torch.__version__}-eager-{result['device_name'].replace(' ', '_')}")

    print(f"PyTorch {torch.__version__}, device {result['device_name']}{' (--small sizes)' if args.small else ''}, "
          f"{args.iters} timed calls (+{args.warmup} warm-up) per mode, inputs from a pool of {NPOOL}")
    with torch.no_grad():
        w = torch.ones(64, 64, device=dev)
        (w @ w + 1).sum().item()
        sync()
        failed = False
        for wname, vname, dtype_name in plan:
            c = config(wname, args.small)
            torch._dynamo.reset()
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            entry = {"description": "", "dtype": dtype_name, "checks": [], "modes": {}}
            result["workloads"][vname] = entry
            errors = []
            try:
                model, pool, desc = build(wname, dtype_name, c, vname)
                entry["description"] = desc
                e1, e2, want1, want2 = first_calls(model, pool)
                stateful = hasattr(model, "reset")
                want_ref = trajectory(model, pool) if stateful else want1[0]
            except Exception as e:   # recorded; the other workloads still run
                traceback.print_exc()
                entry["error"] = f"{type(e).__name__}: {e}".split("\n")[0]
                errors.append("raised: " + entry["error"])
                modes_here = []
            else:
                modes_here = modes
                if wdir:
                    wdir.add(f"{vname}.ref.1", want_ref.float().cpu().numpy())
                    if hasattr(model, "grads"):   # a training step: each parameter's gradient, for run.lua to check
                        for n, gr in model.grads(*pool[0]):
                            wdir.add(f"{vname}.grad.{n}", gr.float().cpu().numpy())
                        model.reset()
            cum_peak = 0
            for mode in modes_here:
                m = {}
                if mode != "eager":
                    torch._dynamo.reset()   # the previous compiled mode's code and CUDA graphs go
                gc.collect()
                sync()
                if cuda:
                    # the mode's peak: from what is allocated now (weights, inputs, eager results) to its end
                    cum_peak = max(cum_peak, torch.cuda.max_memory_allocated())
                    torch.cuda.reset_peak_memory_stats()
                    baseline = torch.cuda.memory_allocated()
                try:
                    if mode == "eager":
                        f = model
                        m["first_call_ms"], m["second_call_ms"] = e1, e2
                    else:
                        c0 = dynamo_counters()
                        f = compile_mode(model, mode)
                        reset(f)
                        m["first_call_ms"], m["second_call_ms"], got1, got2 = first_calls(f, pool)
                        for i in range(max(len(want1), len(got1))):
                            for inp, got, want in ((1, got1, want1), (2, got2, want2)):
                                entry["checks"].append(compare(f"{mode} vs eager, result {i + 1} (input {inp})",
                                                               got[i], want[i], TOL_VS_EAGER[dtype_name]))
                        if stateful:
                            entry["checks"].append(compare(f"{mode} vs eager (results of {len(pool)} steps)",
                                                           trajectory(f, pool), want_ref, TOL_VS_EAGER[dtype_name]))
                    m.update(measure(f, pool))
                    m.update(measure_device(f, pool))
                    if mode != "eager":   # over the mode's first calls, checks and timed calls
                        m.update({k: v - c0[k] for k, v in dynamo_counters().items()})
                    if cuda:
                        m["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
                        m["baseline_allocated_bytes"] = baseline
                except Exception as e:
                    traceback.print_exc()
                    m = {"error": f"{type(e).__name__}: {e}".split("\n")[0]}
                    errors.append(f"{mode} raised: {m['error']}")
                entry["modes"][mode] = m
                f = None
            bad = errors + [f"{ch['what']}: {ch.get('error') or ch}" for ch in entry["checks"] if not ch["ok"]]
            entry["checks_ok"] = not bad
            failed = failed or bool(bad)
            if cuda:   # the highest of the whole variant (eager reference calls and every mode)
                entry["device_peak_allocated_bytes"] = max(cum_peak, torch.cuda.max_memory_allocated())
            print(f"\n{vname}: {entry['description']}" + (f"\n  ERROR {entry['error']}" if "error" in entry else ""))
            print(f"  {'mode':<16} {'latency us':>11} {'lat min us':>11} {'throughput us':>13} {'first call ms':>13} "
                  f"{'2nd call ms':>11} {'dev span us':>11} {'peak MB':>8}")

            def opt_num(v, f):
                return "-" if v is None else format(v, f)
            for mode, m in entry["modes"].items():
                if "error" in m:
                    print(f"  {mode:<16} ERROR {m['error']}")
                    continue
                peak = m.get("peak_allocated_bytes")
                print(f"  {mode:<16} {m['latency_us_median']:11.1f} {m['latency_us_min']:11.1f} "
                      f"{m['throughput_us_per_call']:13.1f} {m['first_call_ms']:13.2f} {m['second_call_ms']:11.2f} "
                      f"{opt_num(m.get('device_span_us_median'), '.1f'):>11} {opt_num(peak and peak / 1e6, '.1f'):>8}")
            print(f"  checks: {len(entry['checks'])}, " + ("all ok" if not bad else f"{len(bad)} FAILED"))
            for b in bad:
                print(f"    FAILED {b}")
            model = pool = want1 = want2 = got1 = got2 = None
            gc.collect()
            # after every variant: grace reads the weights and the report the JSON even if a later variant (a slow
            # compile) runs into the caller's timeout, or the phases after this loop are cut short
            if wdir:
                save_weights()
            write_json(quiet=True)

    if wdir:
        print(f"\nwrote {args.weights}: {save_weights()} tensors (weights, inputs, references)")
    write_json()
    with torch.no_grad():
        kernels_phase()
    kernels_counted = [f"{v} {m}: {e['modes'][m]['kernels_per_call']}" for v, e in result["workloads"].items()
                       for m in e["modes"] if e["modes"][m].get("kernels_per_call") is not None]
    if kernels_counted:
        print("kernels per call: " + ", ".join(kernels_counted))
    if fresh:
        write_json()
        fresh_t0 = time.perf_counter()
        print("\nfirst call in a fresh process (ms; compile + run; cold: empty TORCHINDUCTOR_CACHE_DIR and "
              "TRITON_CACHE_DIR, warm: the same folder again)")
        print(f"{'workload':<18} {'mode':<16} {'cold ms':>10} {'warm ms':>10} {'warm 2nd':>9} {'warm 3rd':>9} "
              f"{'cold s':>7} {'warm s':>7}")
    for vname in fresh:
        entry = result["workloads"].get(vname)
        if entry is None or "error" in entry:
            print(f"{vname}: not run here (--only) or raised: no fresh-process measurement")
            continue
        entry["fresh_process"] = {}
        for mode in fresh_modes:
            d = tempfile.mkdtemp(prefix="torch-firstcall.")
            fr = {}
            try:
                for t in ("cold", "warm"):
                    left = args.fresh_budget - (time.perf_counter() - fresh_t0) if args.fresh_budget > 0 else math.inf
                    if left < 1:
                        fr[t] = {"skipped": f"over --fresh-budget {args.fresh_budget:.0f} s"}
                    elif t == "warm" and "error" in fr["cold"]:
                        fr[t] = {"skipped": "the cold run failed (the cache may be incomplete)"}
                    else:
                        fr[t] = fresh_first_call(args, vname, mode, d, min(args.fresh_timeout, left))
            finally:
                shutil.rmtree(d, ignore_errors=True)
            entry["fresh_process"][mode] = fr
            c, w = fr["cold"], fr["warm"]

            def g(r, k, f):
                return "-" if r.get(k) is None else format(r[k], f)
            print(f"{vname:<18} {mode:<16} {g(c, 'first_call_ms', '.1f'):>10} {g(w, 'first_call_ms', '.1f'):>10} "
                  f"{g(w, 'second_call_ms', '.1f'):>9} {g(w, 'third_call_ms', '.1f'):>9} {g(c, 'process_s', '.1f'):>7} "
                  f"{g(w, 'process_s', '.1f'):>7}")
            for t, r in fr.items():
                if "error" in r:
                    print(f"    FAILED {t}: {r['error']}")
                    failed = True
                elif "skipped" in r:
                    print(f"    skipped {t}: {r['skipped']}")

    write_json()
    if failed:
        print("workloads.py: correctness checks FAILED or a workload raised an error (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
