#!/usr/bin/env bash
# 2026-12-03, first device call (issue #15 item 7): autotune as a newcomer meets it, each run on
# an empty kernel cache of its own, with --timings: `--quick` (target: 30 s), then the default
# run (target: 3 minutes) into a scratch --out, the record to commit as
# runtime/records/nvidia-h200.json when it is whole. From the repository root, after
# `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=570 bash bench/calls/h200-2026-12-03-autotune.sh
set -u
L=$OUT/logs; mkdir -p $L
T0=$(date +%s); BUDGET=${BUDGET:-570}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local a=$1 b=$(left); [ $b -lt $a ] && a=$b; [ $a -lt 5 ] && a=5; echo $a; }
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $L/timeline.txt; }
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin
el unpacked
rm -rf /tmp/kc-quick && FATHOM_KERNEL_CACHE=/tmp/kc-quick timeout -k 10 $(lim 120) $B/autotune --quick --timings --out $L/tune-quick > $L/autotune-quick.txt 2>&1
el autotune-quick rc=$?
rm -rf /tmp/kc-full && FATHOM_KERNEL_CACHE=/tmp/kc-full timeout -k 10 $(lim 420) $B/autotune --timings --out $L/tune > $L/autotune.txt 2>&1
el autotune rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; for f in autotune-quick.txt autotune.txt; do echo "== $f"; grep -E "^autotune:|disqualified" $f | head -20; tail -9 $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/autotune.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
