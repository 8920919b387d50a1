#!/usr/bin/env bash
# The last device call of the third session of 2026-12-02 (the session's last ~4 minutes of
# device time): the evaluation's cells that the earlier call left, 8k's niah_multiquery, vt and
# fwe, then 2k, for the D = 64 core methods, 24 samples a cell. From the repository root, after
# `scripts/build-wheel.sh` and the two staging calls of `../shared/tools/stage-model --part-mib 44`;
# carry [".gpu", ".stage/part3"]:
#   C=$(git rev-parse --short HEAD) BUDGET=220 bash bench/calls/h200-2026-12-02c-eval-rest.sh
set -u
DEFAULT_BUDGET=220 . bench/calls/budget.sh
C=${C:-unknown}
. bench/calls/model-site.sh
EV="python3 -m fathom.eval --model-dir $M --gguf smollm2.gguf --no-speed --no-teacher-forced --samples 24 --commit $C --methods dense,oracle,fathom(24),fathom(46),sparq(16),pariskv(100)"
cd /tmp
timeout -k 10 $(( $(left) / 2 + 10 )) $EV --contexts 8k --tasks niah_multiquery,vt,fwe --host-methods "fathom(46)" --time-budget $(( $(left) / 2 - 10 )) --out-dir $L/ruler8k > $L/eval-8k.txt 2>&1; el eval 8k rc=$?
timeout -k 10 $(( $(left) - 5 )) $EV --contexts 2k --host-methods "" --time-budget $(( $(left) - 25 )) --out-dir $L/ruler2k > $L/eval-2k.txt 2>&1; el eval 2k rc=$?
{ cat $L/timeline.txt; tail -3 $L/eval-8k.txt $L/eval-2k.txt; } > $OUT/summary.txt
tar czf $OUT/c.tgz -C $OUT logs
cat $OUT/summary.txt
