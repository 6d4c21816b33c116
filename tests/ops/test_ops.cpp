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
    CHECK(gradcheck(g, loss, 1e-6) < kTol);

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
  CHECK_THROWS_WITH_AS(ops::matmul(a, v), "[matmul] cannot multiply (3, 2) by (3,): both must be 2-D", Error);
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
