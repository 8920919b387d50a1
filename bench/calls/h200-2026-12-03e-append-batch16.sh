#!/usr/bin/env bash
# 2026-12-03, fifth session (issue #15 items 1 and 6). Two things in one call:
# 1. bench/experiments/select-append-scan.patch (the one-read select's append by a warp scan of
#    packed per-load counts): autotune's select subject (qwen3-8b, HBM) for `before` (358e858's
#    binary) and the pack, before first and last; gpu_select (every algorithm), the step's
#    one-read select tests, compute-sanitizer (four tools) on the short and boundary lengths.
# 2. The standing cell: 16 sequences of 128k from host, fathom(48) and sparq(32), with 358e858's
#    step-bench (main, without the patch) under runtime/records (carried in the working tree).
# From the repository root, after applying the patch, `scripts/pack-gpu.sh`, and copying
# 358e858's autotune and step-bench to .gpu/var/{autotune,step-bench}-before; carry [".gpu"]:
#   C=<commit> BUDGET=500 bash bench/calls/h200-2026-12-03e-append-batch16.sh
set -u
DEFAULT_BUDGET=500 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin; V=$R/.gpu/var; chmod +x $V/* 2>/dev/null
el unpacked
tune() {  # tune LABEL BINARY: autotune's select subject with its own kernel cache and record
  FATHOM_KERNEL_CACHE=/tmp/kc-$1 timeout -k 10 $(lim 30) $2 --model qwen3-8b --only select/hbm --timings \
    --out $L/tune-$1 > $L/autotune-$1.txt 2>&1; el autotune $1 rc=$?
}
tune before $V/autotune-before
tune new $B/autotune
tune before2 $V/autotune-before
export FATHOM_KERNEL_CACHE=/tmp/kc-tests
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 140) ./tests/gpu_select-test --ignored --test-threads=1 > $L/gpu_select.log 2>&1 ); el gpu_select rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 35) ./tests/gpu_step-test --ignored --test-threads=1 select > $L/gpu_step.log 2>&1 ); el gpu_step select rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 60) bash scripts/sanitize.sh --tests gpu_select --jobs 4 --timeout 55 gpu_select_short_and_boundary_lengths > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
export FATHOM_KERNEL_CACHE=/tmp/kc-b16 FATHOM_TUNING_DIR=$R/runtime/records
timeout -k 10 $(( $(left) - 10 )) $V/step-bench-before --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 16 --no-standing \
  --commit 358e858 --placement host --contexts 128k --out $L/sb-b16 > $L/step-bench-b16.txt 2>&1; el step-bench b16 rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^test |test result|FAILED|panicked" gpu_select.log gpu_step.log | head -20
  for t in before new before2; do echo "== $t"; grep -E "^select" autotune-$t.txt | head -3; done
  cat sanitize/summary.txt 2>/dev/null; tail -2 sanitize.txt
  grep -E "^method|^fathom|^sparq|128k, batch 16|floor" step-bench-b16.txt | head -20; } > $OUT/summary.txt 2>&1
tar czf $OUT/append-batch16.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
