#!/usr/bin/env bash
# bob train --dump-tape: the last update's tape, readable by apps/tape, in both engine modes; the
# overwrite-bug dump shows rows of repeated bytes overwritten.
set -u
BOB=$1 TAPE=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
"$BOB" fixture --out "$work/rec" > /dev/null || { echo "FAIL fixture"; exit 1; }
"$BOB" train --input "$work/rec" --checkpoint "$work/good.ckpt" --fresh --dump-tape "$work/good.json" > /dev/null \
  || { echo "FAIL train --dump-tape"; fails=$((fails + 1)); }
"$BOB" train --input "$work/rec" --checkpoint "$work/bad.ckpt" --fresh --overwrite-bug --dump-tape "$work/bad.json" \
  > /dev/null || { echo "FAIL train --overwrite-bug --dump-tape"; fails=$((fails + 1)); }
"$TAPE" show "$work/good.json" > "$work/good.txt" || { echo "FAIL tape show good"; fails=$((fails + 1)); }
"$TAPE" show "$work/bad.json" > "$work/bad.txt" || { echo "FAIL tape show bad"; fails=$((fails + 1)); }
grep -q "W, row 108 ('l')" "$work/good.txt" || { echo "FAIL: no row names in the dump"; fails=$((fails + 1)); }
grep -q " added " "$work/good.txt" || { echo "FAIL: a repeated byte's rows were not added"; fails=$((fails + 1)); }
grep -q "OVERWRITTEN" "$work/bad.txt" || { echo "FAIL: the overwrite-bug dump shows no overwrite"; fails=$((fails + 1)); }
echo "$((7 - fails)) passed, $fails failed"
[[ $fails -eq 0 ]]
