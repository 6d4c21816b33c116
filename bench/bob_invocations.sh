#!/usr/bin/env bash
# Times whole `bob train --resume` invocations, each its own process: start-up, reading the record
# and the checkpoint, 10 updates, the atomic checkpoint write (fsync included), predictions.
# Prints the median, the fastest and the slowest of N runs (a benchmark, not a timed test).
#
#   bench/bob_invocations.sh [BOB] [N]       defaults: build/apps/bob, 50 runs
#
# Uses hyperfine when it is installed (the same command, its statistics), else bash's clock.
set -euo pipefail
BOB=${1:-build/apps/bob}
RUNS=${2:-50}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$BOB" fixture --prompt "Down the Rabbit" --prompt "" --prompt "she had peeped into th" --out "$work/in.rec" > /dev/null
"$BOB" train --input "$work/in.rec" --checkpoint "$work/bob.ckpt" --fresh > /dev/null
command=("$BOB" train --input "$work/in.rec" --checkpoint "$work/bob.ckpt" --resume)

if command -v hyperfine > /dev/null; then
  hyperfine --warmup 3 --runs "$RUNS" --export-json "$work/times.json" "${command[*]} > /dev/null"
  python3 -c "import json, sys; r = json.load(open(sys.argv[1]))['results'][0]; \
print('median %.2f ms, min %.2f ms, max %.2f ms over %d invocations' % \
(r['median'] * 1e3, r['min'] * 1e3, r['max'] * 1e3, len(r['times'])))" "$work/times.json"
  exit 0
fi

for _ in 1 2 3; do "${command[@]}" > /dev/null; done  # warm-up
times=()
for ((k = 1; k <= RUNS; ++k)); do
  start=$EPOCHREALTIME
  "${command[@]}" > /dev/null
  end=$EPOCHREALTIME
  times+=("$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", (b - a) * 1000 }')")
  (( k % 10 == 0 )) && printf "\r%d/%d invocations" "$k" "$RUNS" >&2
done
printf "\r\033[K" >&2
printf '%s\n' "${times[@]}" | sort -n | awk '{ t[NR] = $1 } END {
  median = NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
  printf "median %.2f ms, min %.2f ms, max %.2f ms over %d invocations\n", median, t[1], t[NR], NR }'
