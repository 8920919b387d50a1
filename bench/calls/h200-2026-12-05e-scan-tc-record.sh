#!/usr/bin/env bash
# 2026-12-05 (issue #15 items 4 and 7): the tensor-core scan with its operands formed once a block
# won qwen3-8b's HBM scan at 1M (0.1035 ms against the plain 0.1356; call d). Its HBM scan
# entries for every preset shape of the record (G = 4, 7, 8), with `--opt-in scan-tc`, to merge
# into runtime/records/nvidia-h200.json after the call. From the repository root, after
# `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=150 bash bench/calls/h200-2026-12-05e-scan-tc-record.sh
set -u
DEFAULT_BUDGET=150 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
FATHOM_KERNEL_CACHE=/tmp/kc-tune timeout -k 10 $(lim 120) $B/autotune --only scan/hbm --opt-in scan-tc --timings \
  --out $L/tune-tc-all > $L/autotune-tc-all.txt 2>&1; el autotune scan-tc rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^scan" autotune-tc-all.txt; tail -8 autotune-tc-all.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-tc-record.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
