"""The tensor-parallel decode benchmark's arithmetic and report (python/bench/tp_decode.py,
tp_report.py) without torch or a GPU: bytes per rank, the shard set-up through the package's CPU
backend, the join of P = 1, 2, 4 runs, efficiency, the host-1M target and the SVG."""

import importlib
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

import fathom

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
tp_decode = importlib.import_module("tp_decode")
tp_report = importlib.import_module("tp_report")

M = 1 << 20


def test_the_benchmark_imports_without_torch():
    # CI has no torch: importing the module above must not have needed it (main imports it).
    import ast

    tree = ast.parse(Path(tp_decode.__file__).read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name.split(".")[0] for n in top for a in n.names} | {
        (n.module or "").split(".")[0] for n in top if isinstance(n, ast.ImportFrom)
    }
    assert not names & {"torch", "fathom", "numpy"}, names


@pytest.mark.parametrize(
    "text,tokens", [("131072", 131072), ("128k", 131072), ("1m", M), (" 1M ", M)]
)
def test_contexts_parse_as_step_bench_takes_them(text, tokens):
    assert tp_decode.parse_context(text) == tokens


@pytest.mark.parametrize("bad", ["", "0", "x", "1.5m", "-3"])
def test_bad_contexts_are_refused(bad):
    with pytest.raises(ValueError):
        tp_decode.parse_context(bad)


def test_scan_bytes_are_b_over_8_per_token_and_kv_head():
    assert tp_decode.method_bits("fathom(48)") == 48
    assert tp_decode.method_bits(" fathom( 24 ) ") == 24
    assert tp_decode.method_bits("sparq(32)") is None
    # qwen3-8b, 1M, 8 KV heads, 36 layers: 6 bytes a token and head.
    assert tp_decode.scan_bytes("fathom(48)", M, 8, 36) == 6 * M * 8 * 36
    assert tp_decode.scan_bytes("sparq(32)", M, 8, 36) is None
    assert tp_decode.gbps(6 * 10**9, 100.0) == pytest.approx(60.0)
    assert tp_decode.gbps(None, 1.0) is None and tp_decode.gbps(10, 0.0) is None


@pytest.mark.parametrize("model", ["qwen3-8b", "llama-3.1-70b"])
@pytest.mark.parametrize("ranks", [1, 2, 4, 8, 16])
def test_ranks_bytes_sum_to_the_models_or_count_each_replica(model, ranks):
    shape = fathom.ModelShape.preset(model)
    parts = [shape.shard(r, ranks) for r in range(ranks)]
    per = [tp_decode.scan_bytes("fathom(48)", M, p.kv_heads, shape.layers) for p, _, _ in parts]
    whole = tp_decode.scan_bytes("fathom(48)", M, shape.kv_heads, shape.layers)
    # P <= H_kv: each KV head read once; more ranks: each head read on P / H_kv ranks.
    assert sum(per) == whole * max(1, ranks // shape.kv_heads)
    assert sum(p.q_heads for p, _, _ in parts) == shape.q_heads


def test_gpu_slugs_and_result_names():
    assert tp_decode.gpu_slug("NVIDIA H200") == "h200"
    assert tp_decode.gpu_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert tp_decode.gpu_slug("  ") == "gpu"
    name = tp_decode.result_name("NVIDIA H200", "2026-12-03", "abc1234", ["qwen3-8b"], 2)
    assert name == "tp-h200-2026-12-03-abc1234-qwen3-8b-p2.json"


def test_world_comes_from_torchrun_or_is_one_rank():
    assert tp_decode.world_from_env({}) == (0, 1, 0, False)
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}
    assert tp_decode.world_from_env(env) == (3, 4, 1, True)
    assert tp_decode.world_from_env({"RANK": "0", "WORLD_SIZE": "1"}) == (0, 1, 0, True)


def test_arguments_default_to_the_issue_cells():
    a = tp_decode.parse_args(["--out", "x"])
    assert a.models == ["qwen3-8b"] and a.context_list == [131072, M]
    assert a.placement_list == ["host", "hbm"] and a.method_list == ["fathom(48)"]
    assert (a.slots, a.steps, a.warmup, a.k, a.flush_l2, a.group) == (2, 20, 3, None, True, False)
    a = tp_decode.parse_args(["--model", "qwen3-8b,llama-3.1-70b", "--methods", "fathom(48);x"])
    assert a.models == ["qwen3-8b", "llama-3.1-70b"] and a.method_list == ["fathom(48)", "x"]


@pytest.mark.parametrize("model", ["qwen3-8b", "llama-3.1-70b"])
def test_slot_shapes_keep_the_presets_heads_and_basis(model):
    shape = fathom.ModelShape.preset(model)
    s = tp_decode.slot_shape(fathom, shape, 2)
    got = (s.layers, s.q_heads, s.kv_heads, s.head_dim, s.group, s.qk_norm, s.basis)
    want = (2, shape.q_heads, shape.kv_heads, shape.head_dim, shape.group, shape.qk_norm)
    assert got == want + (shape.basis,)


def bf16_bits(x):
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


@pytest.mark.parametrize("model,rank,ranks", [("llama-3.1-70b", 1, 4), ("qwen3-8b", 1, 2)])
def test_a_ranks_setup_steps_on_the_cpu_backend(model, rank, ranks):
    # The same calls as on the GPU (shard, calibration of the whole slot model sliced, the
    # rank's store and decoder with it), on the CPU backend with a short context.
    s = tp_decode.rank_setup(fathom, model, 2, rank, ranks, cal_tokens=256)
    shape, part = s["shape"], s["part"]
    assert s["slots"] == 2 and part.layers == 2
    assert part.kv_heads == shape.kv_heads // ranks and part.q_heads == shape.q_heads // ranks
    assert s["kv_heads"] == [rank * part.kv_heads, (rank + 1) * part.kv_heads]
    assert s["q_heads"] == [rank * part.q_heads, (rank + 1) * part.q_heads]
    assert s["hidden"] == shape.q_heads * shape.head_dim
    store = fathom.KeyStore(
        part, device="cpu", capacity_tokens=512, max_batch=1, calibration=s["calibration"]
    )
    seq = store.create_sequence()
    rng = np.random.default_rng(0)
    for slot in range(2):
        k = rng.standard_normal((part.kv_heads, 300, part.head_dim)).astype(np.float32)
        v = rng.standard_normal((part.kv_heads, 300, part.head_dim)).astype(np.float32)
        store.prefill(seq, slot, bf16_bits(k), bf16_bits(v))
    dec = fathom.Decoder(part, device="cpu", calibration=s["calibration"])
    q = rng.standard_normal((1, part.q_heads, part.head_dim)).astype(np.float32)
    out = np.full(q.shape, np.nan, dtype=np.float32)
    for layer in range(shape.layers):  # every layer of the model, layer l reading slot l % 2
        if layer > 3:
            break
        dec.step(store, [seq], layer % s["slots"], q, out, method="fathom(48)", k=16)
        assert np.isfinite(out).all()


def test_a_split_the_package_refuses_is_its_error():
    with pytest.raises(fathom.ConfigError, match="query heads"):
        tp_decode.rank_setup(fathom, "llama-3.1-70b", 2, 0, 3, cal_tokens=64)


def test_rows_combine_the_slowest_rank_and_the_summed_bytes():
    cell = {"model": "m", "context": M, "placement": "host", "method": "fathom(48)"}
    ranks = [
        {"ms": 30.0, "bytes": 3 * 10**9, "all_reduce_ms": 0.5},
        {"ms": 32.0, "bytes": 3 * 10**9, "all_reduce_ms": 0.7},
    ]
    r = tp_decode.combine(cell, ranks, "nccl")
    assert (r["status"], r["ranks"], r["step_ms"], r["rank_ms"]) == ("ok", 2, 32.0, [30.0, 32.0])
    assert r["bytes_per_step"] == 6 * 10**9 and r["aggregate_gbps"] == pytest.approx(6e9 / 32e6)
    assert r["all_reduce_ms"] == 0.7 and r["efficiency"] is None
    one = tp_decode.combine(cell, [{"ms": 60.0, "bytes": None}], "none")
    assert one["efficiency"] == 1.0 and one["aggregate_gbps"] is None
    assert one["all_reduce_ms"] is None
    assert "P=2" in tp_decode.progress(r) and "skipped" in tp_decode.progress(
        tp_decode.skipped(cell, 2, "skipped: CapacityError: x")
    )


def row(model, context, placement, ranks, ms, method="fathom(48)", status="ok", gbps=None):
    return {
        "model": model,
        "context": context,
        "placement": placement,
        "method": method,
        "ranks": ranks,
        "status": status,
        "step_ms": ms if status == "ok" else None,
        "rank_ms": [ms] * ranks if status == "ok" else None,
        "all_reduce_ms": 0.1 * ranks,
        "aggregate_gbps": gbps,
    }


def runs(tmp_path):
    """Three runs, P = 1, 2, 4: host 1M scales 60 -> 31 -> 17 ms (ratios 1.033 and 1.133: met),
    HBM 1M 10 -> 6 -> 4.5 (1.2, 1.8), qwen 128k host only at P = 1 and 4, a skipped cell, and
    a P = 4 re-run in a later file."""
    q, ll = "qwen3-8b", "llama-3.1-70b"
    files = {
        1: [
            row(q, M, "host", 1, 60.0, gbps=100.0),
            row(q, M, "hbm", 1, 10.0),
            row(q, 131072, "host", 1, 8.0),
            row(ll, M, "host", 1, 140.0),
        ],
        2: [
            row(q, M, "host", 2, 31.0, gbps=194.0),
            row(q, M, "hbm", 2, 6.0),
            row(ll, M, "host", 2, 90.0),
            row(ll, M, "hbm", 2, 0.0, status="skipped: CapacityError: out of pinned memory"),
        ],
        4: [row(q, M, "host", 4, 20.0), row(q, M, "hbm", 4, 4.5), row(q, 131072, "host", 4, 3.0)],
        "4b": [row(q, M, "host", 4, 17.0, gbps=350.0)],
    }
    paths = []
    for name, rows in files.items():
        p = tmp_path / f"tp-p{name}.json"
        header = {"ranks": int(str(name)[0]), "gpu": "NVIDIA H200", "commit": "abc"}
        p.write_text(json.dumps({"header": header, "rows": rows}))
        paths.append(str(p))
    return paths


def test_runs_join_per_cell_with_efficiency_and_the_target(tmp_path):
    md, plot, entries = tp_report.report(runs(tmp_path))
    by = {(e["cell"][0], e["cell"][1], e["cell"][2], e["ranks"]): e for e in entries}
    host = [by[("qwen3-8b", M, "host", p)] for p in (1, 2, 4)]
    assert [e["step_ms"] for e in host] == [60.0, 31.0, 17.0]  # the later P = 4 file wins
    assert host[0]["efficiency"] == 1.0 and host[0]["target"] is None
    assert host[1]["ideal_ms"] == 30.0 and host[1]["ratio"] == pytest.approx(31 / 30)
    assert host[1]["efficiency"] == pytest.approx(60 / (2 * 31))
    assert host[2]["ratio"] == pytest.approx(17 / 15) and host[2]["target"] == "met"
    llama = by[("llama-3.1-70b", M, "host", 2)]
    assert llama["ratio"] == pytest.approx(90 / 70) and llama["target"] == "missed"
    # HBM and 128k are not the target's cells.
    assert by[("qwen3-8b", M, "hbm", 4)]["target"] is None
    assert by[("qwen3-8b", M, "hbm", 4)]["efficiency"] == pytest.approx(10 / 18)
    assert by[("qwen3-8b", 131072, "host", 4)]["target"] is None
    assert "| qwen3-8b | 1M | host | fathom(48) | 4 | 17.000 | 15.000 | 1.133 | 0.882 |" in md
    assert "missed (1.286 vs 1.15)" in md
    assert "not measured: llama-3.1-70b 1M hbm fathom(48) P = 2: skipped: CapacityError" in md
    assert "met in 2 of 3" in md
    root = ET.fromstring(plot)
    assert root.tag.endswith("svg")
    lines = [el for el in root.iter() if el.tag.endswith("polyline")]
    # Step time: the 4 measured cells (the skipped one has none); rate: the one cell with
    # figures; the dotted ideal of the two host-1M cells.
    assert len(lines) == 4 + 1 + 2
    assert "qwen3-8b 1M host fathom(48)" in plot


def test_efficiency_fills_from_the_same_run_or_a_baseline():
    rows = [row("m", M, "host", 2, 40.0), row("m", M, "hbm", 2, 5.0)]
    base = [row("m", M, "host", 1, 60.0), row("m", M, "host", 1, 0.0, status="skipped: x")]
    tp_report.fill_efficiency(rows, base)
    assert rows[0]["efficiency"] == pytest.approx(0.75) and rows[1]["efficiency"] is None
    rows.append(row("m", M, "host", 1, 50.0))  # this run's own P = 1 row is preferred
    tp_report.fill_efficiency(rows, base)
    assert rows[0]["efficiency"] == pytest.approx(50 / 80) and rows[2]["efficiency"] == 1.0


def test_a_single_p_plots_and_tabulates(tmp_path):
    p = tmp_path / "one.json"
    p.write_text(json.dumps({"header": {}, "rows": [row("m", 131072, "hbm", 1, 2.5, gbps=9.0)]}))
    md, plot, entries = tp_report.report([str(p)])
    assert len(entries) == 1 and "| m | 128k | hbm | fathom(48) | 1 | 2.500 |" in md
    ET.fromstring(plot)
    assert tp_report.context_label(131072) == "128k" and tp_report.context_label(1000) == "1000"
    with pytest.raises(ValueError, match="no rows"):
        (tmp_path / "bad.json").write_text("{}")
        tp_report.load(str(tmp_path / "bad.json"))


def test_report_cli_writes_both_files(tmp_path, capsys):
    md_path, svg_path = tmp_path / "r.md", tmp_path / "r.svg"
    assert tp_report.main(runs(tmp_path) + ["--md", str(md_path), "--svg", str(svg_path)]) == 0
    assert md_path.read_text() == capsys.readouterr().out
    ET.fromstring(svg_path.read_text())
