"""``torch.ops.fathom.step``: the decode step as a torch.library custom op, registered when torch
imports, so that ``torch.compile`` keeps it opaque (one op that mutates ``out``)."""

from __future__ import annotations

import importlib.util
import itertools

_DECODERS: dict = {}
_STORES: dict = {}
_NEXT = itertools.count(1)


def register(decoder, store) -> tuple:
    """Handles a compiled graph can name: ``torch.ops.fathom.step(d, s, seqs, layer, q, out, m)``
    takes the integers this returns for ``decoder`` and ``store``."""
    d, s = next(_NEXT), next(_NEXT)
    _DECODERS[d], _STORES[s] = decoder, store
    return d, s


if importlib.util.find_spec("torch") is not None:
    import torch

    @torch.library.custom_op("fathom::step", mutates_args=("out",))
    def _step(
        decoder: int,
        store: int,
        seqs: list[int],
        layer: int,
        queries: torch.Tensor,
        out: torch.Tensor,
        method: str,
        k: int,
    ) -> None:
        _DECODERS[decoder].step(
            _STORES[store], seqs, layer, queries, out, method=method, k=None if k < 0 else k
        )

    @_step.register_fake
    def _(decoder, store, seqs, layer, queries, out, method, k):
        return None
