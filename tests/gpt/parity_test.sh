#!/usr/bin/env bash
# The PyTorch parity test of examples/gpt (parity.py has the checks): the tiny config in f32 for
# 100 steps, with 2 value-embed planes (dense) for 30, and in f64 for 10 (tapegrad's f64 step is
# slow on the CPU), each traced by `gpt train --trace` and replayed in PyTorch. Exits 77 (meson's
# SKIP) when no Python imports torch.
#   parity_test.sh GPT PARITY.PY WORKDIR
set -uo pipefail
gpt=$1 parity=$2 work=$3
source "$(dirname "$0")/../skips.sh"
need_torch "gpt parity"  # sets $python
rm -f "$work"/parity_*.safetensors  # a trace is never replaced without --force
"$gpt" train --steps 100 --trace "$work/parity_f32.safetensors" > "$work/parity_f32.log" || exit 1
"$python" "$parity" "$work/parity_f32.safetensors" || exit 1
"$gpt" train --steps 30 --value-embeds 2 --value-embeds-dense --trace "$work/parity_ve.safetensors" \
  > "$work/parity_ve.log" || exit 1
"$python" "$parity" "$work/parity_ve.safetensors" || exit 1
# GPT-2's tanh GELU through the fused MLP (ops::mlp) against nn.GELU(approximate='tanh')
"$gpt" train --steps 30 --gelu tanh --fused-mlp --trace "$work/parity_tanh.safetensors" > "$work/parity_tanh.log" || exit 1
"$python" "$parity" "$work/parity_tanh.safetensors" || exit 1
"$gpt" train --steps 5 --dtype f64 --gelu tanh --fused-mlp --trace "$work/parity_tanh64.safetensors" \
  > "$work/parity_tanh64.log" || exit 1
"$python" "$parity" "$work/parity_tanh64.safetensors" || exit 1
"$gpt" train --steps 10 --dtype f64 --trace "$work/parity_f64.safetensors" > "$work/parity_f64.log" || exit 1
exec "$python" "$parity" "$work/parity_f64.safetensors"
