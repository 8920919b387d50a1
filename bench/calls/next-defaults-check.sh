#!/usr/bin/env bash
# The coarse floor and the paired run-table entries as defaults (0ff8ff8): gpu_step (every
# case, eager and replayed, both placements) and gpu_decode (every method at up to ~300k tokens)
# against the reference, side by side with gpu_attention's split and cluster-merge cases (their
# configurations folded into one helper since they last ran), then step-bench HBM 32k and 1M (qwen3-8b, fathom(48),
# sparq(32), batch 1) at the new defaults.
# Any GPU. From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=300 bash bench/calls/next-defaults-check.sh
set -u
DEFAULT_BUDGET=300 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
( cd /tmp/fg/.gpu
  timeout -k 10 $(lim 200) ./tests/gpu_step-test --ignored --test-threads=2 > $L/gpu_step.log 2>&1 &
  timeout -k 10 $(lim 200) ./tests/gpu_decode-test --ignored --test-threads=2 > $L/gpu_decode.log 2>&1 &
  timeout -k 10 $(lim 200) ./tests/gpu_attention-test --ignored --test-threads=1 split cluster_merge > $L/gpu_attention.log 2>&1 &
  wait )
el "gpu tests done"
step_bench hbm hbm 32k,1m 80
cd $L && { cat nvidia-smi.txt timeline.txt; test_summary
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/defaults-check.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
