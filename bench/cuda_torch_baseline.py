"""cuda_torch_baseline: bench/cuda_bench.cpp's bob-shaped f32 update in PyTorch, for comparison.

A (256, 256) f32 table, 256 (byte, next byte) pairs, mean cross-entropy of the gathered rows,
backward, AdamW (lr 0.1, betas 0.9/0.95, eps 1e-8, weight decay 0.01). Prints table rows in the
format of cuda_bench: eager AdamW (foreach), fused AdamW, and a CUDA graph of 10 updates with
capturable AdamW, each per update, synchronizing once per run.

    python3 bench/cuda_torch_baseline.py [updates]
"""
import sys
import time

import torch


def make(fused=False, capturable=False):
    g = torch.Generator(device="cpu").manual_seed(11)
    w = ((torch.rand(256, 256, generator=g) - 0.5) * 0.2).cuda().requires_grad_()
    x = torch.randint(0, 256, (256,), generator=g).cuda()
    y = torch.randint(0, 256, (256,), generator=g).cuda()
    opt = torch.optim.AdamW([w], lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01,
                            fused=fused or None, capturable=capturable)
    return w, x, y, opt


def update(w, x, y, opt):
    opt.zero_grad(set_to_none=False)
    torch.nn.functional.cross_entropy(w[x], y).backward()
    opt.step()


def per_update_us(run, updates):
    run(10)
    torch.cuda.synchronize()
    start = time.perf_counter()
    run(updates)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / updates * 1e6


def row(name, value, unit):
    print(f"| {name:<52} | {value:12.2f} | {unit:<8} |")


def main():
    updates = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, fused in (("PyTorch bob-shaped update, eager AdamW", False), ("PyTorch bob-shaped update, fused AdamW", True)):
        w, x, y, opt = make(fused=fused)
        row(name, per_update_us(lambda n: [update(w, x, y, opt) for _ in range(n)], updates), "us/upd")

    w, x, y, opt = make(capturable=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            update(w, x, y, opt)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(10):
            update(w, x, y, opt)
    row("PyTorch bob-shaped update, CUDA graph of 10", per_update_us(lambda n: [graph.replay() for _ in range(n // 10)], updates),
        "us/upd")


if __name__ == "__main__":
    main()
