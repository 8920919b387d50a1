#!/usr/bin/env bash
# One call for whichever card comes (twenty-sixth session: no device came). On an H200 the
# record is re-made (stale since c4d3276) with the step tables and ncu (next-refresh.sh); it is
# left in /tmp/refresh-tune, so a second call on the warm machine can settle the 1M scan tile
# under it: `REC=/tmp/refresh-tune/nvidia-h200.json C=... BUDGET=390 bash bench/calls/next-scan-tile-in-step.sh`.
# On an H100 the 1M scan tile question (next-scan-tile-in-step.sh), then step-bench HBM 32k and
# host 1M under the committed record (next-step-tables.sh).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) bash bench/calls/next-any-card.sh
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  BUDGET=555 bash bench/calls/next-refresh.sh
else
  BUDGET=390 bash bench/calls/next-scan-tile-in-step.sh
  BUDGET=165 bash bench/calls/next-step-tables.sh
fi
