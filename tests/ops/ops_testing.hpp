// Test helpers shared by the fused ops' suites (tests/ops): seeded normal tensors and the largest
// difference relative to the reference's largest magnitude.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tapegrad/tensor/tensor.hpp"

namespace tapegrad::testing {

inline Tensor random_tensor(const Shape& s, DType dtype, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> u(0.0, scale);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(v, s, dtype);
}

// max |a - b| / max |b|
inline double max_relative(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) scale = std::max(scale, std::abs(y[i]));
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / scale);
  return worst;
}

}  // namespace tapegrad::testing
