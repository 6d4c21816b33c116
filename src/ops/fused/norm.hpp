// Fused normalisation over the last axis: one node each, whose forward makes a row's statistics
// and outputs in one pass over it and whose backward makes a row's dx in one pass, plus the sums
// over rows for the weight's and the bias's gradients (src/kernels/cpu/norm.cpp, src/cuda/norm.cu).
//
//   layer_norm(x (..., C), weight (C,), bias (C,), eps) -> (..., C)   (PyTorch's layer_norm over C)
//   rms_norm(x (..., C), weight (C,), eps) -> (..., C)                (PyTorch's rms_norm over C)
//   add_layer_norm(x, r, ...), add_rms_norm(x, r, ...) -> {x + r, its norm}
//
// weight and bias may be undefined Vars (Var{}): no affine scale (elementwise_affine=False) or no
// bias (bias=False). The derivatives are in norm.cpp and in the derivatives table.
#pragma once

#include "tapegrad/graph/graph.hpp"

namespace tapegrad::ops {

Var layer_norm(Var x, Var weight = {}, Var bias = {}, double eps = 1e-5);
// eps defaults to 1e-6 (LLaMA's), the same for f32 and f64; PyTorch's rms_norm defaults to the
// dtype's machine epsilon: pass it explicitly to match that.
Var rms_norm(Var x, Var weight = {}, double eps = 1e-6);

// A residual stream's add and the norm after it: sum = x + r and normed = the norm of sum, the two
// nodes (and values) of `Var sum = x + r; layer_norm(sum, ...)`, made in one pass over the rows
// where the sum is f32 (x and r of one shape, f32 or an autocast bf16 activation; Note [the add
// before a norm] in src/cuda/norm.cu): a transformer block's `x = x + attn(...)` then `ln_2(x)`.
struct SumAndNorm {
  Var sum, normed;
};
SumAndNorm add_layer_norm(Var x, Var r, Var weight = {}, Var bias = {}, double eps = 1e-5);
SumAndNorm add_rms_norm(Var x, Var r, Var weight = {}, double eps = 1e-6);

}  // namespace tapegrad::ops
