#!/usr/bin/env bash
# gpt_sample: `gpt sample`'s tokens per second with the KV cache against the full recompute
# (--no-cache), taking turns for ROUNDS rounds, for each count of TOKENS after a one-character
# prompt: counts up to the checkpoint's block sample inside the window, longer ones also past it
# (where the window slides and the cache restarts at every token: Note [sampling with a KV cache]
# in examples/gpt/sample.cpp). The table gives the median of each side and their ratio.
#
#   BUILD=DIR [ROUNDS=3] [TOKENS="60 200"] [THREADS=1] bench/gpt_sample.sh CKPT
#
# BUILD holds examples/gpt (default build); CKPT is a gpt checkpoint (gpt train --checkpoint).
# Run it alone on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# == 1 ]] || { sed -n '2,11p' "$0"; exit 2; }
ckpt=$1 build=${BUILD:-build} rounds=${ROUNDS:-3} tokens=${TOKENS:-"60 200"} threads=${THREADS:-1}
median_of() { python3 -c 'import statistics, sys; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.0f}")' "$@"; }
speed() {  # speed N [--no-cache]: tokens/s of one run
  TAPEGRAD_NUM_THREADS=$threads "$build/examples/gpt" sample --checkpoint "$ckpt" --prompt " " --tokens "$@" 2>&1 > /dev/null |
    sed -n 's/.*: \([0-9]*\) tokens\/s.*/\1/p'
}
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, TAPEGRAD_NUM_THREADS=$threads; $ckpt"
echo "| tokens | KV cache (tokens/s) | full recompute (tokens/s) | cache / full |"
echo "|---|---|---|---|"
for n in $tokens; do
  cached=() full=()
  for ((r = 0; r < rounds; ++r)); do
    cached+=("$(speed "$n")")
    full+=("$(speed "$n" --no-cache)")
  done
  a=$(median_of "${cached[@]}") b=$(median_of "${full[@]}")
  echo "| $n | $a | $b | $(python3 -c "print(f'{$a / $b:.1f}')") |"
done
