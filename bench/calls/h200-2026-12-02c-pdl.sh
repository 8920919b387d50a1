#!/usr/bin/env bash
# The third device call of the third session of 2026-12-02: programmatic dependent launch
# (`FATHOM_PDL=1`, `Gpu::set_programmatic_launch`) on the GPU, the rank-merge union under
# compute-sanitizer, a cold `autotune --quick`, and the step with and without PDL. From the
# repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/h200-2026-12-02c-pdl.sh
# A (concurrent, ~250 s): every Rust GPU test but gpu_faults, gpu_pariskv and the timing-only
#   ones with FATHOM_PDL=1 (every kernel launched with the attribute), five binaries at a time,
#   among them gpu_step_with_programmatic_launch_g4; compute-sanitizer (memcheck, racecheck,
#   initcheck, synccheck) over the select's boundary test and the raw-store step.
# B (alone): autotune --quick on an empty kernel cache (CUBIN), into a scratch record; step-bench
#   HBM fathom(48)/sparq(32) at 32k and 1M without and with PDL; then host 256k/1M with PDL, time
#   allowing.
set -u
. bench/calls/budget.sh
C=${C:-unknown}
export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin
# ---- A
ORDER="gpu_select gpu_decode gpu_step gpu_scan gpu_pariskv_step gpu_plan gpu_encode gpu_store gpu_landmark gpu_jit gpu_oracle gpu_attention gpu_fetch gpu_foreign gpu_smoke"
( cd /tmp/fg/.gpu && for t in $ORDER; do [ -x tests/$t-test ] && echo $t; done | FATHOM_PDL=1 xargs -P 5 -I{} bash -c 'timeout -k 10 '$(lim 200)' ./tests/{}-test --ignored --test-threads=1 > '$L'/{}.log 2>&1; echo "{} rc=$?"' > $L/rc.txt ) &
PA=$!
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r $R/scripts . && OUT=$L/sanitize timeout -k 10 $(lim 200) bash scripts/sanitize.sh --tests gpu_select,gpu_step --jobs 3 --timeout 190 \
    'gpu_select_short_and_boundary_lengths' 'gpu_step_raw_store_g4' > $L/sanitize.txt 2>&1; echo "sanitize rc=$?" >> $L/rc.txt ) &
PS=$!
wait $PA $PS; el A done: $(cat $L/rc.txt | tr '\n' ' ')
# ---- B
rm -rf /tmp/kc && FATHOM_KERNEL_CACHE=/tmp/kc timeout -k 10 $(lim 90) $B/autotune --quick --timings --out $L/tune-quick > $L/autotune-quick.txt 2>&1
el autotune quick rc=$?
for pdl in 0 1; do
  FATHOM_PDL=$pdl timeout -k 10 $(lim 100) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb-hbm-pdl$pdl > $L/step-bench-hbm-pdl$pdl.txt 2>&1
  el step-bench hbm pdl=$pdl rc=$?
done
if [ $(left) -gt 100 ]; then
  FATHOM_PDL=1 timeout -k 10 $(lim 150) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 256k,1m --placement host --batch 1 --no-standing --out $L/sb-host-pdl1 > $L/step-bench-host-pdl1.txt 2>&1
  el step-bench host pdl=1 rc=$?
fi
cd $L && { cat timeline.txt; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done; cat sanitize/summary.txt 2>/dev/null | tail -12; grep -E "ready in|in all|record" autotune-quick.txt; for f in step-bench-*.txt; do echo "== $f"; grep -E "^(fathom|sparq)" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/c.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
