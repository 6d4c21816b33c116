// bf16 values in kernels of both devices: a storage type (the top 16 bits of an f32) and its
// conversions, __host__ __device__, so that a cast gives the same bits on the CPU and on CUDA.
// Rounding: to nearest, ties to even, the rule of tensor/half.hpp's f32_to_bf16 (its bits exactly,
// NaNs kept quiet with their sign); from f64 through f32, as PyTorch converts.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define TG_BF16_HD __host__ __device__
#else
#define TG_BF16_HD
#endif

namespace tapegrad::kernels {

struct bf16 {
  uint16_t bits;
};

TG_BF16_HD inline float widen(bf16 h) {
  const uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TG_BF16_HD inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

// D(x) for the cast kernels, where S or D may be bf16 (any other pair: static_cast).
template <class D, class S>
TG_BF16_HD inline D convert(S x) {
  if constexpr (std::is_same_v<S, D>) return x;
  else if constexpr (std::is_same_v<S, bf16>) return static_cast<D>(widen(x));
  else if constexpr (std::is_same_v<D, bf16>) return to_bf16(static_cast<float>(x));
  else return static_cast<D>(x);
}

}  // namespace tapegrad::kernels
