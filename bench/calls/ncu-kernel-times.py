#!/usr/bin/env python3
"""Per-kernel times of an `ncu --csv --metrics gpu__time_duration.sum` log: launches, median
and total per kernel (its full name carries its specialisation), largest total first.

Usage: python3 bench/calls/ncu-kernel-times.py NCU.csv [LABEL]
"""

import csv
import statistics
import sys


def main() -> int:
    path = sys.argv[1]
    label = sys.argv[2] if len(sys.argv) > 2 else path
    times: dict[str, list[float]] = {}
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0]
        value = float(row["Metric Value"].replace(",", ""))
        scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}
        us = value * scale.get(row.get("Metric Unit", "nsecond"), 1e-3)
        times.setdefault(name, []).append(us)
    print(f"# {label}: kernel | launches | median us | total us")
    for name, v in sorted(times.items(), key=lambda kv: -sum(kv[1])):
        print(f"{name} | {len(v)} | {statistics.median(v):.2f} | {sum(v):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
