#!/usr/bin/env bash
# What the one-block select's `_chunk` (16.3 us of the HBM step's 38 us a layer at 32k, with
# the caches as a step leaves them: seventeenth session) and the plan (9.0 us) spend their
# instructions and stalls on: ncu's full set with per-instruction counters on one launch of
# each in the HBM 32k step (qwen3-8b, fathom(48), batch 1) under the committed record. Run on
# an H100 on 2026-12-06 (eighteenth session, binaries of 3fdba69): ncu's `cuda` source view of
# the JIT-built kernels came without counters even with -lineinfo, so the call keeps the SASS
# view, and the lines are put on it here: the same kernel compiled with `codegen machine-code
# --lineinfo`, `nvdisasm -g -c`, then bench/calls/sass-lines.py (results
# `bench/results/select-lines-h100-2026-12-06-3fdba69-*`). Any GPU; ~40 s.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=200 bash bench/calls/h100-2026-12-06w-select-32k-lines.sh
set -u
DEFAULT_BUDGET=200 . bench/calls/budget.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-lines
for k in select.*_chunk fathom_plan_; do
  [ "$(left)" -gt 40 ] || break
  name=${k%%[.*]*}; name=${name%_}
  timeout -k 10 "$(lim 80)" ncu --set full --import-source yes -k "regex:$k" --launch-skip 36 --launch-count 1 \
    -o "$L/ncu-$name" "$B/step-bench" --model qwen3-8b --methods "fathom(48)" --batch 1 --placement hbm --steps 2 \
    --slots 1 --no-standing --contexts 32k --out "$L/sb-$name" > "$L/ncu-$name.txt" 2>&1
  el "ncu $name rc=$?"
  ncu --import "$L/ncu-$name.ncu-rep" --page details > "$L/ncu-$name-details.txt" 2>&1
  ncu --import "$L/ncu-$name.ncu-rep" --page source --csv --print-source sass > "$L/ncu-$name-sass.csv" 2>&1
  gzip -f "$L/ncu-$name-sass.csv"
  rm -f "$L/ncu-$name.ncu-rep"
done
cd $L && { cat nvidia-smi.txt timeline.txt; grep -h "Profiling" ncu-*.txt; } > $OUT/summary.txt 2>&1
tar czf $OUT/select-32k-lines.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
