#!/usr/bin/env bash
# Whichever card comes: on an H200, bench/calls/next-refresh.sh (autotune cold, step-bench
# and ncu per kernel under the new record; the H200's record predates seven defaults); on any
# other, every GPU test at today's defaults (all_gpu_tests, gpu_select and gpu_pariskv with
# 450 s each, which they have not had yet; the H100 record is fresh since the seventeenth
# session).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/next-suite-or-refresh.sh
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash bench/calls/next-refresh.sh
fi
DEFAULT_BUDGET=560 . bench/calls/budget.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
all_gpu_tests
{ cat $L/nvidia-smi.txt $L/timeline.txt $L/rc.txt; test_summary; } > $OUT/summary.txt 2>&1
tar czf $OUT/suite.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
