#!/usr/bin/env bash
# For the next GPU session (written 2026-12-05, not yet run): what landed after the last call of
# 2026-12-05. gpu_step's tensor-core scan tests (`gpu_step_tensor_core_scan_g4/g7`: the step with
# a record whose only entry is a tensor-core scan tile, both placements, graphs; ties judged
# within that scan's bound through `StepCheck::for_plan`) and every gpu_step and gpu_decode test
# under the committed record (whose 1M HBM scan entries are tensor-core tiles); gpu_scan whole;
# then step-bench under the committed record: HBM 32k and 1M, host 256k and 1M (fathom(48),
# sparq(32)), and the standing cell 16 x 128k from host. From the repository root, after
# `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=560 bash bench/calls/h200-next-scan-tc-step.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-tests
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 150) ./tests/gpu_step-test --ignored --test-threads=1 > $L/gpu_step.log 2>&1 ); el gpu_step rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 90) ./tests/gpu_decode-test --ignored --test-threads=1 > $L/gpu_decode.log 2>&1 ); el gpu_decode rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_scan-test --ignored --test-threads=1 > $L/gpu_scan.log 2>&1 ); el gpu_scan rc=$?
export FATHOM_KERNEL_CACHE=/tmp/kc-sb FATHOM_TUNING_DIR=$R/runtime/records
timeout -k 10 $(lim 100) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing \
  --commit $C --placement hbm --contexts 32k,1m --out $L/sb-hbm > $L/step-bench-hbm.txt 2>&1; el step-bench hbm rc=$?
timeout -k 10 $(( $(left) - 10 )) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 \
  --commit $C --placement host --contexts 256k,1m --out $L/sb-host > $L/step-bench-host.txt 2>&1; el step-bench host rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; grep -hE "^test |test result|FAILED|panicked" gpu_step.log gpu_decode.log gpu_scan.log | head -60
  for t in hbm host; do echo "== step-bench $t"; grep -E "^method|^fathom|^sparq|issue #15" step-bench-$t.txt; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-tc-step.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
