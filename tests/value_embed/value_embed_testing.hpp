// Helpers shared by the value-embed tests (CPU and CUDA): random inputs, Zipf-like ids, the fp64
// reference sum, and the error bounds of Note [value-embed arithmetic] (src/ops/value_embed.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "tapegrad/tensor/tensor.hpp"

namespace ve_test {

using namespace tapegrad;

inline std::mt19937_64& rng() {
  static std::mt19937_64 r(20261204);
  return r;
}

// Uniform values in [lo, hi), rounded to dtype.
inline Tensor random(const Shape& s, DType t, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng());
  return Tensor::from_doubles(v, s, t);
}

// n ids in [0, vocab) with P(rank k) proportional to 1 / (k + 1), ranks scattered over the ids.
inline std::vector<int64_t> zipf_ids(int64_t n, int64_t vocab) {
  std::vector<double> weight(static_cast<size_t>(vocab));
  for (size_t k = 0; k < weight.size(); ++k) weight[k] = 1.0 / static_cast<double>(k + 1);
  std::discrete_distribution<int64_t> rank(weight.begin(), weight.end());
  std::vector<int64_t> id_of_rank(static_cast<size_t>(vocab));
  std::iota(id_of_rank.begin(), id_of_rank.end(), int64_t{0});
  std::shuffle(id_of_rank.begin(), id_of_rank.end(), rng());
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t& id : ids) id = id_of_rank[static_cast<size_t>(rank(rng()))];
  return ids;
}

inline Tensor id_tensor(const std::vector<int64_t>& ids, DType t) {
  return Tensor::from_doubles(std::vector<double>(ids.begin(), ids.end()), Shape{static_cast<int64_t>(ids.size())}, t);
}

// The exact sum (in fp64) of every contribution to every buffer element, and the sum of their
// magnitudes and their count per element (for the bounds below).
struct Reference {
  std::vector<double> sum, abs_sum;
  std::vector<int64_t> adds;  // per row
};

inline Reference reference(const Tensor& dplanes, const std::vector<int64_t>& ids, int64_t vocab) {
  const int64_t p_count = dplanes.dim(0), t = dplanes.dim(1), d = dplanes.dim(2);
  const std::vector<double> g = dplanes.to_doubles();
  Reference r;
  r.sum.assign(static_cast<size_t>(p_count * vocab * d), 0.0);
  r.abs_sum = r.sum;
  r.adds.assign(static_cast<size_t>(p_count * vocab), 0);
  for (int64_t p = 0; p < p_count; ++p)
    for (int64_t i = 0; i < t; ++i) {
      const int64_t row = p * vocab + ids[static_cast<size_t>(i)];
      ++r.adds[static_cast<size_t>(row)];
      for (int64_t j = 0; j < d; ++j) {
        const double c = g[static_cast<size_t>((p * t + i) * d + j)];
        r.sum[static_cast<size_t>(row * d + j)] += c;
        r.abs_sum[static_cast<size_t>(row * d + j)] += std::fabs(c);
      }
    }
  return r;
}

// How far a buffer element may be from the exact sum (Note [value-embed arithmetic]): u is the
// buffer's unit roundoff (2^-11 for f16, 2^-24 for f32), tiny its spacing near zero.
// atomic: each of n adds rounds once; deterministic: fp32 sums, then one rounding.
inline double bound(bool deterministic, bool f16, int64_t n, double exact, double abs_sum) {
  const double u = f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -24);
  const double tiny = f16 ? std::ldexp(1.0, -25) : 0.0;
  const double fp32_sum = static_cast<double>(n) * std::ldexp(1.0, -24) * abs_sum;
  if (deterministic) return u * std::fabs(exact) + fp32_sum + tiny;
  return static_cast<double>(n) * (u * abs_sum + tiny);
}

// The largest |buffer - exact| / bound over the buffer (<= 1 passes), and the relative L2 error.
struct Accuracy {
  double worst_ratio = 0.0, relative = 0.0;
};

inline Accuracy accuracy(const Tensor& sum, const Reference& r, bool deterministic) {
  const std::vector<double> b = sum.to_doubles();
  const int64_t d = sum.dim(1);
  const bool f16 = sum.dtype() == DType::f16;
  Accuracy e;
  double diff2 = 0.0, ref2 = 0.0;
  for (size_t k = 0; k < b.size(); ++k) {
    const double diff = std::fabs(b[k] - r.sum[k]);
    const double limit = bound(deterministic, f16, r.adds[k / static_cast<size_t>(d)], r.sum[k], r.abs_sum[k]);
    e.worst_ratio = std::max(e.worst_ratio, limit > 0 ? diff / limit : (diff > 0 ? INFINITY : 0.0));
    diff2 += diff * diff;
    ref2 += r.sum[k] * r.sum[k];
  }
  e.relative = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return e;
}

// The bytes of a tensor (copied to the host), for bit-for-bit comparisons.
inline std::vector<unsigned char> bytes(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  const auto* p = static_cast<const unsigned char*>(h.raw_data());
  return std::vector<unsigned char>(p, p + h.nbytes());
}

}  // namespace ve_test
