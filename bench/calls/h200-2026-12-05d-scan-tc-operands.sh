#!/usr/bin/env bash
# 2026-12-05 (issue #15 item 4), after the profile of the tensor-core scan (ncu at 1M: 65.7M warp
# instructions, IPC 2.23, 24% of stall samples at barriers after the per-step operand phase, only
# a third of the instructions in the mma loop; without score stores both scans are ~5% faster,
# so the stores are not what bounds them). Now a one-chunk plan forms its weights and piece
# slots once a block, and the per-step -Δ pairs and the staging read the slots from shared
# memory. gpu_scan's tensor-core and 1M tests, the four sanitizer tools on the tensor-core test;
# kernel-bench at 1M with --tensor-cores; autotune's scan subject (qwen3-8b) with `--opt-in
# scan-tc`, HBM and host; step-bench HBM 32k and 1M under the committed record and under it with
# that run's scan entries merged in (interleaved: committed, merged, committed); gpu_step's g4 and g7 tests under
# the merged record. From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=480 bash bench/calls/h200-2026-12-05d-scan-tc-operands.sh
set -u
DEFAULT_BUDGET=480 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-tests
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_scan-test --ignored --test-threads=1 tensor_cores 1m_tokens > $L/gpu_scan.log 2>&1 ); el gpu_scan rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 80) bash scripts/sanitize.sh --tests gpu_scan --jobs 4 --timeout 75 gpu_scan_tensor_cores_match_reference > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
FATHOM_KERNEL_CACHE=/tmp/kc-kb timeout -k 10 $(lim 40) $B/kernel-bench --tensor-cores --budgets 48 --commit $C > $L/kernel-bench.txt 2>&1; el kernel-bench rc=$?
FATHOM_KERNEL_CACHE=/tmp/kc-tune timeout -k 10 $(lim 90) $B/autotune --model qwen3-8b --only scan/hbm --only scan/host --opt-in scan-tc --timings \
  --out $L/tune-tc > $L/autotune-tc.txt 2>&1; el autotune scan-tc rc=$?
mkdir -p /tmp/rec-tc && cp $R/runtime/records/nvidia-h200.json /tmp/rec-tc/
timeout -k 10 30 $B/autotune --merge $L/tune-tc/nvidia-h200.json --into /tmp/rec-tc/nvidia-h200.json > $L/merge.txt 2>&1; el merge rc=$?
export FATHOM_KERNEL_CACHE=/tmp/kc-sb
sb() {  # sb LABEL RECORD_DIR
  FATHOM_TUNING_DIR=$2 timeout -k 10 $(lim 90) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing \
    --commit $C --placement hbm --contexts 32k,1m --out $L/sb-$1 > $L/step-bench-$1.txt 2>&1; el step-bench $1 rc=$?
}
sb committed $R/runtime/records
sb tc /tmp/rec-tc
sb committed2 $R/runtime/records
( cd /tmp/fg/.gpu && FATHOM_TUNING_DIR=/tmp/rec-tc timeout -k 10 $(lim 90) ./tests/gpu_step-test --ignored --test-threads=1 raw_store_g4 rotated_store_g7 > $L/gpu_step.log 2>&1 ); el gpu_step tc-record rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; grep -hE "^test |test result|FAILED|panicked" gpu_scan.log gpu_step.log | head -40
  cat sanitize/summary.txt 2>/dev/null; tail -1 sanitize.txt
  grep -E "hbm scan" kernel-bench.txt
  echo "== autotune scan-tc"; grep -E "^scan" autotune-tc.txt; tail -8 autotune-tc.txt; tail -3 merge.txt
  for t in committed tc committed2; do echo "== step-bench $t"; grep -E "^method|^fathom|^sparq" step-bench-$t.txt; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-tc-operands.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
