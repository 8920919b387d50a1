#!/usr/bin/env bash
# The tensor-core scan's two cuts of the twenty-third session (templates/scan_tc.cu.tera,
# scan_peaks.cuh.tera): the tile's first k-chunk's mma takes zero accumulators from the
# instruction (no zeroing moves a tile), and the peaks take a lane's largest raw key from a
# signed maximum and an unsigned minimum of the scores' bits, then reduce over the column pair's
# lanes with the halves split among them (TPT / 2 + TPT / 4 + ... shuffles, not 3 · TPT).
# Exact on the CPU emulator (cpu_scan, new mutants and a test of the raw key), not yet run on a
# GPU: it waits as bench/experiments/scan-tc-fresh-peaks.patch (the twenty-third session's
# device time ran out in failed starts). Predicted (SASS of fathom_scan_d128_g4_b64_s512_w8_hbm_t128_tc_pk):
# 16 zeroing instructions and ~22 of the peaks' a warp a tile fewer, ~5% of the 1M scan's
# instructions. In order of need: ncu's warm time and warp instructions of the HBM 1M
# tensor-core scan, the binaries before (.gpu/old/step-bench-old.xz) and after; gpu_step's
# tensor-core cases; gpu_scan's peaks and tensor-core tests; step-bench HBM 1M fathom(48) after;
# compute-sanitizer memcheck and racecheck on the tensor-core scan test; the finest warp
# sampling of the new scan at 1M.
# Before the call, from the repository root (the pack before the patch, then after it):
#   scripts/pack-gpu.sh && mkdir -p /tmp/before && tar xJf .gpu/pack.tar.xz -C /tmp/before \
#     && xz -c /tmp/before/.gpu/bin/step-bench > /tmp/step-bench-old.xz
#   git apply bench/experiments/scan-tc-fresh-peaks.patch
#   scripts/pack-gpu.sh && mkdir -p .gpu/old && cp /tmp/step-bench-old.xz .gpu/old/
# then carry [".gpu"] (~400 s; gpu_scan's two tests take ~80-160 s, compiling cold):
#   C=<commit>+fp BUDGET=400 bash bench/calls/next-scan-tc-fresh-peaks.sh
# Land it (git apply, commit) when exact and not slower.
set -u
DEFAULT_BUDGET=400 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
ab_start
NCU_LIMIT=40 B=/tmp/fg/old ncu_kernels scan before 'fathom_scan.*_tc' 1m
NCU_LIMIT=40 ncu_kernels scan after 'fathom_scan.*_tc' 1m
gpu_tests gpu_step 70 tensor_core
gpu_tests gpu_scan 160 gpu_scan_peaks gpu_scan_tensor
[ "$(left)" -gt 70 ] && timeout -k 10 "$(lim 65)" "$B/step-bench" --model qwen3-8b --methods "fathom(48)" --contexts 1m \
  --placement hbm --batch 1 --no-standing --commit "${C:-unknown}-after" --out "$L/sb-after" > "$L/step-bench-after.txt" 2>&1 \
  && el "step-bench after rc=$?"
sanitize_test gpu_scan gpu_scan_tensor_cores_match_reference 100
CONTEXT=1m ncu_sampling tcscan 'fathom_scan.*_tc'
cd $L && { cat nvidia-smi.txt timeline.txt; cat times-*.txt 2>/dev/null; cat sanitize/summary.txt 2>/dev/null
  for f in gpu_scan.log gpu_step.log; do echo "== $f"; grep -E "^test |test result|panicked" $f | head -20; done
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done
  grep -hE "Duration|Warp Cycles Per Issued|Executed Instructions\"" *-details.csv; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-tc-fresh-peaks.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
