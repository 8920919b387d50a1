#!/usr/bin/env bash
# The project's test command. Makes sure NVRTC is there (scripts/install-nvrtc.sh finds it or
# installs the pinned wheel into fathom's cache), points FATHOM_NVRTC at it so every test uses
# that library, then runs the tests of every crate in the workspace. GPU tests are
# `#[ignore = "needs a CUDA GPU"]` and show as ignored. Without arguments it then tests the Python
# package (scripts/test-python.sh: ruff, the wheel, pytest in a pinned venv; no torch). Extra arguments go to `cargo test`,
# e.g. `scripts/test.sh -p fathom-codegen` or `scripts/test.sh -- --ignored` on a GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FATHOM_NVRTC="$(scripts/install-nvrtc.sh)"
export FATHOM_NVRTC
echo "test.sh: FATHOM_NVRTC=$FATHOM_NVRTC" >&2

cargo test --workspace "$@"
# The Python package (ruff, wheel, pytest) after a full run, not after `-p CRATE` or `-- FILTER`;
# and the shell scripts parse (a device call that stops on a syntax error costs the session's
# GPU time).
if [[ $# -eq 0 ]]; then
    scripts/test-python.sh
    for script in scripts/*.sh bench/calls/*.sh; do
        bash -n "$script" || { echo "test.sh: $script does not parse" >&2; exit 1; }
    done
fi
