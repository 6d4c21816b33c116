// ops::linear_cross_entropy against the two ops it fuses (cross_entropy(linear(x, W), t)), at
// block sizes from one row to more than all of them, and its refusals by message. The op-case
// table (tests/op_cases.hpp) adds the f64 gradient check, f32 against f64, the thread-count rule
// and CPU against CUDA.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "messages.hpp"
#include "ops_testing.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/autocast.hpp"
#include "tapegrad/ops/fused/linear_cross_entropy.hpp"
#include "tapegrad/ops/ops.hpp"

using namespace tapegrad;
using tapegrad::testing::max_relative;
using tapegrad::testing::message_of;
using tapegrad::testing::random_tensor;

namespace {

Tensor targets_tensor(const Shape& s, int64_t classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = static_cast<double>(rng() % static_cast<uint64_t>(classes));
  return Tensor::from_doubles(v, s, DType::i32);
}

}  // namespace

TEST_CASE("linear_cross_entropy equals cross_entropy(linear(x, W), t) at every block size") {
  const Shape xs{3, 37, 16};  // 111 rows
  for (DType dtype : {DType::f64, DType::f32}) {
    const double bound = dtype == DType::f64 ? 1e-13 : 1e-5;
    for (ops::Reduction r : {ops::Reduction::mean, ops::Reduction::sum, ops::Reduction::none}) {
      for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{111}, int64_t{4096}}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(static_cast<int>(r));
        CAPTURE(chunk);
        Graph g;
        Var x = g.parameter(random_tensor(xs, dtype, 1));
        Var w = g.parameter(random_tensor({29, 16}, dtype, 2, 0.5));
        Var t = g.input(targets_tensor({3, 37}, 29, 3));
        Var fused = ops::linear_cross_entropy(x, w, t, r, 4, chunk);
        Var plain = ops::cross_entropy(ops::linear(x, w), t, r, 4);
        CHECK(fused.shape() == plain.shape());
        CHECK(max_relative(fused.value(), plain.value()) <= bound);
        // the same upstream gradient through each: a sum for none, the loss itself otherwise
        g.backward(r == ops::Reduction::none ? ops::sum(fused * 0.5) : fused, {.retain_graph = true});
        const Tensor gx = x.grad().clone(), gw = w.grad().clone();
        g.zero_grad();
        g.backward(r == ops::Reduction::none ? ops::sum(plain * 0.5) : plain);
        CHECK(max_relative(gx, x.grad()) <= bound);
        CHECK(max_relative(gw, w.grad()) <= bound);
      }
    }
  }
}

// Under autocast both sides multiply bf16 copies (Note [autocast]): the same rounded operands, but
// the unfused linear returns its logits rounded to bf16 (Note [bf16 activations], as PyTorch's)
// where the fused op keeps them f32, so the two agree to bf16's rounding, and the gradients to a
// bf16 rounding of dz.
TEST_CASE("linear_cross_entropy under autocast: bf16 products, as linear then cross_entropy") {
  for (ops::Reduction r : {ops::Reduction::mean, ops::Reduction::none}) {
    CAPTURE(static_cast<int>(r));
    Graph g;
    Var x = g.parameter(random_tensor({3, 37, 16}, DType::f32, 1));
    Var w = g.parameter(random_tensor({29, 16}, DType::f32, 2, 0.5));
    Var t = g.input(targets_tensor({3, 37}, 29, 3));
    Var fused, plain, f32;
    {
      ops::Autocast scope(DType::bf16);
      fused = ops::linear_cross_entropy(x, w, t, r, 4, 16);
      plain = ops::cross_entropy(ops::linear(x, w), t, r, 4);
    }
    f32 = ops::linear_cross_entropy(x, w, t, r, 4, 16);
    CHECK(max_relative(fused.value(), plain.value()) <= 1e-2);
    CHECK(max_relative(fused.value(), f32.value()) <= 1e-2);
    CHECK(max_relative(fused.value(), f32.value()) >= 1e-6);  // the products were bf16
    g.backward(r == ops::Reduction::none ? ops::sum(fused * 0.5) : fused, {.retain_graph = true});
    const Tensor gx = x.grad().clone(), gw = w.grad().clone();
    g.zero_grad();
    g.backward(r == ops::Reduction::none ? ops::sum(plain * 0.5) : plain);
    CHECK(max_relative(gx, x.grad()) <= 1e-2);
    CHECK(max_relative(gw, w.grad()) <= 1e-2);
  }
}

// An autocast norm's bf16 output (Note [bf16 activations]) goes straight into the fused head: the
// loss and dW of the f32 x of the same values under autocast, and dx that one's rounded to bf16.
TEST_CASE("linear_cross_entropy of a bf16 x: the f32 x's loss and dW, its dx rounded to bf16") {
  Tensor xb = Tensor::empty({3, 37, 8}, DType::bf16), xf = Tensor::empty({3, 37, 8}, DType::f32);
  kernels::cast(random_tensor({3, 37, 8}, DType::f32, 30), xb);
  kernels::cast(xb, xf);  // the same values in f32
  const Tensor W = random_tensor({23, 8}, DType::f32, 31), targets = targets_tensor({3, 37}, 23, 32);
  for (ops::Reduction r : {ops::Reduction::mean, ops::Reduction::sum, ops::Reduction::none}) {
    INFO("reduction " << static_cast<int>(r));
    Graph g;
    Var x16 = g.parameter(xb), x32 = g.parameter(xf), w16 = g.parameter(W), w32 = g.parameter(W);
    Var t = g.input(targets);
    Var l16, l32;
    {
      ops::Autocast scope;
      l16 = ops::linear_cross_entropy(x16, w16, t, r, 4, 16);
      l32 = ops::linear_cross_entropy(x32, w32, t, r, 4, 16);
    }
    CHECK(l16.value().dtype() == DType::f32);
    CHECK(l16.value().to_doubles() == l32.value().to_doubles());
    g.backward(r == ops::Reduction::none ? ops::sum(l16 * 0.5) + ops::sum(l32 * 0.5) : l16 + l32);
    CHECK(x16.grad().dtype() == DType::bf16);
    Tensor dx = Tensor::empty(xb.shape(), DType::bf16);
    kernels::cast(x32.grad(), dx);
    CHECK(x16.grad().to_doubles() == dx.to_doubles());
    CHECK(w16.grad().to_doubles() == w32.grad().to_doubles());
  }
  // a bf16 x goes with an f32 weight only
  Graph g;
  CHECK(message_of([&] {
          ops::linear_cross_entropy(g.input(xb), g.input(random_tensor({23, 8}, DType::f64, 31)), g.input(targets));
        }) == "[linear_cross_entropy] dtypes differ: bf16 and f64");
}

// In NoGrad no gradient is made in the forward, and the loss is the same.
TEST_CASE("linear_cross_entropy in NoGrad: the same loss, nothing recorded") {
  Graph g;
  Var x = g.parameter(random_tensor({5, 8}, DType::f32, 4));
  Var w = g.parameter(random_tensor({11, 8}, DType::f32, 5));
  Var t = g.input(targets_tensor({5}, 11, 6));
  const double with = ops::linear_cross_entropy(x, w, t).value().item();
  NoGrad off(g);
  Var loss = ops::linear_cross_entropy(x, w, t);
  CHECK(loss.value().item() == with);
  CHECK_FALSE(loss.requires_grad());
}

TEST_CASE("linear_cross_entropy refuses bad inputs by name and shapes") {
  Graph g;
  Var x = g.parameter(random_tensor({4, 8}, DType::f32, 1));
  Var w = g.parameter(random_tensor({5, 8}, DType::f32, 2));
  Var t = g.input(targets_tensor({4}, 5, 3));
  CHECK(message_of([&] { ops::linear_cross_entropy(x, g.parameter(random_tensor({5, 7}, DType::f32, 2)), t); }) ==
        "[linear_cross_entropy] cannot apply a weight of shape (5, 7) to x of shape (4, 8): x's last axis must have "
        "the weight's 7 features");
  CHECK(message_of([&] { ops::linear_cross_entropy(x, g.parameter(random_tensor({5}, DType::f32, 2)), t); }) ==
        "[linear_cross_entropy] the weight must be 2-D (V, C), got shape (5,)");
  CHECK(message_of([&] { ops::linear_cross_entropy(x, w, g.input(targets_tensor({3}, 5, 3))); }) ==
        "[linear_cross_entropy] x (4, 8) and targets (3,) do not match: targets need x's shape without its last "
        "axis (features)");
  CHECK(message_of([&] { ops::linear_cross_entropy(x, w, t, ops::Reduction::mean, -100, 0); }) ==
        "[linear_cross_entropy] chunk_rows must be at least 1, got 0");
  CHECK(message_of([&] { ops::linear_cross_entropy(x, g.parameter(random_tensor({5, 8}, DType::f64, 2)), t); })
            .find("[linear_cross_entropy]") == 0);
  CHECK(message_of([&] { ops::linear_cross_entropy(x, w, g.input(random_tensor({4}, DType::f32, 3))); })
            .find("[linear_cross_entropy]") == 0);
}
