// The fused scaled_dot_product_attention beyond its op cases (tests/op_cases.hpp): PyTorch's values
// at known inputs, the f64 forward against the ops it fuses bit for bit, what the node keeps, the
// default scale, empty sizes, and every error by its message.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "messages.hpp"
#include "tapegrad/graph/function.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/fused/attention.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/tensor/parallel.hpp"

using namespace tapegrad;
using tapegrad::testing::message_of;

namespace {

Tensor f64(const std::vector<double>& v, const Shape& s) { return Tensor::from_doubles(v, s, DType::f64); }

Tensor uniform(const Shape& s, uint64_t seed, DType dtype = DType::f64) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(v, s, dtype);
}

// a (n, k) @ b (k, m) with correctly rounded sums (kernels::matmul_fsum), the arithmetic the f64
// kernels promise; ops::matmul is BLAS's. da = dy @ b^T, db = a^T @ dy.
struct FsumMatmul {
  static constexpr const char* name = "matmul";
  static Tensor forward(const std::vector<Tensor>& in, Saved&) {
    Tensor out = Tensor::empty(Shape{in[0].dim(0), in[1].dim(1)}, in[0].dtype());
    kernels::matmul_fsum(in[0], false, in[1], false, out);
    return out;
  }
  static void backward(BackwardContext& ctx) {
    Tensor da = Tensor::empty(ctx.input(0).shape(), DType::f64), db = Tensor::empty(ctx.input(1).shape(), DType::f64);
    kernels::matmul_fsum(ctx.grad_output(), false, ctx.input(1), true, da);
    kernels::matmul_fsum(ctx.input(0), true, ctx.grad_output(), false, db);
    ctx.accumulate(0, da);
    ctx.accumulate(1, db);
  }
};
Var fsum_matmul(Var a, Var b) { return apply<FsumMatmul>({a, b}); }

void check_values(const Tensor& got, const std::vector<double>& want, const char* what) {
  INFO(what);
  const std::vector<double> g = got.to_doubles();
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(want[i]).epsilon(1e-14).scale(1e-3));
}

struct Known {
  bool causal;
  Shape qs, ks, vs;
  std::vector<double> q, k, v, dy, y, dq, dk, dv;
};

}  // namespace

// Literals from PyTorch 1.13 in float64: torch.nn.functional._scaled_dot_product_attention(q, k, v,
// None, 0.0, False, is_causal), then out.backward(dy); the same as softmax(q k^T / sqrt(d)) v by hand.
TEST_CASE("scaled_dot_product_attention gives PyTorch's values and gradients at known inputs") {
  const std::vector<Known> known = {
      {false,
       {1, 2, 3, 2},
       {1, 2, 4, 2},
       {1, 2, 4, 3},
       {-0.8, -0.08, 0.64, -0.62, 0.1, 0.82, -0.44, 0.28, 1.0, -0.26, 0.46, -0.8},
       {-1.3, -0.42, 0.46, -1.08, -0.2, 0.68, -0.86, 0.02, 0.9, -0.64, 0.24, -1.3, -0.42, 0.46, -1.08, -0.2},
       {-0.4, 0.16, 0.72, -0.26, 0.3, 0.86, -0.12, 0.44, 1.0, 0.02, 0.58, -0.4,
        0.16, 0.72, -0.26, 0.3, 0.86, -0.12, 0.44, 1.0, 0.02, 0.58, -0.4, 0.16},
       {-0.45, -0.05, 0.35, -0.35, 0.05, 0.45, -0.25, 0.15, 0.55, -0.15, 0.25, -0.45, -0.05, 0.35, -0.35, 0.05, 0.45, -0.25},
       {-0.20579867813131697, 0.35420132186868303, 0.47198871052635505, -0.21254831324689488, 0.3474516867531051,
        0.6484848551209207, -0.15917891510286103, 0.40082108489713897, 0.5626309663854973, 0.41521255470746266,
        0.45432251048321226, -0.004787445292537364, 0.28610689478567386, 0.6909080272944453, -0.13389310521432615,
        0.30803853218878197, 0.6528890193561582, -0.11196146781121803},
       {0.013028150702897801, -0.027343689063645336, 0.056285633150802684, -0.036392827025902054, 0.06149395846114195,
        0.016923581393799163, 0.09799323782932383, -0.017564347087983725, 0.05641400363317407, -0.018347033141039845,
        0.07117838973911671, -0.028615647182114484},
       {-0.031075003287867456, 0.0020520312211197624, 0.013005694382888764, -0.009976315411429458, 0.0013775188912648964,
        0.04326868395270683, 0.016691790013713806, -0.03534439976239712, 0.014197261603909966, -0.009204744752582279,
        0.01465437326979455, -0.01844689794222534, -0.002144412763038314, -0.002419615530087217, -0.026707222110666236,
        0.030071258224894874},
       {-0.2769560571138034, 0.01860715845542867, 0.31417037402466075, -0.2759178046598313, 0.04000888959857617,
        0.3559355838569836, -0.2444108162762208, 0.05854873844519057, 0.36150829316660194, -0.2527153219501445,
        0.03283521350080459, 0.31838574895175364, -0.030212410198933733, 0.3505014266908307, -0.31574778786625707,
        -0.022755478089771436, 0.3348559717792712, -0.29096406549155335, -0.0482425179667703, 0.18194169539179872,
        -0.22088067798569705, -0.04878959374452453, 0.1827009061380995, -0.22240746865649258}},
      {true,
       {1, 1, 3, 2},
       {1, 1, 3, 2},
       {1, 1, 3, 2},
       {-0.8, -0.08, 0.64, -0.62, 0.1, 0.82},
       {-1.3, -0.42, 0.46, -1.08, -0.2, 0.68},
       {-0.4, 0.16, 0.72, -0.26, 0.3, 0.86},
       {-0.45, -0.05, 0.35, -0.35, 0.05, 0.45},
       {-0.4, 0.16, 0.4373078214717978, -0.15399043305192417, 0.2016225775879567, 0.45005222864720307},
       {0.0, 0.0, 0.12657540643188972, -0.04746577741195864, 0.004998436566796699, 0.10664639736971544},
       {-0.0490020212202204, 0.020197337893243277, 0.04182709156188887, -0.07903176109156171, 0.007174929658331518,
        0.05883442319831844},
       {-0.34856218321412685, -0.020472706827773343, 0.2717746146300911, -0.17061541042854772, 0.026787568584035682,
        0.24108811725632115}},
  };
  for (const Known& c : known) {
    CAPTURE(c.causal);
    for (DType dtype : {DType::f64, DType::f32}) {
      CAPTURE(dtype_name(dtype));
      Graph g;
      Var q = g.parameter(Tensor::from_doubles(c.q, c.qs, dtype));
      Var k = g.parameter(Tensor::from_doubles(c.k, c.ks, dtype));
      Var v = g.parameter(Tensor::from_doubles(c.v, c.vs, dtype));
      Var y = ops::scaled_dot_product_attention(q, k, v, c.causal);
      g.backward(ops::sum(ops::mul(y, g.input(Tensor::from_doubles(c.dy, y.shape(), dtype)))));
      if (dtype == DType::f64) {
        check_values(y.value(), c.y, "y");
        check_values(q.grad(), c.dq, "dq");
        check_values(k.grad(), c.dk, "dk");
        check_values(v.grad(), c.dv, "dv");
      } else {  // f32: the same within f32's rounding of the inputs and results
        for (auto [t, want] : {std::pair{y.value(), &c.y}, {q.grad(), &c.dq}, {k.grad(), &c.dk}, {v.grad(), &c.dv}}) {
          const std::vector<double> got = t.to_doubles();
          for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx((*want)[i]).epsilon(1e-6).scale(1e-2));
        }
      }
    }
  }
}

TEST_CASE("the f64 forward is softmax(scale(q @ k^T) + mask) @ v op by op (fsum products), bit for bit") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const int64_t tq = 7, tk = causal ? 7 : 11, d = 5, dv = 3;
    const Tensor r = uniform({1, 1, tq, dv}, 4);
    // y and the gradients of sum(y * r) for q, k and v, from the fused op or from the ops it fuses
    auto run = [&](bool fused, std::vector<double>* y) {
      Graph g;
      Var q = g.parameter(uniform({1, 1, tq, d}, 1)), k = g.parameter(uniform({1, 1, tk, d}, 2));
      Var v = g.parameter(uniform({1, 1, tk, dv}, 3));
      Var out;
      if (fused) {
        out = ops::scaled_dot_product_attention(q, k, v, causal);
      } else {
        Var s = fsum_matmul(ops::reshape(q, {tq, d}), ops::transpose(ops::reshape(k, {tk, d})));
        s = ops::scale(s, 1.0 / std::sqrt(static_cast<double>(d)));
        if (causal) {  // 0 where key j <= query i, -inf above the diagonal
          std::vector<double> mask(static_cast<size_t>(tq * tk));
          for (int64_t i = 0; i < tq; ++i)
            for (int64_t j = 0; j < tk; ++j) mask[static_cast<size_t>(i * tk + j)] = j <= i ? 0.0 : -INFINITY;
          s = ops::add(s, g.input(f64(mask, {tq, tk})));
        }
        out = ops::reshape(fsum_matmul(ops::softmax(s), ops::reshape(v, {tk, dv})), {1, 1, tq, dv});
      }
      *y = out.value().to_doubles();
      g.backward(ops::sum(ops::mul(out, g.input(r))));
      return std::vector<std::vector<double>>{q.grad().to_doubles(), k.grad().to_doubles(), v.grad().to_doubles()};
    };
    std::vector<double> y_fused, y_ops;
    const auto g_fused = run(true, &y_fused), g_ops = run(false, &y_ops);
    CHECK(y_fused == y_ops);
    // the fused backward recomputes the probabilities from lse: close, not the same bits
    for (size_t i = 0; i < 3; ++i)
      for (size_t e = 0; e < g_ops[i].size(); ++e)
        CHECK(g_fused[i][e] == doctest::Approx(g_ops[i][e]).epsilon(1e-13).scale(1e-12));
  }
}

TEST_CASE("scaled_dot_product_attention keeps only the per-row logsumexp for its backward") {
  Graph g;
  Var q = g.parameter(uniform({2, 3, 9, 4}, 5, DType::f32)), k = g.parameter(uniform({2, 3, 9, 4}, 6, DType::f32));
  Var v = g.parameter(uniform({2, 3, 9, 6}, 7, DType::f32));
  Var y = ops::scaled_dot_product_attention(q, k, v, true, 0.25);
  CHECK(y.shape() == Shape{2, 3, 9, 6});
  const Node& node = g.nodes().back();
  CHECK(std::string(node.op) == "scaled_dot_product_attention");
  CHECK(node.saved[0].shape() == Shape{2, 3, 9});
  CHECK(node.saved[0].dtype() == DType::f32);
  CHECK(!node.saved[1].defined());
  CHECK(node.scalar == 0.25);
  // lse is each row's log-sum-exp of the scores: row 0 of a causal head sees key 0 alone
  const std::vector<double> qv = q.value().to_doubles(), kv = k.value().to_doubles();
  double s00 = 0;
  for (int c = 0; c < 4; ++c) s00 += qv[static_cast<size_t>(c)] * kv[static_cast<size_t>(c)];
  CHECK(node.saved[0].to_doubles()[0] == doctest::Approx(0.25 * s00).epsilon(1e-6));
}

TEST_CASE("scaled_dot_product_attention's default scale is 1/sqrt(d), for a scale <= 0 or NaN") {
  Graph g;
  Var q = g.parameter(uniform({1, 2, 3, 6}, 8)), k = g.parameter(uniform({1, 2, 4, 6}, 9));
  Var v = g.parameter(uniform({1, 2, 4, 2}, 10));
  const std::vector<double> want = ops::scaled_dot_product_attention(q, k, v, false, 1.0 / std::sqrt(6.0)).value().to_doubles();
  for (double s : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN()})
    CHECK(ops::scaled_dot_product_attention(q, k, v, false, s).value().to_doubles() == want);
  CHECK(ops::scaled_dot_product_attention(q, k, v, false, 2.0).value().to_doubles() != want);
}

TEST_CASE("scaled_dot_product_attention with no queries, or a value size 0") {
  Graph g;
  Var q = g.parameter(uniform({2, 1, 0, 3}, 11)), k = g.parameter(uniform({2, 1, 4, 3}, 12));
  Var v = g.parameter(uniform({2, 1, 4, 2}, 13));
  Var y = ops::scaled_dot_product_attention(q, k, v);
  CHECK(y.shape() == Shape{2, 1, 0, 2});
  g.backward(ops::sum(y));
  CHECK(k.grad().to_doubles() == std::vector<double>(24, 0.0));  // no query sees a key
  CHECK(v.grad().to_doubles() == std::vector<double>(16, 0.0));
  g.clear();
  Var q2 = g.parameter(uniform({2, 1, 3, 3}, 14)), v0 = g.parameter(uniform({2, 1, 4, 0}, 15));
  CHECK(ops::scaled_dot_product_attention(q2, k, v0).shape() == Shape{2, 1, 3, 0});
}

TEST_CASE("scaled_dot_product_attention's errors name the op, the shapes and the axis") {
  Graph g;
  auto p = [&](const Shape& s, DType t = DType::f64) { return g.parameter(Tensor::zeros(s, t)); };
  Var q = p({2, 3, 4, 8}), k = p({2, 3, 5, 8}), v = p({2, 3, 5, 6});
  using ops::scaled_dot_product_attention;
  CHECK(message_of([&] { scaled_dot_product_attention(p({3, 4, 8}), k, v); }) ==
        "[scaled_dot_product_attention] q must have 4 dimensions, got shape (3, 4, 8)");
  CHECK(message_of([&] { scaled_dot_product_attention(q, k, p({2, 3, 5})); }) ==
        "[scaled_dot_product_attention] v must have 4 dimensions, got shape (2, 3, 5)");
  CHECK(message_of([&] { scaled_dot_product_attention(q, p({2, 3, 5, 8}, DType::f32), v); }) ==
        "[scaled_dot_product_attention] dtypes differ: f64 and f32");
  CHECK(message_of([&] {
          scaled_dot_product_attention(g.input(Tensor::zeros({2, 3, 4, 8}, DType::i32)), k, v);
        }) == "[scaled_dot_product_attention] q must be f64, f32 or bf16, got i32");
  CHECK(message_of([&] { scaled_dot_product_attention(q, p({2, 4, 5, 8}), v); }) ==
        "[scaled_dot_product_attention] q (2, 3, 4, 8) and k (2, 4, 5, 8) differ in axis 1 (heads): 3 and 4; "
        "q (B, H, Tq, d), k (B, H, Tk, d) and v (B, H, Tk, dv) must agree");
  CHECK(message_of([&] { scaled_dot_product_attention(q, p({1, 3, 5, 8}), v); }) ==
        "[scaled_dot_product_attention] q (2, 3, 4, 8) and k (1, 3, 5, 8) differ in axis 0 (batch): 2 and 1; "
        "q (B, H, Tq, d), k (B, H, Tk, d) and v (B, H, Tk, dv) must agree");
  CHECK(message_of([&] { scaled_dot_product_attention(q, p({2, 3, 5, 7}), v); }) ==
        "[scaled_dot_product_attention] q (2, 3, 4, 8) and k (2, 3, 5, 7) differ in axis 3 (head size): 8 and 7; "
        "q (B, H, Tq, d), k (B, H, Tk, d) and v (B, H, Tk, dv) must agree");
  CHECK(message_of([&] { scaled_dot_product_attention(q, k, p({2, 3, 6, 6})); }) ==
        "[scaled_dot_product_attention] k (2, 3, 5, 8) and v (2, 3, 6, 6) differ in axis 2 (keys): 5 and 6; "
        "q (B, H, Tq, d), k (B, H, Tk, d) and v (B, H, Tk, dv) must agree");
  CHECK(message_of([&] { scaled_dot_product_attention(q, k, v, true); }) ==
        "[scaled_dot_product_attention] causal attention needs as many queries as keys: q (2, 3, 4, 8) has 4 in "
        "axis 2, k (2, 3, 5, 8) has 5");
  CHECK(message_of([&] { scaled_dot_product_attention(q, p({2, 3, 0, 8}), p({2, 3, 0, 6})); }) ==
        "[scaled_dot_product_attention] no keys to attend to: k (2, 3, 0, 8) has 0 in axis 2");
  CHECK(message_of([&] { scaled_dot_product_attention(p({2, 3, 4, 0}), p({2, 3, 5, 0}), v); }) ==
        "[scaled_dot_product_attention] head size 0: q (2, 3, 4, 0) has 0 in axis 3");
  CHECK(message_of([&] { scaled_dot_product_attention(q, k, v, false, INFINITY); }) ==
        "[scaled_dot_product_attention] scale must be finite, got inf");
  Graph other;
  CHECK(message_of([&] { scaled_dot_product_attention(q, k, other.parameter(Tensor::zeros({2, 3, 5, 6}, DType::f64))); }) ==
        "[scaled_dot_product_attention] inputs belong to different graphs");
}

TEST_CASE("a query row that sees one key passes exactly 0 to its q and k (delta = dP there)") {
  for (DType dtype : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(dtype));
    Graph g;  // T = 1; and causal T = 3, whose row 0 sees key 0 alone
    Var q = g.parameter(uniform({1, 2, 1, 5}, 16, dtype)), k = g.parameter(uniform({1, 2, 1, 5}, 17, dtype));
    Var v = g.parameter(uniform({1, 2, 1, 3}, 18, dtype));
    Var y = ops::scaled_dot_product_attention(q, k, v, true);
    CHECK(y.value().to_doubles() == v.value().to_doubles());
    const Tensor r = uniform({1, 2, 1, 3}, 19, dtype);
    g.backward(ops::sum(ops::mul(y, g.input(r))));
    CHECK(q.grad().to_doubles() == std::vector<double>(10, 0.0));
    CHECK(k.grad().to_doubles() == std::vector<double>(10, 0.0));
    CHECK(v.grad().to_doubles() == r.to_doubles());
  }
}

// cpuperf: the f32 kernel's blocks of 64 query rows (Note [attention blocks] in cpu/attention.cpp)
TEST_CASE("f32 over several blocks of query rows: within f32's rounding of f64, the same bits on 1, 2 and 3 threads") {
  struct Case {
    bool causal;
    int64_t tq, tk;
  };
  for (Case c : {Case{true, 150, 150}, Case{false, 130, 77}, Case{true, 64, 64}, Case{false, 1, 200}}) {
    CAPTURE(c.causal);
    CAPTURE(c.tq);
    const int64_t d = 8, dv = 5;
    // y, dq, dk and dv of sum(y * r), on `threads` threads
    auto run = [&](DType dtype, int threads) {
      const int before = num_threads();
      set_num_threads(threads);
      Graph g;
      Var q = g.parameter(uniform({2, 3, c.tq, d}, 21, dtype)), k = g.parameter(uniform({2, 3, c.tk, d}, 22, dtype));
      Var v = g.parameter(uniform({2, 3, c.tk, dv}, 23, dtype));
      Var y = ops::scaled_dot_product_attention(q, k, v, c.causal);
      g.backward(ops::sum(ops::mul(y, g.input(uniform({2, 3, c.tq, dv}, 24, dtype)))));
      std::vector<std::vector<double>> out{y.value().to_doubles(), q.grad().to_doubles(), k.grad().to_doubles(),
                                           v.grad().to_doubles()};
      set_num_threads(before);
      return out;
    };
    const auto want = run(DType::f64, 1), one = run(DType::f32, 1);
    for (size_t t = 0; t < want.size(); ++t) {
      CAPTURE(t);
      REQUIRE(one[t].size() == want[t].size());
      size_t bad = 0;
      for (size_t i = 0; i < want[t].size(); ++i)
        if (!(std::fabs(one[t][i] - want[t][i]) <= 1e-5 * (1 + std::fabs(want[t][i])))) ++bad;
      CHECK(bad == 0);
    }
    CHECK(run(DType::f32, 2) == one);
    CHECK(run(DType::f32, 3) == one);
  }
}

// ---- qkv_attention: the same attention over a (B, T, 3C) projection, read in place

namespace {

// nanoGPT's attention as separate ops: split, value add, heads, attention, heads back.
Var composite_qkv_attention(Var qkv, int64_t H, bool causal, Var value_add, double scale) {
  const int64_t B = qkv.shape()[0], T = qkv.shape()[1], C = qkv.shape()[2] / 3;
  std::vector<Var> parts = ops::split(qkv, {C, C, C}, 2);
  if (value_add.defined()) parts[2] = parts[2] + value_add;
  auto heads = [&](Var t) { return ops::transpose(ops::reshape(t, {B, T, H, C / H}), 1, 2); };
  Var y = ops::scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), causal, scale);
  return ops::reshape(ops::transpose(y, 1, 2), {B, T, C});
}

void check_same_bits(const Tensor& a, const Tensor& b, const char* what) {
  INFO(what);
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += std::memcmp(&x[i], &y[i], sizeof(double)) != 0;
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("qkv_attention gives the bits of split, add, transpose, attention and transpose, forward and backward") {
  struct Case {
    int64_t B, T, H, d;
    bool causal, add, broadcast;
    double scale;
  };
  for (DType dtype : {DType::f64, DType::f32})
    for (const Case c : {Case{2, 9, 2, 4, true, false, false, 0.0}, Case{1, 70, 3, 5, false, true, true, 0.6},
                         Case{2, 33, 2, 16, true, true, false, 0.0}}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(c.T);
      const int64_t C = c.H * c.d;
      const Tensor x = uniform({c.B, c.T, 3 * C}, 11, dtype), a = uniform(c.broadcast ? Shape{c.T, C} : Shape{c.B, c.T, C}, 12, dtype);
      const Tensor dy = uniform({c.B, c.T, C}, 13, dtype);
      Tensor got[3], want[3];
      for (int way = 0; way < 2; ++way) {
        Graph g;
        Var qkv = g.parameter(x.clone()), add = c.add ? g.parameter(a.clone()) : Var();
        Var y = way == 0 ? ops::qkv_attention(qkv, c.H, c.causal, add, c.scale)
                         : composite_qkv_attention(qkv, c.H, c.causal, add, c.scale);
        g.backward(ops::sum(y * g.input(dy)));
        Tensor* out = way == 0 ? got : want;
        out[0] = y.value();
        out[1] = qkv.grad();
        if (c.add) out[2] = add.grad();
      }
      check_same_bits(got[0], want[0], "y");
      check_same_bits(got[1], want[1], "d qkv");
      if (c.add) check_same_bits(got[2], want[2], "d value_add");
    }
}

TEST_CASE("qkv_attention's errors name the op and the shapes") {
  Graph g;
  auto p = [&](const Shape& s, DType t = DType::f64) { return g.parameter(Tensor::zeros(s, t)); };
  Var qkv = p({2, 5, 24});
  CHECK(message_of([&] { ops::qkv_attention(p({5, 24}), 2); }) ==
        "[qkv_attention] qkv must have 3 dimensions, got shape (5, 24)");
  CHECK(message_of([&] { ops::qkv_attention(g.input(Tensor::zeros({2, 5, 24}, DType::i32)), 2); }) ==
        "[qkv_attention] qkv must be f64, f32 or bf16, got i32");
  CHECK(message_of([&] { ops::qkv_attention(qkv, 0); }) == "[qkv_attention] heads must be at least 1, got 0");
  CHECK(message_of([&] { ops::qkv_attention(p({2, 5, 25}), 2); }) ==
        "[qkv_attention] qkv (2, 5, 25) must be (B, T, 3C) with C a multiple of 2 heads: its last axis 25 is not 6 "
        "times a head size >= 1");
  CHECK(message_of([&] { ops::qkv_attention(qkv, 3); }) ==
        "[qkv_attention] qkv (2, 5, 24) must be (B, T, 3C) with C a multiple of 3 heads: its last axis 24 is not 9 "
        "times a head size >= 1");
  CHECK(message_of([&] { ops::qkv_attention(p({2, 0, 24}), 2); }) ==
        "[qkv_attention] no keys to attend to: qkv (2, 0, 24) has 0 in axis 1");
  CHECK(message_of([&] { ops::qkv_attention(qkv, 2, true, Var(), INFINITY); }) ==
        "[qkv_attention] scale must be finite, got inf");
  CHECK(message_of([&] { ops::qkv_attention(qkv, 2, true, p({2, 5, 8}, DType::f32)); }) ==
        "[qkv_attention] dtypes differ: f64 and f32");
  CHECK(message_of([&] { ops::qkv_attention(qkv, 2, true, p({3, 8})); }) ==
        "[qkv_attention] cannot broadcast shapes (2, 5, 8) and (3, 8): axis 1 has sizes 5 and 3");
  CHECK(message_of([&] { ops::qkv_attention(qkv, 2, true, p({2, 2, 5, 8})); }) ==
        "[qkv_attention] value_add (2, 2, 5, 8) does not broadcast to the values' shape (2, 5, 8) of qkv (2, 5, 24)");
  Graph other;
  CHECK(message_of([&] { ops::qkv_attention(qkv, 2, true, other.parameter(Tensor::zeros({2, 5, 8}, DType::f64))); }) ==
        "[qkv_attention] inputs belong to different graphs");
}

// The prefill's rows and each later single row of qkv_attention_cached against qkv_attention over
// the whole sequence: every row within rounding (a lone query's products are its own), f64 and
// f32, with and without value_add, on 1 and 2 threads.
TEST_CASE("qkv_attention_cached gives qkv_attention's rows: a prefill, then one position a call") {
  for (DType dtype : {DType::f64, DType::f32})
    for (bool add : {false, true})
      for (int threads : {1, 2}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(add);
        CAPTURE(threads);
        set_num_threads(threads);
        const int64_t B = 2, T = 11, H = 3, d = 4, C = H * d, prefill = 4;
        const Tensor x = uniform({B, T, 3 * C}, 21, dtype), a = uniform({B, T, C}, 22, dtype);
        Graph g;
        NoGrad off(g);
        const Tensor want = ops::qkv_attention(g.input(x), H, true, add ? g.input(a) : Var()).value();
        ops::KVCache cache(T);
        std::vector<double> got;
        for (int64_t t0 = 0; t0 < T; t0 = t0 == 0 ? prefill : t0 + 1) {
          const int64_t t1 = t0 == 0 ? prefill : t0 + 1;
          Var part = ops::slice(g.input(x), 1, t0, t1), part_add = add ? ops::slice(g.input(a), 1, t0, t1) : Var();
          const Tensor y = ops::qkv_attention_cached(part, H, cache, part_add).value();  // (B, t1 - t0, C)
          CHECK(cache.length == t1);
          const std::vector<double> v = y.to_doubles();
          got.resize(static_cast<size_t>(B * T * C));
          for (int64_t b = 0; b < B; ++b)
            for (int64_t t = t0; t < t1; ++t)
              for (int64_t c = 0; c < C; ++c)
                got[static_cast<size_t>((b * T + t) * C + c)] = v[static_cast<size_t>((b * (t1 - t0) + t - t0) * C + c)];
        }
        const std::vector<double> w = want.to_doubles();
        const double tolerance = dtype == DType::f64 ? 1e-14 : 2e-6;
        double worst = 0;
        for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(got[i] - w[i]));
        CHECK(worst <= tolerance);
      }
  set_num_threads(default_num_threads());
}

TEST_CASE("qkv_attention_cached's errors name the op, the shapes and the cache") {
  Graph g;
  Var qkv = g.input(Tensor::zeros({1, 3, 24}, DType::f64)), one = g.input(Tensor::zeros({1, 1, 24}, DType::f64));
  ops::KVCache cache(4);
  {
    Var w = g.parameter(Tensor::zeros({1, 3, 24}, DType::f64));
    CHECK(message_of([&] { ops::qkv_attention_cached(w, 2, cache); }) ==
          "[qkv_attention_cached] has no backward (a KV cache is for inference): call it under NoGrad, or train with "
          "qkv_attention");
    NoGrad off(g);
    CHECK(ops::qkv_attention_cached(w, 2, cache).shape() == Shape{1, 3, 8});  // under NoGrad: no node, no error
    cache.reset();
  }
  CHECK(message_of([&] { ops::qkv_attention_cached(g.input(Tensor::zeros({1, 3, 25}, DType::f64)), 2, cache); }) ==
        "[qkv_attention_cached] qkv (1, 3, 25) must be (B, T, 3C) with C a multiple of 2 heads: its last axis 25 is "
        "not 6 times a head size >= 1");
  ops::qkv_attention_cached(qkv, 2, cache);
  CHECK(message_of([&] { ops::qkv_attention_cached(qkv, 2, cache); }) ==
        "[qkv_attention_cached] after a prefill, one position a call: qkv (1, 3, 24), the cache holding 3 of 4 "
        "positions; reset() the cache to prefill again");
  ops::qkv_attention_cached(one, 2, cache);
  CHECK(message_of([&] { ops::qkv_attention_cached(one, 2, cache); }) ==
        "[qkv_attention_cached] the cache is full: qkv (1, 1, 24), the cache holding 4 of 4 positions; reset() it and "
        "prefill the last positions");
  cache.reset();
  ops::qkv_attention_cached(one, 2, cache);
  CHECK(message_of([&] { ops::qkv_attention_cached(g.input(Tensor::zeros({1, 1, 24}, DType::f32)), 2, cache); }) ==
        "[qkv_attention_cached] qkv (1, 1, 24), the cache holding 1 of 4 positions: the cache's kv (1, 4, 16) f64 was "
        "filled by another qkv than this f32 one ((1, 4, 16) expected); reset() it");
  CHECK(g.nodes().empty());  // nothing here records a node
}
