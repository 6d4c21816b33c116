#!/usr/bin/env bash
# The layers' PyTorch parity, both ways: layers_torch.sh DRIVER CHECK.PY DIR
# DRIVER export writes tapegrad's layers, inputs, outputs and gradients; CHECK.PY loads them into
# torch's layers (strict) and compares, then writes torch's own layers and outputs; DRIVER check
# loads those (strict) and compares. Exits 77 (meson's SKIP) when no Python imports torch.
set -euo pipefail
driver=$1 check=$2 dir=$3
source "$(dirname "$0")/../skips.sh"
need_torch nn_layers_torch  # sets $python
mkdir -p "$dir"
"$driver" export "$dir/tapegrad_layers.safetensors"
"$python" "$check" "$dir/tapegrad_layers.safetensors" "$dir/torch_layers.safetensors"
"$driver" check "$dir/tapegrad_layers.safetensors" "$dir/torch_layers.safetensors"
