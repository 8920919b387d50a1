"""Tensor-parallel decode step over P GPUs (issue #17): one process per GPU under
torch.distributed (NCCL), each rank stepping its heads of every layer through the Python package,
the layer's output all-reduced as a tensor-parallel attention block's output projection would be.

Per rank: ``shape.shard(rank, P)`` gives the rank's heads (vLLM's split, ``runtime::shard``); the
rank's store holds ``--slots`` distinct layers of random bf16 K/V of those heads (a 36-layer
store of 1M tokens would not fit host memory), and a decode step steps all ``shape.layers``
layers, layer ``l`` reading slot ``l % slots``. The calibration is fitted once for the whole
model's heads from a small random sample (the same seed on every rank, as a deployment fits once)
and sliced with ``Calibration.shard``; timing does not depend on the values. After each layer's
``Decoder.step``, a ``(1, hidden)`` bf16 tensor (hidden = the whole model's ``H_q * D``) is
all-reduced (SUM), the partial sum a row-parallel output projection would produce, so the next
layer waits for every rank as it would in a model.

Timing: CUDA events on torch's stream, ``--warmup`` whole-model steps, then the median of
``--steps``. With ``--flush-l2`` (the default) a read of twice the L2 size runs before each
layer, outside the timed interval, and a step's time is the sum of its layers' intervals: in a
model the MLP between two attention layers evicts the scan's planes, and without the flush the
few slots of a rank at P = 4 (12 MB a layer at 1M) would be read from L2, not over the link.
The all-reduces alone are timed the same way (``all_reduce_ms``).

Bytes: the package does not report what a step read, so ``bytes_per_step`` is the scan's planes,
``b / 8`` bytes per token per KV head of ``fathom(b)`` (``scan_bytes``), summed over layers and
ranks (a replicated KV head counts on each rank that reads it); the fetched winner rows, block
scales and the union are left out, so the rate is a lower bound. Other methods have no figure.

Run (README "Several GPUs"; the wheel installed as in README "PyTorch"):

    NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site torchrun --standalone --nproc_per_node P \\
        python/bench/tp_decode.py --model qwen3-8b --contexts 131072,1048576 \\
        --placements host,hbm --out DIR

Without torchrun (no RANK/WORLD_SIZE) it runs as one rank without a process group, so no
all-reduce (``"all_reduce": "none"``), or with ``--group`` in a one-rank NCCL group. Rank 0
rewrites ``DIR/tp-<gpu>-<date>-<commit>-<models>-p<P>.json`` after every cell; a cell that does
not fit (out of device or pinned memory, ``CapacityError``) is a row with status
``"skipped: ..."``. ``python/bench/tp_report.py`` joins the runs of P = 1, 2, 4.

Only the standard library is imported at module level (torch and fathom inside ``main``), so
the arithmetic here is tested without torch or a GPU (``python/tests/test_tp_bench.py``).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import re
import statistics
import sys
import tempfile

# The host-1M target of issue #17 and the efficiency arithmetic live in the report; the rows
# written here carry an efficiency when a P = 1 row is at hand (this run or --baseline).
import tp_report

#: The bytes a full-width read of L2 must exceed to evict it, when torch does not say its size.
DEFAULT_L2_BYTES = 64 << 20


def parse_context(text: str) -> int:
    """``131072``, ``128k`` or ``1m`` (as step-bench takes them) -> tokens."""
    t = text.strip().lower()
    unit = 1
    if t.endswith("k"):
        t, unit = t[:-1], 1 << 10
    elif t.endswith("m"):
        t, unit = t[:-1], 1 << 20
    if not t.isdigit() or int(t) == 0:
        raise ValueError(f"a context is a positive token count (131072, 128k, 1m), not {text!r}")
    return int(t) * unit


def method_bits(method: str) -> int | None:
    """The bits per token per KV head the scan of ``fathom(b)`` reads, else None."""
    m = re.fullmatch(r"\s*fathom\(\s*(\d+)\s*\)\s*", method)
    return int(m.group(1)) if m else None


def scan_bytes(method: str, tokens: int, kv_heads: int, layers: int) -> int | None:
    """Bytes of bit planes one decode step of ``method`` scans over ``tokens`` tokens of
    ``kv_heads`` KV heads in each of ``layers`` layers: ``b / 8`` per token and head for
    ``fathom(b)`` (rows, scales and the union left out); None for other methods."""
    bits = method_bits(method)
    if bits is None:
        return None
    return bits * tokens * kv_heads * layers // 8


def gbps(nbytes: int | None, ms: float | None) -> float | None:
    """10^9 bytes per second of ``nbytes`` in ``ms`` milliseconds."""
    if nbytes is None or not ms or ms <= 0:
        return None
    return nbytes / (ms * 1e6)


def gpu_slug(name: str) -> str:
    """``NVIDIA H200`` -> ``h200`` (as step-bench names its records)."""
    s = name.strip().lower()
    if s.startswith("nvidia"):
        s = s[len("nvidia") :]
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    return s or "gpu"


def result_name(gpu: str, date: str, commit: str, models: list, ranks: int) -> str:
    """``tp-h200-2026-12-03-abc1234-qwen3-8b-p2.json``."""
    tag = "+".join(models)
    return f"tp-{gpu_slug(gpu)}-{date}-{commit}-{tag}-p{ranks}.json"


def world_from_env(env) -> tuple:
    """``(rank, world_size, local_rank, launched)``: torchrun's variables, or one rank when
    they are absent (``launched`` False)."""
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return 0, 1, 0, False
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    local = int(env.get("LOCAL_RANK", rank))
    return rank, world, local, True


def slot_config(shape, slots: int) -> dict:
    """A Hugging Face config for ``shape``'s heads with ``slots`` layers (``qwen3`` gives QK-norm
    and the raw basis, ``llama`` neither and the KLT basis; ``slot_shape`` fixes the basis when
    a shape has another combination)."""
    return {
        "model_type": "qwen3" if shape.qk_norm else "llama",
        "num_hidden_layers": slots,
        "num_attention_heads": shape.q_heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "hidden_size": shape.q_heads * shape.head_dim,
    }


def slot_shape(fathom, shape, slots: int):
    """``shape`` with ``slots`` layers."""
    s = fathom.ModelShape.from_hf_config(slot_config(shape, slots))
    return s if s.basis == shape.basis else s.with_basis(shape.basis)


def rank_setup(
    fathom, model: str, slots: int, rank: int, ranks: int, cal_tokens: int = 1024, seed: int = 1
) -> dict:
    """Rank ``rank`` of ``ranks``'s share of ``model`` held in ``slots`` layers: the slot shape of
    the whole model, the rank's shape, its KV and query heads, and its slice of a calibration of
    the whole model fitted from random keys and queries (numpy; the same on every rank)."""
    import numpy as np

    shape = fathom.ModelShape.preset(model)
    slots = max(1, min(slots, shape.layers))
    whole = slot_shape(fathom, shape, slots)
    part, kv, q = whole.shard(rank, ranks)
    rng = np.random.default_rng(seed)
    d = shape.head_dim
    keys = [
        rng.standard_normal((shape.kv_heads, cal_tokens, d), dtype=np.float32) for _ in range(slots)
    ]
    queries = [rng.standard_normal((shape.q_heads, 16, d), dtype=np.float32) for _ in range(slots)]
    cal = fathom.Calibration.fit(whole, keys, queries)
    return {
        "shape": shape,
        "slots": slots,
        "whole": whole,
        "part": part,
        "kv_heads": list(kv),
        "q_heads": list(q),
        "calibration": cal.shard(whole, rank, ranks),
        "hidden": shape.q_heads * d,
    }


def combine(cell: dict, per_rank: list, all_reduce: str) -> dict:
    """One row from every rank's figures (``ms``, ``bytes``, ``all_reduce_ms``): the step is the
    slowest rank's, the bytes the sum, the aggregate rate their quotient."""
    ms = [r["ms"] for r in per_rank]
    step = max(ms)
    nbytes = None
    if all(r.get("bytes") is not None for r in per_rank):
        nbytes = sum(r["bytes"] for r in per_rank)
    ar = [r.get("all_reduce_ms") for r in per_rank]
    return {
        **cell,
        "status": "ok",
        "ranks": len(per_rank),
        "rank_ms": ms,
        "step_ms": step,
        "all_reduce": all_reduce,
        "all_reduce_ms": max(ar) if all(a is not None for a in ar) else None,
        "bytes_per_step": nbytes,
        "aggregate_gbps": gbps(nbytes, step),
        "rank_gbps": [gbps(r.get("bytes"), r["ms"]) for r in per_rank],
        "per_rank": per_rank,
        "efficiency": 1.0 if len(per_rank) == 1 else None,
    }


def skipped(cell: dict, ranks: int, why: str) -> dict:
    return {**cell, "status": why, "ranks": ranks, "step_ms": None, "efficiency": None}


def progress(row: dict) -> str:
    head = (
        f"[tp] {row['model']} {tp_report.context_label(row['context'])} {row['placement']} "
        f"{row['method']} P={row['ranks']}"
    )
    if row["status"] != "ok":
        return f"{head}: {row['status']}"
    rate = row.get("aggregate_gbps")
    ar = row.get("all_reduce_ms")
    return (
        f"{head}: step {row['step_ms']:.3f} ms (ranks "
        + " ".join(f"{m:.3f}" for m in row["rank_ms"])
        + ")"
        + (f", all-reduces {ar:.3f} ms" if ar is not None else ", no all-reduce")
        + (f", {rate:.1f} GB/s scanned" if rate is not None else "")
    )


def _write(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen3-8b", help="presets, comma-separated")
    p.add_argument("--contexts", default="131072,1048576")
    p.add_argument("--placements", default="host,hbm")
    p.add_argument("--methods", default="fathom(48)", help="';'-separated method strings")
    p.add_argument("--k", type=int, default=None, help="top-k (default: the paper's k)")
    p.add_argument("--slots", type=int, default=2, help="distinct layers a rank's store holds")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--calibration-tokens", type=int, default=1024)
    p.add_argument(
        "--no-flush-l2",
        dest="flush_l2",
        action="store_false",
        help="time whole steps back to back, without evicting L2 before each layer",
    )
    p.add_argument(
        "--group",
        action="store_true",
        help="without torchrun, step in a one-rank NCCL group (times its all-reduce)",
    )
    p.add_argument("--baseline", nargs="*", default=[], help="JSON runs with the P = 1 rows")
    p.add_argument("--commit", default=os.environ.get("FATHOM_COMMIT", "unknown"))
    p.add_argument("--out", default=".")
    a = p.parse_args(argv)
    a.models = [m.strip() for m in a.model.split(",") if m.strip()]
    a.context_list = [parse_context(c) for c in a.contexts.split(",") if c.strip()]
    a.placement_list = [x.strip() for x in a.placements.split(",") if x.strip()]
    a.method_list = [x.strip() for x in a.methods.split(";") if x.strip()]
    if a.steps < 1 or a.warmup < 0 or a.slots < 1:
        p.error("--steps and --slots must be at least 1, --warmup at least 0")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    rank, world, local_rank, launched = world_from_env(os.environ)
    # Issue #17: NVLink multicast (NVLS) stays off; set before NCCL reads its environment.
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

    import torch
    import torch.distributed as dist

    import fathom
    from fathom.eval import report

    torch.cuda.set_device(local_rank)
    device = f"cuda:{local_rank}"
    group = False
    if launched or a.group:
        kw = {}
        if not launched:
            fd, store_file = tempfile.mkstemp(prefix="tp-decode-")
            os.close(fd)
            os.unlink(store_file)
            kw = {"init_method": f"file://{store_file}", "rank": 0, "world_size": 1}
        try:
            dist.init_process_group("nccl", device_id=torch.device(device), **kw)
        except TypeError:  # torch < 2.3: no device_id
            dist.init_process_group("nccl", **kw)
        group = True
        world = dist.get_world_size()
        rank = dist.get_rank()
    all_reduce = "nccl" if group else "none"

    def gather(obj):
        if not group:
            return [obj]
        got = [None] * world
        dist.all_gather_object(got, obj)
        return got

    def barrier():
        if group:
            dist.barrier(device_ids=[local_rank])
        torch.cuda.synchronize()

    def agree(status: str) -> str:
        """Every rank's status; the first that is not ok wins (so no rank waits alone)."""
        bad = [s for s in gather(status) if s != "ok"]
        return bad[0] if bad else "ok"

    props = torch.cuda.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES)
    flush_buf = torch.ones(max(2 * l2, 1 << 20) // 4, device=device) if a.flush_l2 else None

    def flush():
        flush_buf.sum()

    ranks_info = gather(
        {"rank": rank, "local_rank": local_rank, "gpu": torch.cuda.get_device_name(device)}
    )
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    nccl = None
    try:
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # the header's NCCL version is informational
        pass
    header = {
        "benchmark": "tp_decode",
        "gpu": torch.cuda.get_device_name(device),
        "driver": report.driver_version(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "nccl": nccl,
        "fathom": fathom.__version__,
        "commit": a.commit,
        "date": date,
        "ranks": world,
        "launcher": "torchrun" if launched else "python",
        "all_reduce": all_reduce,
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "rank_devices": ranks_info,
        "steps": a.steps,
        "warmup": a.warmup,
        "slots": a.slots,
        "flush_l2": a.flush_l2,
        "l2_bytes": l2,
        "k": a.k if a.k is not None else "paper_k",
        "q_dtype": "float32",
        "bytes": "scan planes only: b/8 per token per KV head of fathom(b), rows left out",
    }
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, result_name(header["gpu"], date, a.commit, a.models, world))
    baseline = []
    for b in a.baseline:
        baseline.extend(tp_report.load(b)["rows"])
    rows = []

    def emit(row: dict) -> None:
        rows.append(row)
        if rank == 0:
            tp_report.fill_efficiency(rows, baseline)
            _write(path, {"header": header, "rows": rows})
            print(progress(row), file=sys.stderr, flush=True)

    if group:  # NCCL's communicator is made by the first collective: not inside a timing
        warm = torch.zeros(1, device=device)
        dist.all_reduce(warm)
        torch.cuda.synchronize()

    for model in a.models:
        try:
            setup = rank_setup(fathom, model, a.slots, rank, world, a.calibration_tokens)
            status = "ok"
        except fathom.FathomError as e:
            setup, status = None, f"skipped: {type(e).__name__}: {e}"
        status = agree(status)
        for placement in a.placement_list:
            for context in a.context_list:
                cells = [
                    {"model": model, "context": context, "placement": placement, "method": m}
                    for m in a.method_list
                ]
                if status != "ok":
                    for c in cells:
                        emit(skipped(c, world, status))
                    continue
                built = build(torch, fathom, setup, placement, context, device, rank)
                cell_status = agree(built["status"])
                for c in cells:
                    if cell_status != "ok":
                        emit(skipped(c, world, cell_status))
                        continue
                    try:
                        mine = time_cell(
                            torch, dist if group else None, setup, built, c, a, flush, barrier
                        )
                        mine_status = "ok"
                    except (torch.cuda.OutOfMemoryError, fathom.CapacityError) as e:
                        mine, mine_status = None, f"skipped: {type(e).__name__}: {e}"
                    except fathom.FathomError as e:
                        mine, mine_status = None, f"failed: {type(e).__name__}: {e}"
                    s = agree(mine_status)
                    figures = gather(mine)
                    if s != "ok":
                        emit(skipped(c, world, s))
                    else:
                        emit(combine(c, figures, all_reduce))
                built.clear()
                gc.collect()
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
    if rank == 0:
        print(f"[tp] wrote {path}", file=sys.stderr, flush=True)
    if group:
        barrier()
        dist.destroy_process_group()
    return 0


def build(torch, fathom, setup: dict, placement: str, context: int, device: str, rank: int):
    """The rank's store (its heads, ``setup['slots']`` layers of ``context`` random tokens) and
    decoder; ``{"status": "skipped: ..."}`` when it does not fit."""
    part = setup["part"]
    try:
        store = fathom.KeyStore(
            part,
            placement=placement,
            capacity_tokens=context + 1024,
            device=device,
            calibration=setup["calibration"],
        )
        seq = store.create_sequence()
        g = torch.Generator(device=device).manual_seed(1000 * rank + 7)
        h, d = part.kv_heads, part.head_dim
        for slot in range(setup["slots"]):
            keys = torch.randn(h, context, d, device=device, generator=g, dtype=torch.bfloat16)
            values = torch.randn(h, context, d, device=device, generator=g, dtype=torch.bfloat16)
            store.prefill(seq, slot, keys, values)
            del keys, values
        dec = fathom.Decoder(part, device=device, calibration=setup["calibration"])
        torch.cuda.synchronize()
        memory = store.memory()
    except (torch.cuda.OutOfMemoryError, fathom.CapacityError) as e:
        return {"status": f"skipped: {type(e).__name__}: {e}"}
    except fathom.FathomError as e:
        return {"status": f"failed: {type(e).__name__}: {e}"}
    return {"status": "ok", "store": store, "dec": dec, "seq": seq, "memory": memory}


def run_steps(torch, layer, layers: int, steps: int, flush=None, timed: bool = True):
    """``steps`` whole-model steps of ``layer(l)`` for ``l`` in ``0..layers``; with ``timed``
    each step's GPU ms by CUDA events (the sum of its layers' intervals when ``flush`` runs
    before each layer, outside them)."""
    ev = torch.cuda.Event
    if not timed:
        for _ in range(steps):
            for i in range(layers):
                if flush is not None:
                    flush()
                layer(i)
        return []
    if flush is None:
        start = [ev(enable_timing=True) for _ in range(steps)]
        end = [ev(enable_timing=True) for _ in range(steps)]
        for i in range(steps):
            start[i].record()
            for j in range(layers):
                layer(j)
            end[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(start, end)]
    start = [[ev(enable_timing=True) for _ in range(layers)] for _ in range(steps)]
    end = [[ev(enable_timing=True) for _ in range(layers)] for _ in range(steps)]
    for i in range(steps):
        for j in range(layers):
            flush()
            start[i][j].record()
            layer(j)
            end[i][j].record()
    torch.cuda.synchronize()
    return [sum(s.elapsed_time(e) for s, e in zip(si, ei)) for si, ei in zip(start, end)]


def time_cell(torch, dist, setup: dict, built: dict, cell: dict, a, flush, barrier) -> dict:
    """This rank's figures for one method: median step ms, its scan bytes and rate, and the
    median ms of the step's all-reduces alone."""
    part, slots, layers = setup["part"], setup["slots"], setup["shape"].layers
    store, dec, seq = built["store"], built["dec"], built["seq"]
    device = store.device
    q = torch.randn(1, part.q_heads, part.head_dim, device=device)
    out = torch.zeros_like(q)
    partial = torch.zeros(1, setup["hidden"], device=device, dtype=torch.bfloat16)
    method, k = cell["method"], a.k

    def layer(index):
        dec.step(store, [seq], index % slots, q, out, method=method, k=k)
        if dist is not None:
            dist.all_reduce(partial)

    fl = flush if a.flush_l2 else None
    barrier()
    run_steps(torch, layer, layers, a.warmup, fl, timed=False)
    barrier()
    ms = run_steps(torch, layer, layers, a.steps, fl)
    ar_ms = None
    if dist is not None:
        barrier()
        ar = run_steps(torch, lambda _: dist.all_reduce(partial), layers, a.steps)
        ar_ms = statistics.median(ar)
    if not torch.isfinite(out).all():
        import fathom

        raise fathom.KernelError("the step wrote a non-finite output")
    nbytes = scan_bytes(method, cell["context"], part.kv_heads, layers)
    med = statistics.median(ms)
    return {
        "rank": dist.get_rank() if dist is not None else 0,
        "device": device,
        "kv_heads": setup["kv_heads"],
        "q_heads": setup["q_heads"],
        "ms": med,
        "ms_min": min(ms),
        "ms_max": max(ms),
        "all_reduce_ms": ar_ms,
        "bytes": nbytes,
        "gbps": gbps(nbytes, med),
        "slots": slots,
        "layers": layers,
        "store_memory": built["memory"],
    }


if __name__ == "__main__":
    sys.exit(main())
