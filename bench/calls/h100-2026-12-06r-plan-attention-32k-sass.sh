#!/usr/bin/env bash
# The other two ~10 us stages of the HBM step at 32k (ncu in the step, twelfth session: the
# plan 9.6 us on 8 multiprocessors, attention 10.6): ncu's full set with the SASS and its stall
# samples, line by line, on one launch of each in the HBM 32k step under the committed H100
# record, read here from the CSVs (no ncu on the development machine). With
# h100-2026-12-06q-select-32k-sass.sh, the three kernels that bound HBM 32k.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=150 bash bench/calls/h100-2026-12-06r-plan-attention-32k-sass.sh
set -u
DEFAULT_BUDGET=150 . bench/calls/budget.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-sass
for k in fathom_plan_ fathom_attention_; do
  [ $(left) -gt 30 ] || break
  timeout -k 10 $(lim 60) ncu --set full --import-source yes -k regex:$k --launch-skip 36 --launch-count 1 \
    -o $L/ncu-$k $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 2 \
    --slots 1 --no-standing --contexts 32k --out $L/sb-$k > $L/ncu-$k.txt 2>&1
  el "ncu $k rc=$?"
  ncu --import $L/ncu-$k.ncu-rep --page details > $L/ncu-$k-details.txt 2>&1
  ncu --import $L/ncu-$k.ncu-rep --page source --csv --print-source sass > $L/ncu-$k-sass.csv 2>&1
  rm -f $L/ncu-$k.ncu-rep
done
cd $L && { cat nvidia-smi.txt timeline.txt; for f in ncu-*-details.txt; do echo "== $f"; grep -E "fathom_|Duration|Warp Cycles Per Issued|Issue Slots Busy|Achieved Occupancy|Registers Per|Block Size|Grid Size" $f | head -10; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/plan-attention-32k-sass.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
