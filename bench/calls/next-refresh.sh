#!/usr/bin/env bash
# The record re-made at today's defaults, on whichever card comes (the H200's is unseen since
# c4d3276: its README figures predate programmatic launch, the plan's prologue, the tail in the
# plan's launch, the peaks pass's own pointer, the plan's run tables shared among blocks, the
# coarse floor and paired run-table entries; the autotune candidates now time the peaks selects
# with the coarse floor the step runs, so every card's record wants re-making).
# Issue #15 asks the default autotune within 3 minutes on the H200. This call: autotune, the
# default grid, on an empty kernel cache with --timings (the record to commit under
# runtime/records/ when whole); then step-bench fathom(48) and sparq(32) under that record:
# HBM 32k and 1M, host 1M; then, with what time is left, ncu's time per kernel in the HBM step
# at 32k and 1M with the caches as the kernel before left them and flushed (ncu's default).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=570 bash bench/calls/next-refresh.sh
set -u
DEFAULT_BUDGET=570 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
rm -rf /tmp/kc-refresh
FATHOM_KERNEL_CACHE=/tmp/kc-refresh timeout -k 10 $(lim 330) $B/autotune --timings --out $L/tune > $L/autotune.txt 2>&1
el "autotune rc=$?"
export FATHOM_KERNEL_CACHE=/tmp/kc-refresh
rec=$(ls $L/tune/*.json 2>/dev/null | head -1)
[ -n "$rec" ] && export FATHOM_TUNING_DIR=$L/tune
step_bench hbm hbm 32k,1m 100
step_bench host host 1m 110
NCU_CACHE=none ncu_step_times "hbm 32k"
NCU_CACHE=all ncu_step_times "hbm 32k"
NCU_CACHE=none ncu_step_times "hbm 1m"
NCU_CACHE=all ncu_step_times "hbm 1m"
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^\s*(ceilings|compile|prepare|verify|time|total)|ready in|record" autotune.txt | tail -12
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done
  for f in times-*.txt; do echo "== $f"; head -8 $f; done; } > $OUT/summary.txt 2>&1
mkdir -p $OUT/record && cp $L/tune/* $OUT/record/ 2>/dev/null
tar czf $OUT/refresh.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
