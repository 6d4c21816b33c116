#!/usr/bin/env bash
# gpt_step: one training step of examples/gpt's small config (L6 H6 C384 T256 B64, dropout 0) on
# CUDA, tapegrad against PyTorch in the same run (docs/perf-gpt-gpu.md's table):
#   tapegrad f32 and tapegrad --autocast bf16 (100 steps each, the median of steps 11 to 100), each
#   also with --graph (every step after the second a replay of one captured CUDA graph), each
#   run's PyTorch parity (tests/gpt/parity.py over the same 100 batches, f32 bounds or bf16's), and
#   PyTorch's own step time, eager f32, eager under torch.autocast(bf16) and torch.compile under
#   autocast (the median of 50 steps each); then the same at GPT-2 124M's sizes, with GPT-2's tanh
#   GELU through the fused MLP (its GEMM epilogues) against PyTorch's tanh GELU, and with 3
#   value-embed planes (GPT2=0 skips them; SMALL=0 skips the small config).
#
#   BUILD=DIR LOGS=DIR bench/gpt_step.sh   (BUILD: a build with examples/gpt, the gpt program; LD_LIBRARY_PATH set by the caller)
# Prints one line per measurement (PASS/FAIL for the parity checks); exit 0 when both parities pass.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-cuda} logs=${LOGS:-gpt-step-logs}
mkdir -p "$logs"
gpt=$build/examples/gpt
python=$(command -v python3)
status=0
line() { printf '| %-44s | %-4s | %s\n' "$1" "$2" "$3" | tee -a "$logs/summary.txt"; [[ $2 != FAIL ]] || status=1; }
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cat docs/*.md README.md > "$w/prose.txt"

[[ ${SMALL:-1} == 1 ]] && for precision in f32 bf16; do
  timeout 200 "$gpt" train --config small --device cuda --dropout 0 --data "$w/prose.txt" --steps 100 \
    --autocast "$precision" --trace "$w/trace_$precision.safetensors" > "$logs/tapegrad_$precision.log" 2>&1
  line "tapegrad, $precision products" INFO "$(grep '^median' "$logs/tapegrad_$precision.log")"
  timeout 200 "$gpt" train --config small --device cuda --dropout 0 --data "$w/prose.txt" --steps 100 \
    --autocast "$precision" --graph > "$logs/tapegrad_${precision}_graph.log" 2>&1
  line "tapegrad, $precision products, --graph" "$(grep -q '^median' "$logs/tapegrad_${precision}_graph.log" && echo INFO || echo FAIL)" \
    "$(grep '^median' "$logs/tapegrad_${precision}_graph.log" || tail -2 "$logs/tapegrad_${precision}_graph.log")"
  timeout 300 "$python" tests/gpt/parity.py "$w/trace_$precision.safetensors" --device cuda --autocast "$precision" \
    --bench-steps 50 > "$logs/parity_$precision.log" 2>&1
  rc=$?
  cat "$logs/parity_$precision.log"
  line "parity with PyTorch, $precision" "$([[ $rc == 0 ]] && echo PASS || echo FAIL)" \
    "$(grep -E 'step 1 loss|gradients|steps 2' "$logs/parity_$precision.log" | cut -c1-120 | tr '\n' ' ')"
  line "PyTorch eager, $precision" INFO "$(grep 'torch eager' "$logs/parity_$precision.log")"
done
if [[ ${SMALL:-1} == 1 ]]; then
  timeout 400 "$python" tests/gpt/parity.py "$w/trace_bf16.safetensors" --device cuda --autocast bf16 --steps 1 \
    --bench-steps 50 --compile > "$logs/compile_bf16.log" 2>&1
  line "PyTorch torch.compile, bf16" INFO "$(grep 'torch.compile' "$logs/compile_bf16.log" || tail -3 "$logs/compile_bf16.log")"
fi
[[ ${GPT2:-1} == 1 ]] || exit $status

# GPT-2 124M's sizes (--config gpt2: L12 H12 C768 T1024 B16) at its vocabulary (--tokens random,
# V 50304), bf16 products: 30 steps with --graph (the median of steps 11 to 30), then a 2-step
# trace for PyTorch's side (step 1's loss and gradients compared) and its eager and compiled steps
timeout 300 "$gpt" train --config gpt2 --tokens random --device cuda --autocast bf16 --graph --steps 30 \
  > "$logs/gpt2_graph.log" 2>&1
line "gpt2 124M, tapegrad bf16 --graph" "$(grep -q '^median' "$logs/gpt2_graph.log" && echo INFO || echo FAIL)" \
  "$(grep -E '^median|steps replayed' "$logs/gpt2_graph.log" | tr '\n' ' ' || tail -2 "$logs/gpt2_graph.log")"
# the same with GPT-2's tanh GELU, the MLPs fused (Note [the MLP's epilogues]) and not
for mlp in --fused-mlp ""; do
  timeout 300 "$gpt" train --config gpt2 --tokens random --device cuda --autocast bf16 --graph --steps 30 \
    --gelu tanh $mlp > "$logs/gpt2_tanh$mlp.log" 2>&1
  line "gpt2 124M tanh GELU ${mlp:-unfused}, --graph" "$(grep -q '^median' "$logs/gpt2_tanh$mlp.log" && echo INFO || echo FAIL)" \
    "$(grep '^median' "$logs/gpt2_tanh$mlp.log" || tail -2 "$logs/gpt2_tanh$mlp.log")"
done
# GPT-2 + 3 value-embed planes (the issue's third row), --graph, sparse (the pull and SparseAdamW
# after each replay) and dense
for mode in "" --value-embeds-dense; do
  # shellcheck disable=SC2086
  timeout 300 "$gpt" train --config gpt2 --tokens random --device cuda --autocast bf16 --graph --steps 30 \
    --value-embeds 3 $mode > "$logs/gpt2_ve$mode.log" 2>&1
  line "gpt2 124M + 3 value embeds ${mode:-sparse}, --graph" "$(grep -q '^median' "$logs/gpt2_ve$mode.log" && echo INFO || echo FAIL)" \
    "$(grep '^median' "$logs/gpt2_ve$mode.log" || tail -2 "$logs/gpt2_ve$mode.log")"
done
# PyTorch's side: a 2-step trace of tapegrad's run (step 1's loss and gradients compared), then
# PyTorch's eager and compiled steps of the same model. torch_peer NAME [gpt train options]
torch_peer() {
  local name=$1; shift
  timeout 300 "$gpt" train --config gpt2 --tokens random --device cuda --autocast bf16 --steps 2 "$@" \
    --trace "$w/trace_$name.safetensors" > "$logs/${name}_trace.log" 2>&1
  for compile in "" --compile; do
    # shellcheck disable=SC2086
    timeout 400 "$python" tests/gpt/parity.py "$w/trace_$name.safetensors" --device cuda --autocast bf16 --steps 1 \
      --bench-steps 20 $compile > "$logs/${name}_torch$compile.log" 2>&1
    line "$name, PyTorch ${compile:-eager} bf16" INFO \
      "$(grep -E 'torch( eager|\.compile) step|step 1 (loss|gradients)' "$logs/${name}_torch$compile.log" | cut -c1-110 | tr '\n' ' ')"
  done
}
torch_peer gpt2
# GPT-2 with the tanh GELU (nn.GELU(approximate='tanh') on PyTorch's side), traced from the fused MLP
torch_peer gpt2_tanh --gelu tanh --fused-mlp
# GPT-2 + 3 value-embed planes in a dense nn.Embedding (the issue's anchor), traced from the dense mode
torch_peer gpt2_ve3 --value-embeds 3 --value-embeds-dense
exit $status
