// The vector paths' f32 tanh, sigmoid, silu, gelu_tanh and gelu (erf) (Note [vector unary math] in
// src/kernels/cpu/simd.hpp): within one ulp of the function computed in double and rounded to
// float, over every 251st float bit pattern of [-30, 30] and the special values (gelu and gelu' also
// over a dense sweep of [-20, 20] and random floats, on each path by its [avx2] or [avx512] tag); within 2 ulps of
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
#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
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
    case Unary::gelu_erf: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    default: return x * sigmoid(2 * kC * (x + kA * x * x * x));
  }
}
double reference_backward(Unary op, double x, double dy) {
  if (op == Unary::silu) {
    const double s = sigmoid(x);
    return dy * s * (1 + x * (1 - s));
  }
  if (op == Unary::gelu_erf)
    return dy * (0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI));
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

constexpr Unary kOps[] = {Unary::tanh, Unary::sigmoid, Unary::silu, Unary::gelu_tanh, Unary::gelu_erf};
constexpr Unary kBackward[] = {Unary::silu, Unary::gelu_tanh, Unary::gelu_erf};

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

// ---- gelu (erf), on each vector path by its tag: a dense sweep, random floats, the specials

namespace {

// Every multiple of 2^-12 in [-20, 20] (the underflow near -14.4 and the subnormal results below
// -13.1 included), then 2^18 random finite floats of every magnitude.
std::vector<float> gelu_inputs() {
  std::vector<float> x;
  for (int i = -20 * 4096; i <= 20 * 4096; ++i) x.push_back(static_cast<float>(std::ldexp(i, -12)));
  std::mt19937 rng(2024);
  while (x.size() < (size_t{1} << 18) + 163841) {
    const float v = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isfinite(v)) x.push_back(v);
  }
  return x;
}

void check_gelu_erf(simd::Path p) {
  const simd::Kernels& k = simd::kernels_of(p);
  const std::vector<float> x = gelu_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size()), dy(x.size(), 1.0f), dx(x.size());
  REQUIRE(k.unary_row(Unary::gelu_erf, x.data(), y.data(), n));
  REQUIRE(k.unary_backward_row(Unary::gelu_erf, x.data(), dy.data(), dx.data(), n));
  int64_t worst = 0;
  float worst_x = 0;
  size_t bad = 0;
  float bad_x = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const float want = static_cast<float>(0.5 * v * std::erfc(-v / std::sqrt(2.0)));
    const int64_t d = ulps(y[i], want);
    if (d > worst) worst = d, worst_x = x[i];
    const double slope = 0.5 * std::erfc(-v / std::sqrt(2.0)) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    if (!std::isfinite(slope)) continue;  // x * exp(-x^2/2) = inf * 0 for |x| near the float limit
    // one ulp of the rounded derivative, or 2^-36 absolute where it crosses zero (x = -0.7518)
    if (ulps(dx[i], static_cast<float>(slope)) > 1 && !(std::fabs(dx[i] - slope) <= 0x1p-36)) ++bad, bad_x = x[i];
  }
  CAPTURE(worst_x);
  CAPTURE(bad_x);
  CHECK(worst <= 1);
  CHECK(bad == 0);

  // NaN stays NaN; gelu(+inf) = +inf, gelu'(+inf) = 1; gelu(-inf) = -0, gelu'(-inf) = 0; -0 -> -0,
  // gelu'(0) = 1/2; below -14.85 (the clamp) -0 and 0; above it x and 1.
  const float special[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, -0.0f, 0.0f, -14.9f,
                           -1e30f, 14.9f, 1e30f, -std::numeric_limits<float>::max()};
  constexpr int m = 10;
  const float ones[m] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  float out[m], slope[m];
  REQUIRE(k.unary_row(Unary::gelu_erf, special, out, m));
  REQUIRE(k.unary_backward_row(Unary::gelu_erf, special, ones, slope, m));
  CHECK(std::isnan(out[0]));
  CHECK(std::isnan(slope[0]));
  CHECK(out[1] == INFINITY);
  CHECK(slope[1] == 1.0f);
  CHECK(std::bit_cast<uint32_t>(out[2]) == std::bit_cast<uint32_t>(-0.0f));
  CHECK(std::bit_cast<uint32_t>(slope[2]) == 0u);
  CHECK(std::bit_cast<uint32_t>(out[3]) == std::bit_cast<uint32_t>(-0.0f));
  CHECK(slope[3] == 0.5f);
  CHECK(std::bit_cast<uint32_t>(out[4]) == 0u);
  CHECK(slope[4] == 0.5f);
  for (int i : {5, 6, 9}) {
    CHECK(std::bit_cast<uint32_t>(out[i]) == std::bit_cast<uint32_t>(-0.0f));
    CHECK(std::bit_cast<uint32_t>(slope[i]) == 0u);
  }
  for (int i : {7, 8}) {
    CHECK(out[i] == special[i]);
    CHECK(slope[i] == 1.0f);
  }
  // known values: torch.nn.functional.gelu in f64 (PyTorch 1.13), rounded to float
  const float at[] = {-3.0f, -0.75f, 0.5f, 2.0f};
  const double gelu_at[] = {-0.00404969409489031, -0.16997051428265111, 0.34573123063700656, 1.9544997361036416};
  float got[4];
  REQUIRE(k.unary_row(Unary::gelu_erf, at, got, 4));
  for (int i = 0; i < 4; ++i) CHECK(got[i] == static_cast<float>(gelu_at[i]));
}

}  // namespace

TEST_CASE("[avx2] gelu (erf) and its derivative within 1 ulp over [-20, 20], random floats and the specials") {
  check_gelu_erf(simd::Path::avx2);
}

TEST_CASE("[avx512] gelu (erf) and its derivative within 1 ulp over [-20, 20], random floats and the specials") {
  check_gelu_erf(simd::Path::avx512);
}

TEST_CASE("[avx2] [avx512] gelu (erf) and its derivative: AVX2 and AVX-512 bit for bit alike, in rows of any bounds") {
  const std::vector<float> x = gelu_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> dy(x.size());
  for (size_t i = 0; i < x.size(); ++i) dy[i] = 0.5f + static_cast<float>(i % 7) * 0.25f;
  std::vector<float> y[2], dx[2];
  int which = 0;
  for (simd::Path p : {simd::Path::avx2, simd::Path::avx512}) {
    const simd::Kernels& k = simd::kernels_of(p);
    y[which].resize(x.size());
    dx[which].resize(x.size());
    REQUIRE(k.unary_row(Unary::gelu_erf, x.data(), y[which].data(), n));
    REQUIRE(k.unary_backward_row(Unary::gelu_erf, x.data(), dy.data(), dx[which].data(), n));
    std::vector<float> pieces(x.size());  // the backward in pieces of 1 to 23
    for (int64_t i = 0, len = 1; i < n; i += len, len = len % 23 + 1)
      REQUIRE(k.unary_backward_row(Unary::gelu_erf, x.data() + i, dy.data() + i, pieces.data() + i,
                                   std::min(len, n - i)));
    CHECK(std::memcmp(pieces.data(), dx[which].data(), x.size() * sizeof(float)) == 0);
    ++which;
  }
  CHECK(std::memcmp(y[0].data(), y[1].data(), x.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(dx[0].data(), dx[1].data(), x.size() * sizeof(float)) == 0);
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

// exp_f32 answers expf's underflow to +0 itself (rows.cpp); every exponential of the attention's
// rows (exp_shifted_row, on this CPU's path) still has the C library's bits, around that threshold,
// past it, at -inf and across the vector lanes' own range.
TEST_CASE("exp_shifted_row gives the C library's expf bits at and past expf's underflow, on this CPU's path") {
  std::vector<float> x;
  const float threshold = simd::kExpfZeroBelow;  // below it expf rounds to +0
  for (float v = threshold; x.size() < 40; v = std::nextafter(v, 0.0f)) x.push_back(v);
  for (float v = threshold; x.size() < 80; v = std::nextafter(v, -1000.0f)) x.push_back(v);
  for (float v : {-87.0f, -88.0f, -88.8f, -100.0f, -104.0f, -150.0f, -1e30f, -std::numeric_limits<float>::infinity(),
                  0.0f, -0.0f, -1.5f, 80.0f})
    x.push_back(v);
  for (const float shift : {0.0f, 3.25f}) {
    std::vector<float> y(x.size());
    cpu::exp_shifted_row(x.data(), shift, y.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      INFO("x = " << x[i] << ", shift " << shift);
      CHECK(std::bit_cast<uint32_t>(y[i]) == std::bit_cast<uint32_t>(std::exp(x[i] - shift)));
    }
  }
}
