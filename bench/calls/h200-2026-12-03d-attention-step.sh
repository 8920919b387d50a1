#!/usr/bin/env bash
# 2026-12-03, fourth session (issue #15 items 3 and 7): the HBM step under the committed record
# (one attention block a query head) and under the record the previous call re-made with
# split attention (/tmp/record-new), in one call: step-bench fathom(48) and sparq(32), qwen3-8b,
# batch 1, 32k and 1M, each record twice (old, new, old, new); then ncu's time per kernel of the
# HBM step at 32k under the new record. Run right after h200-2026-12-03d-attention-split.sh,
# while the machine is warm (its pack in /tmp/fg). Carry [".gpu"]:
#   C=<commit> BUDGET=400 bash bench/calls/h200-2026-12-03d-attention-step.sh
set -u
DEFAULT_BUDGET=400 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
[ -x /tmp/fg/.gpu/bin/step-bench ] && [ -f /tmp/record-new/nvidia-h200.json ] || { echo "not warm: run the split call first"; exit 2; }
B=/tmp/fg/.gpu/bin; export FATHOM_KERNEL_CACHE=/tmp/kc-record
mkdir -p $L/record-old && cp runtime/records/nvidia-h200.json $L/record-old/
sb() {  # sb LABEL RECORD_DIR
  FATHOM_TUNING_DIR=$2 timeout -k 10 $(lim 90) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing \
    --commit $C --placement hbm --contexts 32k,1m --out $L/sb-$1 > $L/step-bench-$1.txt 2>&1; el step-bench $1 rc=$?
}
sb old $L/record-old
sb new /tmp/record-new
sb old2 $L/record-old
sb new2 /tmp/record-new
FATHOM_TUNING_DIR=/tmp/record-new timeout -k 10 $(lim 45) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 2000 \
  $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing --contexts 32k --out $L/ncu-sb > $L/ncu-step-32k.csv 2> $L/ncu-step-32k.err
el ncu rc=$?
python3 bench/calls/ncu-kernel-times.py $L/ncu-step-32k.csv "HBM step 32k, $C, split attention" > $L/ncu-step-32k.txt 2>&1
cd $L && { cat timeline.txt; for t in old new old2 new2; do echo "== $t"; grep -E "^method|^fathom|^sparq" step-bench-$t.txt; done
  cat ncu-step-32k.txt; } > $OUT/summary.txt 2>&1
rm -rf $L/ncu-sb
tar czf $OUT/attention-step.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
