#!/usr/bin/env bash
# SUPERSEDED (2026-12-05, seventh session): its cells ran on an H100 as bench/calls/h100-2026-12-05c-hf-eval-k256.sh
# (README, evaluation section); kept as the record of what was planned.
# Issue #16's last unmeasured cells: k = 256 (twice paper_k) at 2k on every task, then 8k's
# multi-key and multi-query as far as the budget goes (8k's single needle and multi-value at
# k = 256 ran on 2026-12-03: fathom(46) equals dense there). The D = 64 core methods, 24
# samples a cell. Does a larger k close the gap to dense at 2k for every method, `oracle`
# first? From the repository root, after `scripts/build-wheel.sh` and the first two staging
# calls of `../shared/tools/stage-model --part-mib 44` (this call is the third; carry
# [".gpu/wheels", ".stage/part3"]):
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/h200-next-eval-k256.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
C=${C:-unknown}
. bench/calls/model-site.sh
cd /tmp
T=$(lim 300); timeout -k 10 $T $EVAL --methods "$METHODS" --contexts 2k --k 256 --time-budget $(( T - 30 )) --out-dir $L/ruler2k-k256 > $L/eval-2k-k256.txt 2>&1; el eval 2k k256 rc=$?
T=$(( $(left) - 15 ))
if [ "$T" -gt 75 ]; then
  timeout -k 10 $T $EVAL --methods "$METHODS" --contexts 8k --k 256 --tasks niah_multikey,niah_multiquery --time-budget $(( T - 30 )) --out-dir $L/ruler8k-k256 > $L/eval-8k-k256.txt 2>&1; el eval 8k k256 rc=$?
fi
{ cat $L/timeline.txt; for f in $L/eval-*.txt; do echo "== $f"; tail -15 $f; done; } > $OUT/summary.txt
tar czf $OUT/eval.tgz -C $OUT logs
cat $OUT/summary.txt
