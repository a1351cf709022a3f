#!/usr/bin/env python3
"""report.py: the benchmark report of issue 8 from the two JSON files of one run: grace's
(bench/workloads/run.lua --json) and PyTorch's (bench/torch/workloads.py --json).

Writes a markdown file with the median latency per call of every mode of both systems, the ratios
grace/PyTorch for each pair of modes (below 1: grace is faster), the issue's targets, the physical floor per
workload (the larger of min bytes / copy bandwidth and FLOPs / matrix rate, plus the launch-and-synchronize
cost of one graph; bytes and FLOPs come from grace's JSON, the rates from the options), throughput,
first-call times and the correctness checks; and a PNG bar chart of the latencies (log scale) when
matplotlib is importable (otherwise it says so and writes only the markdown).

usage: python3 bench/report.py --grace grace.json --torch torch.json [--md report.md] [--png report.png]
                                [--json bench.json]   (both inputs in one file: {"grace": ..., "pytorch": ...})
"""
import argparse
import json
import sys

# latency per call targets of issue 8 (H200, 2026-11-22)
TARGET_US = {"mlp": 50, "eos": 20, "st": 200, "gpt2_decode_fp32": 200, "gpt2_decode_bf16": 120}
ORDER = ["mlp", "eos", "st", "gpt2_decode_fp32", "gpt2_decode_bf16"]


def modes_of(result):
    """Mode names in the order they first appear (eager first)."""
    seen = []
    for w in result.get("workloads", {}).values():
        for m in w.get("modes", {}):
            if m not in seen:
                seen.append(m)
    return sorted(seen, key=lambda m: (m != "eager", seen.index(m)))


def value(result, wl, mode, key):
    try:
        return result["workloads"][wl]["modes"][mode].get(key)
    except (KeyError, TypeError, AttributeError):
        return None


def us(v):
    return "-" if v is None else (f"{v:.0f}" if v >= 100 else f"{v:.1f}")


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def table(header, rows):
    align = "|".join("---" if i == 0 else "---:" for i in range(len(header)))
    out = ["| " + " | ".join(header) + " |", "|" + align + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grace", required=True)
    ap.add_argument("--torch", required=True)
    ap.add_argument("--md", default="report.md")
    ap.add_argument("--png", default="report.png")
    ap.add_argument("--json", default=None, help="also write both results into this one file")
    ap.add_argument("--bandwidth-tbs", type=float, default=4.27,
                    help="copy bandwidth, TB/s (default: device-to-device copy measured on the H200)")
    ap.add_argument("--launch-us", type=float, default=6.9,
                    help="launch and synchronize of one graph, us (default: 1-node graph measured on the H200)")
    ap.add_argument("--fp32-tflops", type=float, default=67.0, help="float32 matrix rate (default: H200 spec)")
    ap.add_argument("--bf16-tflops", type=float, default=989.0, help="bfloat16 matrix rate (default: H200 spec)")
    args = ap.parse_args()
    with open(args.grace) as f:
        g = json.load(f)
    with open(args.torch) as f:
        t = json.load(f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"grace": g, "pytorch": t}, f, indent=2, sort_keys=True)
            f.write("\n")
        print(f"wrote {args.json}")
    gm, tm = modes_of(g), modes_of(t)
    wls = [w for w in ORDER if w in g.get("workloads", {}) or w in t.get("workloads", {})]
    wls += sorted(w for w in set(g.get("workloads", {})) | set(t.get("workloads", {})) if w not in wls)

    md = ["# grace against PyTorch: benchmark suite (issue 8)", ""]
    md.append(f"- grace {g.get('grace_version', '?')}, backend `{g.get('backend', '?')}`, "
              f"device {g.get('device', '?')}, {g.get('date_utc', '?')}{', small sizes' if g.get('small') else ''}")
    md.append(f"- PyTorch {t.get('torch_version', '?')} on {t.get('device_name', '?')}, {t.get('date_utc', '?')}, "
              f"float32 matmul: {t.get('float32_matmul', '?')}{', small sizes' if t.get('small') else ''}")
    md.append(f"- {g.get('iters', '?')} timed calls per mode (grace), {t.get('iters', '?')} (PyTorch); inputs from a "
              f"pool of {g.get('pool_size', '?')}; weights and inputs shared through files: "
              f"{'yes (' + str(g.get('reference_source')) + ' reference)' if g.get('weights_dir') else 'no'}")
    if g.get("small") != t.get("small"):
        md.append("- **WARNING: one run used --small sizes and the other did not: the numbers are not comparable**")
    md += ["", "## Latency per call (us, median, synchronized after each call)", ""]
    header = ["workload"] + [f"torch {m}" for m in tm] + [f"grace {m}" for m in gm] + ["grace target"]
    rows = []
    for w in wls:
        rows.append([w] + [us(value(t, w, m, "latency_us_median")) for m in tm]
                    + [us(value(g, w, m, "latency_us_median")) for m in gm] + [us(TARGET_US.get(w))])
    md += [table(header, rows), ""]

    md += ["## Ratios grace / PyTorch (latency; below 1: grace is faster)", ""]
    header = ["workload"] + [f"grace {a} / torch {b}" for a in gm for b in tm] + ["grace best / target"]
    rows = []
    for w in wls:
        r = [w]
        for a in gm:
            for b in tm:
                r.append(ratio(value(g, w, a, "latency_us_median"), value(t, w, b, "latency_us_median")))
        best = [v for v in (value(g, w, a, "latency_us_median") for a in gm if a != "eager") if v is not None]
        r.append(ratio(min(best) if best else None, TARGET_US.get(w)))
        rows.append(r)
    md += [table(header, rows), ""]

    md += ["## Physical floor (us per call)", "",
           f"max(min bytes / {args.bandwidth_tbs} TB/s, FLOPs / matrix rate ({args.fp32_tflops} TFLOP/s float32, "
           f"{args.bf16_tflops} bfloat16)) + {args.launch_us} us for one graph launch and synchronize. Min bytes: "
           "the weights once, one input, the outputs.", ""]
    rows = []
    for w in wls:
        e = g.get("workloads", {}).get(w, {})
        nb, fl = e.get("min_bytes_per_call"), e.get("flops_per_call")
        if nb is None:
            continue
        rate = args.bf16_tflops if e.get("dtype") == "bfloat16" else args.fp32_tflops
        floor = max(nb / (args.bandwidth_tbs * 1e12), (fl or 0) / (rate * 1e12)) * 1e6 + args.launch_us
        gbest = [v for v in (value(g, w, m, "latency_us_median") for m in gm) if v is not None]
        tbest = [v for v in (value(t, w, m, "latency_us_median") for m in tm) if v is not None]
        rows.append([w, f"{nb / 1e6:.2f}", "-" if fl is None else f"{fl / 1e9:.3f}", us(floor),
                     ratio(min(gbest) if gbest else None, floor), ratio(min(tbest) if tbest else None, floor)])
    md += [table(["workload", "min MB", "GFLOP", "floor us", "grace best / floor", "torch best / floor"], rows), ""]

    md += ["## Throughput (us per call, one synchronize after all calls)", ""]
    header = ["workload"] + [f"torch {m}" for m in tm] + [f"grace {m}" for m in gm]
    rows = [[w] + [us(value(t, w, m, "throughput_us_per_call")) for m in tm]
            + [us(value(g, w, m, "throughput_us_per_call")) for m in gm] for w in wls]
    md += [table(header, rows), ""]

    md += ["## First call (ms: compile + capture + run for compiled modes)", ""]
    header = ["workload"] + [f"torch {m}" for m in tm] + [f"grace {m}" for m in gm]
    rows = [[w] + [us(value(t, w, m, "first_call_ms")) for m in tm]
            + [us(value(g, w, m, "first_call_ms")) for m in gm] for w in wls]
    md += [table(header, rows), ""]

    md += ["## Correctness checks (max |got - want| <= tolerance x max |want|)", ""]
    rows = []
    for name, res in (("grace", g), ("torch", t)):
        for w in wls:
            e = res.get("workloads", {}).get(w)
            if not e:
                continue
            bad = [c["what"] for c in e.get("checks", []) if not c.get("ok")]
            if e.get("error"):
                bad.insert(0, "raised: " + e["error"])
            bad += [f"{m} raised: {v['error']}" for m, v in (e.get("modes") or {}).items() if v.get("error")]
            worst = max((c.get("max_abs_diff", 0) / max(c.get("max_abs_ref", 0), 1e-30)
                         for c in e.get("checks", []) if c.get("max_abs_diff") is not None), default=None)
            rows.append([f"{name} {w}", str(len(e.get("checks", []))), "ok" if not bad else f"{len(bad)} FAILED",
                         "-" if worst is None else f"{worst:.2e}", "; ".join(bad) or "-"])
    md += [table(["system workload", "checks", "result", "worst diff / max", "failed"], rows), ""]
    for name, res in (("grace", g), ("torch", t)):
        for w in wls:
            for m, v in (res.get("workloads", {}).get(w, {}).get("modes") or {}).items():
                cs = v.get("compile_stats")
                if cs and cs.get("fell_back_to_eager"):
                    md.append(f"- **{name} {w} {m}: the compiled function fell back to eager execution**")
    md += ["", "Measured as described in the JSON files' `method` fields."]
    with open(args.md, "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {args.md}")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"no PNG: matplotlib is not importable here ({e})")
        return 0
    series = [(f"torch {m}", t, m) for m in tm] + [(f"grace {m}", g, m) for m in gm]
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(wls) * len(series) / 3), 5))
    width = 0.8 / max(1, len(series))
    for i, (label, res, m) in enumerate(series):
        xs, ys = [], []
        for j, w in enumerate(wls):
            v = value(res, w, m, "latency_us_median")
            if v is not None:
                xs.append(j + (i - (len(series) - 1) / 2) * width)
                ys.append(v)
        ax.bar(xs, ys, width, label=label, color=("C%d" % i))
    tx = [j for j, w in enumerate(wls) if w in TARGET_US]
    ax.scatter(tx, [TARGET_US[wls[j]] for j in tx], marker="_", s=800, color="black", label="grace target", zorder=3)
    ax.set_xticks(range(len(wls)))
    ax.set_xticklabels(wls)
    ax.set_yscale("log")
    ax.set_ylabel("latency per call, us (median, log scale)")
    ax.set_title(f"grace vs PyTorch {t.get('torch_version', '')} on {t.get('device_name', '?')}")
    ax.legend(fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
