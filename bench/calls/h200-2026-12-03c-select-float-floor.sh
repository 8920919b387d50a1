#!/usr/bin/env bash
# 2026-12-03, third session (issue #15 item 1), after 57fca3b: fewer instructions per tile in
# the one-read select. A tile's scores are compared with the floor as a score (floor_score) and
# only survivors become keys; a warp's survivors are counted with one __reduce_add_sync; a warp
# without survivors skips the append. gpu_select (every algorithm), the step's one-read select
# tests, compute-sanitizer (four tools) on gpu_select_short_and_boundary_lengths; autotune's
# select subject (qwen3-8b, HBM) for `before` (57fca3b's binary) and the pack, before first and
# last; then, as h200-2026-12-03c-select-record.sh: the select's entries of every preset shape
# re-timed, merged into a copy of the committed record, step-bench HBM 32k and 1M under it, ncu's
# time per kernel of the HBM step at 32k.
# From the repository root, after `scripts/pack-gpu.sh` and copying 57fca3b's autotune to
# .gpu/var/autotune-before; carry [".gpu"]:
#   C=<commit> BUDGET=480 bash bench/calls/h200-2026-12-03c-select-float-floor.sh
set -u
DEFAULT_BUDGET=480 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin; V=$R/.gpu/var; chmod +x $V/* 2>/dev/null
el unpacked
tune() {  # tune LABEL BINARY: autotune's select subject with its own kernel cache and record
  FATHOM_KERNEL_CACHE=/tmp/kc-$1 timeout -k 10 $(lim 40) $2 --model qwen3-8b --only select/hbm --timings \
    --out $L/tune-$1 > $L/autotune-$1.txt 2>&1; el autotune $1 rc=$?
}
tune before $V/autotune-before
tune new $B/autotune
tune before2 $V/autotune-before
export FATHOM_KERNEL_CACHE=/tmp/kc-tests
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 200) ./tests/gpu_select-test --ignored --test-threads=1 > $L/gpu_select.log 2>&1 ); el gpu_select rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 60) ./tests/gpu_step-test --ignored --test-threads=1 select > $L/gpu_step.log 2>&1 ); el gpu_step select rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 90) bash scripts/sanitize.sh --tests gpu_select --jobs 4 --timeout 80 gpu_select_short_and_boundary_lengths > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
export FATHOM_KERNEL_CACHE=/tmp/kc-record
timeout -k 10 $(lim 60) $B/autotune --only select/hbm --timings --out $L/tune-select > $L/autotune-select.txt 2>&1; el autotune select rc=$?
mkdir -p $L/record && cp runtime/records/nvidia-h200.json $L/record/
timeout -k 10 $(lim 20) $B/autotune --merge $L/tune-select/nvidia-h200.json --into $L/record/nvidia-h200.json > $L/merge.txt 2>&1; el merge rc=$?
export FATHOM_TUNING_DIR=$L/record
timeout -k 10 $(lim 120) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing --commit $C \
  --placement hbm --contexts 32k,1m --out $L/sb-hbm > $L/step-bench-hbm.txt 2>&1; el step-bench hbm rc=$?
timeout -k 10 $(lim 40) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 2000 \
  $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing --contexts 32k --out $L/ncu-sb > $L/ncu-step-32k.csv 2> $L/ncu-step-32k.err
el ncu rc=$?
python3 bench/calls/ncu-kernel-times.py $L/ncu-step-32k.csv "HBM step 32k, $C" > $L/ncu-step-32k.txt 2>&1
rm -rf $L/ncu-sb
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^test |test result|FAILED|panicked" gpu_select.log gpu_step.log | head -20
  for t in before new before2; do echo "== $t"; grep -E "^select" autotune-$t.txt | head -3; done
  cat sanitize/summary.txt 2>/dev/null; grep -E "^select|total" autotune-select.txt; tail -1 merge.txt
  grep -E "^method|^fathom|^sparq|missed|met" step-bench-hbm.txt; cat ncu-step-32k.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/select-float-floor.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
