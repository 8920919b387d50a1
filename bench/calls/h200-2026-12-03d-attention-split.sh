#!/usr/bin/env bash
# 2026-12-03, fourth session (issue #15 items 3 and 7): attention over several blocks a query
# head (`AttentionSpec::splits`, the last block to finish merges the partial softmaxes). One
# block a head ran 32 blocks at batch 1 (13 us a layer at every context, ncu). gpu_attention
# (every test: the one-block kernel, the split one, the chains), gpu_step's split-attention
# tests (both placements, every method, graphs), then the whole default autotune run (splits
# 1, 2, 4, 8 are in the attention grid now) into a new record, copied to /tmp/record-new for
# the next call, and compute-sanitizer's four tools on gpu_attention_split_matches_reference.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=440 bash bench/calls/h200-2026-12-03d-attention-split.sh
set -u
DEFAULT_BUDGET=440 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin
el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-tests
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_attention-test --ignored --test-threads=1 > $L/gpu_attention.log 2>&1 ); el gpu_attention rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 90) ./tests/gpu_step-test --ignored --test-threads=1 split_attention > $L/gpu_step.log 2>&1 ); el gpu_step split_attention rc=$?
rm -rf /tmp/record-new /tmp/kc-record
FATHOM_KERNEL_CACHE=/tmp/kc-record timeout -k 10 $(lim 260) $B/autotune --timings --out /tmp/record-new > $L/autotune.txt 2>&1; el autotune rc=$?
cp -r /tmp/record-new $L/record-new 2>/dev/null
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 100) bash scripts/sanitize.sh --tests gpu_attention --jobs 4 --timeout 90 gpu_attention_split_matches_reference > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; grep -hE "^test |test result|FAILED|panicked|largest relative" gpu_attention.log gpu_step.log | head -60
  grep -E "^attention|disqualif|candidates|total" autotune.txt | head -40; tail -3 autotune.txt
  cat sanitize/summary.txt 2>/dev/null; tail -2 sanitize.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/attention-split.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
