"""A saved dense prefill: what every method's decode branches from (SPEC §13: one dense prefill
per sample, then each method decodes from a copy of its cache).

One `PromptRow` per sequence: the post-RoPE keys and values of every full layer (the model's own
`[H_kv, n, D]` bf16, as they enter attention), the last `sliding_window - 1` K/V of every sliding
layer, and the queries of the prompt's last positions per full layer, from which the calibration
is fitted when none is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .. import CalibrationError, InvalidInputError


@dataclass
class PromptRow:
    length: int
    full: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    window: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    queries: dict[int, torch.Tensor] = field(default_factory=dict)
    next_token: int | None = None

    def nbytes(self) -> int:
        tensors = [t for kv in (*self.full.values(), *self.window.values()) for t in kv]
        tensors += list(self.queries.values())
        return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class Prompt:
    """The saved prefill of one or more sequences (rows), in the order they decode."""

    rows: list[PromptRow]

    @staticmethod
    def join(prompts) -> Prompt:
        """One batch from several prompts (each may have its own length)."""
        return Prompt([row for p in prompts for row in p.rows])

    @property
    def lengths(self) -> list[int]:
        return [r.length for r in self.rows]

    @property
    def next_tokens(self) -> list[int | None]:
        return [r.next_token for r in self.rows]

    def calibration_inputs(
        self, full_layers: list[int], max_keys: int = 1024, max_queries: int = 128
    ):
        """Per store layer, keys of every row joined along tokens (`[H_kv, N, D]`) and the saved
        queries joined along positions (`[H_q, P, D]`): the calibration's prefill sample. At
        most `max_keys` tokens and `max_queries` positions a layer, evenly spaced over each row
        (σ² and a D x D covariance settle long before 8k tokens, and the sample crosses to the
        fitting code as plain numbers)."""
        keys, queries = [], []
        per_row_k = max(1, max_keys // len(self.rows))
        per_row_q = max(1, max_queries // len(self.rows))
        for layer in full_layers:
            missing = [i for i, r in enumerate(self.rows) if layer not in r.queries]
            if missing:
                raise CalibrationError(
                    f"prompt rows {missing} kept no queries of layer {layer}: record the prefill "
                    "with "
                    "calibration_queries > 0, or pass a calibration"
                )
            keys.append(torch.cat([_spaced(r.full[layer][0], per_row_k) for r in self.rows], dim=1))
            queries.append(
                torch.cat([_spaced(r.queries[layer], per_row_q) for r in self.rows], dim=1)
            )
        return keys, queries

    def window_batch(self, layer: int):
        """The window K/V of a sliding layer for all rows, `[B, H_kv, w, D]`; rows must hold
        windows of one length (they do once every prompt is at least the window long)."""
        sizes = {r.window[layer][0].shape[1] for r in self.rows}
        if len(sizes) != 1:
            raise InvalidInputError(
                f"sliding layer {layer}: the prompts' windows hold {sorted(sizes)} tokens; "
                "rows of one "
                "batch must all be at least the sliding window long, or decode them one at a time"
            )
        keys = torch.stack([r.window[layer][0] for r in self.rows])
        values = torch.stack([r.window[layer][1] for r in self.rows])
        return keys, values


def _spaced(t: torch.Tensor, most: int) -> torch.Tensor:
    """At most `most` rows of `t` (`[H, n, D]`) along n, evenly spaced, first and last kept."""
    n = t.shape[1]
    if n <= most:
        return t
    idx = torch.linspace(0, n - 1, most, device=t.device).round().long()
    return t.index_select(1, idx)
