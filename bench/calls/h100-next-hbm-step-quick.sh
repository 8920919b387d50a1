#!/usr/bin/env bash
# The HBM step at the new defaults (programmatic launch, the plan's batched prologue; qwen3-8b,
# fathom(48) and sparq(32), 32k and 1M, the committed record), to set beside the plain-launch
# runs of `pdl-exit-h100-2026-12-06-c10b904-*` (fathom(48) 32k 1.495 / 1.505 ms, 1M 6.591 /
# 6.617); then autotune --quick on an empty kernel cache, with candidates twice as slow as the
# case's fastest so far stopped at five runs (23.0 s cold on 2026-12-05).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=150 bash bench/calls/h100-next-hbm-step-quick.sh
set -u
DEFAULT_BUDGET=150 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
FATHOM_KERNEL_CACHE=/tmp/kc-sb timeout -k 10 $(lim 100) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" \
  --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb-hbm --commit ${C:-unknown} > $L/step-bench-hbm.txt 2>&1
el step-bench hbm rc=$?
rm -rf /tmp/kc-quick && FATHOM_KERNEL_CACHE=/tmp/kc-quick timeout -k 10 $(lim 45) $B/autotune --quick --timings --out $L/tune-quick \
  > $L/autotune-quick.txt 2>&1
el autotune quick rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^method|^fathom|^sparq" step-bench-hbm.txt; tail -9 autotune-quick.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/hbm-step-quick.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
