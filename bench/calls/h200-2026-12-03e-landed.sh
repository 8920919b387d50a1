#!/usr/bin/env bash
# 2026-12-03, fifth session (issue #15 item 7): the landed state (f1cae5d: attention's merge with
# each split's weight computed once, the record's attention entries re-timed). `autotune
# --quick` from an empty kernel cache (the issue asks 30 s; 708 candidates since c29dcca, not
# timed cold since), then step-bench under the committed record: HBM 32k and 1M, host 256k and
# 1M (fathom(48), sparq(32)). From the repository root, after `scripts/pack-gpu.sh`; carry
# [".gpu"]:
#   C=<commit> BUDGET=300 bash bench/calls/h200-2026-12-03e-landed.sh
set -u
DEFAULT_BUDGET=300 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin
el unpacked
rm -rf /tmp/kc-quick
FATHOM_KERNEL_CACHE=/tmp/kc-quick timeout -k 10 $(lim 70) $B/autotune --quick --timings --out $L/tune-quick > $L/autotune-quick.txt 2>&1; el autotune quick rc=$?
export FATHOM_KERNEL_CACHE=/tmp/kc-sb FATHOM_TUNING_DIR=$R/runtime/records
timeout -k 10 $(lim 90) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing \
  --commit $C --placement hbm --contexts 32k,1m --out $L/sb-hbm > $L/step-bench-hbm.txt 2>&1; el step-bench hbm rc=$?
timeout -k 10 $(( $(left) - 10 )) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing \
  --commit $C --placement host --contexts 256k,1m --out $L/sb-host > $L/step-bench-host.txt 2>&1; el step-bench host rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; tail -8 autotune-quick.txt
  for t in hbm host; do echo "== step-bench $t"; grep -E "^method|^fathom|^sparq|issue #15" step-bench-$t.txt; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/landed.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
