#!/usr/bin/env bash
# `tape dot` of both tiny_step dumps, rendered by Graphviz: dot must accept it without a warning
# or an error, and the SVG must show the overwrite in red. Skips (exit 77, one line) when Graphviz
# is not installed.
#
#   dot_test.sh TAPE TINY_STEP DOT    (DOT empty when Graphviz was not found)
set -u
TAPE=$1 TINY=$2 DOT=${3:-}
if [[ -z $DOT ]]; then
  echo "SKIP: Graphviz's dot is not installed (apt-get install graphviz), so the DOT is not rendered"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$TINY" --dump-tape "$work/good.json" > /dev/null || exit 1
"$TINY" --overwrite-bug --dump-tape "$work/bad.json" > /dev/null || exit 1
fails=0
for run in good bad; do
  if ! "$TAPE" dot "$work/$run.json" -o "$work/$run.dot"; then echo "FAIL tape dot $run.json"; fails=$((fails + 1)); continue; fi
  if ! "$DOT" -Tsvg "$work/$run.dot" -o "$work/$run.svg" 2> "$work/$run.err" || [[ -s $work/$run.err ]]; then
    echo "FAIL dot -Tsvg $run.dot: $(cat "$work/$run.err")"
    fails=$((fails + 1))
  fi
done
# the red (#dc2626) overwrite edge is in the bad run's picture and not in the good run's
grep -q 'stroke="#dc2626"' "$work/bad.svg" || { echo "FAIL bad.svg has no red overwrite edge"; fails=$((fails + 1)); }
grep -q 'OVERWRITTEN' "$work/bad.svg" || { echo "FAIL bad.svg does not label the overwrite"; fails=$((fails + 1)); }
if grep -q 'stroke="#dc2626"' "$work/good.svg"; then echo "FAIL good.svg has a red edge"; fails=$((fails + 1)); fi
[[ $fails -eq 0 ]] && echo "dot rendered both dumps"
[[ $fails -eq 0 ]]
