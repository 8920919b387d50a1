#!/usr/bin/env bash
# The second device call of the fourth session of 2026-12-02: the step with attention from the
# store's rows as the default and the union dropped where nothing reads it, checked and timed,
# and a source-level profile of the kernels that now bound the HBM step. From the repository
# root, after `scripts/pack-gpu.sh && scripts/build-wheel.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=500 bash bench/calls/h200-2026-12-02d-union-profile.sh
# A (concurrent): the GPU tests the default touches (gpu_step with its new `union: false` checks,
#   gpu_decode, gpu_pariskv_step, gpu_foreign), the Python GPU tests (the package steps without
#   the union), compute-sanitizer over the G = 4 store test.
# B (alone): step-bench HBM fathom(48)/sparq(32) at 32k and 1M; ncu per kernel at 32k and 1M;
#   ncu SourceCounters with FATHOM_JIT_LINEINFO=1 of the plan, select and attention at 32k and of
#   the scan and `_chunk` at 1M, exported per CUDA line and per SASS instruction.
set -u
. bench/calls/budget.sh
C=${C:-unknown}
export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg /tmp/py && mkdir -p /tmp/fg /tmp/py && tar xJf .gpu/pack.tar.xz -C /tmp/fg && cp -r python/tests python/bench /tmp/py/
B=/tmp/fg/.gpu/bin
python3 -m pip install -q --no-deps --no-index --no-compile --upgrade --target /tmp/site .gpu/wheels/*.whl > $L/pip.txt 2>&1; el pip rc=$?
# ---- A
ORDER="gpu_step gpu_decode gpu_pariskv_step gpu_foreign"
( cd /tmp/fg/.gpu && for t in $ORDER; do echo $t; done | xargs -P 4 -I{} bash -c 'timeout -k 10 '$(lim 200)' ./tests/{}-test --ignored --test-threads=1 > '$L'/{}.log 2>&1; echo "{} rc=$?"' > $L/rc.txt ) &
PA=$!
( cd /tmp/py && PYTHONPATH=/tmp/site FATHOM_GPU_TESTS=1 timeout -k 10 $(lim 150) python3 -m pytest -q -rA --timeout 140 tests/gpu/test_gpu.py > $L/pytest_gpu.log 2>&1; echo "pytest gpu rc=$?" >> $L/rc2.txt ) &
PP=$!
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 170) bash scripts/sanitize.sh --tests gpu_step --jobs 4 --timeout 160 'gpu_step_attention_from_the_store_g4' > $L/sanitize.txt 2>&1; echo "sanitize rc=$?" >> $L/rc2.txt )
wait $PA $PP; el A done: $(cat $L/rc.txt $L/rc2.txt | tr '\n' ' ')
# ---- B
timeout -k 10 $(lim 110) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb-hbm > $L/step-bench-hbm.txt 2>&1
el step-bench hbm rc=$?
SB="--model qwen3-8b --methods fathom(48) --batch 1 --placement hbm --steps 3 --slots 1 --no-standing"
for ctx in 32k 1m; do
  timeout -k 10 $(lim 70) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 2000 \
    $B/step-bench $SB --contexts $ctx --out $L/ncu-sb-$ctx > $L/ncu-step-$ctx.csv 2> $L/ncu-step-$ctx.err
  el ncu step $ctx rc=$?
done
export FATHOM_JIT_LINEINFO=1 FATHOM_KERNEL_CACHE=/tmp/kc-lineinfo
for spec in "32k plan|onepass|attention 40 10" "1m scan|onepass_chunk 20 4"; do
  set -- $spec
  [ $(left) -gt 40 ] || break
  timeout -k 5 $(lim 90) ncu --clock-control none --import-source yes --section SourceCounters --section WarpStateStats -k regex:"$2" --launch-skip $3 --launch-count $4 -o $L/src-$1 \
    $B/step-bench $SB --contexts $1 --out $L/sbn-$1 > $L/ncu-src-$1.txt 2>&1
  el ncu source $1 rc=$?
  for view in cuda sass; do
    timeout -k 5 30 ncu --import $L/src-$1.ncu-rep --page source --print-source $view --csv > $L/src-$1-$view.csv 2> $L/src-$1-$view.err
    el export $1 $view rc=$?
  done
  timeout -k 5 20 ncu --import $L/src-$1.ncu-rep --page details --csv > $L/src-$1-details.csv 2>&1
done
unset FATHOM_JIT_LINEINFO FATHOM_KERNEL_CACHE
cd $L && { cat timeline.txt; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done; tail -3 pytest_gpu.log; tail -6 sanitize/summary.txt 2>/dev/null; grep -E "^(fathom|sparq)" step-bench-hbm.txt; ls -la *.csv; } > $OUT/summary.txt 2>&1
tar czf $OUT/c.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
