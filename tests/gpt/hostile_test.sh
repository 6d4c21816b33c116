#!/usr/bin/env bash
# gpt against hostile files and values (docs/reliability.md, "What gpt promises"): every refusal
# exits 2 with its message, naming the flag or the file, and leaves every file as it was (each case
# compares the whole work folder before and after, FIFOs, sockets and links included). The cases,
# by the class of the issue that found them:
#   1 special files as outputs   2 a link planted in a sticky folder   3 outputs that are inputs or
#   each other, existing logs and traces   4 the checkpoint's lock   5 outputs checked before the
#   first step, the checkpoint last, what a failed run wrote put back   6 sample's sizes checked
#   before allocating   7 checkpoint fields, a non-finite loss   8 filesystem errors, the plot's
#   title, seeds, dropout, temperature, non-UTF-8 paths   9 the memory --data takes
#   hostile_test.sh GPT EDIT_CHECKPOINT.PY WORKDIR [MEASURE]
# MEASURE (release builds): also run what needs memory limits and resident-size measurements.
set -uo pipefail
gpt=$(realpath "$1") edit=$(realpath "$2") w=$(realpath "$3")/hostile out=$(realpath "$3")/hostile-out measure=${4:-}
rm -rf "$w" "$out" && mkdir -p "$w" "$out"
failed=0 passed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
ok() { passed=$((passed + 1)); }
# gpt in the work folder (relative paths are the user's)
g() { (cd "$w" && exec "$gpt" "$@"); }

# Every entry of the work folder: its type, a link's target and owner, a file's bytes.
snapshot() {
  (cd "$w" && find . -mindepth 1 -printf '%p %y %l %U\n' | LC_ALL=C sort && find . -type f -exec sha256sum {} + | LC_ALL=C sort)
}

# refused MESSAGE ARGS...: gpt ARGS exits 2 within 60 s with MESSAGE on stderr, and nothing in the
# work folder changed. $prefix (a command) runs gpt when set.
prefix=()
refused() {
  local want=$1 before rc=0
  shift
  before=$(snapshot)
  (cd "$w" && exec timeout -k 5 60 "${prefix[@]}" "$gpt" "$@") > "$out/stdout" 2> "$out/stderr" || rc=$?
  if [[ $rc != 2 ]]; then fail "'$*' exited $rc, not 2: $(head -c 300 "$out/stderr")"; return; fi
  if ! grep -qF -- "$want" "$out/stderr"; then fail "'$*' said '$(cat "$out/stderr")', not '$want'"; return; fi
  if [[ $(snapshot) != "$before" ]]; then
    fail "'$*' changed the work folder: $(diff <(echo "$before") <(snapshot) | head -n 6 | tr '\n' ' ')"; return
  fi
  ok
}

# ---- the files the cases read: a checkpoint of 4 steps with its log, a text, special files
g train --steps 4 --checkpoint a.ckpt --log a.csv > /dev/null || { echo "FAIL: the first run"; exit 1; }
python3 -c "
import random, socket
random.seed(7)
words = 'the engine runs each node backward and adds what it owes to every input'.split()
open('$w/data.txt', 'w').write(' '.join(random.choice(words) for _ in range(1200)) + '\n')
socket.socket(socket.AF_UNIX).bind('$w/sock')"
mkfifo "$w/fifo"
printf 'my notes\n' > "$w/notes.txt"
# crafted checkpoints (edit_checkpoint.py: the CRC made good), kept out of the work folder until used
python3 "$edit" "$w/a.ckpt" <<EOF || { echo "FAIL: edit_checkpoint.py"; exit 1; }
$out/big.ckpt --setting layers=1024 --setting heads=1 --setting dim=4096
$out/step.ckpt --step 9223372036854775808
$out/dtype.ckpt --setting dtype=f16
$out/ve_mode.ckpt --setting ve_mode=hybrid
$out/tokens.ckpt --setting tokens=word
$out/products.ckpt --setting products=f16
$out/decay.ckpt --f64 adamw.group.0.weight_decay=1e300
$out/eps.ckpt --f64 adamw.group.1.eps=0
$out/nan.ckpt --nan model.wte.weight
EOF

# ---- 1: a FIFO or a socket is not replaced by a regular file (nor would /dev/null be)
refused "--log: cannot write fifo: it is not a regular file (a FIFO); only regular files are replaced" \
  train --steps 1 --log fifo
refused "--dump-tape: cannot write sock: it is not a regular file (a socket)" train --steps 1 --dump-tape sock
refused "--trace: cannot write fifo: it is not a regular file (a FIFO)" train --steps 1 --trace fifo --force
refused "--checkpoint: cannot write sock: it is not a regular file (a socket)" train --steps 1 --checkpoint sock --force
ln -s fifo "$w/to-fifo"
refused "--log: cannot write to-fifo: its target fifo is not a regular file (a FIFO)" train --steps 1 --log to-fifo

# ---- 2: a link another user planted in a sticky world-writable folder is not followed
if [[ $(id -u) == 0 ]]; then
  mkdir "$w/shared" && chmod 1777 "$w/shared"
  ln -s ../notes.txt "$w/shared/run.csv" && chown -h 65534:65534 "$w/shared/run.csv"
  refused "--log: cannot write shared/run.csv: it is a symbolic link owned by uid 65534 in the sticky world-writable folder shared" \
    train --steps 1 --log shared/run.csv --force
  refused "is a symbolic link owned by uid 65534" train --steps 1 --checkpoint shared/run.csv --force
else
  echo "SKIP (class 2): planting another user's link needs root"
fi

# ---- 3: an output that is an input or another output, by device and inode; existing logs and traces
ln "$w/data.txt" "$w/hard.txt"
refused "--data data.txt and --log data.txt are one file; give each its own" train --steps 1 --data data.txt --log data.txt
refused "--data data.txt and --trace hard.txt are one file" train --steps 1 --data data.txt --trace hard.txt --force
refused "--checkpoint c.ckpt and --log ./c.ckpt are one file" train --steps 1 --checkpoint c.ckpt --log ./c.ckpt
refused "--checkpoint c.ckpt and --dump-tape c.ckpt are one file" train --steps 1 --checkpoint c.ckpt --dump-tape c.ckpt
refused "--log notes.csv.lock and the lock file of --checkpoint notes.csv.lock are one file" \
  train --steps 1 --checkpoint notes.csv --log notes.csv.lock
refused "--log notes.txt exists: pass --resume to continue the run it logs, or --force to replace it" \
  train --steps 1 --log notes.txt
refused "--trace notes.txt exists: pass --force to replace it" train --steps 1 --trace notes.txt
cp "$w/notes.txt" "$w/fresh.svg"
refused "the plot of --log fresh.svg exists" train --steps 1 --log fresh.csv
refused "--trace notes.txt exists: a resumed run writes a trace of its own steps" \
  train --steps 5 --checkpoint a.ckpt --log a.csv --resume --trace notes.txt
cp "$w/notes.txt" "$w/old.csv"
g train --steps 1 --log old.csv --force > /dev/null && [[ $(head -n 1 "$w/old.csv") == step,loss,* ]] \
  && ok || fail "--force did not replace an existing log"
rm -f "$w/old.csv" "$w/old.svg" "$w/fresh.svg"

# ---- 4: the checkpoint's lock: a second run exits 2 naming the first's pid; a killed holder's lock
# is taken over
(cd "$w" && exec "$gpt" train --steps 100000 --checkpoint l.ckpt > /dev/null 2>&1) &
holder=$!
for _ in $(seq 600); do [[ $(cat "$w/l.ckpt.lock" 2> /dev/null) == "$holder" ]] && break; sleep 0.1; done
if [[ $(cat "$w/l.ckpt.lock" 2> /dev/null) == "$holder" ]]; then
  refused "--checkpoint l.ckpt is in use by pid $holder: it holds the lock file l.ckpt.lock; nothing was written" \
    train --steps 3 --checkpoint l.ckpt
  refused "--checkpoint l.ckpt is in use by pid $holder" train --steps 3 --checkpoint l.ckpt --force
  refused "--checkpoint l.ckpt is in use by pid $holder" train --steps 3 --checkpoint l.ckpt --resume
else
  fail "the first run did not take the lock l.ckpt.lock ($(cat "$w/l.ckpt.lock" 2>&1))"
fi
kill -9 "$holder" && wait "$holder" 2> /dev/null
[[ ! -e $w/l.ckpt ]] && ok || fail "a run killed before its last step wrote its checkpoint"
g train --steps 2 --checkpoint l.ckpt > /dev/null && [[ -s $w/l.ckpt && ! -e $w/l.ckpt.lock ]] && ok \
  || fail "the lock of a killed run was not taken over (or not removed after)"
rm -f "$w/l.ckpt"

# ---- 5: every output checked before the first step; the checkpoint last; a failure puts back
refused "--trace: cannot write nope/t.safetensors: its folder nope does not exist" \
  train --steps 100000000 --trace nope/t.safetensors
grep -q '^step 1 ' "$out/stdout" && fail "a bad --trace was found after training"
cp "$w/a.ckpt" "$w/r.ckpt" && cp "$w/a.csv" "$w/r.csv" && mkdir "$w/r.svg"  # the plot cannot be written
refused "the plot of --log: cannot write r.svg: it is not a regular file (a directory)" \
  train --steps 6 --checkpoint r.ckpt --log r.csv --resume
rmdir "$w/r.svg" && cp "$w/a.svg" "$w/r.svg"
# a checkpoint too large to write (a file size limit, as a full disk): the log and plot written
# before it are put back, the checkpoint stays as it was
printf '#!/usr/bin/env bash\nulimit -f 200\ntrap "" XFSZ\nexec "$@"\n' > "$out/limited.sh" && chmod +x "$out/limited.sh"
prefix=("$out/limited.sh")
refused "put back r.csv, r.svg as they were before this run" train --steps 6 --checkpoint r.ckpt --log r.csv --resume
refused "File too large; put back q.csv, q.svg as they were before this run" train --steps 2 --checkpoint q.ckpt --log q.csv
prefix=()

# ---- 6: sample compares the file's sizes with its settings before it builds the model
mv "$out/big.ckpt" "$w/"
# a regression ends in bad_alloc under a 4 GiB address-space limit, not in the OOM killer
[[ -n $measure ]] && command -v prlimit > /dev/null && prefix=(prlimit --as=4294967296)
refused "big.ckpt: its settings (layers=1024 dim=4096 block=64 value_embeds=0, vocab 57) make a model of 206167318528 parameters, but its model tensors hold 409344 numbers" \
  sample --checkpoint big.ckpt
prefix=()

# ---- 7: checkpoint fields checked; a non-finite loss stops the run
mv "$out"/{step,dtype,ve_mode,tokens,products,decay,eps,nan}.ckpt "$w/"
refused "step.ckpt is at step 9223372036854775808, past --steps 6" train --steps 6 --checkpoint step.ckpt --resume
for setting in dtype=f16:"neither f32 nor f64" ve_mode=hybrid:"neither sparse nor dense" \
    tokens=word:"none of char, byte or random" products=f16:"neither f32 nor bf16"; do
  file=${setting%%=*}.ckpt
  refused "$file: its settings say ${setting%%:*}, which is ${setting#*:}" sample --checkpoint "$file"
done
refused "decay.ckpt: its adamw.group.0.weight_decay is 1e+300, but this run's AdamW has weight_decay=0.1" \
  train --steps 6 --checkpoint decay.ckpt --resume
refused "eps.ckpt: its adamw.group.1.eps is 0, but this run's AdamW has eps=1e-08" train --steps 6 --checkpoint eps.ckpt --resume
refused "the loss of step 5 is NaN: training stops here" train --steps 6 --checkpoint nan.ckpt --resume
refused "the model's logits are not finite: its weights hold a NaN or an infinity" sample --checkpoint nan.ckpt
# the tape dump written during that step goes again
refused "the loss of step 5 is NaN: training stops here, and nothing of this step is written (a checkpoint of non-finite weights would be useless); the data, the settings or the checkpoint resumed from made it diverge; put back nan.json as it was before this run" \
  train --steps 6 --checkpoint nan.ckpt --resume --dump-tape nan.json
rm -f "$w"/{step,dtype,ve_mode,tokens,products,decay,eps,nan,big}.ckpt

# ---- 8: the small ones
ln -s loop_b "$w/loop_a" && ln -s loop_a "$w/loop_b"
refused "--log: cannot write loop_a: more than 40 symbolic links to follow (a loop?)" train --steps 1 --log loop_a
refused "--checkpoint: cannot write loop_a/c.ckpt: Too many levels of symbolic links" train --steps 1 --checkpoint loop_a/c.ckpt
refused "no checkpoint at" train --steps 1 --checkpoint none.ckpt --resume
long=$(printf 'n%.0s' $(seq 300))
refused "--log: cannot write $long.csv: File name too long" train --steps 1 --log "$long.csv"
mkdir -m 700 "$w/locked"
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [[ $(id -u) != 0 ]]; then
  chmod 000 "$w/locked"
  refused "--checkpoint: cannot write locked/c.ckpt: Permission denied" train --steps 1 --checkpoint locked/c.ckpt
  chmod 700 "$w/locked"
elif command -v setpriv > /dev/null && (cd "$w" && "${as_nobody[@]}" "$gpt" --help > /dev/null 2>&1); then
  prefix=("${as_nobody[@]}")  # root searches any folder: ask as nobody
  refused "--checkpoint: cannot write locked/c.ckpt: Permission denied" train --steps 1 --checkpoint locked/c.ckpt
  prefix=()
else
  echo "SKIP (class 8, a folder that cannot be searched): root searches any folder, and nobody cannot run $gpt here"
fi
rmdir "$w/locked"
# the plot's title is the --data path: escaped, and valid UTF-8 whatever the path's bytes
cp "$w/data.txt" "$w/a&b<script>x.txt"
cp "$w/data.txt" "$w/bad"$'\xff'".txt"
g train --steps 1 --data "a&b<script>x.txt" --log t.csv > /dev/null || fail "a --data path with & and < did not train"
g train --steps 1 --data "bad"$'\xff'".txt" --log u.csv --dump-tape u.json > /dev/null 2> "$out/stderr" \
  || fail "a non-UTF-8 --data path broke --log or --dump-tape: $(cat "$out/stderr")"
python3 - "$w" <<'PY' || fail "the plots' titles are not their --data paths as text"
import json, sys, xml.etree.ElementTree as ET
w = sys.argv[1]
ns = "{http://www.w3.org/2000/svg}"
title = lambda name: ET.parse(f"{w}/{name}").getroot().find(ns + "text").text
assert title("t.svg") == "gpt tiny: a&b<script>x.txt", title("t.svg")
assert title("u.svg") == "gpt tiny: bad\ufffd.txt", title("u.svg")
assert json.load(open(f"{w}/u.json"))["title"] == "gpt tiny: bad\ufffd.txt, step 1"
PY
rm -f "$w"/t.* "$w"/u.* "$w/a&b<script>x.txt" "$w/bad"$'\xff'".txt"
# a log row whose step is -2^63 (the plot's step axis overflowed on it)
cp "$w/a.ckpt" "$w/o.ckpt" && cp "$w/a.svg" "$w/o.svg"
{ head -n 2 "$w/a.csv"; echo "-9223372036854775808,3.9,,0.0001,100"; tail -n +3 "$w/a.csv"; } > "$w/o.csv"
refused "o.csv: line 3 is the row of step -9223372036854775808, after step 1: steps count up from 1" \
  train --steps 6 --checkpoint o.ckpt --log o.csv --resume
rm -f "$w"/o.*
refused "--seed: must be an integer from 0 to 18446744073709551615, got '-1'" train --steps 1 --seed -1
refused "--seed: must be an integer from 0 to 18446744073709551615, got '18446744073709551616'" \
  train --steps 1 --seed 18446744073709551616
refused "--seed: must be an integer from 0 to 18446744073709551615, got '-1'" sample --checkpoint a.ckpt --seed -1
g train --steps 1 --seed 18446744073709551615 > /dev/null && ok || fail "--seed 2^64 - 1 was refused"
refused "--dropout: must be a number from 0 to 0.99, got 'nan'" train --steps 1 --dropout nan
refused "--dropout: must be a number from 0 to 0.99, got '1'" train --steps 1 --dropout 1
# a temperature so small that logits / temperature overflow: the most likely token, every time
g sample --checkpoint a.ckpt --prompt "It was" --tokens 40 --temperature 1e-308 > "$out/cold.txt" \
  && g sample --checkpoint a.ckpt --prompt "It was" --tokens 40 --top-k 1 > "$out/greedy.txt" \
  && cmp -s "$out/cold.txt" "$out/greedy.txt" && ok || fail "--temperature 1e-308 did not sample the most likely tokens"

# ---- 9: --data costs about its own size in memory (it took about 4 times more: ids as int32)
if [[ -n $measure ]]; then
  head -c 1048576 /dev/zero | tr '\0' 'a' > "$w/small.txt" && printf 'b\n' >> "$w/small.txt"
  for _ in $(seq 32); do cat "$w/small.txt"; done > "$w/large.txt"
  python3 - "$gpt" "$w" <<'PY' || fail "--data of 32 MiB more took more than 1.5 times that in memory"
import resource, subprocess, sys
gpt, w = sys.argv[1:]
def peak_kib(data):
    subprocess.run([gpt, "train", "--steps", "1", "--data", f"{w}/{data}"], check=True, stdout=subprocess.DEVNULL)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child so far
small = peak_kib("small.txt")
large = peak_kib("large.txt")
extra = (large - small) / 1024
print(f"--data: 1 MiB peaks at {small / 1024:.0f} MiB, 33 MiB at {large / 1024:.0f} MiB (+{extra:.0f} MiB for 32 MiB more)")
sys.exit(0 if extra < 48 else 1)
PY
  rm -f "$w/small.txt" "$w/large.txt"
fi

echo "gpt hostile: $passed passed, $failed failed"
[[ $failed == 0 ]]
