"""The end-to-end evaluation of issue #16: `python -m fathom.eval --help`.

`tasks` (RULER-style samples and their score), `haystack` and `report` use the standard library
only; `runner` (the model, torch, transformers) is imported by the command alone.
"""
