#!/usr/bin/env bash
# Owned peak tiles (`SelectSpec::owned_tiles`, opt-in `Tiles::select_owned_tiles`, eighteenth
# session): each peak tile's peak taken by the one thread that owns it and kept in registers for
# the radix passes; the hot tiles as in the streaming form. The HBM step at 32k runs the
# one-block form (`t1024 i4 onepass fused peaks` in the H100 record), whose `_chunk` spent
# ~1,930 warp instructions a warp, ~560 of them on the peaks (shuffles and a shared atomic a
# load; `bench/results/select-lines-h100-2026-12-06-3fdba69-*`). A first form that also
# counted and placed each hot tile's survivors by its owner ran 2.70M warp instructions against
# 1.97M, 19.71 us against 16.48 (H100, 5283414: `bench/results/owned-tiles-h100-2026-12-06-*`).
# Predicted for this one: ~1.6M, the `_chunk` ~2-3 us faster. Outcome (H100, b1026a1,
# `bench/results/owned-tiles-h100-2026-12-06-b1026a1-*`): 1.93M, 16.77 us against 16.51, the
# step 1.386/1.393 ms against 1.372/1.374: no faster. Exact (gpu_step's two cases, gpu_select's
# random, million-token and compact cases; memcheck clean on the short and boundary lengths).
# This call: step-bench HBM 32k default / owned / default / owned (qwen3-8b, fathom(48) and
# sparq(32), batch 1); ncu's warm time and instructions of the select `_chunk` both ways;
# gpu_select on the four owned forms and gpu_step's two owned cases; compute-sanitizer memcheck
# and racecheck on the short and boundary lengths.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=420 bash bench/calls/h100-2026-12-06x-select-owned-tiles.sh
set -u
DEFAULT_BUDGET=450 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
run() {  # run LABEL [FLAG]
  [ $(left) -gt 60 ] || return
  FATHOM_KERNEL_CACHE=/tmp/kc-$1 timeout -k 10 $(lim 60) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" \
    --contexts 32k --placement hbm --batch 1 --no-standing ${2:-} --out $L/sb-$1 --commit ${C:-unknown} > $L/step-bench-$1.txt 2>&1
  el "step-bench $1 rc=$?"
}
run default1
run owned1 --select-owned-tiles
run default2
run owned2 --select-owned-tiles
ncu_select default1
ncu_select owned1 --select-owned-tiles
OWNED=peaks_ot,peaks_cf_ot,peaks_head_ot,peaks_head_cf_ot
( cd /tmp/fg/.gpu && FATHOM_SELECT_ALGORITHMS=$OWNED timeout -k 10 "$(lim 150)" ./tests/gpu_select-test --ignored \
    --test-threads=1 > "$L/gpu_select.log" 2>&1 ); el "gpu_select rc=$?"
( cd /tmp/fg/.gpu && timeout -k 10 "$(lim 60)" ./tests/gpu_step-test --ignored --test-threads=1 gpu_step_select_owned_tiles \
    > "$L/gpu_step.log" 2>&1 ); el "gpu_step rc=$?"
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r "$R/scripts" . && FATHOM_SELECT_ALGORITHMS=$OWNED OUT=$L/sanitize timeout -k 10 $(lim 130) \
    bash scripts/sanitize.sh --tools memcheck,racecheck --tests gpu_select --jobs 2 --timeout 120 gpu_select_short_and_boundary_lengths \
    > $L/sanitize.txt 2>&1 ); el "sanitize rc=$?"
cd $L && { cat nvidia-smi.txt timeline.txt; cat times-select-*.txt 2>/dev/null; cat sanitize/summary.txt 2>/dev/null
  for f in gpu_select.log gpu_step.log; do echo "== $f"; grep -E "^test |test result|panicked" $f | head -20; done
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done
  } > $OUT/summary.txt 2>&1
tar czf $OUT/select-owned-tiles.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
