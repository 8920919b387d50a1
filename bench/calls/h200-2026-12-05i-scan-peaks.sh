#!/usr/bin/env bash
# SUPERSEDED (2026-12-05, sixth session): select-peaks, select-scan-peaks and
# pariskv-decode-table joined autotune's default grid, and `--opt-in` with them is now refused;
# this script is kept as the record of what ran (or was planned). Next: h200-next-record-peaks.sh.
# Issue #15 item 1 (the select, 32 x 1M at k = 512: 50 us asked, 90 measured: its `_chunk`
# streams the scores at ~2 TB/s, bound by loads in flight). The scans now write the peak of
# every 32-token half they score (`ScanSpec::peaks`, `_pk`; both scan templates, a redux or
# three shuffles a (half, head)), and the peaks selects read them (`algorithm: scan_peaks` /
# `scan_peaks_head`; opt-in `autotune --opt-in select-scan-peaks`): a block reads its share's
# peaks (1/32 of its scores), forms the sink's, window's and tail's halves from the scores,
# then reads only its hot tiles (~1/8 of the scores at 1M). Exact on the CPU (cpu_select: every
# family, ties, stored prefixes of every kind, junk in the unwritten peak words, mutations);
# neither has run on a GPU. Predicted (H200): select 32 x 1M ~15-25 us (the hot tiles ~16 MB,
# `_final` ~10), the scan a few % slower for its peaks, the HBM step at 1M ~2 ms faster.
# This call: (1) gpu_scan's peaks test (plain and tensor-core scans, both placements, the peaks
# against the kernel's own scores bit for bit, unwritten words still poison); gpu_select with
# the four peaks variants (the two that stream the scores were refactored around the same hot
# tiles); gpu_step's nine peaks tests; (2) compute-sanitizer's
# four tools on the short and boundary lengths and on the step's scan-peaks g4 test; (3)
# kernel-bench of the scan at 1M with and without peaks (their cost); (4) autotune's select
# (qwen3-8b, HBM) with the opt-ins select-peaks and select-scan-peaks merged into the committed
# record; (5) step-bench fathom(48), sparq(32) in HBM at 32k and 1M under the committed record and
# the merged one; (6) ncu's time of each select and scan kernel in the 1M step, merged record.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=580 bash bench/calls/h200-2026-12-05i-scan-peaks.sh
set -u
DEFAULT_BUDGET=580 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-sp
# With less than 500 s (SHORT), the tests run their first cases and the sanitizer and
# kernel-bench wait for the timing.
SHORT=0; [ $BUDGET -lt 500 ] && SHORT=1
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 90) ./tests/gpu_scan-test --ignored --test-threads=1 peaks > $L/gpu_scan.log 2>&1 )
el gpu_scan peaks rc=$?
only=""; [ $SHORT = 1 ] && only="random_scores short_and_boundary"
( cd /tmp/fg/.gpu && FATHOM_SELECT_ALGORITHMS=peaks,peaks_head,scan_peaks,scan_peaks_head timeout -k 10 $(lim 120) \
    ./tests/gpu_select-test --ignored --test-threads=1 $only > $L/gpu_select.log 2>&1 )
el gpu_select peaks, scan peaks rc=$?
only="peaks"; [ $SHORT = 1 ] && only="scan_peaks_select_g4 scan_peaks_head_tensor_core_scan_g7"
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 150) ./tests/gpu_step-test --ignored --test-threads=1 $only > $L/gpu_step.log 2>&1 )
el gpu_step peaks, scan peaks rc=$?
if [ $SHORT = 0 ]; then
  mkdir -p $L/sanitize
  ( cd /tmp/fg && cp -r $R/scripts . && FATHOM_SELECT_ALGORITHMS=scan_peaks,scan_peaks_head OUT=$L/sanitize timeout -k 10 $(lim 80) \
      bash scripts/sanitize.sh --tests gpu_select,gpu_step --jobs 4 --timeout 75 \
      gpu_select_short_and_boundary_lengths gpu_step_scan_peaks_select_g4 > $L/sanitize.txt 2>&1 )
  el sanitize rc=$?
  for pk in "" "--scan-peaks"; do
    timeout -k 10 $(lim 40) $B/kernel-bench --model qwen3-8b --budgets 48 --tensor-cores --reps 20 $pk --commit $C \
      > $L/kernel-bench$pk.json 2> $L/kernel-bench$pk.txt
    el kernel-bench $pk rc=$?
  done
fi
timeout -k 10 $(lim 90) $B/autotune --model qwen3-8b --only select/hbm/32k --only select/hbm/1m --opt-in select-peaks --opt-in select-scan-peaks --timings \
  --out $L/tune-sp > $L/autotune-sp.txt 2>&1
el autotune select opt-in rc=$?
merged_record $L/tune-sp $L/merged
sb() {  # sb LABEL [env...]
  local label=$1; shift
  env "$@" timeout -k 10 $(lim 80) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" \
    --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb-$label --commit $C > $L/step-bench-$label.txt 2>&1
  el step-bench $label rc=$?
}
if [ $(left) -gt 60 ]; then
  sb committed
  sb scan-peaks FATHOM_TUNING_DIR=$L/merged
fi
if [ $(left) -gt 45 ]; then
  FATHOM_TUNING_DIR=$L/merged timeout -k 10 $(lim 45) ncu --clock-control none --csv \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    -k regex:'select|scan' --launch-count 400 $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 \
    --placement hbm --steps 3 --slots 1 --no-standing --contexts 1m --out $L/ncu-sb > $L/ncu.csv 2> $L/ncu.err
  el ncu rc=$?
  python3 $R/bench/calls/ncu-kernel-times.py $L/ncu.csv "select and scan kernels, fathom(48) HBM 1M step, merged record, $C" \
    > $L/ncu.txt 2>&1
fi
# With time left, the ParisKV decode tables (bench/calls/h200-2026-12-05h-pariskv-dt.sh, which
# found no machine this session): the rerank with and without, then pariskv(100) at 1M in HBM.
if [ $(left) -gt 150 ]; then
  timeout -k 10 $(lim 50) $B/autotune --model qwen3-8b --only pariskv_rerank/hbm --opt-in pariskv-decode-table \
    --timings --out $L/tune-dt > $L/autotune-dt.txt 2>&1
  el autotune rerank opt-in rc=$?
  merged_record $L/tune-dt $L/merged-dt
  for label in committed dt; do
    [ $(left) -gt 40 ] || break
    extra=""; [ $label = dt ] && extra="FATHOM_TUNING_DIR=$L/merged-dt"
    qb=1; [ $label = dt ] && qb=16
    env $extra timeout -k 10 $(lim $(( $(left) / 2 ))) $B/step-bench --model qwen3-8b --methods "pariskv(100)" --contexts 1m \
      --placement hbm --batch 1 --no-standing --slots 2 --pariskv-query-blocks $qb --out $L/sb-pk-$label --commit $C \
      > $L/step-bench-pk-$label.txt 2>&1
    el step-bench pariskv $label rc=$?
  done
fi
cd $L && { cat nvidia-smi.txt timeline.txt
  grep -hE "^test |test result|panicked|not run" gpu_scan.log gpu_select.log gpu_step.log | head -30
  cat sanitize/summary.txt 2>/dev/null; tail -2 sanitize.txt
  for f in kernel-bench*.txt; do echo "== $f"; tail -12 $f; done
  echo "== autotune (select, opt-in)"; grep -E "^select|disqualified" autotune-sp.txt | head -40; tail -6 autotune-sp.txt
  for f in step-bench-*.txt; do echo "== $f"; grep -hE "^method|^fathom|^sparq|record" $f; done
  echo "== ncu"; head -16 ncu.txt 2>/dev/null
  echo "== autotune (rerank, opt-in)"; grep -E "rerank" autotune-dt.txt 2>/dev/null | head -12
  for f in step-bench-pk-*.txt; do echo "== $f"; grep -hE "^method|^pariskv|record" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-peaks.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
