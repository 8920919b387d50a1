"""The haystack: real English prose, derivable offline on any machine with Python.

By default, the Python language reference as the running interpreter ships it
(`pydoc_data.topics`, the text `help()` shows: every topic in sorted order, joined by blank
lines; about 65,000 words, ~470 KB, more than an 8k-token context needs). It depends on the
interpreter's version, so the evaluation's header records the version and the text's sha256.
`--haystack FILE` takes any UTF-8 text instead (e.g. a public-domain book).
"""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass


@dataclass(frozen=True)
class Haystack:
    text: str
    source: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def python_reference() -> Haystack:
    import pydoc_data.topics as topics

    text = "\n\n".join(topics.topics[k] for k in sorted(topics.topics))
    return Haystack(text, f"pydoc_data.topics of Python {platform.python_version()}")


def load(path: str | None) -> Haystack:
    if path is None:
        return python_reference()
    with open(path, encoding="utf-8") as f:
        return Haystack(f.read(), path)
