#!/usr/bin/env bash
# 2026-12-03, third device call: the new plan kernel (9e2159b: one barrier a round over two
# verdict trees) under compute-sanitizer (all four tools, gpu_plan_fathom_edges); step-bench's
# standing cell, 16 sequences of 128k from host (fathom(48), sparq(32)); ncu's time per kernel
# of the HBM step at 32k (fathom(48), the committed record). From the repository root, after
# `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=400 bash bench/calls/h200-2026-12-03-sanitize-batch-profile.sh
set -u
DEFAULT_BUDGET=400 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin; export FATHOM_KERNEL_CACHE=/tmp/kc3
el unpacked
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 150) bash scripts/sanitize.sh --tests gpu_plan --jobs 4 --timeout 140 gpu_plan_fathom_edges > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
timeout -k 10 $(lim 150) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 128k --batch 16 --placement host --no-standing --commit $C --out $L/sb-b16 > $L/step-bench-b16.txt 2>&1; el step-bench b16 rc=$?
timeout -k 10 $(lim 80) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 2000 \
  $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing --contexts 32k --out $L/ncu-sb-32k > $L/ncu-step-32k.csv 2> $L/ncu-step-32k.err
el ncu rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; cat sanitize/summary.txt 2>/dev/null; tail -3 sanitize.txt; grep -E "^method|^fathom|^sparq|missed|met \(" step-bench-b16.txt; tail -3 ncu-step-32k.err; } > $OUT/summary.txt 2>&1
tar czf $OUT/sbp.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
