#!/usr/bin/env bash
# The plan's run tables from segment pointers loaded in batches (`PlanSpec::batched_runs`,
# `Tiles::plan_batched_runs`, `step-bench --plan-batched-runs`; opt-in, built in the fourteenth
# session, exact on the CPU emulator, never on a GPU). The plan's last step writes one run-table
# entry a (segment, channel); each entry's two 16-byte stores may alias the next entry's loads
# of `seg_words[seg]` / `seg_scales[seg]` as far as the compiler knows, so the loads waited for
# the stores: a global round trip an entry, 16 a thread at 1M tokens (32 segments x 128
# channels over 256 threads). The H100 record's plan takes 19.3 us at 1M against 10.7 at 32k
# (one segment: one entry a thread). Batches of 8 (4 above 256 threads) load first, then store.
# Predicted: the plan at 1M ~11-12 us, so HBM 1M ~7 us a layer faster (6.59 -> ~6.34 ms a
# step), host 1M the same ~0.25 ms, 32k unchanged.
# This call: gpu_plan's test of the batched tables (every method, staged and not, 32 to 1,024
# threads, sequences of many segments) and gpu_step's case with the option on (every method,
# eager and replayed, both placements, against the reference); compute-sanitizer memcheck and
# racecheck on the gpu_plan test; then step-bench off / on / off at HBM 32k and 1M, and host 1M
# on (its off is `step-host-h100-2026-12-06-3efb851-pk`: 45.90 ms).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/h100-next-plan-batched-runs.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-plan-rb
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_plan-test --ignored --test-threads=2 gpu_plan_batched_run_tables \
    > $L/gpu_plan.log 2>&1; el "gpu_plan batched rc=$?" )
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 90) ./tests/gpu_step-test --ignored --test-threads=2 plan_batched_runs \
    > $L/gpu_step.log 2>&1; el "gpu_step plan_batched_runs rc=$?" )
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r "$R/scripts" . && OUT=$L/sanitize timeout -k 10 $(lim 150) bash scripts/sanitize.sh \
    --tools memcheck,racecheck --tests gpu_plan --jobs 2 --timeout 140 gpu_plan_batched_run_tables > $L/sanitize.txt 2>&1
  el "sanitize rc=$?" )
step_bench hbm-off hbm 32k,1m 100
step_bench hbm-on hbm 32k,1m 100 --plan-batched-runs
step_bench hbm-off2 hbm 32k,1m 100
step_bench host-on host 1m 110 --plan-batched-runs
cd $L && { cat nvidia-smi.txt timeline.txt; grep -hE "^test |^test result|FAILED|panicked" gpu_plan.log gpu_step.log | head -20
  cat sanitize/summary.txt 2>/dev/null
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/plan-batched-runs.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
