// Every op: gradient checked against central differences in f64, f32 forward against f64, and
// every error path asserted by its message.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "tapegrad/graph/gradcheck.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/ops/ops.hpp"

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

// loss = sum(f(params) * R) with a fixed random R, so every output cell has its own weight.
double check_op(Graph& g, const std::function<Var(Graph&)>& f) {
  Tensor r;
  auto loss = [&](Graph& gr) {
    Var y = f(gr);
    if (!r.defined()) r = random(y.shape());
    if (y.shape().ndim() == 0) return y;
    return ops::sum(ops::mul(y, gr.input(r)));
  };
  return gradcheck(g, loss, 1e-6);
}

constexpr double kTol = 1e-7;

}  // namespace

TEST_CASE("gradient check of every op in f64") {
  SUBCASE("gather with repeated ids") {
    Graph g;
    Var e = g.parameter(random({5, 3}));
    CHECK(check_op(g, [&](Graph& gr) { return ops::gather(e, gr.input(ids({4, 0, 4, 2, 4}))); }) < kTol);
  }
  SUBCASE("matmul") {
    Graph g;
    Var a = g.parameter(random({3, 4})), b = g.parameter(random({4, 2}));
    CHECK(check_op(g, [&](Graph&) { return ops::matmul(a, b); }) < kTol);
  }
  SUBCASE("add_row") {
    Graph g;
    Var x = g.parameter(random({3, 4})), b = g.parameter(random({4}));
    CHECK(check_op(g, [&](Graph&) { return ops::add_row(x, b); }) < kTol);
  }
  SUBCASE("add, sub, mul, scale, neg") {
    Graph g;
    Var a = g.parameter(random({2, 3})), b = g.parameter(random({2, 3}));
    CHECK(check_op(g, [&](Graph&) { return ops::add(a, b); }) < kTol);
    CHECK(check_op(g, [&](Graph&) { return ops::sub(a, b); }) < kTol);
    CHECK(check_op(g, [&](Graph&) { return ops::mul(a, b); }) < kTol);
    CHECK(check_op(g, [&](Graph&) { return ops::scale(a, -2.5); }) < kTol);
    CHECK(check_op(g, [&](Graph&) { return -a; }) < kTol);
  }
  SUBCASE("exp, log, tanh, relu") {
    Graph g;
    Var a = g.parameter(random({7}));
    Var p = g.parameter(random({7}, DType::f64, 0.5, 2.0));
    Var r = g.parameter(Tensor::from_doubles({-0.9, -0.3, 0.2, 0.7, 1.1}, Shape{5}, DType::f64));  // away from 0
    CHECK(check_op(g, [&](Graph&) { return ops::exp(a); }) < kTol);
    CHECK(check_op(g, [&](Graph&) { return ops::log(p); }) < kTol);
    CHECK(check_op(g, [&](Graph&) { return ops::tanh(a); }) < kTol);
    CHECK(check_op(g, [&](Graph&) { return ops::relu(r); }) < kTol);
  }
  SUBCASE("softmax") {
    Graph g;
    Var a = g.parameter(random({3, 5}));
    CHECK(check_op(g, [&](Graph&) { return ops::softmax(a); }) < kTol);
  }
  SUBCASE("cross_entropy: mean, sum and none") {
    Graph g;
    Var z = g.parameter(random({4, 5}, DType::f64, -2, 2));
    Tensor t = ids({1, 4, 1, 0});
    CHECK(check_op(g, [&](Graph& gr) { return ops::cross_entropy(z, gr.input(t)); }) < kTol);
    CHECK(check_op(g, [&](Graph& gr) { return ops::cross_entropy(z, gr.input(t), ops::Reduction::sum); }) < kTol);
    CHECK(check_op(g, [&](Graph& gr) { return ops::cross_entropy(z, gr.input(t), ops::Reduction::none); }) < kTol);
  }
  SUBCASE("sum, mean, transpose, reshape") {
    Graph g;
    Var a = g.parameter(random({2, 3}));
    CHECK(check_op(g, [&](Graph&) { return ops::sum(ops::exp(a)); }) < kTol);
    CHECK(check_op(g, [&](Graph&) { return ops::mean(ops::exp(a)); }) < kTol);
    CHECK(check_op(g, [&](Graph&) { return ops::transpose(a); }) < kTol);
    CHECK(check_op(g, [&](Graph&) { return ops::reshape(a, Shape{3, 2}); }) < kTol);
  }
  SUBCASE("a composite: a two-layer MLP with shared weights") {
    Graph g;
    Var e = g.parameter(random({6, 4})), w = g.parameter(random({4, 4})), b = g.parameter(random({4}));
    Tensor x = ids({0, 3, 3, 5}), t = ids({1, 2, 3, 0});
    auto loss = [&](Graph& gr) {
      Var h = ops::tanh(ops::add_row(ops::matmul(ops::gather(e, gr.input(x)), w), b));
      return ops::cross_entropy(ops::matmul(h, w), gr.input(t));  // w used twice
    };
    CHECK(gradcheck(g, loss, 1e-6) < kTol);
  }
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
                       "[add] shapes (3, 2) and (2, 3) differ (elementwise ops need equal shapes; add_row broadcasts a "
                       "bias row)",
                       Error);
  CHECK_THROWS_WITH_AS(ops::add_row(a, v),
                       "[add_row] cannot add a bias of shape (3,) to each row of (3, 2): needs x (n, m) and bias (m,)", Error);
  CHECK_THROWS_WITH_AS(ops::reshape(a, Shape{4, 2}),
                       "[reshape] cannot reshape (3, 2) (6 elements) to (4, 2) (8 elements)", Error);
  CHECK_THROWS_WITH_AS(ops::softmax(v), "[softmax] input must have 2 dimensions, got shape (3,)", Error);
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
                       "[cross_entropy] logits (2, 3) have 2 rows but targets (1,) have 1", Error);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(g.parameter(random({0, 3})), g.input(ids({}))),
                       "[cross_entropy] empty batch: logits (0, 3)", Error);
}

TEST_CASE("the f64 cross-entropy is the reference's arithmetic") {
  // -log(exp(v - max) / fsum(exp(row - max))) exactly, then fsum(losses) / B
  Graph g;
  std::vector<double> row = {0.1108, -0.1029, 0.2104, 0.1718};
  Var z = g.input(Tensor::from_doubles(row, Shape{1, 4}, DType::f64));
  double loss = ops::cross_entropy(z, g.input(ids({2}))).value().item();
  double top = 0.2104, total = 0;
  std::vector<double> e;
  for (double v : row) e.push_back(std::exp(v - top));
  total = ((e[0] + e[1]) + e[2]) + e[3];  // 4 terms of similar size: fsum equals this here
  CHECK(loss == -std::log(e[2] / total));
}
