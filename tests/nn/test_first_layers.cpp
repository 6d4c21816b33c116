// tests/nn: the layers a PyTorch user reaches for first (issue 37): Conv2d and the pools, Flatten
// and the activations, Sequential, LSTM and GRU and their cells. Names, order and shapes against
// PyTorch's state_dict keys (torch 1.13), default initialisation, train and eval, the f64 gradient
// check of the recurrent layers through every input, and every refusal by its message. Values and
// gradients against PyTorch: tests/nn/check_layers.py (the nn_layers_torch test).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "messages.hpp"
#include "nn_testing.hpp"
#include "tapegrad/graph/gradcheck.hpp"
#include "tapegrad/nn/conv.hpp"
#include "tapegrad/nn/recurrent.hpp"
#include "tapegrad/nn/sequential.hpp"
#include "tapegrad/nn/stateless.hpp"

using namespace tapegrad;
using tapegrad::testing::message_of;
using tapegrad::testing::Place;

namespace {

using Keys = std::vector<std::pair<std::string, Shape>>;

Keys keys_of(const nn::Module& m) {
  Keys out;
  for (const auto& [name, p] : m.named_parameters()) out.emplace_back(name, p.shape());
  return out;
}

// Every value in [-bound, bound], spread as a uniform draw is (std bound / sqrt 3, within 15%).
void check_uniform(const Var& p, double bound) {
  const std::vector<double> v = p.value().to_doubles();
  double ss = 0;
  for (double x : v) {
    CHECK(std::fabs(x) <= bound);
    ss += x * x;
  }
  if (v.size() >= 100) CHECK(std::sqrt(ss / static_cast<double>(v.size())) == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.15));
}

}  // namespace

TEST_CASE("the recurrent layers have PyTorch's state_dict keys, order and shapes") {
  Place p(1);
  nn::LSTM lstm(p.f, 3, 4, 2, true, false, 0.0, true);
  CHECK(keys_of(lstm) == Keys{{"weight_ih_l0", {16, 3}},         {"weight_hh_l0", {16, 4}},
                              {"bias_ih_l0", {16}},              {"bias_hh_l0", {16}},
                              {"weight_ih_l0_reverse", {16, 3}}, {"weight_hh_l0_reverse", {16, 4}},
                              {"bias_ih_l0_reverse", {16}},      {"bias_hh_l0_reverse", {16}},
                              {"weight_ih_l1", {16, 8}},         {"weight_hh_l1", {16, 4}},
                              {"bias_ih_l1", {16}},              {"bias_hh_l1", {16}},
                              {"weight_ih_l1_reverse", {16, 8}}, {"weight_hh_l1_reverse", {16, 4}},
                              {"bias_ih_l1_reverse", {16}},      {"bias_hh_l1_reverse", {16}}});
  nn::GRU gru(p.f, 3, 4, 1, false);
  CHECK(keys_of(gru) == Keys{{"weight_ih_l0", {12, 3}}, {"weight_hh_l0", {12, 4}}});
  nn::LSTMCell cell(p.f, 3, 4);
  CHECK(keys_of(cell) == Keys{{"weight_ih", {16, 3}}, {"weight_hh", {16, 4}}, {"bias_ih", {16}}, {"bias_hh", {16}}});
  CHECK(lstm.weights[2].weight_ih.label() == "weight_ih_l1");  // layer 1, forward
  CHECK(lstm.weights[3].bias_hh.label() == "bias_hh_l1_reverse");
}

TEST_CASE("Sequential names its steps 0, 1, ... as nn.Sequential does, and runs them in order") {
  Place p(2, DType::f64);
  nn::Sequential net;
  nn::Conv2d& conv = net.emplace_back<nn::Conv2d>(p.f, 1, 4, 3);
  net.emplace_back<nn::ReLU>();
  net.emplace_back<nn::MaxPool2d>(2);
  net.emplace_back<nn::Flatten>();
  net.emplace_back<nn::Linear>(p.f, 36, 5);
  // nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(36, 5))
  CHECK(keys_of(net) == Keys{{"0.weight", {4, 1, 3, 3}}, {"0.bias", {4}}, {"4.weight", {5, 36}}, {"4.bias", {5}}});
  CHECK(net.size() == 5);
  CHECK(std::string(net[1].kind()) == "ReLU");
  CHECK(&net.at<nn::Conv2d>(0) == &conv);
  CHECK_THROWS_AS(net.at<nn::Linear>(0), std::bad_cast);

  Var x = p.g.input(testing::inputs({2, 1, 8, 8}, DType::f64));
  Var y = net(x);
  CHECK(y.shape() == Shape{2, 5});
  Var by_hand = net.at<nn::Linear>(4)(ops::flatten(ops::max_pool2d(ops::relu(conv(x)), 2), 1));
  CHECK(y.value().to_doubles() == by_hand.value().to_doubles());
  CHECK(y.label() == "4");  // the last step's path (a root Sequential has none of its own)
  nn::Sequential empty;
  CHECK(empty(x).id() == x.id());
}

TEST_CASE("default initialisation is torch.nn's: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) and U(-1/sqrt(hidden), 1/sqrt(hidden))") {
  Place p(3, DType::f64);
  nn::Conv2d conv(p.f, 6, 16, {3, 5});
  check_uniform(conv.weight, 1.0 / std::sqrt(6.0 * 3 * 5));
  check_uniform(conv.bias, 1.0 / std::sqrt(6.0 * 3 * 5));
  nn::LSTM lstm(p.f, 10, 20, 2);
  for (const Var& w : lstm.parameters()) check_uniform(w, 1.0 / std::sqrt(20.0));
  nn::GRUCell cell(p.f, 10, 30);
  for (const Var& w : cell.parameters()) check_uniform(w, 1.0 / std::sqrt(30.0));
  // the same seed, the same bits
  Place again(3, DType::f64);
  nn::Conv2d conv2(again.f, 6, 16, {3, 5});
  CHECK(conv2.weight.value().to_doubles() == conv.weight.value().to_doubles());
}

TEST_CASE("LSTM and GRU pass the f64 gradient check through every parameter, the input and the initial state") {
  Place p(4, DType::f64);
  nn::LSTM lstm(p.f, 2, 3, 2, true, true, 0.0, true);  // 2 layers, batch_first, bidirectional
  Var x = p.g.input(testing::inputs({2, 3, 2}, DType::f64), "x", true);                  // (B, T, in)
  Var h0 = p.g.input(testing::value_embeds({4, 2, 3}, DType::f64), "h0", true);          // (L D, B, H)
  Var c0 = p.g.input(testing::inputs({4, 2, 3}, DType::f64), "c0", true);
  Var r = p.g.input(testing::value_embeds({2, 3, 6}, DType::f64));
  auto lstm_loss = [&](Graph&) {
    const nn::LSTMOutput o = lstm(x, {h0, c0});
    return ops::sum(o.output * r) + ops::sum(ops::square(o.state.h)) + ops::sum(o.state.c);
  };
  std::vector<Var> wrt = lstm.parameters();
  for (const Var& v : {x, h0, c0}) wrt.push_back(v);
  const GradcheckResult check = gradcheck(p.g, lstm_loss, wrt);
  CAPTURE(check.str());
  CHECK(check.passed());
  CHECK(check.max_error() < 1e-8);

  nn::GRU gru(p.f, 2, 3, 2);
  Var xs = p.g.input(testing::inputs({3, 2, 2}, DType::f64), "xs", true);  // (T, B, in)
  Var g0 = p.g.input(testing::value_embeds({2, 2, 3}, DType::f64), "g0", true);
  auto gru_loss = [&](Graph&) {
    const nn::GRUOutput o = gru(xs, g0);
    return ops::sum(ops::square(o.output)) + ops::sum(o.h_n);
  };
  std::vector<Var> gru_wrt = gru.parameters();
  gru_wrt.push_back(xs);
  gru_wrt.push_back(g0);
  const GradcheckResult gru_check = gradcheck(p.g, gru_loss, gru_wrt);
  CAPTURE(gru_check.str());
  CHECK(gru_check.passed());
  CHECK(gru_check.max_error() < 1e-8);
}

TEST_CASE("an LSTM's dropout acts between layers in training only; a cell equals one step of its layer") {
  Place p(5, DType::f64);
  nn::LSTM lstm(p.f, 3, 4, 2, true, false, 0.5);
  Var x = p.g.input(testing::inputs({5, 2, 3}, DType::f64));
  const std::vector<double> trained = lstm(x).output.value().to_doubles();
  lstm.eval();
  const std::vector<double> evaluated = lstm(x).output.value().to_doubles();
  CHECK(trained != evaluated);
  Place q(5, DType::f64);
  nn::LSTM plain(q.f, 3, 4, 2);  // the same weights, no dropout
  CHECK(plain(q.g.input(testing::inputs({5, 2, 3}, DType::f64))).output.value().to_doubles() == evaluated);

  // one step of a 1-layer LSTM is its cell with the same weights
  Place c(6, DType::f64);
  nn::LSTM one(c.f, 3, 4);
  nn::LSTMCell cell(c.f, 3, 4);
  nn::load_state_dict(cell, {{"weight_ih", one.weights[0].weight_ih.value()}, {"weight_hh", one.weights[0].weight_hh.value()},
                             {"bias_ih", one.weights[0].bias_ih.value()}, {"bias_hh", one.weights[0].bias_hh.value()}});
  Var x1 = c.g.input(testing::inputs({1, 2, 3}, DType::f64));
  const nn::LSTMOutput o = one(x1);
  const nn::LSTMState s = cell(ops::reshape(x1, {2, 3}));
  CHECK(o.state.h.value().to_doubles() == s.h.value().to_doubles());
  CHECK(o.state.c.value().to_doubles() == s.c.value().to_doubles());
}

TEST_CASE("the layers' refusals name the layer, its path and the shapes, before any parameter is made") {
  Place p(7);
  const size_t before = p.g.parameter_count();
  CHECK(message_of([&] { nn::Conv2d(p.f, 0, 4, 3); }) == "[Conv2d] in_channels must be positive, got 0");
  CHECK(message_of([&] { nn::Conv2d(p.f, 1, 4, {3, 0}); }) == "[Conv2d] kernel width must be positive, got 0");
  CHECK(message_of([&] { nn::Conv2d(p.f, 1, 4, 3, 1, -1); }) == "[Conv2d] padding must be at least 0, got -1");
  CHECK(message_of([&] { nn::MaxPool2d(3, std::nullopt, 2); }) == "[MaxPool2d] padding must be in [0, kernel_size / 2] = [0, 1], got 2");
  CHECK(message_of([&] { nn::AvgPool2d(2, 0); }) == "[AvgPool2d] stride must be positive, got 0");
  CHECK(message_of([&] { nn::LSTM(p.f, 3, 0); }) == "[LSTM] hidden_size must be positive, got 0");
  CHECK(message_of([&] { nn::GRU(p.f, 3, 4, 0); }) == "[GRU] num_layers must be positive, got 0");
  CHECK(message_of([&] { nn::LSTM(p.f, 3, 4, 2, true, false, 1.5); }) ==
        "[LSTM] dropout p must be a probability in [0, 1], got 1.5");
  CHECK(message_of([&] { nn::LSTMCell(p.f, -1, 4); }) == "[LSTMCell] input_size must be positive, got -1");
  CHECK(message_of([&] { nn::GRUCell(p.f, 3, int64_t{1} << 62); }) == "[GRUCell] 3 x hidden_size 4611686018427387904 overflows 64 bits");
  CHECK(p.g.parameter_count() == before);

  struct Net : nn::Module {
    explicit Net(nn::Factory& f) : conv(f, 3, 4, 3), lstm(f, 4, 5, 2), cell(f, 4, 5), gru(f, 4, 5, 1, true, true) {
      register_module("conv", conv);
      register_module("lstm", lstm);
      register_module("cell", cell);
      register_module("gru", gru);
      register_module("pool", pool);
    }
    nn::Conv2d conv;
    nn::LSTM lstm;
    nn::LSTMCell cell;
    nn::GRU gru;
    nn::MaxPool2d pool{2};
  } net(p.f);
  auto in = [&](Shape s) { return p.g.input(Tensor::zeros(s, DType::f32)); };
  CHECK(message_of([&] { net.conv(in({2, 1, 5, 5})); }) == "[Conv2d conv] x must be (N, 3, H, W) or (3, H, W), got (2, 1, 5, 5)");
  CHECK(message_of([&] { net.conv(in({5, 5})); }) == "[Conv2d conv] x must be (N, 3, H, W) or (3, H, W), got (5, 5)");
  CHECK(message_of([&] { net.pool(in({2, 5})); }) == "[MaxPool2d pool] x must be (N, C, H, W) or (C, H, W), got (2, 5)");
  CHECK(message_of([&] { net.lstm(in({7, 2, 3})); }) == "[LSTM lstm] x must be (T, B, 4) or (T, 4) unbatched, got (7, 2, 3)");
  CHECK(message_of([&] { net.gru(in({2, 7, 3})); }) == "[GRU gru] x must be (B, T, 4) or (T, 4) unbatched, got (2, 7, 3)");
  CHECK(message_of([&] { net.lstm(in({0, 2, 4})); }) == "[LSTM lstm] x (0, 2, 4) has no time steps");
  CHECK(message_of([&] { net.lstm(in({7, 2, 4}), {in({1, 2, 5}), Var()}); }) ==
        "[LSTM lstm] h0 must be (2, 2, 5) (num_layers * directions, batch, hidden_size), got (1, 2, 5)");
  CHECK(message_of([&] { net.lstm(in({7, 4}), {Var(), in({2, 1, 5})}); }) ==
        "[LSTM lstm] c0 must be (2, 5) (num_layers * directions, hidden_size), got (2, 1, 5)");
  CHECK(message_of([&] { net.cell(in({2, 3})); }) == "[LSTMCell cell] x must be (B, 4) or (4,), got (2, 3)");
  CHECK(message_of([&] { net.cell(in({2, 4}), {in({3, 5}), Var()}); }) == "[LSTMCell cell] h must be (2, 5) for x (2, 4), got (3, 5)");
  CHECK(message_of([&] { net.cell(in({4}), {Var(), in({1, 5})}); }) == "[LSTMCell cell] c must be (5,) for x (4,), got (1, 5)");
}

TEST_CASE("unbatched inputs give unbatched outputs, as in PyTorch") {
  Place p(8, DType::f64);
  nn::Conv2d conv(p.f, 2, 3, 3);
  Var image = p.g.input(testing::inputs({2, 5, 5}, DType::f64));
  CHECK(conv(image).shape() == Shape{3, 3, 3});
  CHECK(nn::AvgPool2d(2)(image).shape() == Shape{2, 2, 2});
  nn::GRU gru(p.f, 3, 4, 2, true, true);
  const nn::GRUOutput o = gru(p.g.input(testing::inputs({6, 3}, DType::f64)));
  CHECK(o.output.shape() == Shape{6, 4});
  CHECK(o.h_n.shape() == Shape{2, 4});
  nn::GRUCell cell(p.f, 3, 4);
  CHECK(cell(p.g.input(testing::inputs({3}, DType::f64))).shape() == Shape{4});
}
