"""Reads an `ncu --csv --metrics ...` run (one row per kernel and metric) and prints, per kernel
name, the launches, total duration, share, DRAM bytes read and GB/s; with --each, every launch
in order (duration, bytes, grid, block, registers, active warps). Durations are ncu's
`gpu__time_duration.sum` (kernels serialized, clocks as given to ncu), so the sum is the step's
kernel time without launch gaps.

    python3 tools/bench/ncu_summary.py RUN.csv [--skip N] [--count N] [--each]
"""
import argparse
import collections
import csv

SCALE = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
         "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}


def launches(path):
    """The launches of the run in order: {name, metric: value (ns, bytes or as printed)}."""
    rows = [r for r in csv.reader(open(path)) if len(r) > 5]
    if not rows:
        raise SystemExit(f"{path}: no ncu CSV rows")
    head = rows[0]
    col = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
    out = collections.OrderedDict()
    for r in rows[1:]:
        d = out.setdefault(r[col["ID"]], {"name": r[col["Kernel Name"]]})
        v = r[col["Metric Value"]].replace(",", "")
        try:
            v = float(v) * SCALE.get(r[col["Metric Unit"]], 1.0)
        except ValueError:
            pass
        d[r[col["Metric Name"]]] = v
    return list(out.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--skip", type=int, default=0, help="launches to skip first")
    ap.add_argument("--count", type=int, default=None, help="launches to read")
    ap.add_argument("--each", action="store_true", help="print every launch")
    a = ap.parse_args()
    ks = launches(a.csv)[a.skip:]
    if a.count is not None:
        ks = ks[:a.count]
    tot = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for d in ks:
        t = d.get("gpu__time_duration.sum", 0.0)
        b = d.get("dram__bytes_read.sum", 0.0)
        name = d["name"].split("(")[0][:48]
        if a.each:
            print(f"{name:48s} {t / 1e3:8.2f} us {b / 1e6:8.2f} MB {b / max(t, 1):7.1f} GB/s "
                  f"grid {d.get('launch__grid_size')} block {d.get('launch__block_size')} "
                  f"regs {d.get('launch__registers_per_thread')} "
                  f"warps {d.get('sm__warps_active.avg.pct_of_peak_sustained_active')} %")
        e = tot[name]
        e[0] += 1
        e[1] += t
        e[2] += b
    total = sum(e[1] for e in tot.values()) or 1.0
    for name, (n, t, b) in sorted(tot.items(), key=lambda x: -x[1][1]):
        print(f"{name:48s} n={n:4d} {t / 1e3:9.1f} us ({100 * t / total:5.1f} %) "
              f"{b / 1e6:9.1f} MB {b / max(t, 1):7.1f} GB/s")
    print(f"total {total / 1e3:.1f} us over {len(ks)} launches")


if __name__ == "__main__":
    main()
