// The per-element math of the stateful optimizers and gradient transforms, written once for the
// CPU loops (src/kernels/cpu/optim.cpp) and the CUDA kernels (src/cuda/optim.cu): host and device
// functions (TG_HD), so both devices run the same expressions in the same order.
//
// Rule: every product and sum is rounded on its own (no fused multiply-add on either device), in
// the element's dtype T; the scalars arrive already converted to T.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "tapegrad/kernels/cr_math.hpp"  // TG_HD

namespace tapegrad::kernels {

// torch.optim.SGD's update of one element (its _single_tensor_sgd, maximize off):
//   d = g + weight_decay * p                                    (only when weight_decay != 0)
//   buf = d (the buffer's first update), else momentum * buf + (1 - dampening) * d
//   d = d + momentum * buf (nesterov), else buf                  (only when momentum != 0)
//   p = p - lr * d
// PyTorch adds with an alpha (p.add_(d, alpha=-lr)), which is p - lr * d in exact arithmetic and
// here the same bits: -(lr * d) is exact, and p + -(x) is p - x.
struct SGDScalars {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, first_step = false;
};

template <class T>
struct SGDElement {
  T lr, momentum, one_minus_dampening, weight_decay;  // the scalars in T; 1 - dampening computed in double
  bool decay, use_momentum, nesterov, first;
  static SGDElement of(const SGDScalars& s) {
    return {static_cast<T>(s.lr), static_cast<T>(s.momentum), static_cast<T>(1.0 - s.dampening),
            static_cast<T>(s.weight_decay), s.weight_decay != 0, s.momentum != 0, s.nesterov, s.first_step};
  }
  TG_HD void update(T& p, T g, T* buf) const {
    T d = g;
    if (decay) d = d + weight_decay * p;
    if (use_momentum) {
      const T b = first ? d : momentum * *buf + one_minus_dampening * d;
      *buf = b;
      d = nesterov ? d + momentum * b : b;
    }
    p = p - lr * d;
  }
};

// Note [sum of squares order]
// clip_grad_norm's sum of squares has one definition on every device, thread count and way of
// cutting the gradients into pieces. Each tensor is cut into chunks of kSquaresChunk elements
// (the last may be short). A chunk's sum: kSquaresLanes lanes, lane l adding in double and in
// increasing i the squares of the chunk's elements l, l + 32, l + 64, ..., then a pairwise tree
// over the lanes, (s0 + s1) + (s2 + s3) and so on up, left operand first. The total is the
// correctly rounded sum of every chunk's sum (kernels::sum_all in f64). A square is computed in
// double: exact for an f32 element, rounded once for an f64 one.
// A correctly rounded sum depends neither on the order of its terms nor on +0 terms, so the total
// is the same whether the chunk sums come from one tensor at a time, from a flat buffer that holds
// the tensors at chunk-aligned offsets with zeros between them (dist's data parallel), or from the
// pieces of such a buffer held by several ranks (ZeRO-1): the norm, and the clipping it decides,
// have the same bits for every number of ranks. The lanes are what a GPU warp reads at once and
// what a CPU's vector registers hold.
inline constexpr int64_t kSquaresChunk = 4096, kSquaresLanes = 32;
inline constexpr int64_t sum_squares_chunk_count(int64_t n) { return (n + kSquaresChunk - 1) / kSquaresChunk; }

}  // namespace tapegrad::kernels
