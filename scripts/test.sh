#!/usr/bin/env bash
# The README's second command: every test, in four builds, then the fuzzers briefly.
#  1. release (CUDA compiled when nvcc is found; GPU tests SKIP with a line saying why when no device
#     is present: scripts/gpu_check.sh runs them on a GPU machine);
#  2. AddressSanitizer + UndefinedBehaviorSanitizer, halting on the first report (CPU only: the CUDA
#     runtime and ASan's shadow memory do not mix; compute-sanitizer checks the CUDA code on the GPU);
#  3. ThreadSanitizer over the CPU suites (tests/tensor stresses the thread pool from several threads);
#  4. scripts/fuzz.sh: each libFuzzer target of tests/fuzz for FUZZ_SECONDS (default 10) with clang.
# Ends with one line: "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
# what the tests need, installed where it is missing (scripts/deps.sh), so that only GPU tests skip
source scripts/deps.sh
ensure_test_tools || exit 1
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
jobs=${JOBS:-$(nproc)}
passed=0 failed=0 skipped=0
# a sanitizer report fails the test that made it, never only prints
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

run_suite() {  # run_suite DIR [meson setup options...]
  local dir=$1
  shift
  if [[ -d $dir ]]; then meson setup --reconfigure "$dir" "$@" > "$dir.setup.log" 2>&1
  else meson setup "$dir" "$@" > "$dir.setup.log" 2>&1; fi || { cat "$dir.setup.log"; failed=$((failed + 1)); return; }
  echo "== building $dir"
  scripts/stale_cuda_objects.sh "$dir"
  ninja -C "$dir" -j "$jobs" > "$dir.ninja.log" 2>&1 || { tail -n 40 "$dir.ninja.log"; failed=$((failed + 1)); return; }
  echo "== testing $dir"
  meson test -C "$dir" --print-errorlogs --num-processes "$jobs" 2>&1 | tee "$dir.test.log" | grep -vE '^ *[0-9]+/[0-9]+ .* OK '
  local ok fail skip
  ok=$(awk '/^Ok:/ {print $2}' "$dir.test.log")
  fail=$(awk '/^(Fail|Timeout|Unexpected Pass):/ {s += $NF} END {print s + 0}' "$dir.test.log")
  skip=$(awk '/^Skipped:/ {print $2}' "$dir.test.log")
  passed=$((passed + ${ok:-0})) failed=$((failed + fail)) skipped=$((skipped + ${skip:-0}))
  [[ -n $ok ]] || failed=$((failed + 1))  # meson test itself did not finish
}

sanitized=(-Dcuda=disabled -Dbench=disabled -Db_lundef=false -Dbuildtype=debugoptimized)
run_suite build
run_suite build-asan -Db_sanitize=address,undefined -Dcpp_args=-fno-sanitize-recover=undefined "${sanitized[@]}"
run_suite build-tsan -Db_sanitize=thread "${sanitized[@]}"

echo "== fuzzing (scripts/fuzz.sh ${FUZZ_SECONDS:-10})"
if command -v clang++ > /dev/null; then
  scripts/fuzz.sh "${FUZZ_SECONDS:-10}" | tee build-fuzz.test.log
  passed=$((passed + $(awk '/ passed, / {print $1}' build-fuzz.test.log | tail -n 1)))
  failed=$((failed + $(awk '/ passed, / {print $3}' build-fuzz.test.log | tail -n 1)))
else
  echo "fuzz: SKIP: no clang++ (scripts/deps.sh installs it)"
  skipped=$((skipped + 1))
fi

echo
echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
