#!/usr/bin/env bash
# The first device call of the second session of 2026-12-02: measurements only, from a pack of
# main (`scripts/pack-gpu.sh`; carry [".gpu"]):
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/h200-2026-12-02b-measure.sh
# 1. the GPU tests whose code changed since the last GPU run (gpu_store, gpu_fetch);
# 2. exact attention (torch sdpa, every backend) over one qwen3-8b layer at 32k/128k/1M;
# 3. ncu (--clock-control none) over step-bench: every kernel of the HBM step at 32k and 1M,
#    fathom(48), durations per kernel; the select's kernels in detail at 32k and 1M;
# 4. step-bench HBM fathom(48)/sparq(32) at 32k and 1M (the baseline of this session's work);
#    host fathom(48) at 256k/1M with separate and adjacent K/V rows;
# 5. autotune of the ParisKV rerank with the many-block top-k opted in.
set -u
R=$PWD; L=$OUT/logs; mkdir -p $L
T0=$(date +%s); BUDGET=${BUDGET:-560}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local a=$1 b=$(left); [ $b -lt $a ] && a=$b; [ $a -lt 5 ] && a=5; echo $a; }
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $L/timeline.txt; }
C=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin; T=/tmp/fg/.gpu/tests
export FATHOM_COMMIT=$C
# 1
( cd /tmp/fg/.gpu && for t in gpu_store gpu_fetch; do timeout -k 10 $(lim 150) ./tests/$t-test --ignored --test-threads=1 > $L/$t.log 2>&1 & done; wait )
el tests done
# 2
timeout -k 10 $(lim 90) python3 python/bench/exact_attention.py --contexts 32k,128k,1m --commit $C --out $L/exact-attention.json > $L/exact-attention.txt 2>&1
el exact done
# 3
SB="--model qwen3-8b --methods fathom(48) --batch 1 --placement hbm --steps 3 --slots 1 --no-standing"
for ctx in 32k 1m; do
  timeout -k 10 $(lim 120) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 2000 \
    $B/step-bench $SB --contexts $ctx --out $L/ncu-sb-$ctx > $L/ncu-step-$ctx.csv 2> $L/ncu-step-$ctx.err
  el ncu step $ctx rc=$?
  timeout -k 10 $(lim 120) ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
    -k regex:'select|plan|scan|fetch|attention|oracle' --launch-skip 400 --launch-count 9 \
    $B/step-bench $SB --contexts $ctx --out $L/ncu-sb2-$ctx > $L/ncu-detail-$ctx.txt 2>&1
  el ncu detail $ctx rc=$?
done
# 4
timeout -k 10 $(lim 150) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb-hbm > $L/step-bench-hbm.txt 2>&1
el step-bench hbm rc=$?
for rows in separate adjacent; do
  timeout -k 10 $(lim 120) $B/step-bench --model qwen3-8b --methods "fathom(48)" --contexts 256k,1m --placement host --batch 1 --no-standing --kv-rows $rows --out $L/sb-host-$rows > $L/step-bench-host-$rows.txt 2>&1
  el step-bench host $rows rc=$?
done
# 5
if [ $(left) -gt 60 ]; then
  timeout -k 10 $(lim 200) $B/autotune --model qwen3-8b --only pariskv_rerank --opt-in pariskv-select-multiblock --timings --out $L/tune-mb > $L/autotune-mb.txt 2>&1
  el autotune mb rc=$?
fi
cd $L && { cat timeline.txt; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done; cat exact-attention.txt; tail -12 step-bench-hbm.txt; tail -6 step-bench-host-*.txt; tail -16 autotune-mb.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/c1.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
