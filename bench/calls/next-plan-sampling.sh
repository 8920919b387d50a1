#!/usr/bin/env bash
# Where the plan's blocks wait at 32k (twentieth session: the direct water line took ~40% of
# the bisection's instructions away and the plan's 9.22 us not at all; ncu's default warp
# sampling gave ~60 samples a launch). ncu's warp-state sampling at its finest interval
# (--warp-sampling-interval 0) on one launch of the plan in the HBM 32k step (qwen3-8b,
# fathom(48), batch 1), with the rounds and with the direct water line; the SASS view with its
# stall samples exported as CSV (sum them by region with the SASS addresses of BAR.SYNC, or by
# line with `codegen machine-code --lineinfo` and bench/calls/sass-lines.py).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=200 bash bench/calls/next-plan-sampling.sh
set -u
DEFAULT_BUDGET=200 . bench/calls/budget.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
ncu_sampling rounds fathom_plan
ncu_sampling direct fathom_plan --plan-direct-line
ncu_sampling select 'select.*_chunk' --select-resident
cd $L && { cat nvidia-smi.txt timeline.txt; grep -hE "Duration|Warp Cycles Per Issued|Executed Instructions\"" *-details.csv; } \
  > $OUT/summary.txt 2>&1
tar czf $OUT/plan-sampling.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
