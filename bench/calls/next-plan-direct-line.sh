#!/usr/bin/env bash
# Fathom's direct water line (`PlanSpec::direct_line`, opt-in `Tiles::plan_direct_line`,
# twentieth session): the channels' depth boundaries fl(L - 2t) sorted by level (a rank a
# channel), the largest one over the budget found by binary searches, and the 30 halvings
# replayed against it by every thread (a midpoint within 2^-40 of it tried over every channel
# as before): three block barriers and no rounds, against 10 rounds of 7 trial midpoints with a
# barrier each (~0.5 us a round by the block-size sweep of 2026-12-03). Predicted: the plan at
# 32k 9.0 -> ~5 us, at 1M ~11 -> ~7 us; the HBM step ~4 us a layer faster at both.
# Measured (H100, binaries of 90dd8e1, PART=1): exact, and no faster (the plan 9.22 us both ways).
# PART=1 (the first call, 540 s), in order of need: gpu_plan's direct-line test (every shape
# and block size, raw and rotated, the edges) and the rounds' block-size test beside it,
# gpu_step's two direct-line cases, compute-sanitizer (memcheck, racecheck) on the plan's test;
# step-bench HBM 32k default / direct line, twice, alternating (qwen3-8b, fathom(48) and
# sparq(32), batch 1); ncu's warm time and instructions of the plan both ways at 32k.
# PART=2 (a second call, 330 s): the same step-bench and ncu at 1M.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> PART=1 BUDGET=540 bash bench/calls/next-plan-direct-line.sh
#   C=<commit> PART=2 BUDGET=330 bash bench/calls/next-plan-direct-line.sh
set -u
DEFAULT_BUDGET=540 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
if [ "${PART:-1}" = 1 ]; then
  ( cd /tmp/fg/.gpu && timeout -k 10 "$(lim 130)" ./tests/gpu_plan-test --ignored --test-threads=1 \
      gpu_plan_direct_line gpu_plan_fathom_every_block_size > "$L/gpu_plan.log" 2>&1 )
  el "gpu_plan rc=$?"
  ( cd /tmp/fg/.gpu && timeout -k 10 "$(lim 80)" ./tests/gpu_step-test --ignored --test-threads=1 plan_direct_line \
      > "$L/gpu_step.log" 2>&1 )
  el "gpu_step rc=$?"
  mkdir -p "$L/sanitize"
  ( cd /tmp/fg && cp -r "$R/scripts" . && OUT=$L/sanitize timeout -k 10 "$(lim 90)" bash scripts/sanitize.sh \
      --tools memcheck,racecheck --tests gpu_plan --jobs 2 --timeout 80 gpu_plan_direct_line > "$L/sanitize.txt" 2>&1 )
  el "sanitize rc=$?"
  step_bench default1 hbm 32k 40
  step_bench direct1 hbm 32k 40 --plan-direct-line
  step_bench default2 hbm 32k 40
  step_bench direct2 hbm 32k 40 --plan-direct-line
  ncu_kernels plan default32k fathom_plan 32k
  ncu_kernels plan direct32k fathom_plan 32k --plan-direct-line
else
  step_bench default1m hbm 1m 80
  step_bench direct1m hbm 1m 80 --plan-direct-line
  NCU_LIMIT=90 ncu_kernels plan default1m fathom_plan 1m
  NCU_LIMIT=90 ncu_kernels plan direct1m fathom_plan 1m --plan-direct-line
fi
cd $L && { cat nvidia-smi.txt timeline.txt; cat times-plan-*.txt 2>/dev/null; cat sanitize/summary.txt 2>/dev/null
  for f in gpu_plan.log gpu_step.log; do echo "== $f"; grep -E "^test |test result|panicked" $f | head -20; done
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done
  } > $OUT/summary.txt 2>&1
tar czf $OUT/plan-direct-line-${PART:-1}.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
