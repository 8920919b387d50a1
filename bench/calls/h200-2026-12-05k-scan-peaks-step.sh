#!/usr/bin/env bash
# SUPERSEDED (2026-12-05, sixth session): select-peaks, select-scan-peaks and
# pariskv-decode-table joined autotune's default grid, and `--opt-in` with them is now refused;
# this script is kept as the record of what ran (or was planned). Next: h200-next-record-peaks.sh.
# Issue #15 item 1, the step's verdict on the scan-peaks selects (opt-in `select-scan-peaks`).
# The first call of the day (bench/calls/h200-2026-12-05i-scan-peaks.sh, on an H100) found them
# exact (gpu_scan's peaks, gpu_step's nine peaks tests, gpu_select's random, boundary,
# million-token and compact cases; compute-sanitizer clean) and the select alone 32 x 1M 95 ->
# 56 us (ncu in the step: `_chunk` 31.7 + `_final` 10.3 us), while the scan's peaks cost ~15 us
# a layer at 1M; its step-bench compared no record with a select-only record, which says
# nothing. This call compares like with like, on whatever GPU comes: two autotune runs of the
# select (HBM, 32k and 1M), one with `select-peaks` only and one adding `select-scan-peaks`,
# each merged into the committed record (or standing alone where the GPU has none), then
# step-bench fathom(48) in HBM at 32k and 1M under each, the first again at the end (drift);
# with time left, gpu_select's ties and signed zeros for the two scan-peaks variants (cut by
# the first call's timeout).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=400 bash bench/calls/h200-2026-12-05k-scan-peaks-step.sh
set -u
DEFAULT_BUDGET=400 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-sp
for label in peaks scan-peaks; do
  extra=""; [ $label = scan-peaks ] && extra="--opt-in select-scan-peaks"
  timeout -k 10 $(lim 60) $B/autotune --model qwen3-8b --only select/hbm/32k --only select/hbm/1m --opt-in select-peaks $extra \
    --timings --out $L/tune-$label > $L/autotune-$label.txt 2>&1
  el autotune select $label rc=$?
  merged_record $L/tune-$label $L/merged-$label
done
sb() {  # sb LABEL RECORD-LABEL
  timeout -k 10 $(lim 120) env FATHOM_TUNING_DIR=$L/merged-$2 $B/step-bench --model qwen3-8b --methods "fathom(48)" \
    --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb-$1 --commit $C > $L/step-bench-$1.txt 2>&1
  el step-bench $1 rc=$?
}
sb peaks peaks
sb scan-peaks scan-peaks
[ $(left) -gt 60 ] && sb peaks-again peaks
if [ $(left) -gt 40 ]; then
  ( cd /tmp/fg/.gpu && FATHOM_SELECT_ALGORITHMS=scan_peaks,scan_peaks_head timeout -k 10 $(lim 90) \
      ./tests/gpu_select-test --ignored --test-threads=1 ties_and_signed_zeros > $L/gpu_select.log 2>&1 )
  el gpu_select ties scan peaks rc=$?
fi
cd $L && { cat nvidia-smi.txt timeline.txt
  for f in autotune-*.txt; do echo "== $f"; grep -E "^select" $f; done
  for f in sb-*/*.json; do echo "== $f"; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['rows']: print(r['method'], r['context'], r['placement'], r['status'], 'gpu_ms=%.4f'%r['gpu_ms'], 'per_layer_us=%.1f'%(1000*r['gpu_ms']/36))
" $f; done
  grep -hE "^test |test result|panicked" gpu_select.log 2>/dev/null | head; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-peaks-step.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
