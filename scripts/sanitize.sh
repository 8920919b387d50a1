#!/usr/bin/env bash
# Runs fathom's GPU code under compute-sanitizer: memcheck, racecheck, initcheck and synccheck over
# every packed GPU test binary (.gpu/tests/gpu_*, their ignored tests) and the programs that
# launch kernels (.gpu/bin/fathom-soak, kernel-bench). Build them here with
# ../shared/tools/gpu-pack, carry .gpu/, then on the GPU machine:
#
#   bash scripts/sanitize.sh [--tools memcheck,racecheck] [--tests gpu_scan,fathom-soak]
#                            [--jobs 4] [--timeout 300] [--full] [FILTER...]
#
# Logs go to $OUT (or .gpu/sanitize), one per (binary, tool); summary.txt there holds one line per
# (binary, tool): the exit status, the tool's error count and the test result line. Exits non-zero
# when any tool reports an error, a test fails under it, or a run hits the timeout.
#
# What runs (the default fits in about 8 minutes on one H200 with 4 jobs at a time; --full runs
# every test with every tool, which takes far longer: split it with --tests):
# - memcheck, initcheck, synccheck: every GPU test of every binary, except
#   * gpu_decode: only gpu_decode_klt_g7 (20k-50k tokens, every method incl. loki, graphs);
#     gpu_decode_raw_g4 runs the same kernels at 300k tokens, too long under a sanitizer;
#   * gpu_faults: not the two out-of-memory tests (they take all device memory, which the tool
#     needs for itself; they are plain tests otherwise).
# - racecheck (shared-memory hazards; slow): one small test per kernel family and the step:
#   the RACECHECK table below. gpu_decode and gpu_faults are not run under racecheck (their
#   kernels are the ones covered by gpu_step and the families' own tests).
# - programs: fathom-soak (200 steps over 40,000 tokens, a reference check at 100 and 200; 20
#   steps under racecheck) and kernel-bench (65,536 tokens, budget 48, 3 repetitions), under every
#   tool. Under a tool the soak reports the device's free memory but does not check it. autotune is left
#   out (it would write a tuning record timed under the tool into the cache), fathom-jit-report
#   too (it compiles and loads, launches nothing), except with --full.
# FILTER replaces the default test selection of every binary (cargo test's filter syntax).
# Runs go 4 at a time (--jobs): the GPU has room for them and the tools are mostly CPU-bound.
# Under the tool FATHOM_SANITIZER=1 is set: the random-frees fault test then skips its check of
# the device's free memory, which counts the tool's own allocations.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools=memcheck,racecheck,initcheck,synccheck
only=""
jobs=4
timeout_s=300
full=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tools) tools=$2; shift 2 ;;
    --tests) only=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --full) full=1; shift ;;
    *) break ;;
  esac
done
filter=("$@")
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$sanitizer" ] || { echo "sanitize.sh: compute-sanitizer not found (install the CUDA toolkit)"; exit 2; }
[ -d .gpu/tests ] || { echo "sanitize.sh: no .gpu/tests: build them with ../shared/tools/gpu-pack"; exit 2; }
logs=${OUT:-.gpu/sanitize}; mkdir -p "$logs/lines"
summary="$logs/summary.txt"
# FATHOM_COMMIT names the build when the copy here is not the checkout the binaries came from.
commit=${FATHOM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  echo "# compute-sanitizer over fathom's GPU tests and programs, commit $commit"
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$sanitizer" --version | tail -1
} > "$summary"

# Racecheck's tests per binary (test-name filters); a binary not listed is not run under it.
declare -A RACECHECK=(
  [gpu_attention]="gpu_attention_chain_oracle_select_fetch_attention_hbm"
  [gpu_encode]="gpu_encode_one_block gpu_encode_append_raw_after_bulk_prefill"
  [gpu_fetch]="gpu_fetch_union_rows_hbm"
  [gpu_jit]="a_kernel_through_the_cache_computes_what_a_direct_build_computes"
  [gpu_landmark]="gpu_landmark_build_and_scan_hbm"
  [gpu_oracle]="gpu_oracle_exact_scores_hbm"
  [gpu_plan]="gpu_plan_fathom_edges gpu_plan_sparq_matches_reference"
  [gpu_scan]="gpu_scan_one_block gpu_scan_host_fused_matches_reference"
  [gpu_pariskv]="index_build_matches_the_reference bad_keys_are_reported_and_not_written"
  [gpu_pariskv_step]="gpu_pariskv_step_d64_g4"
  [gpu_select]="gpu_select_short_and_boundary_lengths gpu_select_compact_sources_and_fallbacks"
  [gpu_smoke]="a_compiled_kernel"
  [gpu_step]="gpu_step_raw_store_g4"
  [gpu_store]="capacity_and_bad_input_leave_the_store_usable"
)
# The other tools' selection where it is not every test.
declare -A SELECTION=(
  [gpu_decode]="gpu_decode_klt_g7"
  [gpu_faults]="--skip runs_out"
)
# Programs and their arguments (FILTER does not apply to them).
declare -A PROGRAMS=(
  [fathom-soak]="--steps 200 --check-every 100 --tokens 40000 --seed 7"
  [kernel-bench]="--tokens 65536 --budgets 48 --reps 3"
)
[ $full -eq 1 ] && PROGRAMS[fathom-jit-report]="--model qwen3-8b"
# Racecheck runs the soak's kernels (those of gpu_step) ~100x slower: fewer steps, still two checks.
declare -A RACECHECK_PROGRAMS=(
  [fathom-soak]="--steps 20 --check-every 10 --tokens 40000 --seed 7"
)

# One run: binary $1 (name $2) under tool $3 with arguments $4...; writes its log and its
# summary line.
run_one() {
  local bin=$1 name=$2 tool=$3; shift 3
  local log="$logs/$name.$tool.log"
  FATHOM_SANITIZER=1 timeout --signal=INT --kill-after=30 "$timeout_s" \
    "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 "$bin" "$@" > "$log" 2>&1
  local rc=$?
  local errors result
  errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+' "$log" | awk '{s+=$3} END {print s+0}')
  result=$(grep -E '^test result' "$log" | tail -1)
  # A program: its own last line.
  [ -z "$result" ] && result=$(grep -v '^=========' "$log" | grep -v '^\s*$' | tail -1)
  [ "$rc" -eq 124 ] && result="TIMEOUT after ${timeout_s}s; $result"
  # A test filter that matches nothing would pass silently: count it as a failure.
  if [[ "$result" == "test result: ok. 0 passed"* ]]; then rc=98; result="no test matched; $result"; fi
  printf '%-18s %-10s rc=%-3s errors=%-4s %s\n' "$name" "$tool" "$rc" "$errors" "$result" \
    > "$logs/lines/$name.$tool"
}

# Queue every (binary, tool) run, at most $jobs at a time.
order=()
running=0
queue() {
  order+=("$2.$3")
  run_one "$@" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
}
selected() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }

for tool in ${tools//,/ }; do
  for bin in .gpu/tests/gpu_*; do
    name=$(basename "$bin"); name=${name%-test}
    selected "$name" || continue
    args=(--ignored --test-threads=1)
    if [ ${#filter[@]} -gt 0 ]; then
      args+=("${filter[@]}")
    elif [ $full -eq 0 ] && [ "$tool" = racecheck ]; then
      [ -n "${RACECHECK[$name]:-}" ] || continue
      read -r -a pick <<< "${RACECHECK[$name]}"
      args+=("${pick[@]}")
    elif [ $full -eq 0 ] && [ -n "${SELECTION[$name]:-}" ]; then
      read -r -a pick <<< "${SELECTION[$name]}"
      args+=("${pick[@]}")
    fi
    queue "$bin" "$name" "$tool" "${args[@]}"
  done
  for name in "${!PROGRAMS[@]}"; do
    selected "$name" || continue
    bin=.gpu/bin/$name
    [ -x "$bin" ] || { echo "sanitize.sh: $bin is missing (gpu-pack builds it)"; continue; }
    args_line=${PROGRAMS[$name]}
    [ $full -eq 0 ] && [ "$tool" = racecheck ] && args_line=${RACECHECK_PROGRAMS[$name]:-$args_line}
    read -r -a pick <<< "$args_line"
    queue "$bin" "$name" "$tool" "${pick[@]}"
  done
done
wait

fail=0
for key in "${order[@]}"; do
  line=$(cat "$logs/lines/$key" 2>/dev/null || echo "$key: no result")
  echo "$line" | tee -a "$summary"
  [[ "$line" =~ rc=0\ +errors=0\  ]] || fail=1
done
echo "sanitize: $([ $fail -eq 0 ] && echo clean || echo ERRORS) (${#order[@]} runs; logs in $logs)" | tee -a "$summary"
exit $fail
