#!/usr/bin/env bash
# The resident select (`SelectAlgorithm::Resident`, opt-in `Tiles::select_resident`, nineteenth
# session): one block a query head, the three radix passes over keys its threads hold in
# registers (t1024 i32: a 32k row's middle in one tile, read once, 62 registers, no spill), then
# each warp writes its selected tokens from the counts of the warps before it. Against the
# one-block peaks select the HBM step at 32k runs (`t1024 i4 onepass fused peaks`, coarse floor;
# ~1,930 warp instructions a warp and 26 block barriers, eighteenth session): no peaks pass, no
# hot tiles, no buffer or final cut; ~11 barriers. Predicted: the `_chunk` 16.5 -> ~10-12 us.
# This call, in order of need: step-bench HBM 32k default / resident (qwen3-8b, fathom(48) and
# sparq(32), batch 1); gpu_select on the resident form, gpu_step's two resident cases,
# compute-sanitizer on the short and boundary lengths; step-bench 32k default / resident again;
# ncu's warm time and instructions of the select `_chunk` both ways at 32k; step-bench at 128k,
# where the record's one-block select becomes a resident select reading its row four times.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=420 bash bench/calls/next-select-resident.sh
set -u
DEFAULT_BUDGET=420 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
run() {  # run LABEL CONTEXTS [FLAG]
  [ $(left) -gt 60 ] || return
  FATHOM_KERNEL_CACHE=/tmp/kc-$1 timeout -k 10 $(lim 60) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" \
    --contexts $2 --placement hbm --batch 1 --no-standing ${3:-} --out $L/sb-$1 --commit ${C:-unknown} > $L/step-bench-$1.txt 2>&1
  el "step-bench $1 rc=$?"
}
run default1 32k
run resident1 32k --select-resident
select_checks resident resident
run default2 32k
run resident2 32k --select-resident
ncu_select default1
ncu_select resident1 --select-resident
run default128 128k
run resident128 128k --select-resident
cd $L && { cat nvidia-smi.txt timeline.txt; cat times-select-*.txt 2>/dev/null; cat sanitize/summary.txt 2>/dev/null
  for f in gpu_select.log gpu_step.log; do echo "== $f"; grep -E "^test |test result|panicked" $f | head -20; done
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done
  } > $OUT/summary.txt 2>&1
tar czf $OUT/select-resident.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
