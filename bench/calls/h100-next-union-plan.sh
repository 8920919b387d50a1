#!/usr/bin/env bash
# Two small kernel changes, exact on the CPU emulator, checked and timed on the GPU: the union
# keeps its per-set counts in registers (`count_of`: indexed by a run-time set they went to the
# stack, 16 bytes spilled at 1,024 threads) and the plan's prologue loads a batch of query
# values before storing any and works out L_c once a channel (bench/experiments/plan-prologue.patch).
# Checks: gpu_plan, gpu_select with the algorithms the records pick (scan_peaks, peaks_head,
# onepass), gpu_step's select tests and the programmatic-launch test, and memcheck and racecheck
# on gpu_select's short and boundary lengths. Times: ncu's time per kernel in the host 1M and
# HBM 32k steps (clock control off), to set beside the same run at 4c65b29
# (`pdl-default-profile-h100-2026-12-06-4c65b29-*`: union 13.09 us at host 1M, plan 16.13 and
# 10.66 us at 1M and 32k).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=420 bash bench/calls/h100-next-union-plan.sh
set -u
DEFAULT_BUDGET=420 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
G=/tmp/fg/.gpu
( cd $G && timeout -k 10 $(lim 150) ./tests/gpu_plan-test --ignored --test-threads=1 > $L/gpu_plan.log 2>&1; echo "gpu_plan rc=$?" >> $L/rc.txt ) &
( cd $G && FATHOM_SELECT_ALGORITHMS=scan_peaks,peaks_head,onepass timeout -k 10 $(lim 150) ./tests/gpu_select-test --ignored --test-threads=1 \
    > $L/gpu_select.log 2>&1; echo "gpu_select rc=$?" >> $L/rc.txt ) &
( cd $G && timeout -k 10 $(lim 150) ./tests/gpu_step-test --ignored --test-threads=1 select with_and_without \
    > $L/gpu_step.log 2>&1; echo "gpu_step rc=$?" >> $L/rc.txt ) &
wait; el checks done
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && FATHOM_SELECT_ALGORITHMS=scan_peaks,peaks_head OUT=$L/sanitize timeout -k 10 $(lim 90) \
    bash scripts/sanitize.sh --tools memcheck,racecheck --tests gpu_select --jobs 2 --timeout 80 gpu_select_short_and_boundary_lengths \
    > $L/sanitize.txt 2>&1 ); el "sanitize rc=$?"
export FATHOM_KERNEL_CACHE=/tmp/kc-prof
ncu_step_times "host 1m" "hbm 32k"
cd $L && { cat nvidia-smi.txt timeline.txt rc.txt; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done
  tail -8 sanitize.txt; for f in times-*.txt; do head -12 $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/union-plan.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
