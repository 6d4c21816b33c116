#!/usr/bin/env bash
# `gpt train` on MPI ranks against one process, byte for byte (docs/distributed.md):
# - 2 ranks of --accumulate 1 and 4 ranks against one process of --accumulate 2 and 4, with dropout
#   (its masks are keyed by micro-batch): the same checkpoint, and the same losses in the log;
# - 2 ranks of --accumulate 2 against 4 micro-batches in one process;
# - ZeRO-1 (--zero 1) at 2 and 4 ranks: plain data parallel's bytes;
# - a checkpoint written by 4 ranks, resumed by 1 process and by 2 ranks with ZeRO-1: one run's
#   bytes; a resume that makes another number of micro-batches is refused by name;
# - every micro-batch's windows drawn once, by the rank that runs it (--show-batches);
# - the start-up broadcast's hash check: a rank whose weights differ stops the job (exit 2);
# - dense value embeddings on ranks; sparse ones refused by name.
#   gpt_dist.sh GPT MPIRUN WORKDIR
set -euo pipefail
gpt=$(realpath "$1") mpirun=$2 w=$3/gpt_dist
rm -rf "$w" && mkdir -p "$w" && cd "$w"
fail() { echo "FAIL: gpt_dist: $*"; exit 1; }
ranks() { local n=$1; shift; "$mpirun" -np "$n" "$gpt" "$@"; }
same() { cmp -s "$1" "$2" || fail "$3: $1 and $2 differ"; }
common=(train --steps 8 --dropout 0.1 --save-every 4)

"$gpt" "${common[@]}" --accumulate 2 --checkpoint one2.ckpt --log one2.csv > one2.log
ranks 2 "${common[@]}" --checkpoint two.ckpt --log two.csv > two.log 2>&1 || { cat two.log; fail "2 ranks failed"; }
same one2.ckpt two.ckpt "2 ranks against --accumulate 2"
diff <(cut -d, -f1-4 one2.csv) <(cut -d, -f1-4 two.csv) > /dev/null || fail "2 ranks logged other losses than --accumulate 2"
grep -q 'on 2 ranks' two.log || fail "the progress line does not show the 2 ranks"
[[ $(grep -c '^step [0-9]* loss' two.log) == 8 ]] || fail "not one progress line a step (rank 0's alone)"
"$gpt" "${common[@]}" --accumulate 4 --checkpoint one4.ckpt > /dev/null
ranks 4 "${common[@]}" --checkpoint four.ckpt > four.log 2>&1 || { cat four.log; fail "4 ranks failed"; }
same one4.ckpt four.ckpt "4 ranks against --accumulate 4"
ranks 2 "${common[@]}" --accumulate 2 --checkpoint two2.ckpt > /dev/null 2>&1
same one4.ckpt two2.ckpt "2 ranks of --accumulate 2 against --accumulate 4"
echo "data parallel: 2 and 4 ranks (and 2 of 2 micro-batches) write one process's checkpoint bytes"

ranks 2 "${common[@]}" --zero 1 --checkpoint zero2.ckpt > /dev/null 2>&1
same two.ckpt zero2.ckpt "ZeRO-1 at 2 ranks against plain data parallel"
ranks 4 "${common[@]}" --zero 1 --checkpoint zero4.ckpt > zero4.log 2>&1
same four.ckpt zero4.ckpt "ZeRO-1 at 4 ranks against plain data parallel"
grep -q 'ZeRO-1' zero4.log || fail "the first line does not say ZeRO-1"
echo "ZeRO-1: plain data parallel's bytes at 2 and 4 ranks"

# resume: 4 ranks to step 4, then 1 process of 4 micro-batches, and 2 ranks of 2 with ZeRO-1, to 8
ranks 4 train --steps 4 --dropout 0.1 --checkpoint r.ckpt > /dev/null 2>&1
cp r.ckpt r1.ckpt && cp r.ckpt r2.ckpt
"$gpt" "${common[@]}" --accumulate 4 --checkpoint r1.ckpt --resume > /dev/null
same one4.ckpt r1.ckpt "4 ranks resumed by one process"
ranks 2 "${common[@]}" --accumulate 2 --zero 1 --checkpoint r2.ckpt --resume > /dev/null 2>&1
same one4.ckpt r2.ckpt "4 ranks resumed by 2 ranks with ZeRO-1"
cp r.ckpt r3.ckpt
rc=0
ranks 2 "${common[@]}" --checkpoint r3.ckpt --resume > r3.log 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "a resume with another number of micro-batches exited $rc, not 2"
grep -q 'r3.ckpt was trained with 4 micro-batches a step, but this run makes 2 (2 ranks of --accumulate 1)' r3.log \
  || fail "the refusal of another M says: $(grep gpt: r3.log)"
same r.ckpt r3.ckpt "the refused resume changed the checkpoint"
echo "resume: a checkpoint of 4 ranks continues on 1 and on 2 (ZeRO-1) with one run's bytes; another M refused"

# every window once: the ranks' micro-batches are one process's, each drawn by one rank
"$gpt" train --steps 3 --accumulate 4 --show-batches | grep '^batch:' | sed 's/ rank [0-9]*//' | sort > b1.txt
ranks 4 train --steps 3 --show-batches 2>&1 | grep '^batch:' > b4_ranks.txt
sed 's/ rank [0-9]*//' b4_ranks.txt | sort > b4.txt
diff b1.txt b4.txt > /dev/null || fail "4 ranks drew other windows than one process's 4 micro-batches"
[[ $(wc -l < b4.txt) == 12 && $(cut -d' ' -f1-5 b4.txt | sort -u | wc -l) == 12 ]] || fail "a micro-batch was drawn twice or never"
awk '{ if ($5 != $7) exit 1 }' b4_ranks.txt || fail "a micro-batch was drawn by a rank other than its own"
echo "data: every micro-batch's windows drawn once, by its own rank"

rc=0
TAPEGRAD_DIST_FAULT="rank=1,phase=start-up,action=corrupt" ranks 2 train --steps 2 > h.log 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "a rank whose weights differ after the broadcast: exit $rc, not 2"
grep -q "rank 1's parameters differ from rank 0's after the broadcast from rank 0: 'wte.weight' first" h.log \
  || fail "the hash check says: $(grep gpt: h.log)"
echo "start-up: a rank whose weights differ after the broadcast stops the job, named"

"$gpt" train --steps 4 --value-embeds 2 --value-embeds-dense --accumulate 2 --checkpoint ve1.ckpt > /dev/null
ranks 2 train --steps 4 --value-embeds 2 --value-embeds-dense --checkpoint ve2.ckpt > /dev/null 2>&1
same ve1.ckpt ve2.ckpt "dense value embeddings on 2 ranks"
rc=0
ranks 2 train --steps 2 --value-embeds 2 > ve.log 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "sparse value embeddings on 2 ranks exited $rc, not 2"
grep -q 'sparse value embeddings add into a buffer of their own' ve.log || fail "the sparse refusal says: $(grep gpt: ve.log)"
echo "value embeddings: dense ones on ranks give one process's bytes; sparse ones are refused by name"
