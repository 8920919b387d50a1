#!/usr/bin/env bash
# 2026-12-03, second session (issue #15 item 1): the one-read selects' cut with its digit
# matches issued together (count_digits: every lane joins every match, so a thread's matches
# overlap; ncu had a quarter of _chunk's stall samples on one match at a time). gpu_select
# (every algorithm), the step's one-read select tests, autotune's select subject (qwen3-8b, HBM,
# --opt-in select-fused, scratch --out) to compare with the same run at b7aefc9, ncu's time per
# kernel of the HBM step at 32k (committed record), compute-sanitizer (four tools) on
# gpu_select_short_and_boundary_lengths. From the repository root, after
# `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=390 bash bench/calls/h200-2026-12-03-select-matches.sh
set -u
DEFAULT_BUDGET=390 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin; export FATHOM_KERNEL_CACHE=/tmp/kc6; rm -rf /tmp/kc6
el unpacked
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 190) ./tests/gpu_select-test --ignored --test-threads=1 > $L/gpu_select.log 2>&1 ); el gpu_select rc=$?
timeout -k 10 $(lim 40) $B/autotune --model qwen3-8b --only select/hbm --opt-in select-fused --timings --out $L/tune-select > $L/autotune-select.txt 2>&1; el autotune select rc=$?
timeout -k 10 $(lim 40) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 2000 \
  $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing --contexts 32k --out $L/ncu-sb-32k > $L/ncu-step-32k.csv 2> $L/ncu-step-32k.err
el ncu rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 90) bash scripts/sanitize.sh --tests gpu_select --jobs 4 --timeout 80 gpu_select_short_and_boundary_lengths > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 60) ./tests/gpu_step-test --ignored --test-threads=1 select > $L/gpu_step.log 2>&1 ); el gpu_step select rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^test |test result|FAILED|panicked" gpu_select.log gpu_step.log | head -20; grep -E "select|total" autotune-select.txt | head -12; cat sanitize/summary.txt 2>/dev/null; tail -2 sanitize.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/matches.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
