#!/usr/bin/env bash
# The README's first command: installs the dependencies, builds tapegrad (with the CUDA backend
# when nvcc is found), and runs the main job on its built-in default: bob's fresh invocation and
# two resumes, then the tiny step's trace check against the Python reference's.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
ensure_test_tools  # the build's packages, and what the second command (scripts/test.sh) needs too
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
if [[ -d build ]]; then meson setup --reconfigure build > /dev/null; else meson setup build > /dev/null; fi
scripts/stale_cuda_objects.sh build
ninja -C build
echo
echo "== tiny_step: one training step, checked against the Python reference's trace"
./build/apps/tiny_step --check tests/fixtures/tiny/step-trace.json
echo
echo "== bob: the resumable byte-level trainer on its built-in corpus"
./build/apps/bob
