#!/usr/bin/env bash
# examples/gpt's command line, as a user runs it (called by install_and_build.sh with the built
# program; LD_LIBRARY_PATH already finds the installed library):
# - train 60 steps: the validation loss falls below 0.85 of the uniform guess; a checkpoint, a CSV
#   log and its SVG plot are written;
# - resume: 30 steps, then --resume to 60, gives the same checkpoint bytes and log as 60 at once,
#   also with value embeddings (sparse and dense) and dropout;
# - sample: continues the prompt, the same text for the same seed;
# - --dump-tape: `tape show` reads the first step's tape;
# - every refusal exits 2 with its message and leaves the checkpoint as it was;
# - `gpt` alone trains the tiny config and prints a sample.
#   gpt_checks.sh GPT TAPE WORKDIR
set -euo pipefail
GPT=$1 TAPE=$2 W=$3
fail() { echo "FAIL: gpt: $*"; exit 1; }

"$GPT" train --steps 60 --checkpoint "$W/a.ckpt" --log "$W/a.csv" > "$W/a.log"
grep -E '^(step (1|60) |validation)' "$W/a.log"
awk '/^validation loss .* at step 60/ { gsub(/[()]/, ""); ok = $3 < 0.85 * $9 } END { exit !ok }' "$W/a.log" \
  || fail "the validation loss did not fall below 0.85 of the uniform guess"
[[ $(grep -c '^step [0-9]* loss ' "$W/a.log") == 60 ]] || fail "not one 'step N loss X' line per step"
[[ -s $W/a.ckpt && -s $W/a.svg ]] || fail "no checkpoint or no plot"
[[ $(wc -l < "$W/a.csv") == 61 ]] || fail "the log has not a header and 60 rows"
grep -q '<polyline id="validation"' "$W/a.svg" || fail "the plot has no validation line"

"$GPT" train --steps 30 --checkpoint "$W/b.ckpt" --log "$W/b.csv" > /dev/null
"$GPT" train --steps 60 --checkpoint "$W/b.ckpt" --log "$W/b.csv" --resume > "$W/b.log"
grep -q '^step 31 loss' "$W/b.log" || fail "the resumed run did not start at step 31"
cmp -s "$W/a.ckpt" "$W/b.ckpt" || fail "30 steps and a resume to 60 differ from 60 steps in one run"
diff <(cut -d, -f1,2 "$W/a.csv") <(cut -d, -f1,2 "$W/b.csv") > /dev/null || fail "the resumed log's losses differ"
for ve in "--value-embeds 2" "--value-embeds 2 --value-embeds-dense"; do
  # shellcheck disable=SC2086
  "$GPT" train --steps 20 --dropout 0.1 $ve --checkpoint "$W/c.ckpt" --force > /dev/null
  # shellcheck disable=SC2086
  "$GPT" train --steps 10 --dropout 0.1 $ve --checkpoint "$W/d.ckpt" --force > /dev/null
  # shellcheck disable=SC2086
  "$GPT" train --steps 20 --dropout 0.1 $ve --checkpoint "$W/d.ckpt" --resume > "$W/d.log"
  cmp -s "$W/c.ckpt" "$W/d.ckpt" || fail "a resume with $ve and dropout differs from one run"
done
echo "resume: the same checkpoint bytes (plain; value embeddings sparse and dense, with dropout)"

# bf16 products: AdamW's bf16 weight copies (the default) and a cast at each product, the same bytes;
# a resume (the loaded weights' copies stale until the first update) too
"$GPT" train --steps 12 --autocast bf16 --checkpoint "$W/e.ckpt" > /dev/null
"$GPT" train --steps 12 --autocast bf16 --cast-weights --checkpoint "$W/f.ckpt" > /dev/null
cmp -s "$W/e.ckpt" "$W/f.ckpt" || fail "AdamW's bf16 weight copies changed a bf16 run"
"$GPT" train --steps 6 --autocast bf16 --checkpoint "$W/g.ckpt" > /dev/null
"$GPT" train --steps 12 --autocast bf16 --checkpoint "$W/g.ckpt" --resume > /dev/null
cmp -s "$W/e.ckpt" "$W/g.ckpt" || fail "a bf16 resume differs from one run"
echo "bf16 products: AdamW's weight copies and casts give the same checkpoint bytes, resumed too"

# the fused MLP (ops::mlp) is the unfused one's bits in f32; the tanh GELU is a setting of the model
"$GPT" train --steps 12 --fused-mlp --checkpoint "$W/h.ckpt" > /dev/null
"$GPT" train --steps 12 --checkpoint "$W/i.ckpt" > /dev/null
cmp -s "$W/h.ckpt" "$W/i.ckpt" || fail "--fused-mlp changed an f32 run"
"$GPT" train --steps 12 --gelu tanh --fused-mlp --checkpoint "$W/j.ckpt" > /dev/null
"$GPT" train --steps 12 --gelu tanh --checkpoint "$W/k.ckpt" > /dev/null
cmp -s "$W/j.ckpt" "$W/k.ckpt" || fail "--fused-mlp changed an f32 run with --gelu tanh"
cmp -s "$W/j.ckpt" "$W/i.ckpt" && fail "--gelu tanh trained the same weights as the exact GELU"
# with bf16 products too: on the CPU no GEMM epilogue runs, so the fused MLP is the three ops' bits
"$GPT" train --steps 12 --autocast bf16 --gelu tanh --fused-mlp --checkpoint "$W/l.ckpt" > /dev/null
"$GPT" train --steps 12 --autocast bf16 --gelu tanh --checkpoint "$W/o.ckpt" > /dev/null
cmp -s "$W/l.ckpt" "$W/o.ckpt" || fail "--fused-mlp changed a bf16 run on the CPU"
"$GPT" sample --checkpoint "$W/j.ckpt" --tokens 20 > /dev/null || fail "a --gelu tanh checkpoint did not sample"
echo "the fused MLP: the same checkpoint bytes on the CPU, f32 with either GELU and bf16 products"

"$GPT" sample --checkpoint "$W/a.ckpt" --prompt "It was" --tokens 60 --temperature 0.8 --top-k 5 > "$W/s1.txt"
"$GPT" sample --checkpoint "$W/a.ckpt" --prompt "It was" --tokens 60 --temperature 0.8 --top-k 5 > "$W/s2.txt"
echo "sample: $(cat "$W/s1.txt")"
[[ $(head -c 6 "$W/s1.txt") == "It was" && $(wc -c < "$W/s1.txt") -ge 67 ]] || fail "the sample is not the prompt and 60 tokens"
cmp -s "$W/s1.txt" "$W/s2.txt" || fail "one seed gave two samples"

"$GPT" train --steps 1 --dump-tape "$W/tape.json" > /dev/null
"$TAPE" show "$W/tape.json" > "$W/tape.txt" || fail "tape show cannot read the first step's tape"
grep -q qkv_attention "$W/tape.txt" || fail "the tape shows no attention"

before=$(md5sum < "$W/a.ckpt")
refused() {  # refused MESSAGE ARGS...: exit 2, MESSAGE on stderr, the checkpoint untouched
  local want=$1 rc=0
  shift
  "$GPT" "$@" > /dev/null 2> "$W/err.txt" || rc=$?
  [[ $rc == 2 ]] || fail "'$*' exited $rc, not 2"
  grep -qF -- "$want" "$W/err.txt" || fail "'$*' said '$(cat "$W/err.txt")', not '$want'"
  [[ $(md5sum < "$W/a.ckpt") == "$before" ]] || fail "'$*' changed the checkpoint"
}
printf 'too short' > "$W/short.txt"
head -c 5000 /dev/urandom | base64 > "$W/other.txt"
cp "$W/a.ckpt" "$W/damaged.ckpt"
printf 'X' | dd of="$W/damaged.ckpt" bs=1 seek=100 conv=notrunc 2> /dev/null
refused "exists: pass --resume" train --steps 60 --checkpoint "$W/a.ckpt"
refused "trained with config=tiny, but this run asks for config=small" train --config small --steps 70 --checkpoint "$W/a.ckpt" --resume
refused "trained with value_embeds=0" train --value-embeds 1 --steps 70 --checkpoint "$W/a.ckpt" --resume
refused "was trained on other data" train --data "$W/other.txt" --steps 70 --checkpoint "$W/a.ckpt" --resume
refused "is at step 60, past --steps 50" train --steps 50 --checkpoint "$W/a.ckpt" --resume
refused "no checkpoint at" train --steps 70 --checkpoint "$W/none.ckpt" --resume
refused "bad CRC-32" train --steps 70 --checkpoint "$W/damaged.ckpt" --resume
refused "bad CRC-32" sample --checkpoint "$W/damaged.ckpt"
refused "too short for blocks of 64 tokens" train --data "$W/short.txt"
refused "cannot read" train --data "$W/none.txt"
refused "--steps: Value 0 not in range" train --steps 0
refused "was not expected: --bogus" train --bogus
refused "need --checkpoint" train --resume
refused "more than the 2 layers" train --value-embeds 3
refused "is not in" sample --checkpoint "$W/a.ckpt" --prompt "Zq~"
refused "must be a positive finite number" sample --checkpoint "$W/a.ckpt" --temperature 0
refused "is not a gpt log" train --steps 70 --checkpoint "$W/a.ckpt" --resume --log "$W/short.txt"
refused "the checkpoint's settings lack layers" sample --checkpoint "$(dirname "$0")/../fixtures/nn/small.sd"
refused "--graph replays one captured step: it needs --device cuda" train --graph
refused "--autocast bf16 casts f32 products; it needs --dtype f32, not f64" train --autocast bf16 --dtype f64
refused "--cast-weights chooses how --autocast bf16 makes its bf16 weights; without it nothing is cast" train --cast-weights
refused "--tokens random takes no --data" train --tokens random --data "$W/other.txt"
"$GPT" train --tokens random --steps 1 --checkpoint "$W/random.ckpt" > "$W/random.log"  # V = 50304
grep -q 'vocab 50304' "$W/random.log" || fail "--tokens random did not train at V = 50304"
refused "was trained on random tokens (--tokens random): there is no text to sample" sample --checkpoint "$W/random.ckpt"
refused "trained with products=f32, but this run asks for products=bf16" train --autocast bf16 --steps 70 --checkpoint "$W/a.ckpt" --resume
refused "trained with gelu=exact, but this run asks for gelu=tanh" train --gelu tanh --steps 70 --checkpoint "$W/a.ckpt" --resume
refused "trained with gelu=tanh, but this run asks for gelu=exact" train --steps 70 --checkpoint "$W/j.ckpt" --resume
# a checkpoint whose settings name a GELU neither exact nor tanh (its CRC made good again)
python3 - "$W/j.ckpt" "$W/bad_gelu.ckpt" <<'PY'
import sys, zlib
body = open(sys.argv[1], "rb").read()[:-4].replace(b"gelu=tanh", b"gelu=erfx", 1)
open(sys.argv[2], "wb").write(body + zlib.crc32(body).to_bytes(4, "little"))
PY
refused "bad_gelu.ckpt: its settings say gelu=erfx, which is neither exact nor tanh" sample --checkpoint "$W/bad_gelu.ckpt"
[[ ! -e $W/none.ckpt ]] || fail "a refused run wrote a checkpoint"
[[ $(cat "$W/short.txt") == "too short" ]] || fail "a refused resume rewrote the log it refused"
echo "refusals: 27, each exit 2 with its message, the checkpoint unchanged"

"$GPT" > "$W/default.log"
grep -q '^step 200 loss' "$W/default.log" && grep -q '^sample: ' "$W/default.log" \
  || fail "gpt alone did not train 200 steps and sample"
grep -E '^(validation loss .* at step 200|sample)' "$W/default.log"
