#!/bin/bash
# bob_ab.sh: compare bob's update between two builds of bench_bob, or between the CPU paths of one
# build, interleaved so that all see the same load (the host is shared and a minute can be 20%
# slow). Each round runs every build (or path) with 1 and 2 threads, each benchmark 3
# repetitions; the summary gives, per benchmark, the median over the rounds and the lowest and
# highest round, after the CPU's model name and vector flags; NAME/cpu lines give the benchmark
# thread's CPU time (the cpu_us counter of bench_bob's manual-time benchmarks), which moves less
# than the wall clock when other work shares the cores. Not a test: a measurement.
#
#   bench/bob_ab.sh OLD/bench/bench_bob build/bench/bench_bob [ROUNDS=8]
#   CPU_PATHS='scalar avx2 avx512' bench/bob_ab.sh build/bench/bench_bob [ROUNDS=8]   (TAPEGRAD_CPU_PATH)
#   FILTER='TinyStep|RecordOp' bench/bob_ab.sh OLD/bench/bench_tiny build/bench/bench_tiny   (any benchmark)
#
# BM_BobUpdate is left out: its table trains for as long as it runs, so a faster build would be
# measuring a sharper table. Both builds need BM_BobUpdateTrained (bench_bob.cpp from 0761d38 on;
# an older library can be built with this bench_bob.cpp).
set -euo pipefail
usage() { sed -n '2,14p' "$0"; exit 2; }
RUNS=()  # label=binary, in the order the summary lists them
if [ -n "${CPU_PATHS:-}" ]; then
  [ $# -ge 1 ] || usage
  for path in $CPU_PATHS; do RUNS+=("$path=$1"); done
  ROUNDS=${2:-8}
else
  [ $# -ge 2 ] || usage
  RUNS=("old=$1" "new=$2")
  ROUNDS=${3:-8}
fi
FILTER=${FILTER:-'First30|Trained|BobLoss|BobAdamW'}
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
for round in $(seq 1 "$ROUNDS"); do
  echo "round $round of $ROUNDS" >&2
  for threads in 1 2; do
    for run in "${RUNS[@]}"; do
      label=${run%%=*} bin=${run#*=}
      path=()
      [ -n "${CPU_PATHS:-}" ] && path=("TAPEGRAD_CPU_PATH=$label")
      env "${path[@]}" TAPEGRAD_NUM_THREADS=$threads "$bin" --benchmark_filter="$FILTER" --benchmark_min_time=0.05 \
        --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
        awk -v b="$label" -v t="$threads" -f <(cat <<'AWK'
/_median/ {
  manual = sub("/manual_time", "", $1); sub("_median", "", $1)
  print b, t, $1, $2, $3
  if (!manual) print b, t, $1 "/cpu", $4, $5  # the benchmark thread's CPU time
  for (i = 6; i <= NF; ++i) if ($i ~ /^cpu_us=/) { v = $i; sub("cpu_us=", "", v); print b, t, $1 "/cpu", v, "us" }
}
AWK
) >> "$RESULTS"
    done
  done
done
lscpu | grep 'Model name' | sed 's/  */ /g'
echo "vector flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|avx2|fma|avx512[a-z_0-9]*)$' | tr '\n' ' ')"
python3 - "$RESULTS" "${RUNS[@]%%=*}" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
units = {}
for line in open(sys.argv[1]):
    build, threads, name, value, unit = line.split()
    runs[(name, int(threads), build)].append(float(value))
    units[name] = unit
order = {label: i for i, label in enumerate(sys.argv[2:])}
for (name, threads, build) in sorted(runs, key=lambda k: (k[0], k[1], order[k[2]])):
    v = runs[(name, threads, build)]
    u = units[name]
    print(f"{name:24s} {threads} thread{'s' if threads > 1 else ' '} {build:6s}: median {statistics.median(v):6.1f} {u}"
          f"  (rounds {min(v):.1f} to {max(v):.1f}, n={len(v)})")
PY
