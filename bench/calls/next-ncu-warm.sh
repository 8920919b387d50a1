#!/usr/bin/env bash
# Each kernel's time in the HBM step (qwen3-8b, fathom(48), batch 1) at 32k and 1M, as ncu
# times it by default (every cache flushed before each kernel) and with the caches as the
# kernel before left them (--cache-control none), which is what a step sees: at 32k a layer's
# scores (4 MiB), selections and run tables fit in L2, so the flushed figures overstate the
# small kernels by their cold reads. Which of them the 32k step (38 us a layer; 30 asked)
# really waits on decides where the next change goes.
# Any GPU. From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=400 bash bench/calls/next-ncu-warm.sh
set -u
DEFAULT_BUDGET=400 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
NCU_CACHE=all ncu_step_times "hbm 32k"
NCU_CACHE=none ncu_step_times "hbm 32k"
NCU_CACHE=all ncu_step_times "hbm 1m"
NCU_CACHE=none ncu_step_times "hbm 1m"
cd $L && { cat nvidia-smi.txt timeline.txt; for f in times-*.txt; do echo "== $f"; cat $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/ncu-warm.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
