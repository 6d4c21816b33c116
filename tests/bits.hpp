// Test helpers shared by the suites that compare f32 results bit for bit (tests/bob, tests/optim).
#pragma once

#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <vector>

#include "tapegrad/tensor/tensor.hpp"

namespace tapegrad::testing {

// Every element of a host f32 tensor.
inline std::vector<float> values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

// The first index where two float vectors differ in their bits, or -1 (0 when the sizes differ).
inline long first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return static_cast<long>(i);
  return -1;
}

}  // namespace tapegrad::testing

#define CHECK_SAME_BITS(a, b)                                                                          \
  do {                                                                                                 \
    const long at = ::tapegrad::testing::first_bit_difference(a, b);                                  \
    CHECK_MESSAGE(at == -1, "first differing element " << at << ": " << (a)[at] << " vs " << (b)[at]); \
  } while (0)
