#!/usr/bin/env bash
# The two waiting changes of the twenty-third session in one call (first session of a day
# whose starts fail: one start, both answers). The pack is main with
# bench/experiments/scan-tc-fresh-peaks.patch applied; .gpu/old/step-bench-old.xz is main's
# step-bench (packed before the patch). In order of need:
#   1. gpu_step's tensor-core cases and gpu_step_scan_stripes_g4 on the patched build (both
#      changes exact in the step);
#   2. ncu's warm time and warp instructions of the HBM 1M tensor-core scan, main's binary and
#      the patched one (the patch's A/B);
#   3. main's binary with `--scan-stripes` 5, 7, 10 and 3 blocks a segment (the grid fitted
#      to the waves; default 8 = 2,048 blocks; why those counts: bench/NOTES.md, twenty-fourth
#      session), then the 32k scan at its default 64 blocks a segment and at 16, 32 and 8;
#   4. compute-sanitizer memcheck and racecheck on gpu_scan's tensor-core test, then gpu_scan's
#      peaks test (the patch's peaks), on the patched build.
# Before the call, from the repository root:
#   scripts/pack-gpu.sh && mkdir -p /tmp/before && tar xJf .gpu/pack.tar.xz -C /tmp/before \
#     && xz -c /tmp/before/.gpu/bin/step-bench > /tmp/step-bench-old.xz
#   (a clone with the patch applied) scripts/pack-gpu.sh, its .gpu here, then
#   mkdir -p .gpu/old && cp /tmp/step-bench-old.xz .gpu/old/
# carry [".gpu"] (~570 s):
#   C=<commit>+fp BUDGET=570 bash bench/calls/next-stripes-fresh-peaks.sh
set -u
DEFAULT_BUDGET=570 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
ab_start
gpu_tests gpu_step 90 tensor_core scan_stripes
NCU_LIMIT=40 B=/tmp/fg/old ncu_kernels scan before 'fathom_scan.*_tc' 1m
NCU_LIMIT=40 ncu_kernels scan after 'fathom_scan.*_tc' 1m
for n in 5 7 10 3; do
  [ "$(left)" -gt 200 ] || break
  NCU_LIMIT=40 B=/tmp/fg/old ncu_kernels scan "s$n" 'fathom_scan.*_tc' 1m --scan-stripes "$n"
done
# The 32k scan (64 one-tile blocks a KV head by default): is its time the prologue each block
# repeats? Fewer blocks, more tiles each, say.
NCU_LIMIT=30 B=/tmp/fg/old ncu_kernels scan32k default fathom_scan 32k
for n in 16 32 8; do
  [ "$(left)" -gt 170 ] || break
  NCU_LIMIT=30 B=/tmp/fg/old ncu_kernels scan32k "s$n" fathom_scan 32k --scan-stripes "$n"
done
sanitize_test gpu_scan gpu_scan_tensor_cores_match_reference 80
[ "$(left)" -gt 60 ] && gpu_tests gpu_scan "$(( $(left) - 10 ))" gpu_scan_peaks
cd $L && { cat nvidia-smi.txt timeline.txt; cat times-*.txt 2>/dev/null; cat sanitize/summary.txt 2>/dev/null
  for f in gpu_scan.log gpu_step.log; do echo "== $f"; grep -E "^test |test result|panicked" $f | head -20; done
  } > $OUT/summary.txt 2>&1
tar czf $OUT/stripes-fresh-peaks.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
