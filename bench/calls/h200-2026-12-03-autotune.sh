#!/usr/bin/env bash
# 2026-12-03, first device call (issue #15 item 7): the new plan kernel's GPU test (gpu_plan,
# every block size), then autotune as a newcomer meets it, each run on an empty kernel cache of
# its own, with --timings: `--quick` (target: 30 s), then the default run (target: 3 minutes)
# into a scratch --out, the record to commit as runtime/records/nvidia-h200.json when it is
# whole; then step-bench in HBM at 32k and 1M on that record, if time is left. From the repository root, after
# `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=570 bash bench/calls/h200-2026-12-03-autotune.sh
set -u
DEFAULT_BUDGET=570 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin
el unpacked
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 150) ./tests/gpu_plan-test --ignored --test-threads=1 > $L/gpu_plan.log 2>&1 ); el gpu_plan rc=$?
rm -rf /tmp/kc-quick && FATHOM_KERNEL_CACHE=/tmp/kc-quick timeout -k 10 $(lim 120) $B/autotune --quick --timings --out $L/tune-quick > $L/autotune-quick.txt 2>&1
el autotune-quick rc=$?
rm -rf /tmp/kc-full && FATHOM_KERNEL_CACHE=/tmp/kc-full timeout -k 10 $(lim 420) $B/autotune --timings --out $L/tune > $L/autotune.txt 2>&1
el autotune rc=$?
if [ $(left) -gt 120 ]; then
  FATHOM_KERNEL_CACHE=/tmp/kc-full FATHOM_TUNING_DIR=$L/tune timeout -k 10 $(lim 240) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb --commit ${C:-unknown} > $L/step-bench.txt 2>&1
  el step-bench rc=$?
fi
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^test |test result" gpu_plan.log; grep -E "panicked|mismatch" gpu_plan.log | head -5; tail -12 step-bench.txt 2>/dev/null; for f in autotune-quick.txt autotune.txt; do echo "== $f"; grep -E "^autotune:|disqualified" $f | head -20; tail -9 $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/autotune.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
