#!/usr/bin/env bash
# 2026-12-03, third session (issue #15 item 1), the second of this session's select calls: the
# cut as measured best by h200-2026-12-03c-select-cut.sh (plain atomics in every pass, the digit
# search over the whole block), now also keeping pass 0's histogram of the buffer while tiles
# are appended and kept (so a cut's first pass counts only the tile, and the last cut none)
# and the buffer in registers through a cut. gpu_select (every algorithm), the step's one-read
# select tests, compute-sanitizer (four tools) on gpu_select_short_and_boundary_lengths, then
# autotune's select subject (qwen3-8b, HBM) for `base` (main before this session), `plain` (the
# first call's best), the pack and `prefetch` (the pack's tree with the loads of up to four tiles
# in flight instead of one, AHEAD in top_k_of_share), base first and last.
# From the repository root, after `scripts/pack-gpu.sh` and copying .gpu/var/{autotune-base,
# autotune-plain,autotune-prefetch}; carry [".gpu"]:
#   C=<commit> BUDGET=400 bash bench/calls/h200-2026-12-03c-select-digits.sh
set -u
DEFAULT_BUDGET=400 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin; V=$R/.gpu/var; chmod +x $V/* 2>/dev/null
el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-tests
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 200) ./tests/gpu_select-test --ignored --test-threads=1 > $L/gpu_select.log 2>&1 ); el gpu_select rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 60) ./tests/gpu_step-test --ignored --test-threads=1 select > $L/gpu_step.log 2>&1 ); el gpu_step select rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 90) bash scripts/sanitize.sh --tests gpu_select --jobs 4 --timeout 80 gpu_select_short_and_boundary_lengths > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
tune() {  # tune LABEL BINARY: autotune's select subject with its own kernel cache and record
  FATHOM_KERNEL_CACHE=/tmp/kc-$1 timeout -k 10 $(lim 40) $2 --model qwen3-8b --only select/hbm --timings \
    --out $L/tune-$1 > $L/autotune-$1.txt 2>&1; el autotune $1 rc=$?
}
tune base $V/autotune-base
tune plain $V/autotune-plain
tune new $B/autotune
tune prefetch $V/autotune-prefetch
tune base2 $V/autotune-base
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^test |test result|FAILED|panicked" gpu_select.log gpu_step.log | head -20
  for t in base plain new prefetch base2; do echo "== $t"; grep -E "^select" autotune-$t.txt | head -3; done
  cat sanitize/summary.txt 2>/dev/null; tail -2 sanitize.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/select-digits.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
