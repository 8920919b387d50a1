#!/usr/bin/env bash
# Programmatic launch with the trigger at each kernel's exit is the default now: the tests it
# changes (gpu_step's with-and-without test, gpu_tuning against the re-made H100 record) and
# the Python GPU tests at the new default; then where the host 1M step's time goes over its
# link floor (1.29x on the H200, 2026-12-06): an nsys trace of step-bench (fathom(48),
# host, 1M, K/V rows adjacent) cut into layers by `nsys-step-gaps.py` (each kernel's time, the
# idle time inside a layer and between layers), and the same of the HBM step at 32k and 1M
# (without nsys on the machine, ncu's time per kernel, clock control off).
# From the repository root, after `scripts/pack-gpu.sh && scripts/build-wheel.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=500 bash bench/calls/h100-next-pdl-default-profile.sh
set -u
DEFAULT_BUDGET=500 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked && python_tests
( cd /tmp/py && FATHOM_GPU_TESTS=1 timeout -k 10 $(lim 90) python3 -m pytest -q -rA --timeout 80 tests/gpu/test_gpu.py > $L/pytest_gpu.log 2>&1; el "pytest gpu rc=$?" )
( cd $TESTS/.. && printf '%s\n' gpu_step gpu_tuning | xargs -P 2 -I{} bash -c 'timeout -k 10 '$(lim 130)' ./tests/{}-test --ignored --test-threads=1 > '$L'/{}.log 2>&1; echo "{} rc=$?"' > $L/rc.txt )
el tests done
export FATHOM_KERNEL_CACHE=/tmp/kc-prof
SB="--model qwen3-8b --methods fathom(48) --batch 1 --steps 3 --slots 1 --no-standing"
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
el "nsys: ${NSYS:-none}"
# With nsys, each cell's trace cut into layers; without it, ncu's time per kernel.
for cell in "host 1m" "hbm 32k" "hbm 1m"; do
  set -- $cell
  [ $(left) -gt 70 ] || break
  if [ -n "$NSYS" ]; then
    timeout -k 10 $(lim 100) $NSYS profile --trace=cuda --sample=none --cpuctxsw=none -o $L/$1-$2 -f true \
      $B/step-bench $SB --placement $1 --contexts $2 --out $L/nsys-sb-$1-$2 > $L/nsys-$1-$2.txt 2>&1
    el nsys $1 $2 rc=$?
    timeout -k 10 $(lim 60) $NSYS stats --report cuda_gpu_trace --format csv -o $L/$1-$2 $L/$1-$2.nsys-rep >> $L/nsys-$1-$2.txt 2>&1
    el nsys stats rc=$?
    python3 $R/bench/calls/nsys-step-gaps.py $(ls $L/$1-$2*cuda_gpu_trace*.csv | head -1) $1 "$1 $2, H100" > $L/gaps-$1-$2.txt 2>&1
  else
    ncu_step_times "$1 $2" && mv $L/times-$1-$2.txt $L/gaps-$1-$2.txt
  fi
done
cd $L && { cat nvidia-smi.txt timeline.txt rc.txt; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done
  grep -E "passed|failed" pytest_gpu.log | tail -3; for f in gaps-*.txt; do head -16 $f; done
  tail -3 nsys-host-1m.txt 2>/dev/null; } > $OUT/summary.txt 2>&1
rm -f $L/*.nsys-rep $L/*.sqlite
tar czf $OUT/pdl-default-profile.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
