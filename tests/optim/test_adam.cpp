// Tests for Adam (src/optim/adam.*): torch.optim.Adam's update written out here in f64 (its L2
// decay joins the gradient before the moments), the gradients left as they were, groups, the named
// state round trip and the refusals by message. Against torch.optim.Adam itself:
// tests/nn/check_layers.py (the nn_layers_torch test).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "messages.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/optim/adam.hpp"

using namespace tapegrad;

namespace {

Tensor f64(std::vector<double> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_doubles(v, Shape{n}, DType::f64);
}

// torch.optim.Adam's update of one element, step t, from its _single_tensor_adam
struct Element {
  double w, m = 0, v = 0;
  void step(double g, int t, double lr, double b1, double b2, double eps, double wd) {
    const double d = g + wd * w;
    m = b1 * m + (1 - b1) * d;
    v = b2 * v + (1 - b2) * d * d;
    const double bc1 = 1 - std::pow(b1, t), bc2_sqrt = std::sqrt(1 - std::pow(b2, t));
    w = w - (lr / bc1) * (m / (std::sqrt(v) / bc2_sqrt + eps));
  }
};

}  // namespace

TEST_CASE("Adam is torch.optim.Adam: the weight decay joins the gradient, the gradients stay as they were") {
  Graph g;
  Var w = g.parameter(f64({0.5, -1.25, 2.0}), "w");
  Var idle = g.parameter(f64({3.0}), "idle");  // never has a gradient: left alone
  optim::Adam adam({w, idle}, {.lr = 0.01, .weight_decay = 0.1});
  std::vector<Element> expected{{0.5}, {-1.25}, {2.0}};
  const std::vector<std::vector<double>> grads{{0.3, -0.2, 0.1}, {-0.5, 0.25, 0.0}, {1.0, 2.0, -3.0}};
  for (int t = 1; t <= 3; ++t) {
    const Tensor grad = f64(grads[static_cast<size_t>(t - 1)]);
    w.set_grad(grad);
    adam.step();
    for (size_t i = 0; i < 3; ++i) expected[i].step(grads[static_cast<size_t>(t - 1)][i], t, 0.01, 0.9, 0.999, 1e-8, 0.1);
    const std::vector<double> now = w.value().to_doubles();
    for (size_t i = 0; i < 3; ++i) CHECK(now[i] == expected[i].w);
    CHECK(w.grad().raw_data() == grad.raw_data());  // the gradient itself, its values untouched
    CHECK(w.grad().to_doubles() == grads[static_cast<size_t>(t - 1)]);
  }
  for (size_t i = 0; i < 3; ++i) CHECK(adam.m(0).to_doubles()[i] == expected[i].m);
  CHECK(adam.step_count() == 3);
  CHECK(adam.step_count(0) == 3);
  CHECK(adam.step_count(1) == 0);
  CHECK(idle.value().to_doubles() == std::vector<double>{3.0});
}

TEST_CASE("Adam's groups have their own decay, and its state resumes bit for bit") {
  Graph g;
  Var a = g.parameter(f64({0.5, -1.0}), "a"), b = g.parameter(f64({2.0}), "b");
  const std::vector<optim::ParamGroup> groups{{{a}, {.weight_decay = 0.5}}, {{b}, {.lr = 0.1}}};
  auto steps = [&](optim::Adam& adam, int from, int to) {
    for (int t = from; t < to; ++t) {
      a.set_grad(f64({0.1 * (t + 1), -0.3}));
      b.set_grad(f64({0.2}));
      adam.step();
    }
  };
  const Tensor a0 = a.value().clone(), b0 = b.value().clone();
  optim::Adam whole(groups, {.lr = 0.01});
  steps(whole, 0, 4);
  const std::vector<double> a4 = a.value().to_doubles(), b4 = b.value().to_doubles();

  Tensor(a.value()).copy_from(a0);
  Tensor(b.value()).copy_from(b0);
  optim::Adam first(groups, {.lr = 0.01});
  steps(first, 0, 2);
  const optim::NamedTensors state = first.state_tensors();
  std::vector<std::string> names;
  for (const auto& [name, _] : state) names.push_back(name);
  CHECK(names == std::vector<std::string>{"adam.step", "adam.group.0.params", "adam.group.0.lr", "adam.group.0.beta1",
                                          "adam.group.0.beta2", "adam.group.0.eps", "adam.group.0.weight_decay",
                                          "adam.group.1.params", "adam.group.1.lr", "adam.group.1.beta1",
                                          "adam.group.1.beta2", "adam.group.1.eps", "adam.group.1.weight_decay",
                                          "adam.step.0", "adam.m.0", "adam.v.0", "adam.step.1", "adam.m.1", "adam.v.1"});
  CHECK(state[6].second.item() == 0.5);  // group 0's decay is Adam's, not the undecayed AdamW's underneath
  CHECK(state[12].second.item() == 0.0);
  optim::Adam second(groups, {.lr = 0.01});
  second.load_state(state);
  steps(second, 2, 4);
  CHECK(a.value().to_doubles() == a4);
  CHECK(b.value().to_doubles() == b4);
}

TEST_CASE("Adam's refusals name the hyperparameter, the parameter or the state tensor") {
  Graph g;
  Var w = g.parameter(f64({1.0}), "w");
  CHECK(testing::message_of([&] { optim::Adam({w}, {.lr = 0}); }) == "[adam] lr must be a positive finite number, got 0");
  CHECK(testing::message_of([&] { optim::Adam({w}, {.beta1 = 1}); }) == "[adam] beta1 must be in [0, 1), got 1");
  CHECK(testing::message_of([&] { optim::Adam({w}, {.weight_decay = -0.1}); }) ==
        "[adam] weight_decay must be a finite number >= 0, got -0.1");
  CHECK(testing::message_of([&] { optim::Adam(std::vector<optim::ParamGroup>{{{w}, {.momentum = 0.9}}}, {}); }) ==
        "[adam] group 0 sets momentum, which Adam does not have (SGD does)");
  Var half = g.parameter(Tensor::zeros(Shape{2}, DType::bf16), "table");
  CHECK(testing::message_of([&] { optim::Adam({w, half}, {}); }) ==
        "[adam] parameter 1 ('table') is bf16; Adam updates f32 and f64 parameters");
  optim::Adam adam({w}, {});
  optim::NamedTensors state = adam.state_tensors();
  state.pop_back();
  CHECK(testing::message_of([&] { adam.load_state(state); }) == "[adam] load_state: no tensor 'adam.v.0'");
  adam.group(0).lr = -1;
  w.set_grad(f64({1.0}));
  CHECK(testing::message_of([&] { adam.step(); }) == "[adam] lr must be a finite number >= 0, got -1");
}
