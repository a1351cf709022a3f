#!/usr/bin/env python3
"""profile_summary.py: the kernels of one compiled call from Nsight Compute's CSV (bench/device.sh profile): the
last PROFILE_LAST_CALL_KERNELS launches of the run, each with its time alone, DRAM bytes and bandwidth, then
summed by kernel family (the generated name without its hash). usage: profile_summary.py profile.csv"""
import collections, csv, re, sys

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
        short = re.sub(r"_[0-9a-f]{8,16}$", "", e["name"].split("(")[0])
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
    sys.exit(main(sys.argv[1]))
