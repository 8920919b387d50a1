#!/usr/bin/env bash
# Programmatic dependent launch with the trigger at the blocks' exit (`FATHOM_PDL=exit`: every
# kernel compiled with -DFATHOM_PDL_TRIGGER_AT_EXIT, so `await_previous_kernel` waits but does
# not trigger; the next kernel is scheduled as this one's blocks exit). `FATHOM_PDL=1` made the
# HBM step 2-3% slower on the H200 (2026-12-02), likely because the early trigger let the next
# kernel's blocks sit resident and spinning beside the current one. This call times the HBM step
# (qwen3-8b, fathom(48) and sparq(32), 32k and 1M) with PDL off, early and at exit, back to back
# on one machine, under the committed record. Predicted: exit 1-3 us a layer faster than off at
# 32k (four or five launches a layer), no change at 1M.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=480 bash bench/calls/h100-next-pdl-exit.sh
# PDL_RUNS="0 exit 0" (with BUDGET=360) leaves out the early trigger, measured slower before.
# A run takes ~110 s on a fresh machine: each setting compiles its own kernels (`exit` is a
# define, part of the kernel cache's key) and step-bench builds the 32k and 1M inputs. At 70 s
# a run (H200, 2026-12-06) neither the off nor the exit run printed a row.
set -u
DEFAULT_BUDGET=480 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-pdl
# Off again last, to see the machine's drift over the call.
run=0
for pdl in ${PDL_RUNS:-0 1 exit 0}; do
  [ $(left) -gt 100 ] || break
  run=$((run + 1))
  env FATHOM_PDL=$pdl timeout -k 10 $(lim 120) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" \
    --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb-pdl-$run-$pdl --commit $C \
    > $L/step-bench-pdl-$run-$pdl.txt 2>&1
  el step-bench run $run FATHOM_PDL=$pdl rc=$?
done
cd $L && { cat nvidia-smi.txt timeline.txt; for f in step-bench-pdl-*.txt; do echo "== $f"; grep -hE "^method|^fathom|^sparq" $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/pdl-exit.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
