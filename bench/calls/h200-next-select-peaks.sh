#!/usr/bin/env bash
# SUPERSEDED (2026-12-05, sixth session): select-peaks, select-scan-peaks and
# pariskv-decode-table joined autotune's default grid, and `--opt-in` with them is now refused;
# this script is kept as the record of what ran (or was planned). Next: h200-next-record-peaks.sh.
# Issue #15 item 1 (the select, 32 x 1M at k = 512: 50 us asked, 90 measured). The one-read
# select's `_chunk` is bound by its tile loop's instructions (~190 a warp a tile: compare, vote,
# append, cuts) because its running floor rises slowly: at 1M most warp-tiles still hold a
# survivor. `algorithm: peaks` (opt-in, `autotune --opt-in select-peaks`; exact on the CPU,
# `cpu_select`, not yet run on a GPU) streams each block's share once for the largest key of
# every peak tile (a max, a few shuffles, a shared atomic a load), takes the k-th largest peak
# as its floor and then reads only the tiles whose peak reaches it (1/8 of the share at 1M;
# ~k + 6% survivors on Gaussian scores, so at most one cut). Predicted: 32 x 1M ~50-60 us (one
# read at HBM's rate, ~38 us, plus ~5 us of hot tiles and `_final`'s ~10), 32k about as today.
# Its one-block form (`algorithm: peaks_head`, in the same opt-in) gives each query head one
# block that writes the selection itself (two launches, no `_final`): at 32k, where the
# one-read select is two ~11 us latency chains (`_chunk`, `_final`), predicted ~8-10 us.
# This call: (1) gpu_select with only the peaks variant, the step's peaks tests, compute-sanitizer
# on the short and boundary lengths; (2) autotune's select (qwen3-8b, HBM) with the opt-in, so
# onepass and peaks are timed in one run; (3) step-bench fathom(48) and sparq(32) in HBM at 32k
# and 1M under the committed record and under it with the opt-in run's entries merged; (4) ncu's
# time, DRAM throughput and instructions of each select kernel in the 1M step with the merged record.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=450 bash bench/calls/h200-next-select-peaks.sh
set -u
DEFAULT_BUDGET=450 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-peaks
( cd /tmp/fg/.gpu && FATHOM_SELECT_ALGORITHMS=peaks,peaks_head timeout -k 10 $(lim 120) ./tests/gpu_select-test --ignored \
    --test-threads=1 > $L/gpu_select.log 2>&1 )
el gpu_select peaks rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 60) ./tests/gpu_step-test --ignored --test-threads=1 peaks \
    > $L/gpu_step.log 2>&1 )
el gpu_step peaks rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && FATHOM_SELECT_ALGORITHMS=peaks,peaks_head OUT=$L/sanitize timeout -k 10 $(lim 70) \
    bash scripts/sanitize.sh --tests gpu_select --jobs 4 --timeout 60 gpu_select_short_and_boundary_lengths \
    > $L/sanitize.txt 2>&1 )
el sanitize rc=$?
timeout -k 10 $(lim 90) $B/autotune --model qwen3-8b --only select/hbm --opt-in select-peaks --timings \
  --out $L/tune-peaks > $L/autotune-peaks.txt 2>&1
el autotune select opt-in rc=$?
merged_record $L/tune-peaks $L/merged
sb() {  # sb LABEL [env...]
  local label=$1; shift
  env "$@" timeout -k 10 $(lim $(( $(left) / 2 ))) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" \
    --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb-$label --commit $C > $L/step-bench-$label.txt 2>&1
  el step-bench $label rc=$?
}
if [ $(left) -gt 60 ]; then
  sb committed
  sb peaks FATHOM_TUNING_DIR=$L/merged
fi
# Where the select's time goes at 1M under the merged record (which select kernels run, and
# how long each takes, with DRAM throughput: is phase 1 at HBM's rate?).
if [ $(left) -gt 50 ]; then
  FATHOM_TUNING_DIR=$L/merged timeout -k 10 $(lim 45) ncu --clock-control none --csv \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum \
    -k regex:'select' --launch-count 400 $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 \
    --placement hbm --steps 3 --slots 1 --no-standing --contexts 1m --out $L/ncu-sb > $L/ncu-select.csv 2> $L/ncu-select.err
  el ncu select rc=$?
  python3 $R/bench/calls/ncu-kernel-times.py $L/ncu-select.csv "select kernels, fathom(48) HBM 1M step, merged record, $C" \
    > $L/ncu-select.txt 2>&1
fi
cd $L && { cat nvidia-smi.txt timeline.txt
  grep -hE "^test |test result|panicked|not run" gpu_select.log gpu_step.log | head -20
  cat sanitize/summary.txt 2>/dev/null; tail -2 sanitize.txt
  echo "== autotune (select, opt-in)"; grep -E "^select|disqualified|peaks|onepass" autotune-peaks.txt | head -60; tail -6 autotune-peaks.txt
  for f in step-bench-*.txt; do echo "== $f"; grep -hE "^method|^fathom|^sparq|record" $f; done
  echo "== ncu"; head -12 ncu-select.txt 2>/dev/null
  grep -h "dram__throughput" ncu-select.csv 2>/dev/null | head -8; } > $OUT/summary.txt 2>&1
tar czf $OUT/select-peaks.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
