#!/usr/bin/env bash
# Second session of 2026-12-02, call 3 (at 1122604): the GPU tests of the rewritten select, union
# and plan (five binaries at a time), ncu per kernel of the HBM step at 32k and 1M, step-bench
# HBM, autotune of the select. From a pack of the tree; carry [".gpu"]:
#   C=<commit> BUDGET=520 bash bench/calls/h200-2026-12-02b-kernels.sh
set -u
R=$PWD; L=$OUT/logs; mkdir -p $L
T0=$(date +%s); BUDGET=${BUDGET:-540}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local a=$1 b=$(left); [ $b -lt $a ] && a=$b; [ $a -lt 5 ] && a=5; echo $a; }
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $L/timeline.txt; }
C=${C:-unknown}; export FATHOM_COMMIT=$C
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin
( cd /tmp/fg/.gpu && echo "gpu_select gpu_plan gpu_pariskv gpu_decode gpu_step gpu_pariskv_step gpu_tuning gpu_attention gpu_scan gpu_jit" | tr ' ' '\n' | xargs -P 5 -I{} bash -c 'timeout -k 10 240 ./tests/{}-test --ignored --test-threads=1 > '$L'/{}.log 2>&1; echo "{} rc=$?"' > $L/rc.txt )
el tests done; cat $L/rc.txt | tr '\n' ' '; echo
SB="--model qwen3-8b --methods fathom(48) --batch 1 --placement hbm --steps 3 --slots 1 --no-standing"
for ctx in 32k 1m; do
  timeout -k 10 $(lim 100) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 600 \
    $B/step-bench $SB --contexts $ctx --out $L/ncu-sb-$ctx > $L/ncu-step-$ctx.csv 2> $L/ncu-step-$ctx.err
  el ncu step $ctx rc=$?
done
timeout -k 10 $(lim 150) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb-hbm > $L/step-bench-hbm.txt 2>&1
el step-bench hbm rc=$?
timeout -k 10 $(lim 150) $B/autotune --model qwen3-8b --only select/hbm/32k --only select/hbm/1m --timings --out $L/tune-select > $L/autotune-select.txt 2>&1
el autotune select rc=$?
cd $L && { cat timeline.txt; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done; tail -14 step-bench-hbm.txt; grep -E "^\[|best|entry|select" autotune-select.txt | tail -8; } > $OUT/summary.txt 2>&1
tar czf $OUT/c3.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
