#!/usr/bin/env bash
# K/V rows side by side as the store's default (StoreConfig::DEFAULT_KV_ROWS, the Python
# KeyStore's and step-bench's default): every GPU test with it on (the Rust binaries six at a
# time, then gpu_faults alone; the Python GPU tests, whose adjacent-vs-separate test checks
# every method bit for bit in both placements), then step-bench from host memory at 256k and
# 1M with the new default and with `--kv-rows separate` in the same call (fathom(48),
# sparq(32)). Why: ncu in the host 1M step (H100,
# 264b0e3) put the fetch at 338 us a layer, 2.4x its share of the link floor; adjacent rows
# halved it on the H200 (2026-12-02, 57.3 -> 52.5 ms a step). From the repository root, after
# `scripts/pack-gpu.sh && scripts/build-wheel.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/h100-next-kv-adjacent.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
python_tests
# A: every Rust GPU test but gpu_faults, six binaries at a time, longest first; the Python GPU tests.
# gpu_select without the two cluster selects (opt-in; h100-next-select-cluster.sh tests them):
# with all ten algorithms it would outgrow its 300 s beside five other binaries.
export FATHOM_SELECT_ALGORITHMS=radix,compact,onepass,fused,peaks,peaks_head,scan_peaks,scan_peaks_head
ORDER="gpu_select gpu_pariskv gpu_decode gpu_scan gpu_plan gpu_encode gpu_store gpu_step gpu_pariskv_step gpu_landmark gpu_jit gpu_oracle gpu_attention gpu_fetch"
ALL=$(ls $TESTS | sed 's/-test$//' | grep -v '^gpu_faults$')
LIST=$( { for t in $ORDER; do echo "$ALL" | grep -qx $t && echo $t; done; echo "$ALL" | grep -vxF -f <(echo $ORDER | tr ' ' '\n'); } )
( cd $TESTS/.. && echo "$LIST" | xargs -P 6 -I{} bash -c 'timeout -k 10 '$(lim 300)' ./tests/{}-test --ignored --test-threads=1 > '$L'/{}.log 2>&1; echo "{} rc=$?"' > $L/rc.txt ) &
PA=$!
( cd /tmp/py && FATHOM_GPU_TESTS=1 timeout -k 10 $(lim 150) python3 -m pytest -q -rA --timeout 120 tests/gpu/test_gpu.py > $L/pytest_gpu.log 2>&1; echo "pytest gpu rc=$?" >> $L/rc2.txt )
wait $PA; el A done
# B: gpu_faults alone (it takes the device's memory).
( cd $TESTS/.. && timeout -k 10 $(lim 120) ./tests/gpu_faults-test --ignored --test-threads=1 > $L/gpu_faults.log 2>&1; echo "gpu_faults rc=$?" >> $L/rc.txt ); el B done
# C: the host step with either layout, in one call.
export FATHOM_KERNEL_CACHE=/tmp/kc-sb FATHOM_TUNING_DIR=$R/runtime/records
both_rows host 256k,1m
cd $L && { cat nvidia-smi.txt timeline.txt rc.txt rc2.txt; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done
  grep -E "passed|failed" pytest_gpu.log | tail -3
  for rows in adjacent separate; do echo "== host $rows"; grep -E "^method|^fathom|^sparq|link floor \(issue" step-bench-host-$rows.txt; done
 } > $OUT/summary.txt 2>&1
tar czf $OUT/kv-adjacent.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
