"""The ops of bench/nd_cuda_bench.cpp in PyTorch on the same device, in the same units: median of 20
synchronized runs after 3, GB/s of bytes read and written, and that as a share of a device copy's.

    python3 bench/nd_torch.py [elements, default 64M]
"""
import sys
import time

import torch


def median_ms(f):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    t = []
    for _ in range(20):
        start = time.perf_counter()
        f()
        torch.cuda.synchronize()
        t.append((time.perf_counter() - start) * 1e3)
    return sorted(t)[10]


def main():
    if not torch.cuda.is_available():
        print("SKIP: nd_torch: no CUDA device")
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
    cols = 8192
    rows = n // cols
    a = torch.full((rows, cols), 0.5, device="cuda")
    b = torch.full((rows, cols), 0.25, device="cuda")
    out = torch.empty_like(a)
    row = torch.zeros(cols, device="cuda")
    col = torch.zeros(rows, 1, device="cuda")
    nbytes = n * 4
    copy_ms = median_ms(lambda: out.copy_(a))
    copy_gbs = 2 * nbytes / copy_ms / 1e6
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}; {n} f32 elements as ({rows}, {cols})")
    print(f"| {'op (PyTorch)':<40} | {'ms':>9} | {'GB/s':>9} | {'of copy':>8} |")

    def report(name, ms, moved):
        gbs = moved / ms / 1e6
        print(f"| {name:<40} | {ms:9.3f} | {gbs:9.1f} | {100 * gbs / copy_gbs:7.0f}% |")

    report("copy (device to device)", copy_ms, 2 * nbytes)
    report("add, equal shapes", median_ms(lambda: torch.add(a, b, out=out)), 3 * nbytes)
    report("add, a row broadcast", median_ms(lambda: torch.add(a, row, out=out)), 2 * nbytes)
    report("mul, a column broadcast", median_ms(lambda: torch.mul(a, col, out=out)), 2 * nbytes)
    report("maximum, equal shapes", median_ms(lambda: torch.maximum(a, b, out=out)), 3 * nbytes)
    report("exp", median_ms(lambda: torch.exp(a, out=out)), 2 * nbytes)
    report("gelu (tanh)", median_ms(lambda: torch.nn.functional.gelu(a, approximate="tanh")), 2 * nbytes)
    report("sum over the last axis", median_ms(lambda: a.sum(1)), nbytes)
    report("sum over the first axis", median_ms(lambda: a.sum(0)), nbytes)
    report("softmax rows", median_ms(lambda: torch.softmax(a, 1)), 2 * nbytes)
    report("log_softmax rows", median_ms(lambda: torch.log_softmax(a, 1)), 2 * nbytes)
    report("transpose (contiguous copy)", median_ms(lambda: a.t().contiguous()), 2 * nbytes)


if __name__ == "__main__":
    main()
