#!/usr/bin/env bash
# The plan writing its run tables from a table of slots (`PlanSpec::slot_table`, `_st`,
# opt-in; exact on the CPU emulator, 5 mutants caught): its GPU test, compute-sanitizer's
# memcheck and racecheck on it when the budget allows, and kernel-bench's plan timings with
# and without it at 1M and 32k (qwen3-8b, fathom(48) and sparq(32), host and HBM stores).
# Why: ncu on the plan at 1M (H100, 2026-12-05) showed its 8 multiprocessors issue-bound
# (6.4 cycles a warp instruction, L1 43% busy) on the run-table loop, ~180 instructions an
# entry, 16 entries a thread at 32 segments a head; loading the segments' addresses ahead
# alone changed nothing (0.023 ms both). Predicted: 1M 23 -> ~15 us, 32k unchanged. From the
# repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=70 bash bench/calls/h100-next-plan-slot-table.sh
set -u
DEFAULT_BUDGET=70 . bench/calls/budget.sh
C=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
( cd $TESTS/.. && timeout -k 10 $(lim 40) ./tests/gpu_plan-test --ignored --test-threads=1 slot_table > $L/gpu_plan.log 2>&1 ); el gpu_plan slot_table rc=$?
for t in 1048576 32768; do
  timeout -k 10 $(lim 15) $B/kernel-bench --plan-only --plan-slot-table --tokens $t --reps 50 --commit $C > $L/kernel-bench-plan-$t.json 2> $L/kernel-bench-plan-$t.txt
  el kernel-bench plan $t rc=$?
done
if [ $(left) -gt 25 ]; then
  mkdir -p $L/sanitize
  ( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 25) bash scripts/sanitize.sh --tools memcheck,racecheck --tests gpu_plan --jobs 2 --timeout 20 gpu_plan_slot_table_matches_reference > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
fi
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^test |test result" gpu_plan.log; grep -E " plan" kernel-bench-plan-*.txt; tail -6 sanitize/summary.txt 2>/dev/null; } > $OUT/summary.txt 2>&1
tar czf $OUT/plan-slot-table.tgz -C $OUT logs
cat $OUT/summary.txt
