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

// The same attention over a projection's heads where they lie (nanoGPT's attention core):
//
//   qkv_attention(qkv, heads, causal, value_add, scale)
//     qkv (B, T, 3C) f64/f32, C = heads * d; value_add (broadcasts to (B, T, C)) or an empty Var
//     q, k, v = qkv[..., 0:C], qkv[..., C:2C], qkv[..., 2C:3C] (+ value_add on v), each read as
//     heads (B, H, T, d); y (B, T, C) = the heads of scaled_dot_product_attention(q, k, v, causal,
//     scale) put back side by side, y[b, t, h d : (h + 1) d] = attention(b, h)[t]
//     d qkv = (dq, dk, dv) side by side; d value_add = dv summed to value_add's shape
//
// What split, reshape, transpose, add, attention, transpose and reshape compute, with no copies
// between them (Note [attention layouts] in src/kernels/attention.cpp): the kernels read the heads
// in qkv and write y and d qkv in place.
Var qkv_attention(Var qkv, int64_t heads, bool causal = true, Var value_add = Var(), double scale = 0.0);

// The keys and values an attention layer has seen, for sampling one position at a time (a KV
// cache): row t of kv (B, capacity, 2C) holds position t's key (its first C) and value (+ value_add,
// its last C); rows 0 .. length - 1 are filled. kv is allocated by the first call after a reset.
struct KVCache {
  explicit KVCache(int64_t positions) : capacity(positions) {}
  int64_t capacity;  // the positions it can hold: the model's context length
  int64_t length = 0;
  Tensor kv;
  void reset() { length = 0; }  // keeps kv's memory for the next prefill
};

// qkv_attention's causal attention for a sequence that arrives in parts, for inference (no
// backward: under NoGrad, or on inputs that need no gradient; else an error):
//
//   qkv_attention_cached(qkv, heads, cache, value_add, scale)
//     qkv (B, Tn, 3C): positions Tc .. Tc + Tn - 1, Tc = cache.length; value_add as qkv_attention's
//     appends their k and v (+ value_add) to the cache, then y (B, Tn, C): position Tc + i attends
//     to positions 0 .. Tc + i, the last Tn rows of qkv_attention over the whole sequence so far
//
// A prefill (Tc = 0) takes any Tn, then one position a call; at capacity, reset() and prefill
// again. The same arithmetic as qkv_attention's rows, except that a single query is its own
// product with the keys: its logits agree to rounding, not always to the bit.
Var qkv_attention_cached(Var qkv, int64_t heads, KVCache& cache, Var value_add = Var(), double scale = 0.0);

}  // namespace tapegrad::ops
