#!/usr/bin/env bash
# The third call of 2026-12-05's seventh session: the staged SmolLM2 (D = 64, G = 3; no record
# entry, so its steps run the no-record defaults: the scan-peaks select, the ParisKV query a
# block a subspace) through the Hugging Face GPU tests, then issue #16's k = 256 cells at 2k
# (every task), then 8k's multi-key and multi-query as far as the budget goes. From the
# repository root, after `scripts/build-wheel.sh` and the first two staging calls of
# `../shared/tools/stage-model --part-mib 33` (parts of 44 MiB no longer fit beside the 26 MiB working tree; this call is the third; carry
# [".gpu/wheels", ".stage/part3"]):
#   C=$(git rev-parse --short HEAD) BUDGET=470 bash bench/calls/h100-2026-12-05c-hf-eval-k256.sh
set -u
DEFAULT_BUDGET=470 . bench/calls/budget.sh
C=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
. bench/calls/model-site.sh
rm -rf /tmp/py && mkdir -p /tmp/py && cp -r python/tests /tmp/py/
( cd /tmp/py && FATHOM_GPU_TESTS=1 timeout -k 10 $(lim 150) python3 -m pytest -q -rA --timeout 140 tests/gpu/hf > $L/pytest_hf.log 2>&1 ); el pytest hf rc=$?
cd /tmp
T=$(( $(left) - 20 )); [ "$T" -gt 240 ] && T=240
timeout -k 10 $T $EVAL --methods "$METHODS" --contexts 2k --k 256 --time-budget $(( T - 30 )) --out-dir $L/ruler2k-k256 > $L/eval-2k-k256.txt 2>&1; el eval 2k k256 rc=$?
T=$(( $(left) - 15 ))
if [ "$T" -gt 75 ]; then
  timeout -k 10 $T $EVAL --methods "$METHODS" --contexts 8k --k 256 --tasks niah_multikey,niah_multiquery --time-budget $(( T - 30 )) --out-dir $L/ruler8k-k256 > $L/eval-8k-k256.txt 2>&1; el eval 8k k256 rc=$?
fi
{ cat $L/nvidia-smi.txt $L/timeline.txt; tail -12 $L/pytest_hf.log; for f in $L/eval-*.txt; do echo "== $f"; tail -15 $f; done; } > $OUT/summary.txt
tar czf $OUT/eval.tgz -C $OUT logs
cat $OUT/summary.txt
