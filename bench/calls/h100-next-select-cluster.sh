#!/usr/bin/env bash
# Issue #15 (HBM 32k, 42.4 us a layer on the H100 against 30 asked; HBM 1M 184 against 100):
# the one-block select's `_chunk` is 19-22 us of 32k, ~62k warp instructions a block on 32 of
# 132 multiprocessors, and at 1M the scan-peaks select is `_chunk` 31.6 + `_final` 10.1 us
# (ncu, eighth session). `algorithm: cluster` and `scan_peaks_cluster` (opt-in, `autotune
# --opt-in select-cluster`; exact on the CPU emulator with every mutant caught, `cpu_select
# cluster`, not yet run on a GPU) give each query head a thread-block cluster of 8 blocks, each
# taking 1/8 of the row: the plain select's three radix passes with the histograms summed
# through distributed shared memory after a cluster barrier a pass, then each block writes its
# selected tokens from the counts of the blocks before it. The scan-peaks form runs the passes
# over the peaks of the row's halves first (for the k-th largest peak K'), then only over the
# tokens of the halves whose peak reaches K' (~k halves of the row). Predicted: 32k ~5-7 us
# against 19-22 (either); 1M ~8-12 us against ~42 (scan_peaks_cluster; `cluster` reads the row
# four times and should lose there).
# This call: (1) gpu_select with only the two cluster selects, the step's cluster tests,
# compute-sanitizer memcheck and racecheck on the short and boundary lengths;
# (2) autotune's select (qwen3-8b, HBM) with the opt-in, every variant timed in one run;
# (3) step-bench fathom(48) and sparq(32) in HBM at 32k and 1M under the committed record and
# under it with the opt-in run's entries merged; (4) ncu's time of each select kernel of the 32k
# step under the merged record, if time is left after (5).
# If (1) passes and (2)-(3) show them faster: add `Cluster` and `ScanPeaksCluster` to
# SELECT_ALGORITHMS, move `select-cluster` to OptIn::GRADUATED, re-make the record.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=500 bash bench/calls/h100-next-select-cluster.sh
set -u
DEFAULT_BUDGET=500 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-cluster
select_checks cluster,scan_peaks_cluster cluster
timeout -k 10 $(lim 90) $B/autotune --model qwen3-8b --only select/hbm --opt-in select-cluster --timings \
  --out $L/tune-cluster > $L/autotune-cluster.txt 2>&1
el autotune select opt-in rc=$?
merged_record $L/tune-cluster $L/merged
if [ $(left) -gt 60 ]; then
  sb_hbm committed 32k,1m
  sb_hbm cluster 32k,1m FATHOM_TUNING_DIR=$L/merged
fi
# (5) the host step at 1M under the merged record (K/V rows side by side, the default), against
# the host 1M cell of the seventh session (51.35 ms, 1.27x its floor, separate rows).
if [ $(left) -gt 100 ]; then
  FATHOM_TUNING_DIR=$L/merged timeout -k 10 $(lim 90) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" \
    --batch 1 --no-standing --commit $C --placement host --contexts 1m --out $L/sb-host-cluster \
    > $L/step-bench-host-cluster.txt 2>&1
  el "step-bench host 1m merged rc=$?"
fi
if [ $(left) -gt 40 ]; then
  FATHOM_TUNING_DIR=$L/merged timeout -k 10 $(lim 40) ncu --clock-control none --csv \
    --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
    -k regex:'select' --launch-count 400 $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 \
    --placement hbm --steps 3 --slots 1 --no-standing --contexts 32k --out $L/ncu-sb > $L/ncu-select.csv 2> $L/ncu-select.err
  el ncu select rc=$?
  python3 $R/bench/calls/ncu-kernel-times.py $L/ncu-select.csv "select kernels, fathom(48) HBM 32k step, merged record, $C" \
    > $L/ncu-select.txt 2>&1
fi
cd $L && { cat nvidia-smi.txt timeline.txt
  grep -hE "^test |test result|panicked|not run" gpu_select.log gpu_step.log | head -20
  cat sanitize/summary.txt 2>/dev/null; tail -2 sanitize.txt
  echo "== autotune (select, opt-in)"; grep -E "^select|disqualified|cluster|peaks" autotune-cluster.txt | head -60; tail -6 autotune-cluster.txt
  for f in step-bench-*.txt; do echo "== $f"; grep -hE "^method|^fathom|^sparq|record|link floor \(issue" $f; done
  echo "== ncu"; head -12 ncu-select.txt 2>/dev/null; } > $OUT/summary.txt 2>&1
tar czf $OUT/select-cluster.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
