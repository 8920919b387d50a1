#!/usr/bin/env bash
# The project's test command. Makes sure NVRTC is there (scripts/install-nvrtc.sh finds it or
# installs the pinned wheel into fathom's cache), points FATHOM_NVRTC at it so every test uses
# that library, then runs the tests of every crate in the workspace. GPU tests are
# `#[ignore = "needs a CUDA GPU"]` and show as ignored. Extra arguments go to `cargo test`,
# e.g. `scripts/test.sh -p fathom-codegen` or `scripts/test.sh -- --ignored` on a GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FATHOM_NVRTC="$(scripts/install-nvrtc.sh)"
export FATHOM_NVRTC
echo "test.sh: FATHOM_NVRTC=$FATHOM_NVRTC" >&2

exec cargo test --workspace "$@"
