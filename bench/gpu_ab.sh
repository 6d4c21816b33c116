#!/usr/bin/env bash
# gpu_ab.sh: two builds' GPU figures interleaved in one run (not a test): bob's update
# (bench/cuda_bench: one replayed graph of 10 updates, op by op) and the value-embed backward
# (value_embed --bench), ROUNDS times each, old then new, so that both see the same machine.
#
#   bench/gpu_ab.sh OLD_BUILD NEW_BUILD [ROUNDS=3]     (on a GPU machine, with two builds as scripts/gpu_check.sh makes them)
set -uo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-3}
cublas_dir=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda-*/ /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)" 2>/dev/null)
export LD_LIBRARY_PATH="$PWD/.device/lib:${cublas_dir:-/usr/local/cuda/lib64}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for round in $(seq 1 "$ROUNDS"); do
  for build in old new; do
    dir=$OLD; [[ $build == new ]] && dir=$NEW
    echo "== round $round, $build: cuda_bench"
    timeout 90 "$dir/bench/cuda_bench" 1000 2>&1 | grep -E "bob update|tiny step" | sed "s/^/$build /"
    echo "== round $round, $build: value_embed --bench"
    timeout 150 "$dir/apps/value_embed/value_embed" --bench --runs 20 2>&1 | grep -E "^(ids|zipf|uniform) " | head -n 7 |
      sed "s/^/$build /"
  done
done
