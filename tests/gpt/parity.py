#!/usr/bin/env python3
"""The GPT of examples/gpt in PyTorch, against tapegrad's own run of it.

    parity.py TRACE.safetensors [--steps N] [--device cpu|cuda] [--bench-steps N]

TRACE is what `gpt train --trace TRACE --dropout 0` writes (train.cpp): tapegrad's initial weights
("init.<name>"), every step's batch ("x", "y": (steps, B, T) i32), its losses and learning rates
("loss", "lr") and the first step's gradients ("grad.<name>"), and "config" = (L, H, C, T, B, P, G).
This script builds nanoGPT's GPT in PyTorch with the same names (model.hpp: no biases, LayerNorm
without bias, exact GELU (G 1: the tanh form, `--gelu tanh`), the head tied to wte; with P > 0 value-embed planes, modded-nanogpt's
v = v + ve_p in blocks 0..P-1, the planes one (P V, C) table "ve.weight" looked up densely, as
`gpt train --value-embeds P --value-embeds-dense` does), loads the initial weights, and trains on
the same batches with AdamW (betas 0.9 and 0.99, weight decay 0.1 on the matrices only, the traced rates)
and clip_grad_norm_ 1. Checks, in the trace's dtype:
  - the first step's loss within 1e-5 relative (f32) or 1e-10 (f64);
  - each parameter's first gradient within the same bound, relative in norm
    (|g_tapegrad - g_torch| / |g_torch|);
  - every later step's loss within 1e-3 relative.
Prints one line per check and the worst of each kind; exits 0 when all pass, 1 otherwise.
--autocast bf16: a trace of `gpt train --autocast bf16`, against PyTorch under torch.autocast(bf16);
  the two round differently (PyTorch's products return bf16, tapegrad's f32: Note [autocast] in
  src/ops/autocast.hpp), so the bounds are bf16's: 1e-2 for the first loss and the gradients, 2e-2
  for the later losses.
--bench-steps N also times N more steps of PyTorch eager on random batches (median ms per step),
  under autocast too with --autocast; --compile times torch.compile's model instead of eager's.
--profile N (with --bench-steps) then profiles N steps and prints the time of each GPU kernel per step.
"""
import contextlib
import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "nn"))
from torch_layers import Block, layer_norm, read_safetensors  # noqa: E402


class GPT(torch.nn.Module):
    """model.hpp's GPT: nanoGPT's with bias=False (tests/nn/torch_layers.py's blocks), the head tied to wte."""

    def __init__(self, V, L, H, C, T, P=0, gelu="none"):
        super().__init__()
        self.V, self.P = V, P
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = torch.nn.Embedding(T, C)
        self.h = torch.nn.ModuleList([Block(C, H, bias=False, gelu=gelu) for _ in range(L)])
        self.ln_f = layer_norm(C, bias=False)
        if P:  # plane p is rows p V .. p V + V - 1 (model.hpp's "ve.weight")
            self.ve = torch.nn.Embedding(P * V, C)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(T, device=ids.device))
        for l, block in enumerate(self.h):
            x = block(x, self.ve(ids + l * self.V) if l < self.P else None)
        return self.ln_f(x) @ self.wte.weight.t()


def rel(a, b):
    d = float(torch.linalg.vector_norm((a - b).double()))
    n = float(torch.linalg.vector_norm(b.double()))
    return d / n if n else d


def profile(step, n):
    """Each GPU kernel's time per step over n steps, largest first (torch.profiler)."""
    from torch.profiler import profile as prof, ProfilerActivity
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    rows = []
    for e in p.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = e.self_cuda_time_total
        if us > 0:
            rows.append((us / n / 1e3, e.count / n, e.key))
    rows.sort(reverse=True)
    print(f"torch eager kernels: {sum(r[0] for r in rows):.2f} ms of GPU time per step")
    for ms, count, name in rows[:40]:
        print(f"  {ms:8.3f} ms/step {count:6.1f}/step  {name[:110]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=0, help="compare this many steps (default: all traced)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bench-steps", type=int, default=0)
    ap.add_argument("--profile", type=int, default=0)
    ap.add_argument("--autocast", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    t = read_safetensors(a.trace)
    # (L, H, C, T, B, P, G): traces before value embeddings have 5, before --gelu tanh 6; G 1 is tanh
    L, H, C, T, B, P, G = (list(int(v) for v in t["config"]) + [0, 0])[:7]
    gelu = "tanh" if G == 1 else "none"
    dtype = torch.float64 if t["init.wte.weight"].dtype == np.float64 else torch.float32
    bf16 = a.autocast == "bf16"
    tol = 1e-10 if dtype == torch.float64 else 1e-2 if bf16 else 1e-5
    later_tol = 2e-2 if bf16 else 1e-3
    V = t["init.wte.weight"].shape[0]
    dev = torch.device(a.device)
    if dev.type == "cuda":  # the f32 products in f32, as tapegrad's (no TF32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model = GPT(V, L, H, C, T, P, gelu).to(dev, dtype)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    expected = sorted(k[5:] for k in t if k.startswith("init."))
    if sorted(params) != expected:
        print(f"FAIL: the PyTorch model's parameters {sorted(params)} are not the trace's {expected}")
        return 1
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(torch.from_numpy(t["init." + n].copy()))
    decay = [p for n, p in params.items() if p.ndim >= 2]
    rest = [p for n, p in params.items() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99), eps=1e-8)
    steps = len(t["loss"]) if a.steps == 0 else min(a.steps, len(t["loss"]))
    planes = (f" P{P}" if P else "") + (" gelu tanh" if G == 1 else "")
    print(f"parity: GPT L{L} H{H} C{C} T{T} B{B} V{V}{planes} {str(dtype)[6:]}{' autocast bf16' if bf16 else ''} "
          f"on {dev}, torch {torch.__version__}, {steps} steps")

    def autocast():
        return torch.autocast(device_type=dev.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    ok = True
    worst_loss = 0.0
    for s in range(steps):
        x = torch.from_numpy(t["x"][s].astype(np.int64)).to(dev)
        y = torch.from_numpy(t["y"][s].astype(np.int64)).to(dev)
        for g in opt.param_groups:
            g["lr"] = float(t["lr"][s])
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
        loss.backward()
        ours = float(t["loss"][s])
        r = abs(ours - loss.item()) / abs(loss.item())
        if s == 0:
            good = r <= tol
            ok &= good
            print(f"{'ok  ' if good else 'FAIL'} step 1 loss: tapegrad {ours:.12g}, torch {loss.item():.12g}, "
                  f"relative {r:.2e} (bound {tol:g})")
            worst = (0.0, "")
            for n, p in params.items():
                g = torch.from_numpy(t["grad." + n].copy()).to(dev)
                e = rel(g, p.grad)
                worst = max(worst, (e, n))
                if e > tol:
                    ok = False
                    print(f"FAIL step 1 gradient of {n}: relative {e:.2e} (bound {tol:g})")
            print(f"{'ok  ' if worst[0] <= tol else 'FAIL'} step 1 gradients of {len(params)} parameters: "
                  f"worst relative {worst[0]:.2e} ({worst[1]})")
        else:
            worst_loss = max(worst_loss, r)
            if r > later_tol:
                ok = False
                print(f"FAIL step {s + 1} loss: tapegrad {ours:.8g}, torch {loss.item():.8g}, relative {r:.2e}")
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
    if steps > 1:
        print(f"{'ok  ' if worst_loss <= later_tol else 'FAIL'} steps 2 to {steps}: worst loss relative "
              f"{worst_loss:.2e} (bound {later_tol:g}); last loss tapegrad {float(t['loss'][steps - 1]):.6f}, "
              f"torch {loss.item():.6f}")
    run = torch.compile(model) if a.compile else model

    def bench_step():
        x = torch.randint(0, V, (B, T), device=dev)
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(run(x).view(-1, V), x.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        loss.item()

    if a.bench_steps:
        times = []
        warm = 10 if a.compile else 3  # compiling takes the first steps
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        for s in range(a.bench_steps + warm):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            bench_step()
            times.append(time.perf_counter() - start)
        kind = "torch.compile" if a.compile else "torch eager"
        mem = f", peak {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB" if dev.type == "cuda" else ""
        print(f"{kind} step: median {1e3 * statistics.median(times[warm:]):.2f} ms over {a.bench_steps} steps "
              f"({str(dtype)[6:]}{' autocast bf16' if bf16 else ''}, {dev}, threads {torch.get_num_threads()}{mem})")
        if a.profile and dev.type == "cuda":
            profile(bench_step, a.profile)
    print("parity: PASS" if ok else "parity: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
