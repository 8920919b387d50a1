#!/usr/bin/env bash
# The select's peaks pass walking its own pointer (`top_k_of_peaks`, fourteenth session) against
# the step-bench of c3b2949 (the pass as it was; run with `--tail-in-plan`, which the new
# binary has by default, so that only the select differs): HBM 32k, where the committed H100
# record's select reads the scores' peaks itself (`t1024 i4 onepass fused peaks`; 128k and 1M
# use the scan's peaks, which this does not touch), qwen3-8b, fathom(48) and sparq(32), batch 1,
# base / new / base / new; then compute-sanitizer memcheck and racecheck on the peaks selects'
# short and boundary lengths; then the step at the new defaults at HBM 1M and host 256k and 1M.
# Predicted: the pass's ~600 warp instructions a warp (of ~2,230) fall to ~200, the select
# `_chunk` ~1-2 us faster, the step at 32k ~1 us a layer faster.
# From the repository root, after `scripts/pack-gpu.sh`, with the base's step-bench in
# .gpu/base/step-bench.xz; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=470 bash bench/calls/h100-2026-12-06u-select-peaks-ab.sh
set -u
DEFAULT_BUDGET=470 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
NEW=$B/step-bench BASE=/tmp/fg/base-step-bench
xz -dc $R/.gpu/base/step-bench.xz > $BASE && chmod +x $BASE
run() {  # run LABEL BINARY [FLAG]
  [ $(left) -gt 60 ] || return
  FATHOM_KERNEL_CACHE=/tmp/kc-$1 timeout -k 10 $(lim 70) $2 --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts 32k \
    --placement hbm --batch 1 --no-standing ${3:-} --out $L/sb-$1 --commit ${C:-unknown} > $L/step-bench-$1.txt 2>&1
  el "step-bench $1 rc=$?"
}
run base1 $BASE --tail-in-plan
run new1 $NEW
run base2 $BASE --tail-in-plan
run new2 $NEW
mkdir -p $L/sanitize
( cd /tmp/fg && cp -r "$R/scripts" . && FATHOM_SELECT_ALGORITHMS=peaks,peaks_head OUT=$L/sanitize timeout -k 10 $(lim 100) \
    bash scripts/sanitize.sh --tools memcheck,racecheck --tests gpu_select --jobs 2 --timeout 90 gpu_select_short_and_boundary_lengths \
    > $L/sanitize.txt 2>&1 ); el "sanitize rc=$?"
# The step at the new defaults beyond 32k (the figures of the README's tables): HBM 1M, host
# 256k and 1M.
wide() {  # wide LABEL PLACEMENT CONTEXTS SECONDS
  [ $(left) -gt 50 ] || return
  FATHOM_KERNEL_CACHE=/tmp/kc-new1 timeout -k 10 $(lim $4) $NEW --model qwen3-8b --methods "fathom(48),sparq(32)" --contexts $3 \
    --placement $2 --batch 1 --no-standing --out $L/sb-$1 --commit ${C:-unknown} > $L/step-bench-$1.txt 2>&1
  el "step-bench $1 rc=$?"
}
wide hbm-1m hbm 1m 70
wide host host 256k,1m 120
cd $L && { cat nvidia-smi.txt timeline.txt; cat sanitize/summary.txt 2>/dev/null
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done
  } > $OUT/summary.txt 2>&1
tar czf $OUT/select-peaks-ab.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
