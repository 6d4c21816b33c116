#!/usr/bin/env bash
# gpu_check: every GPU test and benchmark of the CUDA backend, on a machine with an NVIDIA GPU.
# Run it on each change to src/cuda.
#
#   scripts/gpu_check.sh           build BUILD (default build-cuda, -Dcuda=enabled) where it is not
#                                  built, then run every check (`run`)
#   scripts/gpu_check.sh run       run every check against the programs already built in BUILD
#   scripts/gpu_check.sh prepare   build BUILD, and copy into .device/lib the shared libraries another
#                                  GPU machine may lack (simdjson; OpenBLAS and the gfortran and
#                                  quadmath libraries it needs; Open MPI's)
#   scripts/gpu_check.sh pack DIR  after prepare, to run the checks on another GPU machine that lacks
#                                  the build's libraries: copy the programs `run` calls, stripped, into
#                                  .device/DIR under their build-tree paths, and pack that and
#                                  .device/lib into .device/pack.tar.xz (about 10 MB). Unpack it there,
#                                  in a checkout of the same commit, and run:
#                                    tar xJf .device/pack.tar.xz -C .device &&
#                                      BUILD=.device/DIR scripts/gpu_check.sh run
#
# `run` does, in order: tests/cuda (test_cuda); tiny_step on the CPU and on CUDA for the shipped
# trace, --overwrite-bug and every fixture config, comparing the two byte for byte and each with
# its expected file; bench/cuda_bench and the PyTorch baseline (bench/cuda_torch_baseline.py); the
# N-d kernels' bandwidth (bench/nd_cuda_bench) and PyTorch's (bench/nd_torch.py); bench/attention_bench
# against PyTorch's attention (bench/attention_torch.py);
# test_cuda once more under compute-sanitizer memcheck; examples/gpt (scripts/gpu_gpt.sh); src/dist
# through NCCL (scripts/gpu_dist.sh). BENCH=0 runs the checks without the benchmarks. It ends with a
# short table; full logs go to the folder LOGS (default ./gpu-check-logs). Exit status 0 when all
# passed.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-cuda}

# the programs `run` calls, as paths under the build folder
programs=(libtapegrad.so tests/cuda/test_cuda tests/cuda/test_norm_cuda tests/cuda/test_nn_cuda
  tests/value_embed/test_value_embed_cuda apps/tiny_step apps/bob bench/cuda_bench bench/nd_cuda_bench
  bench/attention_bench examples/gpt bench/gpt_value_embed tests/dist/test_dist)

build_programs() {
  [[ -x /usr/local/cuda/bin/nvcc ]] && export PATH="/usr/local/cuda/bin:$PATH"
  if [[ ! -f $build/build.ninja ]]; then meson setup "$build" -Dcuda=enabled || exit 1; fi
  scripts/stale_cuda_objects.sh "$build"
  ninja -C "$build" "${programs[@]}" || exit 1
}

prepare() {
  build_programs
  mkdir -p .device/lib
  local lib
  for lib in $(ldd "$build/libtapegrad.so" |
               awk '/libsimdjson|libopenblas|libgfortran|libquadmath|libmpi|libopen-rte|libopen-pal|libhwloc|libevent|libudev/ {print $3}'); do
    cp -L "$lib" .device/lib/ || exit 1
  done
  du -sh "$build" .device/lib
  echo "now: scripts/gpu_check.sh run on this machine's GPU, or scripts/gpu_check.sh pack DIR for another GPU machine"
}

pack() {
  local name=${1:?usage: scripts/gpu_check.sh pack DIR (a folder name under .device)} p
  [[ $name != */* && $name != lib ]] || { echo "pack: DIR is a plain folder name under .device, not lib" >&2; exit 2; }
  [[ -d .device/lib ]] || { echo "pack: .device/lib is missing (run prepare first)" >&2; exit 1; }
  local dest=.device/$name
  rm -rf "$dest"
  for p in "${programs[@]}"; do
    [[ -f $build/$p ]] || { echo "pack: $build/$p is missing (run prepare first)" >&2; exit 1; }
    mkdir -p "$dest/$(dirname "$p")"
    strip --strip-unneeded -o "$dest/$p" "$build/$p" || exit 1
  done
  tar cJf .device/pack.tar.xz -C .device lib "$name" || exit 1
  du -sh .device/pack.tar.xz
  echo "on the other GPU machine, in a checkout of this commit with .device/pack.tar.xz in place:"
  echo "  tar xJf .device/pack.tar.xz -C .device && BUILD=.device/$name scripts/gpu_check.sh run"
}

run() {
  local logs=${LOGS:-${OUT:-gpu-check-logs}}
  mkdir -p "$logs"
  . scripts/gpu_env.sh  # the machine's cuBLAS (and a pack's .device/lib) on LD_LIBRARY_PATH
  local table=() failed=0
  note() { table+=("$(printf '| %-34s | %-6s | %s' "$1" "$2" "$3")"); [[ $2 == PASS || $2 == INFO ]] || failed=1; }
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$logs/device.txt"

  # 1. the GPU tests, with chained launches (the default) and with plain ones (Note [chained
  # launches] in src/cuda/memory.cu). Every GPU command runs under `timeout`: a hang costs minutes,
  # not the whole run.
  local t0 rc summary mode
  for mode in 1 0; do
    t0=$SECONDS
    TAPEGRAD_CUDA_CHAINED=$mode timeout 150 "$build/tests/cuda/test_cuda" > "$logs/test_cuda_$mode.log" 2>&1
    rc=$?
    summary=$(awk -F'|' '/^\[doctest\] test cases:/ {gsub(/[^0-9]/, "", $1); gsub(/^ +| +$/, "", $2); gsub(/^ +| +$/, "", $3);
                            gsub(/^ +| +$/, "", $4); printf "%s test cases: %s, %s, %s", $1, $2, $3, $4}' "$logs/test_cuda_$mode.log")
    grep -E -A12 '^TEST CASE' "$logs/test_cuda_$mode.log" | head -n 40
    note "test_cuda (chained launches $([[ $mode == 1 ]] && echo on || echo off))" \
      "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" "exit $rc; $summary ($((SECONDS - t0)) s)"
  done
  # the wgmma attention against the mma.sync one (Note [wgmma attention]): their differences, shown
  timeout 60 "$build/tests/cuda/test_cuda" -s --test-case='*wgmma*' > "$logs/wgmma.log" 2>&1
  rc=$?
  grep -E 'MESSAGE|SKIP|wrong|ERROR' "$logs/wgmma.log" | sed 's/^.*MESSAGE: //' | head -n 40
  note "wgmma attention against mma.sync" "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" "exit $rc; $logs/wgmma.log"
  # the suites of the normalisation ops and of the nn layers, on the device against the CPU
  local suite
  for suite in test_norm_cuda test_nn_cuda; do
    t0=$SECONDS
    timeout 120 "$build/tests/cuda/$suite" --needs=gpu > "$logs/$suite.log" 2>&1
    rc=$?
    grep -E -A12 '^TEST CASE' "$logs/$suite.log" | head -n 40
    note "$suite" "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" \
      "exit $rc; $(grep -E '^\[doctest\] test cases:' "$logs/$suite.log" | tr -s ' ') ($((SECONDS - t0)) s)"
  done

  # 2. tiny_step: CPU against CUDA, byte for byte, and both against the expected files. The traces
  # go to a scratch folder; the logs keep the first differing pair.
  local fixtures=tests/fixtures/tiny same=0 differ=0 expected_ok=0 expected_bad=0 cases=0 traces
  traces=$(mktemp -d)
  tiny_pair() {  # tiny_pair NAME EXPECTED-FILE ARGS...
    local name=$1 expected=$2
    shift 2
    "$build/apps/tiny_step" "$@" > "$traces/cpu_$name.json" 2> "$traces/cpu_$name.err"
    timeout 30 "$build/apps/tiny_step" --device cuda "$@" > "$traces/cuda_$name.json" 2> "$traces/cuda_$name.err"
    cases=$((cases + 1))
    if cmp -s "$traces/cpu_$name.json" "$traces/cuda_$name.json" && [[ -s $traces/cuda_$name.json ]]; then
      same=$((same + 1))
    else
      differ=$((differ + 1))
      if [[ $differ -le 3 ]]; then
        echo "tiny_step $name: CPU and CUDA differ:"; head -c 300 "$traces/cuda_$name.err"
        diff "$traces/cpu_$name.json" "$traces/cuda_$name.json" | head -n 8
      fi
      [[ $differ -eq 1 ]] && cp "$traces/cpu_$name.json" "$traces/cuda_$name.json" "$logs/"
    fi
    if [[ -n $expected ]]; then
      if cmp -s "$expected" "$traces/cuda_$name.json"; then expected_ok=$((expected_ok + 1)); else
        expected_bad=$((expected_bad + 1)); [[ $expected_bad -le 3 ]] && echo "tiny_step $name: CUDA output differs from $expected"; fi
    fi
  }
  t0=$SECONDS
  tiny_pair default "$fixtures/step-trace.json"
  tiny_pair overwrite_bug "" --overwrite-bug
  for cfg in "$fixtures"/configs/??.json; do
    local n
    n=$(basename "$cfg" .json)
    tiny_pair "config_$n" "$fixtures/configs/$n.expected.json" --config "$cfg"
  done
  note "tiny_step CPU == CUDA" "$([[ $differ -eq 0 ]] && echo PASS || echo FAIL)" "$same of $cases traces identical ($((SECONDS - t0)) s)"
  note "tiny_step CUDA == expected files" "$([[ $expected_bad -eq 0 ]] && echo PASS || echo FAIL)" \
    "$expected_ok of $((expected_ok + expected_bad)) match the Python reference's output"
  # a clean refusal on a device that does not exist: exit 2 and a message
  "$build/apps/tiny_step" --device cuda:7 > /dev/null 2> "$traces/bad_device.err"
  rc=$?
  note "tiny_step --device cuda:7" "$([[ $rc -eq 2 ]] && echo PASS || echo FAIL)" "exit $rc: $(head -c 110 "$traces/bad_device.err")"
  rm -rf "$traces"

  # 2b. the value-embed path's GPU tests
  timeout 120 "$build/tests/value_embed/test_value_embed_cuda" > "$logs/test_value_embed_cuda.log" 2>&1
  rc=$?
  note "test_value_embed_cuda" "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" \
    "$(grep -E '^\[doctest\] test cases' "$logs/test_value_embed_cuda.log" | head -c 90)"

  # 2c. bob on the GPU: fresh-process resume bit for bit (replaying CUDA graphs, and op by op),
  # the graph path against the op-by-op path byte for byte, GPU against CPU after 30 updates,
  # checkpoints crossing devices, and the time of whole invocations
  local bobdir bob="$build/apps/bob"
  bobdir=$(mktemp -d)
  "$bob" fixture --out "$bobdir/rec" > /dev/null
  timeout 60 "$bob" verify-resume --input "$bobdir/rec" --invocations 3 --device cuda > "$logs/bob_verify.txt" 2>&1
  rc=$?
  tail -n 4 "$logs/bob_verify.txt"
  note "bob verify-resume --device cuda" "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" "exit $rc: $(tail -n 1 "$logs/bob_verify.txt" | head -c 100)"
  timeout 60 "$bob" verify-resume --input "$bobdir/rec" --invocations 3 --device cuda --no-graph \
    > "$logs/bob_verify_nograph.txt" 2>&1
  rc=$?
  tail -n 1 "$logs/bob_verify_nograph.txt"
  note "bob verify-resume, op by op" "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" "exit $rc: $(tail -n 1 "$logs/bob_verify_nograph.txt" | head -c 100)"
  local mode flags same_modes=0 mode_cases=0
  for flags in "" "--overwrite-bug"; do  # graph and op by op, 3 invocations each: the same bytes?
    for mode in graph nograph; do
      timeout 30 "$bob" train --input "$bobdir/rec" --checkpoint "$bobdir/$mode.ckpt" --fresh --force --device cuda $flags \
        $([[ $mode == nograph ]] && echo --no-graph) > "$bobdir/$mode.log" 2>&1
      for _ in 1 2; do
        timeout 30 "$bob" train --input "$bobdir/rec" --checkpoint "$bobdir/$mode.ckpt" --resume --device cuda $flags \
          $([[ $mode == nograph ]] && echo --no-graph) >> "$bobdir/$mode.log" 2>&1
      done
    done
    mode_cases=$((mode_cases + 1))
    cmp -s "$bobdir/graph.ckpt" "$bobdir/nograph.ckpt" && grep -q "one CUDA graph" "$bobdir/graph.log" && same_modes=$((same_modes + 1))
    diff <(grep "loss" "$bobdir/graph.log" | sed 's/;.*//') <(grep "loss" "$bobdir/nograph.log" | sed 's/;.*//') > /dev/null ||
      same_modes=$((same_modes - 1))
  done
  note "bob: graph vs op by op, 30 updates" "$([[ $same_modes -eq $mode_cases ]] && echo PASS || echo FAIL)" \
    "$same_modes/$mode_cases checkpoints and loss lines identical (plain, --overwrite-bug)"
  local dev
  for dev in cpu cuda; do
    timeout 30 "$bob" train --input "$bobdir/rec" --checkpoint "$bobdir/$dev.ckpt" --fresh --device $dev > "$bobdir/$dev.log" 2>&1
    for _ in 1 2; do
      timeout 30 "$bob" train --input "$bobdir/rec" --checkpoint "$bobdir/$dev.ckpt" --resume --device $dev \
        --predictions "$bobdir/$dev.pred" >> "$bobdir/$dev.log" 2>&1
    done
  done
  grep -E "loss|predict" "$bobdir/cuda.log" | tail -n 6
  python3 - "$bobdir/cpu.ckpt" "$bobdir/cuda.ckpt" > "$logs/bob_cpu_vs_cuda.txt" 2>&1 <<'PY'
import struct, sys
def planes(path):
    b = open(path, "rb").read()
    body = b[-4 - 3 * 262144:-4]
    return [struct.unpack("<65536f", body[k * 262144:(k + 1) * 262144]) for k in range(3)]
cpu, gpu = planes(sys.argv[1]), planes(sys.argv[2])
worst = 0.0
for name, a, g in zip("PMV", cpu, gpu):
    scale = max(abs(x) for x in a) or 1.0
    rel = max(abs(x - y) for x, y in zip(a, g)) / scale
    worst = max(worst, rel)
    print(f"plane {name}: max |cpu - cuda| / max|cpu| = {rel:.3e}")
print(f"worst {worst:.3e}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
  rc=$?
  cat "$logs/bob_cpu_vs_cuda.txt"
  cmp -s "$bobdir/cpu.pred" "$bobdir/cuda.pred"
  local pred=$?
  note "bob 30 updates: CUDA vs CPU planes" "$([[ $rc -eq 0 && $pred -eq 0 ]] && echo PASS || echo FAIL)" \
    "$(tail -n 1 "$logs/bob_cpu_vs_cuda.txt"); predictions $([[ $pred -eq 0 ]] && echo equal || echo DIFFER)"
  # a GPU checkpoint resumes on the CPU, and a CPU one on the GPU
  cp "$bobdir/cuda.ckpt" "$bobdir/x1.ckpt"
  cp "$bobdir/cpu.ckpt" "$bobdir/x2.ckpt"
  timeout 30 "$bob" train --input "$bobdir/rec" --checkpoint "$bobdir/x1.ckpt" --resume --device cpu > /dev/null 2>&1
  local r1=$?
  timeout 30 "$bob" train --input "$bobdir/rec" --checkpoint "$bobdir/x2.ckpt" --resume --device cuda > /dev/null 2>&1
  local r2=$?
  note "bob checkpoints cross devices" "$([[ $r1 -eq 0 && $r2 -eq 0 ]] && echo PASS || echo FAIL)" \
    "cuda->cpu exit $r1, cpu->cuda exit $r2"
  local t_start t_end
  t_start=$(date +%s%N)
  for _ in 1 2 3 4 5; do
    timeout 30 "$bob" train --input "$bobdir/rec" --checkpoint "$bobdir/cuda.ckpt" --resume --device cuda > /dev/null 2>&1
  done
  t_end=$(date +%s%N)
  note "bob invocation (cuda, process)" INFO "$(( (t_end - t_start) / 5000000 )) ms per whole invocation (mean of 5)"
  rm -rf "$bobdir"

  # 3. benchmarks (not timed tests; BENCH=0 leaves them out, for a run that has time for the checks alone)
  : > "$logs/bench.txt"
  if [[ ${BENCH:-1} != 0 ]]; then
    timeout 90 "$build/bench/cuda_bench" 1000 2>&1 | tee "$logs/bench.txt"
    echo "| with TAPEGRAD_CUDA_CHAINED=0 (plain launches): | | |" | tee -a "$logs/bench.txt"
    TAPEGRAD_CUDA_CHAINED=0 timeout 90 "$build/bench/cuda_bench" 1000 2>&1 | grep -E "bob update|in a graph" |
      sed 's/^| /| (plain) /' | tee -a "$logs/bench.txt"
    timeout 120 python3 bench/cuda_torch_baseline.py 1000 2>&1 | tee -a "$logs/bench.txt"
    # the N-d kernels' bandwidth against a device copy, then PyTorch's on the same ops
    timeout 120 "$build/bench/nd_cuda_bench" 2>&1 | tee -a "$logs/bench.txt"
    timeout 120 python3 bench/nd_torch.py 2>&1 | tee -a "$logs/bench.txt"
    # the fused attention against PyTorch's scaled_dot_product_attention, (8, 16, 1024, 64)
    timeout 120 "$build/bench/attention_bench" 20 2>&1 | tee -a "$logs/bench.txt"
    timeout 150 python3 bench/attention_torch.py 20 2>&1 | tee -a "$logs/bench.txt"
    note "benchmarks" INFO "see the table above ($logs/bench.txt)"
  fi

  # 4. memcheck over the GPU test suite, less the test whose 1 PiB cudaMalloc fails on purpose
  # (memcheck counts a failed API call as an error)
  t0=$SECONDS
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$build/tests/cuda/test_cuda" \
    --test-case-exclude='*device errors*' \
    > "$logs/memcheck.log" 2>&1
  rc=$?
  note "compute-sanitizer memcheck" "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" \
    "exit $rc: $(grep -E 'ERROR SUMMARY' "$logs/memcheck.log" | tail -n 1) ($((SECONDS - t0)) s)"
  [[ $rc -eq 0 ]] || grep -m 20 -E '=========' "$logs/memcheck.log"

  # 5. examples/gpt on the GPU: resume, the small config against PyTorch, value embeddings
  BUILD=$build LOGS=$logs/gpt scripts/gpu_gpt.sh > "$logs/gpt.log" 2>&1
  rc=$?
  grep '^|' "$logs/gpt.log"
  note "examples/gpt (scripts/gpu_gpt.sh)" "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" "exit $rc; $logs/gpt/summary.txt"

  # 6. src/dist on the GPU: NCCL at 1 rank, 2 ranks on one GPU where NCCL allows it, --dist's cost
  BUILD=$build LOGS=$logs/dist scripts/gpu_dist.sh > "$logs/dist.log" 2>&1
  rc=$?
  grep '^|' "$logs/dist.log"
  note "src/dist (scripts/gpu_dist.sh)" "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" "exit $rc; $logs/dist/summary.txt"

  echo
  grep '^|' "$logs/bench.txt"
  echo
  printf '| %-34s | %-6s | %s\n' check result detail
  printf '%s\n' "${table[@]}"
  return $failed
}

case ${1:-} in
  '')  # build where BUILD is a build folder (or none yet); a folder unpacked from a pack is run as it is
    if [[ ! -d $build || -f $build/build.ninja ]]; then build_programs; fi
    run ;;
  prepare) prepare ;;
  pack) pack "${2:-}" ;;
  run) run ;;
  *) echo "usage: scripts/gpu_check.sh [run|prepare|pack DIR]" >&2; exit 2 ;;
esac
