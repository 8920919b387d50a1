"""python -m fathom.eval: RULER-style greedy decoding, teacher-forced metrics and decode speed of
a real model through fathom (issue #16). `--help` lists the options; README "Inside a real model"
has the commands."""

from __future__ import annotations

import argparse
import sys

from .tasks import TASKS


def _list(text: str) -> list[str]:
    # Method strings hold no spaces or commas inside parentheses, so a comma splits them.
    return [t.strip() for t in text.split(",") if t.strip()]


def _contexts(text: str) -> list[int]:
    out = []
    for t in _list(text):
        t = t.lower()
        out.append(int(float(t[:-1]) * 1024) if t.endswith("k") else int(t))
    return out


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="python -m fathom.eval", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model-dir", default="/tmp/fathom-models", help="folder holding the GGUF file"
    )
    ap.add_argument("--gguf", default="smollm2.gguf", help="GGUF file name in --model-dir")
    ap.add_argument("--device", default="cuda", help="torch device (cuda, cuda:1, cpu)")
    ap.add_argument(
        "--backend",
        default="fathom",
        choices=["fathom", "reference"],
        help="reference: the torch §6 oracle (dense and oracle only), to try the command "
        "without fathom",
    )
    ap.add_argument(
        "--basis",
        default=None,
        choices=["raw", "klt"],
        help="the store's basis instead of the model shape's own (loki needs klt)",
    )
    ap.add_argument(
        "--methods",
        type=_list,
        default=None,
        help="comma-separated method strings (default: the issue's list, with the same-share "
        "budgets at D=64)",
    )
    ap.add_argument(
        "--host-methods",
        type=_list,
        default=None,
        help="fathom methods that also run with the host placement (default fathom(48), "
        "fathom(92) and their D=64 equivalents)",
    )
    ap.add_argument(
        "--contexts",
        type=_contexts,
        default=[4096, 8192, 2048],
        help="e.g. 4k,8k,2k (run in this order)",
    )
    ap.add_argument("--tasks", type=_list, default=list(TASKS), help=", ".join(TASKS))
    ap.add_argument("--samples", type=int, default=4, help="samples per cell, decoded as one batch")
    ap.add_argument("--k", type=int, default=None, help="top-k per query head (default paper_k(n))")
    ap.add_argument(
        "--max-new-tokens", type=int, default=None, help="override every task's generation length"
    )
    ap.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="seconds; stops before the next cell once spent",
    )
    ap.add_argument("--tf-steps", type=int, default=64, help="teacher-forced tokens per sample")
    ap.add_argument("--speed-tokens", type=int, default=64, help="tokens timed per speed run")
    ap.add_argument("--no-teacher-forced", dest="teacher_forced", action="store_false")
    ap.add_argument("--no-speed", dest="speed", action="store_false")
    ap.add_argument(
        "--haystack",
        default=None,
        help="a UTF-8 text file (default: the Python language reference)",
    )
    ap.add_argument("--out-dir", default="bench/results")
    ap.add_argument(
        "--commit", default=None, help="recorded in the header (default $FATHOM_COMMIT, else git)"
    )
    ap.add_argument(
        "--keep-text", action="store_true", help="keep every generation in the JSON rows"
    )
    a = ap.parse_args(argv)
    bad = [t for t in a.tasks if t not in TASKS]
    if bad:
        ap.error(f"unknown tasks {bad}: expected some of {', '.join(TASKS)}")
    if a.samples < 1:
        ap.error("--samples must be at least 1")
    return a


def main(argv=None) -> int:
    args = parse(argv)
    from .runner import Run  # torch and transformers only from here on

    return Run(args).run()


if __name__ == "__main__":
    sys.exit(main())
