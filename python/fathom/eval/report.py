"""The evaluation's outputs: one JSON file rewritten (atomically) after every cell, so a run cut
short by its time budget still leaves a valid partial result, and at the end a table and an SVG.
Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict


class Results:
    def __init__(self, path: str, header: dict):
        self.path = path
        self.data = {
            "header": header,
            "rows": [],
            "teacher_forced": [],
            "speed": [],
            "errors": [],
            "complete": False,
        }

    def add(self, kind: str, row: dict) -> None:
        self.data[kind].append(row)
        self.write()

    def finish(self, complete: bool, note: str | None = None) -> None:
        self.data["complete"] = complete
        if note:
            self.data["header"]["note"] = note
        self.write()

    def write(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1)
            f.write("\n")
        os.replace(tmp, self.path)


# Line colours of the plots (the evaluation's and the benchmarks' beside it).
PALETTE = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#000000",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
]


def driver_version() -> str | None:
    """The NVIDIA driver's version as nvidia-smi reports it, or None without one."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        lines = out.stdout.strip().splitlines()
        return lines[0] if out.returncode == 0 and lines else None
    except (OSError, subprocess.SubprocessError):
        return None


def label(row: dict) -> str:
    return (
        row["method"]
        if row.get("placement", "hbm") == "hbm"
        else f"{row['method']}@{row['placement']}"
    )


def table(data: dict) -> str:
    """Markdown: score (% of gold strings found) per method and placement, task and context."""
    rows = data["rows"]
    lines = []
    contexts = sorted({r["context"] for r in rows})
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    for n in contexts:
        cells = {(label(r), r["task"]): r for r in rows if r["context"] == n}
        methods = list(dict.fromkeys(label(r) for r in rows if r["context"] == n))
        common = _common_tasks(rows, n)
        ran = [t for t in tasks if any((m, t) in cells for m in methods)]
        lines.append(
            f"\ncontext {n} tokens: score (% of gold strings found), samples per cell in brackets\n"
        )
        if common != ran:
            # A partial run: a mean over different tasks would not compare methods.
            over = ", ".join(common) or "no task"
            lines.append(f"mean over {over}, the tasks every method ran\n")
        lines.append("| method | " + " | ".join(tasks) + " | mean |")
        lines.append("| --- |" + " --- |" * (len(tasks) + 1))
        for m in methods:
            got = [cells.get((m, t)) for t in tasks]
            scores = [cells[(m, t)]["score"] for t in common]
            mean = f"{sum(scores) / len(scores):.1f}" if scores else "-"
            lines.append(
                f"| {m} | "
                + " | ".join(f"{c['score']:.1f} ({c['samples']})" if c else "-" for c in got)
                + f" | {mean} |"
            )
    if data.get("teacher_forced"):
        lines.append("\nteacher-forced over the haystack text, against dense\n")
        lines.append(
            "| method | context | steps | next-token agreement % | perplexity ratio | KL (nats) |"
        )
        lines.append("| --- | --- | --- | --- | --- | --- |")
        for r in data["teacher_forced"]:
            lines.append(
                f"| {label(r)} | {r['context']} | {r['steps']} | {r['agreement']:.2f} | "
                f"{r['ppl_ratio']:.4f} | {r['kl']:.5f} |"
            )
    if data.get("speed"):
        lines.append("\ndecode speed, batch 1\n")
        lines.append("| method | context | tokens | tokens/s | GPU ms per token (median) |")
        lines.append("| --- | --- | --- | --- | --- |")
        for r in data["speed"]:
            gpu = f"{r['gpu_ms_per_token']:.2f}" if r.get("gpu_ms_per_token") is not None else "-"
            lines.append(
                f"| {label(r)} | {r['context']} | {r['tokens']} | {r['tokens_per_s']:.1f} | {gpu} |"
            )
    for r in data.get("errors", []):
        lines.append(
            f"\nnot run: {r['method']}@{r['placement']} ({r['task']}, {r['context']}): {r['error']}"
        )
    return "\n".join(lines).lstrip("\n") + "\n"


def svg(data: dict, width: int = 720, height: int = 420) -> str:
    """Mean score over the tasks every method ran, against context, one line per method (and
    placement)."""
    by = defaultdict(dict)
    for n_m, scores in _means(data["rows"]).items():
        by[n_m[1]][n_m[0]] = scores
    contexts = sorted({r["context"] for r in data["rows"]})
    left, right, top, bottom = 60, 190, 20, 50
    pw, ph = width - left - right, height - top - bottom
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]

    def x(n):
        i = contexts.index(n)
        return left + (pw * i / max(1, len(contexts) - 1) if len(contexts) > 1 else pw / 2)

    def y(s):
        return top + ph * (1 - s / 100)

    for s in range(0, 101, 20):
        out.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{y(s):.1f}" y2="{y(s):.1f}" stroke="#ddd"/>'
        )
        out.append(f'<text x="{left - 6}" y="{y(s) + 4:.1f}" text-anchor="end">{s}</text>')
    for n in contexts:
        out.append(f'<text x="{x(n):.1f}" y="{top + ph + 18}" text-anchor="middle">{n}</text>')
    out.append(
        f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">context (tokens)</text>'
    )
    out.append(
        f'<text x="14" y="{top + ph / 2}" transform="rotate(-90 14 {top + ph / 2})" '
        'text-anchor="middle">mean score over tasks (%)</text>'
    )
    for i, (m, pts) in enumerate(by.items()):
        color = PALETTE[i % len(PALETTE)]
        dash = ' stroke-dasharray="4 3"' if "@host" in m else ""
        path = " ".join(f"{x(n):.1f},{y(pts[n]):.1f}" for n in contexts if n in pts)
        out.append(
            f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.6"{dash}/>'
        )
        for n in contexts:
            if n in pts:
                out.append(f'<circle cx="{x(n):.1f}" cy="{y(pts[n]):.1f}" r="2.5" fill="{color}"/>')
        ly = top + 12 + 14 * i
        out.append(
            f'<line x1="{left + pw + 12}" x2="{left + pw + 32}" y1="{ly - 4}" y2="{ly - 4}" '
            f'stroke="{color}" stroke-width="2"{dash}/>'
        )
        out.append(f'<text x="{left + pw + 38}" y="{ly}">{_escape(m)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _common_tasks(rows, context: int) -> list:
    """The tasks that every method (and placement) of `context` has a score for, in run order."""
    at = [r for r in rows if r["context"] == context]
    tasks = list(dict.fromkeys(r["task"] for r in at))
    have = defaultdict(set)
    for r in at:
        have[label(r)].add(r["task"])
    return [t for t in tasks if all(t in done for done in have.values())]


def _means(rows):
    """Mean score per (context, method) over the context's common tasks (`_common_tasks`)."""
    acc = defaultdict(list)
    common = {n: set(_common_tasks(rows, n)) for n in {r["context"] for r in rows}}
    for r in rows:
        if r["task"] in common[r["context"]]:
            acc[(r["context"], label(r))].append(r["score"])
    return {k: sum(v) / len(v) for k, v in acc.items()}


def _escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
