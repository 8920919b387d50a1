#!/usr/bin/env bash
# 2026-12-03, second session (issue #15 item 1): the fused one-read select (`algorithm: fused`,
# `_final` folded into `_chunk`'s last block per query head) and the one-read select's shared
# block top-k (select_onepass_common) on the GPU: gpu_select (every algorithm), the step and
# decode tests of the one-read selects; autotune's select subject with `--opt-in select-fused`
# (qwen3-8b, HBM, into a scratch --out) merged into a copy of the committed record; step-bench
# fathom(48) at HBM 32k and 1M on the committed record and on the merged one, one after the
# other; ncu's time per kernel of the HBM step at 32k on the merged record; compute-sanitizer
# (four tools) on gpu_select_short_and_boundary_lengths. From the
# repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/h200-2026-12-03-fused-select.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin; export FATHOM_KERNEL_CACHE=/tmp/kc4; rm -rf /tmp/kc4
el unpacked
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 150) ./tests/gpu_select-test --ignored --test-threads=1 > $L/gpu_select.log 2>&1 ); el gpu_select rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_step-test --ignored --test-threads=1 select > $L/gpu_step.log 2>&1 ); el gpu_step select rc=$?
timeout -k 10 $(lim 90) $B/autotune --model qwen3-8b --only select/hbm --opt-in select-fused --timings --out $L/tune-fused > $L/autotune-fused.txt 2>&1; el autotune fused rc=$?
mkdir -p /tmp/rec && cp runtime/records/nvidia-h200.json /tmp/rec/ && \
  $B/autotune --merge $L/tune-fused/nvidia-h200.json --into /tmp/rec/nvidia-h200.json > $L/merge.txt 2>&1; el merge rc=$?
SB="$B/step-bench --model qwen3-8b --methods fathom(48) --batch 1 --no-standing --placement hbm --contexts 32k,1m --commit $C"
timeout -k 10 $(lim 80) $SB --out $L/sb-committed > $L/step-bench-committed.txt 2>&1; el step-bench committed rc=$?
FATHOM_TUNING_DIR=/tmp/rec timeout -k 10 $(lim 80) $SB --out $L/sb-merged > $L/step-bench-merged.txt 2>&1; el step-bench merged rc=$?
FATHOM_TUNING_DIR=/tmp/rec timeout -k 10 $(lim 70) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 2000 \
  $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing --contexts 32k --out $L/ncu-sb-32k > $L/ncu-step-32k.csv 2> $L/ncu-step-32k.err
el ncu rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 150) bash scripts/sanitize.sh --tests gpu_select --jobs 4 --timeout 140 gpu_select_short_and_boundary_lengths > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
if [ $(left) -gt 60 ]; then
  ( cd /tmp/fg/.gpu && timeout -k 10 $(( $(left) - 15 )) ./tests/gpu_decode-test --ignored --test-threads=1 fused > $L/gpu_decode.log 2>&1 ); el gpu_decode fused rc=$?
fi
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "test result|FAILED|panicked" gpu_select.log gpu_step.log gpu_decode.log 2>/dev/null | head -20; grep -E "select|phase|total" autotune-fused.txt | head -30; cat merge.txt; grep -E "^method|^fathom|missed|met \(" step-bench-committed.txt step-bench-merged.txt; cat sanitize/summary.txt 2>/dev/null; tail -3 sanitize.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/fused.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
