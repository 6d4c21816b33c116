// bf16 casts and autocast's products (Note [autocast] in src/ops/autocast.hpp) on the CPU: the
// cast's bits against tensor/half.hpp's rounding, to()'s gradient, and autocast's linear and matmul
// against f32 products of operands rounded to bf16 beforehand (the same BLAS calls: the same bits).
// CUDA against these: tests/cuda/test_cuda.cpp.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "messages.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/tensor/half.hpp"

using namespace tapegrad;
using tapegrad::testing::message_of;

namespace {

Tensor uniform(const Shape& s, uint64_t seed, DType dtype = DType::f32) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(v, s, dtype);
}

// t (f32) with every element rounded to bf16 and widened back: what autocast multiplies
Tensor rounded(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::bf16), back = Tensor::empty(t.shape(), DType::f32);
  kernels::cast(t, h);
  kernels::cast(h, back);
  return back;
}

std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<uint32_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.raw_data(), t.nbytes());
  return out;
}

void same_bits(const Tensor& a, const Tensor& b, const char* what) {
  INFO(what);
  REQUIRE(a.dtype() == b.dtype());
  REQUIRE(a.shape() == b.shape());
  CHECK(bits_of(a) == bits_of(b));
}

}  // namespace

TEST_CASE("casts to bf16 round to nearest even, keep NaNs quiet and signed, and come back exactly") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -2.5f, inf, -inf, std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(), 1e-40f,
                          std::bit_cast<float>(0x3f808000u),   // 1 + 2^-8: a tie, to the even 1
                          std::bit_cast<float>(0x3f818000u),   // 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6
                          std::bit_cast<float>(0x3f808001u),   // just above the tie: up
                          std::bit_cast<float>(0x7fc00001u),   // a quiet NaN with a payload
                          std::bit_cast<float>(0xff800001u),   // a signalling NaN, negative
                          std::bit_cast<float>(0x7f7fffffu)};  // max rounds up to inf
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  const Tensor x = Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size())});
  Tensor h = Tensor::empty(x.shape(), DType::bf16), back = Tensor::empty(x.shape(), DType::f32);
  kernels::cast(x, h);
  kernels::cast(h, back);
  const auto* hb = static_cast<const uint16_t*>(h.raw_data());
  const auto* fb = static_cast<const float*>(back.raw_data());
  for (size_t i = 0; i < v.size(); ++i) {
    INFO("element " << i << " bits 0x" << std::hex << std::bit_cast<uint32_t>(v[i]));
    CHECK(hb[i] == f32_to_bf16(v[i]));
    CHECK(std::bit_cast<uint32_t>(fb[i]) == static_cast<uint32_t>(hb[i]) << 16);  // widening is exact
    if (std::isnan(v[i])) CHECK((hb[i] & 0x7fc0u) == 0x7fc0u);                      // quiet NaN
  }
  CHECK(hb[9] == 0x3f80u);
  CHECK(hb[10] == 0x3f82u);
  CHECK(hb[11] == 0x3f81u);
  CHECK(hb[13] == 0xffc0u);
  CHECK(hb[14] == 0x7f80u);

  // f64 goes through f32 (as PyTorch converts); integers go through f32 both ways, truncating back
  const Tensor d = Tensor::from_doubles({1.0 + std::ldexp(1.0, -9) + std::ldexp(1.0, -30), -3.0, 1e300}, Shape{3},
                                        DType::f64);
  Tensor dh = Tensor::empty(Shape{3}, DType::bf16);
  kernels::cast(d, dh);
  const auto* dhb = static_cast<const uint16_t*>(dh.raw_data());
  CHECK(dhb[0] == f32_to_bf16(static_cast<float>(d.to_doubles()[0])));
  CHECK(dhb[1] == 0xc040u);
  CHECK(dhb[2] == 0x7f80u);
  const Tensor ints = Tensor::from_vector(std::vector<int32_t>{7, -300, 257}, Shape{3});
  Tensor ih = Tensor::empty(Shape{3}, DType::bf16), ib = Tensor::empty(Shape{3}, DType::i32);
  kernels::cast(ints, ih);
  kernels::cast(ih, ib);
  CHECK(ib.to_doubles() == std::vector<double>{7, -300, 256});  // 257 has 9 significant bits
}

TEST_CASE("to(x, bf16) carries the gradient back, rounded to bf16 on its way through") {
  Graph g;
  Var x = g.parameter(uniform({4, 5}, 1));
  const Tensor c = uniform({4, 5}, 2);
  Var y = ops::to(ops::to(x, DType::bf16), DType::f32);
  CHECK(y.value().dtype() == DType::f32);
  same_bits(y.value(), rounded(x.value()), "forward: x rounded to bf16");
  g.backward(ops::sum(ops::mul(y, g.input(c))));
  same_bits(x.grad(), rounded(c), "dx = bf16(dy), widened");
}

// t rounded to bf16 (a bf16 tensor)
Tensor to_bf16(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::bf16);
  kernels::cast(t, h);
  return h;
}

TEST_CASE("autocast's linear is the f32 linear of operands rounded to bf16, rounded to bf16, forward and backward") {
  for (const Shape xs : {Shape{6, 8}, Shape{2, 3, 8}}) {
    INFO("x " << xs.str());
    const Tensor x = uniform(xs, 3), W = uniform({5, 8}, 4), b = uniform({5}, 5);
    Shape ys(xs.begin(), xs.end() - 1);
    ys.push_back(5);
    const Tensor dy = uniform(ys, 6);
    // autocast
    Graph g;
    Var xv = g.parameter(x), Wv = g.parameter(W), bv = g.parameter(b);
    Var y;
    {
      ops::Autocast scope;
      CHECK(ops::autocast_dtype() == DType::bf16);
      y = ops::linear(xv, Wv, bv);
    }
    CHECK(ops::autocast_dtype() == DType::f32);
    CHECK(y.value().dtype() == DType::bf16);  // Note [bf16 activations]
    // dy meets the bf16 y in f32 (a promoted mul): y's gradient is dy rounded to bf16
    g.backward(ops::sum(ops::mul(y, g.input(dy))));  // outside the scope: the product still computes in bf16
    // f32 on rounded operands, rounded once (and a rounded dy for every gradient)
    Graph r;
    Var xr = r.parameter(rounded(x)), Wr = r.parameter(rounded(W)), br = r.parameter(b);
    Var yr = ops::linear(xr, Wr, br);
    r.backward(ops::sum(ops::mul(yr, r.input(rounded(dy)))));
    same_bits(y.value(), to_bf16(yr.value()), "y");
    same_bits(xv.grad(), xr.grad(), "dx");
    same_bits(Wv.grad(), Wr.grad(), "dW");
    same_bits(bv.grad(), br.grad(), "db");
  }
}

TEST_CASE("autocast's matmul is the f32 matmul of operands rounded to bf16, batched and broadcast") {
  const Tensor a = uniform({2, 3, 4, 5}, 7), b = uniform({5, 6}, 8), dy = uniform({2, 3, 4, 6}, 9);
  Graph g;
  Var av = g.parameter(a), bv = g.parameter(b);
  Var y;
  {
    ops::Autocast scope(DType::bf16);
    y = ops::matmul(av, bv);
  }
  g.backward(ops::sum(ops::mul(y, g.input(dy))));
  Graph r;
  Var ar = r.parameter(rounded(a)), br = r.parameter(rounded(b));
  Var yr = ops::matmul(ar, br);
  r.backward(ops::sum(ops::mul(yr, r.input(rounded(dy)))));
  same_bits(y.value(), to_bf16(yr.value()), "y");
  same_bits(av.grad(), ar.grad(), "da");
  same_bits(bv.grad(), br.grad(), "db (summed over the broadcast batch)");
}

// Note [bf16 activations]: what the ops after a product do with its bf16 output.
TEST_CASE("bf16 activations: unary ops round the f32 op once, binary ops promote, gradients keep each dtype") {
  const Tensor x = uniform({3, 7}, 20), c = uniform({3, 7}, 21), dy = uniform({3, 7}, 22);
  // a unary op of bf16: the f32 op of the widened values, rounded; its backward likewise
  Graph g;
  Var h = g.parameter(to_bf16(x));
  Var y = ops::gelu(h);
  CHECK(y.value().dtype() == DType::bf16);
  Graph r;
  Var hr = r.parameter(rounded(x));
  Var yr = ops::gelu(hr);
  same_bits(y.value(), to_bf16(yr.value()), "gelu forward");
  g.backward(ops::sum(ops::mul(y, g.input(dy))));  // bf16 * f32 -> f32: y's gradient is bf16(dy)
  Tensor dx = Tensor::empty(x.shape(), DType::f32);
  kernels::unary_backward(kernels::Unary::gelu_erf, rounded(x), rounded(yr.value()), rounded(dy), dx);
  CHECK(h.grad().dtype() == DType::bf16);
  same_bits(h.grad(), to_bf16(dx), "gelu backward");
  // f32 + bf16 -> f32, each gradient in its operand's dtype; bf16 + bf16 -> bf16
  Graph m;
  Var a = m.parameter(c), bb = m.parameter(to_bf16(x));
  Var s = ops::add(a, bb);
  CHECK(s.value().dtype() == DType::f32);
  same_bits(s.value(), ops::add(m.input(c), m.input(rounded(x))).value(), "f32 + bf16");
  CHECK(ops::add(bb, bb).value().dtype() == DType::bf16);
  m.backward(ops::sum(ops::mul(s, m.input(dy))));
  CHECK(a.grad().dtype() == DType::f32);
  CHECK(bb.grad().dtype() == DType::bf16);
  same_bits(a.grad(), dy, "d a = dy");
  same_bits(bb.grad(), to_bf16(dy), "d b = bf16(dy)");
  // broadcast with bf16: computed in f32 through recorded casts, the promoted dtype returned
  Graph n;
  Var nb = n.input(to_bf16(x)), row = n.input(to_bf16(uniform({7}, 23)));
  CHECK(ops::add(nb, row).value().dtype() == DType::bf16);
  CHECK(ops::add(n.input(c), row).value().dtype() == DType::f32);
  CHECK((nb * 0.5).value().dtype() == DType::bf16);  // scale: in f32, rounded back
  CHECK((nb + 1.0).value().dtype() == DType::bf16);  // a bf16 constant, broadcast in f32
  // the norms and the softmax family widen a bf16 x; their results are f32
  CHECK(ops::softmax(nb).value().dtype() == DType::f32);
  CHECK(ops::layer_norm(nb, Var(), Var()).value().dtype() == DType::f32);
}

// Note [bf16 activations]: under autocast a norm writes its f32 result rounded to bf16 (for the
// product after it), and its backward takes that bf16 gradient: the f32 norm's bits otherwise.
TEST_CASE("autocast's norms: the f32 norm rounded to bf16, the backward the f32 one of the bf16 gradient") {
  const Tensor x = uniform({5, 24}, 30), w = uniform({24}, 31), b = uniform({24}, 32), dy = uniform({5, 24}, 33);
  for (const bool rms : {false, true}) {
    INFO((rms ? "rms_norm" : "layer_norm"));
    auto norm = [&](Var xv, Var wv, Var bv) { return rms ? ops::rms_norm(xv, wv) : ops::layer_norm(xv, wv, bv); };
    Graph g;
    Var xv = g.parameter(x), wv = g.parameter(w), bv = g.parameter(b);
    Var y;
    {
      ops::Autocast scope;
      y = norm(xv, wv, bv);
    }
    CHECK(y.value().dtype() == DType::bf16);
    g.backward(ops::sum(ops::mul(y, g.input(dy))));  // y's gradient: bf16(dy)
    Graph r;
    Var xr = r.parameter(x), wr = r.parameter(w), br = r.parameter(b);
    Var yr = norm(xr, wr, br);
    CHECK(yr.value().dtype() == DType::f32);  // outside a scope: f32
    r.backward(ops::sum(ops::mul(yr, r.input(rounded(dy)))));
    same_bits(y.value(), to_bf16(yr.value()), "y");
    same_bits(xv.grad(), xr.grad(), "dx, f32");
    same_bits(wv.grad(), wr.grad(), "dweight, f32");
    if (!rms) same_bits(bv.grad(), br.grad(), "dbias, f32");
  }
  // f64 rows are never rounded
  Graph g;
  ops::Autocast scope;
  CHECK(ops::layer_norm(g.input(uniform({2, 3}, 34, DType::f64))).value().dtype() == DType::f64);
}

TEST_CASE("autocast scopes nest, f32 turns autocast off, and f64 products are never cast") {
  CHECK(ops::autocast_dtype() == DType::f32);
  {
    ops::Autocast on;
    {
      ops::Autocast off(DType::f32);
      CHECK(ops::autocast_dtype() == DType::f32);
      Graph g;
      const Tensor a = uniform({3, 4}, 10), b = uniform({4, 2}, 11);
      same_bits(ops::matmul(g.input(a), g.input(b)).value(), ops::matmul(g.input(a), g.input(b)).value(), "off");
    }
    CHECK(ops::autocast_dtype() == DType::bf16);
    Graph g;
    const Tensor a = uniform({3, 4}, 12, DType::f64), b = uniform({4, 2}, 13, DType::f64);
    Var y = ops::matmul(g.input(a), g.input(b));
    CHECK(y.value().dtype() == DType::f64);
    Graph plain;
    ops::Autocast off(DType::f32);
    const std::vector<double> want = ops::matmul(plain.input(a), plain.input(b)).value().to_doubles();
    CHECK(y.value().to_doubles() == want);
  }
  CHECK(ops::autocast_dtype() == DType::f32);
}

TEST_CASE("autocast and bf16 products refuse what they do not support, by name") {
  CHECK(message_of([] { ops::Autocast scope(DType::f16); }) ==
        "[autocast] products compute in bf16 (or f32, to turn autocast off), not f16");
  CHECK(message_of([] { ops::Autocast scope(DType::f64); }) ==
        "[autocast] products compute in bf16 (or f32, to turn autocast off), not f64");
  const Tensor a = Tensor::zeros(Shape{2, 3}, DType::bf16), b = Tensor::zeros(Shape{3, 4}, DType::bf16);
  Tensor out = Tensor::empty(Shape{2, 4}, DType::f64);
  CHECK(message_of([&] { kernels::matmul(a, false, b, false, out); }) ==
        "[matmul] cannot compute a (2, 3) @ b (3, 4) into out (2, 4): dtypes do not fit (bf16, bf16, f64; the products "
        "take one float dtype, or bf16 operands into f32 or bf16)");
  Graph g;
  CHECK(message_of([&] { (void)ops::matmul(g.input(a), g.input(Tensor::zeros(Shape{3, 4}, DType::f64))); }) ==
        "[matmul] dtypes differ: bf16 and f64");
  CHECK(message_of([&] { (void)ops::add(g.input(a), g.input(Tensor::zeros(Shape{2, 3}, DType::f64))); }) ==
        "[add] dtypes differ: bf16 and f64");
  CHECK(message_of([&] { (void)ops::sum(g.input(a)); }) == "[sum] input must be f64 or f32, got bf16");
  Tensor o = Tensor::empty(Shape{2, 3}, DType::bf16);
  CHECK(message_of([&] { kernels::binary(kernels::Binary::add, a, Tensor::zeros(Shape{3}, DType::f32), o); }) ==
        "[add] bf16 takes f32 and bf16 of one shape: got (2, 3) bf16, (3,) f32 into (2, 3) bf16");
  // cross_entropy_rows: dz in the logits' dtype (bf16 for f32 logits), losses f32 for bf16 logits
  const Tensor targets = Tensor::zeros(Shape{2}, DType::i32);
  Tensor losses = Tensor::empty(Shape{2}, DType::f64), count = Tensor::empty(Shape{}, DType::f64);
  Tensor dz = Tensor::empty(Shape{2, 3}, DType::bf16);
  CHECK(message_of([&] {
          kernels::cross_entropy_rows(Tensor::zeros(Shape{2, 3}, DType::f64), targets, -100, losses, count, dz);
        }) == "[cross_entropy] the gradient (2, 3) bf16 does not fit the logits (2, 3) f64: it needs their shape and "
              "dtype (bf16 for f32 logits)");
  Tensor small_losses = Tensor::empty(Shape{2}, DType::bf16), f32_count = Tensor::empty(Shape{}, DType::f32);
  CHECK(message_of([&] { kernels::cross_entropy_rows(a, targets, -100, small_losses, f32_count, dz); }) ==
        "[cross_entropy] losses bf16 and count f32 do not fit bf16 logits: they need f32");
  CHECK(message_of([&] { (void)ops::to(g.input(Tensor::empty(Shape{2}, DType::f16)), DType::f32); }) ==
        "[to] no CPU kernel for f16");
}
