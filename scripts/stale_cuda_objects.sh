#!/usr/bin/env bash
# stale_cuda_objects.sh BUILD: deletes the CUDA objects in BUILD that are older than a header, so
# that ninja rebuilds them. Meson 1.0 (Debian 12's) gives nvcc no depfile arguments, so ninja does
# not know which headers a .cu includes: after a change to src/cuda/common.cuh (say) the other .cu
# objects would keep the old struct layouts, and a kernel would read the wrong field. The scripts
# that build (test.sh, bootstrap.sh, gpu_check.sh) run this first; run it yourself after editing a
# header if you call ninja directly.
set -euo pipefail
build=${1:?usage: scripts/stale_cuda_objects.sh BUILD}
cd "$(dirname "$0")/.."
[[ -d $build ]] || exit 0
find "$build" -name '*.cu.o' -print0 | while IFS= read -r -d '' object; do
  if [[ -n $(find src apps tests bench -newer "$object" \( -name '*.hpp' -o -name '*.cuh' -o -name '*.h' \) -print -quit) ]]; then
    rm -f "$object"
  fi
done
