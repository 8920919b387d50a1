#!/usr/bin/env bash
# Attention's rows prefetched into L2 before its first batch (`AttentionSpec::prefetch_rows`,
# opt-in since 2026-12-07's twenty-seventh session, CPU-exact, not yet run on a GPU): its GPU
# tests (gpu_attention's prefetched-rows cases against the f64 reference, gpu_step's every
# method both placements with it, memcheck on the attention cases), then step-bench HBM 32k
# and 1M (qwen3-8b, fathom(48) and sparq(32), batch 1) without and with
# `--attention-prefetch`, alternating, twice each, and ncu's time of the attention kernel in
# the 32k step each way. Prediction: the 32k attention 8.4 -> 5-6 us in the step (ncu, caches
# as the step leaves them), HBM 32k fathom(48) -2 to -3 us a layer; less at 1M.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=300 bash bench/calls/next-attention-prefetch.sh
set -u
DEFAULT_BUDGET=300 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown} FATHOM_KERNEL_CACHE=/tmp/kc-pf
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
if [ -z "${SKIP_CHECKS:-}" ]; then
  gpu_tests gpu_attention 60 gpu_attention_prefetched_rows
  gpu_tests gpu_step 100 gpu_step_attention_prefetch_rows
fi
# A step-bench that reaches 1M spends ~60 s making its layers first (45 s was too short on
# 2026-12-07), so CONTEXTS (32k,1m) get SB_LIMIT (150) a run.
for round in 1 2; do
  step_bench off-$round hbm ${CONTEXTS:-32k,1m} ${SB_LIMIT:-150}
  step_bench pf-$round hbm ${CONTEXTS:-32k,1m} ${SB_LIMIT:-150} --attention-prefetch
done
if [ -z "${SKIP_CHECKS:-}" ]; then
  ncu_kernels attn off fathom_attention 32k
  ncu_kernels attn pf fathom_attention 32k --attention-prefetch
  [ "$(left)" -gt 45 ] && sanitize_test gpu_attention gpu_attention_prefetched_rows 40
fi
cd $L && { cat nvidia-smi.txt timeline.txt
  grep -E "^test .*(ok|FAILED)$|^test result|panicked" gpu_attention.log gpu_step.log
  for f in step-bench-off-*.txt step-bench-pf-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done
  cat times-attn-*.txt 2>/dev/null; tail -5 sanitize.txt 2>/dev/null; } > $OUT/prefetch-summary.txt 2>&1
tar czf $OUT/attention-prefetch.tgz -C $OUT logs && rm -rf $L
cat $OUT/prefetch-summary.txt
