"""The PyTorch baselines of docs/value_embed.md, timed beside `value_embed --bench` on the same GPU (bench/value_embed/run_device.sh).

- dense: PyTorch's autograd of the plain gather, `weight.view(P, V, D)[:, ids]`, whose backward makes a
  dense (P*V, D) gradient and adds it into weight.grad (kept between steps, as in training);
- seed: the seed's Triton op, value_embed_op.py beside this file (the seed's file, kept unchanged;
  docs/value_embed.md, "The seed's op"): PyTorch's indexing forward, the fp16 scatter-add backward.

Both time the ids that `value_embed --bench --bench-out DIR` wrote, the way it times: CUDA events, the
median of 50 runs, the L2 flushed (a 512 MiB memset) before each. Then the seed's buffer and ours are
compared on the same plane gradients, each against an fp64 reference sum.

    python3 bench/value_embed/baseline.py --data DIR
"""
import argparse
import os
import statistics
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import value_embed_op as seed  # noqa: E402  (registers torch.ops.nanogpt.value_embed_grad_accumulate)

P, V, D = 4, 50304, 768
RUNS = 50
FLUSH = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")


def median_ms(fn, flush=True):
    fn()  # warm-up: Triton compiles, the caching allocator fills
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for r in range(RUNS):
        if flush:
            FLUSH.fill_(r & 0xFF)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def extra_mib(fn):
    """Peak device memory beyond what was allocated before fn, in MiB."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def load(path, dtype, shape):
    raw = torch.from_numpy(np.fromfile(path, dtype={torch.int32: np.int32, torch.bfloat16: np.int16,
                                                    torch.float16: np.float16}[dtype]))
    return (raw.view(dtype) if dtype == torch.bfloat16 else raw).reshape(shape).cuda()


def timings(data):
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src), flush=False)
    print(f"copy bandwidth (torch, 1 GiB device to device, read + write): {2 * 2**30 / copy_ms / 1e6:.0f} GB/s\n")
    del src, dst

    weight = torch.randn(P * V, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    weight.grad = torch.zeros_like(weight)  # the dense backward adds into it, as in a training loop
    buf = torch.zeros(P * V, D, device="cuda", dtype=torch.float16)
    print(f"{'ids':7} {'T':>6} | {'dense fwd':>9} {'dense f+b':>9} {'dense MiB':>9} | "
          f"{'seed fwd':>9} {'seed bwd':>9} {'seed f+b':>9} {'seed MiB':>9}")
    for dist in ("uniform", "zipf"):
        for t in (2048, 8192, 49152):
            ids = load(f"{data}/ids_{dist}_{t}.i32", torch.int32, (t,))
            grads = torch.randn(P, t, D, device="cuda", dtype=torch.bfloat16)
            plane_grads = list(grads.unbind(0))

            def dense_forward():
                with torch.no_grad():
                    return weight.view(P, V, D)[:, ids]

            def dense_step():
                weight.view(P, V, D)[:, ids].backward(grads)

            def seed_forward():
                with torch.no_grad():
                    return seed.value_embed_gather(weight, ids, P)

            def seed_backward():
                torch.ops.nanogpt.value_embed_grad_accumulate(ids, plane_grads, buf)

            def seed_step():
                torch.autograd.backward(seed.value_embed_lookup(weight, ids, P, buf), plane_grads)

            row = [median_ms(dense_forward), median_ms(dense_step), extra_mib(dense_step),
                   median_ms(seed_forward), median_ms(seed_backward), median_ms(seed_step), extra_mib(seed_step)]
            print(f"{dist:7} {t:6} | {row[0]:9.4f} {row[1]:9.4f} {row[2]:9.0f} | "
                  f"{row[3]:9.4f} {row[4]:9.4f} {row[5]:9.4f} {row[6]:9.0f}")


def accuracy(data):
    t = 49152
    ids = load(f"{data}/accuracy_ids_zipf_{t}.i32", torch.int32, (t,))
    grads = load(f"{data}/accuracy_dplanes_zipf_{t}.bf16", torch.bfloat16, (P, t, D))
    ref = torch.zeros(P * V, D, device="cuda", dtype=torch.float64)
    for p in range(P):
        ref[p * V:(p + 1) * V].index_add_(0, ids.long(), grads[p].double())
    seed_buf = torch.zeros(P * V, D, device="cuda", dtype=torch.float16)
    torch.ops.nanogpt.value_embed_grad_accumulate(ids, list(grads.unbind(0)), seed_buf)
    ours = {mode: load(f"{data}/ours_{mode}_zipf_{t}.f16", torch.float16, (P * V, D))
            for mode in ("atomic", "deterministic")}
    print(f"\nthe same backward (T={t} Zipf-like ids, bf16 plane gradients) into a zero f16 buffer, against fp64:")
    print(f"{'buffer':22} {'rel. L2 error':>14} {'max abs error':>14}")
    for name, b in (("seed (Triton)", seed_buf), ("ours, atomic", ours["atomic"]),
                    ("ours, deterministic", ours["deterministic"])):
        diff = b.double() - ref
        print(f"{name:22} {(diff.norm() / ref.norm()).item():14.3e} {diff.abs().max().item():14.3e}")
    diff = (ours["atomic"].double() - seed_buf.double()).abs()
    print(f"ours (atomic) vs seed: {(diff == 0).double().mean().item() * 100:.4f}% of cells equal, max difference "
          f"{diff.max().item():.3e} (both in no fixed order; ours adds each id's run once, summed in fp32, "
          f"the seed every contribution)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="the --bench-out folder of value_embed --bench")
    args = parser.parse_args()
    print(f"baselines on {torch.cuda.get_device_name()}, torch {torch.__version__}; P={P} V={V} D={D}, "
          f"weight and plane gradients bf16, median of {RUNS} runs, L2 flushed before each")
    timings(args.data)
    accuracy(args.data)
