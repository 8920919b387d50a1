"""The Python API on a machine without a GPU (CI): import, typed errors that leave the store
usable, the CPU backend against the f64 reference's own step, calibration files."""

import json
import math
import sys
import types

import numpy as np
import pytest

import fathom
from fathom import _native

RNG = np.random.default_rng(7)


def bf16_bits(x):
    """float32 -> bf16 bits, round to nearest even."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bits_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def small_config(model_type="qwen3", d=64, q=4, kv=2, layers=2):
    return {
        "model_type": model_type,
        "num_hidden_layers": layers,
        "num_attention_heads": q,
        "num_key_value_heads": kv,
        "head_dim": d,
        "hidden_size": q * d,
    }


def shape(**kw):
    return fathom.ModelShape.from_hf_config(small_config(**kw))


def keys_values(s, n):
    k = RNG.normal(size=(s.kv_heads, n, s.head_dim)).astype(np.float32)
    k[:, :, 3] *= 8.0  # an outlier channel, as real keys have
    v = RNG.normal(size=(s.kv_heads, n, s.head_dim)).astype(np.float32)
    return bf16_bits(k), bf16_bits(v)


def queries(s, b=1, m=None):
    shape_ = (b, s.q_heads, s.head_dim) if m is None else (s.q_heads, m, s.head_dim)
    return RNG.normal(size=shape_).astype(np.float32)


def test_import_without_a_gpu_says_why():
    assert fathom.__version__
    assert fathom.is_available() is False
    reason = fathom.unavailable_reason()
    assert reason and "libcuda" in reason
    with pytest.raises(fathom.DeviceUnavailableError, match="libcuda"):
        fathom.KeyStore(fathom.ModelShape.preset("qwen3-8b"), device="cuda:0")
    with pytest.raises(fathom.DeviceUnavailableError):
        fathom.Decoder(fathom.ModelShape.preset("qwen3-8b"), device="cuda:0")
    for cls in [
        fathom.InvalidInputError,
        fathom.ConfigError,
        fathom.MethodError,
        fathom.SequenceError,
        fathom.CapacityError,
        fathom.CalibrationError,
        fathom.KernelError,
        fathom.DeviceUnavailableError,
    ]:
        assert issubclass(cls, fathom.FathomError)
    assert issubclass(fathom.InvalidInputError, ValueError)


def test_shapes_come_from_presets_dicts_files_and_objects(tmp_path):
    s = fathom.ModelShape.preset("qwen2.5-7b")
    got = (s.layers, s.q_heads, s.kv_heads, s.group, s.head_dim, s.basis)
    assert got == (28, 28, 4, 7, 128, "klt")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(small_config()))
    from_file = fathom.ModelShape.from_hf_config(path)
    from_str = fathom.ModelShape.from_hf_config(str(path))

    class Config:
        def to_dict(self):
            return small_config()

    from_obj = fathom.ModelShape.from_hf_config(Config())
    for x in (from_file, from_str, from_obj):
        assert (x.head_dim, x.group, x.qk_norm, x.basis) == (64, 2, True, "raw")
    assert shape(model_type="llama").basis == "klt"
    assert shape(model_type="llama").with_basis("raw").basis == "raw"


def test_configs_the_kernels_cannot_serve_are_config_errors():
    with pytest.raises(fathom.ConfigError, match="72"):
        shape(d=72)  # not a head dimension the kernels are generated for
    with pytest.raises(fathom.ConfigError):
        shape(q=34, kv=2)  # G = 17 > 16
    with pytest.raises(fathom.ConfigError):
        fathom.ModelShape.preset("no-such-model")
    with pytest.raises(fathom.ConfigError):
        fathom.ModelShape.from_hf_config(42)
    with pytest.raises(fathom.ConfigError, match="rotations"):
        fathom.KeyStore(shape(model_type="llama"), device="cpu")


def make_store(s, **kw):
    return fathom.KeyStore(s, device="cpu", capacity_tokens=4096, max_batch=4, **kw)


def test_kv_rows_takes_separate_or_adjacent():
    s = shape()
    for kv_rows in ["separate", "adjacent"]:
        store = make_store(s, kv_rows=kv_rows)
        seq = store.create_sequence()
        k, v = keys_values(s, 100)
        store.prefill(seq, 0, k, v)
        assert store.lengths(seq, 0) == (64, 100)
    with pytest.raises(fathom.ConfigError, match="separate .* adjacent"):
        make_store(s, kv_rows="interleaved")


def test_bad_inputs_raise_typed_errors_and_leave_the_store_usable():
    s = shape()
    store = make_store(s)
    seq = store.create_sequence()
    k, v = keys_values(s, 100)
    bad = [
        (k.astype(np.float32), v, "dtype"),  # wrong dtype
        (k[:1], v[:1], "shape"),  # wrong H_kv
        (np.ascontiguousarray(k.transpose(0, 2, 1)).transpose(0, 2, 1), v, "contiguous"),
        (k.reshape(s.kv_heads, 100 * s.head_dim), v, "shape"),  # wrong rank
    ]
    for keys, values, what in bad:
        with pytest.raises(fathom.InvalidInputError, match=what):
            store.prefill(seq, 0, keys, values)
        assert store.lengths(seq, 0) == (0, 0)
    # Misaligned: a view starting 2 bytes into a buffer.
    raw = np.zeros(k.size + 1, dtype=np.uint16)
    shifted = raw[1:].reshape(k.shape)
    shifted[...] = k
    with pytest.raises(fathom.InvalidInputError, match="16"):
        store.prefill(seq, 0, shifted, v)
    # A description that claims another device.
    desc_k = list(fathom._tensors.describe(k))
    desc_k[4] = "cuda:0"
    with pytest.raises(_native.InvalidInputError, match="cuda:0"):
        store._native.prefill(seq, 0, tuple(desc_k), fathom._tensors.describe(v), 0)
    with pytest.raises(fathom.InvalidInputError):
        store.prefill(seq, 5, k, v)  # layer out of range
    nan = bits_to_f32(k).copy()
    nan[1, 70, 5] = np.nan
    with pytest.raises(fathom.InvalidInputError, match="finite"):
        store.prefill(seq, 0, bf16_bits(nan), v)
    assert store.lengths(seq, 0) == (0, 0), "nothing is half-written"
    store.prefill(seq, 0, k, v)
    assert store.lengths(seq, 0) == (64, 100)
    with pytest.raises(TypeError):
        store.prefill(seq, 0, k.tolist(), v)


def test_freed_and_unknown_sequences_are_sequence_errors():
    s = shape()
    store = make_store(s)
    a, b = store.create_sequence(), store.create_sequence()
    k, v = keys_values(s, 70)
    store.prefill(a, 0, k, v)
    store.free_sequence(a)
    with pytest.raises(fathom.SequenceError, match="freed"):
        store.lengths(a, 0)
    with pytest.raises(fathom.SequenceError):
        store.prefill(a, 0, k, v)
    with pytest.raises(fathom.SequenceError):
        store.free_sequence(a)
    with pytest.raises(fathom.SequenceError):
        store.lengths(123456, 0)
    store.prefill(b, 0, k, v)
    assert store.lengths(b, 0) == (64, 70)


def test_capacity_and_batch_limits_are_capacity_errors():
    s = shape()
    store = fathom.KeyStore(s, device="cpu", capacity_tokens=100, max_batch=1)
    a = store.create_sequence()
    k, v = keys_values(s, 101)
    with pytest.raises(fathom.CapacityError):
        store.prefill(a, 0, k, v)
    b = store.create_sequence()
    one_k, one_v = keys_values(s, 2)
    token = np.ascontiguousarray(one_k.transpose(1, 0, 2))
    with pytest.raises(fathom.CapacityError):
        store.append([a, b], 0, token, np.ascontiguousarray(one_v.transpose(1, 0, 2)))
    store.prefill(a, 0, *(np.ascontiguousarray(x[:, :100]) for x in (k, v)))
    assert store.memory()["tokens"] == 100


def calibrate(s, k, r=16, budgets=None):
    keys = [bits_to_f32(k)] * s.layers
    qs = [queries(s, m=8) for _ in range(s.layers)]
    return fathom.Calibration.fit(s, keys, qs, budgets=budgets, double_sparsity_r=r)


def group_rows(x, kv, g, d):
    """Query heads of KV head kv: G rows."""
    return [x[kv * g + j].astype(np.float64).tolist() for j in range(g)]


METHODS = [
    "fathom(48)",
    "fathom(92)",
    "sparq(16)",
    "double_sparsity(16)",
    "thumbnail",
    "uniform(3)",
    "landmark",
    "oracle",
    "dense",
    "pariskv(20)",
]


@pytest.mark.parametrize("method", METHODS)
def test_the_cpu_step_equals_the_reference_step(method):
    s = shape(layers=1)
    n_prefill, n_append = 250, 9
    k, v = keys_values(s, n_prefill + n_append)
    cal = calibrate(s, k)
    store = make_store(s, landmarks=True, pariskv_index=True)
    seq = store.create_sequence()
    store.prefill(seq, 0, *(np.ascontiguousarray(x[:, :n_prefill]) for x in (k, v)))
    for t in range(n_prefill, n_prefill + n_append):
        token = [np.ascontiguousarray(x[None, :, t]) for x in (k, v)]
        store.append([seq], 0, *token)
    assert store.lengths(seq, 0) == (256, 259)
    dec = fathom.Decoder(s, device="cpu", k_max=64, calibration=cal)
    q = queries(s)
    out = np.full(q.shape, np.nan, dtype=np.float32)
    sel = dec.step(store, [seq], 0, q, out, method=method, k=24, return_selection=True)
    assert np.isfinite(out).all()
    g, d = s.group, s.head_dim
    scale = 1 / math.sqrt(d)
    for kv in range(s.kv_heads):
        sigma2 = cal.sigma2[kv * d : (kv + 1) * d]
        mask = cal.double_sparsity_masks[kv * d : (kv + 1) * d]
        heads, outs = _native.reference_group_step(
            k[kv].reshape(-1).tolist(),
            v[kv].reshape(-1).tolist(),
            group_rows(q[0], kv, g, d),
            d,
            method,
            24,
            scale,
            sigma2=sigma2,
            ds_mask=mask,
        )
        for j in range(g):
            assert sel.indices(0, kv * g + j) == heads[j], (method, kv, j)
            np.testing.assert_allclose(out[0, kv * g + j], np.float32(outs[j]), rtol=0, atol=0)


def test_bf16_queries_and_outputs_round_as_bf16():
    s = shape(layers=1)
    k, v = keys_values(s, 130)
    cal = calibrate(s, k)
    store = make_store(s)
    seq = store.create_sequence()
    store.prefill(seq, 0, k, v)
    dec = fathom.Decoder(s, device="cpu", calibration=cal)
    q = queries(s)
    out32 = np.zeros(q.shape, dtype=np.float32)
    dec.step(store, [seq], 0, bf16_bits(q), out32, method="oracle", k=16)
    out16 = np.zeros(q.shape, dtype=np.uint16)
    dec.step(store, [seq], 0, bits_to_f32(bf16_bits(q)), out16, method="oracle", k=16)
    np.testing.assert_array_equal(bf16_bits(out32), out16)


def test_bad_step_inputs_raise_typed_errors_and_the_next_step_works():
    s = shape(layers=1)
    k, v = keys_values(s, 200)
    cal = calibrate(s, k)
    store = make_store(s)
    seq = store.create_sequence()
    store.prefill(seq, 0, k, v)
    dec = fathom.Decoder(s, device="cpu", k_max=32, calibration=cal)
    plain = fathom.Decoder(s, device="cpu", k_max=32)
    q, out = queries(s), np.zeros((1, s.q_heads, s.head_dim), dtype=np.float32)
    cases = [
        (dict(method="fathom(x)"), fathom.MethodError),
        (dict(method="nonsense"), fathom.MethodError),
        (dict(method="loki(8)"), fathom.MethodError),  # a raw store has no KLT basis
        (dict(method="landmark"), fathom.MethodError),  # the store keeps no means
        (dict(method="pariskv(8)"), fathom.MethodError),  # nor the index
        (dict(method="sparq(16)", k=33), fathom.CapacityError),
        (dict(method="double_sparsity(8)"), fathom.CalibrationError),  # fitted with r = 16
        (dict(method="sparq(16)", placement_transfer="teleport"), fathom.MethodError),
    ]
    for kwargs, error in cases:
        with pytest.raises(error):
            dec.step(store, [seq], 0, q, out, **kwargs)
    with pytest.raises(fathom.CalibrationError):
        plain.step(store, [seq], 0, q, out, method="fathom(48)")
    for queries_, out_ in [
        (q.astype(np.float64), out),
        (q[:, :2], out),
        (q, out[:, ::2]),
        (q, out.astype(np.int32)),
    ]:
        with pytest.raises(fathom.InvalidInputError):
            dec.step(store, [seq], 0, queries_, out_, method="oracle")
    bad_q = q.copy()
    bad_q[0, 1, 2] = np.inf
    with pytest.raises(fathom.InvalidInputError, match="finite"):
        dec.step(store, [seq], 0, bad_q, out, method="oracle")
    with pytest.raises(fathom.SequenceError):
        dec.step(store, [seq + 1], 0, q, out, method="oracle")
    with pytest.raises(fathom.InvalidInputError):
        dec.step(store, [], 0, q[:0], out[:0], method="oracle")
    with pytest.raises(fathom.InvalidInputError, match="repeat"):
        dec.step(store, [seq], 0, q, out, method="oracle", _repeat=0)
    dec.step(store, [seq], 0, q, out, method="sparq(16)", k=8)
    assert np.isfinite(out).all()
    # The benchmark's repeated step writes what one step writes.
    once = out.copy()
    out[:] = np.nan
    dec.step(store, [seq], 0, q, out, method="sparq(16)", k=8, _repeat=3)
    assert np.array_equal(out, once)


def test_calibration_round_trips_through_a_file(tmp_path):
    s = shape(model_type="llama", layers=3)
    k, _ = keys_values(s, 300)
    cal = calibrate(s, k, budgets=24)
    assert cal.has_rotation and cal.double_sparsity_r == 16
    budgets = cal.layer_budgets
    assert len(budgets) == 3 and sum(budgets) == 3 * 24
    path = tmp_path / "cal.safetensors"
    cal.save(path)
    back = fathom.Calibration.load(path)
    assert back == cal and back.layer_budgets == budgets
    (tmp_path / "junk").write_bytes(b"not a calibration")
    with pytest.raises(fathom.FathomError):
        fathom.Calibration.load(tmp_path / "junk")
    # A KLT store takes its rotations from the calibration; loki then reads its leading
    # coordinates.
    store = make_store(s, calibration=back)
    seq = store.create_sequence()
    k, v = keys_values(s, 150)
    store.prefill(seq, 0, k, v)
    dec = fathom.Decoder(s, device="cpu", calibration=back)
    out = np.zeros((1, s.q_heads, s.head_dim), dtype=np.float32)
    sel = dec.step(store, [seq], 0, queries(s), out, method="loki(16)", k=8, return_selection=True)
    assert len(sel.indices(0, 0)) == 8 + 36
    with pytest.raises(fathom.CalibrationError):
        fathom.Calibration.fit(s, [bits_to_f32(k)], [queries(s, m=4)])  # one layer of three


def test_tensor_parallel_shards_split_heads_and_calibration():
    # llama-3.1-70b: 64 query heads, 8 KV heads (G = 8).
    s = fathom.ModelShape.preset("llama-3.1-70b")
    part, kv, q = s.shard(1, 4)
    assert (kv, q) == ((2, 4), (16, 32))
    assert (part.kv_heads, part.q_heads, part.group, part.head_dim) == (2, 16, 8, 128)
    # More ranks than KV heads: each KV head on two ranks, four query heads of its group each.
    part, kv, q = s.shard(5, 16)
    assert (kv, q, part.group) == ((2, 3), (20, 24), 4)
    with pytest.raises(fathom.ConfigError, match="ranks are 0 to 3"):
        s.shard(4, 4)
    with pytest.raises(fathom.ConfigError, match="query heads"):
        s.shard(0, 3)
    # A calibration of the whole model, sliced to a rank's KV heads of every layer.
    small = shape(model_type="llama", layers=3)
    k, _ = keys_values(small, 300)
    whole = calibrate(small, k, budgets=24)
    half, kv, _ = small.shard(1, small.kv_heads)
    part = whole.shard(small, 1, small.kv_heads)
    d, h = small.head_dim, small.kv_heads
    want = np.asarray(whole.sigma2).reshape(small.layers, h, d)[:, kv[0] : kv[1]]
    assert np.array_equal(np.asarray(part.sigma2).reshape(want.shape), want)
    assert part.layer_budgets == whole.layer_budgets and part.has_rotation
    assert half.kv_heads == 1


def test_the_default_device_is_torch_s_current_one(monkeypatch):
    """``None`` and ``"cuda"`` follow ``torch.cuda.current_device()`` when torch is loaded (a
    tensor-parallel rank that set its device gets its own GPU), device 0 without torch."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert fathom._device_text(None) == "cuda:0"
    assert fathom._device_text("cuda") == "cuda:0"
    assert fathom._device_text("cuda:2") == "cuda:2"
    assert fathom._device_text("cpu") == "cpu"

    class Cuda:
        available = True

        @staticmethod
        def is_available():
            return Cuda.available

        @staticmethod
        def current_device():
            return 3

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=Cuda))
    assert fathom._device_text(None) == "cuda:3"
    assert fathom._device_text("cuda") == "cuda:3"
    assert fathom._device_text("cuda:1") == "cuda:1"
    Cuda.available = False
    assert fathom._device_text(None) == "cuda:0"
