#!/usr/bin/env bash
# 2026-12-05 (issue #15 item 4): the tensor-core scan is exact but no faster at 1M in HBM
# (autotune: w8 t128 tc 0.1333 ms against the plain w8 t64 0.1353, every tile of both within
# ~0.133-0.16 ms whatever its instruction count). kernel-bench at 1M with `--tensor-cores` (both
# variants, six HBM tiles), then the same with a build whose scans never store their scores
# (`if (token < n && ld_scores < 0)`: what the score writes cost), then ncu's sections and
# source counters of the tensor-core scan at 1M, inside autotune's 1M scan case. From the
# repository root, after `scripts/pack-gpu.sh` and building kernel-bench twice into
# .gpu/var/kernel-bench{,-nowrite}; carry [".gpu"]:
#   C=<commit> BUDGET=300 bash bench/calls/h200-2026-12-05c-ncu-scan-tc.sh
set -u
DEFAULT_BUDGET=300 . bench/calls/budget.sh
C=${C:-unknown}; export FATHOM_COMMIT=$C
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia-smi.txt 2>&1
unpack; el unpacked
V=$R/.gpu/var; chmod +x $V/*
for kb in kernel-bench kernel-bench-nowrite; do
  FATHOM_KERNEL_CACHE=/tmp/kc-$kb timeout -k 10 $(lim 60) $V/$kb --tensor-cores --budgets 48 --commit $C > $L/$kb.txt 2>&1; el $kb rc=$?
done
export FATHOM_KERNEL_CACHE=/tmp/kc-prof FATHOM_JIT_LINEINFO=1
S="--section SourceCounters --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis --section InstructionStats --section ComputeWorkloadAnalysis"
timeout -k 10 $(( $(left) - 25 )) ncu --clock-control none $S -k regex:'scan_d128_g4_b64_s512_w8_hbm_t128_tc' --launch-skip 3 --launch-count 1 -o $L/scan-tc-1m \
  $B/autotune --model qwen3-8b --only scan/hbm/1m --opt-in scan-tc --out $L/tune-scan > $L/ncu-scan-tc-1m.txt 2>&1
el ncu scan tc 1m rc=$?
ncu -i $L/scan-tc-1m.ncu-rep --page details --csv > $L/details-scan-tc-1m.csv 2>&1
ncu -i $L/scan-tc-1m.ncu-rep --page source --csv --print-source sass > $L/source-sass-scan-tc-1m.csv 2>&1
el exported
cd $L && { cat nvidia-smi.txt timeline.txt; for kb in kernel-bench kernel-bench-nowrite; do echo "== $kb"; grep -E "scan" $kb.txt | head -30; done; tail -3 ncu-scan-tc-1m.txt; wc -c details-scan-tc-1m.csv source-sass-scan-tc-1m.csv; } > $OUT/summary.txt 2>&1
rm -f $L/scan-tc-1m.ncu-rep
tar czf $OUT/ncu-scan-tc.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
