"""attention_torch: PyTorch's scaled_dot_product_attention at bench/attention_bench.cpp's sizes.

q, k, v (B, H, T, hd) from randn, forward and backward (out.backward(dout)), causal and not, in f32
(the backend PyTorch picks, and the memory-efficient and math backends by name) and in bf16 (the
backend it picks). Prints the median of each in ms and TFLOP/s in attention_bench's format,
counting 4 B H T^2 hd for the forward and 2.5 times that for the backward (halved when causal).

    python3 bench/attention_torch.py [reps] [B H T hd]     (default 20 8 16 1024 64)
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(reps, f):
    for _ in range(3):
        f()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        f()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def row(name, ms, flops):
    print(f"| {name:<56} | {ms:9.3f} ms | {flops / (ms * 1e-3) / 1e12:7.2f} TFLOP/s |", flush=True)


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    b, h, t, hd = (int(x) for x in sys.argv[2:6]) if len(sys.argv) > 5 else (8, 16, 1024, 64)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(7)
    size = f" ({b}, {h}, {t}, {hd})"
    cases = [("f32", torch.float32, None), ("f32 efficient", torch.float32, SDPBackend.EFFICIENT_ATTENTION),
             ("f32 math", torch.float32, SDPBackend.MATH), ("bf16", torch.bfloat16, None)]
    for causal in (False, True):
        fwd_flops = 4.0 * b * h * t * t * hd / (2 if causal else 1)
        mode = ", causal" if causal else ""
        for name, dtype, backend in cases:
            q, k, v, dout = (torch.randn(b, h, t, hd, device="cuda", dtype=dtype, generator=gen) for _ in range(4))
            for x in (q, k, v):
                x.requires_grad_()

            def forward():
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            def both():
                q.grad = k.grad = v.grad = None
                F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(dout)

            try:
                if backend is None:
                    fwd, fb = median_ms(reps, forward), median_ms(reps, both)
                else:
                    with sdpa_kernel([backend]):
                        fwd, fb = median_ms(reps, forward), median_ms(reps, both)
            except RuntimeError as e:
                print(f"| PyTorch {name}{mode}: {str(e).splitlines()[0][:80]}")
                continue
            row(f"PyTorch {torch.__version__} forward {name}{size}{mode}", fwd, fwd_flops)
            row(f"PyTorch forward + backward {name}{size}{mode}", fb, 3.5 * fwd_flops)


if __name__ == "__main__":
    main()
