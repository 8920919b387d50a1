#!/usr/bin/env bash
# Two changes of the twenty-first session that no GPU had run (no machine came that session);
# this call ran on an H100 on 2026-12-07 (bench/results/early-stop-h100-2026-12-07-f428ef8-es-*):
# 1. The resident select's early stop (then bench/experiments/select-resident-early-stop.patch, landed
#    after this call ran on an H100 on 2026-12-07, bench/results/early-stop-h100-2026-12-07-*):
#    a radix pass that takes the k-th key's digit whole (usually pass 1, whose 22-bit
#    prefixes hold a few keys each) ends the search, the selected tokens being those at or
#    above the prefix, so pass 2's sweep of the 32 keys a thread, its digit search and two
#    barriers are skipped. Exact on the CPU emulator (cpu_select's resident tests, four new
#    mutants caught); every other select's machine code unchanged (45 specs, `codegen
#    machine-code` + nvdisasm); onepass's CUDA snapshot changes (pick_digit's new argument).
# 2. The direct water line's levels sorted by one warp (landed, opt-in `--plan-direct-line`):
#    a bitonic sort in place of every thread counting ranks.
# In order of need: gpu_select on the resident form, gpu_step's resident cases, compute-sanitizer
# on the short and boundary lengths; step-bench HBM 32k with --select-resident, the binaries
# before (.gpu/old/step-bench-old.xz: a step-bench of the tree without the patch) and after,
# alternating (qwen3-8b, fathom(48) and sparq(32), batch 1); ncu's warm time and warp
# instructions of the `_chunk` both ways; gpu_plan's direct-line test and ncu's warm time of
# the plan with the rounds and with the direct line; ncu's finest warp sampling (budget.sh's
# ncu_sampling) of the new `_chunk` and of the plan (rounds), and of the tensor-core scan at 1M;
# then the step-bench pair again.
# Before the call, from the repository root:
#   mkdir -p /tmp/before && scripts/pack-gpu.sh && tar xJf .gpu/pack.tar.xz -C /tmp/before \
#     && xz -c /tmp/before/.gpu/bin/step-bench > /tmp/step-bench-old.xz
#   git apply bench/experiments/select-resident-early-stop.patch
#   INSTA_UPDATE=always cargo test --release -q -p fathom-codegen --test compile -- select_variant_snapshots
#   scripts/pack-gpu.sh && mkdir -p .gpu/old && cp /tmp/step-bench-old.xz .gpu/old/
# then carry [".gpu"] (~25 MiB; 450 s are enough, the whole list ~560):
#   C=<commit>+es BUDGET=560 bash bench/calls/next-select-early-stop.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
mkdir -p /tmp/fg/old && xz -dc "$R/.gpu/old/step-bench-old.xz" > /tmp/fg/old/step-bench && chmod +x /tmp/fg/old/step-bench
select_checks resident resident
B=/tmp/fg/old step_bench before1 hbm 32k 45 --select-resident
step_bench after1 hbm 32k 45 --select-resident
B=/tmp/fg/old ncu_kernels select before fathom_select 32k --select-resident
ncu_kernels select after fathom_select 32k --select-resident
( cd /tmp/fg/.gpu && timeout -k 10 "$(lim 90)" ./tests/gpu_plan-test --ignored --test-threads=1 \
    gpu_plan_direct_line > "$L/gpu_plan.log" 2>&1 )
el "gpu_plan direct line rc=$?"
ncu_kernels plan rounds fathom_plan 32k
ncu_kernels plan direct fathom_plan 32k --plan-direct-line
ncu_sampling select 'select.*_chunk' --select-resident
ncu_sampling rounds fathom_plan
# The HBM 1M step's largest kernel (~121 us of 176 a layer on the H100): where its warps wait.
CONTEXT=1m ncu_sampling tcscan 'fathom_scan.*_tc'
B=/tmp/fg/old step_bench before2 hbm 32k 45 --select-resident
step_bench after2 hbm 32k 45 --select-resident
cd $L && { cat nvidia-smi.txt timeline.txt; cat times-*.txt 2>/dev/null; cat sanitize/summary.txt 2>/dev/null
  for f in gpu_select.log gpu_step.log gpu_plan.log; do echo "== $f"; grep -E "^test |test result|panicked" $f | head -20; done
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done
  grep -hE "Duration|Warp Cycles Per Issued|Executed Instructions\"" *-details.csv; } > $OUT/summary.txt 2>&1
tar czf $OUT/select-early-stop.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
