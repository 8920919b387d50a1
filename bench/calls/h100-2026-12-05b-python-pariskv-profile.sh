#!/usr/bin/env bash
# The second call of 2026-12-05's seventh session (H100 or H200): 1. the Python GPU tests with
# the wheel (SmolLM2, D = 64 G = 3, has no record entry: its steps run the no-record defaults,
# the scan-peaks select among them, never run there before); 2. gpu_pariskv_step and gpu_pariskv
# with the ParisKV query split over a block a subspace, now the default; 3. pariskv(100)'s HBM
# step at 32k and 1M under that default; 4. ncu's time per kernel of fathom(48)'s HBM step at
# 32k under the committed record of the GPU (what bounds the 42.4 us a layer the H100 took).
# From the repository root, after `scripts/pack-gpu.sh && scripts/build-wheel.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=420 bash bench/calls/h100-2026-12-05b-python-pariskv-profile.sh
set -u
DEFAULT_BUDGET=420 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
rm -rf /tmp/py /tmp/site && mkdir -p /tmp/py && cp -r python/tests python/bench /tmp/py/
python3 -m pip install -q --no-deps --no-index --no-compile --upgrade --target /tmp/site .gpu/wheels/*.whl > $L/pip.txt 2>&1; el pip rc=$?
( cd /tmp/py && PYTHONPATH=/tmp/site FATHOM_GPU_TESTS=1 timeout -k 10 $(lim 150) python3 -m pytest -q -rA --timeout 120 tests/gpu > $L/pytest_gpu.log 2>&1 ); el pytest gpu rc=$?
( cd $TESTS/.. && for t in gpu_pariskv_step gpu_pariskv; do timeout -k 10 $(lim 100) ./tests/$t-test --ignored --test-threads=1 > $L/$t.log 2>&1; echo "$t rc=$?"; done > $L/rc.txt ); el tests: $(tr '\n' ' ' < $L/rc.txt)
timeout -k 10 $(lim 60) $B/step-bench --model qwen3-8b --methods "pariskv(100)" --contexts 32k,1m \
  --placement hbm --batch 1 --no-standing --slots 2 --out $L/sb-pk --commit $C > $L/step-bench-pk.txt 2>&1
el step-bench pariskv rc=$?
timeout -k 10 $(lim 80) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 2000 \
  $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing \
  --contexts 32k --out $L/ncu-sb-32k > $L/ncu-step-32k.csv 2> $L/ncu-step-32k.err
el ncu rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; tail -25 pytest_gpu.log; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done
  grep -E "^method|^pariskv" step-bench-pk.txt; tail -3 ncu-step-32k.err; } > $OUT/summary.txt 2>&1
tar czf $OUT/c.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
