#!/usr/bin/env bash
# 2026-12-03, fifth session (issue #15 items 4 and 7), after the plan-rounds call: ncu said the
# HBM scan at 1M (fathom(48), w8 t64) issues 97.6M warp instructions at 71% of the issue slots,
# 36% of them FFMA and 9% FADD, with ~1.3 plane bits a channel: most channels are at depth 1.
# There f = ±½ is now the float -½ with the plane bit as its sign (no FADD). And attention's
# merge with each split's weight computed once (measured in the last call: 12.2 -> 11.7 us).
# gpu_scan and gpu_attention (every test), gpu_step's split-attention, raw-store and one-read
# select tests, compute-sanitizer's four tools on gpu_scan; autotune's scan subject (qwen3-8b,
# HBM) before / new / before; the scan (HBM) and attention (HBM) entries of every preset re-timed
# for the record (merged here, after the call); step-bench HBM 32k and 1M before (committed
# record) and new (the new kernels under the committed record's tiles). From the repository
# root, after `scripts/pack-gpu.sh` and copying 358e858's autotune and step-bench to
# .gpu/var/{autotune,step-bench}-before; carry [".gpu"]:
#   C=<commit> BUDGET=560 bash bench/calls/h200-2026-12-03e-scan-sign.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin; V=$R/.gpu/var; chmod +x $V/* 2>/dev/null
el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-tests
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 150) ./tests/gpu_scan-test --ignored --test-threads=1 > $L/gpu_scan.log 2>&1 ); el gpu_scan rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 40) ./tests/gpu_attention-test --ignored --test-threads=1 > $L/gpu_attention.log 2>&1 ); el gpu_attention rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 60) ./tests/gpu_step-test --ignored --test-threads=1 split_attention raw_store_g4 onepass_select_g7 > $L/gpu_step.log 2>&1 ); el gpu_step rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 70) bash scripts/sanitize.sh --tests gpu_scan --jobs 4 --timeout 65 gpu_scan_hbm_matches_reference gpu_scan_one_block > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
tune() {  # tune LABEL BINARY SUBJECT: one subject for qwen3-8b, own cache and record
  FATHOM_KERNEL_CACHE=/tmp/kc-$1 timeout -k 10 $(lim 50) $2 --model qwen3-8b --only $3 --timings \
    --out $L/tune-$1 > $L/autotune-$1.txt 2>&1; el autotune $1 rc=$?
}
tune scan-before $V/autotune-before scan/hbm; tune scan-new $B/autotune scan/hbm; tune scan-before2 $V/autotune-before scan/hbm
export FATHOM_KERNEL_CACHE=/tmp/kc-record
timeout -k 10 $(lim 70) $B/autotune --only scan/hbm --only attention/hbm --timings --out $L/tune-record > $L/autotune-record.txt 2>&1; el autotune record rc=$?
sb() {  # sb LABEL BINARY
  FATHOM_TUNING_DIR=$R/runtime/records timeout -k 10 $(lim 90) $2 --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing \
    --commit $C --placement hbm --contexts 32k,1m --out $L/sb-$1 > $L/step-bench-$1.txt 2>&1; el step-bench $1 rc=$?
}
sb before $V/step-bench-before
sb new $B/step-bench
cd $L && { cat nvidia-smi.txt timeline.txt; grep -hE "^test |test result|FAILED|panicked" gpu_scan.log gpu_attention.log gpu_step.log | head -40
  cat sanitize/summary.txt 2>/dev/null; tail -1 sanitize.txt
  for t in scan-before scan-new scan-before2; do echo "== autotune $t"; grep -E "^scan" autotune-$t.txt | head -3; done
  grep -E "^(scan|attention)" autotune-record.txt; tail -3 autotune-record.txt
  for t in before new; do echo "== step-bench $t"; grep -E "^method|^fathom|^sparq|per layer" step-bench-$t.txt; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-sign.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
