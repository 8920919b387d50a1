#!/usr/bin/env bash
# 2026-12-03, the session's last device call (issue #16): the task scores at k = 256 instead of
# paper_k = 128, 4k, every task, the D = 64 core methods, 24 samples a cell: does the exact
# top-k (`oracle`), and fathom with it, come within the issue's 2 points of dense once k is
# larger? From the repository root, after `scripts/build-wheel.sh` and the first two staging
# calls of `../shared/tools/stage-model --part-mib 44` (this call is the third; carry
# [".gpu/wheels", ".stage/part3"]):
#   C=$(git rev-parse --short HEAD) BUDGET=440 bash bench/calls/h200-2026-12-03-eval-k256.sh
set -u
DEFAULT_BUDGET=440 . bench/calls/budget.sh
C=${C:-unknown}
. bench/calls/model-site.sh
cd /tmp
timeout -k 10 $(( $(left) - 10 )) python3 -m fathom.eval --model-dir $M --gguf smollm2.gguf --no-speed --no-teacher-forced --samples 24 --commit $C \
  --methods "dense,oracle,fathom(24),fathom(46),sparq(16),pariskv(100)" --k 256 --contexts 4k --host-methods "" \
  --time-budget $(( $(left) - 40 )) --out-dir $L/ruler4k-k256 > $L/eval-4k-k256.txt 2>&1; el eval 4k k256 rc=$?
{ cat $L/timeline.txt; tail -20 $L/eval-4k-k256.txt; } > $OUT/summary.txt
tar czf $OUT/eval.tgz -C $OUT logs
cat $OUT/summary.txt
