#!/usr/bin/env bash
# The three GPU test binaries that ran past their 300 s in h100-next-kv-adjacent.sh (H200,
# 2026-12-06, c4d3276: six binaries at a time; every test they had finished passed), with
# adjacent K/V rows the default, three at a time; before them the Python GPU tests alone (their
# memory test reads the device's free memory, which the Rust binaries beside them moved).
# From the repository root, after `scripts/pack-gpu.sh && scripts/build-wheel.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=420 bash bench/calls/h200-next-long-tests.sh
# BINARIES="" runs the Python tests alone (BINARIES names the Rust test binaries to run).
set -u
DEFAULT_BUDGET=420 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked && python_tests
( cd /tmp/py && FATHOM_GPU_TESTS=1 timeout -k 10 $(lim 90) python3 -m pytest -q -rA --timeout 80 tests/gpu/test_gpu.py > $L/pytest_gpu.log 2>&1; el "pytest gpu rc=$?" )
export FATHOM_SELECT_ALGORITHMS=radix,compact,onepass,fused,peaks,peaks_head,scan_peaks,scan_peaks_head
BINARIES=${BINARIES-gpu_select gpu_scan gpu_pariskv}
[ -z "$BINARIES" ] || ( cd $TESTS/.. && printf '%s\n' $BINARIES | xargs -P 3 -I{} bash -c 'timeout -k 10 '$(lim 380)' ./tests/{}-test --ignored --test-threads=1 > '$L'/{}.log 2>&1; echo "{} rc=$?"' > $L/rc.txt )
el tests done
cd $L && { cat nvidia-smi.txt timeline.txt rc.txt 2>/dev/null; for f in $(ls gpu_*.log 2>/dev/null); do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done
  grep -E "passed|failed" pytest_gpu.log | tail -3; } > $OUT/summary.txt 2>&1
tar czf $OUT/long-tests.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
