#!/usr/bin/env bash
# Every GPU test at the defaults of 2026-12-06's fourteenth session: the tail scored in the
# plan's launch (`Tiles::tail_in_plan`, now on: every step of every test runs it) and the
# select's peaks pass walking its own pointer (`templates/select_peaks.cuh.tera`,
# `top_k_of_peaks`). The Python GPU tests alone first (their memory test reads the device's
# free memory), then every Rust test binary, six at a time, the slowest first, gpu_faults
# last; then the peaks selects' SASS before and after (nvdisasm, where the machine has it) for
# the instruction counts of the peaks loop.
# (Rewritten after it ran on `all_gpu_tests` and `test_summary` of budget.sh, which do the same.)
# From the repository root, after `scripts/pack-gpu.sh && scripts/build-wheel.sh` and
# `codegen machine-code` of the peaks selects into .gpu/cubin-{old,new}; carry [".gpu"]:
#   C=$(git rev-parse --short HEAD) BUDGET=470 bash bench/calls/h100-2026-12-06t-suite.sh
set -u
DEFAULT_BUDGET=470 . bench/calls/budget.sh
export FATHOM_COMMIT=${C:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/nvidia-smi.txt 2>&1
unpack && el unpacked
export FATHOM_SELECT_ALGORITHMS=radix,compact,onepass,fused,peaks,peaks_head,scan_peaks,scan_peaks_head
all_gpu_tests
ND=$(command -v nvdisasm || ls /usr/local/cuda*/bin/nvdisasm 2>/dev/null | head -1)
mkdir -p $L/sass
for v in old new; do for f in $R/.gpu/cubin-$v/*.cubin; do [ -n "$ND" ] && [ -f "$f" ] && \
  timeout -k 5 20 $ND -c "$f" > $L/sass/$v-$(basename $f .cubin).sass 2>&1; done; done
el "nvdisasm ${ND:-absent}"
cd $L && { cat nvidia-smi.txt timeline.txt rc.txt; test_summary; wc -l sass/* 2>/dev/null; } > $OUT/summary.txt 2>&1
tar czf $OUT/suite.tgz -C $OUT logs && rm -rf $L
cat $OUT/summary.txt
