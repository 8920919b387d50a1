#!/usr/bin/env bash
# Second session of 2026-12-02, call 4 (at 7a5d1fe): the full default autotune (it was stopped at
# case 133 of 162 by the limit below), step-bench of fathom(48)/sparq(32) at 32k and 1M in both
# placements, and an ncu source profile of the plan and the union. Carry [".gpu"]:
#   C=<commit> BUDGET=540 bash bench/calls/h200-2026-12-02b-record-and-profile.sh
set -u
R=$PWD; L=$OUT/logs; mkdir -p $L
T0=$(date +%s); BUDGET=${BUDGET:-520}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local a=$1 b=$(left); [ $b -lt $a ] && a=$b; [ $a -lt 5 ] && a=5; echo $a; }
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $L/timeline.txt; }
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin
timeout -k 10 $(lim 360) $B/autotune --timings --out $L/tune > $L/autotune.txt 2>&1
el autotune rc=$?
if [ -f $L/tune/nvidia-h200.json ]; then export FATHOM_TUNING_DIR=$L/tune; fi
timeout -k 10 $(lim 160) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k,1m --batch 1 --no-standing --out $L/sb > $L/step-bench.txt 2>&1
el step-bench rc=$?
if [ $(left) -gt 25 ]; then
  timeout -k 5 $(lim 60) ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:'plan|onepass_union' --launch-skip 40 --launch-count 2 -o $L/src32k \
    $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing --contexts 32k --out $L/sbn > $L/ncu-src.txt 2>&1
  el ncu rc=$?
  timeout -k 5 20 ncu --import $L/src32k.ncu-rep --page source --print-source sass --csv > $L/ncu-source-sass.csv 2>&1; el import rc=$?
fi
cd $L && { cat timeline.txt; grep -E "^\[|autotune:" autotune.txt | tail -50; tail -8 autotune.txt; grep -E "^fathom|^sparq" step-bench.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/c4.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
