// bf16 values in kernels of both devices: a storage type (the top 16 bits of an f32) and its
// conversions, __host__ __device__, so that a cast gives the same bits on the CPU and on CUDA.
// Rounding: tensor/half.hpp's f32_to_bf16 (to nearest, ties to even, NaNs kept quiet with their
// sign); from f64 through f32, as PyTorch converts.
#pragma once

#include <cstdint>
#include <type_traits>

#include "tapegrad/tensor/half.hpp"

namespace tapegrad::kernels {

struct bf16 {
  uint16_t bits;
};

TG_HALF_HD inline float widen(bf16 h) { return bf16_to_f32(h.bits); }
TG_HALF_HD inline bf16 to_bf16(float f) { return bf16{f32_to_bf16(f)}; }

// D(x) for the cast kernels, where S or D may be bf16 (any other pair: static_cast).
template <class D, class S>
TG_HALF_HD inline D convert(S x) {
  if constexpr (std::is_same_v<S, D>) return x;
  else if constexpr (std::is_same_v<S, bf16>) return static_cast<D>(widen(x));
  else if constexpr (std::is_same_v<D, bf16>) return to_bf16(static_cast<float>(x));
  else return static_cast<D>(x);
}

}  // namespace tapegrad::kernels
