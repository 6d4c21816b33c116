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
// clip_grad_norm's sum of squares is computed in one fixed order on every device and thread
// count, so a norm (and the clipping it decides) has the same bits on the CPU and on CUDA. The n
// elements are dealt to L lanes (L = sum_squares_lanes(n), a power of two): lane l adds, in
// double and in increasing i, the squares of elements l, l + L, l + 2L, ...; then a pairwise tree
// adds neighbouring lanes, (s0 + s1) + (s2 + s3) and so on up, left operand first. A square is
// computed in double: exact for an f32 element, rounded once for an f64 one. The lanes are what a
// GPU needs to read in parallel and what a CPU thread can walk a cache-sized slice of; padding the
// tree with +0 lanes (what a CUDA block does past L) changes nothing, since every lane's sum is
// +0, positive, inf or NaN.
inline int64_t sum_squares_lanes(int64_t n) {
  constexpr int64_t kMaxLanes = int64_t{1} << 18;
  const int64_t wanted = std::max<int64_t>(1, (n + 31) / 32);  // about 32 elements per lane
  return std::min(kMaxLanes, static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(wanted))));
}

}  // namespace tapegrad::kernels
