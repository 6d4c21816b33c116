#!/usr/bin/env python3
"""docs/perf-cpu.md's "Normalisation" tables from bench_norm's JSON output.

  ./build/bench/bench_norm --benchmark_enable_random_interleaving=true --benchmark_repetitions=9 \
      --benchmark_min_time=0.2 --benchmark_report_aggregates_only=true --benchmark_out=norm.json
  python3 bench/norm_table.py norm.json

Each row: the median wall-clock time of tapegrad's benchmark and of libtorch's, their ratio
libtorch / tapegrad (above 1: tapegrad is faster), and the same ratio of the median CPU times
(the time the calling thread ran, which another job on the machine disturbs less; 1 thread only,
since it leaves out the pools' other threads).
"""
import json
import sys

PAIRS = [
    ("layer_norm forward (kernel)", "BM_TapegradLayerNormForward", "BM_TorchLayerNormForward"),
    ("layer_norm forward + backward (kernels)", "BM_TapegradLayerNormKernels", "BM_TorchLayerNormKernels"),
    ("layer_norm forward + backward (through the engine)", "BM_TapegradLayerNormOp", "BM_TorchLayerNormOp"),
    ("rms_norm forward + backward (kernels; torch: its composite through autograd)", "BM_TapegradRmsNormKernels",
     "BM_TorchRmsNormKernels"),
    ("rms_norm forward + backward (through the engine; torch: the composite)", "BM_TapegradRmsNormOp",
     "BM_TorchRmsNormKernels"),
]


def medians(path):
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"].split("/")
        key = (name[0], int(name[1]), int(name[2]))
        out[key] = (b["real_time"], b["cpu_time"])  # microseconds (the benchmarks' unit)
    return out


def fmt(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"


def main():
    m = medians(sys.argv[1])
    for title, ours, theirs in PAIRS:
        print(f"\n{title}\n")
        print("| elements | threads | tapegrad | libtorch | libtorch / tapegrad | the same, CPU time |")
        print("|---|---|---|---|---|---|")
        for threads in (1, 2):
            for n in (100000, 1000000, 10000000):
                a, b = m.get((ours, n, threads)), m.get((theirs, n, threads))
                if a is None or b is None:
                    continue
                cpu = f"{b[1] / a[1]:.2f}" if threads == 1 else "-"  # CPU time counts the calling thread alone
                print(f"| 10^{len(str(n)) - 1} | {threads} | {fmt(a[0])} | {fmt(b[0])} | {b[0] / a[0]:.2f} | {cpu} |")


if __name__ == "__main__":
    main()
