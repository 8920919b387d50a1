#!/usr/bin/env bash
# 2026-12-03, fifth session (issue #15 items 3, 4 and 7), after 6986f18:
# - the plan loads the segments' plane and scale pointers into shared memory a round of THREADS
#   segments at a time before writing the run tables (autotune's plan case took 21 us at 1M
#   against 12 at 32k: the entry loop's pointer loads waited for the stores before them);
# - attention's last block computes each split's weight once (review of d86f5b2), and the
#   split and one-block forms share their output loop.
# gpu_plan and gpu_attention (every test), gpu_step's split-attention and raw-store tests,
# compute-sanitizer's four tools on both; autotune's plan and attention subjects (qwen3-8b, HBM)
# before / new / before; the plan entries of every preset re-timed and merged into a copy of
# the committed record; step-bench HBM 32k and 1M before (committed record) and new (merged);
# then, with what is left, ncu's source counters of the HBM scan at 1M (issue #15 item 4: where
# its 135 us go). From the repository root, after `scripts/pack-gpu.sh` and copying 358e858's
# autotune and step-bench to .gpu/var/{autotune,step-bench}-before; carry [".gpu"]:
#   C=<commit> BUDGET=570 bash bench/calls/h200-2026-12-03e-plan-rounds.sh
set -u
DEFAULT_BUDGET=570 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin; V=$R/.gpu/var; chmod +x $V/* 2>/dev/null
el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-tests
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 90) ./tests/gpu_plan-test --ignored --test-threads=1 > $L/gpu_plan.log 2>&1 ); el gpu_plan rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 60) ./tests/gpu_attention-test --ignored --test-threads=1 > $L/gpu_attention.log 2>&1 ); el gpu_attention rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 60) ./tests/gpu_step-test --ignored --test-threads=1 split_attention raw_store_g4 > $L/gpu_step.log 2>&1 ); el gpu_step rc=$?
mkdir -p $L/sanitize-plan $L/sanitize-attention
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize-plan timeout -k 10 $(lim 75) bash scripts/sanitize.sh --tests gpu_plan --jobs 4 --timeout 70 every_block_size > $L/sanitize-plan.txt 2>&1 ); el sanitize plan rc=$?
( cd /tmp/fg && OUT=$L/sanitize-attention timeout -k 10 $(lim 60) bash scripts/sanitize.sh --tests gpu_attention --jobs 4 --timeout 55 matches_reference > $L/sanitize-attention.txt 2>&1 ); el sanitize attention rc=$?
tune() {  # tune LABEL BINARY SUBJECT: one subject for qwen3-8b, own cache and record
  FATHOM_KERNEL_CACHE=/tmp/kc-$1 timeout -k 10 $(lim 40) $2 --model qwen3-8b --only $3 --timings \
    --out $L/tune-$1 > $L/autotune-$1.txt 2>&1; el autotune $1 rc=$?
}
for s in plan attention; do
  tune $s-before $V/autotune-before $s/hbm; tune $s-new $B/autotune $s/hbm; tune $s-before2 $V/autotune-before $s/hbm
done
export FATHOM_KERNEL_CACHE=/tmp/kc-record
timeout -k 10 $(lim 60) $B/autotune --only plan --timings --out $L/tune-plan > $L/autotune-plan.txt 2>&1; el autotune plan rc=$?
mkdir -p $L/record $L/record-old && cp runtime/records/nvidia-h200.json $L/record/ && cp runtime/records/nvidia-h200.json $L/record-old/
timeout -k 10 $(lim 20) $B/autotune --merge $L/tune-plan/nvidia-h200.json --into $L/record/nvidia-h200.json > $L/merge.txt 2>&1; el merge rc=$?
sb() {  # sb LABEL BINARY RECORD_DIR
  FATHOM_TUNING_DIR=$3 timeout -k 10 $(lim 90) $2 --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing \
    --commit $C --placement hbm --contexts 32k,1m --out $L/sb-$1 > $L/step-bench-$1.txt 2>&1; el step-bench $1 rc=$?
}
sb before $V/step-bench-before $L/record-old
sb new $B/step-bench $L/record
export FATHOM_KERNEL_CACHE=/tmp/kc-prof FATHOM_JIT_LINEINFO=1
S="--section SourceCounters --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis --section InstructionStats --section ComputeWorkloadAnalysis"
timeout -k 10 $(( $(left) - 25 )) ncu --clock-control none $S -k regex:'scan_d128_g4_b64_s512_w8_hbm_t64' --launch-skip 3 --launch-count 1 -o $L/scan-1m \
  $B/autotune --model qwen3-8b --only scan/hbm/1m --out $L/tune-scan > $L/ncu-scan-1m.txt 2>&1
el ncu scan 1m rc=$?
ncu -i $L/scan-1m.ncu-rep --page details --csv > $L/details-scan-1m.csv 2>&1
ncu -i $L/scan-1m.ncu-rep --page source --csv --print-source sass > $L/source-sass-scan-1m.csv 2>&1
el exported
cd $L && { cat nvidia-smi.txt timeline.txt; grep -hE "^test |test result|FAILED|panicked" gpu_plan.log gpu_attention.log gpu_step.log | head -40
  for s in sanitize-plan sanitize-attention; do cat $s/summary.txt 2>/dev/null; tail -1 $s.txt; done
  for t in plan-before plan-new plan-before2 attention-before attention-new attention-before2; do echo "== autotune $t"; grep -E "^(plan|attention)" autotune-$t.txt | head -3; done
  grep -E "^plan" autotune-plan.txt; cat merge.txt
  for t in before new; do echo "== step-bench $t"; grep -E "^method|^fathom|^sparq|per layer|floor" step-bench-$t.txt; done
  tail -3 ncu-scan-1m.txt; wc -c details-scan-1m.csv source-sass-scan-1m.csv; } > $OUT/summary.txt 2>&1
rm -rf $L/tune-scan $L/sb-before/*.svg
tar czf $OUT/plan-rounds.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
