#!/usr/bin/env bash
# 2026-12-03, second session (issue #16): the task cells still unrun at paper_k, the D = 64 core
# methods, 24 samples a cell: 8k fwe (8k's vt and the NIAH tasks ran on 2026-12-02) and 2k vt
# and fwe (2k's NIAH tasks ran then); then, as far as the budget goes, 8k at k = 256 on the
# single needle and multi-value (does fathom(46) come within the 1 point at 8k once k
# is larger, as fathom(24) did at 4k?). From the repository root, after
# `scripts/build-wheel.sh` and the first two staging calls of
# `../shared/tools/stage-model --part-mib 44` (this call is the third; carry
# [".gpu/wheels", ".stage/part3"]):
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/h200-2026-12-03-eval-8k-2k.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
C=${C:-unknown}
. bench/calls/model-site.sh
cd /tmp
EVAL="python3 -m fathom.eval --model-dir $M --gguf smollm2.gguf --no-speed --no-teacher-forced --samples 24 --commit $C --host-methods="
METHODS="dense,oracle,fathom(24),fathom(46),sparq(16),pariskv(100)"
T=$(lim 330); timeout -k 10 $T $EVAL --methods "$METHODS" --contexts 8k --tasks fwe --time-budget $(( T - 30 )) --out-dir $L/ruler8k-fwe > $L/eval-8k-fwe.txt 2>&1; el eval 8k fwe rc=$?
T=$(lim 150); timeout -k 10 $T $EVAL --methods "$METHODS" --contexts 2k --tasks vt,fwe --time-budget $(( T - 20 )) --out-dir $L/ruler2k-vt-fwe > $L/eval-2k-vt-fwe.txt 2>&1; el eval 2k vt fwe rc=$?
T=$(( $(left) - 15 ))
if [ "$T" -gt 75 ]; then
  timeout -k 10 $T $EVAL --methods "$METHODS" --contexts 8k --k 256 --tasks niah_single,niah_multivalue --time-budget $(( T - 30 )) --out-dir $L/ruler8k-k256 > $L/eval-8k-k256.txt 2>&1; el eval 8k k256 rc=$?
fi
{ cat $L/timeline.txt; for f in $L/eval-*.txt; do echo "== $f"; tail -15 $f; done; } > $OUT/summary.txt
tar czf $OUT/eval.tgz -C $OUT logs
cat $OUT/summary.txt
