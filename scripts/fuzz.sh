#!/usr/bin/env bash
# fuzz.sh [SECONDS=60]: the libFuzzer targets of tests/fuzz, each for SECONDS seconds.
#
# Builds build-fuzz (clang, AddressSanitizer + UndefinedBehaviorSanitizer that halt on the first
# report, -Dfuzz=true), seeds each target with files the programs themselves write (tiny_step's
# configs, traces and tape dumps, bob's records and checkpoints; tests/fixtures/nn's small state
# dict and safetensors files), then runs each target. A finding
# (a crash, a sanitizer report, a timeout, a leak) is saved under build-fuzz/findings/ and fails the
# run. Prints one line a target: "fuzz NAME: N executions in S s, no finding" or what it found.
# Ends with "N passed, N failed". scripts/test.sh runs it briefly on every test run.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
dir=build-fuzz
if [[ -d $dir ]]; then opts=(--reconfigure); else opts=(); fi
CC=clang CXX=clang++ meson setup "${opts[@]}" "$dir" -Dfuzz=true -Dtests=false -Dcuda=disabled -Dbench=disabled \
  -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized \
  -Dcpp_args=-fno-sanitize-recover=all > "$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; echo "0 passed, 1 failed"; exit 1; }
ninja -C "$dir" > "$dir.ninja.log" 2>&1 || { tail -n 30 "$dir.ninja.log"; echo "0 passed, 1 failed"; exit 1; }

# seed corpora, made by the programs
corpus=$dir/corpus findings=$dir/findings
rm -rf "$corpus"
mkdir -p "$corpus"/{json,config,tape,envelope,record,state_dict} "$findings"
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
cp tests/fixtures/tiny/configs/??.json "$corpus/config/"
cp tests/fixtures/tiny/configs/0?.json tests/fixtures/tiny/step-trace.json "$corpus/json/"
"$dir/apps/tiny_step" --dump-tape "$corpus/tape/good.json" > /dev/null
"$dir/apps/tiny_step" --overwrite-bug --dump-tape "$corpus/tape/bad.json" > /dev/null
"$dir/apps/tiny_step" --config tests/fixtures/tiny/configs/03.json --dump-tape "$corpus/tape/config03.json" > /dev/null
cp "$corpus/tape/good.json" "$corpus/json/tape.json"
for offset in 0 1000; do
  "$dir/apps/bob" fixture --out "$corpus/record/rec$offset" --offset $offset --prompt "the " > /dev/null
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$dir/apps/bob" train --input "$corpus/record/rec0" --checkpoint "$work/w.ckpt" --fresh > /dev/null 2>&1
cp "$work/w.ckpt" "$corpus/envelope/fresh10.ckpt"
cp tests/fixtures/nn/small.sd tests/fixtures/nn/small.safetensors "$corpus/state_dict/"

passed=0 failed=0
for target in json config tape envelope record state_dict; do
  log=$dir/fuzz_$target.log
  "$dir/tests/fuzz/fuzz_$target" "$corpus/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$findings/${target}-" -print_final_stats=1 > "$log" 2>&1
  rc=$?
  runs=$(awk '/^stat::number_of_executed_units:/ {print $2}' "$log")
  if [[ $rc -eq 0 ]]; then
    echo "fuzz $target: ${runs:-?} executions in $seconds s, no finding"
    passed=$((passed + 1))
  else
    echo "fuzz $target: FINDING (exit $rc), see $log and $findings/"
    grep -m 12 -E "ERROR|SUMMARY|runtime error|==[0-9]+==" "$log"
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
