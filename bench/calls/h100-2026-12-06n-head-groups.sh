#!/usr/bin/env bash
# KV heads in groups pipelined on two streams (`DecoderConfig::head_groups`, opt-in, first
# GPU run): gpu_step's test (every method and transfer, batch 1, eager and replayed, equal
# to the whole step bit for bit), then step-bench, qwen3-8b, fathom(48) and sparq(32), batch
# 1, the committed record: host 1M whole / 8 groups / 4 groups / whole again, then HBM 32k
# and 1M whole / 8 groups. Predicted from the ncu times of the twelfth session: host 1M
# ~1,275 -> ~1,100-1,190 us a layer (the select, union, fetch and attention of all groups but
# the last behind the next group's scan).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=540 bash bench/calls/h100-2026-12-06n-head-groups.sh
set -u
DEFAULT_BUDGET=540 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-hg
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 200) ./tests/gpu_step-test --ignored --test-threads=1 head_groups \
    > $L/gpu_step.log 2>&1; el "gpu_step head_groups rc=$?" )
sb() {  # sb LABEL PLACEMENT CONTEXTS GROUPS
  [ $(left) -gt 50 ] || return
  timeout -k 10 $(lim 100) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts $3 \
    --placement $2 --batch 1 --no-standing --head-groups $4 --out $L/sb-$1 --commit ${C:-unknown} > $L/step-bench-$1.txt 2>&1
  el "step-bench $1 rc=$?"
}
sb host-1 host 1m 1
sb host-8 host 1m 8
sb host-4 host 1m 4
sb host-1b host 1m 1
sb hbm-1 hbm 32k,1m 1
sb hbm-8 hbm 32k,1m 8
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^test |^test result|FAILED|panicked|differs|head groups where" gpu_step.log | head -40
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq|rror" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/head-groups.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
