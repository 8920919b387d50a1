#!/usr/bin/env bash
# 2026-12-03, fourth session (issue #15 items 3 and 7): attention's row positions loaded ahead
# (each lane holds one position of the warp's next 32 / ROWS batches; a block's share of the
# row slots is set by k, so the first load goes out beside sel_count), against d86f5b2's
# attention (`before`: its autotune and step-bench in .gpu/var). gpu_attention (every test),
# gpu_step's split-attention and raw-store tests, compute-sanitizer's four tools on
# gpu_attention; autotune's attention subject (qwen3-8b, HBM) before / new / before; the
# attention entries of every preset re-timed with the new kernel and merged into a copy of the
# committed record; step-bench HBM 32k and 1M (fathom(48), sparq(32)) with the before binary
# under the committed record and the new one under the merged record; ncu per kernel of the
# HBM step at 32k; step-bench from host memory at 256k and 1M (the host cells of issue #15,
# last measured at 9e2159b). From the repository root, after `scripts/pack-gpu.sh` and
# copying d86f5b2's autotune and step-bench to .gpu/var/{autotune,step-bench}-before; carry
# [".gpu"]:
#   C=<commit> BUDGET=560 bash bench/calls/h200-2026-12-03d-attention-positions.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin; V=$R/.gpu/var; chmod +x $V/* 2>/dev/null
el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-tests
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 60) ./tests/gpu_attention-test --ignored --test-threads=1 > $L/gpu_attention.log 2>&1 ); el gpu_attention rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 60) ./tests/gpu_step-test --ignored --test-threads=1 split_attention raw_store_g4 > $L/gpu_step.log 2>&1 ); el gpu_step rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 60) bash scripts/sanitize.sh --tests gpu_attention --jobs 4 --timeout 55 matches_reference > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
tune() {  # tune LABEL BINARY: autotune's attention subject for qwen3-8b, own cache and record
  FATHOM_KERNEL_CACHE=/tmp/kc-$1 timeout -k 10 $(lim 40) $2 --model qwen3-8b --only attention/hbm --timings \
    --out $L/tune-$1 > $L/autotune-$1.txt 2>&1; el autotune $1 rc=$?
}
tune before $V/autotune-before
tune new $B/autotune
tune before2 $V/autotune-before
export FATHOM_KERNEL_CACHE=/tmp/kc-record
timeout -k 10 $(lim 60) $B/autotune --only attention/hbm --timings --out $L/tune-attention > $L/autotune-attention.txt 2>&1; el autotune attention rc=$?
mkdir -p $L/record $L/record-old && cp runtime/records/nvidia-h200.json $L/record/ && cp runtime/records/nvidia-h200.json $L/record-old/
timeout -k 10 $(lim 20) $B/autotune --merge $L/tune-attention/nvidia-h200.json --into $L/record/nvidia-h200.json > $L/merge.txt 2>&1; el merge rc=$?
sb() {  # sb LABEL BINARY RECORD_DIR
  FATHOM_TUNING_DIR=$3 timeout -k 10 $(lim 90) $2 --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing \
    --commit $C --placement hbm --contexts 32k,1m --out $L/sb-$1 > $L/step-bench-$1.txt 2>&1; el step-bench $1 rc=$?
}
sb before $V/step-bench-before $L/record-old
sb new $B/step-bench $L/record
FATHOM_TUNING_DIR=$L/record timeout -k 10 $(lim 40) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 2000 \
  $B/step-bench --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing --contexts 32k --out $L/ncu-sb > $L/ncu-step-32k.csv 2> $L/ncu-step-32k.err
el ncu rc=$?
python3 bench/calls/ncu-kernel-times.py $L/ncu-step-32k.csv "HBM step 32k, $C" > $L/ncu-step-32k.txt 2>&1
FATHOM_TUNING_DIR=$L/record timeout -k 10 $(( $(left) - 10 )) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing \
  --commit $C --placement host --contexts 256k,1m --out $L/sb-host > $L/step-bench-host.txt 2>&1; el step-bench host rc=$?
cd $L && { cat nvidia-smi.txt timeline.txt; grep -hE "^test |test result|FAILED|panicked" gpu_attention.log gpu_step.log | head -20
  cat sanitize/summary.txt 2>/dev/null; tail -1 sanitize.txt
  for t in before new before2; do echo "== autotune $t"; grep -E "^attention" autotune-$t.txt | head -3; done
  grep -E "^attention" autotune-attention.txt; cat merge.txt
  for t in before new host; do echo "== step-bench $t"; grep -E "^method|^fathom|^sparq|footprint|floor" step-bench-$t.txt; done
  cat ncu-step-32k.txt; } > $OUT/summary.txt 2>&1
rm -rf $L/ncu-sb
tar czf $OUT/attention-positions.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
