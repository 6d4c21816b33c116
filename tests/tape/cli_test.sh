#!/usr/bin/env bash
# tiny_step --dump-tape and the tape tool end to end: the trace on stdout stays byte-identical
# with the flag (both modes), `tape show` and `tape step` (driven through standard input) print
# what the walk-through in docs/teaching.md promises, and every bad dump or argument is refused
# with exit 2, a message naming what is wrong, and nothing written.
#
#   cli_test.sh TAPE TINY_STEP GOLDEN_TRACE
set -u
TAPE=$1 TINY=$2 GOLDEN=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0 passes=0
fail() { echo "FAIL $1"; fails=$((fails + 1)); }
pass() { passes=$((passes + 1)); }

# ---- tiny_step --dump-tape: the trace is untouched, the dump is written
"$TINY" > "$work/plain.txt" || fail "tiny_step without --dump-tape"
"$TINY" --dump-tape "$work/good.json" > "$work/good.txt" || fail "tiny_step --dump-tape"
if cmp -s "$work/good.txt" "$GOLDEN" && cmp -s "$work/good.txt" "$work/plain.txt"; then pass
else fail "tiny_step --dump-tape changed the trace on stdout"; fi
"$TINY" --overwrite-bug > "$work/bug-plain.txt"
"$TINY" --overwrite-bug --dump-tape "$work/bad.json" > "$work/bad.txt" || fail "tiny_step --overwrite-bug --dump-tape"
if cmp -s "$work/bad.txt" "$work/bug-plain.txt"; then pass
else fail "tiny_step --overwrite-bug --dump-tape changed the trace on stdout"; fi
"$TINY" --dump-tape "$work/checked.json" --check "$GOLDEN" 2> /dev/null && [[ -s $work/checked.json ]] && pass ||
  fail "--dump-tape with --check"
"$TINY" --dump-tape "$work/missing-dir/t.json" > /dev/null 2> "$work/nodir.err"
rc=$?
if [[ $rc -eq 2 ]] && grep -q "missing-dir/t.json" "$work/nodir.err"; then pass
else fail "an unwritable --dump-tape path: exit $rc, '$(cat "$work/nodir.err")'"; fi

printf '{"learning_rate": 1e308}' > "$work/diverges.json"
"$TINY" --config "$work/diverges.json" --dump-tape "$work/refused.json" > /dev/null 2>&1
rc=$?
if [[ $rc -eq 2 && ! -e $work/refused.json ]]; then pass
else fail "a refused step: exit $rc (expected 2) and the dump must not be written"; fi

# expect_output NAME PATTERN: the last command's output ($work/out) contains the fixed text
expect_output() {
  if grep -qF -- "$2" "$work/out"; then pass; else fail "$1: output lacks '$2'"; fi
}

# ---- tape show
"$TAPE" show "$work/bad.json" > "$work/out" || fail "tape show exited $?"
expect_output show "tiny_step: red green red -> stop go stop"
expect_output show "OVERWRITTEN  [0.02365, 0.08215]"
expect_output show "gradient check (epsilon 1e-05, tolerance 1e-06): FAILED, max error 0.08215"

# ---- tape step, driven through standard input (no terminal)
printf 'n\nn\nn\nn\n' | "$TAPE" step "$work/bad.json" > "$work/out" || fail "tape step exited $?"
expect_output "step 5" "── step 5 of 18 · forward"
expect_output "step 5" "#4 x = gather(embedding, input_ids)   (3, 2) f64 on cpu"
printf 'j 17\nq\n' | "$TAPE" step "$work/bad.json" > "$work/out"
expect_output "step 17 (bad)" "flows to  d embedding, row 0 (red)  (input 0 of gather)"
expect_output "step 17 (bad)" "LOSS  overwritten: d embedding, row 0 (red) held [0.02365, 0.08215]; that is discarded."
expect_output "step 17 (bad)" "adding would have kept both: [0.04729, 0.1643]"
printf 'j 17\n' | "$TAPE" step "$work/good.json" > "$work/out"
expect_output "step 17 (good)" "added  d embedding, row 0 (red) now holds [0.04729, 0.1643]"
printf 'j 18\n' | "$TAPE" step "$work/good.json" > "$work/out"
expect_output "step 18 (good)" "passed, max error 1.002e-11"
expect_output "step 18 (good)" "contributions lost to overwrites: none"
if grep -q $'\x1b' "$work/out"; then fail "tape step without a terminal printed escape codes"; else pass; fi

# ---- refusals: exit 2, a message naming the problem, nothing written
# expect_refusal NAME EXPECTED-MESSAGE-PART COMMAND...
expect_refusal() {
  local name=$1 want=$2
  shift 2
  rm -f "$work/page.html"
  "$@" > "$work/out" 2> "$work/err" < /dev/null
  local rc=$?
  if [[ $rc -ne 2 ]]; then fail "$name: exit $rc, expected 2"; return; fi
  if ! grep -qF -- "$want" "$work/err"; then fail "$name: message '$(cat "$work/err")' lacks '$want'"; return; fi
  if [[ -e $work/page.html ]]; then fail "$name: wrote the page"; return; fi
  pass
}
head -c 2000 "$work/bad.json" > "$work/truncated.json"
: > "$work/empty.json"
sed 's/"version": 1,/"version": 2,/' "$work/bad.json" > "$work/v2.json"
sed 's/"format": "tapegrad-tape"/"format": "something-else"/' "$work/bad.json" > "$work/other.json"
sed 's/"mode": "overwrite-bug"/"mode": "accumulate"/' "$work/bad.json" > "$work/mode.json"
sed '0,/"dtype": "f64"/s//"dtype": "f65"/' "$work/bad.json" > "$work/dtype.json"

expect_refusal truncated "[tape] $work/truncated.json is not a complete JSON document (cut short or damaged?)" \
  "$TAPE" show "$work/truncated.json"
expect_refusal empty "is not a complete JSON document" "$TAPE" step "$work/empty.json"
expect_refusal version "is a tape dump of version 2; this tape reads version 1 only" "$TAPE" dot "$work/v2.json"
expect_refusal format "is not a tape dump: it has no \"format\": \"tapegrad-tape\"" "$TAPE" show "$work/other.json"
expect_refusal mode "backward.events[7].kind is \"overwritten\" but the dump's mode is \"accumulate\"" \
  "$TAPE" show "$work/mode.json"
expect_refusal dtype "values[0].dtype must be one of \"f64\", \"f32\", \"bf16\", \"f16\", \"i32\", \"i64\", \"u8\", got \"f65\"" \
  "$TAPE" show "$work/dtype.json"
expect_refusal missing "[tape] cannot read $work/nope.json" "$TAPE" show "$work/nope.json"
expect_refusal html_second_bad "is a tape dump of version 2" "$TAPE" html "$work/good.json" "$work/v2.json" -o "$work/page.html"
expect_refusal no_subcommand "A subcommand is required" "$TAPE"
expect_refusal html_no_output "--output is required" "$TAPE" html "$work/good.json"
expect_refusal html_three "FILE: At Most 2 required but received 3" "$TAPE" html "$work/good.json" "$work/good.json" "$work/good.json" -o "$work/page.html"

# ---- the page is written for good input
"$TAPE" html "$work/good.json" "$work/bad.json" -o "$work/page.html" 2> /dev/null && [[ -s $work/page.html ]] && pass ||
  fail "tape html good bad -o page.html"

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
