#!/usr/bin/env bash
# One call (~590 s): attention's prefetched rows (next-attention-prefetch.sh, ~300 s), then on
# an H100 the HBM 1M scan tile question (next-scan-tile-in-step.sh in what is left), on an H200
# the step tables under its committed record (next-step-tables.sh).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) bash bench/calls/next-prefetch-then-tile.sh
set -u
BUDGET=300 bash bench/calls/next-attention-prefetch.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  BUDGET=250 bash bench/calls/next-step-tables.sh
else
  BUDGET=285 bash bench/calls/next-scan-tile-in-step.sh
fi
