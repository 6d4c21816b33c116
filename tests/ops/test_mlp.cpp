// ops::mlp against the three ops it fuses (linear, the activation, linear): the same bits on the
// CPU in f64, f32 and under autocast; the nodes it records; its refusals by message.
// The op-case table (tests/op_cases.hpp) adds the f64 gradient check, f32 against f64, the
// thread-count rule and CPU against CUDA; tests/cuda the cuBLASLt epilogues.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "messages.hpp"
#include "ops_testing.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/autocast.hpp"
#include "tapegrad/ops/fused/mlp.hpp"
#include "tapegrad/ops/ops.hpp"

using namespace tapegrad;
using tapegrad::testing::message_of;
using tapegrad::testing::random_tensor;

namespace {

Var activated(Var x, ops::MlpActivation f) {
  switch (f) {
    case ops::MlpActivation::gelu: return ops::gelu(x);
    case ops::MlpActivation::gelu_tanh: return ops::gelu(x, ops::Gelu::tanh);
    case ops::MlpActivation::relu: return ops::relu(x);
    case ops::MlpActivation::silu: return ops::silu(x);
  }
  return Var();
}

// x (2, 5, 8), w_fc (32, 8), w_proj (6, 32) and the biases, as parameters of g
struct Mlp {
  Var x, w_fc, w_proj, b_fc, b_proj;
  Mlp(Graph& g, DType dtype, bool biases)
      : x(g.parameter(random_tensor({2, 5, 8}, dtype, 1))), w_fc(g.parameter(random_tensor({32, 8}, dtype, 2, 0.4))),
        w_proj(g.parameter(random_tensor({6, 32}, dtype, 3, 0.3))),
        b_fc(biases ? g.parameter(random_tensor({32}, dtype, 4, 0.5)) : Var()),
        b_proj(biases ? g.parameter(random_tensor({6}, dtype, 5, 0.5)) : Var()) {}
  std::vector<Var> params() const {
    std::vector<Var> out{x, w_fc, w_proj};
    if (b_fc.defined()) out.insert(out.end(), {b_fc, b_proj});
    return out;
  }
};

const ops::MlpActivation kAll[] = {ops::MlpActivation::gelu, ops::MlpActivation::gelu_tanh, ops::MlpActivation::relu,
                                   ops::MlpActivation::silu};

}  // namespace

TEST_CASE("mlp is linear, the activation and linear, bit for bit in f64 and f32, and records linear then mlp") {
  for (DType dtype : {DType::f64, DType::f32})
    for (ops::MlpActivation f : kAll)
      for (bool biases : {false, true}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(ops::mlp_activation_name(f));
        CAPTURE(biases);
        Graph g;
        Mlp m(g, dtype, biases);
        const size_t before = g.nodes().size();
        Var fused = ops::mlp(m.x, m.w_fc, m.w_proj, f, m.b_fc, m.b_proj);
        REQUIRE(g.nodes().size() == before + 2);
        CHECK(std::string(g.nodes()[before].op) == "linear");
        CHECK(std::string(g.nodes()[before + 1].op) == "mlp");
        Var plain = ops::linear(activated(ops::linear(m.x, m.w_fc, m.b_fc), f), m.w_proj, m.b_proj);
        CHECK(fused.shape() == Shape{2, 5, 6});
        CHECK(fused.value().to_doubles() == plain.value().to_doubles());
        const Tensor weights = random_tensor({2, 5, 6}, dtype, 9);  // a loss that weighs every output
        g.backward(ops::sum(fused * g.input(weights)), {.retain_graph = true});
        std::vector<std::vector<double>> grads;
        for (const Var& p : m.params()) grads.push_back(p.grad().to_doubles());
        g.zero_grad();
        g.backward(ops::sum(plain * g.input(weights)));
        for (size_t k = 0; k < grads.size(); ++k) {
          CAPTURE(k);
          CHECK(grads[k] == m.params()[k].grad().to_doubles());
        }
      }
}

// Under autocast the products are bf16; on the CPU no epilogue runs, so the op is the three ops'
// bits there too, bf16 values and f32 gradients alike (tests/cuda compares the epilogues').
TEST_CASE("mlp under autocast on the CPU: bf16 products, the three ops' bits") {
  for (ops::MlpActivation f : kAll)
    for (bool biases : {false, true}) {
      CAPTURE(ops::mlp_activation_name(f));
      CAPTURE(biases);
      Graph g;
      Mlp m(g, DType::f32, biases);
      Var fused, plain;
      {
        ops::Autocast scope(DType::bf16);
        fused = ops::mlp(m.x, m.w_fc, m.w_proj, f, m.b_fc, m.b_proj);
        plain = ops::linear(activated(ops::linear(m.x, m.w_fc, m.b_fc), f), m.w_proj, m.b_proj);
      }
      CHECK(fused.dtype() == DType::bf16);
      CHECK(fused.value().to_doubles() == plain.value().to_doubles());
      g.backward(ops::sum(ops::to(fused, DType::f32)), {.retain_graph = true});
      std::vector<Tensor> grads;
      for (const Var& p : m.params()) grads.push_back(p.grad().clone());
      g.zero_grad();
      g.backward(ops::sum(ops::to(plain, DType::f32)));
      for (size_t k = 0; k < grads.size(); ++k) {
        CAPTURE(k);
        CHECK(grads[k].dtype() == m.params()[k].grad().dtype());
        CHECK(grads[k].to_doubles() == m.params()[k].grad().to_doubles());
      }
    }
}

TEST_CASE("mlp in NoGrad: the same values, nothing recorded") {
  Graph g;
  Mlp m(g, DType::f64, true);
  const std::vector<double> with = ops::mlp(m.x, m.w_fc, m.w_proj, ops::MlpActivation::gelu, m.b_fc, m.b_proj)
                                       .value()
                                       .to_doubles();
  const size_t before = g.nodes().size();
  NoGrad off(g);
  CHECK(ops::mlp(m.x, m.w_fc, m.w_proj, ops::MlpActivation::gelu, m.b_fc, m.b_proj).value().to_doubles() == with);
  CHECK(g.nodes().size() == before);
}

TEST_CASE("mlp refuses bad inputs by name and shapes") {
  Graph g;
  Var x = g.parameter(random_tensor({4, 8}, DType::f32, 1));
  Var w_fc = g.parameter(random_tensor({16, 8}, DType::f32, 2)), w_proj = g.parameter(random_tensor({8, 16}, DType::f32, 3));
  const auto gelu = ops::MlpActivation::gelu;
  CHECK(message_of([&] { ops::mlp(x, g.parameter(random_tensor({16, 7}, DType::f32, 4)), w_proj, gelu); }) ==
        "[mlp] cannot apply w_fc of shape (16, 7) to x of shape (4, 8): x's last axis has 8 features, w_fc (hidden, "
        "in) takes 7");
  CHECK(message_of([&] { ops::mlp(x, g.parameter(random_tensor({16}, DType::f32, 4)), w_proj, gelu); }) ==
        "[mlp] w_fc must be 2-D (hidden, in), got shape (16,)");
  CHECK(message_of([&] { ops::mlp(x, w_fc, g.parameter(random_tensor({8, 15}, DType::f32, 4)), gelu); }) ==
        "[mlp] w_proj of shape (8, 15) does not take w_fc (16, 8)'s 16 hidden features");
  CHECK(message_of([&] { ops::mlp(x, w_fc, g.parameter(random_tensor({2, 8, 16}, DType::f32, 4)), gelu); }) ==
        "[mlp] w_proj must be 2-D (out, hidden), got shape (2, 8, 16)");
  CHECK(message_of([&] { ops::mlp(x, w_fc, w_proj, gelu, g.parameter(random_tensor({8}, DType::f32, 4))); }) ==
        "[mlp] b_fc of shape (8,) does not fit: it needs (16,)");
  CHECK(message_of([&] { ops::mlp(x, w_fc, w_proj, gelu, Var(), g.parameter(random_tensor({16}, DType::f32, 4))); }) ==
        "[mlp] b_proj of shape (16,) does not fit: it needs (8,)");
  CHECK(message_of([&] { ops::mlp(x, w_fc, g.parameter(random_tensor({8, 16}, DType::f64, 4)), gelu); }) ==
        "[mlp] dtypes differ: f32 and f64");
  CHECK(message_of([&] { ops::mlp(x, w_fc, w_proj, static_cast<ops::MlpActivation>(9)); }) ==
        "[mlp] unknown activation");
  Graph other;
  CHECK(message_of([&] { ops::mlp(x, w_fc, other.parameter(random_tensor({8, 16}, DType::f32, 4)), gelu); }) ==
        "[mlp] inputs belong to different graphs");
}

TEST_CASE("the MLP's kernels refuse shapes and dtypes that do not fit, naming them") {
  const auto gelu = kernels::Unary::gelu_erf;
  const Tensor x = random_tensor({4, 8}, DType::f32, 1), w = random_tensor({16, 8}, DType::f32, 2);
  Tensor pre = Tensor::empty({4, 16}, DType::f32), act = Tensor::empty({4, 16}, DType::f32);
  Tensor small = Tensor::empty({4, 15}, DType::f32), wide = Tensor::empty({4, 16}, DType::f64);
  CHECK(message_of([&] { kernels::matmul_activation(gelu, x, w, Tensor(), small, act); }) ==
        "[mlp] x (4, 8) @ w (16, 8)^T does not make pre (4, 15) and act (4, 16)");
  CHECK(message_of([&] { kernels::matmul_activation(gelu, x, w, Tensor::empty({15}, DType::f32), pre, act); }) ==
        "[mlp] x (4, 8) @ w (16, 8)^T + bias (15,) does not make pre (4, 16) and act (4, 16)");
  CHECK(message_of([&] { kernels::matmul_activation(gelu, x, w, Tensor(), pre, wide); }) ==
        "[mlp] the activation's product takes x, w, pre and act of one dtype (f64, f32 or bf16) and a bias of theirs "
        "(or f32 with bf16), got f32, f32, f32 and f64");
  CHECK(message_of([&] { kernels::matmul_activation(gelu, x, w, Tensor::empty({16}, DType::bf16), pre, act); }) ==
        "[mlp] the activation's product takes x, w, pre and act of one dtype (f64, f32 or bf16) and a bias of theirs "
        "(or f32 with bf16), got f32, f32, f32, f32 and bf16");
  // the backward: dy (4, 8) @ w_proj (8, 16) -> dpre (4, 16)
  const Tensor dy = random_tensor({4, 8}, DType::f32, 3), w_proj = random_tensor({8, 16}, DType::f32, 4);
  Tensor dpre = Tensor::empty({4, 16}, DType::f32);
  CHECK(message_of([&] { kernels::matmul_activation_backward(gelu, dy, w, pre, act, dpre); }) ==
        "[mlp] dy (4, 8) @ w (16, 8) does not fit pre (4, 16), act (4, 16) and dpre (4, 16)");
  CHECK(message_of([&] { kernels::matmul_activation_backward(gelu, dy, w_proj, pre, act, wide); }) ==
        "[mlp] the activation's backward takes dy, w, pre, act and dpre of one dtype (f64, f32 or bf16), got f32, "
        "f32, f32, f32 and f64");
  kernels::matmul_activation_backward(gelu, dy, w_proj, pre, act, dpre);  // the shapes that fit
}
