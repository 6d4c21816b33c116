#!/usr/bin/env python3
"""The tables of docs/perf-cpu.md, "CPU matrix products", from bench_matmul's JSON (run with
--benchmark_repetitions=N --benchmark_format=json, no aggregates-only): for each product, dtype
and thread count, the median over the repetitions of tapegrad's kernel, its op and cblas in
GFLOP/s, the median of the repetitions' kernel / cblas and op / cblas ratios (each repetition
times the three in turn), and the best repetition's GFLOP/s of each; then matmul_fsum's medians."""
import json
import statistics
import sys

runs = {}  # (name) -> list of counter dicts, one per repetition
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type") != "iteration":
        continue
    runs.setdefault(b["run_name"].rsplit("/real_time", 1)[0], []).append(b)

products = ["n=256", "n=1024", "batch=(16,4,64,64)"]


def order(name):
    parts = name.split("/")  # matmul/f32/n=256/threads=1
    return (parts[0], products.index(parts[2]) if parts[2] in products else 9, parts[1], parts[3])


median = lambda xs: statistics.median(xs)
print("| dtype | product | threads | kernel | op | cblas | kernel / cblas | op / cblas | best: kernel, op, cblas |")
print("|---|---|---|---|---|---|---|---|---|")
for name in sorted((n for n in runs if n.startswith("matmul/")), key=order):
    reps = runs[name]
    _, dtype, product, threads = name.split("/")
    k, o, c = ([r[key] for r in reps] for key in ("kernel", "op", "cblas"))
    ratio_k = median([r["kernel"] / r["cblas"] for r in reps])
    ratio_o = median([r["op"] / r["cblas"] for r in reps])
    print(f"| {dtype} | {product} | {threads.split('=')[1]} | {median(k):.1f} | {median(o):.1f} | {median(c):.1f} | "
          f"{ratio_k:.2f} | {ratio_o:.2f} | {max(k):.1f}, {max(o):.1f}, {max(c):.1f} |")

fsum = sorted((n for n in runs if n.startswith("matmul_fsum/")), key=order)
if fsum:
    print()
    print("| dtype | product | threads | matmul_fsum |")
    print("|---|---|---|---|")
    for name in fsum:
        _, dtype, product, threads = name.split("/")
        print(f"| {dtype} | {product} | {threads.split('=')[1]} | {median([r['fsum'] for r in runs[name]]):.3f} |")
print()
print(f"repetitions: {max(len(r) for r in runs.values())}")
