#!/usr/bin/env bash
# What ran as three back-to-back calls on one H100 on 2026-12-06 (thirteenth session, binaries
# of 75e2677): autotune --quick and the default grid, each cold (an empty kernel cache) with
# --timings, then the host step at 256k and 1M under the committed record. Results:
# bench/results/autotune{,-quick}-h100-2026-12-06-75e2677.txt, host-step-h100-2026-12-06-75e2677*.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/h100-2026-12-06l-autotune-host.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
rm -rf /tmp/kc-q && FATHOM_KERNEL_CACHE=/tmp/kc-q timeout -k 10 $(lim 60) $B/autotune --quick --timings \
  --out $L/tune-quick > $L/autotune-quick.txt 2>&1
el "autotune quick rc=$?"
rm -rf /tmp/kc-d && FATHOM_KERNEL_CACHE=/tmp/kc-d timeout -k 10 $(lim 300) $B/autotune --timings \
  --out $L/tune-default > $L/autotune-default.txt 2>&1
el "autotune default rc=$?"
FATHOM_KERNEL_CACHE=/tmp/kc-d timeout -k 10 $(lim 150) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" \
  --contexts 256k,1m --placement host --batch 1 --no-standing --out $L/sb-host --commit ${C:-unknown} \
  > $L/step-bench-host.txt 2>&1
el "step-bench host rc=$?"
cd $L && { cat nvidia-smi.txt timeline.txt; tail -9 autotune-quick.txt; tail -9 autotune-default.txt
  grep -h "pinned" autotune-*.txt; grep -E "^method|^fathom|^sparq" step-bench-host.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/autotune-host.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
