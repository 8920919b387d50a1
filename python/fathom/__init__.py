"""fathom: sparse decoding over offloaded KV caches, for PyTorch.

A :class:`KeyStore` holds the keys and values of many sequences as 4-bit bit planes (SPEC §2) in
GPU memory or in mapped host memory; a :class:`Decoder` runs one layer's decode step (plan,
scan, select, fetch, attention) over it for a batch, on the caller's current CUDA stream,
reading queries from and writing the attention output into the caller's tensors.
``device="cpu"`` gives the same API over the f64 reference (numpy arrays or CPU tensors).

torch is optional: the package imports and its CPU backend works with numpy alone.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Optional, Sequence

from . import _native
from ._native import (
    CalibrationError,
    CapacityError,
    ConfigError,
    DeviceUnavailableError,
    FathomError,
    KernelError,
    MethodError,
    Selection,
    SequenceError,
)
from ._tensors import current_stream, describe, to_f64_rows

__version__: str = _native.__version__


class InvalidInputError(_native.InvalidInputError, ValueError):
    """A tensor of the wrong dtype, device, shape, stride or alignment, or a bad value."""


__all__ = [
    "CalibrationError",
    "CapacityError",
    "Calibration",
    "ConfigError",
    "Decoder",
    "DeviceUnavailableError",
    "FathomError",
    "InvalidInputError",
    "KernelError",
    "KeyStore",
    "MethodError",
    "ModelShape",
    "SequenceError",
    "Selection",
    "is_available",
    "unavailable_reason",
]

ModelShape = _native.ModelShape


def _rewrap(call, *args, **kwargs):
    """Calls into the native module; its InvalidInputError becomes the ValueError subclass."""
    try:
        return call(*args, **kwargs)
    except _native.InvalidInputError as e:
        raise InvalidInputError(str(e)) from None


def _from_hf_config(cfg: Any) -> ModelShape:
    """The shape of a Hugging Face config: a dict, a path to config.json, or an object with
    ``to_dict()`` (transformers' ``PretrainedConfig``)."""
    if isinstance(cfg, (str, os.PathLike)):
        try:
            with open(cfg, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"cannot read {cfg}: {e}") from None
        return _native.ModelShape._from_json(text)
    if hasattr(cfg, "to_dict"):
        cfg = cfg.to_dict()
    if not isinstance(cfg, dict):
        raise ConfigError(
            f"from_hf_config takes a dict, a path or an object with to_dict(), not {type(cfg)}"
        )
    return _native.ModelShape._from_json(json.dumps(cfg))


ModelShape.from_hf_config = staticmethod(_from_hf_config)  # type: ignore[attr-defined]


def unavailable_reason() -> Optional[str]:
    """Why the CUDA backend cannot run here (no libcuda, no GPU, no NVRTC), or None."""
    return _native.unavailable_reason()


def is_available() -> bool:
    """Whether the CUDA backend can run here."""
    return unavailable_reason() is None


def _device_text(device: Any) -> str:
    """``None`` and ``"cuda"`` are the current CUDA device, as ``torch.device("cuda")`` is
    (so that a rank that called ``torch.cuda.set_device(local_rank)`` gets its own GPU);
    without torch loaded, device 0."""
    text = "cuda" if device is None else str(device)
    if text != "cuda":
        return text
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_available():
        return f"cuda:{cuda.current_device()}"
    return "cuda:0"


def _stream_for(device: str, stream: Any) -> int:
    if not device.startswith("cuda"):
        return 0
    if stream is not None:
        return int(getattr(stream, "cuda_stream", stream))
    return current_stream(device)


class Calibration:
    """σ², the KLT basis, double_sparsity's channels and optional per-layer budgets (SPEC §3-§5),
    fitted from a prefill's keys and queries."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @staticmethod
    def fit(
        shape: ModelShape,
        keys: Sequence[Any],
        queries: Sequence[Any],
        budgets: Optional[float] = None,
        double_sparsity_r: int = 32,
    ) -> Calibration:
        """keys: per layer ``[H_kv, n, D]``; queries: per layer ``[H_q, m, D]`` (torch or numpy,
        any device, any float dtype or bf16 bits as uint16). ``budgets``: a mean bit budget to
        spread over the layers (``layer_budgets``)."""
        k = [to_f64_rows(x, "keys") for x in keys]
        q = [to_f64_rows(x, "queries") for x in queries]
        return Calibration(
            _rewrap(_native.Calibration._fit, shape, k, q, budgets, double_sparsity_r)
        )

    def save(self, path: Any) -> None:
        """Writes a safetensors file."""
        self._native.save(os.fspath(path))

    def shard(self, shape: ModelShape, rank: int, ranks: int) -> Calibration:
        """The part of this calibration of the whole ``shape`` that tensor-parallel rank
        ``rank`` of ``ranks`` needs (its KV heads, as ``shape.shard(rank, ranks)`` gives them),
        for the decoder of that rank's shape."""
        return Calibration(_rewrap(self._native._shard, shape, rank, ranks))

    @staticmethod
    def load(path: Any) -> Calibration:
        """Reads a file that :meth:`save` wrote."""
        return Calibration(_rewrap(_native.Calibration._load, os.fspath(path)))

    @property
    def layer_budgets(self) -> Optional[list]:
        """Per-layer budgets ``B_l`` (step with ``method=f"fathom({B_l})"``), or None."""
        return self._native.layer_budgets

    @property
    def sigma2(self) -> Optional[list]:
        return self._native.sigma2

    @property
    def double_sparsity_masks(self) -> Optional[list]:
        return self._native.double_sparsity_masks

    @property
    def has_rotation(self) -> bool:
        return self._native.has_rotation

    @property
    def double_sparsity_r(self) -> Optional[int]:
        return self._native.double_sparsity_r

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Calibration) and self._native == other._native


class KeyStore:
    """The keys and values of many sequences, per layer (SPEC §2, §7)."""

    def __init__(
        self,
        shape: ModelShape,
        placement: str = "hbm",
        capacity_tokens: int = 1 << 20,
        device: Any = None,
        max_batch: int = 64,
        landmarks: bool = False,
        pariskv_index: bool = False,
        calibration: Optional[Calibration] = None,
        kv_rows: Optional[str] = None,
    ) -> None:
        """``kv_rows``: ``"adjacent"`` (a token's K row then its V row, ``[cap][2][D]``, half
        the host pages a step's fetch touches; the runtime's default, taken when ``None``) or
        ``"separate"`` (K rows and V rows apart); GPU stores, either placement; a CPU store
        accepts either."""
        self.device = _device_text(device)
        self.shape = shape
        self._native = _rewrap(
            _native._Store,
            shape,
            placement,
            capacity_tokens,
            self.device,
            max_batch,
            landmarks,
            pariskv_index,
            calibration._native if calibration is not None else None,
            _stream_for(self.device, None),
            kv_rows,
        )

    def create_sequence(self) -> int:
        return self._native.create_sequence()

    def free_sequence(self, seq: int) -> None:
        _rewrap(self._native.free_sequence, seq)

    def prefill(self, seq: int, layer: int, keys: Any, values: Any, stream: Any = None) -> None:
        """keys/values ``[H_kv, n, D]`` bf16 (post-RoPE keys), contiguous."""
        k, v = describe(keys), describe(values)
        _rewrap(self._native.prefill, seq, layer, k, v, _stream_for(self.device, stream))

    def append(
        self, seqs: Sequence[int], layer: int, keys: Any, values: Any, stream: Any = None
    ) -> None:
        """One token per sequence: keys/values ``[B, H_kv, D]`` bf16, queued on the stream."""
        k, v = describe(keys), describe(values)
        _rewrap(self._native.append, list(seqs), layer, k, v, _stream_for(self.device, stream))

    def lengths(self, seq: int, layer: int) -> tuple:
        """``(stored, total)`` tokens of one layer of a sequence."""
        return _rewrap(self._native.lengths, seq, layer)

    def memory(self) -> dict:
        return self._native.memory()

    def check(self) -> None:
        """Waits and reports a bad key of an appended block (GPU), if any."""
        _rewrap(self._native.check)


class Decoder:
    """Runs one layer's decode step over a :class:`KeyStore`."""

    def __init__(
        self,
        shape: ModelShape,
        device: Any = None,
        k_max: int = 2048,
        calibration: Optional[Calibration] = None,
    ) -> None:
        self.device = _device_text(device)
        self.shape = shape
        self._native = _rewrap(
            _native._Decoder,
            shape,
            self.device,
            k_max,
            calibration._native if calibration is not None else None,
            _stream_for(self.device, None),
        )

    def step(
        self,
        store: KeyStore,
        seqs: Sequence[int],
        layer: int,
        queries: Any,
        out: Any,
        method: str = "fathom(48)",
        k: Optional[int] = None,
        scale: Optional[float] = None,
        placement_transfer: Optional[str] = None,
        return_selection: bool = False,
        stream: Any = None,
        _repeat: int = 1,
    ) -> Optional[Selection]:
        """queries/out ``[B, H_q, D]`` f32 or bf16; ``out`` is written in place, queued on the
        current torch stream (or ``stream``). ``k`` defaults to the paper's k for the longest
        sequence. With ``return_selection`` the selected tokens come back (a host read-back).
        ``_repeat`` (for benchmarks) queues the same step that many times from one call."""
        q, o = describe(queries), describe(out)
        return _rewrap(
            self._native.step,
            store._native,
            list(seqs),
            layer,
            q,
            o,
            method,
            k,
            scale,
            placement_transfer,
            return_selection,
            _stream_for(self.device, stream),
            _repeat,
        )


from . import _torch_ops  # noqa: E402,F401  (registers torch.ops.fathom.step when torch imports)
