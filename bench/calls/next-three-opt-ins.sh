#!/usr/bin/env bash
# The sixteenth session's three opt-ins on a GPU (each exact on the CPU emulator, never run on
# a GPU before this call):
# - the plan's run-table entries written by lane pairs (`--plan-paired-runs`, `_rp`): a warp's
#   store writes 16 whole 32-byte entries instead of one half of each of 32. Predicted: HBM 1M
#   1-2 us a layer faster (the plan's excess at 1M was one multiprocessor's half-sector
#   stores; 4 run blocks took ~5 of it), 32k unchanged (128 entries a head).
# - attention's splits merged in a thread-block cluster (`--attention-cluster-merge`, `_cm`):
#   no global partials, fence or arrival count. Predicted: ~0.5-1 us a layer at every context
#   (the merge fence was 9% of the 32k attention's stalls, 10.6 us).
# - the peaks selects' floor after two radix passes (`--select-coarse-floor`, `_cf`): three
#   block barriers and a pass fewer over the peaks, a floor 10 bits lower. Predicted: ~0.5-1 us
#   a layer at 32k (the one-block select is ~30 barriers, 19 us), a little at 1M.
# This call: their GPU tests against the f64 reference (gpu_plan, gpu_attention, gpu_step's
# cases, gpu_select's coarse-floor forms) four at a time, compute-sanitizer memcheck on the plan
# and attention tests, then step-bench (qwen3-8b, fathom(48) and sparq(32), batch 1, HBM):
# default / cluster merge / coarse floor / paired runs (1M) / default again.
# Any GPU (the A/B is within the call). From the repository root, after
# `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) CF_ALGORITHMS=... BUDGET=480 bash bench/calls/next-three-opt-ins.sh
# (CF_ALGORITHMS: gpu_select's names of the coarse-floor forms; without it the coarse floor's
# tests and step-bench run are left out.)
set -u
DEFAULT_BUDGET=480 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-three
( cd /tmp/fg/.gpu
  timeout -k 10 $(lim 150) ./tests/gpu_plan-test --ignored --test-threads=2 gpu_plan_paired_run_tables > $L/gpu_plan.log 2>&1 &
  timeout -k 10 $(lim 150) ./tests/gpu_attention-test --ignored --test-threads=1 cluster_merge > $L/gpu_attention.log 2>&1 &
  timeout -k 10 $(lim 150) ./tests/gpu_step-test --ignored --test-threads=2 paired_runs cluster_merge coarse_floor > $L/gpu_step.log 2>&1 &
  [ -n "${CF_ALGORITHMS:-}" ] && FATHOM_SELECT_ALGORITHMS=$CF_ALGORITHMS timeout -k 10 $(lim 150) \
    ./tests/gpu_select-test --ignored --test-threads=2 > $L/gpu_select.log 2>&1 &
  wait )
el "gpu tests done"
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r "$R/scripts" . && FATHOM_SELECT_ALGORITHMS=${CF_ALGORITHMS:-peaks} OUT=$L/sanitize \
    timeout -k 10 $(lim 100) bash scripts/sanitize.sh --tools memcheck --tests gpu_plan,gpu_attention${CF_ALGORITHMS:+,gpu_select} \
    --jobs 3 --timeout 90 gpu_plan_paired_run_tables cluster_merge gpu_select_short_and_boundary_lengths > $L/sanitize.txt 2>&1
  el "sanitize rc=$?" )
step_bench hbm-off hbm 32k,1m 100
step_bench hbm-cm hbm 32k,1m 100 --attention-cluster-merge
[ -n "${CF_ALGORITHMS:-}" ] && step_bench hbm-cf hbm 32k,1m 100 --select-coarse-floor
step_bench hbm-rp hbm 1m 70 --plan-paired-runs
step_bench hbm-off2 hbm 32k,1m 100
cd $L && { cat nvidia-smi.txt timeline.txt
  for f in gpu_plan gpu_attention gpu_step gpu_select; do [ -f $f.log ] || continue; echo "== $f"; grep -hE "^test |^test result|FAILED|panicked" $f.log | head -20; done
  cat sanitize/summary.txt 2>/dev/null
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/three-opt-ins.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
