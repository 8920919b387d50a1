#!/usr/bin/env bash
# Which HBM 1M scan tile the step is faster with, t64 or t128 (w8, tensor cores, peaks), and
# whether the autotuner agrees on the same machine. Twenty-fifth session: the autotuner (scan
# alone, L2 flushed before each run, random keys) ranked w8 t128 tc first at 1M by 2.3%
# (106.5 against 109.0 us with peaks), while ncu in the step (caches as the step leaves them,
# step-bench's synthetic keys) gave t128 103.3 us and t64 99.5 (one call apart, one machine);
# the committed H100 record keeps t64 there on that evidence. This times the whole step
# (step-bench HBM 1M, fathom(48), batch 1) under the committed record and under it with that
# one entry's winner set to t128, alternating, twice each; ncu's time and warp instructions of
# the scan in that step under each; then `autotune --only scan/hbm/1m` on the same machine
# (qwen3-8b's shape) for its ranking, with its usual random plan inputs and with step-bench's
# (`--plan-inputs synthetic`: plans of ~22 channels over depths 1-4 instead of ~34 nearly all
# at depth 1, the same bits). The record used is this GPU's
# (runtime/records/<gpu>.json, as the runtime names it); on a card without one nothing runs.
# `REC=PATH` times a record other than the committed one (e.g. /tmp/refresh-tune/<gpu>.json,
# which `next-refresh.sh` leaves on a machine kept warm).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=450 bash bench/calls/next-scan-tile-in-step.sh
set -u
DEFAULT_BUDGET=450 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | sed 's/[^a-z0-9]/-/g' | tr -s '-' | sed 's/-$//')
rec=${REC:-$R/runtime/records/$gpu.json}
if [ -f "$rec" ]; then
  for t in 64 128; do
    mkdir -p /tmp/rec-t$t && python3 - "$rec" "/tmp/rec-t$t/$gpu.json" $t <<'PY' > $L/record-t$t.txt 2>&1
import json, sys
r = json.load(open(sys.argv[1])); t = int(sys.argv[3])
for e in r["entries"]:
    k = e["key"]
    if (k["subject"], k["placement"], k["head_dim"], k["group"], k["context_bucket"]) == ("scan", "hbm", 128, 4, 20):
        print("was", e["winner"]["name"])
        e["winner"]["variant"] = {"tile": {"scan": {"tile_words": 8, "threads": t, "tensor_cores": True}}}
        e["winner"]["name"] = f"scan w8 t{t} tc"
        print("now", e["winner"]["name"])
json.dump(r, open(sys.argv[2], "w"), indent=2)
PY
  done
  export FATHOM_KERNEL_CACHE=/tmp/kc-tile
  # A 1M step-bench spends ~60 s making its layers before the first step (2026-12-07: 60 s
  # was too short), so SB_LIMIT (150) each; ROUNDS (2) alternations.
  for round in $(seq 1 ${ROUNDS:-2}); do
    for t in 64 128; do
      [ "$(left)" -gt 100 ] || break
      FATHOM_TUNING_DIR=/tmp/rec-t$t timeout -k 10 "$(lim ${SB_LIMIT:-150})" "$B/step-bench" --model qwen3-8b --methods "fathom(48)" \
        --contexts 1m --placement hbm --batch 1 --no-standing --commit "${C:-unknown}-t$t" --out "$L/sb-t$t-$round" \
        > "$L/step-bench-t$t-$round.txt" 2>&1
      el "step-bench t$t round $round rc=$?"
    done
  done
  for t in 64 128; do
    FATHOM_TUNING_DIR=/tmp/rec-t$t NCU_LIMIT=45 ncu_kernels scan 1m-t$t 'fathom_scan.*_tc' 1m
  done
  for src in random synthetic; do
    [ "$(left)" -gt 50 ] && { timeout -k 10 "$(lim 60)" "$B/autotune" --model qwen3-8b --only scan/hbm/1m \
        --plan-inputs $src --timings --out $L/tune-$src > $L/autotune-$src.txt 2>&1; el "autotune scan/hbm/1m $src rc=$?"; }
  done
else
  echo "no committed record for $gpu" > $L/record-t64.txt
fi
cd $L && { cat nvidia-smi.txt timeline.txt record-t*.txt
  for f in step-bench-t*.txt; do echo "== $f"; grep -E "^method|^fathom" $f; done
  cat times-scan-1m-t*.txt 2>/dev/null
  for src in random synthetic; do echo "== autotune $src"
    grep -E "scan w8 t(64|128) tc|winner|record" autotune-$src.txt 2>/dev/null | head -12; done; } > $OUT/summary.txt 2>&1
mkdir -p $OUT/record && cp -r $L/tune-* $OUT/record/ 2>/dev/null
tar czf $OUT/scan-tile-in-step.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
