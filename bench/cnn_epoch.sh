#!/usr/bin/env bash
# cnn_epoch: the digits CNN's training epoch on the CPU, tapegrad (bench/cnn_epoch.cpp) against
# PyTorch (bench/cnn_epoch_torch.py) in one invocation, on the same data. For each thread count
# the two programs take turns for ROUNDS rounds of EPOCHS epochs (after a warm-up epoch each), and
# the table gives the median epoch of each side and tapegrad's time over PyTorch's.
#
#   BUILD=DIR [THREADS="1 2"] [ROUNDS=3] [EPOCHS=10] [MODEL=cnn|mlp] bench/cnn_epoch.sh
#
# BUILD holds bench/cnn_epoch (default build). PYTHON is a python3 with torch (default: the first of
# python3 and /usr/bin/python3 that imports it). Run it alone on the machine (docs/perf-cpu.md says
# the load its figures were taken at).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build} rounds=${ROUNDS:-3} epochs=${EPOCHS:-10} model=${MODEL:-cnn}
threads=${THREADS:-"1 2"}
if [[ -z ${PYTHON:-} ]]; then
  for p in python3 /usr/bin/python3; do
    if "$p" -c 'import torch' 2> /dev/null; then PYTHON=$p; break; fi
  done
fi
[[ -n ${PYTHON:-} ]] || { echo "cnn_epoch.sh: no python3 with torch (PYTHON=...)" >&2; exit 2; }
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT

"$PYTHON" bench/cnn_epoch_torch.py data "$w/digits.bin"
echo "model: $model"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores available; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in $threads; do
  for ((r = 0; r < rounds; ++r)); do
    "$build/bench/cnn_epoch" "$w/digits.bin" "$epochs" "$t" "$model" >> "$w/tapegrad_$t.txt"
    "$PYTHON" bench/cnn_epoch_torch.py time "$w/digits.bin" "$t" "$epochs" "$model" >> "$w/torch_$t.txt"
  done
done
"$PYTHON" - "$w" $threads <<'PY'
import statistics, sys
w = sys.argv[1]
def epochs(path):
    lines = open(path).read().split("\n")
    return [float(l.split()[1]) for l in lines if l.startswith("epoch_ms")], [l for l in lines if l.startswith("loss")][-1]
print("| threads | tapegrad epoch (median, ms) | PyTorch epoch (median, ms) | tapegrad / PyTorch |")
print("|---|---|---|---|")
for t in sys.argv[2:]:
    ours, our_last = epochs(f"{w}/tapegrad_{t}.txt")
    theirs, their_last = epochs(f"{w}/torch_{t}.txt")
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"| {t} | {a:.2f} ({len(ours)} epochs, {min(ours):.2f}-{max(ours):.2f}) | "
          f"{b:.2f} ({len(theirs)} epochs, {min(theirs):.2f}-{max(theirs):.2f}) | {a / b:.2f} |")
    print(f"|   | {our_last} | {their_last} | |")
PY
