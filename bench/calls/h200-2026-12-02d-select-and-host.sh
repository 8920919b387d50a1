#!/usr/bin/env bash
# The fourth device call of the fourth session of 2026-12-02: gpu_select again after the
# straddle generator's fix (`above < k`, so that the ties hold the k-th largest; the compact
# sources test had drawn `above = k` at seed 1796235174205436200 and expected a fallback that a
# case without tied k-th has no reason to take), at that seed and a fresh one; then step-bench
# host 1M fathom(48)/sparq(32) at the new defaults (its 80 s limit was too short in the third
# call). From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=330 bash bench/calls/h200-2026-12-02d-select-and-host.sh
set -u
. bench/calls/budget.sh
C=${C:-unknown}
export FATHOM_COMMIT=$C
rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf .gpu/pack.tar.xz -C /tmp/fg
B=/tmp/fg/.gpu/bin
( cd /tmp/fg/.gpu && FATHOM_TEST_SEED=1796235174205436200 timeout -k 10 $(lim 60) ./tests/gpu_select-test --ignored --test-threads=1 compact_sources > $L/gpu_select_seed.log 2>&1; echo "seed rc=$?" >> $L/rc.txt ) &
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 130) ./tests/gpu_select-test --ignored --test-threads=1 > $L/gpu_select.log 2>&1; echo "gpu_select rc=$?" >> $L/rc.txt )
wait; el tests: $(cat $L/rc.txt | tr '\n' ' ')
timeout -k 10 $(lim 180) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 1m --placement host --batch 1 --no-standing --out $L/sb-host > $L/step-bench-host.txt 2>&1
el step-bench host rc=$?
cd $L && { cat timeline.txt; for f in gpu_*.log; do echo "$f: $(grep -E '^test result' $f | tail -1)"; grep -E '^test .* FAILED|panicked at' $f | head -5; done; grep -hE "^(fathom|sparq)" step-bench-host.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/c.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
