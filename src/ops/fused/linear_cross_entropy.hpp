// A fused op: the cross-entropy of a linear layer's logits, computed a block of rows at a time so
// that the (N, V) logits never exist whole (the tied head of a GPT: V = 50304 makes them 3.3 GB in
// f32 at 16384 tokens).
//
//   linear_cross_entropy(x, W, targets, reduction, ignore_index, chunk_rows)
//     == cross_entropy(linear(x, W), targets, reduction, ignore_index)
//   x (..., C) f32/f64 (or bf16, an autocast activation, with an f32 W), W (V, C), targets (...)
//   int -> () mean or sum, or (...) none, in W's dtype
//   per block of rows: z = x_c W^T, p = softmax(z); dz = (p - onehot(t)) * dloss / divisor,
//   dx_c = dz W, dW += dz^T x_c
//
// Values within rounding of the two ops it replaces (the forward's rows are the same; dW is a sum
// over blocks, so its order differs). For mean and sum the gradients are made in the forward,
// Liger-Kernel's way, and the backward only scales them by dloss; for none the backward makes
// each block's logits again (Note [blocks of rows] in the .cpp). Memory: one block's (chunk_rows,
// V) logits and their gradient at a time, and for mean and sum dx (N, C) and dW (V, C) kept from
// the forward to the backward. In an Autocast scope the products are bf16 (Note [autocast]). Each
// block runs the kernel facades (kernels::matmul, cross_entropy_rows), so it runs wherever they
// do; the blocks are a fixed function of the shape, so the bits do not depend on the thread count.
#pragma once

#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

Var linear_cross_entropy(Var x, Var w, Var targets, Reduction reduction = Reduction::mean, int64_t ignore_index = -100,
                         int64_t chunk_rows = 4096);

}  // namespace tapegrad::ops
