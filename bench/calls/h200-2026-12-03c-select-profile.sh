#!/usr/bin/env bash
# 2026-12-03, third session (issue #15 item 1): where the one-read select's time goes after
# 57fca3b's cut. ncu's source counters (kernels with line info) and the warp-state, scheduler,
# occupancy, memory and speed-of-light sections of `_chunk` and `_final`: at 1M tokens (t512
# i4, the record's winner) inside autotune's select case for qwen3-8b, and at 32k (t512 i2)
# inside the HBM step. From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=240 bash bench/calls/h200-2026-12-03c-select-profile.sh
set -u
DEFAULT_BUDGET=240 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
if [ ! -x /tmp/fg/.gpu/bin/step-bench ]; then rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg; fi
B=/tmp/fg/.gpu/bin; export FATHOM_KERNEL_CACHE=/tmp/kc-prof FATHOM_JIT_LINEINFO=1; rm -rf /tmp/kc-prof
el unpacked
S="--section SourceCounters --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis"
timeout -k 10 $(lim 110) ncu --clock-control none $S -k regex:'t512_i4_onepass_(chunk|final)' --launch-skip 6 --launch-count 2 -o $L/select-1m \
  $B/autotune --model qwen3-8b --only select/hbm/1m --out $L/tune > $L/ncu-1m.txt 2>&1
el ncu 1m rc=$?
timeout -k 10 $(lim 90) ncu --clock-control none $S -k regex:'onepass_(chunk|final)' --launch-skip 40 --launch-count 2 -o $L/select-32k \
  $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing --contexts 32k --out $L/sb > $L/ncu-32k.txt 2>&1
el ncu 32k rc=$?
for r in 1m 32k; do
  ncu -i $L/select-$r.ncu-rep --page details --csv > $L/details-$r.csv 2>&1
  ncu -i $L/select-$r.ncu-rep --page source --csv --print-source sass > $L/source-sass-$r.csv 2>&1
done
el exported
{ cat $L/timeline.txt; tail -3 $L/ncu-1m.txt $L/ncu-32k.txt; wc -c $L/details-*.csv $L/source-sass-*.csv; } > $OUT/summary.txt
rm -rf $L/tune $L/sb
tar czf $OUT/profile.tgz -C $OUT logs
cat $OUT/summary.txt
