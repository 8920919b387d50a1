#!/usr/bin/env bash
# The record re-made whole at today's defaults on whichever card comes (ran on an H100 at
# 9bc2853, 2026-12-08: the committed H100 record; the H200's is still c4d3276's, made on random
# plans before one wave and the scan's peaks), then step-bench fathom(48) and sparq(32) under it
# (HBM 32k and 1M, host 1M), then `autotune --quick` cold into a scratch folder (issue #15 item
# 7: the default run within 180 s and --quick within 30 s on the H200). AUTOTUNE_ONLY=1 skips
# the step-benches (a call of ~270 s).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/next-record.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
rm -rf /tmp/kc-record
FATHOM_KERNEL_CACHE=/tmp/kc-record timeout -k 10 $(lim 300) $B/autotune --timings --out $L/tune > $L/autotune.txt 2>&1
el "autotune rc=$?"
rec=$(ls $L/tune/*.json 2>/dev/null | head -1)
[ -n "$rec" ] && export FATHOM_TUNING_DIR=$L/tune
if [ -z "${AUTOTUNE_ONLY:-}" ]; then
  FATHOM_KERNEL_CACHE=/tmp/kc-record step_bench hbm hbm 32k,1m 100
  FATHOM_KERNEL_CACHE=/tmp/kc-record step_bench host host 1m 150
fi
unset FATHOM_TUNING_DIR
rm -rf /tmp/kc-quick
[ "$(left)" -gt 45 ] && { FATHOM_KERNEL_CACHE=/tmp/kc-quick timeout -k 10 $(lim 60) $B/autotune --quick --timings \
  --out $L/tune-quick > $L/autotune-quick.txt 2>&1; el "autotune --quick rc=$?"; }
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^\s*(ceilings|compile|prepare|verify|time|total)|record|disqualified|no winner" autotune.txt | tail -40
  echo "== quick"; grep -E "^\s*(ceilings|compile|prepare|verify|time|total)" autotune-quick.txt 2>/dev/null
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done; } > $OUT/summary.txt 2>&1
mkdir -p $OUT/record && cp $L/tune/* $OUT/record/ 2>/dev/null
tar czf $OUT/record.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
