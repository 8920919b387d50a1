#!/usr/bin/env bash
# 2026-12-03, second session (issue #15 item 1): where the one-read select's time goes at 32k.
# The fused variant measured no faster than _chunk + _final (autotune, b7aefc9), so the cost is
# the block top-k's cuts, not the launch: ncu's source counters (stall reasons per SASS
# instruction, kernels compiled with line info) for `_chunk` and `_final` of the HBM step at
# 32k (qwen3-8b, fathom(48), the committed record), and the warp-state and scheduler sections;
# then gpu_select_ties_and_signed_zeros, which the previous call's time limit cut off.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=280 bash bench/calls/h200-2026-12-03-select-profile.sh
set -u
DEFAULT_BUDGET=280 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
if [ ! -x /tmp/fg/.gpu/bin/step-bench ]; then rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg; fi
B=/tmp/fg/.gpu/bin; export FATHOM_KERNEL_CACHE=/tmp/kc5 FATHOM_JIT_LINEINFO=1; rm -rf /tmp/kc5
el unpacked
timeout -k 10 $(lim 150) ncu --clock-control none --section SourceCounters --section WarpStateStats --section SchedulerStats \
  --section LaunchStats --section Occupancy --section SpeedOfLight -k regex:onepass_chunk\|onepass_final --launch-skip 40 --launch-count 2 -o $L/select-32k \
  $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing --contexts 32k --out $L/sb > $L/ncu.txt 2>&1
el ncu rc=$?
ncu -i $L/select-32k.ncu-rep --page details --csv > $L/details.csv 2>&1; el details rc=$?
ncu -i $L/select-32k.ncu-rep --page source --csv --print-source sass > $L/source-sass.csv 2>&1; el source rc=$?
# The one gpu_select test the last call's time limit cut off (every algorithm, fused included).
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 100) ./tests/gpu_select-test --ignored --test-threads=1 ties > $L/gpu_select-ties.log 2>&1 ); el gpu_select ties rc=$?
{ cat $L/timeline.txt; grep -E "test result|FAILED|panicked" $L/gpu_select-ties.log; tail -5 $L/ncu.txt; wc -c $L/details.csv $L/source-sass.csv; } > $OUT/summary.txt
tar czf $OUT/profile.tgz -C $OUT logs
cat $OUT/summary.txt
