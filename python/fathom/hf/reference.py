"""A small pure-torch implementation of SPEC §6 for `dense` and `oracle`, with the same calls as
fathom's `KeyStore` and `Decoder`: the tests' oracle for the Hugging Face plumbing, never a
decoding path of its own (it keeps bf16 K/V rows in torch tensors and scores every key exactly).

`oracle`: exact scores `q·k` from the bf16 keys, fp32 math; every query head keeps the first
SINK and last LOCAL tokens and the top-k of the rest, ties broken by the lower index; exact
softmax attention over its own set. `dense`: softmax attention over every token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import CapacityError, InvalidInputError, MethodError, SequenceError
from .methods import LOCAL, SINK, parse_method


@dataclass(frozen=True)
class ReferenceShape:
    """The attention shape the reference needs, read like `fathom.ModelShape.from_hf_config`."""

    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads

    @staticmethod
    def from_hf_config(cfg: dict) -> ReferenceShape:
        q = int(cfg["num_attention_heads"])
        kv = cfg.get("num_key_value_heads") or q
        d = cfg.get("head_dim") or int(cfg["hidden_size"]) // q
        if q % int(kv):
            raise InvalidInputError(
                f"num_attention_heads {q} is not a multiple of num_key_value_heads {kv}"
            )
        return ReferenceShape(int(cfg["num_hidden_layers"]), q, int(kv), int(d))


class ReferenceKeyStore:
    """bf16 K/V rows per (sequence, layer), grown by doubling; lengths per (sequence, layer)."""

    def __init__(
        self, shape: ReferenceShape, *, capacity_tokens: int, device="cpu", max_batch: int = 64
    ):
        self.shape = shape
        self.device = torch.device(device)
        self.capacity_tokens = capacity_tokens
        self.max_batch = max_batch
        self._rows: dict[int, list[list]] = {}  # seq -> per layer [keys, values, length]
        self._next = 0

    def create_sequence(self) -> int:
        seq, self._next = self._next, self._next + 1
        self._rows[seq] = [[None, None, 0] for _ in range(self.shape.layers)]
        return seq

    def free_sequence(self, seq: int) -> None:
        self._layers(seq)
        del self._rows[seq]

    def _layers(self, seq: int) -> list[list]:
        if seq not in self._rows:
            raise SequenceError(f"sequence {seq} is not in this store (freed, or never created)")
        return self._rows[seq]

    def _check(self, layer: int, keys: torch.Tensor, values: torch.Tensor, lead: tuple) -> None:
        if not 0 <= layer < self.shape.layers:
            raise InvalidInputError(
                f"layer {layer} is out of range: the store has {self.shape.layers}"
            )
        want = (*lead, self.shape.head_dim)
        for name, t in (("keys", keys), ("values", values)):
            if t.dtype != torch.bfloat16:
                raise InvalidInputError(f"{name} must be bf16, got {t.dtype}")
            if tuple(t.shape) != want:
                raise InvalidInputError(f"{name} must have shape {list(want)}, got {list(t.shape)}")

    def _used(self) -> int:
        return sum(max(e[2] for e in layers) for layers in self._rows.values())

    def _write(self, seq: int, entry: list, keys: torch.Tensor, values: torch.Tensor) -> None:
        n_old, n_new = entry[2], keys.shape[1]
        # A sequence counts with its longest layer, as fathom's store counts it.
        longest = max(e[2] for e in self._rows[seq])
        if self._used() + max(0, n_old + n_new - longest) > self.capacity_tokens:
            raise CapacityError(
                f"{n_new} more tokens do not fit the store's {self.capacity_tokens}"
            )
        if entry[0] is None or entry[0].shape[1] < n_old + n_new:
            size = max(64, 2 * (n_old + n_new))
            grown = [
                torch.empty(
                    (self.shape.kv_heads, size, self.shape.head_dim),
                    dtype=torch.bfloat16,
                    device=self.device,
                )
                for _ in range(2)
            ]
            if entry[0] is not None:
                grown[0][:, :n_old] = entry[0][:, :n_old]
                grown[1][:, :n_old] = entry[1][:, :n_old]
            entry[0], entry[1] = grown
        entry[0][:, n_old : n_old + n_new] = keys
        entry[1][:, n_old : n_old + n_new] = values
        entry[2] = n_old + n_new

    def prefill(self, seq: int, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        self._check(
            layer, keys, values, (self.shape.kv_heads, keys.shape[1] if keys.ndim == 3 else -1)
        )
        entry = self._layers(seq)[layer]
        if entry[2]:
            raise SequenceError(f"sequence {seq} layer {layer} is already prefilled")
        self._write(seq, entry, keys, values)

    def append(self, seqs, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        seqs = list(seqs)
        self._check(layer, keys, values, (len(seqs), self.shape.kv_heads))
        entries = [self._layers(s)[layer] for s in seqs]
        for b, (seq, entry) in enumerate(zip(seqs, entries)):
            self._write(seq, entry, keys[b].unsqueeze(1), values[b].unsqueeze(1))

    def lengths(self, seq: int, layer: int) -> tuple[int, int]:
        n = self._layers(seq)[layer][2]
        return n, n

    def rows(self, seq: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values, n = self._layers(seq)[layer]
        if n == 0:
            raise SequenceError(f"sequence {seq} layer {layer} holds no tokens")
        return keys[:, :n], values[:, :n]

    def memory(self) -> dict:
        held = sum(
            e[0].numel() * 4 for layers in self._rows.values() for e in layers if e[0] is not None
        )
        return {
            "device_bytes": held if self.device.type != "cpu" else 0,
            "host_bytes": 0,
            "pinned_bytes": 0,
            "sequences": len(self._rows),
        }


def select_head(scores: torch.Tensor, k: int) -> torch.Tensor:
    """SPEC §6 selection of one query head from exact scores `[n]`: ascending token indices."""
    n = scores.shape[0]
    if n <= SINK + LOCAL + k:
        return torch.arange(n, device=scores.device)
    middle = scores[SINK : n - LOCAL]
    # A stable descending sort keeps equal scores in index order: ties go to the lower index.
    order = torch.sort(middle, descending=True, stable=True).indices[:k] + SINK
    picked = torch.cat(
        [
            torch.arange(SINK, device=scores.device),
            order,
            torch.arange(n - LOCAL, n, device=scores.device),
        ]
    )
    return torch.sort(picked).values


class ReferenceDecoder:
    """`step` for `dense` and `oracle` over a `ReferenceKeyStore`; others are a MethodError."""

    def __init__(self, shape: ReferenceShape, *, device="cpu", k_max: int = 2048, calibration=None):
        self.shape = shape
        self.device = torch.device(device)
        self.k_max = k_max

    def step(
        self,
        store: ReferenceKeyStore,
        seqs,
        layer: int,
        queries: torch.Tensor,
        out: torch.Tensor,
        method: str = "dense",
        k: int | None = None,
        scale: float | None = None,
        return_selection: bool = False,
    ):
        try:
            m = parse_method(method)
        except ValueError as e:
            raise MethodError(str(e)) from None
        if m.name not in ("dense", "oracle"):
            raise MethodError(f"the torch reference runs dense and oracle only, not {method!r}")
        seqs = list(seqs)
        want = (len(seqs), self.shape.q_heads, self.shape.head_dim)
        for name, t in (("queries", queries), ("out", out)):
            if tuple(t.shape) != want or t.dtype not in (torch.float32, torch.bfloat16):
                raise InvalidInputError(
                    f"{name} must be f32 or bf16 of shape {list(want)}, "
                    f"got {t.dtype} {list(t.shape)}"
                )
        if m.name == "oracle" and (k is None or not 1 <= k <= self.k_max):
            raise InvalidInputError(f"oracle needs k in 1..={self.k_max}, got {k}")
        scale = self.shape.head_dim**-0.5 if scale is None else scale
        g = self.shape.group
        selections = []
        for b, seq in enumerate(seqs):
            keys, values = store.rows(seq, layer)
            q = queries[b].float().view(self.shape.kv_heads, g, -1)
            logits = torch.einsum("hgd,hnd->hgn", q, keys.float())
            if m.name == "dense":
                weights = torch.softmax(logits * scale, dim=-1)
                out[b] = torch.einsum("hgn,hnd->hgd", weights, values.float()).reshape(
                    out.shape[1:]
                )
                continue
            rows = []
            for h in range(self.shape.q_heads):
                kv, gh = divmod(h, g)
                picked = select_head(logits[kv, gh], k)
                w = torch.softmax(logits[kv, gh, picked] * scale, dim=-1)
                out[b, h] = w @ values[kv, picked].float()
                rows.append(picked)
            selections.append(rows)
        return selections if return_selection else None
