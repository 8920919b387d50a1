#!/usr/bin/env bash
# The record re-made with the autotuner timing HBM scan candidates at the grid the step launches
# (one wave, f6f1a1e; before, at the spec's grid while the step ran one wave since 1bdca2d), with
# the tensor-core scan's early staging if it landed; then step-bench fathom(48) and sparq(32)
# under that record (HBM 32k and 1M, host 1M), the one-wave rule at batch 8 in HBM (32k:
# 2,048 blocks of the spec's grid against 512 fitted; never measured at batch > 1), and with
# what time is left ncu's time per kernel in the HBM step at 32k and 1M.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=570 bash bench/calls/next-refresh-one-wave.sh
set -u
DEFAULT_BUDGET=570 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
[ -n "${SANITIZE:-}" ] && sanitize_test gpu_scan gpu_scan_tensor_cores_match_reference "$SANITIZE"
rm -rf /tmp/kc-refresh
FATHOM_KERNEL_CACHE=/tmp/kc-refresh timeout -k 10 $(lim 330) $B/autotune --timings --out $L/tune > $L/autotune.txt 2>&1
el "autotune rc=$?"
export FATHOM_KERNEL_CACHE=/tmp/kc-refresh
rec=$(ls $L/tune/*.json 2>/dev/null | head -1)
[ -n "$rec" ] && export FATHOM_TUNING_DIR=$L/tune
step_bench hbm hbm 32k,1m 100
step_bench host host 1m 110
for g in onewave specgrid; do
  flag=; [ $g = specgrid ] && flag=--scan-spec-grid
  [ "$(left)" -gt 60 ] || break
  timeout -k 10 "$(lim 45)" "$B/step-bench" --model qwen3-8b --methods "fathom(48)" --contexts 32k --placement hbm \
    --batch 8 --no-standing $flag --out "$L/sb-b8-$g" --commit "${C:-unknown}" > "$L/step-bench-b8-$g.txt" 2>&1
  el "step-bench batch 8 $g rc=$?"
done
NCU_CACHE=none ncu_step_times "hbm 32k"
NCU_CACHE=all ncu_step_times "hbm 32k"
NCU_CACHE=none ncu_step_times "hbm 1m"
NCU_CACHE=all ncu_step_times "hbm 1m"
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "^\s*(ceilings|compile|prepare|verify|time|total)|ready in|record" autotune.txt | tail -12
  cat sanitize/summary.txt 2>/dev/null
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done
  for f in times-*.txt; do echo "== $f"; head -8 $f; done; } > $OUT/summary.txt 2>&1
mkdir -p $OUT/record && cp $L/tune/* $OUT/record/ 2>/dev/null
tar czf $OUT/refresh.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
