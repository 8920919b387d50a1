#!/usr/bin/env python3
"""Where a kernel's warp instructions and stall samples sit, by line of its CUDA source and by
function, and between its block barriers: ncu's per-instruction counters of one launch
(`ncu --import R.ncu-rep --page source --csv --print-source sass`; ncu's `cuda` view of a
JIT-compiled kernel came without counters, eighteenth session) put on source lines by the
same kernel compiled here with `-lineinfo`:

    cargo run --release -p fathom-codegen -- machine-code --specs SPEC.json --out DIR --lineinfo
    nvdisasm -g -c DIR/NAME.cubin > NAME.sass

The two must be the same machine code (the same NVRTC; `-lineinfo` changes no instruction):
the script checks that every instruction's opcode matches and refuses otherwise.

Usage: python3 bench/calls/sass-lines.py NAME.sass SASS.csv[.gz] DIR/NAME.cu ENTRY [N]
  ENTRY: the entry point's name, or a unique part of it (e.g. `_chunk`); N: lines listed (30).
"""

import bisect
import collections
import csv
import gzip
import re
import sys

INSTRUCTIONS = "Instructions Executed"
STALLS = "Warp Stall Sampling (All Samples)"


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def disassembly(path: str, entry: str):
    """(line, instruction text) of every instruction of the entry point matching `entry`."""
    text = open(path).read().split("\n")
    starts = [i for i, t in enumerate(text) if t.startswith("//----") and entry in t]
    if len(starts) != 1:
        raise SystemExit(f"{path}: {len(starts)} functions match `{entry}`; name one")
    line, out = 0, []
    for t in text[starts[0] + 1 :]:
        if t.startswith("//----"):
            break
        m = re.match(r'\s*//## File ".*", line (\d+)', t)
        if m:
            line = int(m.group(1))
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;?\s*$", t)
        if m:
            out.append((line, m.group(1)))
    return out


def counters(path: str):
    """(instruction text, warp instructions, stall samples) of every row of ncu's SASS page."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    header = next((i for i, r in enumerate(rows) if "Source" in r and INSTRUCTIONS in r), None)
    if header is None:
        raise SystemExit(
            f"{path}: no header with `Source` and `{INSTRUCTIONS}`: not ncu's SASS page "
            "(`ncu --import R.ncu-rep --page source --csv --print-source sass`)"
        )
    ix = {name: i for i, name in enumerate(rows[header])}
    return [
        (r[ix["Source"]].strip(), number(r[ix[INSTRUCTIONS]]), number(r[ix.get(STALLS, 0)]))
        for r in rows[header + 1 :]
        if len(r) == len(rows[header])
    ]


def opcode(text: str) -> str:
    parts = text.split()
    return parts[1] if parts and parts[0].startswith("@") and len(parts) > 1 else (parts or [""])[0]


def main() -> int:
    if len(sys.argv) < 5:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    sass, csv_path, source, entry = sys.argv[1:5]
    top = int(sys.argv[5]) if len(sys.argv) > 5 else 30
    code, counts = disassembly(sass, entry), counters(csv_path)
    if len(code) != len(counts) or any(opcode(a[1]) != opcode(b[0]) for a, b in zip(code, counts)):
        print(f"{sass} and {csv_path} are not the same machine code", file=sys.stderr)
        return 1
    src = open(source).read().split("\n")
    by_line = collections.defaultdict(lambda: [0.0, 0.0])
    for (line, _), (_, n, s) in zip(code, counts):
        by_line[line][0] += n
        by_line[line][1] += s
    total_i = sum(v[0] for v in by_line.values()) or 1.0
    total_s = sum(v[1] for v in by_line.values()) or 1.0
    print(f"# {entry}: {total_i:,.0f} warp instructions, {total_s:,.0f} stall samples")
    # Functions: the definition each line lies under.
    defs = [
        (i + 1, t.strip())
        for i, t in enumerate(src)
        if re.match(r"\s*(template <.*>\s*)?(__device__|extern \"C\")", t)
    ]
    starts = [d[0] for d in defs]
    by_function = collections.defaultdict(lambda: [0.0, 0.0])
    for line, (n, s) in by_line.items():
        k = bisect.bisect_right(starts, line) - 1
        name = re.sub(r"\s+", " ", defs[k][1])[:90] if line and k >= 0 else "?"
        by_function[name][0] += n
        by_function[name][1] += s
    print("\n## functions: instructions | stall samples | definition")
    for name, (n, s) in sorted(by_function.items(), key=lambda kv: -kv[1][0]):
        print(f"{n / total_i:6.1%} | {s / total_s:6.1%} | {name}")
    # Between barriers: warp instructions per warp need the launch's warps; shares suffice.
    print("\n## between block barriers: instructions | stall samples | the barrier's line")
    n_run = s_run = 0.0
    for (line, text), (_, n, s) in zip(code, counts):
        n_run += n
        s_run += s
        if "BAR.SYNC" in text or opcode(text) == "EXIT":
            if n_run:
                text = src[line - 1].strip()[:80] if line else ""
                print(f"{n_run / total_i:6.1%} | {s_run / total_s:6.1%} | {line:5} {text}")
            n_run = s_run = 0.0
    print(f"\n## the {top} lines with the most instructions: instructions | stalls | line | source")
    for line, (n, s) in sorted(by_line.items(), key=lambda kv: -kv[1][0])[:top]:
        text = src[line - 1].strip()[:100] if line else ""
        print(f"{n / total_i:6.1%} | {s / total_s:6.1%} | {line:5} | {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
