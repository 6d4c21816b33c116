#!/usr/bin/env bash
# The README's second command: every test, twice: in the release build (CUDA compiled when nvcc is
# found; GPU tests skip with a line saying why when no device is present) and in a build with
# AddressSanitizer and UndefinedBehaviorSanitizer (CPU only: the CUDA runtime and ASan's shadow
# memory do not mix; the CUDA code is checked by compute-sanitizer on the GPU machine instead,
# scripts/gpu_check.sh). Ends with one line: "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
jobs=${JOBS:-$(nproc)}
passed=0 failed=0 skipped=0

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

run_suite build
run_suite build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized -Dcuda=disabled \
  -Dbench=disabled

echo
echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
