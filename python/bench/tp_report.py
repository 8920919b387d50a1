"""The tensor-parallel decode benchmark's report (issue #17): joins ``tp_decode.py`` runs of
P = 1, 2, 4 per (model, context, placement, method), and gives each P's scaling efficiency
``t1 / (P * tP)``, the ratio ``tP / (t1 / P)`` and the issue's target (host placement, 1M tokens:
the step at P GPUs within 1.15x of one GPU's time over P), as a Markdown table and an SVG (step
time and aggregate scan rate against P, one line per cell). Standard library only, and the
package's plot palette (``fathom.eval.report.PALETTE``) for the SVG.

    python3 python/bench/tp_report.py bench/results/tp-h200-*-p1.json ...-p2.json ...-p4.json \\
        --md bench/results/tp-report.md --svg bench/results/tp-report.svg

A later file's row replaces an earlier one's of the same cell and P.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict

#: Issue #17: at P GPUs the step is at most this many times (one GPU's time) / P.
TARGET_RATIO = 1.15
#: The target's cells.
TARGET_PLACEMENT, TARGET_CONTEXT = "host", 1 << 20


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if "rows" not in data:
        raise ValueError(f"{path}: not a tp_decode result (no rows)")
    return data


def key(row: dict) -> tuple:
    return (row["model"], int(row["context"]), row["placement"], row["method"])


def ok(row: dict) -> bool:
    return row.get("status") == "ok" and row.get("step_ms") is not None


def context_label(n: int) -> str:
    n = int(n)
    if n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n % (1 << 10) == 0:
        return f"{n >> 10}k"
    return str(n)


def efficiency(t1: float, ranks: int, tp: float) -> float:
    """Scaling efficiency: ``t1 / (P * tP)`` (1 is linear)."""
    return t1 / (ranks * tp)


def ratio(t1: float, ranks: int, tp: float) -> float:
    """The step at P GPUs over the ideal ``t1 / P`` (the target asks at most ``TARGET_RATIO``)."""
    return tp / (t1 / ranks)


def is_target(k: tuple) -> bool:
    return k[2] == TARGET_PLACEMENT and k[1] == TARGET_CONTEXT


def join(rows) -> tuple:
    """``({cell: {P: row}}, [rows not ok])``: the ok rows by cell and rank count, a later row of
    the same cell and P replacing an earlier one; the others listed apart."""
    cells = defaultdict(dict)
    other = []
    for r in rows:
        if ok(r):
            cells[key(r)][int(r["ranks"])] = r
        else:
            other.append(r)
    return dict(cells), other


def fill_efficiency(rows, baseline=()) -> None:
    """Sets each ok row's ``efficiency`` against a P = 1 row of its cell among ``rows`` or
    ``baseline`` (those of ``rows`` first); None when there is none."""
    one = {key(r): r["step_ms"] for r in baseline if ok(r) and int(r["ranks"]) == 1}
    one.update({key(r): r["step_ms"] for r in rows if ok(r) and int(r["ranks"]) == 1})
    for r in rows:
        if not ok(r):
            continue
        t1 = one.get(key(r))
        r["efficiency"] = efficiency(t1, int(r["ranks"]), r["step_ms"]) if t1 else None


def summarize(cells: dict) -> list:
    """One entry per cell and P, in cell order then P: the figures and, against P = 1 when the
    cell has it, the ideal, ratio, efficiency and (target cells, P > 1) whether it is met."""
    out = []
    for k in sorted(cells, key=lambda k: (k[0], k[2], k[1], k[3])):
        by = cells[k]
        t1 = by[1]["step_ms"] if 1 in by else None
        for p in sorted(by):
            r = by[p]
            e = {
                "cell": k,
                "ranks": p,
                "step_ms": r["step_ms"],
                "rank_ms": r.get("rank_ms"),
                "all_reduce_ms": r.get("all_reduce_ms"),
                "aggregate_gbps": r.get("aggregate_gbps"),
                "ideal_ms": None,
                "ratio": None,
                "efficiency": None,
                "target": None,
            }
            if t1:
                e["ideal_ms"] = t1 / p
                e["ratio"] = ratio(t1, p, r["step_ms"])
                e["efficiency"] = efficiency(t1, p, r["step_ms"])
                if is_target(k) and p > 1:
                    e["target"] = "met" if e["ratio"] <= TARGET_RATIO else "missed"
            out.append(e)
    return out


def _f(x, fmt: str, none: str = "") -> str:
    return none if x is None else format(x, fmt)


def cell_label(k: tuple) -> str:
    return f"{k[0]} {context_label(k[1])} {k[2]} {k[3]}"


def markdown(entries: list, other=(), headers=()) -> str:
    lines = []
    for h in headers:
        lines.append(
            f"- P = {h.get('ranks')}: {h.get('gpu')}, driver {h.get('driver')}, torch "
            f"{h.get('torch')}, NCCL {h.get('nccl')}, fathom {h.get('fathom')} at "
            f"{h.get('commit')}, {h.get('date')}; all-reduce {h.get('all_reduce')}, "
            f"{h.get('steps')} steps, {h.get('slots')} slots, L2 flush {h.get('flush_l2')}, "
            f"NCCL env {h.get('nccl_env')}"
        )
    if lines:
        lines.append("")
    lines += [
        "| model | context | placement | method | P | step (ms) | t1/P (ms) | tP/(t1/P) "
        "| efficiency | all-reduces (ms) | aggregate scan (GB/s) | target |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in entries:
        m, n, pl, me = e["cell"]
        t = e["target"]
        if t is not None:
            t = f"{t} ({e['ratio']:.3f} vs {TARGET_RATIO})"
        elif is_target(e["cell"]) and e["ranks"] > 1:
            t = "no P = 1 row"
        lines.append(
            f"| {m} | {context_label(n)} | {pl} | {me} | {e['ranks']} | {e['step_ms']:.3f} "
            f"| {_f(e['ideal_ms'], '.3f')} | {_f(e['ratio'], '.3f')} "
            f"| {_f(e['efficiency'], '.3f')} | {_f(e['all_reduce_ms'], '.3f', 'none')} "
            f"| {_f(e['aggregate_gbps'], '.1f')} | {t or ''} |"
        )
    for r in other:
        lines.append(
            f"\nnot measured: {r.get('model')} {context_label(r.get('context', 0))} "
            f"{r.get('placement')} {r.get('method')} P = {r.get('ranks')}: {r.get('status')}"
        )
    verdicts = [e for e in entries if e["target"] is not None]
    if verdicts:
        met = sum(e["target"] == "met" for e in verdicts)
        lines.append(
            f"\ntarget (host, 1M: tP <= {TARGET_RATIO} x t1/P): met in {met} of {len(verdicts)}"
        )
    return "\n".join(lines) + "\n"


def _escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _log_ticks(lo: float, hi: float) -> list:
    """1-2-5 ticks from below ``lo`` to above ``hi``."""
    ticks = []
    e = math.floor(math.log10(lo))
    while True:
        for m in (1, 2, 5):
            v = m * 10.0**e
            if v >= lo / 1.0001 and v <= hi * 1.0001:
                ticks.append(v)
        if 10.0 ** (e + 1) > hi:
            break
        e += 1
    return ticks


def _step125(x: float, down: bool) -> float:
    """The 1-2-5 value at or below (``down``) or at or above ``x``."""
    e = math.floor(math.log10(x))
    vals = [m * 10.0**k for k in (e - 1, e, e + 1) for m in (1, 2, 5)]
    return (
        max(v for v in vals if v <= x * 1.0001) if down else min(v for v in vals if v >= x / 1.0001)
    )


def _nice_max(x: float) -> float:
    if x <= 0:
        return 1.0
    e = 10.0 ** math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if m * e >= x:
            return m * e
    return 10 * e


def svg(entries: list, width: int = 960, height: int = 420) -> str:
    """Two panels against P (log2 axis): the step time (log axis; dotted, t1/P of the target's
    cells) and the aggregate scan rate, one line per cell, host dashed."""
    from fathom.eval.report import PALETTE

    by = defaultdict(dict)
    for e in entries:
        by[e["cell"]][e["ranks"]] = e
    ps = sorted({e["ranks"] for e in entries}) or [1]
    left, right, top, bottom, gap = 60, 250, 30, 50, 70
    pw = (width - left - right - gap) / 2
    ph = height - top - bottom
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    lp = [math.log2(p) for p in ps]

    def x(p, x0):
        if len(ps) == 1:
            return x0 + pw / 2
        return x0 + pw * (math.log2(p) - lp[0]) / (lp[-1] - lp[0])

    times = [e["step_ms"] for e in entries if e["step_ms"]]
    times += [e["ideal_ms"] for e in entries if e["ideal_ms"] and is_target(e["cell"])]
    lo, hi = (min(times), max(times)) if times else (1.0, 10.0)
    lo, hi = _step125(lo, down=True), _step125(hi, down=False)
    if hi <= lo:
        hi = lo * 10

    def yt(v):
        return top + ph * (1 - (math.log10(v) - math.log10(lo)) / (math.log10(hi / lo)))

    rates = [e["aggregate_gbps"] for e in entries if e["aggregate_gbps"]]
    rmax = _nice_max(max(rates) * 1.05) if rates else 1.0

    def yr(v):
        return top + ph * (1 - v / rmax)

    panels = [
        (left, "step time (ms, log)", yt, _log_ticks(lo, hi), "step_ms", "{:g}"),
        (left + pw + gap, "aggregate scan rate (GB/s)", yr, None, "aggregate_gbps", "{:g}"),
    ]
    for x0, title, y, ticks, _, fmt in panels:
        if ticks is None:
            ticks = [rmax * i / 5 for i in range(6)]
        for t in ticks:
            out.append(
                f'<line x1="{x0}" x2="{x0 + pw:.1f}" y1="{y(t):.1f}" y2="{y(t):.1f}" '
                'stroke="#ddd"/>'
            )
            out.append(
                f'<text x="{x0 - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{fmt.format(t)}</text>'
            )
        for p in ps:
            out.append(
                f'<text x="{x(p, x0):.1f}" y="{top + ph + 18}" text-anchor="middle">{p}</text>'
            )
        out.append(
            f'<text x="{x0 + pw / 2:.1f}" y="{height - 12}" text-anchor="middle">GPUs (P)</text>'
        )
        out.append(
            f'<text x="{x0 + pw / 2:.1f}" y="{top - 10}" text-anchor="middle">{title}</text>'
        )
    for i, (k, pts) in enumerate(sorted(by.items(), key=lambda kv: cell_label(kv[0]))):
        color = PALETTE[i % len(PALETTE)]
        dash = ' stroke-dasharray="4 3"' if k[2] == "host" else ""
        for x0, _, y, _, field, _ in panels:
            have = [(p, pts[p][field]) for p in ps if p in pts and pts[p][field]]
            if not have:
                continue
            path = " ".join(f"{x(p, x0):.1f},{y(v):.1f}" for p, v in have)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.6"{dash}/>'
            )
            for p, v in have:
                out.append(f'<circle cx="{x(p, x0):.1f}" cy="{y(v):.1f}" r="2.5" fill="{color}"/>')
            if field == "step_ms" and is_target(k):
                ideal = [(p, pts[p]["ideal_ms"]) for p in ps if p in pts and pts[p]["ideal_ms"]]
                if len(ideal) > 1:
                    path = " ".join(f"{x(p, x0):.1f},{y(v):.1f}" for p, v in ideal)
                    out.append(
                        f'<polyline points="{path}" fill="none" stroke="{color}" '
                        'stroke-width="1" stroke-dasharray="1 3"/>'
                    )
        lx = width - right + 12
        ly = top + 12 + 14 * i
        out.append(
            f'<line x1="{lx}" x2="{lx + 20}" y1="{ly - 4}" y2="{ly - 4}" '
            f'stroke="{color}" stroke-width="2"{dash}/>'
        )
        out.append(f'<text x="{lx + 26}" y="{ly}">{_escape(cell_label(k))}</text>')
    ly = top + 12 + 14 * (len(by) + 1)
    out.append(
        f'<text x="{width - right + 12}" y="{ly}" fill="#555">dotted: t1/P (host 1M target '
        f"{TARGET_RATIO}x)</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def report(paths) -> tuple:
    """``(markdown, svg, entries)`` of the runs in ``paths``."""
    runs = [load(p) for p in paths]
    rows = [r for d in runs for r in d["rows"]]
    cells, other = join(rows)
    entries = summarize(cells)
    headers = [d.get("header", {}) for d in runs]
    return markdown(entries, other, headers), svg(entries), entries


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="tp_decode JSON files (P = 1, 2, 4, ...)")
    p.add_argument("--md", help="write the Markdown table here")
    p.add_argument("--svg", help="write the plot here")
    a = p.parse_args(argv)
    md, plot, _ = report(a.runs)
    if a.md:
        with open(a.md, "w", encoding="utf-8") as f:
            f.write(md)
    if a.svg:
        with open(a.svg, "w", encoding="utf-8") as f:
            f.write(plot)
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
