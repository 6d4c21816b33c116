// Every op: gradient checked against central differences in f64 and f32 against f64, for every case
// of the op-case table (tests/op_cases.hpp); every error path asserted by its message.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>

#include "tapegrad/graph/gradcheck.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/ops/ops.hpp"
#include "op_cases.hpp"
#include "reference_loss.hpp"

using namespace tapegrad;

namespace {

std::mt19937_64 rng(20261130);

Tensor random(Shape s, DType t = DType::f64, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(v, s, t);
}

Tensor ids(std::vector<int32_t> v) { return Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size())}); }

constexpr double kTol = 1e-7;

}  // namespace

TEST_CASE("every case of the op-case table passes the f64 gradient check, and f32 follows f64") {
  for (const testing::OpCase& c : testing::op_cases()) {
    CAPTURE(c.op);
    CAPTURE(c.label);
    Graph g;
    const testing::Built built = testing::build_case(g, c, false, DType::f64, 11);
    const Tensor r = random(built.out.shape());  // loss = sum(y * R): every output cell has its own weight
    auto loss = [&](Graph& gr) {
      Var y = c.build(built.inputs);
      return y.shape().ndim() == 0 ? y : ops::sum(ops::mul(y, gr.input(r)));
    };
    const GradcheckResult check = gradcheck(g, loss);
    CAPTURE(check.str());
    CHECK(check.max_error() < kTol);

    // f32: the same values rounded, the same graph; results within f32's reach of f64's
    Graph g32;
    const testing::Built b32 = testing::build_case(g32, c, false, DType::f32, 11);
    const std::vector<double> y64 = built.out.value().to_doubles(), y32 = b32.out.value().to_doubles();
    REQUIRE(y64.size() == y32.size());
    for (size_t i = 0; i < y64.size(); ++i) CHECK(y32[i] == doctest::Approx(y64[i]).epsilon(1e-5));
  }
}

TEST_CASE("every op of the derivatives table has a case in the op-case table") {
  std::set<std::string> covered;
  for (const testing::OpCase& c : testing::op_cases()) covered.insert(c.op);
  for (const ops::OpInfo& op : ops::op_table()) {
    CAPTURE(op.name);
    CHECK((covered.count(op.name) || testing::checked_elsewhere(op.name)));
  }
}

TEST_CASE("docs/ops.md holds the derivatives table as op_table() gives it") {
  const char* root = std::getenv("TAPEGRAD_SOURCE_ROOT");
  REQUIRE_MESSAGE(root != nullptr, "TAPEGRAD_SOURCE_ROOT is not set; run the tests with meson test");
  std::ifstream in(std::string(root) + "/docs/ops.md");
  REQUIRE(in.good());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string table = ops::op_table_markdown();
  CHECK_MESSAGE(text.find(table) != std::string::npos,
                "docs/ops.md's table is out of date; paste this in its place:\n" << table);
}

TEST_CASE("relu keeps NaN and passes its gradient, as PyTorch does") {
  Graph g;
  Var x = g.parameter(Tensor::from_doubles({std::nan(""), -1, 2}, Shape{3}, DType::f64));
  Var y = ops::relu(x);
  CHECK(std::isnan(y.value().to_doubles()[0]));
  g.backward(ops::sum(y));
  CHECK(x.grad().to_doubles() == std::vector<double>{1, 0, 1});
}

TEST_CASE("sigmoid, silu and gelu at known points (PyTorch's values)") {
  Graph g;
  Var x = g.input(Tensor::from_doubles({-30, -1, 0, 0.5, 30}, Shape{5}, DType::f64));
  const std::vector<double> s = ops::sigmoid(x).value().to_doubles();
  CHECK(s[0] == doctest::Approx(9.357622968839299e-14).epsilon(1e-14));  // no overflow on either side
  CHECK(s[1] == doctest::Approx(0.2689414213699951).epsilon(1e-15));
  CHECK(s[2] == 0.5);
  CHECK(s[4] == doctest::Approx(0.9999999999999065).epsilon(1e-15));
  const std::vector<double> si = ops::silu(x).value().to_doubles();
  CHECK(si[1] == doctest::Approx(-0.2689414213699951).epsilon(1e-15));
  CHECK(si[3] == doctest::Approx(0.3112296656009273).epsilon(1e-15));
  const std::vector<double> ge = ops::gelu(x, ops::Gelu::tanh).value().to_doubles();  // torch.nn.functional.gelu(x, approximate='tanh')
  CHECK(ge[1] == doctest::Approx(-0.15880800939172324).epsilon(1e-14));
  CHECK(ge[3] == doctest::Approx(0.34571400982514394).epsilon(1e-14));
  CHECK(ge[4] == 30.0);
}

TEST_CASE("f32 forward and backward agree with f64") {
  auto run = [](DType dt, std::vector<double>* grad) {
    std::mt19937_64 local(7);
    std::uniform_real_distribution<double> u(-1, 1);
    auto make = [&](Shape s) {
      std::vector<double> v(static_cast<size_t>(s.numel()));
      for (double& x : v) x = u(local);
      return Tensor::from_doubles(v, s, dt);
    };
    Graph g;
    Var e = g.parameter(make({5, 3})), w = g.parameter(make({3, 5})), b = g.parameter(make({5}));
    Var h = ops::relu(ops::add_row(ops::matmul(ops::gather(e, g.input(ids({0, 1, 4}))), w), b));
    Var y = ops::sub(ops::softmax(h), ops::scale(ops::exp(h), 0.1));
    Var loss = ops::add(ops::cross_entropy(h, g.input(ids({2, 2, 0}))), ops::mean(ops::mul(y, y)));
    g.backward(loss);
    *grad = e.grad().to_doubles();
    std::vector<double> w_grad = w.grad().to_doubles();
    grad->insert(grad->end(), w_grad.begin(), w_grad.end());
    return loss.value().item();
  };
  std::vector<double> g64, g32;
  double l64 = run(DType::f64, &g64), l32 = run(DType::f32, &g32);
  CHECK(std::fabs(l64 - l32) < 1e-6);
  REQUIRE(g64.size() == g32.size());
  for (size_t i = 0; i < g64.size(); ++i) CHECK(std::fabs(g64[i] - g32[i]) < 1e-6);
}

TEST_CASE("shape errors name the op and both shapes") {
  Graph g;
  Var a = g.parameter(random({3, 2}));
  Var b = g.parameter(random({3, 2}));
  Var v = g.parameter(random({3}));
  CHECK_THROWS_WITH_AS(ops::matmul(a, b), "[matmul] cannot multiply (3, 2) by (3, 2): inner sizes 2 and 3 differ", Error);
  CHECK_THROWS_WITH_AS(ops::matmul(a, v), "[matmul] cannot multiply (3, 2) by (3,): inner sizes 2 and 3 differ", Error);
  CHECK_THROWS_WITH_AS(ops::add(a, ops::transpose(b)),
                       "[add] cannot broadcast shapes (3, 2) and (2, 3): axis 0 has sizes 3 and 2", Error);
  CHECK_THROWS_WITH_AS(ops::where(g.input(ops::causal_mask(3)), a, b),
                       "[where] cannot broadcast shapes (3, 3) and (3, 2): axis 1 has sizes 3 and 2", Error);
  CHECK_THROWS_WITH_AS(ops::add_row(a, v),
                       "[add_row] cannot add a bias of shape (3,) to each row of (3, 2): needs x (n, m) and bias (m,)", Error);
  CHECK_THROWS_WITH_AS(ops::reshape(a, Shape{4, 2}),
                       "[reshape] cannot reshape (3, 2) (6 elements) to (4, 2) (8 elements)", Error);
  CHECK_THROWS_WITH_AS(ops::softmax(a, 2), "[softmax] axis 2 is out of range for a tensor of 2 dimensions", Error);
  CHECK_THROWS_WITH_AS(ops::sum(a, {0, -2}), "[sum_axes] axis -2 is given twice", Error);
  CHECK_THROWS_WITH_AS(ops::permute(a, {0}), "[permute] 1 axes given for a tensor of 2 dimensions (3, 2)", Error);
  CHECK_THROWS_WITH_AS(ops::concat({a, v}, 0),
                       "[concat] tensor 1 has shape (3,), which does not match (3, 2) outside axis 0", Error);
  CHECK_THROWS_WITH_AS(ops::split(a, {1, 1}, 0), "[split] sizes adding up to 2 do not split axis 0 of (3, 2)", Error);
  CHECK_THROWS_WITH_AS(ops::squeeze(a, 1), "[squeeze] axis 1 of (3, 2) has size 2, not 1", Error);
  CHECK_THROWS_WITH_AS(ops::reshape(a, {-1, 4}),
                       "[reshape] cannot infer the -1 extent: 6 elements of (3, 2) do not split into parts of 4", Error);
  CHECK_THROWS_WITH_AS(ops::broadcast_to(a, Shape{3, 3}),
                       "[broadcast_to] cannot broadcast shapes (3, 2) and (3, 3): axis 1 has sizes 2 and 3", Error);
  CHECK_THROWS_WITH_AS(ops::where(ops::to(a, DType::f32), a, b),
                       "[where] the condition must be a u8 mask (from eq, lt, ... or causal_mask), got f32", Error);
  CHECK_THROWS_WITH_AS(ops::transpose(v), "[transpose] input must have 2 dimensions, got shape (3,)", Error);
  Var f32 = g.parameter(random({3, 2}, DType::f32));
  CHECK_THROWS_WITH_AS(ops::mul(a, f32), "[mul] dtypes differ: f64 and f32", Error);
}

TEST_CASE("index errors name the op, the index and its position") {
  Graph g;
  Var e = g.parameter(random({4, 2}));
  CHECK_THROWS_WITH_AS(ops::gather(e, g.input(ids({0, 1, 7}))),
                       "[gather] index 7 at position 2 is out of range for a table of 4 rows (shape (4, 2))", Error);
  CHECK_THROWS_WITH_AS(ops::gather(e, g.input(ids({-1}))),
                       "[gather] index -1 at position 0 is out of range for a table of 4 rows (shape (4, 2))", Error);
  CHECK_THROWS_WITH_AS(ops::gather(e, g.input(random({2}))), "[gather] ids must be i32 or i64 indices, got f64", Error);
  Var z = g.parameter(random({2, 3}));
  CHECK_THROWS_WITH_AS(ops::cross_entropy(z, g.input(ids({0, 3}))),
                       "[cross_entropy] target 3 at position 1 is out of range for 3 classes (logits (2, 3))", Error);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(z, g.input(ids({0}))),
                       "[cross_entropy] logits (2, 3) and targets (1,) do not match: targets need the logits' shape "
                       "without its last axis (classes)",
                       Error);
  CHECK_THROWS_WITH_AS(ops::index_select(e, 0, g.input(ids({1, 4}))),
                       "[index_select] index 4 is out of range for axis 0 of size 4 (x (4, 2))", Error);
  CHECK_THROWS_WITH_AS(ops::gather(e, 1, g.input(Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 0, 1, 0, 0, 0}, Shape{4, 2}))),
                       "[gather] index 2 is out of range for axis 1 of size 2 (x (4, 2))", Error);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(g.parameter(random({0, 3})), g.input(ids({}))),
                       "[cross_entropy] empty batch: logits (0, 3)", Error);
}

TEST_CASE("the tiny step's f64 cross-entropy is the reference's arithmetic") {
  // -log(exp(v - max) / fsum(exp(row - max))) exactly, then fsum(losses) / B
  Graph g;
  std::vector<double> row = {0.1108, -0.1029, 0.2104, 0.1718};
  Var z = g.input(Tensor::from_doubles(row, Shape{1, 4}, DType::f64));
  double loss = tiny::reference_cross_entropy(z, g.input(ids({2}))).value().item();
  double top = 0.2104, total = 0;
  std::vector<double> e;
  for (double v : row) e.push_back(std::exp(v - top));
  total = ((e[0] + e[1]) + e[2]) + e[3];  // 4 terms of similar size: fsum equals this here
  CHECK(loss == -std::log(e[2] / total));
}

TEST_CASE("to casts and carries the gradient back") {
  Graph g;
  Var x = g.parameter(Tensor::from_doubles({0.25, -1.5, 3.0}, Shape{3}, DType::f32), "x");
  Var y = ops::to(x, DType::f64);
  CHECK(y.dtype() == DType::f64);
  CHECK(y.value().to_doubles() == std::vector<double>{0.25, -1.5, 3.0});
  // loss = sum(y * w) in f64: dx = w, cast back to f32
  Var w = g.input(Tensor::from_doubles({2.0, -1.0, 0.5}, Shape{3}, DType::f64));
  g.backward(ops::sum(ops::mul(y, w)));
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(x.grad().to_doubles() == std::vector<double>{2.0, -1.0, 0.5});
  CHECK(ops::to(x, DType::f32).id() == x.id());  // the same dtype: x itself
  Var m = ops::to(ops::gt(x, g.input(Tensor::scalar(0.0, DType::f32))), DType::i64);
  CHECK(m.value().to_doubles() == std::vector<double>{1, 0, 1});
  CHECK(!m.requires_grad());
}

TEST_CASE("cross_entropy is log-sum-exp stable in every dtype (PyTorch's values)") {
  // logits (0, -gap), target 1: loss = gap + log1p(exp(-gap)), finite for any gap
  for (const DType dt : {DType::f64, DType::f32}) {
    for (const double gap : {1.0, 30.0, 720.0, 740.0, 745.0, 746.0, 1e4}) {
      CAPTURE(gap);
      Graph g;
      Var z = g.parameter(Tensor::from_doubles({0.0, -gap}, Shape{1, 2}, dt));
      Var loss = ops::cross_entropy(z, g.input(ids({1})));
      const double want = gap + std::log1p(std::exp(-gap));
      CHECK(loss.value().item() == doctest::Approx(want).epsilon(dt == DType::f64 ? 1e-15 : 1e-7));
      g.backward(loss);  // dz = softmax - onehot: (1, -1) in the limit
      const std::vector<double> dz = z.grad().to_doubles();
      CHECK(dz[0] == doctest::Approx(1.0 / (1.0 + std::exp(-gap))));
      CHECK(dz[1] == doctest::Approx(-1.0 / (1.0 + std::exp(-gap))));
    }
  }
}

TEST_CASE("cross_entropy's ignore_index counts for nothing, as in PyTorch") {
  Graph g;
  Var z = g.parameter(Tensor::from_doubles({1, 2, 3, 0, 0, 0, 3, 1, 2}, Shape{3, 3}, DType::f64));
  Var t = g.input(ids({2, -100, 0}));
  // torch.nn.functional.cross_entropy(z, t): mean over rows 0 and 2
  Var loss = ops::cross_entropy(z, t);
  CHECK(loss.value().item() == doctest::Approx(0.4076059644443804).epsilon(1e-14));
  g.backward(loss);
  const std::vector<double> dz = z.grad().to_doubles();
  CHECK(dz[3] == 0.0);
  CHECK(dz[4] == 0.0);
  CHECK(dz[5] == 0.0);
  CHECK(dz[0] == doctest::Approx(0.04501528658519022));  // softmax(1, 2, 3)[0] / 2
  g.clear();
  t = g.input(ids({2, -100, 0}));
  CHECK(ops::cross_entropy(z, t, ops::Reduction::none).value().to_doubles()[1] == 0.0);
  // every target ignored: the mean is 0 / 0
  CHECK(std::isnan(ops::cross_entropy(z, g.input(ids({-100, -100, -100}))).value().item()));
}

TEST_CASE("relu and the other ops keep NaN") {
  Graph g;
  Var x = g.parameter(Tensor::from_doubles({NAN, 1.0}, Shape{2}, DType::f64));
  for (Var y : {ops::relu(x), ops::abs(x), ops::clamp(x, 0, 0.5), ops::maximum(x, x), ops::max(x, 0), ops::sqrt(x)})
    CHECK(std::isnan(y.value().to_doubles()[0]));
  Var y = ops::relu(x);
  g.backward(ops::sum(y));
  CHECK(std::isnan(x.grad().to_doubles()[0]) == false);  // relu passes dy (1) where y is NaN, as PyTorch
  CHECK(x.grad().to_doubles()[0] == 1.0);
}

// ---- matrix products of the N-d ops

namespace {

std::vector<double> steps(int64_t n, double scale, double offset) {  // i * scale + offset, as torch.arange computes it
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i) * scale + offset;
  return v;
}

void check_near(const std::vector<double>& have, const std::vector<double>& want) {
  REQUIRE(have.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(have[i] == doctest::Approx(want[i]).epsilon(1e-14));
}

}  // namespace

TEST_CASE("matmul over a broadcast batch, and linear: PyTorch's values and gradients") {
  // a (2, 1, 2, 3) @ b (3, 3, 2) -> (2, 3, 2, 2); loss = sum(y * r). torch.matmul and autograd, f64.
  Graph g;
  Var a = g.parameter(Tensor::from_doubles(steps(12, 0.25, -1.0), Shape{2, 1, 2, 3}, DType::f64));
  Var b = g.parameter(Tensor::from_doubles(steps(18, 0.1, -0.7), Shape{3, 3, 2}, DType::f64));
  Var y = ops::matmul(a, b);
  CHECK(y.shape() == Shape{2, 3, 2, 2});
  check_near(y.value().to_doubles(),
             {1.2249999999999999, 0.9999999999999999, 0.1, 0.1, -0.12500000000000022, -0.3500000000000002,
              0.09999999999999998, 0.1, -1.4750000000000005, -1.7000000000000002, 0.09999999999999998,
              0.10000000000000003, -1.025, -0.7999999999999998, -2.15, -1.6999999999999997, 0.3250000000000002,
              0.5500000000000003, 0.5500000000000005, 1.0000000000000004, 1.6750000000000003, 1.9000000000000004,
              3.250000000000001, 3.7000000000000006});
  g.backward(ops::sum(ops::mul(y, g.input(Tensor::from_doubles(steps(24, 0.5, -3), Shape{2, 3, 2, 2}, DType::f64)))));
  check_near(a.grad().to_doubles(), {5.1, 4.199999999999999, 3.3, 4.800000000000001, 5.1, 5.4, 3.300000000000005,
                                     9.600000000000003, 15.900000000000004, 3.0000000000000027, 10.500000000000004,
                                     18.000000000000004});
  check_near(b.grad().to_doubles(), {10.0, 10.25, 10.5, 11.25, 11.0, 12.25, 11.0, 11.25, 13.5, 14.25, 16.0, 17.25, 12.0,
                                     12.25, 16.5, 17.25, 21.0, 22.25});

  // torch.nn.functional.linear(x (2, 4), W (3, 4), b (3,)); loss = sum(z * r)
  Graph h;
  Var x = h.parameter(Tensor::from_doubles(steps(8, 0.3, -1), Shape{2, 4}, DType::f64));
  Var w = h.parameter(Tensor::from_doubles(steps(12, 0.2, -1.1), Shape{3, 4}, DType::f64));
  Var bias = h.parameter(Tensor::from_doubles({0.5, -0.25, 1.0}, Shape{3}, DType::f64));
  Var z = ops::linear(x, w, bias);
  check_near(z.value().to_doubles(), {2.5600000000000005, 0.050000000000000044, -0.45999999999999996, -1.28,
                                      0.0500000000000001, 3.38});
  h.backward(ops::sum(ops::mul(z, h.input(Tensor::from_doubles({1, 2, 3, -1, 0.5, 2}, Shape{2, 3}, DType::f64)))));
  check_near(x.grad().to_doubles(), {-0.20000000000000018, 0.9999999999999996, 2.1999999999999997, 3.4000000000000004,
                                     1.9500000000000002, 2.25, 2.55, 2.85});
  check_near(w.grad().to_doubles(), {-1.2, -1.2, -1.1999999999999997, -1.2000000000000002, -1.9, -1.15,
                                     -0.40000000000000013, 0.34999999999999987, -2.6, -1.0999999999999996,
                                     0.39999999999999947, 1.9});
  check_near(bias.grad().to_doubles(), {0.0, 2.5, 5.0});
}

TEST_CASE("matmul's 1-D sides and linear's leading axes give torch's shapes") {
  Graph g;
  Var v = g.parameter(random({4})), m = g.parameter(random({4, 3})), batch = g.parameter(random({2, 5, 4}));
  CHECK(ops::matmul(v, v).shape() == Shape{});
  CHECK(ops::matmul(v, m).shape() == Shape{3});
  CHECK(ops::matmul(batch, v).shape() == Shape{2, 5});
  CHECK(ops::matmul(v, g.parameter(random({2, 5, 4, 3}))).shape() == Shape{2, 5, 3});
  CHECK(ops::matmul(g.parameter(random({3, 1, 2, 4})), ops::reshape(batch, Shape{2, 4, 5})).shape() == Shape{3, 2, 2, 5});
  CHECK(ops::linear(batch, g.parameter(random({6, 4}))).shape() == Shape{2, 5, 6});
  CHECK(ops::linear(v, g.parameter(random({6, 4}))).shape() == Shape{6});
  // the dot product's value: the sum of the products
  const std::vector<double> x = v.value().to_doubles();
  CHECK(ops::matmul(v, v).value().item() ==
        doctest::Approx(x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3]).epsilon(1e-15));
}

TEST_CASE("matmul and linear errors name the op, both shapes and the axis") {
  Graph g;
  Var batch = g.parameter(random({2, 3, 5, 4})), w = g.parameter(random({4, 4, 2})), s = g.parameter(random({}));
  CHECK_THROWS_WITH_AS(ops::matmul(batch, w),
                       "[matmul] cannot broadcast batch shapes (2, 3) and (4,) of (2, 3, 5, 4) and (4, 4, 2): batch axis "
                       "-1 has sizes 3 and 4",
                       Error);
  CHECK_THROWS_WITH_AS(ops::matmul(batch, g.parameter(random({3, 5, 2}))),
                       "[matmul] cannot multiply (2, 3, 5, 4) by (3, 5, 2): inner sizes 4 and 5 differ", Error);
  CHECK_THROWS_WITH_AS(ops::matmul(g.parameter(random({3})), g.parameter(random({4}))),
                       "[matmul] cannot multiply (3,) by (4,): inner sizes 3 and 4 differ", Error);
  CHECK_THROWS_WITH_AS(ops::matmul(s, w),
                       "[matmul] cannot multiply () by (4, 4, 2): both must have at least 1 dimension (scale multiplies "
                       "by a number)",
                       Error);
  Var x = g.parameter(random({2, 5})), W = g.parameter(random({3, 4}));
  CHECK_THROWS_WITH_AS(ops::linear(x, W),
                       "[linear] cannot apply a weight of shape (3, 4) to x of shape (2, 5): x's last axis has 5 "
                       "features, the weight (out, in) takes 4",
                       Error);
  CHECK_THROWS_WITH_AS(ops::linear(g.parameter(random({2, 4})), W, g.parameter(random({4}))),
                       "[linear] a bias of shape (4,) does not fit the weight (3, 4): it needs (3,)", Error);
  CHECK_THROWS_WITH_AS(ops::linear(x, g.parameter(random({5}))), "[linear] the weight must be 2-D (out, in), got shape (5,)",
                       Error);
  CHECK_THROWS_WITH_AS(ops::linear(x, g.parameter(random({3, 5}, DType::f32))), "[linear] dtypes differ: f64 and f32",
                       Error);
}

// An MLP of 16,576 parameters, checked cell by cell: two forward passes a parameter. With BLAS
// products this takes seconds; with correctly rounded ones it took minutes.
TEST_CASE("an MLP's f64 gradient check, 16,576 parameters through linear and matmul") {
  Graph g;
  Var x = g.input(random({2, 16, 64}));               // (B, T, in)
  Var w1 = g.parameter(random({128, 64}, DType::f64, -0.2, 0.2));   // (hidden, in)
  Var b1 = g.parameter(random({128}, DType::f64, -0.1, 0.1));
  Var w2 = g.parameter(random({128, 64}, DType::f64, -0.2, 0.2));   // (hidden, out), used by matmul
  Var b2 = g.parameter(random({64}, DType::f64, -0.1, 0.1));
  Var targets = g.input(ids({3, 17, 0, 63, 8, 8, 41, 22, 5, 9, 60, 1, 2, 30, 31, 32, 10, 11, 12, 13, 14, 15, 16, 18,
                             19, 20, 21, 23, 24, 25, 26, 27}));
  auto loss = [&](Graph&) {
    Var h = ops::tanh(ops::linear(x, w1, b1));                                  // (2, 16, 128)
    Var logits = ops::add_row(ops::reshape(ops::matmul(h, w2), Shape{32, 64}), b2);  // (32, 64)
    return ops::cross_entropy(logits, targets);
  };
  const GradcheckResult check = gradcheck(g, loss);
  CAPTURE(check.str());
  CHECK(check.max_error() < 1e-8);
}

TEST_CASE("the N-d ops' other refusals name the op and what is wrong") {
  Graph g;
  Var a = g.parameter(random({3, 2}));
  Var v = g.parameter(random({3}));
  Var empty = g.parameter(random({0, 3}));
  Var scalar = g.parameter(random({}));
  CHECK_THROWS_WITH_AS(ops::clamp(a, NAN, 1.0), "[clamp] bounds must not be NaN", Error);
  CHECK_THROWS_WITH_AS(ops::slice(scalar, 0, 0, 1), "[slice] cannot slice a 0-d tensor", Error);
  CHECK_THROWS_WITH_AS(ops::concat({}, 0), "[concat] needs at least one tensor", Error);
  CHECK_THROWS_WITH_AS(ops::stack({a, v}), "[stack] tensor 1 has shape (3,), tensor 0 (3, 2); stack needs equal shapes",
                       Error);
  CHECK_THROWS_WITH_AS(ops::gather(a, 1, g.input(ids({0, 1, 0}))),
                       "[gather] ids (3,) must have the shape of x (3, 2) outside axis 1", Error);
  CHECK_THROWS_WITH_AS(ops::reshape(a, {-1, -1}), "[reshape] only one extent may be -1", Error);
  CHECK_THROWS_WITH_AS(ops::reshape(a, {-2, 3}), "[reshape] extent -2 is negative (only -1, to infer one, is allowed)",
                       Error);
  CHECK_THROWS_WITH_AS(ops::causal_mask(-1), "[causal_mask] size -1 is negative", Error);
  CHECK_THROWS_WITH_AS(ops::tril(v), "[tril] needs at least 2 dimensions, got shape (3,)", Error);
  CHECK_THROWS_WITH_AS(ops::max(empty, 0), "[max] reduces over an empty axis of (0, 3)", Error);
  CHECK_THROWS_WITH_AS(ops::argmax(empty, 0), "[argmax] reduces over an empty axis of (0, 3)", Error);
  CHECK_THROWS_WITH_AS(ops::mean(empty, {0}), "[mean_axes] reduces over an empty axis of (0, 3)", Error);
  CHECK_THROWS_WITH_AS(ops::logsumexp(empty, 0), "[logsumexp] reduces over an empty axis of (0, 3)", Error);
  CHECK_THROWS_WITH_AS(ops::log_softmax(g.parameter(random({2, 0}))), "[log_softmax] rows of length 0 in (2, 0)", Error);
  CHECK_THROWS_WITH_AS(ops::index_select(a, 0, g.input(Tensor::from_vector(std::vector<int32_t>{0, 1, 0, 1}, Shape{2, 2}))),
                       "[index_select] ids must have 1 dimension, got shape (2, 2)", Error);
  CHECK_THROWS_WITH_AS(ops::unsqueeze(a, 5), "[unsqueeze] axis 5 is out of range for a tensor of 3 dimensions", Error);
  CHECK_THROWS_WITH_AS(ops::transpose(a, 0, 2), "[transpose] axis 2 is out of range for a tensor of 2 dimensions", Error);
}

TEST_CASE("flatten joins axes start_dim..end_dim as torch.flatten does, sharing storage") {
  Graph g;
  Var x = g.parameter(random({2, 3, 4, 5}));
  CHECK(ops::flatten(x).shape() == Shape{120});
  CHECK(ops::flatten(x, 1).shape() == Shape{2, 60});
  CHECK(ops::flatten(x, 1, 2).shape() == Shape{2, 12, 5});
  CHECK(ops::flatten(x, -3, -2).shape() == Shape{2, 12, 5});
  CHECK(ops::flatten(x, 2, 2).shape() == Shape{2, 3, 4, 5});
  CHECK(ops::flatten(x, 1, 2).value().raw_data() == x.value().raw_data());
  CHECK(ops::flatten(g.parameter(random({}))).shape() == Shape{1});
  CHECK_THROWS_WITH_AS(ops::flatten(x, 2, 1), "[flatten] start_dim 2 comes after end_dim 1 in a tensor of shape (2, 3, 4, 5)",
                       Error);
  CHECK_THROWS_WITH_AS(ops::flatten(x, 4), "[flatten] axis 4 is out of range for a tensor of 4 dimensions", Error);
  // the gradient is reshape's: dy reshaped back
  Var y = ops::sum(ops::flatten(x, 1, 2) * 2.0);
  g.backward(y);
  CHECK(x.grad().shape() == x.shape());
  CHECK(x.grad().to_doubles() == std::vector<double>(120, 2.0));
}

TEST_CASE("Var::item gives a one-element value as a double, and names a wrong shape") {
  Graph g;
  Var w = g.parameter(Tensor::from_doubles({1.5, -2}, Shape{2}, DType::f32));
  Var loss = ops::sum(ops::square(w));
  CHECK(loss.item() == 6.25);
  CHECK_THROWS_WITH_AS(w.item(), "[item] needs a tensor of one element, got shape (2,)", Error);
}

TEST_CASE("integer tensors add, subtract, multiply and compare, as PyTorch's do, and take no gradient") {
  Graph g;
  auto i32 = [&](std::vector<int32_t> v, Shape s) { return g.input(Tensor::from_vector(v, s)); };
  auto i64 = [&](std::vector<int64_t> v, Shape s) { return g.input(Tensor::from_vector(v, s)); };
  Var ids = i32({3, 0, 2, 1, 4, 4}, Shape{2, 3});
  Var offsets = i32({0, 10, 20}, Shape{3, 1, 1});
  Var shifted = ids + offsets;  // (3, 2, 3): plane p holds ids + 10 p, broadcast as nanoGPT's planes are
  CHECK(shifted.dtype() == DType::i32);
  CHECK(shifted.shape() == Shape{3, 2, 3});
  CHECK(shifted.value().to_doubles() == std::vector<double>{3, 0, 2, 1, 4, 4, 13, 10, 12, 11, 14, 14, 23, 20, 22, 21, 24, 24});
  CHECK((ids - 1.0).value().to_doubles() == std::vector<double>{2, -1, 1, 0, 3, 3});
  CHECK((10.0 - ids).value().to_doubles() == std::vector<double>{7, 10, 8, 9, 6, 6});
  CHECK((ids * 3.0).value().to_doubles() == std::vector<double>{9, 0, 6, 3, 12, 12});
  CHECK(ops::mul(ids, ids).value().to_doubles() == std::vector<double>{9, 0, 4, 1, 16, 16});
  // i32 with i64 gives i64 (PyTorch's promotion); wrapping on overflow, as PyTorch's integers do
  Var wide = ids + i64({int64_t{1} << 40}, Shape{1});
  CHECK(wide.dtype() == DType::i64);
  CHECK(wide.value().data<int64_t>()[0] == (int64_t{1} << 40) + 3);
  Var big = i32({2147483647}, Shape{1});
  CHECK((big + 1.0).value().data<int32_t>()[0] == -2147483647 - 1);
  // comparisons: a u8 mask
  CHECK(ops::lt(ids, i32({2}, Shape{1})).value().to_doubles() == std::vector<double>{0, 1, 0, 1, 0, 0});
  CHECK(ops::eq(ids, i64({4, 4, 4}, Shape{3})).value().to_doubles() == std::vector<double>{0, 0, 0, 0, 1, 1});
  CHECK(g.nodes().empty());  // nothing to differentiate

  CHECK_THROWS_WITH_AS(ops::div(ids, ids),
                       "[div] integer tensors take add, sub, mul and the comparisons, got i32 and i32; cast with "
                       "ops::to(x, DType::f32) first",
                       Error);
  CHECK_THROWS_WITH_AS(ids * 0.5,
                       "[mul] a i32 tensor and the scalar 0.5: integer tensors take whole numbers they can hold; cast "
                       "with ops::to(x, DType::f32) for a float result",
                       Error);
  CHECK_THROWS_WITH_AS(ids + 4294967296.0,
                       "[add] a i32 tensor and the scalar 4294967296: integer tensors take whole numbers they can "
                       "hold; cast with ops::to(x, DType::f32) for a float result",
                       Error);
  Var w = g.parameter(random({2, 3}));
  CHECK_THROWS_WITH_AS(ops::add(w, ids),
                       "[add] a f64 tensor and a i32 one: integer tensors mix with integer tensors only; cast one "
                       "with ops::to",
                       Error);
  CHECK_THROWS_WITH_AS(ops::lt(w, ids), "[lt] dtypes differ: f64 and i32", Error);
}
