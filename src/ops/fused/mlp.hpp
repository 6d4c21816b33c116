// A fused op: a transformer's MLP, linear -> activation -> linear, as one node.
//
//   mlp(x, w_fc, w_proj, activation, b_fc, b_proj)
//     == linear(f(linear(x, w_fc, b_fc)), w_proj, b_proj)
//   x (..., C), w_fc (H, C), w_proj (O, H), b_fc (H,) and b_proj (O,) or none -> (..., O)
//   pre = x w_fc^T + b_fc, act = f(pre), y = act w_proj^T + b_proj
//   dact = dy w_proj; dpre = dact * f'(pre); dx = dpre w_fc;
//   dw_proj = dy^T act, db_proj = sum dy; dw_fc = dpre^T x, db_fc = sum dpre
//
// Why one node: the activation sits between two products, so a GEMM can apply it in its epilogue
// on the way out of the first product (forward) and its derivative on the way out of the second
// product's dx (backward), and the elementwise passes over the (N, H) activations disappear
// (Note [the MLP's epilogues] in the .cpp). Where no epilogue runs the op runs the unfused ops'
// kernels in their order: the same bits as the three ops, in every dtype. Where one does (CUDA,
// bf16 products, gelu_tanh; in the forward no first bias or a bf16 one) f and f' act on the f32
// sums before the one rounding, so its values are within bf16's rounding of the three ops', not
// equal to them. It saves what the three ops save: x's and the weights' product copies, pre and
// act.
#pragma once

#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

// The activations the fused MLP takes: each a single elementwise op (ops::gelu, gelu with
// Gelu::tanh, relu, silu). gelu_tanh is the one with cuBLASLt epilogues on CUDA.
enum class MlpActivation : uint8_t { gelu, gelu_tanh, relu, silu };
const char* mlp_activation_name(MlpActivation f);

Var mlp(Var x, Var w_fc, Var w_proj, MlpActivation activation, Var b_fc = Var(), Var b_proj = Var());

}  // namespace tapegrad::ops
