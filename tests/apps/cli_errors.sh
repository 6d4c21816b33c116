#!/usr/bin/env bash
# The command lines of value_embed, bob, tape and tiny_step: each bad flag or value exits 2 (never CLI11's own
# codes, 104, 109, ...) with a message naming it, writes nothing, and --help exits 0; numeric
# options are refused by name when negative or out of range (an unsigned option must not read "-1"
# as 2^64 - 1); sizes too large for memory exit 2 with "out of memory".
set -u
VE=$1 BOB=$2 TAPE=$3 TINY=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0 passes=0

# expect CODE MESSAGE-PART PROGRAM ARGS...
expect() {
  local want_rc=$1 want=$2
  shift 2
  "$@" > "$work/out" 2> "$work/err"
  local rc=$?
  if [[ $rc -ne $want_rc ]]; then echo "FAIL $*: exit $rc, expected $want_rc ($(cat "$work/err"))"; fails=$((fails+1)); return; fi
  if ! grep -qF -- "$want" "$work/err" "$work/out"; then
    echo "FAIL $*: message '$(cat "$work/err")' lacks '$want'"; fails=$((fails+1)); return
  fi
  passes=$((passes+1))
}

# value_embed
expect 2 "value_embed: The following argument was not expected: --bogus" "$VE" --bogus
expect 2 "value_embed: --dim: 1 required" "$VE" --dim
expect 0 "Usage:" "$VE" --help
expect 2 "value_embed: --dim: must be an integer from 1 to 16384, got '72057594037927936'" "$VE" --vocab 256 --dim 72057594037927936
expect 2 "value_embed: --dim: must be an integer from 1 to 16384, got '0'" "$VE" --dim 0
expect 2 "value_embed: --vocab: must be an integer from 0 to 1048576, got '-1'" "$VE" --vocab -1
expect 2 "value_embed: --planes: must be an integer from 1 to 64, got '99999999999'" "$VE" --planes 99999999999
expect 2 "value_embed: --planes: must be an integer from 1 to 64, got '2.5'" "$VE" --planes 2.5
expect 2 "value_embed: --tokens: must be an integer from 1 to 1048576, got '9223372036854775807'" "$VE" --tokens 9223372036854775807
expect 2 "value_embed: --steps: must be an integer from 1 to 1000000, got '-1'" "$VE" --steps -1
expect 2 "value_embed: --accum: must be an integer from 1 to 1000000, got '0x10'" "$VE" --accum 0x10
expect 2 "value_embed: --runs: must be an integer from 1 to 10000, got '0'" "$VE" --runs 0
expect 2 "value_embed: --seed: must be an integer from 0 to 18446744073709551615, got '-1'" "$VE" --seed -1
expect 2 "value_embed: --seed: must be an integer from 0 to 18446744073709551615, got '18446744073709551616'" \
  "$VE" --seed 18446744073709551616
expect 2 "value_embed: --lr: must be a positive finite number (as a float), got 'nan'" "$VE" --lr nan
expect 2 "value_embed: --lr: must be a positive finite number (as a float), got '-0.5'" "$VE" --lr -0.5
expect 2 "value_embed: --table-lr: must be a positive finite number (as a float), got '1e39'" "$VE" --table-lr 1e39
expect 2 "value_embed: [value_embed] the table P*V*D = 64*1048576*16384 = 1099511627776 elements; at most 268435456" \
  "$VE" --planes 64 --vocab 1048576 --dim 16384
expect 2 "value_embed: [value_embed] the logits' T*V = 524*1048576 = 549453824 elements; at most 268435456" \
  "$VE" --planes 1 --vocab 1048576 --dim 1 --tokens 524
expect 2 "value_embed: [device] device 'cuda:99999999999' is out of range: expected cuda:N with N from 0 to 1023" \
  "$VE" --device cuda:99999999999
# within the limits but beyond the memory this process may have: out of memory, exit 2
# out of memory, forced by an address-space limit: a sanitizer's shadow memory cannot live under one
if ldd "$VE" 2> /dev/null | grep -qE 'lib(a|t)san'; then
  echo "SKIP: out of memory under ulimit -v (a sanitizer build reserves terabytes of shadow memory)"
else
  expect 2 "value_embed: out of memory" bash -c 'ulimit -v 800000 && exec "$0" --planes 4 --vocab 50304 --dim 768' "$VE"
fi

# bob
expect 2 "bob: The following argument was not expected: --bogus" "$BOB" --bogus
expect 2 "bob: --out is required" "$BOB" fixture
expect 0 "Usage:" "$BOB" fixture --help
expect 2 "bob: --offset: must be an integer from 0 to 1099511627776, got '-1'" "$BOB" fixture --offset -1 --out "$work/rec"
expect 2 "bob: --offset: must be an integer from 0 to 1099511627776, got '1099511627777'" \
  "$BOB" fixture --offset 1099511627777 --out "$work/rec"
expect 2 "bob: --invocations: must be an integer from 1 to 1000, got '-1'" "$BOB" verify-resume --input "$work/rec" --invocations -1
expect 2 "bob: --invocations: must be an integer from 1 to 1000, got '1001'" "$BOB" verify-resume --input "$work/rec" --invocations 1001
expect 2 "bob: --invocations: must be an integer from 1 to 1000, got '0'" "$BOB" verify-resume --input "$work/rec" --invocations 0
expect 2 "bob: [device] device 'cuda:99999999999' is out of range" \
  "$BOB" verify-resume --input "$work/rec" --device cuda:99999999999
if [[ -e "$work/rec" ]]; then echo "FAIL bob fixture wrote a record"; fails=$((fails+1)); else passes=$((passes+1)); fi

# tape
expect 2 "tape: A subcommand is required" "$TAPE"
expect 2 "tape: The following argument was not expected: --bogus" "$TAPE" show --bogus x
expect 2 "tape: FILE is required" "$TAPE" show
expect 2 "tape: --output is required" "$TAPE" html "$work/a.json"
expect 0 "Usage:" "$TAPE" --help

# tiny_step
expect 2 "tiny_step: The following argument was not expected: --bogus" "$TINY" --bogus
expect 2 "tiny_step: --config: 1 required" "$TINY" --config
expect 0 "Usage:" "$TINY" --help
expect 2 "tiny_step: [device] device 'cuda:99999999999' is out of range: expected cuda:N with N from 0 to 1023" \
  "$TINY" --device cuda:99999999999
expect 2 "tiny_step: [device] device 'cuda:1024' is out of range" "$TINY" --device cuda:1024
expect 2 "tiny_step: [device] unknown device 'cuda:1x'" "$TINY" --device cuda:1x

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
