#!/usr/bin/env bash
# A hostile sweep over every program: bad flags, numbers out of range, files that are not what
# they claim (truncated, flipped bytes, /dev/zero, a FIFO, a folder, a symlink loop, huge shapes),
# outputs that cannot be written, outputs that are a FIFO, a socket, an input, or a link another
# user planted in a sticky folder. Every invocation must end within its time limit with exit 0, 1
# or 2 (never a signal, never another code), say why when it is not 0 (on stderr; bob inspect's
# verdict is its report, on stdout), leave every input file byte for byte as it was, and leave the
# FIFO a FIFO and the socket a socket. Prints one line a failing invocation, then "N passed, N
# failed".
#
#   hostile_sweep.sh TINY_STEP BOB VALUE_EMBED TAPE
set -u
TINY=$1 BOB=$2 VE=$3 TAPE=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0

# ---- the files the invocations read: good ones made by the programs, and damaged copies
"$BOB" fixture --out "$work/rec" > /dev/null
"$BOB" train --input "$work/rec" --checkpoint "$work/good.ckpt" --fresh > /dev/null 2>&1
"$TINY" --dump-tape "$work/good.json" > /dev/null
cp tests/fixtures/tiny/configs/03.json "$work/config.json" 2> /dev/null || cp "$(dirname "$0")/../fixtures/tiny/configs/03.json" "$work/config.json"
head -c 700 "$work/good.ckpt" > "$work/short.ckpt"
cp "$work/good.ckpt" "$work/flipped.ckpt"
printf '\x7f' | dd of="$work/flipped.ckpt" bs=1 seek=300000 conv=notrunc 2> /dev/null
head -c 100 "$work/rec" > "$work/short.rec"
head -c 2000 "$work/good.json" > "$work/short.json"
python3 - "$work/good.json" "$work/huge_shape.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["values"][0]["shape"] = [4611686018427387905, 4]
json.dump(d, open(sys.argv[2], "w"))
PY
printf '{"vocab": ["a"], "inputs": ["a"], "targets": ["a"], "embed_dim": 99999999999999999999}' > "$work/big_dim.json"
printf '{"vocab": ' > "$work/cut.json"
mkfifo "$work/fifo"
python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$work/sock"
printf 'precious\n' > "$work/precious.txt"
if [[ $(id -u) == 0 ]]; then  # a link to it that another user planted in a sticky folder anyone may write to
  mkdir -m 1777 "$work/shared"
  ln -s ../precious.txt "$work/shared/out" && chown -h 65534:65534 "$work/shared/out"
fi
mkdir "$work/folder"
ln -s loop_b "$work/loop_a"
ln -s loop_a "$work/loop_b"
mkdir -p "$work/ro"
chmod 555 "$work/ro"
inputs=("$work/rec" "$work/good.ckpt" "$work/good.json" "$work/config.json" "$work/short.ckpt" "$work/flipped.ckpt"
        "$work/short.rec" "$work/short.json" "$work/huge_shape.json" "$work/big_dim.json" "$work/cut.json"
        "$work/precious.txt")
sums() { for f in "${inputs[@]}"; do sha256sum "$f"; done; }
before=$(sums)

# run NAME LIMIT_SECONDS COMMAND...: one invocation, judged
run() {
  local name=$1 limit=$2
  shift 2
  timeout -k 5 "$limit" "$@" < /dev/null > "$work/out" 2> "$work/err"
  local rc=$?
  local why=""
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then why="did not end within $limit s"
  elif [[ $rc -gt 2 ]]; then why="exit $rc"
  elif [[ $rc -ne 0 && ! -s $work/err && ! -s $work/out ]]; then why="exit $rc without a word"
  fi
  local now
  now=$(sums)
  if [[ $now != "$before" ]]; then why="${why:+$why; }an input file changed"; before=$now; fi
  if [[ ! -p $work/fifo || ! -S $work/sock ]]; then
    why="${why:+$why; }the FIFO or the socket was replaced"
    rm -f "$work/fifo" "$work/sock" && mkfifo "$work/fifo"
    python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$work/sock"
  fi
  if [[ -n $why ]]; then
    echo "FAIL $name: $why: $(head -c 200 "$work/err" | tr '\n' ' ')"
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
}

# ---- tiny_step
run "tiny_step no such flag" 20 "$TINY" --no-such-flag
run "tiny_step --config missing" 20 "$TINY" --config "$work/missing.json"
run "tiny_step --config folder" 20 "$TINY" --config "$work/folder"
run "tiny_step --config fifo" 20 "$TINY" --config "$work/fifo"
run "tiny_step --config /dev/zero" 20 "$TINY" --config /dev/zero
run "tiny_step --config loop" 20 "$TINY" --config "$work/loop_a"
run "tiny_step --config cut" 20 "$TINY" --config "$work/cut.json"
run "tiny_step --config huge embed_dim" 20 "$TINY" --config "$work/big_dim.json"
run "tiny_step --config a tape dump" 20 "$TINY" --config "$work/good.json"
run "tiny_step --check missing" 20 "$TINY" --check "$work/missing.json"
run "tiny_step --check folder" 20 "$TINY" --check "$work/folder"
run "tiny_step --check /dev/zero" 20 "$TINY" --check /dev/zero
run "tiny_step --write into read-only" 20 "$TINY" --write "$work/ro/trace.json"
run "tiny_step --write into missing folder" 20 "$TINY" --write "$work/nope/trace.json"
run "tiny_step --dump-tape into folder" 20 "$TINY" --dump-tape "$work/folder"
run "tiny_step --device nonsense" 20 "$TINY" --device gpu
run "tiny_step --device cuda:99999999999" 20 "$TINY" --device cuda:99999999999
run "tiny_step --device cuda:-1" 20 "$TINY" --device cuda:-1
run "tiny_step two configs" 20 "$TINY" --config "$work/config.json" --config "$work/config.json"
for arg in "" "--overwrite-bug" "--config $work/config.json"; do
  # shellcheck disable=SC2086
  run "tiny_step $arg" 60 "$TINY" $arg
done

# ---- bob
run "bob no such subcommand" 20 "$BOB" nosuch
run "bob train no input" 20 "$BOB" train --checkpoint "$work/x.ckpt" --fresh
run "bob fixture --offset -1" 20 "$BOB" fixture --offset -1 --out "$work/r1"
run "bob fixture --offset huge" 20 "$BOB" fixture --offset 99999999999999999999999 --out "$work/r2"
run "bob fixture --offset past the corpus" 20 "$BOB" fixture --offset 1000000 --out "$work/r3"
run "bob fixture --corpus /dev/zero" 20 "$BOB" fixture --corpus /dev/zero --out "$work/r4"
run "bob fixture --corpus fifo" 20 "$BOB" fixture --corpus "$work/fifo" --out "$work/r5"
run "bob fixture --out read-only" 20 "$BOB" fixture --out "$work/ro/r"
run "bob fixture 4 prompts" 20 "$BOB" fixture --prompt a --prompt b --prompt c --prompt d --out "$work/r6"
run "bob train --input short" 20 "$BOB" train --input "$work/short.rec" --checkpoint "$work/t1.ckpt" --fresh
run "bob train --input /dev/zero" 20 "$BOB" train --input /dev/zero --checkpoint "$work/t2.ckpt" --fresh
run "bob train --input fifo" 20 "$BOB" train --input "$work/fifo" --checkpoint "$work/t3.ckpt" --fresh
run "bob train --input folder" 20 "$BOB" train --input "$work/folder" --checkpoint "$work/t4.ckpt" --fresh
run "bob train --input a checkpoint" 20 "$BOB" train --input "$work/good.ckpt" --checkpoint "$work/t5.ckpt" --fresh
cp "$work/short.ckpt" "$work/resume_short.ckpt"
run "bob train --resume short" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/resume_short.ckpt" --resume
cmp -s "$work/short.ckpt" "$work/resume_short.ckpt" || { echo "FAIL bob: a refused short checkpoint changed"; failed=$((failed + 1)); }
cp "$work/flipped.ckpt" "$work/resume_flipped.ckpt"
run "bob train --resume flipped" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/resume_flipped.ckpt" --resume
cmp -s "$work/flipped.ckpt" "$work/resume_flipped.ckpt" || { echo "FAIL bob: a refused flipped checkpoint changed"; failed=$((failed + 1)); }
run "bob train --resume missing" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/none.ckpt" --resume
run "bob train --resume fifo" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/fifo" --resume
run "bob train --resume /dev/zero" 20 "$BOB" train --input "$work/rec" --checkpoint /dev/zero --resume
run "bob train --resume loop" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/loop_a" --resume
run "bob train --fresh over existing" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/good.ckpt" --fresh
run "bob train --fresh and --resume" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/t6.ckpt" --fresh --resume
run "bob train --predictions read-only" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/t7.ckpt" --fresh \
  --predictions "$work/ro/p"
run "bob train --predictions folder" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/t8.ckpt" --fresh \
  --predictions "$work/folder"
run "bob train --predictions /dev/full" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/t9.ckpt" --fresh \
  --predictions /dev/full
run "bob train --dump-tape read-only" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/t10.ckpt" --fresh \
  --dump-tape "$work/ro/d.json"
run "bob train --checkpoint in read-only" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/ro/c.ckpt" --fresh
run "bob train --device gpu" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/t11.ckpt" --fresh --device gpu
run "bob train --device cuda:99999999999" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/t12.ckpt" --fresh \
  --device cuda:99999999999
run "bob inspect short" 20 "$BOB" inspect "$work/short.ckpt"
run "bob inspect flipped" 20 "$BOB" inspect "$work/flipped.ckpt"
run "bob inspect /dev/zero" 20 "$BOB" inspect /dev/zero
run "bob inspect fifo" 20 "$BOB" inspect "$work/fifo"
run "bob inspect folder" 20 "$BOB" inspect "$work/folder"
run "bob inspect a record" 20 "$BOB" inspect "$work/rec"
run "bob inspect good" 20 "$BOB" inspect "$work/good.ckpt"
run "bob verify-resume --invocations -1" 20 "$BOB" verify-resume --input "$work/rec" --invocations -1
run "bob verify-resume --invocations 0" 20 "$BOB" verify-resume --input "$work/rec" --invocations 0
run "bob verify-resume --invocations huge" 20 "$BOB" verify-resume --input "$work/rec" --invocations 18446744073709551615
run "bob verify-resume --input short" 20 "$BOB" verify-resume --input "$work/short.rec" --invocations 2
run "bob verify-resume 2" 60 "$BOB" verify-resume --input "$work/rec" --invocations 2

# ---- value_embed
run "value_embed no such flag" 20 "$VE" --no-such-flag
run "value_embed --dim huge" 20 "$VE" --vocab 256 --dim 72057594037927936
run "value_embed --dim -1" 20 "$VE" --dim -1
run "value_embed --vocab 0" 20 "$VE" --vocab 0
run "value_embed --vocab huge" 20 "$VE" --vocab 99999999999999
run "value_embed --planes 0" 20 "$VE" --planes 0
run "value_embed --planes -3" 20 "$VE" --planes -3
run "value_embed --steps -1" 20 "$VE" --steps -1
run "value_embed --steps huge" 20 "$VE" --steps 99999999999999999999
run "value_embed --device gpu" 20 "$VE" --device gpu
run "value_embed --device cuda:99999999999" 20 "$VE" --device cuda:99999999999
run "value_embed --runs -1" 20 "$VE" --runs -1
run "value_embed --bench" 20 "$VE" --bench
run "value_embed default" 120 "$VE"

# ---- tape
run "tape no subcommand" 20 "$TAPE"
run "tape show missing" 20 "$TAPE" show "$work/missing.json"
run "tape show folder" 20 "$TAPE" show "$work/folder"
run "tape show fifo" 20 "$TAPE" show "$work/fifo"
run "tape show /dev/zero" 20 "$TAPE" show /dev/zero
run "tape show loop" 20 "$TAPE" show "$work/loop_a"
run "tape show cut" 20 "$TAPE" show "$work/short.json"
run "tape show huge shape" 20 "$TAPE" show "$work/huge_shape.json"
run "tape show a checkpoint" 20 "$TAPE" show "$work/good.ckpt"
run "tape show a config" 20 "$TAPE" show "$work/config.json"
run "tape step huge shape" 20 "$TAPE" step "$work/huge_shape.json"
run "tape dot cut" 20 "$TAPE" dot "$work/short.json"
run "tape dot -o read-only" 20 "$TAPE" dot "$work/good.json" -o "$work/ro/g.dot"
run "tape html -o folder" 20 "$TAPE" html "$work/good.json" -o "$work/folder"
run "tape html three files" 20 "$TAPE" html "$work/good.json" "$work/good.json" "$work/good.json" -o "$work/p.html"
run "tape html no -o" 20 "$TAPE" html "$work/good.json"
run "tape show good" 20 "$TAPE" show "$work/good.json"
run "tape step good" 20 "$TAPE" step "$work/good.json"
run "tape ops" 20 "$TAPE" ops

# ---- every writer's outputs (io::write_file_atomic's rules): a FIFO, a socket, a planted link, an input
run "tape dot -o fifo" 20 "$TAPE" dot "$work/good.json" -o "$work/fifo"
run "tape html -o socket" 20 "$TAPE" html "$work/good.json" -o "$work/sock"
run "tape html -o its input" 20 "$TAPE" html "$work/good.json" -o "$work/good.json"
run "tape dot -o its input" 20 "$TAPE" dot "$work/good.json" -o "$work/good.json"
run "tiny_step --write fifo" 20 "$TINY" --write "$work/fifo"
run "tiny_step --dump-tape socket" 20 "$TINY" --dump-tape "$work/sock"
run "tiny_step --write its --config" 20 "$TINY" --config "$work/config.json" --write "$work/config.json"
run "value_embed --dump-tape fifo" 60 "$VE" --steps 2 --dump-tape "$work/fifo"
run "bob fixture --out socket" 20 "$BOB" fixture --out "$work/sock"
run "bob train --dump-tape fifo" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/s1.ckpt" --fresh \
  --dump-tape "$work/fifo"
run "bob train --predictions its input" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/s2.ckpt" --fresh \
  --predictions "$work/rec"
if [[ -L $work/shared/out ]]; then
  run "tape dot -o a planted link" 20 "$TAPE" dot "$work/good.json" -o "$work/shared/out"
  run "tiny_step --write a planted link" 20 "$TINY" --write "$work/shared/out"
  run "bob fixture --out a planted link" 20 "$BOB" fixture --out "$work/shared/out"
fi

# flipped bytes, one at a time, through each reader
for offset in 0 8 12 40 100 259 270 786690; do
  cp "$work/good.ckpt" "$work/m.ckpt"
  printf '\xff' | dd of="$work/m.ckpt" bs=1 seek=$offset conv=notrunc 2> /dev/null
  cp "$work/m.ckpt" "$work/m_before.ckpt"
  run "bob inspect, byte $offset flipped" 20 "$BOB" inspect "$work/m.ckpt"
  run "bob train --resume, byte $offset flipped" 20 "$BOB" train --input "$work/rec" --checkpoint "$work/m.ckpt" --resume
  if [[ $offset -lt 786690 ]] && ! cmp -s "$work/m.ckpt" "$work/m_before.ckpt"; then
    echo "FAIL bob: the checkpoint with byte $offset flipped changed after a refusal"; failed=$((failed + 1))
  fi
done
for offset in 0 9 20 600 1560; do
  cp "$work/rec" "$work/m.rec"
  printf '\xff' | dd of="$work/m.rec" bs=1 seek=$offset conv=notrunc 2> /dev/null
  run "bob train --input, byte $offset flipped" 20 "$BOB" train --input "$work/m.rec" --checkpoint "$work/mr$offset.ckpt" --fresh
done
for offset in 0 1 50 500 1500; do
  cp "$work/good.json" "$work/m.json"
  printf '\x01' | dd of="$work/m.json" bs=1 seek=$offset conv=notrunc 2> /dev/null
  run "tape show, byte $offset flipped" 20 "$TAPE" show "$work/m.json"
done

chmod 755 "$work/ro"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
