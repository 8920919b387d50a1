#!/usr/bin/env bash
# The fifth (last) device call of the fourth session of 2026-12-02, ~5 minutes: the onepass
# `_chunk` comparing scores with the floor as floats and summing survivors with one warp
# reduction, on the GPU: gpu_select whole and gpu_step's onepass tests side by side, then
# step-bench HBM fathom(48)/sparq(32) at 32k and 1M (against 22f9e43's 2.295 / 10.278 ms), then
# ncu of `_chunk` at 1M if time is left. From the repository root, after `scripts/pack-gpu.sh`;
# carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=270 bash bench/calls/h200-2026-12-02d-select-floats.sh
set -u
. bench/calls/budget.sh
C=${C:-unknown}
export FATHOM_COMMIT=$C
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 70) ./tests/gpu_step-test --ignored --test-threads=1 onepass > $L/gpu_step.log 2>&1; echo "gpu_step onepass rc=$?" >> $L/rc.txt ) &
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_select-test --ignored --test-threads=1 > $L/gpu_select.log 2>&1; echo "gpu_select rc=$?" >> $L/rc.txt )
wait; el tests: $(cat $L/rc.txt | tr '\n' ' ')
timeout -k 10 $(lim 90) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb-hbm > $L/step-bench-hbm.txt 2>&1
el step-bench hbm rc=$?
if [ $(left) -gt 40 ]; then
  timeout -k 5 $(lim 45) ncu --clock-control none --csv --metrics gpu__time_duration.sum,smsp__inst_executed.sum -k regex:onepass_chunk --launch-skip 20 --launch-count 5 \
    $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing --contexts 1m --out $L/ncu-sb > $L/ncu-chunk-1m.csv 2> $L/ncu-chunk-1m.err
  el ncu chunk rc=$?
fi
cd $L && { cat timeline.txt; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done; grep -hE "^(fathom|sparq)" step-bench-hbm.txt; grep -E "onepass_chunk" ncu-chunk-1m.csv | tail -4; } > $OUT/summary.txt 2>&1
tar czf $OUT/c.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
