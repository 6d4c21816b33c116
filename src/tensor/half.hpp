// Conversions between f32 and the 16-bit storage types (bf16, f16), round to nearest even. The
// bf16 pair is __host__ __device__ under nvcc: CUDA's casts (src/kernels/bf16.hpp) round by it too.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TG_HALF_HD __host__ __device__
#else
#define TG_HALF_HD
#endif

namespace tapegrad {

TG_HALF_HD inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
TG_HALF_HD inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;                      // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;                     // overflow (>= 65520) -> inf
  if (a < 0x38800000u) {                                            // below 2^-14: subnormal or zero
    float v = std::bit_cast<float>(a);
    return sign | static_cast<uint16_t>(std::nearbyint(v * 16777216.0f));  // v / 2^-24, ties to even
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
  return sign | static_cast<uint16_t>(r >> 13);
}

}  // namespace tapegrad
