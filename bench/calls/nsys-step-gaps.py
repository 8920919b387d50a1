#!/usr/bin/env python3
"""Where a step's layer time goes, from an nsys GPU trace (`nsys stats --report cuda_gpu_trace
--format csv`): the trace is cut into layers at each plan launch (`fathom_plan_`); for the
layers whose scan's name has PLACEMENT in it, the median of each kernel's time, of the layer's
span (plan start to the last kernel's end), of the idle time inside it (no kernel or copy
running) and of the idle time between the layer before and its plan; kernels by total time.

Usage: python3 bench/calls/nsys-step-gaps.py TRACE.csv [PLACEMENT] [LABEL]
"""

import csv
import re
import statistics
import sys


def rows(path: str):
    with open(path, newline="") as f:
        lines = [line for line in f if line.strip()]
    # nsys prints notices before the CSV header.
    start = next(i for i, line in enumerate(lines) if "Start (ns)" in line)
    for row in csv.DictReader(lines[start:]):
        try:
            begin = float(row["Start (ns)"])
            length = float(row["Duration (ns)"])
        except (KeyError, ValueError):
            continue
        yield begin, begin + length, row.get("Name", "")


def kernel(name: str) -> str:
    # Kernel names as launched; memcpy rows keep their bracketed names.
    return re.sub(r"\(.*$", "", name).strip()


def layers(events):
    events = sorted(events)
    current = None
    for begin, end, name in events:
        if name.startswith("fathom_plan_"):
            if current:
                yield current
            current = []
        if current is not None:
            current.append((begin, end, name))
    if current:
        yield current


def main() -> int:
    path = sys.argv[1]
    placement = sys.argv[2] if len(sys.argv) > 2 else "host"
    label = sys.argv[3] if len(sys.argv) > 3 else path
    times: dict[str, list[float]] = {}
    spans, idles, leads = [], [], []
    last_end = None
    for layer in layers((b, e, kernel(n)) for b, e, n in rows(path)):
        previous, last_end = last_end, max(e for _, e, _ in layer)
        if not any("_scan_" in n and f"_{placement}_" in n for _, _, n in layer):
            continue
        if previous is not None:
            leads.append((layer[0][0] - previous) / 1e3)
        span = max(e for _, e, _ in layer) - layer[0][0]
        busy, reach = 0.0, layer[0][0]
        for b, e, _ in layer:
            if e > reach:
                busy += e - max(b, reach)
                reach = e
        spans.append(span / 1e3)
        idles.append((span - busy) / 1e3)
        for b, e, n in layer:
            times.setdefault(n, []).append((e - b) / 1e3)
    if not spans:
        print(f"# {label}: no layer with a {placement} scan")
        return 1
    print(f"# {label}: {len(spans)} layers with a {placement} scan; us a layer (median)")
    span, idle = statistics.median(spans), statistics.median(idles)
    lead = statistics.median(leads) if leads else float("nan")
    print(f"layer span {span:.1f} | idle inside it {idle:.1f} | idle before its plan {lead:.1f}")
    per_layer = len(spans)
    for name, v in sorted(times.items(), key=lambda kv: -sum(kv[1])):
        print(f"{name} | {len(v) / per_layer:.2f} a layer | median {statistics.median(v):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
