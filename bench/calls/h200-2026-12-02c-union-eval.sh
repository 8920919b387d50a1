#!/usr/bin/env bash
# The second device call of the third session of 2026-12-02: the rank-merge union and the CUBIN
# default on the GPU, the evaluation's missing cells, and the HBM step after the union. From the
# repository root, after `scripts/pack-gpu.sh && scripts/build-wheel.sh` and the two staging
# calls of `../shared/tools/stage-model --part-mib 44` (parts 1 and 2, each a
# `cp .stage/partN/* /tmp/fathom-models/`), carry [".gpu", ".stage/part3"]:
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/h200-2026-12-02c-union-eval.sh
# A (concurrent, ~330 s): every Rust GPU test but gpu_faults and gpu_pariskv (both unchanged,
#   gpu_pariskv passed whole at bef9816), five binaries at a time, with the kernels loaded as
#   CUBIN (the new default); the evaluation (no speed rows: timing under load is wrong): 4k's
#   other three tasks at 24 samples, teacher-forced at k = 256, then 8k at 24 samples.
# B (alone): ncu per kernel of the HBM step at 32k and 1M (the union's new duration), then
#   step-bench HBM fathom(48)/sparq(32) at 32k and 1M.
set -u
. bench/calls/budget.sh
M=/tmp/fathom-models; C=${C:-unknown}
export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin
python3 -m pip install -q --no-deps --no-index --no-compile --upgrade --target /tmp/site .gpu/wheels/*.whl > $L/pip.txt 2>&1; el pip rc=$?
if [ -d .stage/part3 ]; then mkdir -p $M && cp .stage/part3/* $M/ && cat $M/smollm2.gguf.[0-9][0-9] > $M/smollm2.gguf && echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $M/smollm2.gguf" | sha256sum -c > $L/join.txt 2>&1 && python3 -m pip install -q --no-index --no-deps --target $M/site $M/gguf-0.19.0-py3-none-any.whl >> $L/join.txt 2>&1; el join rc=$?; fi
HAVE_MODEL=0; [ -f $M/smollm2.gguf ] && [ -d $M/site ] && HAVE_MODEL=1; el model=$HAVE_MODEL
export PYTHONPATH=/tmp/site:$M/site PYTHONUNBUFFERED=1
# ---- A
PHASE_A=${PHASE_A:-330}
ORDER="gpu_select gpu_decode gpu_scan gpu_step gpu_pariskv_step gpu_plan gpu_encode gpu_store gpu_landmark gpu_jit gpu_oracle gpu_attention gpu_fetch gpu_foreign gpu_smoke gpu_tuning gpu_ceilings"
( cd /tmp/fg/.gpu && for t in $ORDER; do [ -x tests/$t-test ] && echo $t; done | xargs -P 5 -I{} bash -c 'timeout -k 10 '$(lim 300)' ./tests/{}-test --ignored --test-threads=1 > '$L'/{}.log 2>&1; echo "{} rc=$?"' > $L/rc.txt ) &
PA=$!
if [ $HAVE_MODEL = 1 ]; then
  EV="python3 -m fathom.eval --model-dir $M --gguf smollm2.gguf --no-speed --commit $C"
  METHODS="dense,oracle,fathom(24),fathom(32),fathom(46),sparq(8),sparq(16),double_sparsity(16),loki(16),pariskv(100)"
  ( cd /tmp
    timeout -k 10 $(lim 170) $EV --contexts 4k --tasks niah_multiquery,vt,fwe --samples 24 --methods "$METHODS" --host-methods "fathom(24)" --no-teacher-forced --time-budget 150 --out-dir $L/ruler4k > $L/eval-4k.txt 2>&1; el eval 4k rc=$?
    timeout -k 10 $(lim 80) $EV --contexts 4k --tasks "" --samples 8 --k 256 --methods "dense,oracle,fathom(24),fathom(46),sparq(16),pariskv(100)" --host-methods "" --out-dir $L/tf256 > $L/eval-tf256.txt 2>&1; el eval tf k256 rc=$?
    timeout -k 10 $(lim $(( PHASE_A - ($(date +%s) - T0) ))) $EV --contexts 8k --tasks niah_single,niah_multikey,niah_multivalue,niah_multiquery,vt,fwe --samples 24 --methods "dense,oracle,fathom(24),fathom(46),sparq(16),pariskv(100)" --host-methods "fathom(46)" --no-teacher-forced --time-budget $(( PHASE_A - 20 - ($(date +%s) - T0) )) --out-dir $L/ruler8k > $L/eval-8k.txt 2>&1; el eval 8k rc=$? ) &
  PE=$!
  wait $PE
fi
wait $PA; el A done: $(cat $L/rc.txt | tr '\n' ' ')
# ---- B
SB="--model qwen3-8b --methods fathom(48) --batch 1 --placement hbm --steps 3 --slots 1 --no-standing"
for ctx in 32k 1m; do
  timeout -k 10 $(lim 90) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 2000 \
    $B/step-bench $SB --contexts $ctx --out $L/ncu-sb-$ctx > $L/ncu-step-$ctx.csv 2> $L/ncu-step-$ctx.err
  el ncu step $ctx rc=$?
done
timeout -k 10 $(lim 150) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb-hbm > $L/step-bench-hbm.txt 2>&1
el step-bench hbm rc=$?
cd $L && { cat timeline.txt; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done; for f in eval-*.txt; do echo "== $f"; tail -5 $f; done; tail -12 step-bench-hbm.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/c.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
