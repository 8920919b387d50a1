#!/usr/bin/env bash
# 2026-12-05 (issue #15): what the last session left unrun. gpu_plan's every-block-size test, which
# now plans more than twice as many segments as threads, against main's plan kernel; then
# `autotune --quick` from an empty kernel cache with the attention grid narrowed to 128 and 256
# threads (3f81088; the issue asks 30 s). From the repository root, after `scripts/pack-gpu.sh`;
# carry [".gpu"]:
#   C=<commit> BUDGET=200 bash bench/calls/h200-2026-12-05a-plan-quick.sh
set -u
DEFAULT_BUDGET=200 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
(cd /tmp/fg/.gpu && timeout -k 10 $(lim 90) ./tests/gpu_plan-test --ignored --test-threads=1 every_block_size) > $L/gpu-plan.txt 2>&1; el gpu_plan rc=$?
rm -rf /tmp/kc-quick
FATHOM_KERNEL_CACHE=/tmp/kc-quick timeout -k 10 $(lim 80) $B/autotune --quick --timings --out $L/tune-quick > $L/autotune-quick.txt 2>&1; el autotune quick rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "test result|passed|FAILED|panicked" gpu-plan.txt; tail -8 autotune-quick.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/plan-quick.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
