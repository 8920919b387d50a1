#!/usr/bin/env bash
# 2026-12-05 (issue #15 item 4): the tensor-core scan (`ScanSpec::tensor_cores`,
# templates/scan_tc.cu.tera), its first run. gpu_scan's tensor-core test and its 1M-token test
# (which now runs both variants), compute-sanitizer's four tools on the tensor-core test;
# autotune's scan subject for qwen3-8b with `--opt-in scan-tc` (every tile plain and on the tensor
# cores, timed in one run), HBM and host; then step-bench HBM 32k and 1M under the committed
# record and under it with the scan entries of that run merged in. From the repository root,
# after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=540 bash bench/calls/h200-2026-12-05b-scan-tc.sh
set -u
DEFAULT_BUDGET=540 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-tests
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_scan-test --ignored --test-threads=1 tensor_cores > $L/gpu_scan_tc.log 2>&1 ); el gpu_scan tensor_cores rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_scan-test --ignored --test-threads=1 1m_tokens > $L/gpu_scan_1m.log 2>&1 ); el gpu_scan 1m rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 80) bash scripts/sanitize.sh --tests gpu_scan --jobs 4 --timeout 75 gpu_scan_tensor_cores_match_reference > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
FATHOM_KERNEL_CACHE=/tmp/kc-tune timeout -k 10 $(lim 90) $B/autotune --model qwen3-8b --only scan/hbm --only scan/host --opt-in scan-tc --timings \
  --out $L/tune-tc > $L/autotune-tc.txt 2>&1; el autotune scan-tc rc=$?
mkdir -p /tmp/rec-tc && cp $R/runtime/records/nvidia-h200.json /tmp/rec-tc/
timeout -k 10 30 $B/autotune --merge $L/tune-tc/nvidia-h200.json --into /tmp/rec-tc/nvidia-h200.json > $L/merge.txt 2>&1; el merge rc=$?
export FATHOM_KERNEL_CACHE=/tmp/kc-sb
sb() {  # sb LABEL RECORD_DIR
  FATHOM_TUNING_DIR=$2 timeout -k 10 $(lim 120) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing \
    --commit $C --placement hbm --contexts 32k,1m --out $L/sb-$1 > $L/step-bench-$1.txt 2>&1; el step-bench $1 rc=$?
}
sb committed $R/runtime/records
sb tc /tmp/rec-tc
sb committed2 $R/runtime/records
cd $L && { cat nvidia-smi.txt timeline.txt; grep -hE "^test |test result|FAILED|panicked|error" gpu_scan_tc.log gpu_scan_1m.log | head -40
  cat sanitize/summary.txt 2>/dev/null; tail -1 sanitize.txt
  echo "== autotune scan-tc"; grep -E "^scan" autotune-tc.txt; tail -8 autotune-tc.txt; cat merge.txt | tail -3
  for t in committed tc committed2; do echo "== step-bench $t"; grep -E "^method|^fathom|^sparq|per layer" step-bench-$t.txt; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-tc.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
