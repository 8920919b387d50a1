"""Exact attention over one layer's whole bf16 K/V cache in HBM: the figure a sparse step in HBM
must beat (issue #15's table: "HBM 1M: fathom(48) per layer vs exact cuDNN attention").

qwen3-8b's layer by default (32 query heads, 8 KV heads, D = 128), one decode token, batch 1,
bf16 K and V of ``context`` tokens, through ``torch.nn.functional.scaled_dot_product_attention``
with each backend that accepts the case (cuDNN, flash, efficient, math), plus the bytes it must
read and the rate that implies. CUDA events on torch's stream after warm-up, median of
``--reps`` runs, random (not zero) inputs; every backend's output is checked against the math
backend's in fp32 before it is timed.

Run on the GPU machine (torch only; the fathom package is not needed):

    python3 python/bench/exact_attention.py --contexts 32k,128k,1m \
        --commit $(git rev-parse --short HEAD) \
        --out bench/results/exact-attention-h200-<date>-<commit>.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

import torch
import torch.nn.functional as F
from cuda_timing import median_ms
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


def parse_context(text: str) -> int:
    t = text.strip().lower()
    for suffix, scale in (("k", 1 << 10), ("m", 1 << 20)):
        if t.endswith(suffix):
            return int(t[: -len(suffix)]) * scale
    return int(t)


def driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="32k,128k,1m")
    ap.add_argument("--heads", type=int, default=32, help="query heads")
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.heads % args.kv_heads:
        ap.error(f"--heads ({args.heads}) must be a multiple of --kv-heads ({args.kv_heads})")

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0x5EED)
    rows = []
    try:
        contexts = [parse_context(c) for c in args.contexts.split(",")]
    except ValueError:
        ap.error(
            f"--contexts {args.contexts!r}: write token counts or 32k, 128k, 1m, comma-separated"
        )
    for ctx in contexts:
        q = torch.randn(
            1, args.heads, 1, args.head_dim, device=dev, generator=gen, dtype=torch.bfloat16
        )
        k = torch.randn(
            1, args.kv_heads, ctx, args.head_dim, device=dev, generator=gen, dtype=torch.bfloat16
        )
        v = torch.randn(
            1, args.kv_heads, ctx, args.head_dim, device=dev, generator=gen, dtype=torch.bfloat16
        )
        with sdpa_kernel([SDPBackend.MATH]):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
        kv_bytes = 2 * k.numel() * k.element_size()
        for name, backend in BACKENDS.items():
            out = torch.full_like(q, float("nan"))

            def call(out=out, q=q, k=k, v=v):
                out.copy_(F.scaled_dot_product_attention(q, k, v, enable_gqa=True))

            row = {"context": ctx, "backend": name, "kv_bytes": kv_bytes}
            # The backend is chosen once, outside the timed calls (the context manager's host
            # work would otherwise sit between the events at 32k).
            chosen = sdpa_kernel([backend])
            chosen.__enter__()
            try:
                call()
                torch.cuda.synchronize()
            except RuntimeError as e:
                chosen.__exit__(None, None, None)
                row["error"] = str(e).splitlines()[0][:200]
                rows.append(row)
                print(f"{ctx:>8} {name:>9}: not available ({row['error'][:80]})")
                continue
            err = (out.float() - ref).abs().max().item()
            row["max_abs_err_vs_fp32"] = err
            if not err < 2e-2:
                row["error"] = f"output differs from the fp32 math backend by {err}"
                rows.append(row)
                print(f"{ctx:>8} {name:>9}: WRONG ({err})")
                chosen.__exit__(None, None, None)
                continue
            for _ in range(5):
                call()
            ms = median_ms(call, args.reps)
            chosen.__exit__(None, None, None)
            row["ms"] = ms
            row["gb_per_s"] = kv_bytes / (ms * 1e-3) / 1e9
            rows.append(row)
            print(f"{ctx:>8} {name:>9}: {ms:.4f} ms  {row['gb_per_s']:.0f} GB/s  err {err:.2e}")
        torch.cuda.empty_cache()
    header = {
        "gpu": torch.cuda.get_device_name(dev),
        "driver": driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "commit": args.commit,
        "date_unix": int(time.time()),
        "shape": {
            "heads": args.heads,
            "kv_heads": args.kv_heads,
            "head_dim": args.head_dim,
            "batch": 1,
        },
        "reps": args.reps,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"header": header, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
