#!/usr/bin/env bash
# gpu_profile: where the small GPT's step spends its GPU time, tapegrad's and PyTorch eager's, in one
# run. tapegrad: `ncu` times every kernel of a few steps (after warm-up; the clocks and the
# caches left as a run has them), summed by kernel name over the whole steps of the window: the
# launches after its first clip_grad_norm total (one sum_all_f64 kernel a step) up to its last, so a
# step's forward is counted as often as its backward and its update. PyTorch: torch.profiler over
# the same model (tests/gpt/parity.py --profile).
#
#   BUILD=DIR LOGS=DIR [PRECISION=bf16] [CONFIG=gpt2] scripts/gpu_profile.sh   (LD_LIBRARY_PATH as
#     scripts/gpu_check.sh run sets it; PRECISION: --autocast for both, f32 by default; CONFIG=gpt2:
#     tapegrad alone at GPT-2 124M's sizes; GPT_ARGS: more `gpt train` options, say
#     "--gelu tanh --fused-mlp")
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-cuda} logs=${LOGS:-gpu-profile-logs} precision=${PRECISION:-f32} config=${CONFIG:-small}
mkdir -p "$logs"
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cat docs/*.md README.md > "$w/prose.txt"
gpt=$build/examples/gpt
# the steps counted by the one total-norm sum a training step makes (validation passes have none);
# the window, after about 7 steps of warm-up, ends well before the validation at step 40
# CONFIG=gpt2: GPT-2 124M's sizes on random tokens (--tokens random), a window of a few steps, no PyTorch part
if [[ $config == gpt2 ]]; then run=(--config gpt2 --tokens random --steps 12) window=(--launch-skip 2500 --launch-count 2500)
else run=(--config small --data "$w/prose.txt" --steps 40) window=(--launch-skip 2000 --launch-count 2400); fi
timeout 240 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv "${window[@]}" \
  "$gpt" train "${run[@]}" --device cuda --dropout 0 --autocast "$precision" ${GPT_ARGS:-} \
  > "$logs/ncu.csv" 2> "$logs/ncu.err"
python3 - "$logs/ncu.csv" <<'PY'
import collections, csv, re, sys
lines = open(sys.argv[1]).read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
rows = [(re.sub(r"\(.*", "", r["Kernel Name"]), float(r["Metric Value"].replace(",", "")) / 1e6)
        for r in csv.DictReader(lines[start:])]
ends = [i for i, (name, _) in enumerate(rows) if "sum_all_f64_kernel" in name]
if len(ends) < 2:
    sys.exit(f"the window holds {len(ends)} clip_grad_norm totals: no whole step in it")
agg = collections.defaultdict(lambda: [0, 0.0])
for name, ms in rows[ends[0] + 1 : ends[-1] + 1]:
    agg[name][0] += 1
    agg[name][1] += ms
steps = len(ends) - 1
print(f"tapegrad kernels: {sum(v for _, v in agg.values()) / steps:.2f} ms of GPU time per step over {steps} whole steps")
for n, (c, v) in sorted(agg.items(), key=lambda x: -x[1][1])[:40]:
    print(f"  {v / steps:8.3f} ms/step {c / steps:6.1f}/step  {n[:110]}")
PY
[[ $config == small ]] || exit 0
timeout 200 "$gpt" train --config small --device cuda --dropout 0 --data "$w/prose.txt" --steps 100 --autocast "$precision" \
  --trace "$w/trace.safetensors" > "$logs/run.log" 2>&1
grep '^median' "$logs/run.log"
timeout 300 python3 tests/gpt/parity.py "$w/trace.safetensors" --device cuda --steps 3 --bench-steps 50 --profile 5 \
  --autocast "$precision"
