#!/usr/bin/env bash
# The Python package's tests without a GPU: ruff over python/, the wheel built with maturin
# (debug profile: quicker to build, same code), installed into the pinned venv, then pytest
# (the GPU tests in python/tests/gpu skip unless FATHOM_GPU_TESTS=1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="$(scripts/python-env.sh)"
"$VENV/bin/ruff" check python
"$VENV/bin/ruff" format --check python
OUT="${CARGO_TARGET_DIR:-target}/wheels"
rm -rf "$OUT"
"$VENV/bin/maturin" build -m python/Cargo.toml -o "$OUT"
"$VENV/bin/python" -m pip install -q --force-reinstall --no-deps "$OUT"/fathom-*.whl
cd /tmp && exec "$VENV/bin/python" -m pytest -q "$OLDPWD/python/tests"
