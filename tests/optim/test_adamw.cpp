// Tests for AdamW (src/optim/adamw.*) and its CPU kernel.
//
// Rule: updates are checked bit for bit against tests/fixtures/gen_bob_adamw.py, which emulates
// the fp32 arithmetic of docs/bob.md, "Learner", in Python from the contract alone; the kernel's
// vector path is checked against the reference loop written out here; refusals by their full
// message.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "golden.hpp"
#include "messages.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/autocast.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/ops/fused/embedding_cross_entropy.hpp"
#include "tapegrad/optim/adamw.hpp"
#include "bits.hpp"

using namespace tapegrad;

namespace {

optim::AdamWConfig bob_config() { return {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.01f}; }

using testing::values;

// Gives each parameter exactly the gradient G beside it: backward of sum over k of sum(W_k * G_k)
// is 1 * G_k for W_k, bit for bit.
void set_gradients(Graph& g, const std::vector<std::pair<Var, std::vector<float>>>& grads) {
  g.clear();
  g.zero_grad();
  Var loss;
  for (const auto& [w, grad] : grads) {
    Var term = ops::sum(ops::mul(w, g.input(Tensor::from_vector(grad, w.shape()))));
    loss = loss.defined() ? ops::add(loss, term) : term;
  }
  g.backward(loss);
}

std::vector<float> slice(const std::vector<float>& v, size_t begin, size_t end) {
  return std::vector<float>(v.begin() + static_cast<long>(begin), v.begin() + static_cast<long>(end));
}

std::vector<float> joined(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// A golden key with its step: key("adamw_w", 3) is "adamw_w 3".
std::string key(const char* name, int t) { return std::string(name) + " " + std::to_string(t); }

}  // namespace

TEST_CASE("the bias corrections match the Python values for t = 1 ... 6, 10, 100, 1000") {
  Graph g;
  optim::AdamW adamw({g.parameter(Tensor::zeros(Shape{1}, DType::f32))}, bob_config());
  for (int t : {1, 2, 3, 4, 5, 6, 10, 100, 1000}) {
    const std::vector<std::string> want = bob_golden::words(key("adamw_scalars", t));
    const kernels::AdamWScalars s = adamw.scalars(static_cast<uint64_t>(t));
    CAPTURE(t);
    CHECK(std::bit_cast<uint32_t>(s.step_size) == bob_golden::hex(want[0]));
    CHECK(std::bit_cast<uint32_t>(s.bc2_sqrt) == bob_golden::hex(want[1]));
    CHECK(s.lr == 0.1f);
    CHECK(s.weight_decay == 0.01f);
  }
}

TEST_CASE("six AdamW updates match the Python fp32 emulation bit for bit: weights, m and v") {
  Graph g;
  Var w = g.parameter(Tensor::from_vector(bob_golden::floats("adamw_w0"), Shape{3, 16}), "w");
  optim::AdamW adamw({w}, bob_config());
  for (int t = 1; t <= 6; ++t) {
    CAPTURE(t);
    set_gradients(g, {{w, bob_golden::floats(key("adamw_grad", t))}});
    adamw.step();
    CHECK(adamw.step_count() == static_cast<uint64_t>(t));
    CHECK_SAME_BITS(values(w.value()), bob_golden::floats(key("adamw_w", t)));
    CHECK_SAME_BITS(values(adamw.m(0)), bob_golden::floats(key("adamw_m", t)));
    CHECK_SAME_BITS(values(adamw.v(0)), bob_golden::floats(key("adamw_v", t)));
  }
}

TEST_CASE("parameters of any shapes, updated together, each get the same update") {
  // The golden's 48 values split into a (4, 5) and a (28,) parameter: odd sizes, vector tails.
  const std::vector<float> w0 = bob_golden::floats("adamw_w0");
  Graph g;
  Var a = g.parameter(Tensor::from_vector(slice(w0, 0, 20), Shape{4, 5}), "a");
  Var b = g.parameter(Tensor::from_vector(slice(w0, 20, 48), Shape{28}), "b");
  optim::AdamW adamw({a, b}, bob_config());
  for (int t = 1; t <= 6; ++t) {
    CAPTURE(t);
    const std::vector<float> grad = bob_golden::floats(key("adamw_grad", t));
    set_gradients(g, {{a, slice(grad, 0, 20)}, {b, slice(grad, 20, 48)}});
    adamw.step();
    CHECK_SAME_BITS(joined(values(a.value()), values(b.value())), bob_golden::floats(key("adamw_w", t)));
    CHECK_SAME_BITS(joined(values(adamw.v(0)), values(adamw.v(1))), bob_golden::floats(key("adamw_v", t)));
  }
}

TEST_CASE("a parameter without a gradient is left alone, moments included; the step count still counts") {
  Graph g;
  Var used = g.parameter(Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, Shape{2}));
  Var unused = g.parameter(Tensor::from_vector(std::vector<float>{3.0f, 4.0f}, Shape{2}));
  optim::AdamW adamw({used, unused}, bob_config());
  set_gradients(g, {{used, {0.5f, -0.5f}}});
  adamw.step();
  CHECK(adamw.step_count() == 1);
  CHECK(values(unused.value()) == std::vector<float>{3.0f, 4.0f});
  CHECK(values(adamw.m(1)) == std::vector<float>{0.0f, 0.0f});
  CHECK(values(used.value()) != std::vector<float>{1.0f, 2.0f});
}

TEST_CASE("the state accessors resume an update: moments and step count written into a new optimizer") {
  const std::vector<float> w0 = bob_golden::floats("adamw_w0");
  Graph g;
  Var w = g.parameter(Tensor::from_vector(w0, Shape{48}));
  optim::AdamW first({w}, bob_config());
  for (int t = 1; t <= 3; ++t) {
    set_gradients(g, {{w, bob_golden::floats(key("adamw_grad", t))}});
    first.step();
  }
  optim::AdamW second({w}, bob_config());  // fresh moments, step 0 ...
  second.set_moments(0, first.m(0), first.v(0));  // ... then the first optimizer's state
  second.set_step_count(first.step_count());
  for (int t = 4; t <= 6; ++t) {
    set_gradients(g, {{w, bob_golden::floats(key("adamw_grad", t))}});
    second.step();
  }
  CHECK(second.step_count() == 6);
  CHECK_SAME_BITS(values(w.value()), bob_golden::floats("adamw_w 6"));
  CHECK_SAME_BITS(values(second.m(0)), bob_golden::floats("adamw_m 6"));
}

TEST_CASE("hyperparameters out of range and parameters neither f32 nor f64 are refused by name") {
  Graph g;
  Var w = g.parameter(Tensor::zeros(Shape{2}, DType::f32));
  auto with = [](auto change) {
    optim::AdamWConfig c = bob_config();
    change(c);
    return c;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH_AS(optim::AdamW({w}, with([](auto& c) { c.lr = 0; })),
                       "[adamw] lr must be a positive finite number, got 0", Error);
  CHECK_THROWS_WITH_AS(optim::AdamW({w}, with([&](auto& c) { c.lr = nan; })),
                       "[adamw] lr must be a positive finite number, got nan", Error);
  CHECK_THROWS_WITH_AS(optim::AdamW({w}, with([](auto& c) { c.beta1 = 1.0f; })), "[adamw] beta1 must be in [0, 1), got 1",
                       Error);
  CHECK_THROWS_WITH_AS(optim::AdamW({w}, with([](auto& c) { c.beta2 = -0.5f; })),
                       "[adamw] beta2 must be in [0, 1), got -0.5", Error);
  CHECK_THROWS_WITH_AS(optim::AdamW({w}, with([](auto& c) { c.eps = -1e-8; })),
                       "[adamw] eps must be a finite number >= 0, got -1e-08", Error);
  CHECK_THROWS_WITH_AS(optim::AdamW({w}, with([&](auto& c) { c.weight_decay = inf; })),
                       "[adamw] weight_decay must be a finite number >= 0, got inf", Error);
  Var half = g.parameter(Tensor::zeros(Shape{2}, DType::bf16), "table");
  CHECK_THROWS_WITH_AS(optim::AdamW({w, half}, bob_config()),
                       "[adamw] parameter 1 ('table') is bf16; AdamW updates f32 and f64 parameters", Error);
}

// The step schedule is for captured CUDA graphs (tests/cuda replays it); on the CPU its errors.
TEST_CASE("a step schedule: slots asked for before they exist, and CPU parameters, are refused by message") {
  Graph g;
  Var w = g.parameter(Tensor::zeros(Shape{2}, DType::f32));
  optim::AdamW adamw({w}, bob_config());
  CHECK_THROWS_WITH_AS(adamw.scheduled_step(0),
                       "[adamw] scheduled_step(0) needs a step schedule with slot 0; call write_schedule first", Error);
  adamw.write_schedule(0, 2);
  CHECK_THROWS_WITH_AS(adamw.write_schedule(0, 3),
                       "[adamw] the step schedule has 2 slots (a captured graph reads them, so it does not grow); 3 "
                       "were asked for",
                       Error);
  set_gradients(g, {{w, {1.0f, -1.0f}}});
  CHECK_THROWS_WITH_AS(adamw.scheduled_step(1),
                       "[adamw] device step scalars are for CUDA graphs; a CPU parameter takes its scalars as arguments",
                       Error);
  CHECK(values(w.value()) == std::vector<float>{0.0f, 0.0f});  // refused before anything moved
}

TEST_CASE("the CPU kernel gives the reference loop's bits on every kind of element, vector path included") {
  // Random elements, blocks of all-zero gradient and moments (the vector path's zero fast path),
  // and specials: -0, subnormals, huge values, infinities and a NaN in any one input.
  const int64_t n = 16 * 64 + 7;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> w(n), g(n), m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    w[i] = uniform(rng);
    g[i] = uniform(rng) * 0.1f;
    m[i] = uniform(rng) * 0.01f;
    v[i] = std::fabs(uniform(rng)) * 1e-4f;
    if ((i / 16) % 3 == 0) g[i] = m[i] = v[i] = 0.0f;  // whole zero blocks
  }
  const float specials[] = {-0.0f, 1e-40f, -1e-45f, 3e38f, -3e38f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (size_t k = 0; k < std::size(specials); ++k) {
    w[16 * 4 + k] = specials[k];   // in an all-zero block
    w[16 * 5 + k] = specials[k];   // in an ordinary block
    g[16 * 7 + k] = specials[k];
    m[16 * 8 + k] = specials[k];
    v[16 * 10 + k] = std::fabs(specials[k]);
  }
  g[16 * 3 + 5] = -0.0f;  // a -0 gradient in a zero block: not all bits zero, so the full update

  optim::AdamWConfig c = bob_config();
  Graph graph;
  optim::AdamW adamw({graph.parameter(Tensor::zeros(Shape{1}, DType::f32))}, c);
  for (uint64_t t : {1, 7}) {
    const kernels::AdamWScalars s = adamw.scalars(t);
    // The reference: the per-element fp32 arithmetic of docs/bob.md, "Learner", in its order.
    std::vector<float> want_w = w, want_m = m, want_v = v;
    const float decay = 1.0f - s.lr * s.weight_decay;
    for (int64_t i = 0; i < n; ++i) {
      float wi = want_w[i] * decay;
      const float mi = s.beta1 * want_m[i] + (1.0f - s.beta1) * g[i];
      const float vi = s.beta2 * want_v[i] + (1.0f - s.beta2) * g[i] * g[i];
      wi = wi - s.step_size * (mi / (std::sqrt(vi) / s.bc2_sqrt + s.eps));
      want_w[i] = wi, want_m[i] = mi, want_v[i] = vi;
    }
    Tensor tw = Tensor::from_vector(w, Shape{n}), tg = Tensor::from_vector(g, Shape{n});
    Tensor tm = Tensor::from_vector(m, Shape{n}), tv = Tensor::from_vector(v, Shape{n});
    kernels::adamw_step(tw, tg, tm, tv, s);
    CAPTURE(t);
    CHECK_SAME_BITS(values(tw), want_w);
    CHECK_SAME_BITS(values(tm), want_m);
    CHECK_SAME_BITS(values(tv), want_v);
  }
}

TEST_CASE("zero-block tracking and row-sparse gradients give the plain kernel's bits, set_moments included") {
  // A (40, 300) table (its 256-element blocks straddle rows) fed row-sparse gradients from random ids
  // (embedding_cross_entropy), and a bias with a dense gradient, against kernels::adamw_step with no
  // flags on copies and the gradient made dense.
  const int64_t rows = 40, d = 300;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> w0(static_cast<size_t>(rows * d));
  for (float& x : w0) x = uniform(rng);
  Graph g;
  Var table = g.parameter(Tensor::from_vector(w0, Shape{rows, d}));
  Var bias = g.parameter(Tensor::from_vector(std::vector<float>{0.5f, -0.25f, 1.0f}, Shape{3}));
  optim::AdamW adamw({table, bias}, bob_config());
  Tensor want_w = table.value().clone(), want_m = Tensor::zeros(Shape{rows, d}, DType::f32);
  Tensor want_v = Tensor::zeros(Shape{rows, d}, DType::f32);
  Tensor want_b = bias.value().clone(), want_bm = Tensor::zeros(Shape{3}, DType::f32);
  Tensor want_bv = Tensor::zeros(Shape{3}, DType::f32);
  for (uint64_t t = 1; t <= 12; ++t) {
    CAPTURE(t);
    if (t == 6) {  // moments written from outside, nonzero in rows no gradient has touched
      std::vector<float> m(static_cast<size_t>(rows * d)), v(m.size());
      for (size_t k = 0; k < m.size(); ++k) {
        m[k] = (k / d) % 5 == 0 ? 1e-3f * uniform(rng) : 0.0f;
        v[k] = (k / d) % 5 == 0 ? 1e-6f : 0.0f;
      }
      const Tensor tm = Tensor::from_vector(m, Shape{rows, d}), tv = Tensor::from_vector(v, Shape{rows, d});
      adamw.set_moments(0, tm, tv);
      want_m.copy_from(tm);
      want_v.copy_from(tv);
    }
    std::vector<int32_t> ids(t % 3 == 0 ? 1 : 9);  // few rows, often repeated
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % (t < 4 ? 6 : rows));
    std::vector<int32_t> targets(ids.size());
    for (int32_t& c : targets) c = static_cast<int32_t>(rng() % d);
    g.clear();
    g.zero_grad();
    const Shape n{static_cast<int64_t>(ids.size())};
    Var loss = ops::add(ops::embedding_cross_entropy(table, g.input(Tensor::from_vector(ids, n)),
                                                     g.input(Tensor::from_vector(targets, n))),
                        ops::sum(ops::mul(bias, bias)));
    g.backward(loss);
    REQUIRE(table.sparse_grad() != nullptr);
    const kernels::AdamWScalars s = adamw.scalars(t);
    kernels::adamw_step(want_w, table.sparse_grad()->to_dense(table.shape()), want_m, want_v, s);
    kernels::adamw_step(want_b, bias.grad(), want_bm, want_bv, s);
    adamw.step();
    CHECK_SAME_BITS(values(table.value()), values(want_w));
    CHECK_SAME_BITS(values(adamw.m(0)), values(want_m));
    CHECK_SAME_BITS(values(adamw.v(0)), values(want_v));
    CHECK_SAME_BITS(values(bias.value()), values(want_b));
  }
}

// f64 too: a row-sparse gradient gives the update of its dense form (the rows' width was once
// read before it was set, and every row past the first few read memory it did not own).
TEST_CASE("a row-sparse f64 gradient gives its dense form's update, bit for bit") {
  Graph g;
  std::vector<double> w0(6 * 5);
  for (size_t i = 0; i < w0.size(); ++i) w0[i] = std::sin(0.7 * static_cast<double>(i));
  Var table = g.parameter(Tensor::from_doubles(w0, Shape{6, 5}, DType::f64));
  optim::AdamW adamw({table}, {.lr = 0.01, .weight_decay = 0.1});
  Tensor want_w = table.value().clone(), want_m = Tensor::zeros(Shape{6, 5}, DType::f64);
  Tensor want_v = Tensor::zeros(Shape{6, 5}, DType::f64);
  for (uint64_t t = 1; t <= 3; ++t) {
    CAPTURE(t);
    g.clear();
    g.zero_grad();
    Var ids = g.input(Tensor::from_vector(std::vector<int32_t>{1, 4, 1, static_cast<int32_t>(t)}, Shape{4}));
    Var targets = g.input(Tensor::from_vector(std::vector<int32_t>{0, 3, 2, 4}, Shape{4}));
    g.backward(ops::embedding_cross_entropy(table, ids, targets));
    REQUIRE(table.sparse_grad() != nullptr);
    kernels::adamw_step(want_w, table.sparse_grad()->to_dense(table.shape()), want_m, want_v, adamw.scalars(t));
    adamw.step();
    CHECK(table.value().to_doubles() == want_w.to_doubles());
    CHECK(adamw.m(0).to_doubles() == want_m.to_doubles());
    CHECK(adamw.v(0).to_doubles() == want_v.to_doubles());
  }
}

// PyTorch's semantics (torch 1.13, zero_grad(set_to_none=True)): each parameter counts its own
// steps, so b, without a gradient at the second step, gets its second update with the second
// step's bias corrections. Values from torch.optim.AdamW(lr=0.1, betas=(0.9, 0.95), eps=1e-8,
// weight_decay=0.01) on loss = p^2 + b^2 (b left out of the second step).
TEST_CASE("AdamW counts each parameter's own steps, in f64 and f32, as PyTorch does") {
  for (const DType dtype : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(dtype));
    Graph g;
    Var p = g.parameter(Tensor::from_doubles({1.0}, Shape{1}, dtype), "p");
    Var b = g.parameter(Tensor::from_doubles({1.0}, Shape{1}, dtype), "b");
    optim::AdamW adamw({p, b}, {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.01});
    for (int step = 0; step < 3; ++step) {
      g.clear();
      g.zero_grad();
      Var loss = ops::sum(ops::mul(p, p));
      if (step != 1) loss = ops::add(loss, ops::sum(ops::mul(b, b)));
      g.backward(loss);
      adamw.step();
    }
    CHECK(adamw.step_count() == 3);
    CHECK(adamw.step_count(0) == 3);
    CHECK(adamw.step_count(1) == 2);
    const double eps = dtype == DType::f64 ? 1e-14 : 1e-6;
    CHECK(p.value().item() == doctest::Approx(0.6984092626515581).epsilon(eps));
    CHECK(b.value().item() == doctest::Approx(0.7983859750498153).epsilon(eps));  // not 0.8133: its own step 2
  }
}

// ---- bf16 weight copies (Note [bf16 weight copies] in src/ops/autocast.hpp)

namespace {

Tensor uniform_f32(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(v, s, DType::f32);
}

Tensor bf16_of(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::bf16, t.device());
  kernels::cast(t, h);
  return h;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  std::memcpy(out.data(), t.raw_data(), t.nbytes());
  return out;
}

}  // namespace

TEST_CASE("bf16 weight copies: AdamW writes the cast's bits, products take them while current, training is unchanged") {
  // a two-layer MLP under autocast, trained 4 steps by AdamW with and without the copies
  struct Run {
    std::vector<Tensor> weights;
    std::vector<uint32_t> losses;
  };
  auto train = [](bool copies) {
    Graph g;
    Var w1 = g.parameter(uniform_f32(Shape{16, 12}, 1), "w1"), w2 = g.parameter(uniform_f32(Shape{4, 16}, 2), "w2");
    optim::AdamW adamw({w1, w2}, {.lr = 0.05});
    if (copies) {
      adamw.keep_bf16_copies();
      CHECK(adamw.keeps_bf16_copies());
    }
    Run run;
    for (int step = 0; step < 4; ++step) {
      CAPTURE(step);
      if (copies)  // current since the last write: the cast's bits
        for (const Var& w : {w1, w2}) {
          const Tensor kept = ops::current_bf16_copy(w.value());
          REQUIRE(kept.defined());
          CHECK(bytes_of(kept) == bytes_of(bf16_of(w.value())));
        }
      g.clear();
      g.zero_grad();
      Var y;
      {
        ops::Autocast autocast;
        Var x = g.input(uniform_f32(Shape{8, 12}, 10 + static_cast<uint64_t>(step)));
        y = ops::to(ops::linear(ops::gelu(ops::linear(x, w1)), w2), DType::f32);
      }
      Var loss = ops::sum(ops::mul(y, y));
      run.losses.push_back(std::bit_cast<uint32_t>(static_cast<float>(loss.value().item())));
      g.backward(loss);
      adamw.step();
    }
    run.weights = {w1.value().clone(), w2.value().clone()};
    if (copies) {  // any other write leaves a copy stale: products cast again
      Tensor value = w1.value();  // a handle to the same bytes
      value.copy_from(uniform_f32(Shape{16, 12}, 3));
      CHECK_FALSE(ops::current_bf16_copy(w1.value()).defined());
      CHECK(ops::current_bf16_copy(w2.value()).defined());
      adamw.refresh_bf16_copies();  // the cast of the written weight, current again
      const Tensor kept = ops::current_bf16_copy(w1.value());
      REQUIRE(kept.defined());
      CHECK(bytes_of(kept) == bytes_of(bf16_of(w1.value())));
      value.copy_from(run.weights[0]);  // back to the trained weight, for the comparison below
    }
    return run;
  };
  const Run with = train(true), without = train(false);
  CHECK(with.losses == without.losses);
  for (size_t k = 0; k < 2; ++k) CHECK(bytes_of(with.weights[k]) == bytes_of(without.weights[k]));
}

TEST_CASE("bf16 weight copies: none for f64 parameters, dropped with their owner, refused by name") {
  Graph g;
  Var w64 = g.parameter(Tensor::zeros(Shape{2, 3}, DType::f64));
  optim::AdamW f64_adamw({w64}, bob_config());
  f64_adamw.keep_bf16_copies();
  CHECK_FALSE(ops::current_bf16_copy(w64.value()).defined());

  const Tensor w = uniform_f32(Shape{2, 3}, 4);
  {
    ops::Bf16Copies mine;
    mine.keep(w, bf16_of(w));
    CHECK(ops::current_bf16_copy(w).defined());
    CHECK(ops::current_bf16_copy(w.reshape(Shape{6})).shape() == Shape{6});
    // a product takes a current copy as it is (so a copy must hold the cast's bits): registered
    // zeros give a zero product until the weight is written
    Tensor weight = w.clone();
    mine.keep(weight, Tensor::zeros(Shape{2, 3}, DType::bf16));
    auto product = [&] {
      Graph pg;
      ops::Autocast autocast;
      return ops::to(ops::linear(pg.input(uniform_f32(Shape{4, 3}, 6)), pg.input(weight)), DType::f32).value();
    };
    CHECK(product().to_doubles() == std::vector<double>(8, 0.0));
    weight.copy_from(uniform_f32(Shape{2, 3}, 7));
    CHECK(product().to_doubles() != std::vector<double>(8, 0.0));
    ops::Bf16Copies theirs;
    CHECK(testing::message_of([&] { theirs.keep(w, bf16_of(w)); }) ==
          "[autocast] the weight (2, 3) already has a bf16 copy kept by another owner");
    CHECK(testing::message_of([&] { mine.keep(w, Tensor::zeros(Shape{3, 2}, DType::bf16)); }) ==
          "[autocast] a bf16 copy of a weight must be bf16 of the weight's shape on its device, and the weight f32: "
          "got a copy (3, 2) bf16 on cpu of a weight (2, 3) f32 on cpu");
  }
  CHECK_FALSE(ops::current_bf16_copy(w).defined());  // dropped with its owner

  Tensor m = Tensor::zeros(Shape{2, 3}, DType::f32), v = Tensor::zeros(Shape{2, 3}, DType::f32);
  Tensor p = w.clone(), grad = uniform_f32(Shape{2, 3}, 5), wrong = Tensor::zeros(Shape{2, 3}, DType::f32);
  kernels::AdamWSlot slot{&p, &grad, &m, &v};
  slot.copy = &wrong;
  CHECK(testing::message_of([&] {
          kernels::adamw_step_many({slot}, optim::AdamW({g.parameter(w.clone())}, bob_config()).scalars(1));
        }) == "[adamw] a weight's bf16 copy must be bf16 of its shape, the weight f32: got (2, 3) f32 for (2, 3) f32");
  // a captured update (its step schedule) would never write copies kept after it
  optim::AdamW scheduled({g.parameter(w.clone())}, bob_config());
  scheduled.write_schedule(0, 1);
  CHECK(testing::message_of([&] { scheduled.keep_bf16_copies(); }) ==
        "[adamw] keep_bf16_copies after a scheduled (captured) update: the captured kernels would never write the "
        "copies; call it before capturing");
  CHECK_FALSE(scheduled.keeps_bf16_copies());
}
