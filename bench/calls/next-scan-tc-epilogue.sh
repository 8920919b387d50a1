#!/usr/bin/env bash
# The tensor-core scan's cuts of the twenty-second session (templates/scan_tc.cu.tera,
# scan_peaks.cuh.tera), from the 1M sampling of that session (NOTES "Twenty-second session"): a
# full tile's scores stored from one address without a length test each, the peaks' shuffles
# over the whole warp (no partial-mask shuffles), and each lane loading the Δ pairs of its
# pieces itself in the mma loop (no -Delta pairs' pass, its block barrier and its shared array).
# Exact on the CPU emulator (cpu_scan). In order of need: gpu_scan's tensor-core and peaks tests,
# gpu_step's tensor-core cases, compute-sanitizer (memcheck, racecheck) on the tensor-core scan
# test; ncu's warm time and warp instructions of the HBM 1M tensor-core scan, the binaries
# before (.gpu/old/step-bench-old.xz) and after; step-bench HBM 1M (fathom(48)) after, then
# before while time is left; the finest warp sampling of the new scan at 1M.
# The same call checks and times any change of the tensor-core scan against the build before it,
# e.g. bench/experiments/scan-tc-piece-words.patch (apply it between the two packs).
# Before the call, from the repository root (the pack before the change, then after it):
#   scripts/pack-gpu.sh && mkdir -p /tmp/before && tar xJf .gpu/pack.tar.xz -C /tmp/before \
#     && xz -c /tmp/before/.gpu/bin/step-bench > /tmp/step-bench-old.xz
#   scripts/pack-gpu.sh && mkdir -p .gpu/old && cp /tmp/step-bench-old.xz .gpu/old/
# then carry [".gpu"] (~450 s; gpu_scan's two tests take ~130 s):
#   C=<commit> BUDGET=450 bash bench/calls/next-scan-tc-epilogue.sh
set -u
DEFAULT_BUDGET=450 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
ab_start
gpu_tests gpu_scan 150 gpu_scan_peaks gpu_scan_tensor
gpu_tests gpu_step 70 tensor_core
sanitize_test gpu_scan gpu_scan_tensor_cores_match_reference 100
NCU_LIMIT=40 B=/tmp/fg/old ncu_kernels scan before 'fathom_scan.*_tc' 1m
NCU_LIMIT=40 ncu_kernels scan after 'fathom_scan.*_tc' 1m
sb_1m() {  # LABEL STEP-BENCH: fathom(48) at HBM 1M
  [ "$(left)" -gt 60 ] || return
  timeout -k 10 "$(lim 110)" "$2" --model qwen3-8b --methods "fathom(48)" --contexts 1m --placement hbm --batch 1 \
    --no-standing --commit "${C:-unknown}-$1" --out "$L/sb-$1" > "$L/step-bench-$1.txt" 2>&1
  el "step-bench $1 rc=$?"
}
sb_1m after "$B/step-bench"
sb_1m before /tmp/fg/old/step-bench
CONTEXT=1m ncu_sampling tcscan 'fathom_scan.*_tc'
cd $L && { cat nvidia-smi.txt timeline.txt; cat times-*.txt 2>/dev/null; cat sanitize/summary.txt 2>/dev/null
  for f in gpu_scan.log gpu_step.log; do echo "== $f"; grep -E "^test |test result|panicked" $f | head -20; done
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done
  grep -hE "Duration|Warp Cycles Per Issued|Executed Instructions\"" *-details.csv; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-tc-epilogue.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
