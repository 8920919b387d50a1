#!/usr/bin/env bash
# The least of bench/calls/h200-2026-12-05i-scan-peaks.sh, for a lease of a few minutes: is the
# select from the scan's peaks exact on the GPU? gpu_step's scan-peaks tests first (the scan
# writing the peaks and the select reading them, both placements, every method, graph replays;
# the plain scan at G = 4, the tensor-core one at G = 7), then gpu_scan's peaks test, then
# gpu_select's random and boundary cases for the four peaks variants.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=180 bash bench/calls/h200-2026-12-05j-scan-peaks-min.sh
set -u
DEFAULT_BUDGET=180 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-sp
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 80) ./tests/gpu_step-test --ignored --test-threads=1 \
    scan_peaks_select_g4 scan_peaks_head_tensor_core_scan_g7 > $L/gpu_step.log 2>&1 )
el gpu_step scan peaks rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 60) ./tests/gpu_scan-test --ignored --test-threads=1 peaks > $L/gpu_scan.log 2>&1 )
el gpu_scan peaks rc=$?
( cd /tmp/fg/.gpu && FATHOM_SELECT_ALGORITHMS=peaks,peaks_head,scan_peaks,scan_peaks_head timeout -k 10 $(lim 60) \
    ./tests/gpu_select-test --ignored --test-threads=1 random_scores short_and_boundary > $L/gpu_select.log 2>&1 )
el gpu_select peaks, scan peaks rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt
  grep -hE "^test |test result|panicked|mismatch|differ" gpu_step.log gpu_scan.log gpu_select.log | head -40; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-peaks-min.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
