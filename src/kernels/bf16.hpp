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

// Two f32 rounded to bf16 and packed, lo in the low half: to_bf16's bits for each. On the device
// one cvt.rn.bf16x2.f32 rounds both (to nearest, ties to even, overflow to inf, as f32_to_bf16)
// in place of a dozen integer operations; it makes every NaN 0x7fff, so a pair holding a NaN
// takes f32_to_bf16's way (the NaN quieted, its sign and payload kept).
TG_HALF_HD inline uint32_t pack_bf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  if (lo == lo && hi == hi) {
    uint32_t packed;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));  // the first source is the high half
    return packed;
  }
#endif
  return static_cast<uint32_t>(f32_to_bf16(lo)) | static_cast<uint32_t>(f32_to_bf16(hi)) << 16;
}

// D(x) for the cast kernels, where S or D may be bf16 (any other pair: static_cast).
template <class D, class S>
TG_HALF_HD inline D convert(S x) {
  if constexpr (std::is_same_v<S, D>) return x;
  else if constexpr (std::is_same_v<S, bf16>) return static_cast<D>(widen(x));
  else if constexpr (std::is_same_v<D, bf16>) return to_bf16(static_cast<float>(x));
  else return static_cast<D>(x);
}

}  // namespace tapegrad::kernels
