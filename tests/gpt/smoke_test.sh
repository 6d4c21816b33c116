#!/usr/bin/env bash
# gpt's paths in a few steps, for every build (the sanitizer builds included): train 3 steps with
# value embeddings and dropout into a checkpoint, resume it to 5 (the same bytes as 5 at once),
# the dense value embeddings, byte-level tokens, a sample with top-k (the KV cache's text the full
# recompute's), and two refusals.
#   smoke_test.sh GPT WORKDIR
set -euo pipefail
gpt=$1 w=$2/smoke
rm -rf "$w" && mkdir -p "$w"
fail() { echo "FAIL: gpt smoke: $*"; exit 1; }
"$gpt" train --steps 5 --value-embeds 1 --dropout 0.1 --checkpoint "$w/a.ckpt" --log "$w/a.csv" > "$w/a.log"
"$gpt" train --steps 3 --value-embeds 1 --dropout 0.1 --checkpoint "$w/b.ckpt" > /dev/null
"$gpt" train --steps 5 --value-embeds 1 --dropout 0.1 --checkpoint "$w/b.ckpt" --resume > /dev/null
cmp -s "$w/a.ckpt" "$w/b.ckpt" || fail "3 steps and a resume to 5 differ from 5 steps"
"$gpt" train --steps 2 --value-embeds 2 --value-embeds-dense --tokens byte > "$w/c.log"
grep -q '^step 2 loss' "$w/c.log" || fail "dense value embeddings with byte tokens did not reach step 2"
"$gpt" sample --checkpoint "$w/a.ckpt" --prompt "It" --tokens 80 --top-k 3 > "$w/s.txt" 2> "$w/s.err"
[[ $(head -c 2 "$w/s.txt") == "It" ]] || fail "the sample does not continue the prompt"
grep -Eq '^gpt: 80 tokens in [0-9.]+ s: [0-9]+ tokens/s \(KV cache\)$' "$w/s.err" || fail "sample's speed line: $(cat "$w/s.err")"
"$gpt" sample --checkpoint "$w/a.ckpt" --prompt "It" --tokens 80 --top-k 3 --no-cache > "$w/s_full.txt" 2> /dev/null
cmp -s "$w/s.txt" "$w/s_full.txt" || fail "the KV cache and the full recompute sampled different text (80 tokens, past the block)"
rc=0
"$gpt" train --steps 5 --checkpoint "$w/a.ckpt" > /dev/null 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "a fresh run over an existing checkpoint exited $rc, not 2"
cmp -s "$w/a.ckpt" "$w/b.ckpt" || fail "the refused run changed the checkpoint"
rc=0
"$gpt" train --steps 1 --value-embeds 1 --trace "$w/t.safetensors" > /dev/null 2> "$w/t.err" || rc=$?
[[ $rc == 2 ]] || fail "a trace with sparse value embeddings exited $rc, not 2"
grep -q 'value embeddings only with --value-embeds-dense' "$w/t.err" || fail "the trace refusal says: $(cat "$w/t.err")"
[[ ! -e $w/t.safetensors ]] || fail "the refused trace run wrote its file"
echo "gpt smoke: train, resume (same bytes), value embeddings sparse and dense, byte tokens, sample, two refusals: ok"
