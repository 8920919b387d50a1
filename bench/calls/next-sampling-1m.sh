#!/usr/bin/env bash
# Where the HBM 1M step's two largest kernels spend their issue slots, by SASS line: ncu's finest
# warp sampling (ncu_sampling) of one launch each of the tensor-core scan and the select's
# `_chunk` in step-bench HBM 1M (qwen3-8b, fathom(48), batch 1), after the piece-words staging;
# then the 32k scan (512 one-tile blocks: is it its prologue? NOTES, twenty-third session).
# Put the samples on source lines here with bench/calls/sass-lines.py against the same kernels
# built by `codegen machine-code --lineinfo`.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"] (~200 s):
#   C=$(git rev-parse --short HEAD) BUDGET=240 bash bench/calls/next-sampling-1m.sh
set -u
DEFAULT_BUDGET=240 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
CONTEXT=1m ncu_sampling tcscan 'fathom_scan.*_tc'
CONTEXT=1m ncu_sampling chunk1m 'fathom_select.*_chunk'
CONTEXT=32k ncu_sampling scan32k 'fathom_scan'
cd $L && { cat nvidia-smi.txt timeline.txt
  grep -hE "Duration|Warp Cycles Per Issued|Executed Instructions\"|Registers Per|Achieved Occupancy|Waves Per SM|Block Limit" *-details.csv; } > $OUT/summary.txt 2>&1
tar czf $OUT/sampling-1m.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
