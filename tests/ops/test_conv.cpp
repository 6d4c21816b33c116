// conv2d, max_pool2d and avg_pool2d: values and gradients against PyTorch's (literals printed by
// tests/fixtures/gen_conv_values.py), PyTorch's tie and NaN rules for the max pool, empty batches,
// and every error by its message. The gradient checks, f32 against f64, thread counts and CPU
// against CUDA run on their cases in tests/op_cases.hpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/ops/ops.hpp"

using namespace tapegrad;

namespace {

// PyTorch 1.13 (CPU, f64): gen_conv_values.py's output, pasted.
// conv2d(x (2, 2, 3, 4), w (3, 2, 2, 3), b (3,), stride 2, padding 1) -> (2, 3, 2, 2)
const std::vector<double> conv_y = {
    1.171875, -0.125, 0.828125, 3.890625, -0.5625, 2.78125, -1.171875, -0.390625, -1.3125, 0.5625, 0.203125,
    -1.828125, -1.53125, 0.234375, -1.640625, -3.140625, -0.40625, 0.125, 1.0, -2.3125, 1.703125, 1.0, 0.90625, 3.75};
const std::vector<double> conv_dx = {
    0.09375, 0.109375, -0.09375, 0.171875, 0.046875, 0.390625, -1.0625, -0.1875, -0.28125, 0.5625, 0.234375,
    -1.015625, -0.046875, -0.5625, 0.171875, -0.09375, 0.1875, -0.328125, 0.46875, 0.28125, 0.390625, 0.375, -0.09375,
    0.515625, 0.234375, -1.390625, 0.1875, 0.21875, 0.234375, -0.078125, 0.109375, 0.1875, 0.0, 0.1875, -0.1875,
    0.15625, -0.09375, 1.125, -0.15625, -0.65625, -0.234375, 0.1875, 0.046875, -0.140625, 0.0625, -0.609375, 0.28125,
    0.09375};
const std::vector<double> conv_dw = {
    0.59375, -0.375, -0.515625, -0.28125, 0.03125, -0.703125, -0.34375, 1.171875, -0.40625, 0.46875, 0.203125,
    -0.53125, -0.171875, 0.765625, -0.4375, 0.296875, 0.703125, 0.359375, 0.015625, -0.015625, 0.578125, -0.921875,
    -0.1875, -0.53125, -0.234375, 0.640625, -0.359375, 0.171875, 0.8125, 0.15625, 0.09375, -0.21875, 0.578125,
    -0.765625, 0.125, -0.53125};
const std::vector<double> conv_db = {-0.625, 0.625, -0.375};
// max_pool(x (1, 2, 6, 7), kernel 3, stride 2, padding 1) -> (1, 2, 3, 4)
const std::vector<double> max_pool_y = {
    0.125, 0.125, 0.375, 0.25, 0.125, 0.125, 0.375, 0.25, 0.125, 0.125, 0.375, 0.25, 0.125, 0.125, 0.375, 0.25, 0.125,
    0.125, 0.375, 0.25, 0.125, 0.125, 0.375, 0.25};
const std::vector<double> max_pool_dx = {
    0.0, 0.0, 0.0, 0.0, 0.375, 0.0, -0.5, 0.0, -0.25, 0.0, 0.0, 0.25, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    0.0, -0.5, 0.0, 0.0, 0.125, 0.0, 0.375, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    -0.75, 0.0, 0.0, 0.0, 0.0, 0.25, 0.0, 0.125, 0.0, 0.0, -0.125, 0.0, 0.125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    -0.125, 0.0, 0.0, -0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
// avg_pool(x (1, 2, 6, 7), kernel 3, stride 2, padding 1) -> (1, 2, 3, 4)
const std::vector<double> avg_pool_y = {
    -0.027777777777777776, -0.05555555555555555, 0.05555555555555555, 0.027777777777777776, -0.041666666666666664,
    -0.08333333333333333, 0.08333333333333333, 0.041666666666666664, -0.041666666666666664, -0.08333333333333333,
    0.08333333333333333, 0.041666666666666664, -0.027777777777777776, -0.05555555555555555, 0.05555555555555555,
    0.027777777777777776, -0.041666666666666664, -0.08333333333333333, 0.08333333333333333, 0.041666666666666664,
    -0.041666666666666664, -0.08333333333333333, 0.08333333333333333, 0.041666666666666664};
const std::vector<double> avg_pool_dx = {
    -0.013888888888888888, 0.0, 0.013888888888888888, 0.05555555555555555, 0.041666666666666664,
    -0.013888888888888888, -0.05555555555555555, -0.041666666666666664, -0.027777777777777776, 0.013888888888888888,
    0.08333333333333333, 0.06944444444444445, 0.06944444444444445, 0.0, -0.027777777777777776, -0.027777777777777776,
    0.0, 0.027777777777777776, 0.027777777777777776, 0.08333333333333333, 0.05555555555555555, -0.06944444444444445,
    -0.08333333333333334, -0.013888888888888888, 0.027777777777777776, 0.041666666666666664, 0.13888888888888887,
    0.09722222222222221, -0.041666666666666664, -0.05555555555555555, -0.013888888888888888, 0.0,
    0.013888888888888888, 0.05555555555555555, 0.041666666666666664, -0.041666666666666664, -0.05555555555555555,
    -0.013888888888888888, 0.0, 0.013888888888888888, 0.05555555555555555, 0.041666666666666664, -0.05555555555555555,
    -0.08333333333333333, -0.027777777777777776, -0.027777777777777776, 0.0, 0.027777777777777776,
    0.027777777777777776, 0.0, -0.06944444444444445, -0.06944444444444445, -0.08333333333333334,
    -0.013888888888888888, 0.027777777777777776, 0.041666666666666664, 0.05555555555555555, 0.013888888888888888,
    -0.041666666666666664, -0.05555555555555555, -0.013888888888888888, 0.0, 0.013888888888888888,
    0.09722222222222221, 0.0, -0.09722222222222221, -0.1388888888888889, -0.041666666666666664, -0.027777777777777776,
    0.013888888888888888, 0.041666666666666664, -0.013888888888888888, -0.05555555555555555, -0.08333333333333333,
    -0.027777777777777776, -0.027777777777777776, 0.0, 0.041666666666666664, -0.013888888888888888,
    -0.05555555555555555, -0.08333333333333333, -0.027777777777777776, -0.027777777777777776, 0.0};

// The generator's dyadic(n, a, b, m): ((i * a + b) % m - m / 2) / 8, exact in binary.
std::vector<double> dyadic(int64_t n, int64_t a, int64_t b, int64_t m) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>((i * a + b) % m - m / 2) / 8;
  return v;
}

Tensor tensor(const std::vector<double>& v, Shape s, DType t = DType::f64) { return Tensor::from_doubles(v, s, t); }

// loss = sum(y * r), r the generator's weights
Var weighted_sum(Graph& g, Var y) {
  const Tensor r = tensor(dyadic(y.shape().numel(), 11, 3, 9), y.shape(), y.dtype());
  return ops::sum(ops::mul(y, g.input(r)));
}

// The generator's pool case: pool(x (1, 2, 6, 7), kernel 3, stride 2, padding 1), its values and
// the gradient of sum(y * r).
struct PoolResult {
  std::vector<double> y, dx;
};
PoolResult pool_case(DType t, Var (*pool)(Var, int, std::optional<int>, int)) {
  Graph g;
  Var x = g.parameter(tensor(dyadic(84, 3, 1, 7), {1, 2, 6, 7}, t));
  Var y = pool(x, 3, 2, 1);
  REQUIRE(y.shape() == Shape{1, 2, 3, 4});
  g.backward(weighted_sum(g, y));
  return {y.value().to_doubles(), x.grad().to_doubles()};
}

void check_approx(const std::vector<double>& have, const std::vector<double>& want, double eps) {
  REQUIRE(have.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(have[i] == doctest::Approx(want[i]).epsilon(eps));
  }
}

}  // namespace

TEST_CASE("conv2d: PyTorch's values and gradients, exactly, in f64 and f32") {
  for (DType t : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(t));
    Graph g;
    Var x = g.parameter(tensor(dyadic(48, 37, 5, 23), {2, 2, 3, 4}, t));
    Var w = g.parameter(tensor(dyadic(36, 13, 2, 17), {3, 2, 2, 3}, t));
    Var b = g.parameter(tensor(dyadic(3, 5, 1, 7), {3}, t));
    Var y = ops::conv2d(x, w, b, 2, 1);
    CHECK(y.shape() == Shape{2, 3, 2, 2});
    g.backward(weighted_sum(g, y));
    // dyadic inputs: every product and sum is exact in both dtypes, so the values are PyTorch's
    CHECK(y.value().to_doubles() == conv_y);
    CHECK(x.grad().to_doubles() == conv_dx);
    CHECK(w.grad().to_doubles() == conv_dw);
    CHECK(b.grad().to_doubles() == conv_db);
  }
}

TEST_CASE("conv2d: an input image and no bias: only the weight's gradient, the same one") {
  Graph g;
  Var x = g.input(tensor(dyadic(48, 37, 5, 23), {2, 2, 3, 4}));
  Var w = g.parameter(tensor(dyadic(36, 13, 2, 17), {3, 2, 2, 3}));
  Var y = ops::conv2d(x, w, Var(), 2, 1);
  const std::vector<double> bias = dyadic(3, 5, 1, 7);
  std::vector<double> want = conv_y;
  for (size_t i = 0; i < want.size(); ++i) want[i] -= bias[i / 4 % 3];  // conv_y holds b[o] in plane (n, o)
  CHECK(y.value().to_doubles() == want);
  g.backward(weighted_sum(g, y));
  CHECK(w.grad().to_doubles() == conv_dw);  // the bias adds nothing to dW
}

TEST_CASE("conv2d: output sizes are PyTorch's floor((H + 2p - k) / s) + 1") {
  Graph g;
  Var w = g.parameter(Tensor::zeros({2, 1, 3, 2}, DType::f64));
  CHECK(ops::conv2d(g.input(Tensor::zeros({1, 1, 7, 7}, DType::f64)), w, Var(), 3, 1).shape() == Shape{1, 2, 3, 3});
  CHECK(ops::conv2d(g.input(Tensor::zeros({1, 1, 3, 2}, DType::f64)), w).shape() == Shape{1, 2, 1, 1});
  CHECK(ops::conv2d(g.input(Tensor::zeros({1, 1, 1, 1}, DType::f64)), w, Var(), 5, 1).shape() == Shape{1, 2, 1, 1});
}

TEST_CASE("conv2d and the pools of an empty batch: empty outputs, zero parameter gradients") {
  Graph g;
  Var x = g.input(Tensor::zeros({0, 2, 5, 5}, DType::f64));
  Var w = g.parameter(tensor(dyadic(36, 13, 2, 17), {2, 2, 3, 3}));
  Var b = g.parameter(tensor({0.5, -0.5}, {2}));
  Var y = ops::conv2d(x, w, b, 1, 1);
  CHECK(y.shape() == Shape{0, 2, 5, 5});
  CHECK(ops::max_pool2d(y, 2).shape() == Shape{0, 2, 2, 2});
  g.backward(ops::sum(ops::avg_pool2d(y, 3, 2, 1)));
  CHECK(w.grad().to_doubles() == std::vector<double>(36, 0.0));
  CHECK(b.grad().to_doubles() == std::vector<double>{0.0, 0.0});
}

TEST_CASE("max_pool2d: PyTorch's values and gradients, the first max of a tie taking it") {
  for (DType t : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(t));
    const PoolResult r = pool_case(t, ops::max_pool2d);
    CHECK(r.y == max_pool_y);
    CHECK(r.dx == max_pool_dx);
  }
}

TEST_CASE("max_pool2d: a NaN wins its windows (the last NaN), as on PyTorch's CPU") {
  // torch.nn.functional.max_pool2d(x, 2, stride=1) of [[1, nan, 3], [nan, 0, 2]]: y [nan, nan],
  // dx [0, 1, 0, 1, 0, 0] (the first window's last NaN, the second window's only one)
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Graph g;
  Var x = g.parameter(tensor({1, nan, 3, nan, 0, 2}, {1, 1, 2, 3}));
  Var y = ops::max_pool2d(x, 2, 1);
  const std::vector<double> values = y.value().to_doubles();
  REQUIRE(values.size() == 2);
  CHECK(std::isnan(values[0]));
  CHECK(std::isnan(values[1]));
  g.backward(ops::sum(y));
  CHECK(x.grad().to_doubles() == std::vector<double>{0, 1, 0, 1, 0, 0});
}

TEST_CASE("max_pool2d: -inf everywhere gives -inf and the window's first pixel the gradient") {
  const double inf = std::numeric_limits<double>::infinity();
  Graph g;
  Var x = g.parameter(tensor({-inf, -inf, -inf, -inf}, {1, 1, 2, 2}));
  Var y = ops::max_pool2d(x, 2, 1, 1);  // 3 x 3 windows of 2 x 2 over the padded 4 x 4 (PyTorch: the same dx)
  CHECK(y.value().to_doubles() == std::vector<double>(9, -inf));
  g.backward(ops::sum(y));
  CHECK(x.grad().to_doubles() == std::vector<double>{4, 2, 2, 1});
}

TEST_CASE("avg_pool2d: PyTorch's values and gradients, the padding counted") {
  for (DType t : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(t));
    const PoolResult r = pool_case(t, ops::avg_pool2d);
    const double eps = t == DType::f64 ? 1e-15 : 1e-7;  // one division each side, rounded apart
    check_approx(r.y, avg_pool_y, eps);
    check_approx(r.dx, avg_pool_dx, eps);
  }
}

TEST_CASE("conv2d errors name the op, the shapes and the setting") {
  Graph g;
  Var x = g.parameter(Tensor::zeros({2, 5, 8, 8}, DType::f64));
  Var w = g.parameter(Tensor::zeros({4, 3, 3, 3}, DType::f64));
  Var x3 = g.parameter(Tensor::zeros({2, 3, 2, 2}, DType::f64));
  CHECK_THROWS_WITH_AS(ops::conv2d(x, w), "[conv2d] weight (4, 3, 3, 3) expects 3 input channels, x (2, 5, 8, 8) has 5",
                       Error);
  CHECK_THROWS_WITH_AS(ops::conv2d(g.parameter(Tensor::zeros({5, 8, 8}, DType::f64)), w),
                       "[conv2d] x (N, C, H, W) must have 4 dimensions, got shape (5, 8, 8)", Error);
  CHECK_THROWS_WITH_AS(ops::conv2d(x3, g.parameter(Tensor::zeros({4, 3, 3}, DType::f64))),
                       "[conv2d] weight (O, C, kh, kw) must have 4 dimensions, got shape (4, 3, 3)", Error);
  CHECK_THROWS_WITH_AS(ops::conv2d(x3, w, g.parameter(Tensor::zeros({3}, DType::f64))),
                       "[conv2d] bias (3,) must be (O,) = (4,) for weight (4, 3, 3, 3)", Error);
  CHECK_THROWS_WITH_AS(ops::conv2d(x3, w, Var(), 0), "[conv2d] stride must be at least 1, got 0", Error);
  CHECK_THROWS_WITH_AS(ops::conv2d(x3, w, Var(), 1, -1), "[conv2d] padding must be at least 0, got -1", Error);
  CHECK_THROWS_WITH_AS(ops::conv2d(x3, g.parameter(Tensor::zeros({4, 3, 5, 5}, DType::f64)), Var(), 1, 1),
                       "[conv2d] kernel (5, 5) is larger than x (2, 3, 2, 2) padded by 1 on each side to (4, 4): the "
                       "output would be empty",
                       Error);
  CHECK_THROWS_WITH_AS(ops::conv2d(x3, g.parameter(Tensor::zeros({4, 3, 0, 3}, DType::f64))),
                       "[conv2d] weight (4, 3, 0, 3) has an empty kernel (0, 3)", Error);
  CHECK_THROWS_WITH_AS(ops::conv2d(x3, g.parameter(Tensor::zeros({4, 3, 1, 1}, DType::f32))),
                       "[conv2d] dtypes differ: f64 and f32", Error);
  CHECK_THROWS_WITH_AS(ops::conv2d(g.input(Tensor::zeros({1, 3, 2, 2}, DType::i32)), w),
                       "[conv2d] x must be f64 or f32, got i32", Error);
  CHECK_THROWS_WITH_AS(ops::conv2d(Var(), w), "[conv2d] an input Var is empty", Error);
}

TEST_CASE("conv2d: sizes that do not fit 64 bits are errors, not wrapped sizes") {
  Graph g;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Var w = g.parameter(Tensor::zeros({4, 1, 1, 1}, DType::f64));
  CHECK_THROWS_WITH_AS(ops::conv2d(g.input(Tensor::zeros({0, 1, kMax, 1}, DType::f64)), w, Var(), 1, 1),
                       "[conv2d] x (0, 1, 9223372036854775807, 1) padded by 1 is too large to index", Error);
  // (0, 4, 2^32, 2^32): no element, but 4 * 2^64 cells in its other extents
  const std::string message = [&] {
    try {
      (void)ops::conv2d(g.input(Tensor::zeros({0, 1, int64_t{1} << 31, int64_t{1} << 31}, DType::f64)), w, Var(), 1,
                        1 << 30);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  }();
  CHECK(message.rfind("[conv2d] the output would have too many elements: [shape] ", 0) == 0);
}

TEST_CASE("pool errors name the op, the shape and the setting") {
  Graph g;
  Var x = g.parameter(Tensor::zeros({1, 1, 4, 4}, DType::f64));
  CHECK_THROWS_WITH_AS(ops::max_pool2d(x, 3, 1, 2),
                       "[max_pool2d] padding 2 is more than half the kernel size 3: a window could hold only padding",
                       Error);
  CHECK_THROWS_WITH_AS(ops::avg_pool2d(x, 0), "[avg_pool2d] kernel size must be at least 1, got 0", Error);
  CHECK_THROWS_WITH_AS(ops::max_pool2d(x, 2, 0), "[max_pool2d] stride must be at least 1, got 0", Error);
  CHECK_THROWS_WITH_AS(ops::avg_pool2d(x, 2, 1, -1), "[avg_pool2d] padding must be at least 0, got -1", Error);
  CHECK_THROWS_WITH_AS(ops::max_pool2d(x, 5),
                       "[max_pool2d] kernel (5, 5) is larger than x (1, 1, 4, 4) padded by 0 on each side to (4, 4): "
                       "the output would be empty",
                       Error);
  CHECK_THROWS_WITH_AS(ops::avg_pool2d(g.parameter(Tensor::zeros({4, 4}, DType::f64)), 2),
                       "[avg_pool2d] x (N, C, H, W) must have 4 dimensions, got shape (4, 4)", Error);
  CHECK_THROWS_WITH_AS(ops::max_pool2d(g.input(Tensor::zeros({1, 1, 4, 4}, DType::i64)), 2),
                       "[max_pool2d] x must be f64 or f32, got i64", Error);
}
