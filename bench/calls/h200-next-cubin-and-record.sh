#!/usr/bin/env bash
# The first device call planned for the session after 2026-12-02 (bench/NOTES.md, "Second
# session of 2026-12-02"): the opt-in CUBIN road on the GPU, its effect on a cold JIT and on a
# cold autotune, and the whole H200 record re-made. From the repository root, after
# `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=570 bash bench/calls/h200-next-cubin-and-record.sh
# 1. the CUBIN GPU test (bit for bit against the PTX road) and the whole gpu_jit binary;
# 2. fathom-jit-report for qwen3-8b, PTX then CUBIN, each on an empty cache (per kernel: NVRTC
#    and module load; the PTX load is the driver's PTX compile);
# 3. autotune, the default grid, on an empty kernel cache with FATHOM_JIT_IMAGE=cubin, into a
#    scratch --out (the record to commit as runtime/records/nvidia-h200.json when it is whole);
# 4. gpu_pariskv whole (285 s alone; its sixth test was cut on 2026-12-02) if time is left.
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
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_jit-test --ignored --test-threads=1 > $L/gpu_jit.log 2>&1 ); el gpu_jit rc=$?
for image in ptx cubin; do
  rm -rf /tmp/jitcache-$image
  FATHOM_JIT_IMAGE=$image timeout -k 10 $(lim 150) $B/fathom-jit-report --model qwen3-8b --cache-dir /tmp/jitcache-$image > $L/jit-report-$image.txt 2>&1
  el jit-report $image rc=$?
done
rm -rf /tmp/kc && FATHOM_KERNEL_CACHE=/tmp/kc FATHOM_JIT_IMAGE=cubin timeout -k 10 $(lim 420) $B/autotune --timings --out $L/tune > $L/autotune.txt 2>&1
el autotune rc=$?
if [ $(left) -gt 300 ]; then
  ( cd /tmp/fg/.gpu && timeout -k 10 $(lim 300) ./tests/gpu_pariskv-test --ignored --test-threads=1 > $L/gpu_pariskv.log 2>&1 ); el gpu_pariskv rc=$?
fi
cd $L && { cat timeline.txt; grep -E "^test |test result" gpu_jit.log gpu_pariskv.log 2>/dev/null; tail -4 jit-report-ptx.txt jit-report-cubin.txt; grep -E "ready in|record" autotune.txt; tail -9 autotune.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/next.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
