"""Method strings as the step takes them (`"fathom(48)"`, `"sparq(32)"`, `"dense"`...), read only
for what the cache must know before the first step: which store the method needs and whether it
needs a calibration. Checking the method itself is the decoder's job (a bad one is its
`MethodError`); this module refuses only what it cannot even read.

Pure Python (no torch), so the evaluation's planning code and the CI tests can use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# SPEC §6: every query head keeps the first SINK tokens and the last LOCAL tokens.
SINK = 4
LOCAL = 32

_METHOD = re.compile(r"^([a-z_]+)(?:\(\s*([0-9]+(?:\.[0-9]+)?)\s*\))?$")
_KNOWN = {
    "dense": False,
    "oracle": False,
    "fathom": True,
    "sparq": True,
    "double_sparsity": True,
    "loki": True,
    "pariskv": True,
    "thumbnail": False,
    "uniform": True,
    "landmark": False,
}
# Methods whose plan reads calibration statistics (SPEC §3 σ², §4 double_sparsity's channels,
# §5 the KLT basis). fathom plans without one too (mean square block scales), but the paper's
# protocol fits σ² from the prefill, so the cache fits one unless told not to.
_CALIBRATED = {"fathom", "double_sparsity", "loki"}


def paper_k(context: int) -> int:
    """The `k` of the paper's protocol: 128 below 16k tokens, 256 below 32k, 512 from 32k on
    (the runtime's `reference::select::paper_k`)."""
    if context >= 32 * 1024:
        return 512
    if context >= 16 * 1024:
        return 256
    return 128


@dataclass(frozen=True)
class Method:
    """One parsed method string: `name` and its number (`None` for `dense`, `oracle`...)."""

    text: str
    name: str
    arg: float | None

    @property
    def needs_calibration(self) -> bool:
        return self.name in _CALIBRATED

    @property
    def needs_pariskv_index(self) -> bool:
        return self.name == "pariskv"

    @property
    def needs_landmarks(self) -> bool:
        return self.name == "landmark"

    @property
    def selects(self) -> bool:
        """False only for `dense`, which attends to every token."""
        return self.name != "dense"

    @property
    def own_k(self) -> int | None:
        """`pariskv(k)` carries its own `k` (SPEC §12); every other method takes the request's."""
        return int(self.arg) if self.name == "pariskv" and self.arg is not None else None


def parse_method(text: str) -> Method:
    """Reads a method string, or raises `ValueError` naming what is wrong and what is allowed."""
    if not isinstance(text, str):
        raise ValueError(f"a method is a string such as 'fathom(48)', not {type(text).__name__}")
    m = _METHOD.match(text.strip())
    if not m or m.group(1) not in _KNOWN:
        raise ValueError(
            f"unknown method {text!r}: expected one of dense, oracle, fathom(B), sparq(r), "
            "double_sparsity(r), loki(r), pariskv(k), thumbnail, uniform(t), landmark"
        )
    name, arg = m.group(1), m.group(2)
    if _KNOWN[name] and arg is None:
        raise ValueError(f"method {text!r} needs its number, e.g. {name}(32)")
    if not _KNOWN[name] and arg is not None:
        raise ValueError(f"method {name!r} takes no number, got {text!r}")
    return Method(text=text.strip(), name=name, arg=float(arg) if arg is not None else None)


def same_share_budget(method: str, head_dim: int) -> str:
    """The method that reads the same share of the store at `head_dim` as `method` does at
    D = 128 (SPEC §13: a budget is bits per token per KV head, so at D = 64 it halves). Methods
    without a budget, and any method at D = 128, come back unchanged."""
    m = parse_method(method)
    if (
        head_dim == 128
        or m.arg is None
        or m.name not in ("fathom", "sparq", "double_sparsity", "loki")
    ):
        return m.text
    scaled = m.arg * head_dim / 128
    number = int(scaled) if float(scaled).is_integer() else scaled
    return f"{m.name}({number})"
