#!/usr/bin/env python3
"""The table of docs/perf.md, "CPU matrix products", from bench_matmul's JSON (run with
--benchmark_repetitions=N --benchmark_report_aggregates_only=true --benchmark_format=json):
the median GFLOP/s of tapegrad's kernel, its op and cblas, and kernel / cblas."""
import json
import sys

medians = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    _, dtype, product, threads, impl = b["run_name"].split("/")[:5]  # then "real_time"
    medians[(dtype, product, threads.split("=")[1], impl)] = b["GFLOP/s"]

print("| dtype | product | threads | tapegrad kernel | tapegrad op | cblas | kernel / cblas | op / cblas |")
print("|---|---|---|---|---|---|---|---|")
for (dtype, product, threads, impl), cblas in medians.items():
    if impl != "cblas":
        continue
    kernel, op = medians[(dtype, product, threads, "kernel")], medians[(dtype, product, threads, "op")]
    print(f"| {dtype} | {product} | {threads} | {kernel:.1f} | {op:.1f} | {cblas:.1f} | {kernel / cblas:.2f} | {op / cblas:.2f} |")
