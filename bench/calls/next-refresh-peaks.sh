#!/usr/bin/env bash
# The record re-made with the scan candidates timed as the step runs them: at the one-wave grid
# in HBM (f6f1a1e) and writing the peaks of their halves where the select the step will run
# reads them (the select tuned first). The twenty-fifth session's first record (one wave, no
# peaks) picked w8 t128 tc at HBM 1M (98.9 us alone against w8 t64 tc's 102.8) while in the
# step, which writes the peaks there, t128 took 103.3-103.7 us and t64 99.5 (ncu, H100).
# Then step-bench fathom(48) and sparq(32) under that record: HBM 32k and 1M, host 1M.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=330 bash bench/calls/next-refresh-peaks.sh
set -u
DEFAULT_BUDGET=330 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
rm -rf /tmp/kc-refresh
FATHOM_KERNEL_CACHE=/tmp/kc-refresh timeout -k 10 $(lim 220) $B/autotune --timings --out $L/tune > $L/autotune.txt 2>&1
el "autotune rc=$?"
export FATHOM_KERNEL_CACHE=/tmp/kc-refresh
rec=$(ls $L/tune/*.json 2>/dev/null | head -1)
[ -n "$rec" ] && export FATHOM_TUNING_DIR=$L/tune
step_bench hbm hbm 32k,1m 90
step_bench host host 1m 100
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^\s*(ceilings|compile|prepare|verify|time|total)|ready in|record" autotune.txt | tail -12
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done; } > $OUT/summary.txt 2>&1
mkdir -p $OUT/record && cp $L/tune/* $OUT/record/ 2>/dev/null
tar czf $OUT/refresh-peaks.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
