#!/usr/bin/env python3
"""choice.py: checks the launch choice of one or more suite runs: per workload, grace's `full` mode (the strategy
chosen by measurement) against the best forced mode of the same run (compiled = kernel by kernel, graph_copy,
graph_indirect, graph_update), flagged when full is more than --margin (default 5%) slower.

Two comparisons per workload, both from grace's JSON (bench/workloads/run.lua --json, or the combined bench.json
of bench/report.py, {"grace": ..., "pytorch": ...}):
  latency      each mode's median latency per call (a synchronize after each call), timed one mode after the other;
  interleaved  the interleaved comparison (run.lua --rounds: rounds of a few calls per mode, the order rotating),
               where a drift of the device falls on every mode alike.
A gap in `latency` alone, with `interleaved` within the margin and full on the same strategy as the best forced mode,
is drift between the modes' timing blocks rather than a wrong choice; the strategies full kept per device program
(and its re-checks) are printed to tell the two apart.

The criterion: no workload flagged in either comparison, in every run given (three consecutive suite runs).
Exit status 0 when it holds, 1 when a workload is flagged, 2 on bad input.

usage: python3 bench/choice.py RUN.json [RUN.json ...] [--margin 0.05] [--only latency|interleaved]
"""
import argparse
import json
import sys

FORCED = ["compiled", "graph_copy", "graph_indirect", "graph_update"]
FORCED_STRATEGY = {"compiled": "eager", "graph_copy": "graph+copies", "graph_indirect": "graph+indirection",
                   "graph_update": "graph+node updates"}


def grace_part(doc):
    return doc.get("grace", doc) if isinstance(doc, dict) else {}


def latencies(workload, source):
    """{mode: median us} of one comparison ("latency" or "interleaved"), or {} when the JSON lacks it."""
    if source == "latency":
        modes = workload.get("modes") or {}
    else:
        modes = (workload.get("interleaved") or {}).get("modes") or {}
    out = {}
    for m, v in modes.items():
        if isinstance(v, dict) and isinstance(v.get("latency_us_median"), (int, float)) and not v.get("error"):
            out[m] = v["latency_us_median"]
    return out


def compare(lat, margin):
    """(full us, best forced mode, its us, ratio, flagged) or None when full or every forced mode is missing."""
    full = lat.get("full")
    forced = [(lat[m], m) for m in FORCED if m in lat]
    if full is None or not forced:
        return None
    best_us, best = min(forced)
    ratio = full / best_us if best_us > 0 else float("inf")
    return full, best, best_us, ratio, ratio > 1 + margin


def kept(workload):
    """What full's device programs chose, with how many programs chose each: 'graph+copies x2, eager (re-checked
    1, switched 0)'."""
    launch = ((workload.get("modes") or {}).get("full") or {}).get("launch") or []
    parts = {}
    for p in launch:
        s = p.get("strategy", "?")
        extra = []
        if p.get("from_cache"):
            extra.append("cached")
        if p.get("rechecks"):
            extra.append(f"re-checked {p['rechecks']}, switched {p.get('switches', 0)}")
        key = s + (f" ({'; '.join(extra)})" if extra else "")
        parts[key] = parts.get(key, 0) + 1
    return ", ".join(k + (f" x{n}" if n > 1 else "") for k, n in parts.items()) if parts else "-"


def check_run(path, doc, margin, sources):
    g = grace_part(doc)
    workloads = g.get("workloads") or {}
    flagged = []
    print(f"## {path} ({g.get('device', '?')}, {g.get('date_utc', '?')})")
    print(f"{'workload':<22} {'comparison':<12} {'full us':>9} {'best forced':>15} {'us':>9} {'full/best':>9}  flag  full kept")
    for name, w in workloads.items():
        for src in sources:
            r = compare(latencies(w, src), margin)
            if r is None:
                continue
            full, best, best_us, ratio, bad = r
            print(f"{name:<22} {src:<12} {full:9.1f} {best:>15} {best_us:9.1f} {ratio:9.3f}  {'>' + format(margin, '.0%') if bad else 'ok':<4}  "
                  f"{kept(w) if src == 'latency' else ''}")
            if bad:
                flagged.append((name, src, ratio, best))
    print()
    return flagged


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="grace JSON of a suite run (run.lua --json, or report.py's bench.json)")
    ap.add_argument("--margin", type=float, default=0.05, help="allowed slowdown of full, a fraction (0.05: 5%%)")
    ap.add_argument("--only", choices=["latency", "interleaved"], help="check one comparison only")
    a = ap.parse_args()
    sources = [a.only] if a.only else ["latency", "interleaved"]
    bad_runs = 0
    for path in a.runs:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print(f"choice.py: {path}: {e}", file=sys.stderr)
            return 2
        flagged = check_run(path, doc, a.margin, sources)
        if flagged:
            bad_runs += 1
            for name, src, ratio, best in flagged:
                print(f"FLAGGED {path}: {name} ({src}): full is {ratio:.3f}x the best forced mode ({best})")
    print(f"criterion (full within {a.margin:.0%} of the best forced mode on every workload, every run): "
          f"{'holds' if bad_runs == 0 else 'fails'}: it holds in {len(a.runs) - bad_runs} of {len(a.runs)} run(s)")
    return 1 if bad_runs else 0


if __name__ == "__main__":
    sys.exit(main())
