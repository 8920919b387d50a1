#!/usr/bin/env bash
# The plane scan's grid fitted to the GPU's waves (`Tiles::scan_stripes`, `step-bench
# --scan-stripes N`; new in the twenty-third session, not yet run on a GPU). At 1M in HBM the
# scan's grid is 8 stripes of 8 tiles a segment, 2,048 blocks: on an H100 ncu counted 3 waves
# and a partial one of 68 blocks for the tensor-core scan at 128 threads (up to 25% of its time
# if blocks were uniform), and the record's G = 4 tile (8 words, 64 threads, ~7 blocks a
# multiprocessor, 924 slots) makes 2.2 waves. Blocks of a partial wave run faster (fewer share a
# multiprocessor's schedulers), so the loss is less than the wave count says: this call
# measures it. In order of need: gpu_step_scan_stripes_g4 (exact at 1 and 3 blocks a segment);
# ncu's warm time and warp instructions of the HBM 1M tensor-core scan in the step (the
# committed record's tiles) at the default grid and at 2, 3, 4, 6, 7, 10 and 12 blocks a
# segment (256 segments: 512 to 3,072 blocks); then
# step-bench HBM 1M fathom(48) at the fastest.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"] (~420 s):
#   C=$(git rev-parse --short HEAD) BUDGET=420 bash bench/calls/next-scan-stripes.sh
set -u
DEFAULT_BUDGET=420 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
gpu_tests gpu_step 110 gpu_step_scan_stripes_g4
NCU_LIMIT=40 ncu_kernels scan default 'fathom_scan.*_tc' 1m
for n in 7 4 2 3 6 10 12; do
  NCU_LIMIT=40 ncu_kernels scan "s$n" 'fathom_scan.*_tc' 1m --scan-stripes "$n"
done
# The fastest grid by median time, then step-bench at it and at the default.
best=$(for f in $L/times-scan-s*.txt; do awk -F'|' -v f="$f" '/fathom_scan/ {gsub(/ /,"",$3); print $3, f}' "$f"; done \
  | sort -n | head -1 | sed -E 's/.*times-scan-s([0-9]+)\.txt/\1/')
el "fastest stripes: ${best:-none}"
for n in ${best:+$best} default; do
  [ "$(left)" -gt 60 ] || break
  flag=(); [ "$n" != default ] && flag=(--scan-stripes "$n")
  timeout -k 10 "$(lim 60)" "$B/step-bench" --model qwen3-8b --methods "fathom(48)" --contexts 1m --placement hbm \
    --batch 1 --no-standing "${flag[@]}" --commit "${C:-unknown}-$n" --out "$L/sb-$n" > "$L/step-bench-$n.txt" 2>&1
  el "step-bench $n rc=$?"
done
cd $L && { cat nvidia-smi.txt timeline.txt; cat times-*.txt 2>/dev/null
  echo "== gpu_step.log"; grep -E "^test |test result|panicked" gpu_step.log | head -20
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-stripes.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
