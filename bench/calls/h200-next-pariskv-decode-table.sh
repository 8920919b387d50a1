#!/usr/bin/env bash
# SUPERSEDED (2026-12-05, sixth session): select-peaks, select-scan-peaks and
# pariskv-decode-table joined autotune's default grid, and `--opt-in` with them is now refused;
# this script is kept as the record of what ran (or was planned). Next: h200-next-record-peaks.sh.
# Issue #15 item 5 (pariskv(100) in HBM at 1M: 0.68 ms a layer asked; the rerank alone takes 1.69
# in the committed record, and pariskv(100) was last step-benched at 9f1f740). The rerank's `_score`
# re-stores a 64-byte table of the 8 levels to local memory before every nibble it decodes (SASS
# of 2026-12-05, third session: 4 STL.128 + LDL.64 a nibble, ~8 KB of local stores a candidate,
# ~6.9 GB a layer at 1M), which is why the rerank takes 1.69 ms where its 81 MB of index rows
# would take ~30 us. `PariskvRerankSpec::decode_table` (`_dt`, opt-in) reads the decoded nibbles
# and a bank-skewed q~ from shared memory instead; exact on the CPU (cpu_pariskv_score), not yet
# run on a GPU. This call: (1) its GPU tests (the retrieval against the reference, the step),
# (2) autotune's rerank with the opt-in (every tile with and without the tables, one run), (3) step-bench pariskv(100) and fathom(48) in HBM at
# 32k and 1M under the committed record and under it with the opt-in run's entries merged, (4)
# ncu's time per kernel of the pariskv(100) HBM 1M step both ways, and (5) step-bench from host
# at 1M both ways. On a GPU other than the H200 the committed record does not fit: the
# "committed" runs then use the runtime's default tiles, and the merged record is the opt-in run's.
# The "dt" runs also split the query kernel over one block a subspace (`--pariskv-query-blocks
# 16`, `PariskvQuerySpec::subspace_blocks`; exact on the CPU, `cpu_pariskv_query`): one block a
# KV head ranks 16 subspaces in turn, ~45 us a layer at every context by its structure; ncu's
# per-kernel times tell the two changes apart (`pariskv_query` against `pariskv_rerank`).
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=560 bash bench/calls/h200-next-pariskv-decode-table.sh
set -u
DEFAULT_BUDGET=560 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
export FATHOM_KERNEL_CACHE=/tmp/kc-dt
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 220) ./tests/gpu_pariskv-test --ignored --test-threads=1 \
    retrieval_with_decode_tables_matches_the_reference retrieval_with_split_query_matches_the_reference \
    > $L/gpu_pariskv.log 2>&1 )
el gpu_pariskv decode tables, split query rc=$?
( cd /tmp/fg/.gpu && timeout -k 10 $(lim 120) ./tests/gpu_pariskv_step-test --ignored --test-threads=1 \
    gpu_pariskv_step_d128_g4_decode_tables gpu_pariskv_step_d128_g4_split_query > $L/gpu_pariskv_step.log 2>&1 )
el gpu_pariskv_step decode tables, split query rc=$?
timeout -k 10 $(lim 150) $B/autotune --model qwen3-8b --only pariskv_rerank --opt-in pariskv-decode-table \
  --timings --out $L/tune-dt > $L/autotune-dt.txt 2>&1
el autotune rerank opt-in rc=$?
merged_record $L/tune-dt $L/merged
split() { case $1 in dt*) echo "--pariskv-query-blocks 16";; esac; }  # the "dt" runs split the query
sb() {  # sb LABEL PLACEMENT CONTEXTS [env...]
  local label=$1 placement=$2 contexts=$3; shift 3
  env "$@" timeout -k 10 $(lim $(( $(left) / 3 ))) $B/step-bench --model qwen3-8b --methods "pariskv(100),fathom(48)" \
    --contexts $contexts --placement $placement --batch 1 --no-standing $(split $label) --out $L/sb-$label --commit $C > $L/step-bench-$label.txt 2>&1
  el step-bench $label rc=$?
}
if [ $(left) -gt 90 ]; then
  sb committed-hbm hbm 32k,1m
  sb dt-hbm hbm 32k,1m FATHOM_TUNING_DIR=$L/merged
fi
# Where a pariskv(100) HBM layer's time goes at 1M, per kernel, without and with the tables (so
# the call says what bounds the rerank even if the tables are not the whole story).
for label in committed dt; do
  [ $(left) -gt 70 ] || break
  extra=""; [ $label = dt ] && extra="FATHOM_TUNING_DIR=$L/merged"
  env $extra timeout -k 10 $(lim 60) ncu --clock-control none --csv --metrics gpu__time_duration.sum -k regex:'pariskv_(query|vote|topc|rerank)|attention|fetch' --launch-count 3000 \
    $B/step-bench --model qwen3-8b --methods "pariskv(100)" --batch 1 --placement hbm --steps 3 --slots 1 --no-standing $(split $label) --contexts 1m --out $L/ncu-sb-$label > $L/ncu-$label.csv 2> $L/ncu-$label.err
  el ncu $label rc=$?
  python3 $R/bench/calls/ncu-kernel-times.py $L/ncu-$label.csv "pariskv(100) HBM 1M step, $label, $C" > $L/ncu-$label.txt 2>&1
done
if [ $(left) -gt 60 ]; then
  sb committed-host host 1m
  sb dt-host host 1m FATHOM_TUNING_DIR=$L/merged
fi
cd $L && { cat nvidia-smi.txt timeline.txt
  grep -hE "^test |test result|panicked" gpu_pariskv.log gpu_pariskv_step.log | head -20
  echo "== autotune (rerank, opt-in)"; grep -E "^autotune:|disqualified|rerank" autotune-dt.txt | head -40; tail -9 autotune-dt.txt
  for f in step-bench-*.txt; do echo "== $f"; grep -hE "^method|^fathom|^pariskv|record" $f; done
  for f in ncu-*.txt; do echo "== $f"; head -14 $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/pariskv-dt.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
