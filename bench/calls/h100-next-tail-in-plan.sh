#!/usr/bin/env bash
# RAN on 2026-12-06 (fourteenth session, H100, c3b2949): exact, sanitizer-clean, HBM 32k
# 1.431 / 1.399 / 1.451 ms off / on / off; the tail in the plan is the default since 3efb851
# (`bench/results/tail-plan-h100-2026-12-06-c3b2949-*`). Kept as the record of what ran.
# The tail scored in blocks of the plan's launch (`Tiles::tail_in_plan`, `PlanSpec::tail`,
# opt-in, built in the thirteenth session and exact on the CPU emulator, never yet on a GPU):
# gpu_step's two tests (g4 raw, g7 KLT: every method, eager and replayed, both placements,
# against the reference), compute-sanitizer memcheck and racecheck on the g4 one, then the
# step off / on / off: HBM 32k and 1M, host 1M (qwen3-8b, fathom(48) and sparq(32), batch 1,
# the committed record). Predicted: ~1-2 us a layer at every context (the oracle's launch and
# its grid's hand-off leave the chain: 2.6 us under ncu at HBM 32k, an empty tail there), so
# HBM 32k ~1.48 -> ~1.43 ms a step, the rest within noise. If it wins and every test passes,
# make `Tiles::default().tail_in_plan` true (and say so in README and NOTES).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=560 bash bench/calls/h100-next-tail-in-plan.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-tail-plan
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 200) ./tests/gpu_step-test --ignored --test-threads=2 tail_in_the_plan \
    > $L/gpu_step.log 2>&1; el "gpu_step tail_in_the_plan rc=$?" )
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r "$R/scripts" . && OUT=$L/sanitize timeout -k 10 $(lim 150) bash scripts/sanitize.sh \
    --tools memcheck,racecheck --tests gpu_step --jobs 2 --timeout 140 tail_in_the_plan_g4 > $L/sanitize.txt 2>&1
  el "sanitize rc=$?" )
sb() {  # sb LABEL PLACEMENT CONTEXTS [--tail-in-plan]
  [ $(left) -gt 50 ] || return
  timeout -k 10 $(lim 90) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts $3 \
    --placement $2 --batch 1 --no-standing ${4:-} --out $L/sb-$1 --commit ${C:-unknown} > $L/step-bench-$1.txt 2>&1
  el "step-bench $1 rc=$?"
}
sb hbm-off hbm 32k,1m
sb hbm-on hbm 32k,1m --tail-in-plan
sb hbm-off2 hbm 32k,1m
sb host-off host 1m
sb host-on host 1m --tail-in-plan
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^test |^test result|FAILED|panicked" gpu_step.log | head -20
  cat sanitize/summary.txt 2>/dev/null
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/tail-in-plan.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
