#!/usr/bin/env bash
# 2026-12-03, second device call: the plan kernel with one midpoint a warp and the cheaper round
# (9e2159b) on the GPU: its GPU tests (fathom, every block size), its autotune entries (plan,
# every context, into a scratch --out, to merge into the record), then step-bench of fathom(48)
# and sparq(32) on the committed record (re-made at c54c8c7): HBM 32k and 1M, host 256k and 1M,
# with what time is left. From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/h200-2026-12-03-plan-and-step.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin; export FATHOM_KERNEL_CACHE=/tmp/kc2; rm -rf /tmp/kc2
el unpacked
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 150) ./tests/gpu_plan-test --ignored --test-threads=1 fathom > $L/gpu_plan.log 2>&1 ); el gpu_plan rc=$?
timeout -k 10 $(lim 60) $B/autotune --only plan --timings --out $L/tune-plan > $L/autotune-plan.txt 2>&1; el autotune-plan rc=$?
SB="$B/step-bench --model qwen3-8b --methods fathom(48),sparq(32) --batch 1 --no-standing --commit $C"
timeout -k 10 $(lim 150) $SB --placement hbm --contexts 32k,1m --out $L/sb-hbm > $L/step-bench-hbm.txt 2>&1; el step-bench hbm rc=$?
if [ $(left) -gt 100 ]; then
  timeout -k 10 $(lim 300) $SB --placement host --contexts 256k,1m --out $L/sb-host > $L/step-bench-host.txt 2>&1; el step-bench host rc=$?
fi
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "test result|FAILED|panicked" gpu_plan.log | head; grep -E "plan|phase|total" autotune-plan.txt; grep -E "^method|^fathom|^sparq|missed|met" step-bench-hbm.txt step-bench-host.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/plan-step.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
