#!/usr/bin/env bash
# Runs the packed GPU tests under compute-sanitizer (memcheck, racecheck, initcheck, synccheck)
# and writes a summary. Build the tests here with ../shared/tools/gpu-pack (or `cargo test
# --release --no-run` on a GPU machine), then on the GPU machine:
#
#   bash scripts/sanitize.sh [--tools memcheck,racecheck] [--tests gpu_scan,gpu_select] [FILTER]
#
# FILTER selects tests by name as cargo's test filter does. Logs go to $OUT (or .gpu/sanitize);
# the summary (one line per binary and tool: errors reported) to summary.txt there. Exits non-zero
# when any tool reports an error or a test fails under it.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools=memcheck,racecheck,initcheck,synccheck
tests=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tools) tools=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    *) break ;;
  esac
done
filter=("$@")
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$sanitizer" ] || { echo "sanitize.sh: compute-sanitizer not found (install the CUDA toolkit)"; exit 2; }
logs=${OUT:-.gpu/sanitize}; mkdir -p "$logs"
summary="$logs/summary.txt"
{ echo "# compute-sanitizer over fathom's GPU tests"; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$summary"
fail=0
for bin in .gpu/tests/gpu_*; do
  name=$(basename "$bin"); name=${name%-test}
  if [ -n "$tests" ] && [[ ",$tests," != *",$name,"* ]]; then continue; fi
  for tool in ${tools//,/ }; do
    log="$logs/$name.$tool.log"
    "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 \
      "$bin" --ignored --test-threads=1 "${filter[@]}" > "$log" 2>&1
    rc=$?
    errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+' "$log" | awk '{s+=$3} END {print s+0}')
    result=$(grep -E '^test result' "$log" | tail -1)
    printf '%-16s %-10s rc=%-3s errors=%-4s %s\n' "$name" "$tool" "$rc" "$errors" "$result" | tee -a "$summary"
    [ "$rc" -eq 0 ] && [ "$errors" -eq 0 ] || fail=1
  done
done
echo "sanitize: $([ $fail -eq 0 ] && echo clean || echo ERRORS)" | tee -a "$summary"
exit $fail
