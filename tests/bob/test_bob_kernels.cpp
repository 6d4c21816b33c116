// The CPU kernels bob's update runs take fast paths (Note [repeated rows], Note [softmax max],
// the vector paths of src/kernels/cpu/simd.hpp); these tests check, bit for bit, that every path
// gives what the kernel's reference arithmetic gives, on rows built to reach each one, and on each
// CPU path this machine has (scalar, AVX2, AVX-512: tests/cpu_paths.hpp).
//
// Rule: the expected values are the documented f32 arithmetic written out here, one element at a
// time (Note [cross-entropy arithmetic] in src/kernels/cpu/rows.cpp): p = exp(x - max) / total with
// the exponentials summed left to right in double, dlogits = ((p - onehot) / divisor) * g, and
// the gather backward's rows added in index order.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "tapegrad/kernels/cpu/simd.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "bits.hpp"
#include "cpu_paths.hpp"
#include "needs.hpp"

using namespace tapegrad;

namespace {

using cpu::simd::Path;
using testing::values;

// The f32 softmax of one row, as Note [cross-entropy arithmetic] writes it.
std::vector<float> reference_softmax(const float* x, int64_t m) {
  float top = x[0];
  for (int64_t j = 1; j < m; ++j) top = x[j] > top ? x[j] : top;
  std::vector<float> y(static_cast<size_t>(m));
  double total = 0.0;
  for (int64_t j = 0; j < m; ++j) {
    y[j] = std::exp(x[j] - top);
    total += y[j];
  }
  for (int64_t j = 0; j < m; ++j) y[j] = static_cast<float>(y[j] / total);
  return y;
}

// Rows that reach every path: random rows, rows whose largest values are +0 and -0 in either
// order, a row with a NaN, a row with +inf, a row with tiny and underflowing exponentials; m = 37 leaves a tail after the vectors of 16, m = 8
// is too short for them.
std::vector<std::vector<float>> distinct_rows(int64_t m) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::vector<std::vector<float>> rows(8, std::vector<float>(static_cast<size_t>(m)));
  for (auto& row : rows)
    for (float& x : row) x = uniform(rng);
  for (float& x : rows[2]) x = -std::fabs(x);
  rows[2][0] = -0.0f, rows[2][m / 2] = 0.0f;  // maximum: -0 first, then +0
  for (float& x : rows[3]) x = -std::fabs(x);
  rows[3][1] = 0.0f, rows[3][m - 2] = -0.0f;  // maximum: +0 first, then -0
  rows[4][m / 3] = std::numeric_limits<float>::quiet_NaN();
  rows[5][m - 3] = std::numeric_limits<float>::infinity();
  rows[6] = rows[0];
  rows[6][m - 1] += 1.0f;  // equal to row 0 but in its last value: not a repeat
  rows[7][m / 4] = -40.0f;   // exp(-40 - top) < 2^-22: the sum stays left to right
  rows[7][m / 2] = -95.0f;   // |x - top| >= 88: outside expf's main path
  return rows;
}

// check() once on each CPU path this machine has, that path active.
void on_every_cpu_path(const std::function<void()>& check) {
  for (Path path : testing::cpu_paths()) {
    const testing::ForcedPath forced(path);
    CAPTURE(cpu::simd::name(path));
    check();
  }
}

}  // namespace

TEST_CASE("the tests' CPU paths are the library's: the same instruction sets, the best one active by default") {
  CHECK(cpu::simd::supported(Path::avx2) == testing::avx2_need().available);
  CHECK(cpu::simd::supported(Path::avx512) == testing::avx512_need().available);
  CHECK(cpu::simd::supported(Path::scalar));
  if (std::getenv("TAPEGRAD_CPU_PATH") == nullptr) CHECK(cpu::simd::active() == cpu::simd::best());
  for (Path p : cpu::simd::all_paths) {
    CAPTURE(cpu::simd::name(p));
    if (cpu::simd::supported(p)) {
      CHECK(cpu::simd::kernels_of(p).path == p);
    } else {
      const std::string message = std::string("[cpu] set_path(") + cpu::simd::name(p) + "): " +
                                  cpu::simd::missing(p) + "; the best path here is " + cpu::simd::name(cpu::simd::best());
      CHECK_THROWS_WITH_AS(cpu::simd::set_path(p), message.c_str(), Error);
    }
  }
}

TEST_CASE("f32 cross-entropy: repeated rows, vectorized max and tails give the reference's bits") {
  on_every_cpu_path([] {
    for (int64_t m : {256, 37, 8}) {
      CAPTURE(m);
      const std::vector<std::vector<float>> rows = distinct_rows(m);
      const std::vector<int> order = {0, 1, 0, 2, 3, 1, 0, 4, 5, 4, 6, 2, 3, 0, 7, 6, 5, 7};  // a gathered batch
      const int64_t b = static_cast<int64_t>(order.size());
      std::vector<float> logits;
      std::vector<int32_t> targets;
      for (size_t i = 0; i < order.size(); ++i) {
        logits.insert(logits.end(), rows[order[i]].begin(), rows[order[i]].end());
        targets.push_back(static_cast<int32_t>((i * 5) % static_cast<size_t>(m)));
      }
      const Tensor x = Tensor::from_vector(logits, Shape{b, m});
      const Tensor t = Tensor::from_vector(targets, Shape{b});
      Tensor probs = Tensor::empty(Shape{b, m}, DType::f32), losses = Tensor::empty(Shape{b}, DType::f32);
      kernels::cross_entropy(x, t, probs, losses);

      std::vector<float> want;
      for (int o : order) {
        const std::vector<float> p = reference_softmax(rows[o].data(), m);
        want.insert(want.end(), p.begin(), p.end());
      }
      CHECK_SAME_BITS(values(probs), want);
      // Each loss equals the same row's loss computed on its own, as a batch of one.
      for (int64_t i = 0; i < b; ++i) {
        Tensor one_probs = Tensor::empty(Shape{1, m}, DType::f32), one_loss = Tensor::empty(Shape{1}, DType::f32);
        kernels::cross_entropy(Tensor::from_vector(rows[order[i]], Shape{1, m}),
                               Tensor::from_vector(std::vector<int32_t>{targets[i]}, Shape{1}), one_probs, one_loss);
        CAPTURE(i);
        CHECK(std::bit_cast<uint32_t>(values(losses)[i]) == std::bit_cast<uint32_t>(values(one_loss)[0]));
      }
    }
  });
}

TEST_CASE("f32 cross-entropy backward: power-of-two and other divisors, one or per-row gradients") {
  on_every_cpu_path([] {
    const int64_t b = 5, m = 37 + 256;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    std::vector<float> p(static_cast<size_t>(b * m));
    for (float& x : p) x = uniform(rng);
    p[3] = 1e-42f;  // a subnormal: x / 256 and x * 2^-8 must still agree
    const std::vector<int32_t> targets = {0, 5, 292, 17, 5};
    for (double divisor : {256.0, 3.0, 1.0, 0.5}) {
      for (bool per_row : {false, true}) {
        CAPTURE(divisor);
        CAPTURE(per_row);
        const std::vector<float> g = per_row ? std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f, -0.0f} : std::vector<float>{1.5f};
        const Tensor dloss = per_row ? Tensor::from_vector(g, Shape{b}) : Tensor::from_vector(g, Shape{});
        Tensor d = Tensor::empty(Shape{b, m}, DType::f32);
        kernels::cross_entropy_backward(Tensor::from_vector(p, Shape{b, m}), Tensor::from_vector(targets, Shape{b}),
                                        dloss, divisor, d);
        std::vector<float> want(p.size());
        const float div = static_cast<float>(divisor);
        for (int64_t i = 0; i < b; ++i)
          for (int64_t j = 0; j < m; ++j) {
            const float onehot = j == targets[i] ? 1.0f : 0.0f;
            want[i * m + j] = ((p[i * m + j] - onehot) / div) * (per_row ? g[i] : g[0]);
          }
        CHECK_SAME_BITS(values(d), want);
      }
    }
  });
}

TEST_CASE("f32 gather backward: rows added in index order, tails included") {
  on_every_cpu_path([] {
    const int64_t rows = 4, d = 16 * 3 + 5;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> start(static_cast<size_t>(rows * d)), contributions(static_cast<size_t>(6 * d));
    for (float& x : start) x = uniform(rng);
    for (float& x : contributions) x = uniform(rng) * 1e-3f;
    contributions[7] = -0.0f;
    const std::vector<int32_t> ids = {2, 0, 2, 3, 2, 0};
    std::vector<float> want = start;
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t j = 0; j < d; ++j) want[ids[i] * d + j] = want[ids[i] * d + j] + contributions[i * d + j];
    Tensor table = Tensor::from_vector(start, Shape{rows, d});
    kernels::scatter_rows(table, Tensor::from_vector(ids, Shape{6}), Tensor::from_vector(contributions, Shape{6, d}),
                          false);
    CHECK_SAME_BITS(values(table), want);
  });
}

namespace {

// path's exp_row against the C library's expf, on every 61st float bit pattern.
void check_vector_expf(Path path) {
  REQUIRE(cpu::simd::supported(path));
  const cpu::simd::Kernels& vk = cpu::simd::kernels_of(path);
  float (*library_exp)(float) = [](float x) { return std::exp(x); };
  REQUIRE(cpu::simd::reproduces(vk, library_exp));
  // bench-style exhaustive runs over all 2^32 inputs agree too; here a spread sample of 70 million
  std::vector<float> x(1 << 16), have(1 << 16);
  long checked = 0, differing = 0;
  for (uint64_t start = 0; start < (uint64_t{1} << 32); start += uint64_t{61} * x.size()) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::bit_cast<float>(static_cast<uint32_t>(start + 61 * i));
    vk.exp_row(x.data(), 0.0f, have.data(), static_cast<int64_t>(x.size()), library_exp);
    for (size_t i = 0; i < x.size(); ++i, ++checked)
      differing += std::bit_cast<uint32_t>(have[i]) != std::bit_cast<uint32_t>(std::exp(x[i]));
  }
  CHECK(checked > 70000000);
  CHECK(differing == 0);
}

// path's sum_blocks against the left-to-right double sum, on rows built to reach its branches.
void check_block_sums(Path path) {
  REQUIRE(cpu::simd::supported(path));
  const cpu::simd::Kernels& vk = cpu::simd::kernels_of(path);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f), gap(0.0f, 60.0f);
  long rows = 0, differing = 0;
  for (int kind = 0; kind < 8; ++kind) {
    for (int trial = 0; trial < 400; ++trial) {
      const int64_t m = 1 + static_cast<int64_t>(rng() % 300);
      std::vector<float> y(static_cast<size_t>(m));
      for (float& v : y) {
        switch (kind) {
          case 0: v = unit(rng); break;                                   // a flat row: every sum exact
          case 1: v = std::exp(-gap(rng)); break;                         // a sharp row: tiny, middle, large
          case 2: v = std::exp(-gap(rng) * 2.0f); break;                  // sharper: underflowing values too
          case 3: v = unit(rng) < 0.1f ? unit(rng) : std::exp(-gap(rng)); break;
          case 4: v = unit(rng) < 0.5f ? 0.0f : std::ldexp(unit(rng), -static_cast<int>(rng() % 150)); break;
          case 5: v = std::bit_cast<float>(static_cast<uint32_t>(rng()) & 0x3f7fffffu); break;  // any bits in [0, 2)
          case 6: v = (unit(rng) < 0.2f ? -1.0f : 1.0f) * std::exp(-gap(rng)); break;  // negatives lower s
          default: v = std::exp(-gap(rng) * (1.0f + 3.0f * unit(rng))); break;  // a softmax row: a 1 put in below
        }
      }
      if (kind == 7) y[static_cast<size_t>(rng() % m)] = 1.0f;  // the row's top, exp(0)
      if (trial % 50 == 7) y[static_cast<size_t>(rng() % m)] = std::numeric_limits<float>::quiet_NaN();
      if (trial % 50 == 9) y[static_cast<size_t>(rng() % m)] = std::numeric_limits<float>::infinity();
      if (trial % 50 == 11) y[0] = 0.0f;
      double want = 0.0;
      for (float v : y) want += v;
      const double have = vk.sum_blocks(y.data(), m);
      ++rows;
      const bool both_nan = std::isnan(have) && std::isnan(want);
      differing += std::bit_cast<uint64_t>(have) != std::bit_cast<uint64_t>(want) && !both_nan;
    }
  }
  CHECK(rows == 3200);
  CHECK(differing == 0);
}

// path's divide_row against the double division, float midpoints and subnormal quotients included.
void check_division(Path path) {
  REQUIRE(cpu::simd::supported(path));
  const cpu::simd::Kernels& vk = cpu::simd::kernels_of(path);
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<double> totals(1.0, 300.0);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  long checked = 0, differing = 0, near_midpoints = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t m = 1 + static_cast<int64_t>(rng() % 100);
    std::vector<float> y(static_cast<size_t>(m));
    double total = totals(rng);
    for (float& v : y) v = unit(rng) * (rng() % 4 == 0 ? std::ldexp(1.0f, -static_cast<int>(rng() % 140)) : 1.0f);
    if (trial % 3 == 0) {  // quotients on float midpoints: total = y / midpoint, rounded
      const float f = std::ldexp(unit(rng) * 0.5f + 0.5f, -1 - static_cast<int>(rng() % 20));
      const double midpoint = (static_cast<double>(f) + static_cast<double>(std::nextafter(f, 2.0f))) / 2.0;
      total = static_cast<double>(y[0] = unit(rng) * 0.5f + 0.5f) / midpoint;
      for (size_t k = 1; k < y.size(); ++k)  // the same quotient, or a neighbouring midpoint's
        y[k] = k % 2 ? y[0] : static_cast<float>(std::nextafter(f, 2.0f) * total);
      near_midpoints += total >= 1.0;
    }
    if (trial % 7 == 0) y[static_cast<size_t>(rng() % m)] = std::numeric_limits<float>::quiet_NaN();
    if (trial % 11 == 0) y[static_cast<size_t>(rng() % m)] = 1e-40f;  // subnormal quotients
    std::vector<float> want = y, have = y;
    for (float& v : want) v = static_cast<float>(v / total);
    int64_t j = vk.divide_row(have.data(), m, total);
    for (; j < m; ++j) have[static_cast<size_t>(j)] = static_cast<float>(have[static_cast<size_t>(j)] / total);
    for (size_t k = 0; k < y.size(); ++k, ++checked)
      differing += std::bit_cast<uint32_t>(have[k]) != std::bit_cast<uint32_t>(want[k]);
  }
  CHECK(near_midpoints > 900);
  CHECK(checked > 100000);
  CHECK(differing == 0);
}

}  // namespace

TEST_CASE("[avx2] the vectorized expf gives the C library's expf bits (every 61st float bit pattern)") {
  check_vector_expf(Path::avx2);
}
TEST_CASE("[avx2] the softmax's block sums give the left-to-right double sum (Note [block sums])") {
  check_block_sums(Path::avx2);
}
TEST_CASE("[avx2] the softmax's division by its total gives the double division's bits (Note [division by the total])") {
  check_division(Path::avx2);
}
TEST_CASE("[avx512] the vectorized expf gives the C library's expf bits (every 61st float bit pattern)") {
  check_vector_expf(Path::avx512);
}
TEST_CASE("[avx512] the softmax's block sums give the left-to-right double sum (Note [block sums])") {
  check_block_sums(Path::avx512);
}
TEST_CASE("[avx512] the softmax's division by its total gives the double division's bits (Note [division by the total])") {
  check_division(Path::avx512);
}
