// A fused op: scaled dot-product attention over (batch, heads), as one node.
//
//   scaled_dot_product_attention(q, k, v, causal, scale)
//     q (B, H, Tq, d), k (B, H, Tk, d), v (B, H, Tk, dv) f64/f32 -> (B, H, Tq, dv)
//     y[b, h] = softmax(scale * q[b, h] @ k[b, h]^T + mask) @ v[b, h]
//   mask: none, or causal (Tq == Tk; query i sees keys 0..i, PyTorch's is_causal=True).
//   scale <= 0 or NaN (the default, 0): 1 / sqrt(d), as PyTorch's scale=None.
//   P = exp(scale q k^T + mask - lse), lse (B, H, Tq) each row's logsumexp (saved by the forward);
//   dv = P^T dy,  dS = P * (dy v^T - rowsum(dy * y)),  dq = scale dS k,  dk = scale dS^T q
//
// The work of matmul, scale, softmax and matmul in one node that never keeps the (Tq, Tk)
// scores: the forward saves only lse, and the backward recomputes the probabilities from it. On
// CUDA, f32 with head sizes up to 128 runs flash-attention kernels (Note [flash attention] in
// src/cuda/attention.cu), f64 and larger heads the CPU's arithmetic; the CPU's is the row-by-row
// reference (Note [attention arithmetic] in src/kernels/cpu/attention.cpp), whose f64 forward
// gives the composite's bits.
#pragma once

#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

Var scaled_dot_product_attention(Var q, Var k, Var v, bool causal = false, double scale = 0.0);

}  // namespace tapegrad::ops
