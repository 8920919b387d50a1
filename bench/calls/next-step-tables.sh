#!/usr/bin/env bash
# step-bench fathom(48) and sparq(32) (qwen3-8b, batch 1) under the committed record of the card
# that comes: HBM 32k, then host 1M, for the README's step tables (HBM 1M comes from
# next-scan-tile-in-step.sh, which this follows in one call when the time is short).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=180 bash bench/calls/next-step-tables.sh
set -u
DEFAULT_BUDGET=180 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown} FATHOM_KERNEL_CACHE=/tmp/kc-tables
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
step_bench hbm hbm 32k 50
step_bench host host 1m 120
cd $L && { cat nvidia-smi.txt timeline.txt
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq|floor" $f; done; } > $OUT/tables-summary.txt 2>&1
tar czf $OUT/step-tables.tgz -C $OUT logs && rm -rf $L
cat $OUT/tables-summary.txt
