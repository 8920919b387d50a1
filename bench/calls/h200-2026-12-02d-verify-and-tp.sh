#!/usr/bin/env bash
# The third device call of the fourth session of 2026-12-02: the union-free HBM step and the
# onepass `_chunk`'s bounds-free tiles checked and timed, and the tensor-parallel decode
# benchmark of issue #17 at P = 1. From the repository root, after `scripts/pack-gpu.sh &&
# scripts/build-wheel.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=540 bash bench/calls/h200-2026-12-02d-verify-and-tp.sh
# 1. the Python GPU tests alone (their memory-flat test reads the device's free memory, which
#    other processes move); 2. gpu_step and gpu_select side by side, compute-sanitizer over the
#    G = 4 store test (its union-free step) beside them; 3. step-bench HBM fathom(48)/sparq(32)
#    at 32k and 1M (store rows, no union), then host 1M; 4. tp_decode.py P = 1 (torchrun, NCCL):
#    qwen3-8b 128k and 1M host and HBM, llama-3.1-70b 1M host.
set -u
. bench/calls/budget.sh
C=${C:-unknown}
export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg /tmp/py && mkdir -p /tmp/fg /tmp/py && tar xJf .gpu/pack.tar.xz -C /tmp/fg && cp -r python/tests python/bench /tmp/py/
B=/tmp/fg/.gpu/bin
python3 -m pip install -q --no-deps --no-index --no-compile --upgrade --target /tmp/site .gpu/wheels/*.whl > $L/pip.txt 2>&1; el pip rc=$?
( cd /tmp/py && PYTHONPATH=/tmp/site FATHOM_GPU_TESTS=1 timeout -k 10 $(lim 100) python3 -m pytest -q -rA --timeout 90 tests/gpu/test_gpu.py > $L/pytest_gpu.log 2>&1 ); el pytest gpu rc=$?
( cd /tmp/fg/.gpu && for t in gpu_step gpu_select; do echo $t; done | xargs -P 2 -I{} bash -c 'timeout -k 10 '$(lim 170)' ./tests/{}-test --ignored --test-threads=1 > '$L'/{}.log 2>&1; echo "{} rc=$?"' > $L/rc.txt ) &
PA=$!
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 170) bash scripts/sanitize.sh --tests gpu_step --jobs 4 --timeout 160 'gpu_step_attention_from_the_store_g4' > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
wait $PA; el tests: $(cat $L/rc.txt | tr '\n' ' ')
timeout -k 10 $(lim 100) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb-hbm > $L/step-bench-hbm.txt 2>&1
el step-bench hbm rc=$?
timeout -k 10 $(lim 80) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 1m --placement host --batch 1 --no-standing --out $L/sb-host > $L/step-bench-host.txt 2>&1
el step-bench host rc=$?
export NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
if command -v torchrun > /dev/null 2>&1; then TR=torchrun; else TR="python3 -m torch.distributed.run"; fi
mkdir -p $OUT/tp
( cd /tmp/py && timeout -k 10 $(lim 110) $TR --standalone --nproc_per_node 1 bench/tp_decode.py --model qwen3-8b --contexts 131072,1048576 --placements host,hbm --steps 10 --out $OUT/tp > $L/tp-qwen3-8b.txt 2>&1 ); el tp qwen3-8b rc=$?
( cd /tmp/py && timeout -k 10 $(lim 90) $TR --standalone --nproc_per_node 1 bench/tp_decode.py --model llama-3.1-70b --contexts 1048576 --placements host --steps 5 --out $OUT/tp > $L/tp-llama.txt 2>&1 ); el tp llama rc=$?
( cd /tmp/py && python3 bench/tp_report.py $OUT/tp/tp-*.json --md $OUT/tp/tp-report-p1.md --svg $OUT/tp/tp-report-p1.svg > $L/tp-report.txt 2>&1 ); el tp report rc=$?
cd $L && { cat timeline.txt; tail -3 pytest_gpu.log; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done; tail -6 sanitize/summary.txt 2>/dev/null; grep -hE "^(fathom|sparq)" step-bench-hbm.txt step-bench-host.txt; cat $OUT/tp/tp-report-p1.md 2>/dev/null; for f in tp-*.txt; do grep -q "Traceback\|Error" $f && { echo "== $f"; tail -15 $f; }; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/c.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
