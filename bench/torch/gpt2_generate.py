#!/usr/bin/env python3
"""gpt2_generate.py: benchmark "gpt2_generate", the PyTorch side (bench/workloads/gpt2_generate.lua is grace's).

GPT-2 small with the weights of workloads.py's gpt2_decode (the same NumPy arrays from the same seeds) generates
256 tokens after a 16-token prompt, greedy, for batch 1 and 8, float32 and bfloat16, written as PyTorch users
write it (gpt-fast's recipe): a static KV cache (buffers [B, heads, prompt + new, head_dim] written at input_pos
by index assignment, attention over the whole cache with the causal mask's rows for input_pos), a prefill call
for the prompt and a decode call per token, the position a device tensor advanced in place. Two modes:
  eager            the loop as written, no compilation;
  reduce-overhead  prefill under torch.compile(fullgraph=True), decode under torch.compile(mode="reduce-overhead",
                   fullgraph=True) (CUDA graph trees), decode attention in the math SDPA backend, as gpt-fast.
Per configuration and mode: the first run (compile included), then --reps timed runs: time to first token (the
prefill call, synchronized), tokens per second (all rows' new tokens over the whole run) and for decoding alone;
medians. Also the graphs compiled by TorchDynamo (counters["stats"]["unique_graphs"]) and the CUDA graphs captured
(counted by wrapping torch.cuda.CUDAGraph.capture_begin) after the first 3 tokens of the first run, through the
timed runs.

With --weights DIR it writes the model's weights (the names of gpt2_decode, merged into a folder that
workloads.py may share), the prompts (gpt2_generate.prompt.bB.pP, 0-based ids) and eager's greedy tokens
(gpt2_generate.tokens.DTYPE.bB.pP.nN) for grace's side to load and compare (grace bench/workloads/gpt2_generate.lua
--weights DIR). With --compare grace.json (what gpt2_generate.lua --json wrote) it prints both side by side.

usage: python3 bench/torch/gpt2_generate.py [--device cuda|cpu] [--small] [--batch 1,8] [--dtype float32,bfloat16]
           [--modes eager,reduce-overhead] [--prompt 16] [--new 256] [--reps 3] [--weights DIR] [--json out.json]
           [--compare grace.json]
       python3 bench/torch/gpt2_generate.py --from-json torch.json --compare grace.json   (the table only)
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time
import traceback
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads as W  # noqa: E402  (the gpt2_decode weights: config, specs, generate, WeightDir)

ALL_MODES = ["eager", "reduce-overhead"]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true", help="gpt2_decode's tiny config, 8-token prompt, 16 new tokens")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--dtype", default="float32,bfloat16")
    ap.add_argument("--modes", default=",".join(ALL_MODES))
    ap.add_argument("--prompt", type=int, default=None)
    ap.add_argument("--new", type=int, default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--weights", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--compare", default=None, help="grace's JSON (gpt2_generate.lua --json) to print beside")
    ap.add_argument("--from-json", default=None, help="with --compare: PyTorch's JSON of an earlier run (no run now)")
    args = ap.parse_args()
    if args.from_json and not args.compare:
        ap.error("--from-json goes with --compare")
    args.prompt = args.prompt or (8 if args.small else 16)
    args.new = args.new or (16 if args.small else 256)
    args.modes = args.modes.split(",")
    for m in args.modes:
        if m not in ALL_MODES:
            ap.error(f"unknown mode {m!r} (expected {', '.join(ALL_MODES)})")
    args.batches = [int(b) for b in args.batch.split(",")]
    args.dtypes = args.dtype.split(",")
    for d in args.dtypes:
        if d not in ("float32", "bfloat16"):
            ap.error(f"unknown dtype {d!r} (expected float32, bfloat16)")
    args.config = W.config("gpt2_decode", args.small)
    if args.prompt + args.new > args.config["max_pos"]:
        ap.error(f"prompt {args.prompt} + new {args.new} exceed max_pos {args.config['max_pos']}")
    return args


def torch_parts(device):
    """torch, imported here (the --from-json path needs none), and the model and steps of gpt-fast's loop."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    def param(t):
        return nn.Parameter(t, requires_grad=False)

    class Block(nn.Module):
        def __init__(self, A, i, d):
            super().__init__()
            p = f"gpt2.h{i}."

            def lin(name, nin, nout):
                m = nn.Linear(nin, nout, device="meta")
                m.weight, m.bias = param(A[p + name + ".weight"]), param(A[p + name + ".bias"])
                return m

            def ln(name):
                m = nn.LayerNorm(d, eps=1e-5, device="meta")
                m.weight, m.bias = param(A[p + name + ".weight"]), param(A[p + name + ".bias"])
                return m
            self.ln1, self.ln2 = ln("ln1"), ln("ln2")
            self.attn, self.proj = lin("attn", d, 3 * d), lin("proj", d, d)
            self.fc, self.fcproj = lin("fc", d, 4 * d), lin("fcproj", 4 * d, d)

    class Gpt2(nn.Module):
        """GPT-2 (workloads.py's Gpt2Decode) in gpt-fast's shape: a static KV cache per block, written at input_pos."""

        def __init__(self, A, c):
            super().__init__()
            self.d, self.H, self.L = c["d"], c["heads"], c["layers"]
            self.hd = self.d // self.H
            self.wte, self.wpe = param(A["gpt2.wte"]), param(A["gpt2.wpe"])
            self.blocks = nn.ModuleList(Block(A, i, self.d) for i in range(1, self.L + 1))
            self.ln_f = nn.LayerNorm(self.d, eps=1e-5, device="meta")
            self.ln_f.weight, self.ln_f.bias = param(A["gpt2.ln_f.weight"]), param(A["gpt2.ln_f.bias"])

        def setup_caches(self, B, S):
            w = self.wte
            for b in self.blocks:
                b.register_buffer("k_cache", torch.zeros(B, self.H, S, self.hd, dtype=w.dtype, device=w.device))
                b.register_buffer("v_cache", torch.zeros(B, self.H, S, self.hd, dtype=w.dtype, device=w.device))
            self.register_buffer("causal_mask", torch.tril(torch.ones(S, S, dtype=torch.bool, device=w.device)))

        def forward(self, idx, input_pos):   # idx [B, T] (0-based ids), input_pos [T] (0-based positions)
            B, T = idx.shape
            d, H, hd = self.d, self.H, self.hd
            mask = self.causal_mask[None, None, input_pos]
            x = F.embedding(idx, self.wte) + self.wpe[input_pos]
            for b in self.blocks:
                q, k, v = b.attn(b.ln1(x)).split(d, dim=-1)
                q = q.view(B, T, H, hd).transpose(1, 2)
                k = k.view(B, T, H, hd).transpose(1, 2)
                v = v.view(B, T, H, hd).transpose(1, 2)
                b.k_cache[:, :, input_pos] = k
                b.v_cache[:, :, input_pos] = v
                y = F.scaled_dot_product_attention(q, b.k_cache, b.v_cache, attn_mask=mask)
                x = x + b.proj(y.transpose(1, 2).contiguous().view(B, T, d))
                x = x + b.fcproj(F.gelu(b.fc(b.ln2(x)), approximate="tanh"))
            return F.linear(self.ln_f(x), self.wte)

    def prefill(model, x, input_pos):
        return model(x, input_pos)[:, -1].argmax(-1, keepdim=True)

    def decode_one_token(model, x, input_pos):
        return model(x, input_pos)[:, -1].argmax(-1, keepdim=True)

    def math_sdpa():
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            return sdpa_kernel([SDPBackend.MATH])
        except ImportError:
            return torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True)

    dev = torch.device(device)
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()
    return types.SimpleNamespace(torch=torch, Gpt2=Gpt2, prefill=prefill, decode_one_token=decode_one_token,
                                 math_sdpa=math_sdpa, dev=dev, cuda=cuda, sync=sync)


def count_captures(torch):
    """A list whose [0] counts CUDA graph captures (wrapping CUDAGraph.capture_begin, where CUDA graph trees begin
    each one), or None when torch's layout is not the expected one."""
    captures = [0]
    try:
        G = torch.cuda.graphs.CUDAGraph
        orig_begin = G.capture_begin

        def capture_begin(self, *a, **k):
            captures[0] += 1
            return orig_begin(self, *a, **k)
        G.capture_begin = capture_begin
    except Exception:
        return None
    return captures


def compiled_graphs():
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


def generate(P, model, prompt, n, prefill_fn, decode_fn, math_decode, on_token=None):
    """gpt-fast's generate, greedy: the tokens [B, T + n] and (time to first token, total) in seconds."""
    torch = P.torch
    T = prompt.shape[1]
    t0 = time.perf_counter()
    input_pos = torch.arange(0, T, device=prompt.device)
    nxt = prefill_fn(model, prompt, input_pos).clone()
    P.sync()
    ttft = time.perf_counter() - t0
    tokens = [nxt]
    if on_token:
        on_token(1)
    input_pos = torch.tensor([T], device=prompt.device, dtype=torch.int64)
    for i in range(2, n + 1):
        if math_decode:
            with P.math_sdpa():
                nxt = decode_fn(model, nxt, input_pos).clone()   # a CUDA graph's output is its next replay's
        else:
            nxt = decode_fn(model, nxt, input_pos).clone()
        input_pos += 1
        tokens.append(nxt)
        if on_token:
            on_token(i)
    out = torch.cat([prompt] + tokens, dim=1)
    P.sync()
    return out, ttft, time.perf_counter() - t0


def run_mode(P, args, A, prompt, mode, captures):
    """One configuration in one mode: the first run, then args.reps timed runs. Returns (record, tokens)."""
    torch = P.torch
    B, new = prompt.shape[0], args.new
    r = {"batch": B, "mode": mode, "prompt": args.prompt, "new_tokens": new}
    torch._dynamo.reset()
    model = P.Gpt2(A, args.config)
    model.setup_caches(B, args.prompt + new)
    if mode == "eager":
        pf, dc, math_decode = P.prefill, P.decode_one_token, False
    else:   # gpt-fast: prefill compiled, decode compiled with CUDA graphs, decode attention in the math backend
        pf = torch.compile(P.prefill, fullgraph=True)
        dc = torch.compile(P.decode_one_token, mode="reduce-overhead", fullgraph=True)
        math_decode = True
    at3 = {}

    def on_token(i):
        if i == 3:
            at3["graphs"] = compiled_graphs()
            at3["captures"] = captures[0] if captures else None
    ids, ttft, total = generate(P, model, prompt, new, pf, dc, math_decode, on_token)
    r["first_run_first_token_ms"] = ttft * 1e3
    r["first_run_tokens_per_s"] = B * new / total
    tt, tps, dtps = [], [], []
    for k in range(args.reps):
        again, ttft, total = generate(P, model, prompt, new, pf, dc, math_decode)
        if k == 0:
            r["tokens_repeat"] = bool(torch.equal(again, ids))
        tt.append(ttft * 1e3)
        tps.append(B * new / total)
        dtps.append(B * (new - 1) / (total - ttft) if new > 1 else 0.0)
    r["first_token_ms"] = statistics.median(tt)
    r["tokens_per_s"] = statistics.median(tps)
    r["decode_tokens_per_s"] = statistics.median(dtps)
    if at3:
        r["graphs_compiled_after_3_tokens"] = compiled_graphs() - at3["graphs"]
        if captures:
            r["graph_records_after_3_tokens"] = captures[0] - at3["captures"]
    return r, ids[:, args.prompt:].cpu()


def print_row(r):
    head = f"{r['dtype']:<9} {r['batch']:>5} {r['mode']:<16}"
    if "error" in r:
        print(f"{head} ERROR {r['error']}")
        return
    print(f"{head} {r['first_token_ms']:>10.2f} {r['tokens_per_s']:>10.1f} {r['decode_tokens_per_s']:>11.1f} "
          f"{r['first_run_first_token_ms']:>9.1f} {str(r.get('graphs_compiled_after_3_tokens', '-')):>12} "
          f"{str(r.get('graph_records_after_3_tokens', '-')):>14} {r['check']}")


def main():
    args = parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            compare(json.load(f), args.compare)
        return 0
    c = args.config
    # the weights of gpt2_decode, as NumPy arrays (its pool of caches and ids is not needed), and the prompts
    arrays = {name: W.generate(name, shape, init) for name, shape, init in W.specs("gpt2_decode", c)
              if ".ids." not in name and ".past_" not in name}
    prompts = {B: W.generate(f"gpt2_generate.prompt.b{B}.p{args.prompt}", (B, args.prompt), ("randint", 0, c["vocab"]))
               for B in args.batches}
    wdir = W.WeightDir(args.weights, args.small) if args.weights else None
    if wdir:
        for name, a in arrays.items():
            wdir.add(name, a)
        for B, a in prompts.items():
            wdir.add(f"gpt2_generate.prompt.b{B}.p{args.prompt}", a)

    P = torch_parts(args.device)
    torch = P.torch
    if P.cuda and not torch.cuda.is_available():
        print("gpt2_generate.py: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    captures = count_captures(torch)
    result = {"system": "pytorch", "torch_version": torch.__version__, "device": args.device,
              "device_name": torch.cuda.get_device_name() if P.cuda else "cpu", "small": args.small, "config": c,
              "prompt": args.prompt, "new_tokens": args.new, "reps": args.reps,
              "date_utc": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}",
              "float32_matmul": "highest (no TF32)",
              "method": "greedy generation, gpt-fast's loop with a static KV cache; the first run compiles "
                        "(first_run_*; counts *_after_3_tokens run from its 3rd token through the timed runs), then "
                        "reps timed runs: first_token_ms (prefill, synchronized), tokens_per_s (batch * new tokens / "
                        "whole run), decode_tokens_per_s (batch * (new - 1) / decode time); medians",
              "runs": []}
    print(f"gpt2_generate (PyTorch {torch.__version__}, {result['device_name']}): prompt {args.prompt}, {args.new} "
          f"new tokens, greedy, the weights of gpt2_decode")
    print(f"{'dtype':<9} {'batch':>5} {'mode':<16} {'TTFT ms':>10} {'tokens/s':>10} {'decode t/s':>11} {'1st TTFT':>9} "
          f"{'graphs>3tok':>12} {'captures>3tok':>14} check")
    failed = False
    with torch.no_grad():
        for dtype_name in args.dtypes:
            dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
            A = {k: torch.from_numpy(v).to(device=P.dev, dtype=dtype) for k, v in arrays.items()}
            for B in args.batches:
                prompt = torch.from_numpy(prompts[B]).to(P.dev)
                eager_tokens = None
                for mode in args.modes:
                    try:
                        r, new_ids = run_mode(P, args, A, prompt, mode, captures)
                        checks = [] if r["tokens_repeat"] else ["RUNS DIFFER"]
                        if mode == "eager":
                            eager_tokens = new_ids
                            if wdir:
                                wdir.add(f"gpt2_generate.tokens.{dtype_name}.b{B}.p{args.prompt}.n{args.new}",
                                         new_ids.numpy().astype(np.int64))
                        elif eager_tokens is not None:
                            same = int((new_ids == eager_tokens).sum())
                            r["tokens_equal_to_eager"] = same
                            checks.append(f"{same}/{eager_tokens.numel()} tokens = eager's")
                        r["check"] = ", ".join(checks)
                    except Exception as e:
                        traceback.print_exc()
                        r = {"batch": B, "mode": mode, "error": f"{type(e).__name__}: {e}".split("\n")[0]}
                        failed = True
                    r["dtype"] = dtype_name
                    result["runs"].append(r)
                    print_row(r)
                    torch._dynamo.reset()
                    if P.cuda:
                        torch.cuda.empty_cache()
    if wdir:
        n = wdir.close(f"pytorch-{torch.__version__}-eager-{result['device_name'].replace(' ', '_')}")
        print(f"wrote {args.weights}: {n} tensors")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
            f.write("\n")
        print(f"wrote {args.json}")
    if args.compare:
        compare(result, args.compare)
    return 1 if failed else 0


def compare(torch_result, path):
    """grace's runs beside PyTorch's best mode for each dtype and batch (the static cache)."""
    with open(path) as f:
        g = json.load(f)
    print(f"\ngrace ({path}) against PyTorch's best mode, static cache; tokens/s (ratio grace / PyTorch) and time "
          f"to first token")
    print(f"{'dtype':<9} {'batch':>5} {'grace t/s':>10} {'torch t/s':>10} {'best mode':<16} {'ratio':>6} "
          f"{'grace TTFT':>11} {'torch TTFT':>11} {'grace traces/records >3tok':>27}")
    keys = sorted({(r["dtype"], r["batch"]) for r in torch_result["runs"] if "error" not in r})
    for dt, b in keys:
        tb = max((r for r in torch_result["runs"] if r.get("dtype") == dt and r.get("batch") == b and "error" not in r),
                 key=lambda r: r["tokens_per_s"])
        gr = [r for r in g.get("runs", []) if r.get("dtype") == dt and r.get("batch") == b and
              r.get("cache") == "static" and r.get("mode") == "compiled" and "error" not in r]
        if not gr:
            print(f"{dt:<9} {b:>5} {'-':>10} {tb['tokens_per_s']:>10.1f} {tb['mode']:<16}   (no grace run)")
            continue
        gr = gr[0]
        ratio = gr["tokens_per_s"] / tb["tokens_per_s"] if tb["tokens_per_s"] else math.nan
        counts = f"{gr.get('traces_after_3_tokens', '-')}/{gr.get('graph_records_after_3_tokens', '-')}"
        print(f"{dt:<9} {b:>5} {gr['tokens_per_s']:>10.1f} {tb['tokens_per_s']:>10.1f} {tb['mode']:<16} {ratio:>6.2f} "
              f"{gr['first_token_ms']:>9.2f}ms {tb['first_token_ms']:>9.2f}ms {counts:>27}")


if __name__ == "__main__":
    sys.exit(main())
