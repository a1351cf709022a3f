#!/usr/bin/env python3
"""profile_summary.py: the kernels of one compiled call from Nsight Compute's CSV (bench/device.sh profile): the
last PROFILE_LAST_CALL_KERNELS launches of the run, each with its time alone, DRAM bytes and bandwidth, then
summed by kernel family (the generated name without its hash).
With --gaps: the boundaries of the call replayed as a graph, from Nsight Systems' GPU trace (`nsys stats --report
cuda_gpu_trace --format csv`): over the last R replays of K kernels each, per family the time in its kernels and
the idle time before each of them (from the end of the kernel before to its start: what a boundary costs).
usage: profile_summary.py profile.csv | profile_summary.py --gaps trace.csv K [R]"""
import collections, csv, re, sys

def family(name):
    return re.sub(r"_[0-9a-f]{8,16}$", "", name.split("(")[0])


def gaps(path, k, r):
    """Per family: kernels, time in them and idle time before them, over the last r replays of k kernels each."""
    lines = open(path, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if "Start" in l and "Name" in l), None)
    if start is None:
        print("no trace rows in", path); return 1
    rows = list(csv.reader(lines[start:]))
    head = rows[0]
    col = lambda p: next(i for i, h in enumerate(head) if h.startswith(p))
    cs, cd, cn = col("Start"), col("Duration"), col("Name")
    ks = []
    for row in rows[1:]:
        if len(row) <= cn or "memcpy" in row[cn].lower() or "memset" in row[cn].lower():
            continue
        try:
            ks.append((float(row[cs].replace(",", "")), float(row[cd].replace(",", "")), row[cn]))
        except ValueError:
            pass
    ks.sort()
    n = min(len(ks), k * r)
    if n < 2:
        print("too few kernels in", path); return 1
    r = n // k
    last = ks[len(ks) - r * k:]
    fam = collections.OrderedDict()
    busy = idle = 0.0
    for i, (t0, d, name) in enumerate(last):
        gap = 0.0
        if i % k:   # the first kernel of a replay waits for its launch, not for a boundary
            p0, pd, _ = last[i - 1]
            gap = max(0.0, t0 - (p0 + pd))
        f = fam.setdefault(family(name), [0, 0.0, 0.0])
        f[0] += 1; f[1] += d / 1e3; f[2] += gap / 1e3
        busy += d / 1e3; idle += gap / 1e3
    print(f"{r} replays of {k} kernels: per replay {busy / r:.1f} us in kernels, {idle / r:.1f} us between them "
          f"({idle / max(1, r * (k - 1)):.2f} us a boundary)")
    print("by family (kernels a replay, us in them, us idle before them, us a boundary):")
    for name, (c, t, g) in sorted(fam.items(), key=lambda x: -x[1][2]):
        print(f"  {name[:56]:56s} {c / r:5.0f} {t / r:9.1f} {g / r:9.1f} {g / c:7.2f}")
    return 0


def main(path):
    lines = open(path, errors="replace").read().splitlines()
    n_last = next((int(l.split()[1]) for l in lines if l.startswith("PROFILE_LAST_CALL_KERNELS")), None)
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        print("no CSV rows in", path); return 1
    rows = [r for r in csv.reader(l for l in lines[start:] if l.startswith('"'))]
    head, rows = rows[0], rows[1:]
    col = {h: i for i, h in enumerate(head)}
    k = collections.OrderedDict()
    for r in rows:
        kid = int(r[col["ID"]])
        e = k.setdefault(kid, {"name": r[col["Kernel Name"]], "grid": r[col["Grid Size"]], "block": r[col["Block Size"]]})
        try:
            e[r[col["Metric Name"]]] = float(r[col["Metric Value"]].replace(",", ""))
        except ValueError:
            pass
    ids = list(k)
    if n_last:
        ids = ids[-n_last:]
    print(f"{len(k)} kernels profiled; the last call's {len(ids)} (each alone, clocks not locked):")
    fam = collections.OrderedDict()
    total_t = total_b = 0.0
    for kid in ids:
        e = k[kid]
        t = e.get("gpu__time_duration.sum", 0.0) * 1e-3   # ns -> us
        b = e.get("dram__bytes_read.sum", 0.0) + e.get("dram__bytes_write.sum", 0.0)
        total_t += t; total_b += b
        short = family(e["name"])
        f = fam.setdefault(short, [0, 0.0, 0.0])
        f[0] += 1; f[1] += t; f[2] += b
        print(f"  {kid:6d} {e['name'][:48]:48s} grid {e['grid']:>16s} block {e['block']:>14s} {t:8.2f} us "
              f"{b / 1e6:8.3f} MB {b / (t * 1e3) if t else 0:7.0f} GB/s")
    print(f"total {total_t:.1f} us, {total_b / 1e6:.2f} MB of DRAM traffic")
    print("by family (kernels, us, share, MB):")
    for name, (n, t, b) in sorted(fam.items(), key=lambda x: -x[1][1]):
        print(f"  {name[:56]:56s} {n:4d} {t:9.1f} {100 * t / total_t if total_t else 0:5.1f}% {b / 1e6:9.2f}")
    return 0

if __name__ == "__main__":
    if sys.argv[1] == "--gaps":
        sys.exit(gaps(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 10))
    sys.exit(main(sys.argv[1]))
