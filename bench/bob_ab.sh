#!/bin/bash
# bob_ab.sh: compare bob's update between two builds of bench_bob, interleaved so that both see
# the same load (the host is shared and a minute can be 20% slow). Each round runs both builds
# with 1 and 2 threads, each benchmark 3 repetitions; the summary gives, per benchmark, the
# median over the rounds and the lowest and highest round. Not a test: a measurement.
#
#   bench/bob_ab.sh OLD/bench/bench_bob build/bench/bench_bob [ROUNDS=8]
#   FILTER='TinyStep|RecordOp' bench/bob_ab.sh OLD/bench/bench_tiny build/bench/bench_tiny   (any benchmark)
#
# BM_BobUpdate is left out: its table trains for as long as it runs, so a faster build would be
# measuring a sharper table. Both builds need BM_BobUpdateTrained (bench_bob.cpp from 0761d38 on;
# an older library can be built with this bench_bob.cpp).
set -euo pipefail
if [ $# -lt 2 ]; then sed -n '2,11p' "$0"; exit 2; fi
OLD=$1 NEW=$2 ROUNDS=${3:-8}
FILTER=${FILTER:-'First30|Trained|BobLoss|BobAdamW'}
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
for round in $(seq 1 "$ROUNDS"); do
  echo "round $round of $ROUNDS" >&2
  for threads in 1 2; do
    for build in old new; do
      bin=$OLD; [ "$build" = new ] && bin=$NEW
      TAPEGRAD_NUM_THREADS=$threads "$bin" --benchmark_filter="$FILTER" --benchmark_min_time=0.05 \
        --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
        awk -v b="$build" -v t="$threads" '/_median/ {sub("/manual_time", "", $1); sub("_median", "", $1); print b, t, $1, $2, $3}' >> "$RESULTS"
    done
  done
done
python3 - "$RESULTS" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
units = {}
for line in open(sys.argv[1]):
    build, threads, name, value, unit = line.split()
    runs[(name, int(threads), build)].append(float(value))
    units[name] = unit
for (name, threads, build) in sorted(runs, key=lambda k: (k[0], k[1], k[2] != "old")):
    v = runs[(name, threads, build)]
    u = units[name]
    print(f"{name:22s} {threads} thread{'s' if threads > 1 else ' '} {build}: median {statistics.median(v):6.1f} {u}"
          f"  (rounds {min(v):.1f} to {max(v):.1f}, n={len(v)})")
PY
