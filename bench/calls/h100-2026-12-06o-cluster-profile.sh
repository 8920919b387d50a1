#!/usr/bin/env bash
# Why the cluster selects are slow (H100, 2026-12-06, 714e07b: exact, but autotune select at
# qwen3-8b G = 4 gave 53 us at 32k (`cluster` t512 i4) against 32.7 for the one-block peaks
# select, 72 against 36 at 128k, 92 (`cluster scan`) against 57 at 1M; predicted 5-7 us at
# 32k). ncu's sections for each of the two kernels' `_chunk` and `_union` (one launch each,
# after the tuner's verify launch), with the stall reasons and their SASS lines at 32k.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=200 bash bench/calls/h100-2026-12-06o-cluster-profile.sh
set -u
DEFAULT_BUDGET=200 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-prof
SECTIONS="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats"
for ctx in 32k 1m; do
  [ $(left) -gt 30 ] || break
  case $ctx in
    32k) k='regex:t512_i4_cluster_(chunk|union)'; extra="--section SourceCounters";;
    1m) k='regex:t512_i4_scan_peaks_cluster_(chunk|union)'; extra="";;
  esac
  timeout -k 10 $(lim 85) ncu --clock-control none --kernel-name "$k" --launch-skip 2 --launch-count 2 $SECTIONS $extra \
    $B/autotune --model qwen3-8b --only select/hbm/$ctx --opt-in select-cluster --reps 5 --out $L/tune-$ctx \
    > $L/ncu-$ctx.txt 2>&1
  el "ncu $ctx rc=$?"
done
cd $L && { cat nvidia-smi.txt timeline.txt; for f in ncu-*.txt; do echo "== $f"; grep -E "^  [a-z_]+.*\(|Duration|Elapsed Cycles|Registers|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Stall|Block Limit|Cluster|Issue Slots|One or More|No Eligible|Compute \(SM\)|Memory Throughput" $f | head -80; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/cluster-profile.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
