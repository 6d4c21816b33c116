#!/usr/bin/env bash
# tiny_step's refusals: each bad config (one whose gradient check would ask for too much work, or
# give an infinite error, included) prints a clear error, exits 2 and writes nothing; --check names
# the first differing line and exits 1. Its bad flags are in cli_errors.sh.
set -u
TINY=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0 passes=0

# expect_refusal NAME CONFIG-TEXT EXPECTED-MESSAGE-PART
expect_refusal() {
  local name=$1 text=$2 want=$3
  printf '%s' "$text" > "$work/$name.json"
  "$TINY" --config "$work/$name.json" --write "$work/$name.out" 2> "$work/$name.err" > /dev/null
  local rc=$?
  if [[ $rc -ne 2 ]]; then echo "FAIL $name: exit $rc, expected 2"; fails=$((fails+1)); return; fi
  if ! grep -qF -- "$want" "$work/$name.err"; then
    echo "FAIL $name: message '$(cat "$work/$name.err")' lacks '$want'"; fails=$((fails+1)); return
  fi
  if [[ -e "$work/$name.out" ]]; then echo "FAIL $name: wrote output"; fails=$((fails+1)); return; fi
  passes=$((passes+1))
}

expect_refusal unknown_token '{"inputs": ["red", "blue"], "targets": ["go", "go"]}' "tokens not in the vocabulary: [\"blue\"]"
expect_refusal empty_batch '{"inputs": [], "targets": []}' "empty batch: a training step needs at least one example"
expect_refusal mismatch '{"inputs": ["red"], "targets": ["go", "stop"]}' "batch has 1 inputs but 2 targets"
expect_refusal zero_lr '{"learning_rate": 0}' "learning rate must be a positive finite number, got 0"
expect_refusal negative_lr '{"learning_rate": -0.5}' "learning rate must be a positive finite number, got -0.5"
expect_refusal bad_sweep '{"learning_rate_sweep": [0.1, -1]}' "learning rate must be a positive finite number, got -1"
expect_refusal bad_large '{"large_learning_rate": 0.0}' "learning rate must be a positive finite number, got 0.0"
expect_refusal diverges '{"learning_rate": 1e308}' "the step with learning rate 1e+308 diverges: the loss after it is nan"
expect_refusal malformed '{"vocab": ["a", }' "malformed JSON"
expect_refusal not_object '[1, 2]' "must hold a JSON object, got array"
expect_refusal unknown_key '{"vocabulary": ["a"]}' "unknown key \"vocabulary\""
expect_refusal vocab_type '{"vocab": "red green"}' "vocab must be a list of strings, got string"
expect_refusal vocab_items '{"vocab": ["a", 1]}' "vocab must be a list of strings, found a"
expect_refusal empty_vocab '{"vocab": [], "inputs": [], "targets": []}' "vocab is empty"
expect_refusal dim '{"embed_dim": 0}' "embed_dim must be an integer from 1 to 4096, got 0"
expect_refusal dim_float '{"embed_dim": 2.0}' "embed_dim must be an integer from 1 to 4096, got 2.0"
expect_refusal seed_float '{"seed": 7.5}' "seed must be an integer, got 7.5"
expect_refusal epsilon_zero '{"epsilon": 0}' "epsilon must be a finite nonzero number, got 0"
expect_refusal lr_string '{"learning_rate": "0.5"}' "learning_rate must be a number, got string"
expect_refusal inf_error '{"vocab": ["a", "b"], "inputs": ["a"], "targets": ["b"], "epsilon": 1000}' \
  "the gradient check's max error is inf: a loss with a cell moved by epsilon 1000 is infinite"
tokens=$(for i in $(seq 0 1999); do printf '"t%d",' "$i"; done); tokens="[${tokens%,}]"
expect_refusal too_much_work "{\"vocab\": $tokens, \"inputs\": $tokens, \"targets\": $tokens, \"embed_dim\": 64}" \
  "the gradient check asks for about 136224000000000 operations (2 x 258000 parameters x 264000000 per forward pass of 2000 examples); the limit is 1000000000"
"$TINY" --config "$work/does-not-exist.json" > /dev/null 2> "$work/nofile.err"
if [[ $? -eq 2 ]] && grep -q "does-not-exist.json" "$work/nofile.err"; then passes=$((passes+1)); else echo "FAIL missing file"; fails=$((fails+1)); fi

# --check: an out-of-date file exits 1 naming the first differing line; the file is untouched
"$TINY" > "$work/good.json"
sed 's/"seed": 7/"seed": 8/' "$work/good.json" > "$work/stale.json"
cp "$work/stale.json" "$work/stale.copy"
"$TINY" --check "$work/stale.json" 2> "$work/check.err"
rc=$?
if [[ $rc -eq 1 ]] && grep -qF "line 28: expected '  \"seed\": 7,', found '  \"seed\": 8,'" "$work/check.err" \
   && cmp -s "$work/stale.json" "$work/stale.copy"; then passes=$((passes+1)); else
  echo "FAIL check: rc=$rc $(cat "$work/check.err")"; fails=$((fails+1)); fi
"$TINY" --check "$work/good.json" 2> /dev/null && passes=$((passes+1)) || { echo "FAIL check of a good file"; fails=$((fails+1)); }
# --write writes exactly what stdout shows
"$TINY" --write "$work/written.json" && cmp -s "$work/written.json" "$work/good.json" && passes=$((passes+1)) \
  || { echo "FAIL --write"; fails=$((fails+1)); }

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
