#!/usr/bin/env bash
# The HBM plane scan's grid fitted to one wave (`Tiles::scan_one_wave`; twenty-fourth session,
# the default since; `step-bench --scan-spec-grid` gives the spec's grid; the call ran with
# the flag of the time, `--scan-one-wave`, the opt-in's): at 1M on an H100 3 stripes a segment (768 blocks,
# one wave of the record's tile) took 99.3-100.6 us against the spec's 2,048 blocks' 103.8-104.5
# (bench/results/scan-stripes-h100-2026-12-07-8d3f916-*). In order of need: gpu_step's
# one-wave cases (the occupancy asked of the driver, exact); ncu's warm time and warp
# instructions of the HBM scan in step-bench (qwen3-8b, fathom(48)) at 128k, 256k and 1M, the
# spec's grid then one wave (the grid sizes are in the CSVs); step-bench HBM 128k and 256k both
# ways.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"] (~360 s):
#   C=$(git rev-parse --short HEAD) BUDGET=360 bash bench/calls/next-scan-one-wave.sh
set -u
DEFAULT_BUDGET=360 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
gpu_tests gpu_step 70 scan_one_wave
for ctx in 128k 256k 1m; do
  NCU_LIMIT=60 ncu_kernels scan "$ctx-spec" fathom_scan "$ctx" --scan-spec-grid
  NCU_LIMIT=35 ncu_kernels scan "$ctx-wave" fathom_scan "$ctx"
done
for way in spec wave; do
  flag=(); [ $way = spec ] && flag=(--scan-spec-grid)
  [ "$(left)" -gt 50 ] || break
  timeout -k 10 "$(lim 60)" "$B/step-bench" --model qwen3-8b --methods "fathom(48)" --contexts 128k,256k --placement hbm \
    --batch 1 --no-standing "${flag[@]}" --commit "${C:-unknown}-$way" --out "$L/sb-$way" > "$L/step-bench-$way.txt" 2>&1
  el "step-bench $way rc=$?"
done
cd $L && { cat nvidia-smi.txt timeline.txt; cat times-*.txt 2>/dev/null
  echo "== gpu_step.log"; grep -E "^test |test result|panicked" gpu_step.log | head -20
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/scan-one-wave.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
