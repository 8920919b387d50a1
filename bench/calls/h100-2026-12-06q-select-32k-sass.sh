#!/usr/bin/env bash
# What the 32k select's `_chunk` spends its 19 us on (the largest stage of the HBM step at 32k:
# ncu in the step, twelfth session): ncu's full set with the SASS and its stall samples, line
# by line, on one `_chunk` launch of the HBM 32k step under the committed H100 record (the
# one-block peaks select, 1,024 threads), read here from the CSV (no ncu on the development
# machine). The first part of h100-next-select-32k-profile.sh, which needs 300 s.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=150 bash bench/calls/h100-2026-12-06q-select-32k-sass.sh
set -u
DEFAULT_BUDGET=150 . bench/calls/budget.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-sass
timeout -k 10 $(lim 100) ncu --set full --import-source yes -k regex:select.*_chunk --launch-skip 36 --launch-count 1 \
  -o $L/ncu-chunk $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 2 \
  --slots 1 --no-standing --contexts 32k --out $L/sb > $L/ncu-chunk.txt 2>&1
el "ncu rc=$?"
ncu --import $L/ncu-chunk.ncu-rep --page details > $L/ncu-chunk-details.txt 2>&1
ncu --import $L/ncu-chunk.ncu-rep --page source --csv --print-source sass > $L/ncu-chunk-sass.csv 2>&1
el exported
rm -f $L/ncu-chunk.ncu-rep
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "select.*chunk|Duration|Warp Cycles Per Issued|Issue Slots Busy|Achieved Occupancy|Registers Per|Block Size|Grid Size" ncu-chunk-details.txt | head -14; } > $OUT/summary.txt 2>&1
tar czf $OUT/select-32k-sass.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
