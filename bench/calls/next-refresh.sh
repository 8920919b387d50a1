#!/usr/bin/env bash
# The record re-made at today's defaults on whichever card comes (the H200's is unseen since
# c4d3276; the H100's was re-made in the twenty-seventh session at e76dcd6, the last with random
# plan inputs), then step-bench fathom(48) and sparq(32) under that record (HBM 32k and 1M, host
# 1M; a step-bench that reaches 1M spends ~60 s making its layers), then, with what time is
# left, ncu's time per kernel in the HBM step at 32k and 1M with the caches as the kernel before
# left them and flushed (ncu's default). `SANITIZE=SECONDS` first runs memcheck and racecheck on
# gpu_scan's tensor-core test (a kernel change to land in the same call; ~30 s each on an H100).
# autotune plans the store cases on step-bench's layers by default since the twenty-seventh
# session (`--plan-inputs synthetic`); `PLAN_INPUTS=random` plans them as every record before.
# Issue #15 asks the default autotune within 3 minutes on the H200 (149 s on an H100 at e76dcd6,
# random plan inputs).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=570 bash bench/calls/next-refresh.sh
set -u
DEFAULT_BUDGET=570 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
[ -n "${SANITIZE:-}" ] && sanitize_test gpu_scan gpu_scan_tensor_cores_match_reference "$SANITIZE"
rm -rf /tmp/kc-refresh
FATHOM_KERNEL_CACHE=/tmp/kc-refresh timeout -k 10 $(lim 330) $B/autotune --timings ${PLAN_INPUTS:+--plan-inputs $PLAN_INPUTS} --out $L/tune > $L/autotune.txt 2>&1
el "autotune rc=$?"
export FATHOM_KERNEL_CACHE=/tmp/kc-refresh
rec=$(ls $L/tune/*.json 2>/dev/null | head -1)
[ -n "$rec" ] && export FATHOM_TUNING_DIR=$L/tune
step_bench hbm hbm 32k,1m 100
step_bench host host 1m 150
NCU_CACHE=none ncu_step_times "hbm 32k"
NCU_CACHE=all ncu_step_times "hbm 32k"
NCU_CACHE=none ncu_step_times "hbm 1m"
NCU_CACHE=all ncu_step_times "hbm 1m"
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^\s*(ceilings|compile|prepare|verify|time|total)|ready in|record" autotune.txt | tail -12
  cat sanitize/summary.txt 2>/dev/null
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done
  for f in times-*.txt; do echo "== $f"; head -8 $f; done; } > $OUT/summary.txt 2>&1
mkdir -p $OUT/record && cp $L/tune/* $OUT/record/ 2>/dev/null
# a call after this one on the warm machine can time this record (FATHOM_TUNING_DIR=/tmp/refresh-tune)
rm -rf /tmp/refresh-tune && cp -r $L/tune /tmp/refresh-tune 2>/dev/null
tar czf $OUT/refresh.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
