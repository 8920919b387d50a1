#!/usr/bin/env bash
# The follow-up of next-stripes-fresh-peaks.sh on the same pack (main + the fresh-peaks patch,
# main's step-bench in .gpu/old): step-bench HBM fathom(48) at the stripes its ncu sweep found
# fastest, against the default grid, each build timed in one run of the same machine; then the
# finest warp sampling of the 1M tensor-core scan (patched), the 1M select `_chunk` and the 32k
# scan (their waves and block limits too).
#   S1M: blocks a segment for the 1M scan; S32K: for the 32k scan (unset: that context's A/B is
#   left out).
# carry [".gpu"]:
#   C=<commit>+fp S1M=<n> S32K=<n> BUDGET=<s> bash bench/calls/next-stripes-step.sh
set -u
DEFAULT_BUDGET=420 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
ab_start
sb() {  # LABEL CONTEXT SECONDS [FLAG...]: step-bench HBM fathom(48) with the patched build
  local label=$1 context=$2 seconds=$3; shift 3
  [ "$(left)" -gt $(( seconds / 2 + 20 )) ] || return
  timeout -k 10 "$(lim "$seconds")" "$B/step-bench" --model qwen3-8b --methods "fathom(48)" --contexts "$context" \
    --placement hbm --batch 1 --no-standing "$@" --commit "${C:-unknown}-$label" --out "$L/sb-$label" \
    > "$L/step-bench-$label.txt" 2>&1
  el "step-bench $label rc=$?"
}
[ -n "${S32K:-}" ] && { sb 32k-default 32k 45; sb "32k-s$S32K" 32k 45 --scan-stripes "$S32K"; }
[ -n "${S1M:-}" ] && { sb 1m-default 1m 80; sb "1m-s$S1M" 1m 80 --scan-stripes "$S1M"; }
CONTEXT=1m ncu_sampling tcscan 'fathom_scan.*_tc'
CONTEXT=32k ncu_sampling scan32k 'fathom_scan'
CONTEXT=1m ncu_sampling chunk1m 'fathom_select.*_chunk'
cd $L && { cat nvidia-smi.txt timeline.txt
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom" $f; done
  grep -hE "Duration|Warp Cycles Per Issued|Executed Instructions\"|Registers Per|Achieved Occupancy|Waves Per SM|Block Limit" *-details.csv; } > $OUT/summary.txt 2>&1
tar czf $OUT/stripes-step.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
