#!/usr/bin/env bash
# A job of 2 ranks ends, and never hangs, when rank 1 fails at step 6 (TAPEGRAD_DIST_FAULT, Note
# [fault injection] in src/dist/comm.cpp), with TAPEGRAD_DIST_TIMEOUT=4:
# - it hangs: rank 0's all-to-all times out, exit 124, naming rank 1, the collective and the step;
# - it throws: it ends the job itself (MPI_Abort), exit 2, saying why;
# - it exits without a word, or is killed (SIGKILL): mpirun ends the job, naming rank 1;
# each within twice the deadline of the fault (the clean run's time added), and the checkpoint on
# disk stays the last complete one (step 4 of --save-every 4), byte for byte a clean 4-step run's.
#   dist_faults.sh GPT MPIRUN WORKDIR
set -euo pipefail
gpt=$(realpath "$1") mpirun=$2 w=$3/dist_faults
rm -rf "$w" && mkdir -p "$w" && cd "$w"
fail() { echo "FAIL: dist_faults: $*"; exit 1; }
export TAPEGRAD_DIST_TIMEOUT=4
"$mpirun" -np 2 "$gpt" train --steps 4 --checkpoint clean.ckpt > /dev/null 2>&1
ms() { echo $(($(date +%s%N) / 1000000)); }
start=$(ms)
"$mpirun" -np 2 "$gpt" train --steps 5 > /dev/null 2>&1
clean=$(($(ms) - start))

run_fault() {  # run_fault ACTION WANT_RC PATTERN
  local action=$1 want=$2 pattern=$3 rc=0
  start=$(ms)
  TAPEGRAD_DIST_FAULT="rank=1,phase=step 6,action=$action" \
    timeout 120 "$mpirun" -np 2 "$gpt" train --steps 8 --save-every 4 --checkpoint "$action.ckpt" > "$action.log" 2>&1 \
    || rc=$?
  local took=$(($(ms) - start))
  [[ $rc == "$want" ]] || { tail -n 20 "$action.log"; fail "rank 1 that does '$action': exit $rc, not $want"; }
  grep -q -- "$pattern" "$action.log" || { tail -n 20 "$action.log"; fail "rank 1 that does '$action': no '$pattern'"; }
  ((took < 2000 * TAPEGRAD_DIST_TIMEOUT + clean)) \
    || fail "rank 1 that does '$action': the job took ${took} ms, over twice the deadline and a clean run's ${clean} ms"
  cmp -s clean.ckpt "$action.ckpt" || fail "rank 1 that does '$action': the checkpoint is not the clean step-4 one"
  echo "rank 1 that does '$action' at step 6: exit $rc in ${took} ms (deadline 4 s, a clean run ${clean} ms), named;" \
    "the step-4 checkpoint intact"
}
run_fault hang 124 "rank 0: the all-to-all of step 6 (.* MiB) did not complete within 4 s (TAPEGRAD_DIST_TIMEOUT): rank 1 never reached it"
run_fault throw 2 "rank 1 fails at the all-to-all of step 6, as TAPEGRAD_DIST_FAULT asks"
run_fault exit 3 "Process name: \[\[[0-9]*,[0-9]*\],1\]"
run_fault kill 137 "process rank 1 with PID .* exited on signal 9"
