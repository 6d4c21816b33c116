#!/usr/bin/env bash
# `tape show` reads a long chain's dump (tests/tape/long_chain_dump.cpp): its checks and views look
# values and nodes up by index, so this takes about a second, not minutes. No time is asserted:
# the test checks that the summary, and with --all the whole table, come out.
#
#   long_chain_test.sh TAPE LONG_CHAIN_DUMP N
set -eu
TAPE=$1 DUMP=$2 N=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$DUMP" "$N" "$work/chain.json"
values=$((N + 2))
"$TAPE" show "$work/chain.json" > "$work/summary"  # this many rows make a summary by default
grep -qF "(no scope)  $values " "$work/summary" || { echo "FAIL: tape show does not summarise the chain"; exit 1; }
"$TAPE" show "$work/chain.json" --all > "$work/out"
grep -qF "a chain of $N scales" "$work/out" || { echo "FAIL: no title in tape show's output"; exit 1; }
grep -qF ", $values values" "$work/out" || { echo "FAIL: tape show does not count $values values"; exit 1; }
rows=$(grep -c " scale " "$work/out" || true)
if [[ $rows -lt $N ]]; then echo "FAIL: tape show printed $rows scale rows, expected at least $N"; exit 1; fi
echo "ok: tape show read a chain of $values values ($(wc -c < "$work/chain.json") bytes)"
