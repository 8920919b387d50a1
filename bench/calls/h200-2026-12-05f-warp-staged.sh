#!/usr/bin/env bash
# 2026-12-05, second session (issue #15 item 4): the tensor-core scan with each warp staging its
# own tokens (`ScanSpec::warp_staged`, opt-in `scan-tc-warp`: no block-wide barrier a step for a
# one-chunk plan), and what landed after the last call of the first session, not yet run:
# gpu_step's tensor-core tests and every gpu_step / gpu_decode test under the committed record
# (whose 1M HBM scan entries are tensor-core tiles). In order: gpu_scan's tensor-core and 1M
# tests (both forms), the four sanitizer tools on the tensor-core test, kernel-bench at 1M (plain,
# tc, tc ws), autotune's HBM scan subject with both opt-ins (merged into a copy of the record),
# gpu_step whole, gpu_decode whole, step-bench HBM 32k/1M under the committed record and the
# merged one, then host 256k/1M under the committed record with what is left.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=570 bash bench/calls/h200-2026-12-05f-warp-staged.sh
# Ran at 15cf27b (summary bench/results/warp-staged-h200-2026-12-05-15cf27b-summary.txt): the warp-staged
# form was 1-6% slower and was reverted; it is bench/experiments/scan-tc-warp-staged.patch, so the
# `--warp-staged` and `scan-tc-warp` flags this script passes exist only with that patch applied.
set -u
DEFAULT_BUDGET=570 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-tests
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_scan-test --ignored --test-threads=1 tensor_cores 1m_tokens > $L/gpu_scan.log 2>&1 ); el gpu_scan rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 100) bash scripts/sanitize.sh --tests gpu_scan --jobs 4 --timeout 95 gpu_scan_tensor_cores_match_reference > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
FATHOM_KERNEL_CACHE=/tmp/kc-kb timeout -k 10 $(lim 45) $B/kernel-bench --tensor-cores --warp-staged --budgets 48 --commit $C > $L/kernel-bench.txt 2>&1; el kernel-bench rc=$?
FATHOM_KERNEL_CACHE=/tmp/kc-tune timeout -k 10 $(lim 60) $B/autotune --model qwen3-8b --only scan/hbm --opt-in scan-tc --opt-in scan-tc-warp --timings \
  --out $L/tune-ws > $L/autotune-ws.txt 2>&1; el autotune scan-tc-warp rc=$?
mkdir -p /tmp/rec-ws && cp $R/runtime/records/nvidia-h200.json /tmp/rec-ws/
timeout -k 10 30 $B/autotune --merge $L/tune-ws/nvidia-h200.json --into /tmp/rec-ws/nvidia-h200.json > $L/merge.txt 2>&1; el merge rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 150) ./tests/gpu_step-test --ignored --test-threads=1 > $L/gpu_step.log 2>&1 ); el gpu_step rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 90) ./tests/gpu_decode-test --ignored --test-threads=1 > $L/gpu_decode.log 2>&1 ); el gpu_decode rc=$?
export FATHOM_KERNEL_CACHE=/tmp/kc-sb
sb() {  # sb LABEL RECORD_DIR
  FATHOM_TUNING_DIR=$2 timeout -k 10 $(lim 60) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing \
    --commit $C --placement hbm --contexts 32k,1m --out $L/sb-$1 > $L/step-bench-$1.txt 2>&1; el step-bench $1 rc=$?
}
sb committed $R/runtime/records
sb ws /tmp/rec-ws
FATHOM_TUNING_DIR=$R/runtime/records timeout -k 10 $(lim $(( $(left) - 8 ))) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 \
  --commit $C --placement host --contexts 256k,1m --out $L/sb-host > $L/step-bench-host.txt 2>&1; el step-bench host rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; grep -hE "^test |test result|FAILED|panicked" gpu_scan.log gpu_step.log gpu_decode.log | head -60
  cat sanitize/summary.txt 2>/dev/null; tail -1 sanitize.txt
  grep -E "hbm scan" kernel-bench.txt
  echo "== autotune scan-tc-warp"; grep -E "^scan" autotune-ws.txt; tail -4 autotune-ws.txt; tail -3 merge.txt
  for t in committed ws host; do echo "== step-bench $t"; grep -E "^method|^fathom|^sparq|issue #15" step-bench-$t.txt; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/warp-staged.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
