#!/usr/bin/env bash
# The record re-made with the grid of 2026-12-05's sixth session (issue #15 item 7): the peaks
# selects (peaks_head, scan_peaks, scan_peaks_head) and the rerank's decode tables joined the
# default grid after they ran exact and sanitizer-clean on an H100 (scan-peaks: HBM step at 1M
# 8.55 -> 7.60 ms there), so the committed record (made before them) is re-made whole: the
# default run on an empty kernel cache (3,561 candidates, 1,127 kernels; target 3 minutes)
# into a scratch --out, to commit as runtime/records/<gpu>.json (on an H100 it is the first
# record of that GPU); `autotune --quick` on another empty cache (804 candidates; target 30 s);
# then under the new record step-bench fathom(48), sparq(32) in HBM at 32k and 1M, pariskv(100)
# in HBM at 1M with the query kernel as one block a head and as 16 (decode tables now in the
# grid; the split is still `--pariskv-query-blocks`), and from host at 256k and 1M as time
# allows.
# From the repository root, after `scripts/pack-gpu.sh`; carry [".gpu"]:
#   C=<commit> BUDGET=580 bash bench/calls/h200-next-record-peaks.sh
set -u
DEFAULT_BUDGET=580 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
rm -rf /tmp/kc-full && FATHOM_KERNEL_CACHE=/tmp/kc-full timeout -k 10 $(lim 260) $B/autotune --timings --out $L/tune > $L/autotune.txt 2>&1
el autotune rc=$?
if [ $(left) -gt 45 ]; then
  rm -rf /tmp/kc-quick && FATHOM_KERNEL_CACHE=/tmp/kc-quick timeout -k 10 $(lim 45) $B/autotune --quick --timings --out $L/tune-quick > $L/autotune-quick.txt 2>&1
  el autotune-quick rc=$?
fi
export FATHOM_KERNEL_CACHE=/tmp/kc-full FATHOM_TUNING_DIR=$L/tune
if [ $(left) -gt 40 ]; then
  timeout -k 10 $(lim 90) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" \
    --contexts 32k,1m --placement hbm --batch 1 --no-standing --out $L/sb --commit $C > $L/step-bench.txt 2>&1
  el step-bench hbm rc=$?
fi
for qb in 1 16; do
  [ $(left) -gt 40 ] || break
  timeout -k 10 $(lim 60) $B/step-bench --model qwen3-8b --methods "pariskv(100)" --contexts 1m \
    --placement hbm --batch 1 --no-standing --slots 2 --pariskv-query-blocks $qb --out $L/sb-pk-q$qb --commit $C \
    > $L/step-bench-pk-q$qb.txt 2>&1
  el step-bench pariskv query blocks $qb rc=$?
done
if [ $(left) -gt 60 ]; then
  timeout -k 10 $(lim $(( $(left) - 5 ))) $B/step-bench --model qwen3-8b --methods "fathom(48),sparq(32)" \
    --contexts 256k,1m --placement host --batch 1 --out $L/sb-host --commit $C > $L/step-bench-host.txt 2>&1
  el step-bench host rc=$?
fi
cd $L && { cat nvidia-smi.txt timeline.txt
  for f in sb*/*.json; do echo "== $f"; python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['rows']: print(r['method'], r['context'], r['placement'], r['status'], 'gpu_ms=%.4f'%r['gpu_ms'], 'ratio_to_sparq32=%s'%r.get('ratio_to_sparq32'), 'floor_ms=%s'%r.get('floor_ms'))
" $f; done
  for f in autotune-quick.txt autotune.txt; do echo "== $f"; grep -E "^autotune:|disqualified|^select|^pariskv_rerank" $f | head -40; tail -9 $f; done; } > $OUT/summary.txt 2>&1
tar czf $OUT/record-peaks.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
