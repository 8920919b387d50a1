#!/usr/bin/env bash
# (Thirteenth session: its ncu parts on the select's `_chunk`, the plan and attention at 32k
# ran as h100-2026-12-06q-select-32k-sass.sh and h100-2026-12-06r-plan-attention-32k-sass.sh;
# what is left here is the host 1M kernel times and pariskv(100) from host memory.)
# What the one-block select's `_chunk` spends its 19 us on at HBM 32k (the largest stage of
# the step there: ncu at e52a32f, H100, bench/NOTES.md "Seventh session"): ncu's full set
# (source counters with SASS stall samples, warp states, memory) on one `_chunk` launch of the
# step under the committed record, and the same for the plan (10.6 us, issue-bound on 8
# multiprocessors) and attention (10.7); then ncu's time per kernel of the host 1M step, and
# pariskv(100)'s host 1M step against its floor. Read
# the reports with
#   ncu --import FILE.ncu-rep --page source --csv --print-source sass
# and the host step's CSV with `python3 bench/calls/ncu-kernel-times.py FILE.csv`. From the
# repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=300 bash bench/calls/h100-next-select-32k-profile.sh
set -u
DEFAULT_BUDGET=300 . bench/calls/budget.sh
C=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
for k in peaks_head_chunk fathom_plan_ fathom_attention_; do
  [ $(left) -gt 30 ] || break
  timeout -k 10 $(lim 45) ncu --set full --import-source yes -k regex:$k --launch-skip 36 --launch-count 1 \
    -o $L/ncu-$k $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 2 \
    --slots 1 --no-standing --contexts 32k --out $L/sb-$k > $L/ncu-$k.txt 2>&1
  el ncu $k rc=$?
  ncu --import $L/ncu-$k.ncu-rep --page details > $L/ncu-$k-details.txt 2>&1
  # The SASS with its stall samples, line by line (no ncu on the development machine to read the report).
  ncu --import $L/ncu-$k.ncu-rep --page source --csv --print-source sass > $L/ncu-$k-sass.csv 2>&1
done
# Where the host 1M step's 305 us a layer over its link floor go (1.27x on the H100): each
# kernel's time in the step (plan, scan from host, select, fetch, attention, oracle).
if [ $(left) -gt 60 ]; then
  timeout -k 10 $(lim 90) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 1500 \
    $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement host --steps 3 --slots 1 --no-standing \
    --contexts 1m --out $L/ncu-sb-host-1m > $L/ncu-step-host-1m.csv 2> $L/ncu-step-host-1m.err
  el ncu host 1m rc=$?
fi
# pariskv(100) from host memory at 1M against its own link floor (issue #15 asks within 2x;
# never measured with the decode tables and the split query).
if [ $(left) -gt 50 ]; then
  timeout -k 10 $(lim 60) $B/step-bench --model qwen3-8b --methods "pariskv(100)" --contexts 1m --placement host \
    --batch 1 --no-standing --slots 2 --out $L/sb-pk-host --commit $C > $L/step-bench-pk-host.txt 2>&1
  el step-bench pariskv host rc=$?
fi
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^method|^pariskv" step-bench-pk-host.txt 2>/dev/null; for f in ncu-*-details.txt; do echo "== $f"; grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|L1/TEX Hit|Achieved Occupancy|Registers Per|Block Size|Grid Size" $f | head -12; done
  python3 $R/bench/calls/ncu-kernel-times.py ncu-step-host-1m.csv 2>&1 | head -14; } > $OUT/summary.txt 2>&1
tar czf $OUT/select-profile.tgz -C $OUT logs
cat $OUT/summary.txt
