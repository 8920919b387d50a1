#!/usr/bin/env bash
# Creates (once) the venv the Python package is built and tested with, with pinned tools, and
# prints its path: $FATHOM_PY_VENV, else ~/.cache/fathom/venv. No torch: the CPU backend needs
# numpy only.
set -euo pipefail
VENV="${FATHOM_PY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fathom/venv}"
PINS=(maturin==1.16.0 numpy==2.4.6 pytest==9.2.0 ruff==0.17.5)
if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -m pip freeze 2>/dev/null \
    | grep -qx "ruff==0.17.5"; then
    python3 -m venv "$VENV" >&2
    "$VENV/bin/python" -m pip install -q "${PINS[@]}" >&2
fi
echo "$VENV"
