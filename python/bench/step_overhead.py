"""What the Python call adds to the decode step's GPU time (issue #13's target: at most 5% at
32k, none at 1M), beside step-bench's figure for the same cell.

qwen3-8b's shape, one layer (step-bench times all 36 layers per step: its per-step figure is
divided by the model's layers), batch 1, fathom(48), k = paper_k = 512, random keys (timing does
not depend on the values). Per context and placement, with CUDA events on torch's stream:

- ``eager``: N back-to-back ``Decoder.step`` calls from Python, GPU time per call (the host
  enqueues while the GPU runs; a figure above the graph's means the host is the bound);
- ``graph``: the same call captured once with ``torch.cuda.graph`` and replayed N times, which
  is what step-bench times (it captures each layer's step);
- ``native``: one call that queues the same step N times from Rust (``_repeat``), so the same
  work on the same data without a Python call per step. ``eager / native - 1`` is what the
  Python call adds; step-bench's figure (synthetic keys of SPEC §11, a different selection and
  union) is printed beside it for scale, not for the ratio.

Run on the GPU machine, after installing the wheel (see README "PyTorch"):

    PYTHONPATH=/tmp/site python3 python/bench/step_overhead.py \
        --step-bench bench/results/step-h200-2026-11-29-9f1f740.json --out overhead.json
"""

from __future__ import annotations

import argparse
import json

import torch
from cuda_timing import median_ms

import fathom


def step_bench_ms(path, context, placement, layers) -> float | None:
    if path is None:
        return None
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)["rows"]
    for r in rows:
        if (r["method"], r["context"], r["batch"], r["placement"]) == (
            "fathom(48)",
            context,
            1,
            placement,
        ) and r.get("gpu_ms") is not None:
            return r["gpu_ms"] / layers
    return None


def cell(context: int, placement: str, reps: int) -> dict:
    shape = fathom.ModelShape.preset("qwen3-8b")
    one = fathom.ModelShape.from_hf_config(
        {
            "model_type": "qwen3",
            "num_hidden_layers": 1,
            "num_attention_heads": shape.q_heads,
            "num_key_value_heads": shape.kv_heads,
            "head_dim": shape.head_dim,
        }
    )
    h, d = shape.kv_heads, shape.head_dim
    g = torch.Generator(device="cuda").manual_seed(1)
    keys = torch.randn(h, context, d, device="cuda", generator=g).bfloat16()
    values = torch.randn(h, context, d, device="cuda", generator=g).bfloat16()
    cal_q = torch.randn(shape.q_heads, 16, d)
    cal = fathom.Calibration.fit(one, [keys[:, :4096].float().cpu()], [cal_q])
    store = fathom.KeyStore(one, placement=placement, capacity_tokens=context + 1024)
    seq = store.create_sequence()
    store.prefill(seq, 0, keys, values)
    del keys, values
    dec = fathom.Decoder(one, calibration=cal)
    q = torch.randn(1, shape.q_heads, d, device="cuda")
    out = torch.zeros_like(q)

    def call(repeat=1):
        dec.step(store, [seq], 0, q, out, method="fathom(48)", k=512, _repeat=repeat)

    for _ in range(5):
        call()
    eager = median_ms(call, reps)
    native = median_ms(lambda: call(reps), 5) / reps
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    replay = median_ms(graph.replay, reps)
    return {
        "context": context,
        "placement": placement,
        "eager_ms": eager,
        "graph_ms": replay,
        "native_ms": native,
        "python_overhead": eager / native - 1,
        "graph_vs_native": replay / native - 1,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step-bench", help="a step-bench JSON of the same GPU (bench/results/)")
    p.add_argument("--contexts", default="32768,1048576")
    p.add_argument("--placements", default="hbm,host")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--out", default="step-overhead.json")
    a = p.parse_args()
    rows = []
    for placement in a.placements.split(","):
        for context in [int(c) for c in a.contexts.split(",")]:
            row = cell(context, placement, a.reps)
            rust = step_bench_ms(a.step_bench, context, placement, 36)
            row["step_bench_ms_per_layer"] = rust
            if rust:
                row["native_vs_step_bench"] = row["native_ms"] / rust - 1
            rows.append(row)
            print(json.dumps(row))
    header = {
        "gpu": torch.cuda.get_device_name(),
        "fathom": fathom.__version__,
        "torch": torch.__version__,
        "method": "fathom(48)",
        "batch": 1,
        "k": 512,
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"header": header, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
