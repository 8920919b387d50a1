#!/usr/bin/env bash
# 2026-12-03, third session (issue #15 item 1): the one-read selects' cut with its digit search
# over the whole block (pick_digit: each thread sums BINS/THREADS bins, one block scan; the
# bins zeroed by their readers), plain atomics in radix passes 1 and 2, one barrier a tile in
# consume and none for the compaction's offsets. Pass 0 counted three ways, one autotune binary
# each (built from the same tree with only count_digit's pass-0 branch changed): `match` (the
# pack's, __match_any_sync as before), `plain` (one atomic a key), `leader` (the warp's first
# digit aggregated, the rest plain). Each against the baseline binary (`base`, main before the
# change) in the same call, base first and last.
# Runs gpu_select (every algorithm), the step's one-read select tests, autotune's select subject
# (qwen3-8b, HBM) per binary, ncu's time per kernel of the HBM step at 32k for base and the
# pack, compute-sanitizer (four tools) on gpu_select_short_and_boundary_lengths.
# From the repository root, after `scripts/pack-gpu.sh` and copying the other binaries to
# .gpu/var/{autotune-base,step-bench-base,autotune-plain,autotune-leader}; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=420 bash bench/calls/h200-2026-12-03c-select-cut.sh
set -u
DEFAULT_BUDGET=420 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin; V=$R/.gpu/var; chmod +x $V/* 2>/dev/null
el unpacked
tune() {  # tune LABEL BINARY: autotune's select subject with its own kernel cache and record
  FATHOM_KERNEL_CACHE=/tmp/kc-$1 timeout -k 10 $(lim 40) $2 --model qwen3-8b --only select/hbm --timings \
    --out $L/tune-$1 > $L/autotune-$1.txt 2>&1; el autotune $1 rc=$?
}
tune base $V/autotune-base
tune match $B/autotune
tune plain $V/autotune-plain
tune leader $V/autotune-leader
tune base2 $V/autotune-base
for who in base new; do
  sb=$B/step-bench; [ $who = base ] && sb=$V/step-bench-base
  FATHOM_KERNEL_CACHE=/tmp/kc-ncu-$who timeout -k 10 $(lim 40) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 2000 \
    $sb --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing --contexts 32k --out $L/ncu-sb-$who > $L/ncu-step-32k-$who.csv 2> $L/ncu-step-32k-$who.err
  el ncu $who rc=$?
  python3 bench/calls/ncu-kernel-times.py $L/ncu-step-32k-$who.csv $who > $L/ncu-step-32k-$who.txt 2>&1
done
export FATHOM_KERNEL_CACHE=/tmp/kc-tests
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 200) ./tests/gpu_select-test --ignored --test-threads=1 > $L/gpu_select.log 2>&1 ); el gpu_select rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 60) ./tests/gpu_step-test --ignored --test-threads=1 select > $L/gpu_step.log 2>&1 ); el gpu_step select rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 90) bash scripts/sanitize.sh --tests gpu_select --jobs 4 --timeout 80 gpu_select_short_and_boundary_lengths > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^test |test result|FAILED|panicked" gpu_select.log gpu_step.log | head -20
  for t in base match plain leader base2; do echo "== $t"; grep -E "^select" autotune-$t.txt | head -3; done
  cat ncu-step-32k-base.txt ncu-step-32k-new.txt; cat sanitize/summary.txt 2>/dev/null; tail -2 sanitize.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/select-cut.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
