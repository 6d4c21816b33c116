#!/usr/bin/env bash
# threads_default: small models on the CPU with the default thread count against one thread
# (TAPEGRAD_NUM_THREADS=1), on an idle machine and on one where another process keeps a core busy
# (a shell loop, started for the loaded half and stopped after it). The models: the digits CNN and
# MLP (bench/cnn_epoch, the median epoch of EPOCHS) and examples/gpt's tiny config (the median
# step of 30). Each pair runs ROUNDS times, taking turns; the table gives the medians of all rounds.
#
#   BUILD=DIR [ROUNDS=3] [EPOCHS=10] [LOADS="0 1"] bench/threads_default.sh
#
# BUILD holds bench/cnn_epoch and examples/gpt (default build). Run it alone on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${BUILD:-build}") rounds=${ROUNDS:-3} epochs=${EPOCHS:-10} loads=${LOADS:-"0 1"}
python=$(command -v python3)
w=$(mktemp -d)
busy=
stop_busy() { [[ -z $busy ]] || { kill "$busy" 2> /dev/null; wait "$busy" 2> /dev/null || true; busy=; }; }
trap 'stop_busy; rm -rf "$w"' EXIT

/usr/bin/python3 bench/cnn_epoch_torch.py data "$w/digits.bin" > /dev/null 2>&1 ||
  "$python" - "$w/digits.bin" <<'PY'  # without numpy: the same file layout, uniform pixels
import random, struct, sys
random.seed(37)
n = 1797
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<q", n))
    f.write(struct.pack(f"<{n * 64}f", *(random.randrange(17) / 16 for _ in range(n * 64))))
    f.write(struct.pack(f"<{n}i", *(random.randrange(10) for _ in range(n))))
PY
median_of() { "$python" -c 'import statistics, sys; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.2f}")' "$@"; }
run() {  # run MODEL [THREADS]: its times in ms, one a line; THREADS empty: the default
  local with=(env -u TAPEGRAD_NUM_THREADS)
  [[ -z ${2:-} ]] || with=(env TAPEGRAD_NUM_THREADS="$2")
  case $1 in
    cnn | mlp) "${with[@]}" "$build/bench/cnn_epoch" "$w/digits.bin" "$epochs" 0 "$1" | awk '/^epoch_ms/ {print $2}' ;;
    gpt) (cd "$w" && "${with[@]}" "$build/examples/gpt" train --steps 30) | awk '/^median step/ {print $3}' ;;
  esac
}
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores available; default threads: $(nproc) cpus, the physical cores among them"
echo "| model | machine | default threads (median ms) | TAPEGRAD_NUM_THREADS=1 (median ms) | default / one |"
echo "|---|---|---|---|---|"
for load in $loads; do
  stop_busy
  if [[ $load == 1 ]]; then
    sh -c 'while :; do :; done' &
    busy=$!
  fi
  for model in cnn mlp gpt; do
    : > "$w/default" && : > "$w/one"
    for ((r = 0; r < rounds; ++r)); do
      run "$model" >> "$w/default"
      run "$model" 1 >> "$w/one"
    done
    a=$(median_of $(cat "$w/default")) b=$(median_of $(cat "$w/one"))
    echo "| $model | $([[ $load == 1 ]] && echo "a core busy" || echo idle) | $a | $b | $("$python" -c "print(f'{$a / $b:.2f}')") |"
  done
done
