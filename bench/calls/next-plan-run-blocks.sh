#!/usr/bin/env bash
# The plan's run tables shared among several blocks a (KV head, sequence)
# (`PlanSpec::run_blocks`, `Tiles::plan_run_blocks`, `step-bench --plan-run-blocks N`; opt-in,
# built in the fifteenth session, exact on the CPU emulator, never on a GPU). The plan takes
# 19.3 us at 1M against 10.7 at 32k on the H100; its last step writes 128 KiB of run table a
# KV head at 1M from one block (16 entries of 32 bytes a thread at 256 threads), and loading
# the entries' pointers in batches (`--plan-batched-runs`) did not change the step, so the
# writes of one multiprocessor (or its instructions) are the suspect. With N blocks a head
# each works out the same plan and writes 1/N of the entries.
# Predicted: HBM 1M ~4 us a layer faster at N = 4 (6.55 -> ~6.40 ms a step), 8 no better than
# 4, 32k unchanged (one segment: block 0 writes every entry, the others leave at once).
# This call: gpu_plan's test of the shared tables (2 to 16 blocks, 32 to 1,024 threads, every
# method, staged and not) and gpu_step's case with 4 blocks (every method, eager and replayed,
# both placements, against the reference); compute-sanitizer memcheck and racecheck on the
# gpu_plan test; then step-bench off / 4 / off / 8 at HBM 32k and 1M, and host 1M at 4.
# Any GPU (the A/B is within the call). From the repository root, after
# `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/next-plan-run-blocks.sh
# (SANITIZE_TOOLS=memcheck leaves racecheck out when the budget is short.)
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-plan-rt
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_plan-test --ignored --test-threads=2 gpu_plan_shared_run_tables \
    > $L/gpu_plan.log 2>&1; el "gpu_plan shared rc=$?" )
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 90) ./tests/gpu_step-test --ignored --test-threads=2 plan_run_blocks \
    > $L/gpu_step.log 2>&1; el "gpu_step plan_run_blocks rc=$?" )
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r "$R/scripts" . && OUT=$L/sanitize timeout -k 10 $(lim 150) bash scripts/sanitize.sh \
    --tools ${SANITIZE_TOOLS:-memcheck,racecheck} --tests gpu_plan --jobs 2 --timeout 140 gpu_plan_shared_run_tables > $L/sanitize.txt 2>&1
  el "sanitize rc=$?" )
step_bench hbm-off hbm 32k,1m 100
step_bench hbm-rt4 hbm 32k,1m 100 --plan-run-blocks 4
step_bench hbm-off2 hbm 32k,1m 100
step_bench hbm-rt8 hbm 32k,1m 100 --plan-run-blocks 8
step_bench host-rt4 host 1m 110 --plan-run-blocks 4
cd $L && { cat nvidia-smi.txt timeline.txt; grep -hE "^test |^test result|FAILED|panicked" gpu_plan.log gpu_step.log | head -20
  cat sanitize/summary.txt 2>/dev/null
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/plan-run-blocks.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
