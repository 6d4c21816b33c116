#!/usr/bin/env bash
# The value-embed path on a GPU machine, in one run: its CPU and CUDA tests, the SASS of its hot
# kernels, `value_embed --bench` with the PyTorch baselines (baseline.py) on the same ids, and the
# app at the seed's sizes. Everything printed also lands in the folder LOGS (default
# /tmp/value_embed_out).
#
# First, the build it runs:
#   meson setup build-ve -Dcuda=enabled && ninja -C build-ve apps/value_embed/value_embed
#     tests/value_embed/test_value_embed tests/value_embed/test_value_embed_cuda
# Then: bash bench/value_embed/run_device.sh (where the build was made on another machine, put the
# libraries this one lacks, say libsimdjson.so.14, in .device/lib, as scripts/gpu_check.sh pack does)
set -uo pipefail
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH="$PWD/.device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" PYTHONUNBUFFERED=1
out=${LOGS:-${OUT:-/tmp/value_embed_out}}
data=/tmp/value_embed_data
mkdir -p "$out" "$data"

step() { echo; echo "== $*"; }
step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv 2>&1 | tee "$out/device.txt"
step "tests"
build-ve/tests/value_embed/test_value_embed 2>&1 | tail -n 3 | tee "$out/test_cpu.txt"
build-ve/tests/value_embed/test_value_embed_cuda 2>&1 | tail -n 40 | tee "$out/test_cuda.txt"
step "SASS of the atomic backward's kernels (bf16 gradients, f16 buffer, 8-element packs) and of the gather"
cuobjdump -sass build-ve/libtapegrad.so > "$data/sass.txt" 2>&1
for name in _ZN8tapegrad4cuda24accumulate_atomic_kernelI13__nv_bfloat166__halfiLi8EEEvPKT_PKT1_PT0_PillliiNS0_9ErrorSiteE \
            _ZN8tapegrad4cuda26accumulate_combined_kernelI13__nv_bfloat166__halfLi8ELi8EEEvPKT_PKjPKiPT0_lllliiii \
            _ZN8tapegrad4cuda13gather_kernelI13__nv_bfloat16S2_iLi8EEEvPKT_PKT1_PT0_llliiNS0_9ErrorSiteE; do
  echo "$name:" $(awk -v f="Function : $name" '/Function : /{on = index($0, f) > 0} on' "$data/sass.txt" |
                  grep -oE '(LDG|STG|RED|ATOM)[A-Za-z0-9._]*' | sort | uniq -c)
done | tee "$out/sass.txt"
step "value_embed --bench"
build-ve/apps/value_embed/value_embed --bench --bench-out "$data" 2>&1 | tee "$out/bench.txt"
step "baselines: PyTorch dense and the seed's Triton op"
python3 bench/value_embed/baseline.py --data "$data" 2>&1 | tee "$out/baseline.txt"
step "the app at the seed's sizes"
build-ve/apps/value_embed/value_embed --device cuda --planes 4 --vocab 50304 --dim 768 --table bf16 --steps 40 2>&1 | tail -n 8 |
  tee "$out/app.txt"
