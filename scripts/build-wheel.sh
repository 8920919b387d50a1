#!/usr/bin/env bash
# Builds the abi3 wheel of the Python package `fathom` (python/) for a GPU machine: release,
# manylinux (the tag maturin's audit finds: manylinux_2_34 with this machine's glibc; the H200
# machine has glibc >= 2.35, Python 3.12), into .gpu/wheels/. Uses the venv of
# scripts/python-env.sh. On the GPU machine:
#   python3 -m pip install --no-deps --target /tmp/site .gpu/wheels/*.whl
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="$(scripts/python-env.sh)"
rm -rf .gpu/wheels && mkdir -p .gpu/wheels
"$VENV/bin/maturin" build --release -m python/Cargo.toml -o .gpu/wheels "$@"
ls -l .gpu/wheels
