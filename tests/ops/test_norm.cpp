// layer_norm, rms_norm and dropout beyond the op-case table (which checks their gradients, f32
// against f64, thread counts and CUDA): values and gradients from PyTorch at known points, the f64
// arithmetic, the inputs that want no gradient, dropout's mask (Philox's known answers, seeds and
// offsets, thread counts, the fraction dropped) and every error by its message.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>

#include "bits.hpp"
#include "messages.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/philox.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/tensor/parallel.hpp"

using namespace tapegrad;
using tapegrad::testing::message_of;

namespace {

Tensor f64(std::vector<double> v, Shape s) { return Tensor::from_doubles(v, s, DType::f64); }

Tensor random(Shape s, DType t, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(v, s, t);
}

void check_values(const Tensor& t, const std::vector<double>& want, double eps = 1e-13) {
  const std::vector<double> have = t.to_doubles();
  REQUIRE(have.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(have[i] == doctest::Approx(want[i]).epsilon(eps));
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// The inputs of the PyTorch values below (tests/ops/test_norm.cpp's script: torch 1.13, f64).
const std::vector<double> kX = {0.5, -1.2, 2.0, 0.3, 1.5, 1.4, -0.7, 0.0, -0.25, 0.75, 0.125, -2.5};
const std::vector<double> kW = {1.0, 0.5, -2.0, 1.5}, kB = {0.1, 0.0, -0.3, 0.2};
const std::vector<double> kR = {1.0, -2.0, 0.5, 3.0, 0.25, 1.0, -1.0, 2.0, -0.5, 0.0, 1.5, 1.0};  // loss = sum(y * R)

}  // namespace

// The values come from
//   y = torch.nn.functional.layer_norm(x, (4,), w, b, 1e-5); (y * R).sum().backward()
// and, torch 1.13 having no rms_norm, from its definition in PyTorch 2.4:
//   y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
TEST_CASE("layer_norm and rms_norm: values and gradients as PyTorch computes them") {
  Graph g;
  Var x = g.parameter(f64(kX, {3, 4})), w = g.parameter(f64(kW, {4})), b = g.parameter(f64(kB, {4}));
  Var r = g.input(f64(kR, {3, 4}));
  SUBCASE("layer_norm with weight and bias") {
    Var y = ops::layer_norm(x, w, b, 1e-5);
    check_values(y.value(), {0.18821587502648193, -0.7057270002118557, -3.122908000847423, 0.06767618746027698,
                             1.1170408540895096, 0.4549919610400437, 2.3764233002355515, -0.683219689077732,
                             0.27843386605795184, 0.49706576973286576, -1.2686409871717383, -2.285328848664329});
    g.backward(ops::sum(ops::mul(y, r)));
    check_values(x.grad(), {0.11627671459719513, -1.750157589772019, -1.5579377237210548, 3.191818598895879,
                            -0.25500040096131404, -0.09433708847992461, -0.7350424767240704, 1.0843799661653093,
                            0.14654899677421962, 1.2243361044459706, -1.6414683351322816, 0.27058323391209166});
    check_values(w.grad(), {0.2532591555198834, 3.7328919229275104, 2.770419390708435, -3.099159776292641});
    check_values(b.grad(), {0.75, -1.0, 1.0, 6.0});
  }
  SUBCASE("layer_norm without an affine transform") {
    Var y = ops::layer_norm(x);
    check_values(y.value(), {0.08821587502648193, -1.4114540004237115, 1.4114540004237115, -0.08821587502648202,
                             1.0170408540895095, 0.9099839220800874, -1.3382116501177757, -0.5888131260518213,
                             0.1784338660579518, 0.9941315394657315, 0.48432049358586915, -1.6568858991095525},
                 1e-12);
    g.backward(ops::sum(ops::mul(y, r)));
    check_values(x.grad(), {0.2655920767963017, -1.2721874465970604, -1.153749116631194, 2.1603444864319528,
                            -0.6951757297280341, 0.14571155688985132, -1.1982608558069692, 1.7477250286451522,
                            -0.778596661566205, -0.20114319930083138, 0.9164004198349107, 0.0633394410321258});
  }
  SUBCASE("rms_norm with a weight") {
    Var y = ops::rms_norm(x, w, 1e-6);
    check_values(y.value(), {0.41594502147826345, -0.49913402577391613, -3.3275601718261076, 0.3743505193304371,
                             1.3837962231939964, 0.6457715708238649, 1.2915431416477299, 0.0, -0.19047613519060824,
                             0.28571420278591236, -0.19047613519060824, -2.8571420278591235});
    g.backward(ops::sum(ops::mul(y, r)));
    check_values(x.grad(), {0.7563291484394683, -0.6505438961155863, -1.1341336210247612, 3.698168656594136,
                            0.3263206591393315, 0.5505741659867532, 1.800407251797618, 2.767592446387993,
                            -0.49152338671361995, 0.33171334899721044, -2.230428064121097, 0.0371456478196146});
    check_values(w.grad(), {0.8571321448720668, 3.288079244743394, 1.620518715173348, -1.156060313245208});
  }
}

TEST_CASE("layer_norm and rms_norm equal their composites of mean, var and rsqrt (f64, 3-D)") {
  // the fused nodes against the same functions made of recorded ops; the sums' orders differ, so
  // the two agree to rounding, not bit for bit
  const Tensor xv = random({3, 4, 9}, DType::f64, 21), wv = random({9}, DType::f64, 22), bv = random({9}, DType::f64, 23);
  const Tensor rv = random({3, 4, 9}, DType::f64, 24);
  for (bool rms : {false, true}) {
    CAPTURE(rms);
    std::vector<std::vector<double>> got[2];
    for (int fused = 0; fused < 2; ++fused) {
      Graph g;
      Var x = g.parameter(xv.clone()), w = g.parameter(wv.clone()), b = g.parameter(bv.clone());
      Var y;
      if (fused) {
        y = rms ? ops::rms_norm(x, w, 1e-6) : ops::layer_norm(x, w, b, 1e-5);
      } else if (rms) {
        y = ops::mul(ops::mul(x, ops::rsqrt(ops::mean(ops::square(x), {-1}, true) + 1e-6)), w);
      } else {
        Var mu = ops::mean(x, {-1}, true), var = ops::var(x, {-1}, true, 0);
        y = ops::add(ops::mul(ops::mul(ops::sub(x, mu), ops::rsqrt(var + 1e-5)), w), b);
      }
      g.backward(ops::sum(ops::mul(y, g.input(rv))));
      got[fused] = {y.value().to_doubles(), x.grad().to_doubles(), w.grad().to_doubles()};
      if (!rms) got[fused].push_back(b.grad().to_doubles());
    }
    for (size_t k = 0; k < got[0].size(); ++k)
      for (size_t i = 0; i < got[0][k].size(); ++i) {
        CAPTURE(k);
        CHECK(got[1][k][i] == doctest::Approx(got[0][k][i]).epsilon(1e-12));
      }
  }
}

TEST_CASE("the f64 layer_norm sums rows correctly rounded (math.fsum's mean and variance)") {
  // mean = fsum(x) / 8 = 0.5 exactly (a naive sum gives 0.375); Python computed
  //   ((v - m) * (1 / sqrt(fsum((v - m)**2 for v in x) / 8 + 1e-5)) for v in x)
  Graph g;
  Var x = g.input(f64({1e16, 1.0, -1e16, 3.0, 0.1, 0.2, 0.3, -0.6}, {1, 8}));
  const std::vector<double> y = ops::layer_norm(x).value().to_doubles();
  const std::vector<double> want = {2.0, 1e-16, -2.0, 5e-16, -8e-17, -6e-17, -4e-17, -2.2000000000000002e-16};
  for (size_t i = 0; i < want.size(); ++i) CHECK(y[i] == want[i]);
}

TEST_CASE("layer_norm and rms_norm give each input that wants one the gradient of the full case") {
  for (DType t : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(t));
    const Tensor xv = random({70, 48}, t, 1), wv = random({48}, t, 2), bv = random({48}, t, 3), rv = random({70, 48}, t, 4);
    auto run = [&](bool x_param, bool w_param, bool b_param, bool rms) {
      Graph g;
      auto make = [&](const Tensor& v, bool param) { return param ? g.parameter(v.clone()) : g.input(v.clone()); };
      Var x = make(xv, x_param), w = make(wv, w_param), b = make(bv, b_param);
      Var y = rms ? ops::rms_norm(x, w) : ops::layer_norm(x, w, b);
      g.backward(ops::sum(ops::mul(y, g.input(rv))));
      return std::vector<Tensor>{x_param ? x.grad() : Tensor(), w_param ? w.grad() : Tensor(),
                                 b_param && !rms ? b.grad() : Tensor()};
    };
    for (bool rms : {false, true}) {
      const std::vector<Tensor> all = run(true, true, true, rms);
      for (int only = 0; only < 3; ++only) {
        CAPTURE(rms);
        CAPTURE(only);
        if (rms && only == 2) continue;
        const std::vector<Tensor> one = run(only == 0, only == 1, only == 2, rms);
        CHECK(same_bytes(one[static_cast<size_t>(only)], all[static_cast<size_t>(only)]));
      }
    }
  }
}

// Note [adding into a gradient]: a residual stream h feeds a norm and, through an add, the rest;
// the norm's backward adds its dx into h's gradient as it writes it (free_activation_grads leaves
// that gradient h's alone), with the bits of the separate add a record's backward takes.
TEST_CASE("layer_norm and rms_norm add dx into a residual stream's gradient: the bits of a separate add") {
  for (DType t : {DType::f32, DType::f64})
    for (bool layer : {true, false}) {
      CAPTURE(dtype_name(t));
      CAPTURE(layer);
      auto run = [&](const BackwardOptions& options) {
        Graph g;
        Var x = g.parameter(random(Shape{6, 37}, t, 3)), w = g.parameter(random(Shape{37}, t, 4));
        Var b = g.parameter(random(Shape{37}, t, 5));
        Var h = x * 1.5;
        Var n = layer ? ops::layer_norm(h, w, b) : ops::rms_norm(h, w);
        Var y = h + n * 2.0;
        g.backward(ops::sum(ops::mul(y, g.input(random(Shape{6, 37}, t, 6)))), options);
        return std::vector<Tensor>{x.grad().clone(), w.grad().clone()};
      };
      const std::vector<Tensor> added = run({.free_activation_grads = true});
      BackwardRecord record;
      const std::vector<Tensor> apart = run({.record = &record, .free_activation_grads = true});
      CHECK(same_bytes(added[0], apart[0]));
      CHECK(same_bytes(added[1], apart[1]));
      bool two_arrive = false;  // the record saw the norm's dx arrive at h after the stream's gradient
      for (const GradEvent& e : record.events) two_arrive |= e.kind == GradEvent::Kind::added;
      CHECK(two_arrive);
    }
}

// ops::add_layer_norm and add_rms_norm record the add and the norm that `s = x + r; norm(s)`
// records, with the same values and gradients (bit for bit), whether one kernel made them (equal
// shapes with an f32 sum, an autocast bf16 r) or the two ops ran (f64 here, a broadcast r, bf16
// sums); a refusal is the add's or the norm's own.
TEST_CASE("add_layer_norm and add_rms_norm: the nodes, values and gradients of an add and a norm") {
  struct Case {
    DType x, r;
    Shape rs;
    bool autocast;
  };
  const Shape s{3, 5, 37};
  for (const Case& k : {Case{DType::f32, DType::f32, s, false}, Case{DType::f64, DType::f64, s, false},
                        Case{DType::f32, DType::bf16, s, true}, Case{DType::bf16, DType::f32, s, true},
                        Case{DType::bf16, DType::bf16, s, true}, Case{DType::f32, DType::f32, Shape{37}, false},
                        Case{DType::f32, DType::bf16, Shape{5, 1}, true}})
    for (bool layer : {true, false}) {
      CAPTURE(dtype_name(k.x));
      CAPTURE(dtype_name(k.r));
      CAPTURE(k.rs.str());
      CAPTURE(layer);
      const DType wide = k.x == DType::f64 ? DType::f64 : DType::f32;
      auto run = [&](bool fused) {
        Graph g;
        std::optional<ops::Autocast> scope;
        if (k.autocast) scope.emplace();
        Var x0 = g.parameter(random(s, wide, 3)), r0 = g.parameter(random(k.rs, wide, 4));
        Var w = g.parameter(random(Shape{37}, wide, 5)), b = g.parameter(random(Shape{37}, wide, 6));
        // bf16 operands as autocast makes them: a recorded cast of an f32 parameter
        Var x = ops::to(x0, k.x), r = ops::to(r0, k.r);
        Var sum, y;
        if (fused) {
          const ops::SumAndNorm o = layer ? ops::add_layer_norm(x, r, w, b) : ops::add_rms_norm(x, r, w);
          sum = o.sum;
          y = o.normed;
        } else {
          sum = x + r;
          y = layer ? ops::layer_norm(sum, w, b) : ops::rms_norm(sum, w);
        }
        std::vector<std::string> ops_recorded;
        for (const auto& node : g.nodes()) ops_recorded.push_back(node.op);
        const Var loss = ops::sum(ops::mul(ops::to(y, wide), g.input(random(s, wide, 7)))) +
                         ops::sum(ops::mul(ops::to(sum, wide), g.input(random(s, wide, 8))));
        g.backward(loss);
        return std::make_pair(ops_recorded, std::vector<Tensor>{sum.value().clone(), y.value().clone(), x0.grad().clone(),
                                                                r0.grad().clone(), w.grad().clone(), b.defined() && layer
                                                                                                         ? b.grad().clone()
                                                                                                         : Tensor()});
      };
      const auto [fused_ops, fused] = run(true);
      const auto [apart_ops, apart] = run(false);
      CHECK(fused_ops == apart_ops);
      for (size_t i = 0; i < fused.size(); ++i) {
        CAPTURE(i);
        if (fused[i].defined()) CHECK(same_bytes(fused[i], apart[i]));
      }
    }
}

TEST_CASE("add_layer_norm and add_rms_norm refuse what the add or the norm refuses, by its message") {
  Graph g;
  Var x = g.parameter(random({2, 3, 4}, DType::f32, 20)), r = g.parameter(random({2, 3, 4}, DType::f32, 21));
  Var w5 = g.parameter(random({5}, DType::f32, 22));
  CHECK(message_of([&] { ops::add_layer_norm(x, r, w5); }) ==
        "[layer_norm] weight (5,) does not match the last axis of x (2, 3, 4)");
  CHECK(message_of([&] { ops::add_rms_norm(x, g.parameter(random({2, 4}, DType::f32, 23))); }) ==
        message_of([&] { (void)(x + g.parameter(random({2, 4}, DType::f32, 23))); }));
  CHECK(message_of([&] { ops::add_layer_norm(x, g.parameter(random({2, 3, 4}, DType::f64, 24))); }) ==
        "[add] dtypes differ: f32 and f64");
  Graph other;
  CHECK(message_of([&] { ops::add_layer_norm(x, other.parameter(random({2, 3, 4}, DType::f32, 25))); }) ==
        "[add_layer_norm] inputs belong to different graphs");
}

TEST_CASE("f32 layer_norm of wide rows follows f64") {
  for (int64_t c : {768, 1000, 3}) {
    CAPTURE(c);
    const Tensor x64 = random({33, c}, DType::f64, 5, -3.0, 5.0), w64 = random({c}, DType::f64, 6),
                 dy64 = random({33, c}, DType::f64, 7);
    std::vector<std::vector<double>> results[2];
    for (DType t : {DType::f64, DType::f32}) {
      Graph g;
      Var x = g.parameter(Tensor::from_doubles(x64.to_doubles(), x64.shape(), t));
      Var w = g.parameter(Tensor::from_doubles(w64.to_doubles(), w64.shape(), t));
      Var y = ops::layer_norm(x, w, Var());
      g.backward(ops::sum(ops::mul(y, g.input(Tensor::from_doubles(dy64.to_doubles(), dy64.shape(), t)))));
      results[t == DType::f32].push_back(y.value().to_doubles());
      results[t == DType::f32].push_back(x.grad().to_doubles());
      results[t == DType::f32].push_back(w.grad().to_doubles());
    }
    for (size_t k = 0; k < 3; ++k) {
      double diff = 0, norm = 0;
      for (size_t i = 0; i < results[0][k].size(); ++i) {
        diff += (results[0][k][i] - results[1][k][i]) * (results[0][k][i] - results[1][k][i]);
        norm += results[0][k][i] * results[0][k][i];
      }
      CAPTURE(k);
      CHECK(std::sqrt(diff) <= 1e-6 * std::sqrt(norm));
    }
  }
}

TEST_CASE("Philox4x32-10 gives Random123's known answers") {
  struct Kat {
    uint32_t counter[4], key[2], want[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}, {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const kernels::PhiloxBlock r =
        kernels::philox4x32_10(k.counter[0], k.counter[1], k.counter[2], k.counter[3], k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) CHECK(r.w[i] == k.want[i]);
  }
  // a 64-bit counter and seed go into the low words, low half first
  const kernels::PhiloxBlock r = kernels::philox_block(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull);
  const kernels::PhiloxBlock s = kernels::philox4x32_10(0x243f6a88, 0x85a308d3, 0, 0, 0xa4093822, 0x299f31d0);
  for (int i = 0; i < 4; ++i) CHECK(r.w[i] == s.w[i]);
  CHECK(kernels::dropout_threshold(0.0) == 0);
  CHECK(kernels::dropout_threshold(1.0) == 4294967296ull);
  CHECK(kernels::dropout_threshold(0.5) == 2147483648ull);
  CHECK(kernels::dropout_threshold(std::ldexp(1.0, -33)) == 1);  // rounded up
}

namespace {

// The mask a dropout call draws: 1 where it keeps an element of ones, 0 where it drops it.
std::vector<double> mask_of(Graph& g, int64_t n, double p, Generator& gen, DType t = DType::f32) {
  Var x = g.input(Tensor::from_doubles(std::vector<double>(static_cast<size_t>(n), 1.0), Shape{n}, t));
  std::vector<double> m = ops::dropout(x, p, gen).value().to_doubles();
  for (double& v : m) v = v != 0.0 ? 1.0 : 0.0;
  return m;
}

}  // namespace

TEST_CASE("dropout: the same seed gives the same masks; the stream moves on call after call") {
  Graph g;
  Generator a(42), b(42), c(43);
  const std::vector<double> first = mask_of(g, 1001, 0.4, a);
  CHECK(a.offset() == 251);  // ceil(1001 / 4) counters
  CHECK(mask_of(g, 1001, 0.4, b) == first);
  CHECK(mask_of(g, 1001, 0.4, c) != first);
  CHECK(mask_of(g, 1001, 0.4, a) != first);  // the next counters
  a.manual_seed(42);
  CHECK(a.offset() == 0);
  CHECK(mask_of(g, 1001, 0.4, a) == first);
  // one call of 16 elements draws the masks of two calls of 8 (counters 0-1, then 2-3)
  Generator whole(9), halves(9);
  std::vector<double> two = mask_of(g, 8, 0.5, halves), second = mask_of(g, 8, 0.5, halves);
  two.insert(two.end(), second.begin(), second.end());
  CHECK(mask_of(g, 16, 0.5, whole) == two);
  // f64 and f32 drop the same elements
  Generator d64(5), d32(5);
  CHECK(mask_of(g, 999, 0.25, d64, DType::f64) == mask_of(g, 999, 0.25, d32, DType::f32));
}

TEST_CASE("dropout: the fraction dropped is p, and kept values are x / (1 - p)") {
  Graph g;
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    CAPTURE(p);
    Generator gen(2024);
    const int64_t n = 1000003;
    const Tensor xv = random({n}, DType::f32, 11, 0.5, 1.5);
    Var x = g.input(xv);
    const std::vector<double> y = ops::dropout(x, p, gen).value().to_doubles(), xs = xv.to_doubles();
    int64_t dropped = 0;
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    for (size_t i = 0; i < y.size(); ++i) {
      if (y[i] == 0.0) ++dropped;
      else if (y[i] != static_cast<double>(static_cast<float>(xs[i]) * scale)) FAIL("element " << i << " is " << y[i]);
    }
    const double fraction = static_cast<double>(dropped) / static_cast<double>(n);
    CHECK(std::fabs(fraction - p) < 5.0 * std::sqrt(p * (1 - p) / static_cast<double>(n)));  // five sigma
  }
}

TEST_CASE("dropout: the same bits for every thread count, forward and backward") {
  const int before = num_threads();
  std::vector<Tensor> want;
  for (int threads : {1, 2, 3, 4}) {
    set_num_threads(threads);
    for (DType t : {DType::f32, DType::f64}) {
      Graph g;
      Generator gen(77);
      Var x = g.parameter(random({300001}, t, 12));
      Var y = ops::dropout(x, 0.35, gen);
      g.backward(ops::sum(ops::mul(y, y)));
      const std::vector<Tensor> have{y.value().clone(), x.grad().clone()};
      for (size_t k = 0; k < have.size(); ++k) {
        CAPTURE(threads);
        if (threads == 1) want.push_back(have[k]);
        else CHECK(same_bytes(have[k], want[(t == DType::f64 ? 2 : 0) + k]));
      }
    }
  }
  set_num_threads(before);
}

TEST_CASE("dropout: the backward uses the forward's mask; eval mode, p = 0 and p = 1") {
  Graph g;
  Generator gen(3);
  Var x = g.parameter(random({4, 250}, DType::f64, 13));
  Var y = ops::dropout(x, 0.5, gen);
  g.backward(ops::sum(y));  // dx = mask / (1 - p) = y / x
  const std::vector<double> yv = y.value().to_doubles(), xv = x.value().to_doubles(), dx = x.grad().to_doubles();
  for (size_t i = 0; i < dx.size(); ++i) CHECK(dx[i] == (yv[i] == 0.0 ? 0.0 : 2.0));

  NoGrad no_tape(g);  // the tape was freed by backward()
  const uint64_t offset = gen.offset();
  CHECK(ops::dropout(x, 0.5, gen, false).id() == x.id());  // the identity: x itself
  CHECK(ops::dropout(x, 0.0, gen).id() == x.id());
  CHECK(gen.offset() == offset);  // and nothing taken from the stream
  const std::vector<double> zeros = ops::dropout(x, 1.0, gen).value().to_doubles();
  for (double v : zeros) CHECK(v == 0.0);
}

TEST_CASE("layer_norm, rms_norm and dropout errors name the op and the shapes") {
  Graph g;
  Var x = g.parameter(random({2, 3, 4}, DType::f64, 14));
  Var w5 = g.parameter(random({5}, DType::f64, 15)), w4 = g.parameter(random({4}, DType::f64, 16));
  Var w41 = g.parameter(random({4, 1}, DType::f64, 17)), w32 = g.parameter(random({4}, DType::f32, 18));
  CHECK(message_of([&] { ops::layer_norm(x, w5, w4); }) ==
        "[layer_norm] weight (5,) does not match the last axis of x (2, 3, 4)");
  CHECK(message_of([&] { ops::layer_norm(x, w4, w5); }) ==
        "[layer_norm] bias (5,) does not match the last axis of x (2, 3, 4)");
  CHECK(message_of([&] { ops::layer_norm(x, w41); }) ==
        "[layer_norm] weight (4, 1) does not match the last axis of x (2, 3, 4)");
  CHECK(message_of([&] { ops::rms_norm(x, w5); }) == "[rms_norm] weight (5,) does not match the last axis of x (2, 3, 4)");
  CHECK(message_of([&] { ops::layer_norm(x, w32); }) == "[layer_norm] dtypes differ: f64 and f32");
  CHECK(message_of([&] { ops::layer_norm(g.parameter(Tensor::scalar(1.0, DType::f64))); }) ==
        "[layer_norm] x must have at least 1 dimension, got shape ()");
  CHECK(message_of([&] { ops::rms_norm(g.parameter(Tensor::zeros({2, 0}, DType::f64))); }) ==
        "[rms_norm] the last axis of x (2, 0) is empty: nothing to normalise");
  CHECK(message_of([&] { ops::layer_norm(g.input(Tensor::zeros({2, 3}, DType::i32))); }) ==
        "[layer_norm] x must be f64 or f32, got i32");
  CHECK(message_of([&] { ops::layer_norm(x, w4, Var(), -1.0); }) == "[layer_norm] eps must be a finite number >= 0, got -1");
  CHECK(message_of([&] { ops::rms_norm(x, Var(), std::nan("")); }) == "[rms_norm] eps must be a finite number >= 0, got nan");
  Graph other;
  Var foreign = other.parameter(random({4}, DType::f64, 19));
  CHECK(message_of([&] { ops::layer_norm(x, foreign); }) == "[layer_norm] inputs belong to different graphs");

  Generator gen(1);
  CHECK(message_of([&] { ops::dropout(x, 1.5, gen); }) == "[dropout] p must be a probability in [0, 1], got 1.5");
  CHECK(message_of([&] { ops::dropout(x, -0.1, gen); }) == "[dropout] p must be a probability in [0, 1], got -0.10000000000000001");
  CHECK(message_of([&] { ops::dropout(x, std::nan(""), gen, false); }) == "[dropout] p must be a probability in [0, 1], got nan");
  CHECK(message_of([&] { ops::dropout(g.input(Tensor::zeros({3}, DType::i64)), 0.5, gen); }) ==
        "[dropout] x must be f64 or f32, got i64");
  (void)gen.take(UINT64_MAX - 2);
  CHECK(message_of([&] { ops::dropout(x, 0.5, gen); }) ==
        "[dropout] the generator's stream is used up: offset 18446744073709551613 + 6 counters passes 2^64; call "
        "manual_seed() for a new stream");
  CHECK(gen.offset() == UINT64_MAX - 2);  // a refused call takes nothing
}
