#!/usr/bin/env bash
# 2026-12-03, fourth session (issue #15's standing cell): 16 sequences of 128k tokens from host
# memory, fathom(48) and sparq(32), qwen3-8b, under the record with the re-timed split
# attention (runtime/records, carried in the working tree; the issue asks fathom(48) within
# 1.15x of its link floor; 1.16x at 9e2159b). From the repository root, after
# `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=300 bash bench/calls/h200-2026-12-03d-batch16.sh
set -u
DEFAULT_BUDGET=300 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
if [ ! -x /tmp/fg/.gpu/bin/step-bench ]; then rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg; fi
B=/tmp/fg/.gpu/bin; export FATHOM_KERNEL_CACHE=/tmp/kc-b16 FATHOM_TUNING_DIR=$R/runtime/records
el unpacked
timeout -k 10 $(( $(left) - 10 )) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 16 --no-standing \
  --commit $C --placement host --contexts 128k --out $L/sb-b16 > $L/step-bench-b16.txt 2>&1; el step-bench b16 rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^method|^fathom|^sparq|128k, batch 16" step-bench-b16.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/batch16.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
