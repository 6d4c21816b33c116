#!/usr/bin/env bash
# `tape show` on one training step of a GPT from tapegrad::nn (tests/tape/gpt_dump.cpp): the tiny
# config's tape is summarised as one line per scope, one scope's tables and a search narrow it, and
# a GPT of 500 blocks (over 5,000 nodes) is summarised as well, as deep as fits 100 lines. Prints each
# tape's size and how long `tape show` took (a figure, never a check: a test's wall clock measures
# the machine's load).
#
#   gpt_test.sh TAPE GPT_DUMP
set -u
TAPE=$1 DUMP=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0 passes=0
fail() { echo "FAIL $1"; fails=$((fails + 1)); }
pass() { passes=$((passes + 1)); }
expect() {  # expect NAME TEXT: the last output ($work/out) holds the fixed text
  if grep -qF -- "$2" "$work/out"; then pass; else fail "$1: output lacks '$2'"; fi
}
ms() { echo $(( $(date +%s%N) / 1000000 )); }

# timed_show NAME FILE ARGS...: runs tape show into $work/out, fails on a non-zero exit, prints the time
timed_show() {
  local name=$1 file=$2 start end
  shift 2
  start=$(ms)
  if "$TAPE" show "$file" "$@" > "$work/out" 2> "$work/err"; then pass
  else fail "$name: tape show exited $?: $(cat "$work/err")"; fi
  end=$(ms)
  echo "tape show $* on $(basename "$file"): $((end - start)) ms, $(wc -l < "$work/out") lines"
}

"$DUMP" "$work/gpt.json" > "$work/dump.txt" || { echo "FAIL gpt_dump"; exit 1; }
echo "tiny GPT (L2 H4 C128 T64 B16 V40): $(cat "$work/dump.txt"), $(wc -c < "$work/gpt.json") bytes"
read -r _ values _ nodes _ events _ < "$work/dump.txt"
events=${events%;}

timed_show summary "$work/gpt.json"
expect summary "mode accumulate, $values values, $nodes nodes, $events contributions"
expect summary "grouped by scope"
expect summary "(no scope)  "
for line in "wte  " "h  " "  h.0  " "    h.0.attn  " "      h.0.attn.c_attn  " "    h.1.mlp  " "lm_head  "; do
  if grep -q -- "^$line" "$work/out"; then pass; else fail "summary: no line beginning '$line'"; fi
done
expect summary "qkv_attention 1"
if (( $(wc -l < "$work/out") < 40 )); then pass; else fail "summary: $(wc -l < "$work/out") lines, not a summary"; fi

timed_show scope "$work/gpt.json" --scope h.0.attn
expect scope "scope h.0.attn:"
expect scope "h.0.attn.c_attn.weight"
expect scope "qkv_attention"
if grep -q "h\.1\." "$work/out"; then fail "scope: h.1 values in h.0.attn's tables"; else pass; fi

timed_show find "$work/gpt.json" --find c_fc
expect find "6 values whose label, op or scope holds \"c_fc\":"

timed_show all "$work/gpt.json" --all
if (( $(wc -l < "$work/out") > values + events )); then pass; else fail "--all: $(wc -l < "$work/out") lines"; fi

"$TAPE" show "$work/gpt.json" --scope h.9 > "$work/out" 2>&1
rc=$?
if [[ $rc -eq 2 ]]; then pass; else fail "an unknown scope: exit $rc (expected 2)"; fi
expect "unknown scope" "has no scope \"h.9\"; its outermost scopes are wpe, wte, h, ln_f, lm_head"
"$TAPE" show "$work/gpt.json" --all --groups > "$work/out" 2>&1
rc=$?
if [[ $rc -eq 2 ]]; then pass; else fail "--all with --groups: exit $rc (expected 2)"; fi

# thousands of nodes: 500 small blocks
"$DUMP" "$work/big.json" 500 2 8 16 2 > "$work/dump.txt" || { echo "FAIL gpt_dump big"; exit 1; }
echo "GPT of 500 blocks (H2 C16 T8 B2): $(cat "$work/dump.txt"), $(wc -c < "$work/big.json") bytes"
read -r _ values _ nodes _ events _ < "$work/dump.txt"
if (( nodes >= 5000 )); then pass; else fail "the big tape has $nodes nodes, fewer than 5000"; fi
timed_show "big summary" "$work/big.json"
expect "big summary" "h           11000   5000"
expect "big summary" "(scopes more than 1 level down are not listed: --depth 4 lists them all)"
if (( $(wc -l < "$work/out") < 30 )); then pass; else fail "big summary: $(wc -l < "$work/out") lines"; fi
timed_show "big depth" "$work/big.json" --depth 2
expect "big depth" "  h.499  "
timed_show "big scope" "$work/big.json" --scope h.499.mlp
expect "big scope" "h.499.mlp.c_fc.weight"

echo "gpt_test: $passes passed, $fails failed"
[[ $fails -eq 0 ]]
