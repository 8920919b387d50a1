#!/usr/bin/env bash
# The last device call of 2026-12-02 (H200, 570 s), kept as the pattern for the next session:
# on the device tool, from the repository root, after `scripts/pack-gpu.sh && scripts/build-wheel.sh`
# and two staging calls of `../shared/tools/stage-model --part-mib 44` (parts 1 and 2, each a
# `cp .stage/partN/* /tmp/fathom-models/`), carry [".gpu", ".stage/part3"] and run
#   C=$(git rev-parse --short HEAD) BUDGET=570 PHASE_A=240 SB2_ARGS='...' AT_ARGS='...' bash bench/calls/h200-2026-12-02-final.sh
# It joins the model, runs every GPU test (six binaries at a time; gpu_faults and the HF memory
# test alone), the Python and HF GPU tests, the evaluation, the Python-call overhead, then
# step-bench and autotune with what time is left; one tarball and a summary come back in $OUT.
# Call 4 (the last; right after the two model-staging calls on the same warm machine).
# A (concurrent): every Rust GPU test but gpu_faults, 6 binaries at a time, longest first; the
#   HF GPU tests but the memory one; the evaluation (no speed rows: timing under load is wrong).
# B (alone): gpu_faults, the HF memory test, the Python GPU tests, the Python-call overhead.
# C (what time is left): step-bench at 1M, both placements; autotune of opt-ins.
set -u
R=$PWD; L=$OUT/logs; mkdir -p $L
T0=$(date +%s); BUDGET=${BUDGET:-560}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local a=$1 b=$(left); [ $b -lt $a ] && a=$b; [ $a -lt 5 ] && a=5; echo $a; }
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
M=/tmp/fathom-models; C=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg /tmp/py && mkdir -p /tmp/fg /tmp/py && tar xJf .gpu/pack.tar.xz -C /tmp/fg && cp -r python/tests python/bench /tmp/py/
python3 -m pip install -q --no-deps --no-index --no-compile --upgrade --target /tmp/site .gpu/wheels/*.whl > $L/pip.txt 2>&1; el pip rc=$?
if [ -d .stage/part3 ]; then mkdir -p $M && cp .stage/part3/* $M/ && cat $M/smollm2.gguf.[0-9][0-9] > $M/smollm2.gguf && echo 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  /tmp/fathom-models/smollm2.gguf' | sha256sum -c && python3 -m pip install -q --no-index --no-deps --target $M/site $M/gguf-0.19.0-py3-none-any.whl; el join rc=$?; fi
HAVE_MODEL=0; [ -f $M/smollm2.gguf ] && [ -d $M/site ] && HAVE_MODEL=1; el model=$HAVE_MODEL
export PYTHONPATH=/tmp/site:$M/site PYTHONUNBUFFERED=1
# ---- A
ORDER="gpu_select gpu_pariskv gpu_decode gpu_scan gpu_plan gpu_encode gpu_store gpu_step gpu_pariskv_step gpu_landmark gpu_jit gpu_oracle gpu_attention gpu_fetch gpu_foreign gpu_ceilings gpu_smoke gpu_tuning"
ALL=$(ls /tmp/fg/.gpu/tests | sed 's/-test$//' | grep -v '^gpu_faults$')
LIST=$( { for t in $ORDER; do echo "$ALL" | grep -qx $t && echo $t; done; echo "$ALL" | grep -vxF -f <(echo $ORDER | tr ' ' '\n'); } )
( cd /tmp/fg/.gpu && echo "$LIST" | xargs -P 6 -I{} bash -c 'timeout -k 10 '$(lim 300)' ./tests/{}-test --ignored --test-threads=1 > '$L'/{}.log 2>&1; echo "{} rc=$?"' > $L/rc.txt ) &
PA=$!
if [ $HAVE_MODEL = 1 ]; then
  ( cd /tmp/py && FATHOM_GPU_TESTS=1 FATHOM_SMOLLM2_DIR=$M timeout -k 10 $(lim 290) python3 -m pytest -q -rA --timeout 250 tests/gpu/hf -k "not 2000_host" > $L/pytest_hf.log 2>&1; echo "pytest hf rc=$?" >> $L/rc2.txt ) &
  PB=$!
  ( cd /tmp && timeout -k 10 $(lim 120) python3 -m fathom.eval --model-dir $M --gguf smollm2.gguf --contexts 4k --samples 8 --tasks "" --methods "dense,fathom(24),fathom(46),sparq(16),double_sparsity(16),pariskv(100)" --host-methods "fathom(24)" --no-speed --commit $C --out-dir $L/tf > $L/eval_tf.txt 2>&1; echo "eval tf rc=$?" >> $L/rc2.txt
    timeout -k 10 $(lim 290) python3 -m fathom.eval --model-dir $M --gguf smollm2.gguf --contexts 4k --samples ${EV_SAMPLES:-24} --methods "${EV_METHODS:-dense,oracle,fathom(24),fathom(32),fathom(46),sparq(8),sparq(16),double_sparsity(16),loki(16),pariskv(100)}" --host-methods "fathom(24),fathom(46)" --no-speed --no-teacher-forced --time-budget $(( ${PHASE_A:-250} - ($(date +%s) - T0) )) --commit $C --out-dir $L/ruler > $L/eval.txt 2>&1; echo "eval rc=$?" >> $L/rc2.txt ) &
  PC=$!
  wait $PB $PC
fi
wait $PA; el A done; cat $L/rc.txt $L/rc2.txt 2>/dev/null | tr '\n' ' '; echo
# ---- B
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 150) ./tests/gpu_faults-test --ignored --test-threads=1 > $L/gpu_faults.log 2>&1; echo "gpu_faults rc=$?" >> $L/rc.txt )
el faults done
if [ $HAVE_MODEL = 1 ]; then
  ( cd /tmp/py && FATHOM_GPU_TESTS=1 FATHOM_SMOLLM2_DIR=$M timeout -k 10 $(lim 170) python3 -m pytest -q -rA --timeout 160 tests/gpu/hf -k "2000_host" > $L/pytest_hf_memory.log 2>&1; echo "pytest hf memory rc=$?" >> $L/rc2.txt )
  el hf memory done
fi
( cd /tmp/py && FATHOM_GPU_TESTS=1 timeout -k 10 $(lim 120) python3 -m pytest -q -rA --timeout 100 tests/gpu/test_gpu.py > $L/pytest_gpu.log 2>&1; echo "pytest gpu rc=$?" >> $L/rc2.txt )
( cd /tmp/py && timeout -k 10 $(lim 90) python3 bench/step_overhead.py --step-bench $R/bench/results/step-h200-2026-12-02-5163c6a-fathom48.json --out $L/overhead.json > $L/overhead.txt 2>&1; echo "overhead rc=$?" >> $L/rc2.txt )
el B done
# ---- C
if [ $(left) -gt 70 ]; then
  timeout -k 10 $(lim 400) /tmp/fg/.gpu/bin/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 1m --batch 1 --no-standing --out $L/sb --commit $C > $L/step-bench.txt 2>&1; echo "step-bench rc=$?" >> $L/rc2.txt
  el C step-bench done
fi
if [ -n "${SB2_ARGS:-}" ] && [ $(left) -gt 50 ]; then
  timeout -k 10 $(lim 300) /tmp/fg/.gpu/bin/step-bench --model qwen3-8b $SB2_ARGS --batch 1 --no-standing --out $L/sb2 --commit $C > $L/step-bench2.txt 2>&1; echo "step-bench2 rc=$?" >> $L/rc2.txt
  el C step-bench2 done
fi
if [ -n "${AT_ARGS:-}" ] && [ $(left) -gt 60 ]; then
  timeout -k 10 $(lim 300) /tmp/fg/.gpu/bin/autotune --model qwen3-8b $AT_ARGS --timings --out $L/tune > $L/autotune.txt 2>&1; echo "autotune rc=$?" >> $L/rc2.txt
  el C autotune done
fi
cd $L && { cat rc.txt rc2.txt; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done; grep -E "passed|failed|PASSED|FAILED|Error" pytest_hf.log pytest_hf_memory.log pytest_gpu.log 2>/dev/null | tail -20; grep -E "part at|fathom's dense" pytest_hf.log | head; tail -4 overhead.txt; tail -25 eval.txt; tail -16 step-bench.txt; tail -8 step-bench2.txt; tail -12 eval_tf.txt; tail -14 autotune.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/c4.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
