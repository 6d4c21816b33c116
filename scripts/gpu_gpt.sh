#!/usr/bin/env bash
# gpu_gpt: examples/gpt on a GPU machine, in one run (scripts/gpu_check.sh runs it too):
#  1. the tiny config on CUDA: 30 steps and a resume to 60 against 60 in one run (the same
#     checkpoint bytes), 60 with --graph against them (the same bytes again), the same with bf16
#     products and activations (--autocast bf16, eager against --graph, and AdamW's bf16 weight
#     copies against --cast-weights), the fused MLP with GPT-2's tanh GELU under bf16 (its GEMM
#     epilogues: eager against --graph, and its PyTorch parity), the same with 2 value-embed planes,
#     sparse and dense (eager against --graph), and a sample;
#  2. the small config (nanoGPT's shakespeare_char sizes) on CUDA, f32, trained on this repository's
#     own prose (docs/*.md and README.md, about 220 KB): the step time and the validation loss;
#  3. the PyTorch parity of the small config (tests/gpt/parity.py --device cuda, dropout 0, 100
#     steps), and PyTorch eager's f32 step time in the same run;
#  4. the small config with 3 value-embed planes, sparse and dense, against none: step times;
#  5. bench/gpt_value_embed: the value embeddings at GPT-2's sizes, sparse against dense.
#
#   BUILD=DIR LOGS=DIR scripts/gpu_gpt.sh     (BUILD: a build with examples/gpt, bench/gpt_value_embed and
#                                              libtapegrad.so; LD_LIBRARY_PATH set by the caller)
# Ends with one line per part, PASS/FAIL/INFO; exit 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-cuda} logs=${LOGS:-gpu-gpt-logs}
mkdir -p "$logs"
gpt=$build/examples/gpt
python=$(command -v python3)
status=0
line() { printf '| %-40s | %-4s | %s\n' "$1" "$2" "$3" | tee -a "$logs/summary.txt"; [[ $2 != FAIL ]] || status=1; }
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT

# 1. tiny on CUDA: resume bit for bit, sampling
timeout 120 "$gpt" train --device cuda --steps 60 --checkpoint "$w/a.ckpt" > "$logs/tiny_cuda.log" 2>&1
timeout 120 "$gpt" train --device cuda --steps 30 --checkpoint "$w/b.ckpt" > /dev/null 2>&1
timeout 120 "$gpt" train --device cuda --steps 60 --checkpoint "$w/b.ckpt" --resume >> "$logs/tiny_cuda.log" 2>&1
if cmp -s "$w/a.ckpt" "$w/b.ckpt"; then line "tiny, CUDA: 30 + resume to 60 = 60" PASS "same checkpoint bytes; $(grep '^median' "$logs/tiny_cuda.log" | head -1)"
else line "tiny, CUDA: 30 + resume to 60 = 60" FAIL "checkpoints differ (or a run failed: $logs/tiny_cuda.log)"; fi
# the same 60 steps with --graph (58 of them replays of one captured step): the same checkpoint bytes
timeout 120 "$gpt" train --device cuda --steps 60 --graph --checkpoint "$w/c.ckpt" > "$logs/tiny_graph.log" 2>&1
if cmp -s "$w/a.ckpt" "$w/c.ckpt"; then line "tiny, CUDA: 60 steps --graph = eager" PASS "same checkpoint bytes; $(grep '^median' "$logs/tiny_graph.log" | head -1)"
else line "tiny, CUDA: 60 steps --graph = eager" FAIL "checkpoints differ (or the run failed: $logs/tiny_graph.log)"; fi
# the replayed steps ask nothing of the driver's allocator or of the host
if grep -q "steps replayed the captured graph: 0 cudaMalloc calls and 0 host fallbacks" "$logs/tiny_graph.log"
then line "tiny, CUDA: replays allocate nothing" PASS "$(grep 'steps replayed' "$logs/tiny_graph.log")"
else line "tiny, CUDA: replays allocate nothing" FAIL "$(grep 'steps replayed' "$logs/tiny_graph.log" || echo 'no count printed')"; fi
# and with bf16 products and activations (Note [bf16 activations]): eager and --graph, the same bytes
timeout 120 "$gpt" train --device cuda --steps 60 --autocast bf16 --checkpoint "$w/d.ckpt" > "$logs/tiny_bf16.log" 2>&1
timeout 120 "$gpt" train --device cuda --steps 60 --autocast bf16 --graph --checkpoint "$w/e.ckpt" > "$logs/tiny_bf16_graph.log" 2>&1
if [[ -s $w/d.ckpt ]] && cmp -s "$w/d.ckpt" "$w/e.ckpt"; then line "tiny, CUDA, bf16: --graph = eager" PASS "same checkpoint bytes; $(grep '^median' "$logs/tiny_bf16_graph.log" | head -1)"
else line "tiny, CUDA, bf16: --graph = eager" FAIL "checkpoints differ (or a run failed: $logs/tiny_bf16*.log)"; fi
# AdamW's bf16 weight copies (the default) against casting the weights at each product
timeout 120 "$gpt" train --device cuda --steps 60 --autocast bf16 --cast-weights --checkpoint "$w/h.ckpt" > "$logs/tiny_bf16_cast.log" 2>&1
if [[ -s $w/h.ckpt ]] && cmp -s "$w/d.ckpt" "$w/h.ckpt"; then line "tiny, CUDA, bf16: weight copies = casts" PASS "same checkpoint bytes"
else line "tiny, CUDA, bf16: weight copies = casts" FAIL "checkpoints differ (or the run failed: $logs/tiny_bf16_cast.log)"; fi
# the fused MLP with the tanh GELU (Note [the MLP's epilogues]: cuBLASLt's GELU_AUX and DGELU under
# bf16): eager and --graph the same bytes, and its 30 steps against PyTorch's nn.GELU('tanh')
timeout 120 "$gpt" train --device cuda --steps 60 --autocast bf16 --gelu tanh --fused-mlp --checkpoint "$w/m.ckpt" > "$logs/tiny_mlp.log" 2>&1
timeout 120 "$gpt" train --device cuda --steps 60 --autocast bf16 --gelu tanh --fused-mlp --graph --checkpoint "$w/n.ckpt" > "$logs/tiny_mlp_graph.log" 2>&1
if [[ -s $w/m.ckpt ]] && cmp -s "$w/m.ckpt" "$w/n.ckpt"; then line "tiny, CUDA, bf16, fused MLP: --graph = eager" PASS "same checkpoint bytes; $(grep '^median' "$logs/tiny_mlp_graph.log" | head -1)"
else line "tiny, CUDA, bf16, fused MLP: --graph = eager" FAIL "checkpoints differ (or a run failed: $logs/tiny_mlp*.log)"; fi
timeout 120 "$gpt" train --device cuda --steps 30 --autocast bf16 --gelu tanh --fused-mlp --trace "$w/mlp.safetensors" > /dev/null 2>&1
timeout 200 "$python" tests/gpt/parity.py "$w/mlp.safetensors" --device cuda --autocast bf16 > "$logs/tiny_mlp_parity.log" 2>&1
rc=$?
line "tiny, CUDA, bf16, fused MLP: parity" "$([[ $rc == 0 ]] && echo PASS || echo FAIL)" \
  "$(grep -E 'step 1 (loss|gradients)|steps 2' "$logs/tiny_mlp_parity.log" | cut -c1-100 | tr '\n' ' ')"
# and with value embeddings, sparse (the pull after each replay) and dense: eager and --graph, the same bytes
for mode in "" "--value-embeds-dense"; do
  # shellcheck disable=SC2086
  timeout 120 "$gpt" train --device cuda --steps 60 --value-embeds 2 $mode --checkpoint "$w/f.ckpt" > "$logs/tiny_ve.log" 2>&1
  # shellcheck disable=SC2086
  timeout 120 "$gpt" train --device cuda --steps 60 --value-embeds 2 $mode --graph --checkpoint "$w/g.ckpt" > "$logs/tiny_ve_graph.log" 2>&1
  if [[ -s $w/f.ckpt ]] && cmp -s "$w/f.ckpt" "$w/g.ckpt"; then line "tiny, CUDA, value embeds ${mode:-sparse}: --graph = eager" PASS "same checkpoint bytes; $(grep '^median' "$logs/tiny_ve_graph.log" | head -1)"
  else line "tiny, CUDA, value embeds ${mode:-sparse}: --graph = eager" FAIL "checkpoints differ (or a run failed: $logs/tiny_ve*.log)"; fi
  rm -f "$w/f.ckpt" "$w/g.ckpt"
done
timeout 60 "$gpt" sample --device cuda --checkpoint "$w/a.ckpt" --prompt "It was" --tokens 80 --top-k 10 > "$logs/tiny_sample.txt" 2>&1 \
  && line "tiny, CUDA: sample" INFO "$(head -c 90 "$logs/tiny_sample.txt" | tr '\n' ' ')" || line "tiny, CUDA: sample" FAIL "see tiny_sample.txt"

# 2. small on CUDA, f32, on the repository's prose
cat docs/*.md README.md > "$w/prose.txt"
steps=${SMALL_STEPS:-750}
timeout 300 "$gpt" train --config small --device cuda --data "$w/prose.txt" --steps "$steps" --log "$logs/small.csv" \
  --checkpoint "$w/small.ckpt" > "$logs/small.log" 2>&1
rc=$?
line "small, CUDA f32, $steps steps" "$([[ $rc == 0 ]] && echo INFO || echo FAIL)" \
  "$(grep '^median' "$logs/small.log"); $(grep '^validation' "$logs/small.log" | tail -1)"
timeout 60 "$gpt" sample --device cuda --checkpoint "$w/small.ckpt" --prompt "The engine" --tokens 200 --temperature 0.8 \
  > "$logs/small_sample.txt" 2>&1

# 3. parity of the small config against PyTorch on this GPU, and PyTorch eager's step time
timeout 200 "$gpt" train --config small --device cuda --dropout 0 --data "$w/prose.txt" --steps 100 \
  --trace "$w/small_trace.safetensors" > "$logs/small_parity_run.log" 2>&1
timeout 300 "$python" tests/gpt/parity.py "$w/small_trace.safetensors" --device cuda --bench-steps 50 \
  > "$logs/small_parity.log" 2>&1
rc=$?
cat "$logs/small_parity.log"
line "small, CUDA: parity with PyTorch" "$([[ $rc == 0 ]] && echo PASS || echo FAIL)" \
  "$(grep -E 'gradients|steps 2' "$logs/small_parity.log" | tr '\n' ' ')"
line "small, CUDA f32, dropout 0: step times" INFO \
  "tapegrad $(grep '^median' "$logs/small_parity_run.log"); $(grep 'torch eager' "$logs/small_parity.log")"

# 4. value embeddings in the small model
for ve in "" "--value-embeds 3" "--value-embeds 3 --value-embeds-dense"; do
  # shellcheck disable=SC2086
  timeout 120 "$gpt" train --config small --device cuda --data "$w/prose.txt" --steps 60 $ve > "$w/ve.log" 2>&1
  line "small, CUDA: ${ve:-no value embeddings}" INFO "$(grep '^median' "$w/ve.log")"
done

# 5. the value embeddings at GPT-2's sizes
timeout 120 "$build/bench/gpt_value_embed" --device cuda > "$logs/gpt_value_embed.txt" 2>&1
rc=$?
cat "$logs/gpt_value_embed.txt"
line "gpt_value_embed (P3 V50304 D768 T49152)" "$([[ $rc == 0 ]] && echo INFO || echo FAIL)" "$logs/gpt_value_embed.txt"
exit $status
