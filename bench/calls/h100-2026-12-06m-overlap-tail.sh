#!/usr/bin/env bash
# The tail's oracle on a second stream (`DecoderConfig::overlap_tail`, opt-in, never yet on a
# GPU): its GPU test (eager and replayed, both placements), then the HBM step with it off and
# on back to back (qwen3-8b, fathom(48) and sparq(32), 32k and 1M, the committed record), off
# again last for drift. Predicted: ~2 us a layer less at 32k (the oracle's 2.6 us under ncu
# leaves the critical path), nothing at 1M beyond noise. If it wins, make it the default
# (`DecoderConfig::default`) after the whole gpu_step binary passes with it.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=420 bash bench/calls/h100-2026-12-06m-overlap-tail.sh
set -u
DEFAULT_BUDGET=420 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_step-test --ignored --test-threads=1 tail_on_a_second_stream \
    > $L/gpu_step.log 2>&1; el "gpu_step tail rc=$?" )
export FATHOM_KERNEL_CACHE=/tmp/kc-tail
run=0
for overlap in "" --overlap-tail ""; do
  [ $(left) -gt 90 ] || break
  run=$((run + 1))
  timeout -k 10 $(lim 110) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k,1m \
    --placement hbm --batch 1 --no-standing $overlap --out $L/sb-$run --commit ${C:-unknown} > $L/step-bench-$run.txt 2>&1
  el "step-bench run $run ${overlap:-plain} rc=$?"
done
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^test result|FAILED|panicked" gpu_step.log
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/overlap-tail.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
