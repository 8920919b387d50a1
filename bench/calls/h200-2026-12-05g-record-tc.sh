#!/usr/bin/env bash
# 2026-12-05, second session (issue #15 item 7): the scan's tensor-core tiles in autotune's
# default grid (graduated from `--opt-in scan-tc` after gpu_step's tensor-core tests passed,
# bench/results/warp-staged-h200-2026-12-05-15cf27b-summary.txt), so the record is re-made whole:
# the default run on an empty kernel cache (target 3 minutes) into a scratch --out, to commit as
# runtime/records/nvidia-h200.json when it is whole; then, as time allows, `autotune --quick` on
# another empty cache (target 30 s), step-bench in HBM at 32k and 1M under the new record,
# gpu_decode whole under it (it ran out of its 90 s on a cold cache in the last call), and
# step-bench from host at 256k and 1M. Not yet run (device lending paused on 2026-12-05); with
# a fresh lease give it BUDGET=560, with less the later steps are skipped.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=560 bash bench/calls/h200-2026-12-05g-record-tc.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
rm -rf /tmp/kc-full && FATHOM_KERNEL_CACHE=/tmp/kc-full timeout -k 10 $(lim 240) $B/autotune --timings --out $L/tune > $L/autotune.txt 2>&1
el autotune rc=$?
if [ $(left) -gt 45 ]; then
  rm -rf /tmp/kc-quick && FATHOM_KERNEL_CACHE=/tmp/kc-quick timeout -k 10 $(lim 40) $B/autotune --quick --timings --out $L/tune-quick > $L/autotune-quick.txt 2>&1
  el autotune-quick rc=$?
fi
if [ $(left) -gt 40 ]; then
  FATHOM_KERNEL_CACHE=/tmp/kc-full FATHOM_TUNING_DIR=$L/tune timeout -k 10 $(lim $(( $(left) - 5 ))) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" \
    --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb --commit $C > $L/step-bench.txt 2>&1
  el step-bench rc=$?
fi
if [ $(left) -gt 60 ]; then
  ( cd /tmp/fg/.gpu && FATHOM_KERNEL_CACHE=/tmp/kc-full FATHOM_TUNING_DIR=$L/tune timeout -k 10 $(lim 150) ./tests/gpu_decode-test --ignored --test-threads=1 > $L/gpu_decode.log 2>&1 )
  el gpu_decode rc=$?
fi
if [ $(left) -gt 60 ]; then
  FATHOM_KERNEL_CACHE=/tmp/kc-full FATHOM_TUNING_DIR=$L/tune timeout -k 10 $(lim $(( $(left) - 5 ))) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" \
    --contexts 256k,1m --placement host --batch 1 --out $L/sb-host --commit $C > $L/step-bench-host.txt 2>&1
  el step-bench host rc=$?
fi
cd $L && { cat nvidia-smi.txt timeline.txt
  grep -hE "^test |test result|panicked" gpu_decode.log 2>/dev/null | head -20
  grep -hE "^method|^fathom|^sparq|issue #15" step-bench.txt step-bench-host.txt 2>/dev/null
  for f in autotune-quick.txt autotune.txt; do echo "== $f"; grep -E "^autotune:|disqualified|^scan" $f | head -30; tail -9 $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/record-tc.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
