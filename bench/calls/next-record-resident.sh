#!/usr/bin/env bash
# The resident select into the record (nineteenth session): autotune's select cases in HBM at
# 32k with `--opt-in select-resident` on an empty kernel cache, merged by key into a copy of the
# committed record of this card; then step-bench HBM 32k under the committed record and under
# the merged one, twice each (qwen3-8b, fathom(48) and sparq(32), batch 1).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=300 bash bench/calls/next-record-resident.sh
set -u
DEFAULT_BUDGET=300 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
FATHOM_KERNEL_CACHE=/tmp/kc-rres timeout -k 10 $(lim 150) $B/autotune --only select/hbm/32k --opt-in select-resident \
  --timings --out $L/tune > $L/autotune.txt 2>&1
el "autotune rc=$?"
merged_record $L/tune $L/merged
run() {  # run LABEL [VAR=VALUE...]
  [ $(left) -gt 30 ] || return
  local label=$1; shift
  env "$@" FATHOM_KERNEL_CACHE=/tmp/kc-rres timeout -k 10 $(lim 45) $B/step-bench --model qwen3-8b \
    --methods "fathom(48),sparq(32)" --contexts 32k --placement hbm --batch 1 --no-standing --out $L/sb-$label \
    --commit ${C:-unknown} > $L/step-bench-$label.txt 2>&1
  el "step-bench $label rc=$?"
}
run committed1
run merged1 FATHOM_TUNING_DIR=$L/merged
run committed2
run merged2 FATHOM_TUNING_DIR=$L/merged
cd $L && { cat nvidia-smi.txt timeline.txt; grep -E "select|ready in|record|total" autotune.txt | tail -20; cat merged.merge.txt 2>/dev/null
  for f in step-bench-*.txt; do echo "== $f"; grep -E "^method|^fathom|^sparq" $f; done; } > $OUT/summary.txt 2>&1
# Two folders: cp will not overwrite a file it created in the same call (both hold one name).
mkdir -p $OUT/record/tune $OUT/record/merged && cp $L/tune/* $OUT/record/tune/ && cp $L/merged/* $OUT/record/merged/
tar czf $OUT/record-resident.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
