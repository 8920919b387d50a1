#!/usr/bin/env bash
# The tensor-parallel decode benchmark of issue #17 (python/bench/tp_decode.py): one process per
# GPU under torch.distributed (NCCL, NVLink multicast off), each rank stepping its heads of every
# layer through the Python package and all-reducing the layer's output; qwen3-8b and
# llama-3.1-70b, 128k and 1M, host and HBM, fathom(48). From the repository root, after
# `scripts/build-wheel.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=300 bash bench/calls/h200-tp-decode.sh
# One H200: P=1 (the default). On a host of several GPUs the same script with P=2 or P=4, and
# BASELINE naming the P=1 JSON (e.g. bench/results/tp-h200-...-p1.json) for the efficiency:
#   C=... P=4 BASELINE="bench/results/tp-h200-<date>-<commit>-qwen3-8b-p1.json ..." bash bench/calls/h200-tp-decode.sh
# Results (one JSON per model, rewritten after every cell) in $OUT/results, the report
# (tp_report.py: table, efficiency against P=1, the host-1M target, SVG) in $OUT; logs in c.tgz.
# Expected at P=1 on an H200: ~60 ms a step for qwen3-8b host 1M (36 layers) and ~130 ms for
# llama-3.1-70b (80 layers, G = 8); each program ~1 min, mostly making 1M-token stores.
set -u
DEFAULT_BUDGET=300 . bench/calls/budget.sh
C=${C:-unknown}; P=${P:-1}; STEPS=${STEPS:-30}
export FATHOM_COMMIT=$C NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
nvidia-smi topo -m > $L/topo.txt 2>&1
python3 -m pip install -q --no-deps --no-index --no-compile --upgrade --target /tmp/site .gpu/wheels/*.whl > $L/pip.txt 2>&1; el pip rc=$?
export PYTHONPATH=/tmp/site
if command -v torchrun > /dev/null 2>&1; then TR=torchrun; else TR="python3 -m torch.distributed.run"; fi
python3 -c "import torch, fathom; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.device_count(), fathom.__version__, fathom.unavailable_reason())" > $L/versions.txt 2>&1; el versions rc=$? "$(cat $L/versions.txt | tail -1)"
RES=$OUT/results; mkdir -p $RES
for m in qwen3-8b llama-3.1-70b; do
  timeout -k 10 $(lim 150) $TR --standalone --nproc_per_node $P python/bench/tp_decode.py --model $m --contexts 131072,1048576 --placements host,hbm --steps $STEPS --out $RES ${BASELINE:+--baseline $BASELINE} > $L/tp-$m-p$P.txt 2>&1
  el tp $m P=$P rc=$?
done
python3 python/bench/tp_report.py $RES/tp-*.json ${BASELINE:-} --md $OUT/tp-report-p$P.md --svg $OUT/tp-report-p$P.svg > $L/report.txt 2>&1; el report rc=$?
cd $L && { cat timeline.txt; cat versions.txt; grep -h "^\[tp\]" tp-*.txt; cat $OUT/tp-report-p$P.md; for f in tp-*.txt; do grep -q "Traceback\|Error" $f && { echo "== $f"; tail -20 $f; }; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/c.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
