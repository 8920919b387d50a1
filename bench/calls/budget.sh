# Sourced by the device-call scripts of bench/calls (from 2026-12-02's third session on): the
# call's log folder and its time budget. Before sourcing, set BUDGET (seconds the call may take)
# or accept DEFAULT_BUDGET. Gives:
#   R  the repository root (the working directory of the call), L its log folder under $OUT;
#   left     seconds of the budget left;
#   lim N    N, or what is left when that is less (at least 5): a program's `timeout`;
#   el WHAT  a timeline line, "[elapsed] WHAT", to the terminal and $L/timeline.txt.
R=$PWD; L=$OUT/logs; mkdir -p "$L"
T0=$(date +%s); BUDGET=${BUDGET:-${DEFAULT_BUDGET:-560}}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local a=$1 b; b=$(left); [ "$b" -lt "$a" ] && a=$b; [ "$a" -lt 5 ] && a=5; echo "$a"; }
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$L/timeline.txt"; }
#   unpack   the GPU pack (.gpu/pack.tar.xz) into /tmp/fg: B its programs, TESTS its test binaries.
unpack() { rm -rf /tmp/fg && mkdir -p /tmp/fg && tar xJf "$R/.gpu/pack.tar.xz" -C /tmp/fg && B=/tmp/fg/.gpu/bin TESTS=/tmp/fg/.gpu/tests; }
#   python_tests   the wheel (.gpu/wheels) into /tmp/site and python/tests into /tmp/py/tests,
#                  PYTHONPATH set: `cd /tmp/py && FATHOM_GPU_TESTS=1 python3 -m pytest tests/gpu`.
python_tests() {
  rm -rf /tmp/py && mkdir -p /tmp/py && cp -r "$R/python/tests" /tmp/py/
  python3 -m pip install -q --no-deps --no-index --no-compile --upgrade --target /tmp/site "$R"/.gpu/wheels/*.whl \
    > "$L/pip.txt" 2>&1
  el "pip rc=$?"
  export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
}
#   merged_record RUN MERGED   the record of a scratch autotune run (RUN/*.json) merged by key into
#                              a copy of the committed record of the same name, in MERGED (the
#                              run's record alone where none is committed): FATHOM_TUNING_DIR=MERGED.
merged_record() {
  local rec name
  rec=$(ls "$1"/*.json 2>/dev/null | head -1); mkdir -p "$2"
  [ -n "$rec" ] || return 1
  name=$(basename "$rec")
  if [ -f "$R/runtime/records/$name" ]; then
    cp "$R/runtime/records/$name" "$2/$name" && "$B/autotune" --merge "$rec" --into "$2/$name" > "$2.merge.txt" 2>&1
  else
    cp "$rec" "$2/$name"
  fi
  el "merged $name rc=$?"
}
#   both_rows PLACEMENT CONTEXTS   step-bench (qwen3-8b, fathom(48) and sparq(32), batch 1) with
#                                  K/V rows side by side (the default), then apart, in one call:
#                                  $L/sb-PLACEMENT, $L/step-bench-PLACEMENT-{adjacent,separate}.txt.
both_rows() {
  local rows
  for rows in adjacent separate; do
    [ "$(left)" -gt 60 ] || break
    timeout -k 10 "$(lim 110)" "$B/step-bench" --model qwen3-8b --methods "fathom(48),sparq(32)" --batch 1 --no-standing \
      --commit "${C:-unknown}" --placement "$1" --contexts "$2" --kv-rows $rows --out "$L/sb-$1" > "$L/step-bench-$1-$rows.txt" 2>&1
    el "step-bench $1 $rows rc=$?"
  done
}
#   select_checks ALGORITHMS STEP_FILTER   a select variant's GPU checks: gpu_select with only
#                                          ALGORITHMS (FATHOM_SELECT_ALGORITHMS), gpu_step's tests
#                                          matching STEP_FILTER, compute-sanitizer on the short and
#                                          boundary lengths: $L/gpu_select.log, $L/gpu_step.log,
#                                          $L/sanitize/. Needs `unpack` first.
select_checks() {
  ( cd /tmp/fg/.gpu && FATHOM_SELECT_ALGORITHMS=$1 timeout -k 10 "$(lim 120)" ./tests/gpu_select-test --ignored \
      --test-threads=1 > "$L/gpu_select.log" 2>&1 )
  el "gpu_select $1 rc=$?"
  ( cd /tmp/fg/.gpu && timeout -k 10 "$(lim 60)" ./tests/gpu_step-test --ignored --test-threads=1 "$2" \
      > "$L/gpu_step.log" 2>&1 )
  el "gpu_step $2 rc=$?"
  mkdir -p "$L/sanitize"
  ( cd /tmp/fg && cp -r "$R/scripts" . && FATHOM_SELECT_ALGORITHMS=$1 OUT=$L/sanitize timeout -k 10 "$(lim 70)" \
      bash scripts/sanitize.sh --tests gpu_select --jobs 4 --timeout 60 gpu_select_short_and_boundary_lengths \
      > "$L/sanitize.txt" 2>&1 )
  el "sanitize rc=$?"
}
#   sb_hbm LABEL CONTEXTS [VAR=VALUE...]   step-bench (qwen3-8b, fathom(48) and sparq(32), batch 1,
#                                          HBM) at CONTEXTS with the VARs set, in half the time
#                                          left: $L/sb-LABEL, $L/step-bench-LABEL.txt.
sb_hbm() {
  local label=$1 contexts=$2; shift 2
  env "$@" timeout -k 10 "$(lim $(( $(left) / 2 )))" "$B/step-bench" --model qwen3-8b --methods "fathom(48),sparq(32)" \
    --contexts "$contexts" --placement hbm --batch 1 --no-standing --out "$L/sb-$label" --commit "${C:-unknown}" \
    > "$L/step-bench-$label.txt" 2>&1
  el "step-bench $label rc=$?"
}
#   ncu_step_times CELL...   ncu's time per kernel (clock control off) of step-bench (qwen3-8b,
#                            fathom(48), batch 1, 3 steps) in each CELL, "PLACEMENT CONTEXT"
#                            (e.g. "host 1m"), while over 40 s are left: $L/times-PLACEMENT-CONTEXT.txt.
#                            NCU_CACHE=none keeps the caches as the kernel before left them (ncu
#                            flushes them before every kernel by default, which a step never
#                            does): files $L/times-PLACEMENT-CONTEXT-warm.txt. Needs `unpack` first.
ncu_step_times() {
  local cell cache=${NCU_CACHE:-all} tag=""
  [ "$cache" = all ] || tag=-warm
  for cell in "$@"; do
    set -- $cell
    [ "$(left)" -gt 40 ] || break
    timeout -k 10 "$(lim 90)" ncu --clock-control none --cache-control "$cache" --csv --metrics gpu__time_duration.sum -k regex:fathom --launch-count 1500 \
      "$B/step-bench" --model qwen3-8b --methods "fathom(48)" --batch 1 --steps 3 --slots 1 --no-standing \
      --placement "$1" --contexts "$2" --out "$L/ncu-sb-$1-$2$tag" > "$L/ncu-step-$1-$2$tag.csv" 2> "$L/ncu-step-$1-$2$tag.err"
    el "ncu $1 $2 cache $cache rc=$?"
    python3 "$R/bench/calls/ncu-kernel-times.py" "$L/ncu-step-$1-$2$tag.csv" "$1 $2 cache $cache" > "$L/times-$1-$2$tag.txt" 2>&1
  done
}
#   all_gpu_tests   every GPU test: the Python GPU tests alone first (their memory test reads the
#                   device's free memory), then every Rust test binary but gpu_faults, six at a
#                   time, the slowest first (330 s each at most, gpu_select and gpu_pariskv 450),
#                   then gpu_faults: $L/pytest_gpu.log,
#                   $L/<binary>.log, $L/rc.txt. Needs `unpack` first and the wheel in .gpu/wheels.
all_gpu_tests() {
  local order all list
  python_tests
  ( cd /tmp/py && FATHOM_GPU_TESTS=1 timeout -k 10 "$(lim 100)" python3 -m pytest -q -rA --timeout 90 tests/gpu/test_gpu.py \
      > "$L/pytest_gpu.log" 2>&1; el "pytest gpu rc=$?" )
  order="gpu_select gpu_scan gpu_pariskv gpu_step gpu_decode gpu_pariskv_step gpu_plan gpu_encode gpu_store"
  all=$(ls "$TESTS" | sed 's/-test$//' | grep -v '^gpu_faults$')
  list=$( { for t in $order; do echo "$all" | grep -qx "$t" && echo "$t"; done
            echo "$all" | grep -vxF -f <(echo $order | tr ' ' '\n'); } )
  # gpu_select and gpu_pariskv (started first) need ~400 s of their own; the others 330 at most.
  ( cd "$TESTS/.." && echo "$list" | SLOW_LIMIT=$(lim 450) LIMIT=$(lim 330) xargs -P 6 -I{} bash -c 'case {} in \
      gpu_select|gpu_pariskv) t=$SLOW_LIMIT;; *) t=$LIMIT;; esac; timeout -k 10 $t ./tests/{}-test --ignored \
      --test-threads=1 > '"$L"'/{}.log 2>&1; echo "{} rc=$?"' > "$L/rc.txt" )
  el "rust tests done"
  ( cd "$TESTS/.." && timeout -k 10 "$(lim 60)" ./tests/gpu_faults-test --ignored --test-threads=1 > "$L/gpu_faults.log" 2>&1
    echo "gpu_faults rc=$?" >> "$L/rc.txt" )
  el "gpu_faults done"
}
#   test_summary   one line a test log of $L (result, count ok, the first failures) and the
#                  Python GPU tests' result.
test_summary() {
  local f
  for f in "$L"/gpu_*.log; do
    echo "$(basename "$f"): $(grep -E '^test result' "$f" | tail -1) ($(grep -cE '^test .* ok$' "$f") ok)"
    grep -E '^test .* FAILED|panicked at' "$f" | head -5
  done
  grep -E "passed|failed" "$L/pytest_gpu.log" | tail -3
}
#   step_bench LABEL PLACEMENT CONTEXTS SECONDS [FLAG...]   step-bench (qwen3-8b, fathom(48) and
#                  sparq(32), batch 1, no standing cell) with the FLAGs, at most SECONDS, while
#                  over 50 s are left: $L/sb-LABEL, $L/step-bench-LABEL.txt. Needs `unpack` first.
step_bench() {
  local label=$1 placement=$2 contexts=$3 seconds=$4
  shift 4
  [ "$(left)" -gt 50 ] || return
  timeout -k 10 "$(lim "$seconds")" "$B/step-bench" --model qwen3-8b --methods "fathom(48),sparq(32)" \
    --contexts "$contexts" --placement "$placement" --batch 1 --no-standing "$@" --out "$L/sb-$label" \
    --commit "${C:-unknown}" > "$L/step-bench-$label.txt" 2>&1
  el "step-bench $label rc=$?"
}
#   ncu_kernels NAME LABEL REGEX CONTEXT [FLAG...]   ncu's time and warp instructions of the
#                                kernels matching REGEX (clock control off, caches as the step
#                                leaves them) in step-bench HBM CONTEXT (qwen3-8b, fathom(48),
#                                batch 1, 3 steps) with FLAGs: $L/ncu-NAME-LABEL.csv,
#                                $L/times-NAME-LABEL.txt. Needs `unpack` first.
ncu_kernels() {
  [ "$(left)" -gt 45 ] || return
  local name=$1 label=$2 regex=$3 context=$4; shift 4
  FATHOM_KERNEL_CACHE=/tmp/kc-$label timeout -k 10 "$(lim ${NCU_LIMIT:-60})" ncu --clock-control none --cache-control none --csv \
    --metrics gpu__time_duration.sum,smsp__inst_executed.sum -k "regex:$regex" --launch-count 400 \
    "$B/step-bench" --model qwen3-8b --methods "fathom(48)" --batch 1 --steps 3 --slots 1 --no-standing --placement hbm \
    --contexts "$context" "$@" --out "$L/ncu-sb-$name-$label" > "$L/ncu-$name-$label.csv" 2> "$L/ncu-$name-$label.err"
  el "ncu $name $label rc=$?"
  python3 "$R/bench/calls/ncu-kernel-times.py" "$L/ncu-$name-$label.csv" "hbm $context $label" > "$L/times-$name-$label.txt" 2>&1
}
#   ncu_select LABEL [FLAG...]   ncu_kernels of the select kernels at 32k: $L/ncu-select-LABEL.csv,
#                                $L/times-select-LABEL.txt.
ncu_select() {
  local label=$1; shift
  ncu_kernels select "$label" fathom_select 32k "$@"
}
#   ncu_sampling TAG REGEX [FLAG...]   ncu's finest warp-state sampling (--warp-sampling-interval 0;
#                                ncu's default gives ~60 samples a 9 us launch) of one launch of
#                                the kernels matching REGEX in step-bench HBM at $CONTEXT (32k
#                                when unset; qwen3-8b, fathom(48), batch 1) with FLAGs:
#                                $L/TAG-sass.csv (each SASS
#                                instruction's counters and stall samples; bench/calls/sass-lines.py
#                                puts them on source lines) and $L/TAG-details.csv. Needs `unpack`.
ncu_sampling() {
  [ "$(left)" -gt 40 ] || return
  local tag=$1 regex=$2 context=${CONTEXT:-32k}; shift 2
  FATHOM_KERNEL_CACHE=/tmp/kc-sampling timeout -k 10 "$(lim 60)" ncu --clock-control none --cache-control none \
    --section WarpStateStats --section SourceCounters --section LaunchStats --section SpeedOfLight \
    --warp-sampling-interval 0 --import-source no -k "regex:$regex" --launch-skip 60 --launch-count 1 -o "$L/$tag" \
    "$B/step-bench" --model qwen3-8b --methods "fathom(48)" --batch 1 --steps 3 --slots 1 --no-standing \
    --placement hbm --contexts "$context" "$@" --out "/tmp/sb-sampling-$tag" > "$L/ncu-$tag.txt" 2>&1
  el "ncu sampling $tag rc=$?"
  ncu --import "$L/$tag.ncu-rep" --page source --csv --print-source sass > "$L/$tag-sass.csv" 2>&1
  ncu --import "$L/$tag.ncu-rep" --page details --csv > "$L/$tag-details.csv" 2>&1
  rm -f "$L/$tag.ncu-rep"
}
#   ab_start   the start of a call that times a change against the build before it: the GPU's
#              name and driver ($L/nvidia-smi.txt), `unpack`, and the step-bench of that build
#              (.gpu/old/step-bench-old.xz, packed before the change) as /tmp/fg/old/step-bench.
ab_start() {
  nvidia-smi --query-gpu=name,driver_version --format=csv > "$L/nvidia-smi.txt" 2>&1
  unpack && el unpacked
  mkdir -p /tmp/fg/old && xz -dc "$R/.gpu/old/step-bench-old.xz" > /tmp/fg/old/step-bench && chmod +x /tmp/fg/old/step-bench
}
#   gpu_tests BINARY SECONDS FILTER...   the ignored tests of .gpu/tests/BINARY-test (e.g. gpu_scan)
#                                        matching a FILTER, one at a time, at most SECONDS:
#                                        $L/BINARY.log. Needs `unpack` first.
gpu_tests() {
  local bin=$1 seconds=$2; shift 2
  ( cd /tmp/fg/.gpu && timeout -k 10 "$(lim "$seconds")" "./tests/$bin-test" --ignored --test-threads=1 "$@" \
      > "$L/$bin.log" 2>&1 )
  el "$bin $* rc=$?"
}
#   sanitize_test BINARY TEST SECONDS   compute-sanitizer's memcheck and racecheck on one test of
#                                       BINARY, side by side, at most SECONDS: $L/sanitize/.
sanitize_test() {
  mkdir -p "$L/sanitize"
  ( cd /tmp/fg && cp -r "$R/scripts" . && OUT=$L/sanitize timeout -k 10 "$(lim "$3")" bash scripts/sanitize.sh \
      --tools memcheck,racecheck --tests "$1" --jobs 2 --timeout $(( $3 - 5 )) "$2" > "$L/sanitize.txt" 2>&1 )
  el "sanitize $1 $2 rc=$?"
}
