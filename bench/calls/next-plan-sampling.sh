#!/usr/bin/env bash
# Where the plan's blocks wait at 32k (twentieth session: the direct water line took ~40% of
# the bisection's instructions away and the plan's 9.22 us not at all; ncu's default warp
# sampling gave ~60 samples a launch). ncu's warp-state sampling at its finest interval
# (--warp-sampling-interval 0) on one launch of the plan in the HBM 32k step (qwen3-8b,
# fathom(48), batch 1), with the rounds and with the direct water line; the SASS view with its
# stall samples exported as CSV (sum them by region with the SASS addresses of BAR.SYNC, or by
# line with `codegen machine-code --lineinfo` and bench/calls/sass-lines.py).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=150 bash bench/calls/next-plan-sampling.sh
set -u
DEFAULT_BUDGET=150 . bench/calls/budget.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
for flag in "" "--plan-direct-line"; do
  tag=${flag:+direct}; tag=${tag:-rounds}
  [ "$(left)" -gt 30 ] || break
  ( cd /tmp/fg && FATHOM_KERNEL_CACHE=/tmp/kc-sampling timeout -k 10 "$(lim 60)" ncu --clock-control none \
      --cache-control none --section WarpStateStats --section SourceCounters --section LaunchStats \
      --section SpeedOfLight --warp-sampling-interval 0 --import-source no -k regex:fathom_plan --launch-skip 60 \
      --launch-count 1 -o "$L/plan-$tag" .gpu/bin/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 \
      --steps 3 --slots 1 --no-standing --placement hbm --contexts 32k $flag --out "/tmp/sb-sampling-$tag" \
      > "$L/ncu-plan-$tag.txt" 2>&1 )
  el "ncu plan $tag rc=$?"
  ncu --import "$L/plan-$tag.ncu-rep" --page source --csv --print-source sass > "$L/plan-$tag-sass.csv" 2>&1
  ncu --import "$L/plan-$tag.ncu-rep" --page details --csv > "$L/plan-$tag-details.csv" 2>&1
  rm -f "$L/plan-$tag.ncu-rep"
done
cd $L && { cat nvidia-smi.txt timeline.txt; grep -hE "Duration|Warp Cycles Per Issued|Executed Instructions\"" plan-*-details.csv; } \
  > $OUT/summary.txt 2>&1
tar czf $OUT/plan-sampling.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
