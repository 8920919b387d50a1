#!/usr/bin/env bash
# The step's recorder rewritten around `execute::Target` (thirteenth session): the GPU tests
# that run the step, five binaries at once (gpu_step whole, gpu_pariskv_step, gpu_tuning,
# gpu_foreign, gpu_decode's klt_g7), and memcheck plus racecheck on the head-groups test.
# Took 179 s on a cold H100 (`bench/results/head-groups-verify-h100-2026-12-06-75e2677-hg-summary.txt`).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) bash bench/calls/h100-2026-12-06p-verify-recorder.sh
set -u
DEFAULT_BUDGET=380 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown} FATHOM_KERNEL_CACHE=/tmp/kc-all
unpack && el unpacked
cp -r "$R/scripts" /tmp/fg/
cd /tmp/fg/.gpu
for t in gpu_step gpu_pariskv_step gpu_tuning gpu_foreign; do
  ( timeout -k 10 $(lim 330) ./tests/$t-test --ignored --test-threads=2 > $L/$t.log 2>&1; el "$t rc=$?" ) &
done
( timeout -k 10 $(lim 300) ./tests/gpu_decode-test --ignored --test-threads=1 gpu_decode_klt_g7 > $L/gpu_decode.log 2>&1
  el "gpu_decode rc=$?" ) &
( cd /tmp/fg && OUT=$L/sanitize timeout -k 10 $(lim 330) bash scripts/sanitize.sh --tools memcheck,racecheck \
    --tests gpu_step --jobs 2 --timeout 300 head_groups > $L/sanitize.txt 2>&1; el "sanitize rc=$?" ) &
wait
cd $L && { cat timeline.txt; grep -h "^test result\|FAILED\|panicked" *.log; cat sanitize/summary.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/verify.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
