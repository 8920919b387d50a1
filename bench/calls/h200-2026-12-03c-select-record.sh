#!/usr/bin/env bash
# 2026-12-03, third session (issue #15 items 1 and 7): the select's entries of the H200 record
# re-timed with this session's cut (autotune --only select/hbm, every preset shape, to a
# scratch --out), merged into a copy of the committed record, then step-bench of fathom(48) and
# sparq(32) in HBM at 32k and 1M under that record, and ncu's time per kernel of the HBM step
# at 32k. Run right after h200-2026-12-03c-select-digits.sh (same pack, already unpacked in
# /tmp/fg while the machine is warm; unpacked again otherwise). Carry [".gpu"]:
#   C=<commit> BUDGET=330 bash bench/calls/h200-2026-12-03c-select-record.sh
set -u
DEFAULT_BUDGET=330 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
if [ ! -x /tmp/fg/.gpu/bin/step-bench ]; then rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg; fi
B=/tmp/fg/.gpu/bin; export FATHOM_KERNEL_CACHE=/tmp/kc-record
el unpacked
timeout -k 10 $(lim 90) $B/autotune --only select/hbm --timings --out $L/tune-select > $L/autotune-select.txt 2>&1; el autotune select rc=$?
mkdir -p $L/record && cp runtime/records/nvidia-h200.json $L/record/
timeout -k 10 $(lim 20) $B/autotune --merge $L/tune-select/nvidia-h200.json --into $L/record/nvidia-h200.json > $L/merge.txt 2>&1; el merge rc=$?
export FATHOM_TUNING_DIR=$L/record
timeout -k 10 $(lim 160) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing --commit $C \
  --placement hbm --contexts 32k,1m --out $L/sb-hbm > $L/step-bench-hbm.txt 2>&1; el step-bench hbm rc=$?
timeout -k 10 $(lim 40) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 2000 \
  $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing --contexts 32k --out $L/ncu-sb > $L/ncu-step-32k.csv 2> $L/ncu-step-32k.err
el ncu rc=$?
python3 bench/calls/ncu-kernel-times.py $L/ncu-step-32k.csv "HBM step 32k, $C" > $L/ncu-step-32k.txt 2>&1
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^select|total" autotune-select.txt; cat merge.txt
  grep -E "^method|^fathom|^sparq|missed|met" step-bench-hbm.txt; cat ncu-step-32k.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/select-record.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
