#!/usr/bin/env bash
# Attention over 16 blocks a query head (`autotune --opt-in attention-splits16`, fourteenth
# session). At 8 (the committed H100 record's winner at every context, ~12.5 us) a block of
# the HBM step at 32k walks ~70 of a head's ~550 rows in three rounds of dependent loads
# (t256 r4: 32 rows a round); 16 blocks take two. Predicted: ~1-2 us a layer, the same at
# every context. This call: gpu_step's split-attention tests (4, 3 and 16 blocks, through the
# store's rows as the step runs them); autotune's attention (qwen3-8b, HBM, every context) with
# the opt-in, merged into a copy of the committed record; step-bench fathom(48) and sparq(32)
# in HBM at 32k under the committed record and the merged one, committed / merged / committed
# / merged.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=230 bash bench/calls/h100-2026-12-06v-attention-splits16.sh
set -u
DEFAULT_BUDGET=230 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-s16
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 60) ./tests/gpu_step-test --ignored --test-threads=3 split_attention \
    > $L/gpu_step.log 2>&1 ); el "gpu_step split_attention rc=$?"
timeout -k 10 $(lim 80) $B/autotune --model qwen3-8b --only attention/hbm --opt-in attention-splits16 --timings \
  --out $L/tune-s16 > $L/autotune-s16.txt 2>&1
el "autotune attention opt-in rc=$?"
merged_record $L/tune-s16 $L/merged
sb() {  # sb LABEL [env...]
  local label=$1; shift
  [ $(left) -gt 25 ] || return
  env "$@" timeout -k 10 $(lim 30) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k \
    --placement hbm --batch 1 --no-standing --out $L/sb-$label --commit $C > $L/step-bench-$label.txt 2>&1
  el "step-bench $label rc=$?"
}
sb committed1
sb s16-1 FATHOM_TUNING_DIR=$L/merged
sb committed2
sb s16-2 FATHOM_TUNING_DIR=$L/merged
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^test |^test result|FAILED|panicked" gpu_step.log | head
  grep -iE "attention" autotune-s16.txt | tail -8; grep -E "^\s*(ceilings|compile|prepare|verify|time|total)" autotune-s16.txt
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done; } > $OUT/summary.txt 2>&1
mkdir -p $OUT/record && cp $L/merged/*.json $OUT/record/ 2>/dev/null
tar czf $OUT/attention-s16.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
