#!/usr/bin/env bash
# The plan with its segments' addresses preloaded (`PlanSpec::preload_segments`, opt-in, exact
# on the CPU emulator with 4 mutants caught): its GPU test, compute-sanitizer's memcheck and
# racecheck on it, and kernel-bench's plan timings with and without it at 1M and 32k (qwen3-8b,
# fathom(48) and sparq(32), host and HBM stores). Predicted: 1M ~21 -> ~12 us (the plain form
# waits one global round trip an entry loop, 16 of them at 256 threads and 32 segments a
# head), 32k -0.5 us. If it holds, make it the only form (the flag goes, the default loop with
# it). From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=200 bash bench/calls/h100-next-plan-preload.sh
set -u
DEFAULT_BUDGET=200 . bench/calls/budget.sh
C=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
( cd $TESTS/.. && timeout -k 10 $(lim 70) ./tests/gpu_plan-test --ignored --test-threads=1 preloaded > $L/gpu_plan.log 2>&1 ); el gpu_plan preloaded rc=$?
for t in 1048576 32768; do
  timeout -k 10 $(lim 40) $B/kernel-bench --plan-only --plan-preload --tokens $t --reps 50 --commit $C > $L/kernel-bench-plan-$t.json 2> $L/kernel-bench-plan-$t.txt
  el kernel-bench plan $t rc=$?
done
if [ $(left) -gt 50 ]; then
  mkdir -p $L/sanitize
  ( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 80) bash scripts/sanitize.sh --tools memcheck,racecheck --tests gpu_plan --jobs 2 --timeout 70 gpu_plan_preloaded_segments_match_reference > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
fi
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^test |test result" gpu_plan.log; grep -E " plan" kernel-bench-plan-*.txt; tail -6 sanitize/summary.txt 2>/dev/null; } > $OUT/summary.txt 2>&1
tar czf $OUT/plan-preload.tgz -C $OUT logs
cat $OUT/summary.txt
