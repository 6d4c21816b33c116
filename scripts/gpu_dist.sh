#!/usr/bin/env bash
# gpu_dist: src/dist on a GPU machine, in one run (scripts/gpu_check.sh runs it too):
#  1. tests/dist/test_dist through NCCL in a world of one (TAPEGRAD_TEST_BACKEND=1): every
#     collective at odd sizes and every dtype, data parallel and ZeRO-1 against one process, and a
#     captured all-reduce replayed ([gpu]);
#  2. two ranks, started without a launcher (TAPEGRAD_RANK and a rendezvous file): on two GPUs where
#     the machine has them, else on one GPU where the NCCL library allows it (NCCL 2.30's
#     NCCL_MULTI_RANK_GPU_ENABLE=1; NCCL_LIBRARY names such a library), else SKIP: test_dist at 2
#     ranks; gpt train on 2 ranks against --accumulate 2 in one process, eager, with --graph and
#     with ZeRO-1, byte for byte; and a rank that hangs, which the other's deadline ends (exit 124);
#  3. gpt's step with --dist against without, one rank: GPT-2 124M (bf16, --graph) and the small
#     config (a job of one makes no collective calls: the two should match).
#
#   BUILD=DIR LOGS=DIR [TIMING=0] scripts/gpu_dist.sh    (BUILD: a build with tests/dist/test_dist, examples/gpt and
#                                              libtapegrad.so; LD_LIBRARY_PATH set by the caller)
# Ends with one line per part, PASS/FAIL/SKIP/INFO; exit 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-cuda} logs=${LOGS:-gpu-dist-logs}
mkdir -p "$logs"
gpt=$build/examples/gpt test_dist=$build/tests/dist/test_dist
status=0
line() { printf '| %-44s | %-4s | %s\n' "$1" "$2" "$3" | tee -a "$logs/summary.txt"; [[ $2 != FAIL ]] || status=1; }
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
export TAPEGRAD_DIST_TIMEOUT=${TAPEGRAD_DIST_TIMEOUT:-60}

# NCCL: the system's libnccl.so.2 where the loader finds one, else PyTorch's wheel's (NCCL_LIBRARY
# names another); the wheel's for two ranks on one GPU (NCCL 2.30's opt-in)
wheel=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
system_nccl=$(ldconfig -p | awk '/libnccl\.so\.2/ {print $NF; exit}')
IFS=: read -ra dirs <<< "${LD_LIBRARY_PATH:-}"
for d in "${dirs[@]}"; do [[ -z $system_nccl && -f $d/libnccl.so.2 ]] && system_nccl=$d/libnccl.so.2; done
if [[ -n ${NCCL_LIBRARY:-} ]]; then export TAPEGRAD_NCCL_LIBRARY=$NCCL_LIBRARY
elif [[ -z $system_nccl && -f $wheel ]]; then export TAPEGRAD_NCCL_LIBRARY=$wheel
fi
echo "NCCL for one rank: ${TAPEGRAD_NCCL_LIBRARY:-libnccl.so.2, found by the loader}; PyTorch's wheel: ${wheel:-none}"

# 1. NCCL, one rank
timeout 300 env TAPEGRAD_TEST_DEVICE=cuda TAPEGRAD_TEST_BACKEND=1 "$test_dist" > "$logs/test_dist_nccl1.log" 2>&1
rc=$?
line "test_dist, NCCL, 1 rank (and [gpu])" "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" \
  "exit $rc; $(grep -E '^\[doctest\] test cases' "$logs/test_dist_nccl1.log" | tr -s ' ')"

# 2. two ranks: on two GPUs where the machine has them, else on one GPU where the NCCL library
# allows it (2.30's NCCL_MULTI_RANK_GPU_ENABLE=1; NCCL_LIBRARY names it, else PyTorch's wheel's);
# older NCCL refuses a second rank on a GPU ("Duplicate GPU detected"), and the part says SKIP
nccl_version() {  # nccl_version LIBRARY: its version code (22809 for 2.28.9), empty where unknown
  python3 -c 'import ctypes, sys
v = ctypes.c_int()
ctypes.CDLL(sys.argv[1]).ncclGetVersion(ctypes.byref(v))
print(v.value)' "$1" 2>/dev/null
}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# NCCL_LIBRARY where given, else the newer of PyTorch's wheel's and the system's
nccl=${NCCL_LIBRARY:-} code=""
if [[ -n $nccl ]]; then code=$(nccl_version "$nccl")
else
  for candidate in "$wheel" "$system_nccl"; do
    [[ -f $candidate ]] || continue
    c=$(nccl_version "$candidate")
    if [[ -n $c ]] && (( c > ${code:-0} )); then code=$c nccl=$candidate; fi
  done
fi
echo "NCCL for two ranks: ${nccl:-none} (version code ${code:-unknown}); wheel $(nccl_version "$wheel"), system $(nccl_version "$system_nccl")"
version=${code:+$((code / 10000)).$((code / 100 % 100)).$((code % 100))}
second_local_rank=1 two=""
if (( gpus >= 2 )); then two="2 ranks on 2 GPUs"
elif [[ -n $code ]] && (( code >= 23000 )); then two="2 ranks on one GPU" second_local_rank=0
  export NCCL_MULTI_RANK_GPU_ENABLE=1
else
  line "2 ranks (NCCL ${version:-unknown})" SKIP "$gpus GPU; NCCL ${version:-of unknown version} ($nccl) refuses two ranks on one GPU (2.30 allows it): two GPUs or NCCL_LIBRARY=a 2.30 library"
fi
# two_ranks LOG ARGS...: ranks 0 and 1 (on cuda:0, or cuda:0 and cuda:1) meeting through a fresh rendezvous file; the
# larger of their exit codes
two_ranks() {
  local log=$1 rv=$w/rendezvous.$RANDOM rc0 rc1
  shift
  TAPEGRAD_RANK=1 TAPEGRAD_WORLD_SIZE=2 TAPEGRAD_LOCAL_RANK=$second_local_rank TAPEGRAD_RENDEZVOUS=$rv timeout 300 "$@" > "$log.rank1" 2>&1 &
  local other=$!
  TAPEGRAD_RANK=0 TAPEGRAD_WORLD_SIZE=2 TAPEGRAD_LOCAL_RANK=0 TAPEGRAD_RENDEZVOUS=$rv timeout 300 "$@" > "$log" 2>&1
  rc0=$?
  local i
  for i in $(seq 200); do kill -0 $other 2> /dev/null || break; sleep 0.1; done
  kill -9 $other 2> /dev/null  # a rank still there 20 s after rank 0 ended (one that hangs on purpose)
  wait $other
  rc1=$?
  return $((rc0 > rc1 ? rc0 : rc1))
}
if [[ -n $two ]]; then
  [[ -f $nccl ]] && export TAPEGRAD_NCCL_LIBRARY=$nccl
  two_ranks "$logs/test_dist_nccl2.log" env TAPEGRAD_TEST_DEVICE=cuda "$test_dist"
  rc=$?
  line "test_dist, NCCL $version, $two" "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" \
    "exit $rc; $(grep -E '^\[doctest\] test cases' "$logs/test_dist_nccl2.log" | tr -s ' '); $(grep -m1 -iE 'error|duplicate' "$logs/test_dist_nccl2.log.rank1" | head -c 120)"
  if [[ $rc -eq 0 ]]; then
    for mode in eager graph zero; do
      flags=()
      [[ $mode == graph ]] && flags=(--graph)
      [[ $mode == zero ]] && flags=(--zero 1)
      timeout 300 "$gpt" train --device cuda --steps 20 --accumulate 2 "${flags[@]}" --checkpoint "$w/one_$mode.ckpt" \
        > "$logs/gpt_one_$mode.log" 2>&1
      two_ranks "$logs/gpt_two_$mode.log" "$gpt" train --device cuda --steps 20 "${flags[@]}" --checkpoint "$w/two_$mode.ckpt"
      rc=$?
      if [[ $rc -eq 0 ]] && cmp -s "$w/one_$mode.ckpt" "$w/two_$mode.ckpt"; then
        line "gpt, 2 ranks = --accumulate 2 ($mode)" PASS "same checkpoint bytes after 20 steps"
      else
        line "gpt, 2 ranks = --accumulate 2 ($mode)" FAIL "exit $rc, or the checkpoints differ ($logs/gpt_two_$mode.log)"
      fi
    done
    cmp -s "$w/one_eager.ckpt" "$w/one_graph.ckpt" && line "gpt --accumulate 2: --graph = eager" PASS "same bytes" \
      || line "gpt --accumulate 2: --graph = eager" FAIL "the captured step gave other bytes"
    start=$(date +%s)
    TAPEGRAD_DIST_TIMEOUT=10 TAPEGRAD_DIST_FAULT="rank=1,phase=step 3,action=hang" \
      two_ranks "$logs/gpt_hang.log" "$gpt" train --device cuda --steps 6
    rc=$?
    took=$(($(date +%s) - start))
    # rank 1 sleeps for ever (two_ranks kills it once rank 0 has ended): rank 0's message is the check
    if grep -q 'did not complete within 10 s (TAPEGRAD_DIST_TIMEOUT): rank 1 (at step 3, collective' "$logs/gpt_hang.log"; then
      line "NCCL: a hung rank ends the job" PASS "rank 0 after ${took} s: $(grep -m1 'gpt:' "$logs/gpt_hang.log" | head -c 150)"
    else
      line "NCCL: a hung rank ends the job" FAIL "exit $rc after ${took} s: $(tail -n 2 "$logs/gpt_hang.log" | head -c 200)"
    fi
  fi
fi

# 3. the step with --dist (NCCL, one rank) against without (TIMING=0 leaves it out)
[[ ${TIMING:-1} == 0 ]] && exit $status
for config in gpt2 small; do
  args=(train --config "$config" --device cuda --dropout 0 --autocast bf16 --graph --steps 30)
  [[ $config == gpt2 ]] && args+=(--tokens random --gelu tanh --fused-mlp)
  timeout 300 "$gpt" "${args[@]}" > "$logs/step_${config}_plain.log" 2>&1
  timeout 300 "$gpt" "${args[@]}" --dist > "$logs/step_${config}_dist.log" 2>&1
  line "$config step: without / with --dist (1 rank)" INFO \
    "$(grep -h '^median' "$logs/step_${config}_plain.log" "$logs/step_${config}_dist.log" | sed 's/ over steps.*(/ (/' | tr '\n' ';')"
done
exit $status
