#!/usr/bin/env python3
"""docs/perf.md's "Normalisation" tables from bench_norm's JSON output.

  ./build/bench/bench_norm --benchmark_repetitions=5 --benchmark_min_time=0.3 \
      --benchmark_report_aggregates_only=true --benchmark_out=norm.json
  python3 bench/norm_table.py norm.json

Each row: the median real time of tapegrad's benchmark and of libtorch's, and torch / tapegrad
(above 1: tapegrad is faster).
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
        out[key] = b["real_time"]  # microseconds (the benchmarks' unit)
    return out


def fmt(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"


def main():
    m = medians(sys.argv[1])
    for title, ours, theirs in PAIRS:
        print(f"\n{title}\n")
        print("| elements | threads | tapegrad | libtorch | libtorch / tapegrad |")
        print("|---|---|---|---|---|")
        for threads in (1, 2):
            for n in (100000, 1000000, 10000000):
                a, b = m.get((ours, n, threads)), m.get((theirs, n, threads))
                if a is None or b is None:
                    continue
                print(f"| 10^{len(str(n)) - 1} | {threads} | {fmt(a)} | {fmt(b)} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
