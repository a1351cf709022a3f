#!/usr/bin/env python3
"""report.py: the benchmark report of issue 8 from the two JSON files of one run: grace's
(bench/workloads/run.lua --json) and PyTorch's (bench/torch/workloads.py --json).

Writes a markdown file with the median latency per call of every mode of both systems, the ratios
grace/PyTorch for each pair of modes (below 1: grace is faster), the issue's targets, the physical floor per
workload (the larger of min bytes / copy bandwidth and FLOPs / matrix rate, plus the launch-and-synchronize
cost of one graph; bytes and FLOPs come from grace's JSON, the rates from the options), where grace's time
goes (latency against device span, kernels and the floor), throughput, the device span of one call (events),
kernels per call, peak device memory per mode, first-call times (in the benchmark process, and in a fresh
process with a cold and a warm compile cache, against issue 6's targets), the training step against its target
(at most 0.5x PyTorch's best mode, one graph launch per step) and the correctness checks; and a
PNG bar chart of the latencies (log scale) when matplotlib is importable (otherwise it says so and writes
only the markdown). Fields a JSON file lacks (an older run) show as "-".

usage: python3 bench/report.py --grace grace.json --torch torch.json [--md report.md] [--png report.png]
                                [--json bench.json]   (both inputs in one file: {"grace": ..., "pytorch": ...})
"""
import argparse
import json
import sys

# latency per call targets of issue 8 (H200, 2026-11-22)
TARGET_US = {"mlp": 50, "eos": 20, "st": 200, "gpt2_decode_fp32": 200, "gpt2_decode_bf16": 120}
# issue 6: the compiled GPT-2 decode program's first call in a fresh process, ms (cold cache, warm cache; warm:
# no NVRTC call)
FIRST_CALL_TARGET_MS = {"gpt2_decode_fp32": (3000, 300), "gpt2_decode_bf16": (3000, 300)}
ORDER = ["mlp", "eos", "st", "gpt2_decode_fp32", "gpt2_decode_bf16"]
# the training step (issue 27): grace's best compiled mode at most this times PyTorch's best mode, one graph a step
TRAIN_TARGET_RATIO = 0.5


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


def mb(v):
    return "-" if v is None else f"{v / 1e6:.1f}"


def num(v, f="{:.1f}"):
    return "-" if v is None else f.format(v)


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def measured_table(header, rows, what):
    """table(), or one line saying so when no row has a value (a CPU run has no kernels or device memory)."""
    if all(c == "-" for r in rows for c in r[1:]):
        return f"Not measured in this run ({what})."
    return table(header, rows)


def table(header, rows):
    align = "|".join("---" if i == 0 else "---:" for i in range(len(header)))
    out = ["| " + " | ".join(header) + " |", "|" + align + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def training_section(g, t, gm, tm, wls):
    """The training step against its target: latencies, grace's best compiled mode over PyTorch's best mode, how
    each side launched a step, and the losses of grace's steps against PyTorch's on the same initial weights."""
    if not wls:
        return []
    md = ["## Training step (forward, loss, backward, AdamW in place; one step per call)", "",
          f"Target: grace's best compiled mode at most {TRAIN_TARGET_RATIO}x PyTorch's best mode (same machine and "
          "run), the step one graph launch. grace launches: per device program of its `full` mode, the strategy, "
          "and kernels launched outside graphs per call (0 with one graph program: one graph launch a step). "
          "PyTorch: cudaGraphLaunch calls in one profiled step (reduce-overhead), and dynamo's graph breaks and "
          "inductor's skipped CUDA graph captures over the mode's calls (a break at `loss.backward()` splits the "
          "step into graphs; a skipped capture runs that graph's kernels one by one). Losses: grace's `full` mode, "
          "the losses of 8 steps from the shared initial weights against PyTorch eager's.", ""]
    rows = []
    for w in wls:
        lat_t = {m: value(t, w, m, "latency_us_median") for m in tm}
        lat_g = {m: value(g, w, m, "latency_us_median") for m in gm if m != "eager"}
        tb = [v for v in lat_t.values() if v is not None]
        gb = {m: v for m, v in lat_g.items() if v is not None}
        best_g = min(gb, key=gb.get) if gb else None
        r = None if best_g is None or not tb else gb[best_g] / min(tb)
        launches = value(g, w, "full", "launch") or []
        outside = value(g, w, "full", "kernels_launched_per_call")
        glaunch = (f"{len(launches)} program{'s' if len(launches) != 1 else ''}: "
                   + ", ".join(str(l.get("strategy", "-")) for l in launches)
                   + ("" if outside is None else f"; {outside:.0f} kernels outside graphs")) if launches else "-"

        def torch_launch(m):
            gl, br, sk = (value(t, w, m, k) for k in ("graph_launches_per_call", "graph_breaks", "cudagraph_skips"))
            if gl is None and br is None:
                return "-"
            return f"{num(gl, '{}')} graph launches, {num(br, '{}')} breaks, {num(sk, '{}')} skipped captures"
        checks = [c for c in (g.get("workloads", {}).get(w, {}).get("checks") or [])
                  if c.get("what", "").startswith("full vs ") and "steps" in c.get("what", "")
                  and "eager" not in c.get("what", "")]
        loss = ("-" if not checks else ("ok" if checks[0].get("ok") else "**differ**")
                + (f" ({checks[0]['max_abs_diff'] / max(checks[0].get('max_abs_ref', 0), 1e-30):.1e})"
                   if checks[0].get("max_abs_diff") is not None else ""))
        rows.append([w] + [us(lat_t.get(m)) for m in tm]
                    + [f"{us(gb[best_g])} ({best_g})" if best_g else "-", num(r, "{:.2f}"),
                       "-" if r is None else ("met" if r <= TRAIN_TARGET_RATIO else "**NOT met**"), glaunch]
                    + [torch_launch(m) for m in tm if m != "eager"] + [loss])
    md += [table(["workload"] + [f"torch {m} us" for m in tm] + ["grace best us", "grace / torch best", "target",
                                                                 "grace launches (full)"]
                 + [f"torch {m} launches" for m in tm if m != "eager"] + ["losses vs PyTorch"], rows), ""]
    return md


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
    def floor_of(w):
        """The workload's floor in us (None when grace's JSON lacks its bytes)."""
        e = g.get("workloads", {}).get(w, {})
        nb, fl = e.get("min_bytes_per_call"), e.get("flops_per_call")
        if nb is None:
            return None
        rate = args.bf16_tflops if e.get("dtype") == "bfloat16" else args.fp32_tflops
        return max(nb / (args.bandwidth_tbs * 1e12), (fl or 0) / (rate * 1e12)) * 1e6 + args.launch_us

    rows = []
    for w in wls:
        e = g.get("workloads", {}).get(w, {})
        nb, fl = e.get("min_bytes_per_call"), e.get("flops_per_call")
        if nb is None:
            continue
        floor = floor_of(w)
        gbest = [v for v in (value(g, w, m, "latency_us_median") for m in gm) if v is not None]
        tbest = [v for v in (value(t, w, m, "latency_us_median") for m in tm) if v is not None]
        rows.append([w, f"{nb / 1e6:.2f}", "-" if fl is None else f"{fl / 1e9:.3f}", us(floor),
                     ratio(min(gbest) if gbest else None, floor), ratio(min(tbest) if tbest else None, floor)])
    md += [table(["workload", "min MB", "GFLOP", "floor us", "grace best / floor", "torch best / floor"], rows), ""]

    md += ["## Where grace's time goes (its fastest mode by latency)", "",
           "Device span: events recorded on grace's stream just before the call and after it returns (median of a "
           "separate pass, each call after a synchronize); it holds the kernels and any gap where the device waited "
           "for the host, so a span near the latency means host-bound launches or slow kernels, and span / floor "
           "is how far the device side is from the physical floor. Host after: latency - span (the synchronize's "
           "return and the call's host work after the device finished). Kernels: grace's own launches plus the "
           "kernel nodes of replayed CUDA graphs (cuBLASLt's kernels outside graphs not counted).", ""]
    rows = []
    for w in wls:
        lat = {m: value(g, w, m, "latency_us_median") for m in gm}
        lat = {m: v for m, v in lat.items() if v is not None}
        if not lat:
            continue
        best = min(lat, key=lat.get)
        span = value(g, w, best, "device_span_us_median")
        floor = floor_of(w)
        k = value(g, w, best, "kernels_per_call")
        rows.append([w, best, us(lat[best]), us(span), us(None if span is None else lat[best] - span),
                     num(k, "{:.0f}"), us(floor), ratio(span, floor), ratio(lat[best], TARGET_US.get(w))])
    md += [table(["workload", "grace mode", "latency us", "device span us", "host after us", "kernels", "floor us",
                  "span / floor", "latency / target"], rows), ""]

    md += ["## How grace launches (its compiled modes; issue 7's ablation)", "",
           "Per device program: the strategy the mode ran (forced for graph_copy / graph_indirect / graph_update, measured for "
           "full: each strategy timed on real calls round-robin with the order rotating, nine calls each, the lowest median kept "
           "or a simpler strategy within 3% of it, re-checked once per process against the runner-up after 100 calls; "
           "runs before 2026-11-28: seven calls each in turn, the lowest median; before 2026-11-23 17:00 the best of three), "
           "the times full measured (eager / "
           "graph+copies / graph+indirection / graph+node updates, us), kernels per graph, bytes copied per call, argument-table words "
           "rewritten per call, the least host time of one replay (the table, its copy, the launch; the mean also holds "
           "waits for the device when calls run ahead of it) and the graphs' memory.", ""]
    rows = []
    for w in wls:
        for m in gm:
            try:
                launches = g["workloads"][w]["modes"][m].get("launch") or []
            except (KeyError, TypeError, AttributeError):
                launches = []
            for k, l in enumerate(launches):
                meas = l.get("us") or {}
                unavailable = l.get("unavailable") or {}
                def cell(name):
                    if name in unavailable:
                        return "n/a"
                    return us(meas.get(name)) if isinstance(meas, dict) else "-"
                measured = " / ".join(cell(n) for n in ("eager", "graph+copies", "graph+indirection",
                                                             "graph+node updates"))
                rows.append([w, m + (f" #{k + 1}" if len(launches) > 1 else ""), str(l.get("strategy", "-")),
                             measured if m == "full" else "-", num(l.get("kernels"), "{:.0f}"),
                             num(l.get("copy_bytes"), "{:.0f}"), num(l.get("indirect_words"), "{:.0f}"),
                             us(l.get("replay_host_us_min") or None), mb(l.get("graph_bytes") or None)])
    md += [measured_table(["workload", "grace mode", "strategy", "full measured us", "kernels", "bytes copied",
                           "table words", "replay host us (min)", "graph MB"], rows, "no program ran on a CUDA device"), ""]

    md += ["## The launch choice against each single strategy (issue 7; interleaved)", "",
           "The modes timed again in turn after all of them ran (compiled afresh, warmed up, then rounds of a few "
           "synchronized calls per mode with the order rotating each round, so a drift of the device falls on all "
           "alike), median per mode in us. Single strategies: compiled (eager launches), graph_copy, "
           "graph_indirect, graph_update; full is the measured choice, held to within 3% of the best of them, and to no slower "
           "than eager.", ""]
    rows = []
    single = ("compiled", "graph_copy", "graph_indirect", "graph_update")
    for w in wls:
        il = (g.get("workloads", {}).get(w) or {}).get("interleaved") or {}
        lat = {m: (il.get("modes", {}).get(m) or {}).get("latency_us_median") for m in gm}
        if lat.get("full") is None:
            continue
        cands = {m: lat[m] for m in single if lat.get(m) is not None}
        best = min(cands, key=cands.get) if cands else None
        r = None if best is None else lat["full"] / cands[best]
        rows.append([w] + [us(lat.get(m)) for m in gm] + [best or "-", num(r, "{:.3f}"),
                     "-" if r is None else ("yes" if r <= 1.03 else "NO"), ratio(lat["full"], lat.get("eager"))])
    md += [measured_table(["workload"] + gm + ["best single", "full / best", "within 3%", "full / eager"], rows,
                          "no interleaved measurement in grace's JSON (run.lua --rounds 0, or an older run)"), ""]

    md += training_section(g, t, gm, tm, [w for w in wls if w.startswith("train_step")])

    md += ["## Throughput (us per call, one synchronize after all calls)", ""]
    header = ["workload"] + [f"torch {m}" for m in tm] + [f"grace {m}" for m in gm]
    rows = [[w] + [us(value(t, w, m, "throughput_us_per_call")) for m in tm]
            + [us(value(g, w, m, "throughput_us_per_call")) for m in gm] for w in wls]
    md += [table(header, rows), ""]

    md += ["## Device span per call (us, median; events just before the call and after it returns)", "",
           "The same measure on both sides: torch.cuda.Event / grace.device_time on the stream the work runs on, "
           "over a separate pass of calls each after a synchronize. It counts the device's idle gaps while the host "
           "queues work, so it is not a sum of kernel durations (PyTorch's profiled sum is in the next table). "
           "On the CPU it is the wall time.", ""]
    header = ["workload"] + [f"torch {m}" for m in tm] + [f"grace {m}" for m in gm]
    rows = [[w] + [us(value(t, w, m, "device_span_us_median")) for m in tm]
            + [us(value(g, w, m, "device_span_us_median")) for m in gm] for w in wls]
    md += [measured_table(header, rows, "an older JSON has no device span"), ""]

    md += ["## Kernels per call", "",
           "PyTorch: CUDA kernel events of one call under torch.profiler (CUDA graph replays included; copies and "
           "memsets not), with the sum of their durations in parentheses. grace: kernels it launched itself per "
           "call plus, in parentheses, how many of them were nodes of replayed CUDA graphs; outside graphs "
           "cuBLASLt's kernels are not counted (a lower bound where a matmul ran on cuBLASLt), inside graphs they "
           "are.", ""]

    def torch_kernels(w, m):
        k, ks = value(t, w, m, "kernels_per_call"), value(t, w, m, "profiled_kernel_us_sum")
        if k is None:
            return "-"
        return f"{k}" + ("" if ks is None else f" ({us(ks)} us)")

    def grace_kernels(w, m):
        k, gk = value(g, w, m, "kernels_per_call"), value(g, w, m, "graph_kernels_per_call")
        if k is None:
            return "-"
        return f"{k:.0f}" + (f" ({gk:.0f} in graphs)" if gk else "")
    rows = [[w] + [torch_kernels(w, m) for m in tm] + [grace_kernels(w, m) for m in gm] for w in wls]
    md += [measured_table(header, rows, "kernels are counted on CUDA only; an older JSON has none"), ""]
    notes = sorted({v for w in wls for m in tm for v in [value(t, w, m, "kernels_note")] if v})
    if notes:
        md += ["PyTorch kernels not counted: " + "; ".join(notes), ""]

    md += ["## Peak device memory per mode (MB; in parentheses: above what was allocated when the mode began)", "",
           "The allocator's highest in-use bytes from the mode's start (peak reset there: torch.cuda."
           "reset_peak_memory_stats, grace.reset_peak_memory) to the end of its timed calls; weights and the input "
           "pool are allocated throughout.", ""]

    def peak(res, w, m):
        p, b = value(res, w, m, "peak_allocated_bytes"), value(res, w, m, "baseline_allocated_bytes")
        if p is None:
            return "-"
        return mb(p) + ("" if b is None else f" (+{mb(p - b)})")
    rows = [[w] + [peak(t, w, m) for m in tm] + [peak(g, w, m) for m in gm] for w in wls]
    md += [measured_table(header, rows, "device memory exists on CUDA only; an older JSON has none"), ""]

    md += ["## First call in the benchmark process (ms: compile + capture + run for compiled modes)", "",
           "Kernels compiled for an earlier mode or workload of the same process are reused here: the fresh-process "
           "table below is the honest first-call cost.", ""]
    header = ["workload"] + [f"torch {m}" for m in tm] + [f"grace {m}" for m in gm]
    rows = [[w] + [us(value(t, w, m, "first_call_ms")) for m in tm]
            + [us(value(g, w, m, "first_call_ms")) for m in gm] for w in wls]
    md += [table(header, rows), ""]

    md += ["## First call in a fresh process (ms; cold: empty compile cache, warm: the same cache again)", "",
           "A new process (the benchmark script with --first-call-only) builds the inputs, then times the first "
           "call of the compiled function (trace + compile + run; graph capture comes at a later call). Cold: "
           "GRACE_CACHE_DIR (grace) or TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR (PyTorch) set to a new empty "
           "folder; warm: the same folder again. NVRTC: kernels grace compiled during that first call. "
           "Process: the whole child, start to exit (for PyTorch with Python's start and import torch). Target: "
           "issue 6, the compiled GPT-2 decode's first call under 3 s cold and under 0.3 s warm with no NVRTC "
           "call.", ""]
    rows = []
    for name, res in (("grace", g), ("torch", t)):
        for w in wls:
            fp = res.get("workloads", {}).get(w, {}).get("fresh_process") or {}
            for m, fr in fp.items():
                c, wm = fr.get("cold") or {}, fr.get("warm") or {}
                notes = [f"{k}: {r['error']}" for k, r in (("cold", c), ("warm", wm), ("", fr)) if r.get("error")]
                notes += [f"{k} skipped: {r['skipped']}" for k, r in (("cold", c), ("warm", wm)) if r.get("skipped")]
                notes += [f"{k}: results differ from eager" for k, r in (("cold", c), ("warm", wm))
                          if r.get("check_ok") is False]
                target = "-"
                if name == "grace" and w in FIRST_CALL_TARGET_MS and m != "eager" and g.get("device") != "cuda":
                    target = "- (not a CUDA run)"
                elif name == "grace" and w in FIRST_CALL_TARGET_MS and m != "eager":
                    tc, tw = FIRST_CALL_TARGET_MS[w]
                    cm, wms, wn = c.get("first_call_ms"), wm.get("first_call_ms"), wm.get("first_call_nvrtc_calls")
                    if cm is None or wms is None:
                        target = "not measured"
                    else:
                        missed = [s for s, bad in ((f"cold >= {tc / 1000:g} s", cm >= tc),
                                                   (f"warm >= {tw / 1000:g} s", wms >= tw),
                                                   (f"{wn} NVRTC warm", bool(wn))) if bad]
                        target = "met" if not missed else "**NOT met**: " + ", ".join(missed)
                rows.append([f"{name} {w}", m, us(c.get("first_call_ms")), num(c.get("first_call_nvrtc_calls"), "{}"),
                             us(wm.get("first_call_ms")), num(wm.get("first_call_nvrtc_calls"), "{}"),
                             us(wm.get("second_call_ms")),
                             f"{num(c.get('process_s'))} / {num(wm.get('process_s'))}", target,
                             "; ".join(notes) or "-"])
    if rows:
        md += [table(["system workload", "mode", "cold ms", "cold NVRTC", "warm ms", "warm NVRTC", "warm 2nd call ms",
                      "process s cold / warm", "issue 6 target", "notes"], rows), ""]
    else:
        md += ["Not measured in this run (run.lua --fresh none, workloads.py without --fresh).", ""]

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
