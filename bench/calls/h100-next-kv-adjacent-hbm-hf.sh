#!/usr/bin/env bash
# After h100-next-kv-adjacent.sh, on the same warm machine kind: the HBM step with K/V rows
# side by side (the new default) and apart, in one call (qwen3-8b fathom(48) and sparq(32), 32k
# and 1M; the layouts timed the same on the H200 on 2026-12-02, so the default must not cost
# the HBM placement anything), then the Hugging Face GPU tests on SmolLM2 (their stores take
# the default rows). From the repository root, after `scripts/pack-gpu.sh &&
# scripts/build-wheel.sh` and the first two calls of `../shared/tools/stage-model --part-mib 33`;
# carry [".gpu", ".stage/part3"]:
#   C=$(git rev-parse --short HEAD) BUDGET=540 bash bench/calls/h100-next-kv-adjacent-hbm-hf.sh
set -u
DEFAULT_BUDGET=540 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-sb FATHOM_TUNING_DIR=$R/runtime/records
both_rows hbm 32k,1m
if [ -d .stage/part3 ]; then
  . bench/calls/model-site.sh
  rm -rf /tmp/py && mkdir -p /tmp/py && cp -r python/tests /tmp/py/
  ( cd /tmp/py && FATHOM_GPU_TESTS=1 FATHOM_SMOLLM2_DIR=$M timeout -k 10 $(lim 300) python3 -m pytest -q -rA --timeout 280 tests/gpu/hf > $L/pytest_hf.log 2>&1; echo "pytest hf rc=$?" >> $L/rc2.txt )
  el hf done
fi
cd $L && { cat nvidia-smi.txt timeline.txt rc2.txt 2>/dev/null
  for rows in adjacent separate; do echo "== hbm $rows"; grep -E "^method|^fathom|^sparq" step-bench-hbm-$rows.txt; done
  grep -E "passed|failed|PASSED|FAILED|Error" pytest_hf.log 2>/dev/null | tail -12; } > $OUT/summary.txt 2>&1
tar czf $OUT/kv-adjacent-hbm-hf.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
