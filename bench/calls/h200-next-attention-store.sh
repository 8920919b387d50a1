#!/usr/bin/env bash
# The first device call planned for the session after the third of 2026-12-02: attention that
# reads the store's rows in HBM (`Tiles::attention_rows = store`, step-bench `--attention-rows
# store`; opt-in, exact on the CPU emulator, not yet run on a GPU). From the repository root,
# after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=400 bash bench/calls/h200-next-attention-store.sh
# 1. gpu_step's two store tests (every method, eager and replayed, G = 4 raw and G = 7 KLT,
#    against the reference) and the head-shard test of issue #17 (two ranks on two streams
#    equal the whole step bit for bit), then compute-sanitizer over the G = 4 store test;
# 2. step-bench HBM fathom(48)/sparq(32) at 32k and 1M, fetched then store, back to back
#    (predicted: ~6 us a layer less at 32k, 0.2 ms a step, and one launch less);
# 3. the same with --kv-rows adjacent and store (the layout's stride in the store variant).
# If 1 passes and 2 gains, make `store` the default of `Tiles::attention_rows` (runtime/src/tuning/tiles.rs).
set -u
. bench/calls/budget.sh
C=${C:-unknown}
export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 180) ./tests/gpu_step-test --ignored --test-threads=1 attention_from_the_store head_shards > $L/gpu_step.log 2>&1 ); el gpu_step rc=$?
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 150) bash scripts/sanitize.sh --tests gpu_step --jobs 4 --timeout 140 'gpu_step_attention_from_the_store_g4' > $L/sanitize.txt 2>&1 ); el sanitize rc=$?
for rows in fetched store; do
  timeout -k 10 $(lim 100) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k,1m --placement hbm --batch 1 --no-standing --attention-rows $rows --out $L/sb-$rows > $L/step-bench-$rows.txt 2>&1
  el step-bench $rows rc=$?
done
timeout -k 10 $(lim 100) $B/step-bench --model qwen3-8b --methods "fathom(48)" --contexts 32k,1m --placement hbm --batch 1 --no-standing --kv-rows adjacent --attention-rows store --out $L/sb-store-kvadj > $L/step-bench-store-kvadj.txt 2>&1
el step-bench store kvadj rc=$?
cd $L && { cat timeline.txt; grep -E "^test |test result" gpu_step.log; tail -10 sanitize/summary.txt 2>/dev/null; for f in step-bench-*.txt; do echo "== $f"; grep -E "^(fathom|sparq)" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/c.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
