#!/usr/bin/env bash
# The H200 at today's defaults (unseen since c4d3276: its README figures predate programmatic
# launch, the plan's prologue, the tail in the plan's launch, the peaks pass's own pointer and
# the plan's run tables shared among 4 blocks a KV head at 1M).
# Issue #15 asks the default autotune within 3 minutes on the H200. This call: autotune, the
# default grid, on an empty kernel cache with --timings (the record to commit as
# runtime/records/nvidia-h200.json when whole); then step-bench fathom(48) and sparq(32) under
# that record: HBM 32k and 1M, host 1M.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]; only on an H200:
#   C=$(git rev-parse --short HEAD) BUDGET=570 bash bench/calls/h200-next-refresh.sh
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
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^\s*(ceilings|compile|prepare|verify|time|total)|ready in|record" autotune.txt | tail -12
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done; } > $OUT/summary.txt 2>&1
mkdir -p $OUT/record && cp $L/tune/* $OUT/record/ 2>/dev/null
tar czf $OUT/h200-refresh.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
