#!/usr/bin/env python3
"""Where a kernel's instructions and stalls sit, line by line of its CUDA source, from
`ncu --import R.ncu-rep --page source --csv --print-source cuda` of a kernel built with
`-lineinfo` (`FATHOM_JIT_LINEINFO=1`): the totals, then the N lines with the most warp
instructions executed and the N with the most stall samples, each with its share and text.

Usage: python3 bench/calls/ncu-source-lines.py SOURCE.csv [N]
"""

import csv
import sys

INSTRUCTIONS = "Instructions Executed"
STALLS = "Warp Stall Sampling (All Samples)"


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def lines(path: str):
    """(file, line number, source, instructions, stall samples) for every source row."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = None
    current = ""
    for row in rows:
        if not row:
            continue
        if row[0] == "File" and len(row) > 1:
            current = row[1]
            continue
        if "Source" in row and INSTRUCTIONS in row:
            header = {name: i for i, name in enumerate(row)}
            continue
        if header is None or len(row) < len(header):
            continue
        at = header.get("#", header.get("Line", 0))
        yield (
            current,
            row[at],
            row[header["Source"]].strip(),
            number(row[header[INSTRUCTIONS]]),
            number(row[header[STALLS]]) if STALLS in header else 0.0,
        )


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    rows = [r for r in lines(sys.argv[1]) if r[3] or r[4]]
    if not rows:
        why = "no source rows with instructions (built without -lineinfo?)"
        print(f"{sys.argv[1]}: {why}", file=sys.stderr)
        return 1
    total_i = sum(r[3] for r in rows) or 1.0
    total_s = sum(r[4] for r in rows) or 1.0
    print(
        f"# {sys.argv[1]}: {total_i:,.0f} warp instructions, "
        f"{total_s:,.0f} stall samples, {len(rows)} lines"
    )
    for label, key, total in (("instructions", 3, total_i), ("stall samples", 4, total_s)):
        columns = "share | instructions | stalls | line | source"
        print(f"\n## the {top} lines with the most {label}: {columns}")
        for r in sorted(rows, key=lambda r: -r[key])[:top]:
            share = r[key] / total
            print(f"{share:6.1%} | {r[3]:>9,.0f} | {r[4]:>7,.0f} | {r[1]:>5} | {r[2][:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
