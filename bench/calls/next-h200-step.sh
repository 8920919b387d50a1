#!/usr/bin/env bash
# The H200's step at today's defaults under its committed record (c4d3276's grid: the record
# predates the coarse floor's timing, but the step runs every default since: programmatic
# launch, the plan's prologue and tail, the peaks pass's own pointer, shared and paired run
# tables, the coarse floor): step-bench qwen3-8b, fathom(48) and sparq(32), batch 1, HBM 32k
# and 1M, host 1M: the README's H200 tables predate seven defaults. Exits at once on any other
# card (the H100's figures are fresh). Then the resident select against the record's one-block
# select at 32k (`--select-resident`, an A/B: it won there on the H100, nineteenth session).
# ~200 s.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=230 bash bench/calls/next-h200-step.sh
set -u
DEFAULT_BUDGET=230 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
if ! grep -q H200 $L/nvidia-smi.txt; then cat $L/nvidia-smi.txt; echo "not an H200: nothing run"; exit 0; fi
unpack && el unpacked
step_bench hbm hbm 32k,1m 70
step_bench resident hbm 32k 25 --select-resident
step_bench hbm32k hbm 32k 25
step_bench host host 1m 100
cd $L && { cat nvidia-smi.txt timeline.txt
  for f in step-bench-*.txt; do echo "== $f"; grep -E "ceilings|^method|^fathom|^sparq" $f; done
  } > $OUT/summary.txt 2>&1
tar czf $OUT/h200-step.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
