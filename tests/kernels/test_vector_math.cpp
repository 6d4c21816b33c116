// The vector paths' f32 tanh, sigmoid, silu and gelu_tanh (Note [vector unary math] in
// src/kernels/cpu/simd.hpp): within one ulp of the function computed in double and rounded to
// float, over every 251st float bit pattern of [-30, 30] and the special values; within 2 ulps of
// glibc's tanhf; AVX2 and AVX-512 bit for bit alike; every element's bits independent of where its
// row starts or ends (the thread split). And ops::softmax's vector rows (Note [vector softmax rows])
// within 2 ulps of the double softmax.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include "cpu_paths.hpp"
#include "tapegrad/kernels/cpu/simd.hpp"

using namespace tapegrad;
using kernels::Unary;
namespace simd = tapegrad::cpu::simd;

namespace {

// The distance in representable floats (0 when both are NaN, large when one is).
int64_t ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  auto ordered = [](float x) {
    const int32_t i = std::bit_cast<int32_t>(x);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

double sigmoid(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }
constexpr double kC = 0.7978845608028654, kA = 0.044715;

// The functions and derivatives (times dy) in double.
double reference(Unary op, double x) {
  switch (op) {
    case Unary::tanh: return std::tanh(x);
    case Unary::sigmoid: return sigmoid(x);
    case Unary::silu: return x * sigmoid(x);
    default: return x * sigmoid(2 * kC * (x + kA * x * x * x));
  }
}
double reference_backward(Unary op, double x, double dy) {
  if (op == Unary::silu) {
    const double s = sigmoid(x);
    return dy * s * (1 + x * (1 - s));
  }
  const double u = kC * (x + kA * x * x * x), t = std::tanh(u);
  return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kC * (1 + 3 * kA * x * x));
}

std::vector<float> inputs() {
  std::vector<float> x;
  for (uint32_t b = 0; b <= std::bit_cast<uint32_t>(30.0f); b += 251) {
    x.push_back(std::bit_cast<float>(b));
    x.push_back(-std::bit_cast<float>(b));
  }
  for (float v : {0.0f, -0.0f, 0.25f, -0.25f, 9.5f, 10.0f, 88.0f, -88.0f, 200.0f, -200.0f, 1e30f, -1e30f,
                  std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min()})
    x.push_back(v);
  x.resize(x.size() + 37, 0.5f);  // not a whole number of vectors
  return x;
}

constexpr Unary kOps[] = {Unary::tanh, Unary::sigmoid, Unary::silu, Unary::gelu_tanh};
constexpr Unary kBackward[] = {Unary::silu, Unary::gelu_tanh};

std::vector<simd::Path> vector_paths() {
  std::vector<simd::Path> out;
  for (simd::Path p : testing::cpu_paths())
    if (p != simd::Path::scalar) out.push_back(p);
  return out;
}

}  // namespace

TEST_CASE("the vector paths' tanh, sigmoid, silu and gelu_tanh are within 1 ulp of the double functions") {
  const std::vector<float> x = inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size()), dy(x.size(), 0.75f), dx(x.size());
  for (simd::Path p : vector_paths()) {
    const simd::Kernels& k = simd::kernels_of(p);
    for (Unary op : kOps) {
      const std::string what = std::string(simd::name(p)) + " " + kernels::unary_name(op);
      CAPTURE(what);
      REQUIRE(k.unary_row(op, x.data(), y.data(), n));
      int64_t worst = 0;
      float worst_x = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const int64_t d = ulps(y[i], static_cast<float>(reference(op, x[i])));
        if (d > worst) worst = d, worst_x = x[i];
      }
      CAPTURE(worst_x);
      CHECK(worst <= 1);
    }
    for (Unary op : kBackward) {
      const std::string what = std::string(simd::name(p)) + " " + kernels::unary_name(op) + " backward";
      CAPTURE(what);
      REQUIRE(k.unary_backward_row(op, x.data(), dy.data(), dx.data(), n));
      size_t bad = 0;
      float bad_x = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double want = reference_backward(op, x[i], dy[i]);
        if (!std::isfinite(want)) continue;
        // one ulp of the result, or 2^-36 absolute where the derivative crosses zero (gelu' at
        // x = -0.7518: its terms are of order 1 and cancel; the f32 formula is off by ~2^-24 there)
        if (!(std::fabs(dx[i] - want) <= std::fabs(want) * 0x1p-23 + 0x1p-36)) ++bad, bad_x = x[i];
      }
      CAPTURE(bad_x);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("the vector tanh is within 2 ulps of the C library's tanhf; specials as tanhf has them") {
  const std::vector<float> x = inputs();
  std::vector<float> y(x.size());
  for (simd::Path p : vector_paths()) {
    const std::string what = simd::name(p);
    CAPTURE(what);
    REQUIRE(simd::kernels_of(p).unary_row(Unary::tanh, x.data(), y.data(), static_cast<int64_t>(x.size())));
    int64_t worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, ulps(y[i], std::tanh(x[i])));
    CHECK(worst <= 2);
    const float special[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, -0.0f, 0.0f};
    float out[5];
    REQUIRE(simd::kernels_of(p).unary_row(Unary::tanh, special, out, 5));
    CHECK(std::isnan(out[0]));
    CHECK(out[1] == 1.0f);
    CHECK(out[2] == -1.0f);
    CHECK(std::bit_cast<uint32_t>(out[3]) == std::bit_cast<uint32_t>(-0.0f));
    CHECK(std::bit_cast<uint32_t>(out[4]) == 0u);
    REQUIRE(simd::kernels_of(p).unary_row(Unary::sigmoid, special, out, 5));
    CHECK(std::isnan(out[0]));
    CHECK(out[1] == 1.0f);
    CHECK(out[2] == 0.0f);
    REQUIRE(simd::kernels_of(p).unary_row(Unary::silu, special, out, 5));
    CHECK(std::isnan(out[0]));
    CHECK(out[1] == INFINITY);
    CHECK(std::isnan(out[2]));  // -inf * sigmoid(-inf) = -inf * 0, as the scalar formula gives
  }
}

TEST_CASE("the vector paths agree bit for bit, and an element's bits do not depend on its row's bounds") {
  const std::vector<float> x = inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<simd::Path> paths = vector_paths();
  for (Unary op : kOps) {
    const std::string what = kernels::unary_name(op);
    CAPTURE(what);
    std::vector<std::vector<float>> y(paths.size(), std::vector<float>(x.size()));
    for (size_t p = 0; p < paths.size(); ++p) {
      const simd::Kernels& k = simd::kernels_of(paths[p]);
      REQUIRE(k.unary_row(op, x.data(), y[p].data(), n));
      // the same elements in pieces of 1 to 23 (tails of every length)
      std::vector<float> pieces(x.size());
      for (int64_t i = 0, len = 1; i < n; i += len, len = len % 23 + 1)
        REQUIRE(k.unary_row(op, x.data() + i, pieces.data() + i, std::min(len, n - i)));
      CHECK(std::memcmp(pieces.data(), y[p].data(), x.size() * sizeof(float)) == 0);
    }
    for (size_t p = 1; p < paths.size(); ++p) CHECK(std::memcmp(y[p].data(), y[0].data(), x.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("the scalar path leaves every element to the reference loop") {
  const float x[3] = {1, 2, 3};
  float y[3];
  CHECK_FALSE(simd::kernels_of(simd::Path::scalar).unary_row(Unary::tanh, x, y, 3));
  CHECK_FALSE(simd::kernels_of(simd::Path::scalar).unary_backward_row(Unary::gelu_tanh, x, x, y, 3));
  for (simd::Path p : vector_paths()) {
    CHECK_FALSE(simd::kernels_of(p).unary_row(Unary::exp, x, y, 3));
    CHECK_FALSE(simd::kernels_of(p).unary_backward_row(Unary::tanh, x, x, y, 3));
  }
}

TEST_CASE("the vector paths' softmax rows are within 2 ulps of the double softmax; NaN, inf and short rows refused") {
  std::mt19937_64 rng(77);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (simd::Path p : vector_paths()) {
    const simd::Kernels& k = simd::kernels_of(p);
    const std::string what = simd::name(p);
    CAPTURE(what);
    for (int64_t m : {16, 17, 31, 100, 768, 1001}) {
      for (double spread : {1.0, 10.0, 60.0}) {
        CAPTURE(m);
        CAPTURE(spread);
        std::vector<float> x(static_cast<size_t>(m)), y(static_cast<size_t>(m));
        for (float& v : x) v = static_cast<float>(spread * normal(rng));
        x[static_cast<size_t>(m / 2)] = -INFINITY;  // exp 0
        REQUIRE(k.softmax_row(x.data(), y.data(), m));
        double top = -INFINITY, total = 0.0;
        for (float v : x) top = std::max(top, static_cast<double>(v));
        for (float v : x) total += std::exp(static_cast<double>(v) - top);
        int64_t worst = 0;
        for (int64_t j = 0; j < m; ++j) {
          const float want = static_cast<float>(std::exp(static_cast<double>(x[static_cast<size_t>(j)]) - top) / total);
          worst = std::max(worst, ulps(y[static_cast<size_t>(j)], want));
        }
        CHECK(worst <= 2);
        CHECK(y[static_cast<size_t>(m / 2)] == 0.0f);
      }
    }
    std::vector<float> x(40, 0.5f), y(40);
    x[3] = std::numeric_limits<float>::quiet_NaN();
    CHECK_FALSE(k.softmax_row(x.data(), y.data(), 40));
    x[3] = INFINITY;
    CHECK_FALSE(k.softmax_row(x.data(), y.data(), 40));
    std::fill(x.begin(), x.end(), -INFINITY);
    CHECK_FALSE(k.softmax_row(x.data(), y.data(), 40));
    CHECK_FALSE(k.softmax_row(x.data(), y.data(), k.lanes - 1));
  }
}
