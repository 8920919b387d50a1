#!/usr/bin/env bash
# SUPERSEDED (2026-12-05, sixth session): select-peaks, select-scan-peaks and
# pariskv-decode-table joined autotune's default grid, and `--opt-in` with them is now refused;
# this script is kept as the record of what ran (or was planned). Next: h200-next-record-peaks.sh.
# Issue #15 item 5 (pariskv(100) in HBM at 1M: 0.68 ms a layer asked). The decode tables
# (`PariskvRerankSpec::decode_table`, `_dt`) and the split query (`subspace_blocks`) were exact on
# an H100 at f75ce70 (bench/results/pariskv-dt-h100-2026-12-05-f75ce70-summary.txt: the rerank
# 13.7x faster at 1M in HBM), but that call ran out of time before any step-bench figure and
# before the split query's retrieval test gave a verdict. This call, on the H200, in the order
# that makes the figures come first: (1) compute-sanitizer's four tools over the step's dt and
# split-query tests; (2) autotune's rerank with the opt-in, merged into the committed record;
# (3) step-bench pariskv(100) in HBM at 32k and 1M under the committed record and under the
# merged one with `--pariskv-query-blocks 16`; (4) ncu's time per kernel of the 1M HBM step under
# the merged record with the query split and not (which says whether the split should be the
# default); (5) the split query's retrieval test with the time left.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=580 bash bench/calls/h200-2026-12-05h-pariskv-dt.sh
set -u
DEFAULT_BUDGET=580 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-dt
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 110) bash scripts/sanitize.sh \
    --tests gpu_pariskv_step --jobs 4 --timeout 100 gpu_pariskv_step_d128_g4_decode_tables gpu_pariskv_step_d128_g4_split_query \
    > $L/sanitize.txt 2>&1 )
el sanitize dt, split query rc=$?
timeout -k 10 $(lim 60) $B/autotune --model qwen3-8b --only pariskv_rerank --opt-in pariskv-decode-table \
  --timings --out $L/tune-dt > $L/autotune-dt.txt 2>&1
el autotune rerank opt-in rc=$?
merged_record $L/tune-dt $L/merged
sb() {  # sb LABEL [env...]
  local label=$1 extra=""; shift
  [ $label = dt ] && extra="--pariskv-query-blocks 16"
  env "$@" timeout -k 10 $(lim 130) $B/step-bench --model qwen3-8b --methods "pariskv(100)" \
    --contexts 32k,1m --placement hbm --batch 1 --no-standing $extra --out $L/sb-$label --commit $C > $L/step-bench-$label.txt 2>&1
  el step-bench $label rc=$?
}
sb committed
sb dt FATHOM_TUNING_DIR=$L/merged
for qb in 16 1; do
  [ $(left) -gt 60 ] || break
  FATHOM_TUNING_DIR=$L/merged timeout -k 10 $(lim 50) ncu --clock-control none --csv --metrics gpu__time_duration.sum \
    -k regex:'pariskv_(query|vote|topc|rerank)|attention|fetch' --launch-count 3000 \
    $B/step-bench --model qwen3-8b --methods "pariskv(100)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing \
    --pariskv-query-blocks $qb --contexts 1m --out $L/ncu-sb-$qb > $L/ncu-dt-q$qb.csv 2> $L/ncu-dt-q$qb.err
  el ncu dt query blocks $qb rc=$?
  python3 $R/bench/calls/ncu-kernel-times.py $L/ncu-dt-q$qb.csv "pariskv(100) HBM 1M step, merged record, query blocks $qb, $C" > $L/ncu-dt-q$qb.txt 2>&1
done
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 400) ./tests/gpu_pariskv-test --ignored --test-threads=1 \
    retrieval_with_split_query_matches_the_reference > $L/gpu_pariskv.log 2>&1 )
el gpu_pariskv split query rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt
  cat sanitize/summary.txt 2>/dev/null; tail -2 sanitize.txt
  grep -hE "^test |test result|panicked" gpu_pariskv.log | head -20
  echo "== autotune (rerank, opt-in)"; grep -E "^autotune:|disqualified|rerank" autotune-dt.txt | head -40
  for f in step-bench-*.txt; do echo "== $f"; grep -hE "^method|^pariskv|record" $f; done
  for f in ncu-*.txt; do echo "== $f"; head -14 $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/pariskv-dt.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
