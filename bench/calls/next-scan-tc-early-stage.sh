#!/usr/bin/env bash
# The tensor-core scan's prologue cut (bench/experiments/scan-tc-early-stage.patch; twenty-fourth
# session, CPU-exact, not yet run on a GPU): a warp loads a head's query and takes its scale as
# it goes (one block barrier and a pass over shared memory fewer), and the first step's copies
# go out before the chunk's operands are formed, so that their latency overlaps that work.
# Why: the 32k scan (512 one-tile blocks, 8.3 us on an H100) spends ~60% of its stall samples
# before its tile (bench/results/scan-stripes-h100-2026-12-07-8d3f916-fp-scan32k-lines.txt):
# 13% loads and chunks, 12% scales, 11% operands, 12% first staging, 4% its wait. Predicted:
# 1-1.5 us of the 32k scan, nothing measurable at 1M (a block scores ~22 tiles there).
# In order of need: ncu's warm time and warp instructions of the HBM scan at 32k and 1M, the
# binaries before (.gpu/old/step-bench-old.xz) and after; gpu_step's tensor-core cases;
# compute-sanitizer memcheck and racecheck on gpu_scan's tensor-core test; gpu_scan's peaks
# test; step-bench HBM 32k fathom(48) after and before.
# Before the call, from the repository root (the pack before the patch, then after it):
#   scripts/pack-gpu.sh && mkdir -p /tmp/before && tar xJf .gpu/pack.tar.xz -C /tmp/before \
#     && xz -c /tmp/before/.gpu/bin/step-bench > /tmp/step-bench-old.xz
#   git apply bench/experiments/scan-tc-early-stage.patch
#   scripts/pack-gpu.sh && mkdir -p .gpu/old && cp /tmp/step-bench-old.xz .gpu/old/
# then carry [".gpu"] (~420 s):
#   C=<commit>+es BUDGET=420 bash bench/calls/next-scan-tc-early-stage.sh
# Land it (git apply, commit) when exact and not slower.
set -u
DEFAULT_BUDGET=420 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
ab_start
gpu_tests gpu_step 100 tensor_core scan_one_wave scan_stripes
NCU_LIMIT=40 B=/tmp/fg/old ncu_kernels scan 32k-before fathom_scan 32k
NCU_LIMIT=40 ncu_kernels scan 32k-after fathom_scan 32k
NCU_LIMIT=45 B=/tmp/fg/old ncu_kernels scan 1m-before 'fathom_scan.*_tc' 1m
NCU_LIMIT=45 ncu_kernels scan 1m-after 'fathom_scan.*_tc' 1m
sanitize_test gpu_scan gpu_scan_tensor_cores_match_reference 80
for b in after before; do
  bin=$B/step-bench; [ $b = before ] && bin=/tmp/fg/old/step-bench
  [ "$(left)" -gt 45 ] || break
  timeout -k 10 "$(lim 40)" "$bin" --model qwen3-8b --methods "fathom(48)" --contexts 32k --placement hbm --batch 1 \
    --no-standing --commit "${C:-unknown}-$b" --out "$L/sb-$b" > "$L/step-bench-$b.txt" 2>&1
  el "step-bench $b rc=$?"
done
[ "$(left)" -gt 60 ] && gpu_tests gpu_scan "$(( $(left) - 10 ))" gpu_scan_peaks
cd $L && { cat nvidia-smi.txt timeline.txt; cat times-*.txt 2>/dev/null; cat sanitize/summary.txt 2>/dev/null
  for f in gpu_scan.log gpu_step.log; do echo "== $f"; grep -E "^test |test result|panicked" $f | head -20; done
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-tc-early-stage.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
