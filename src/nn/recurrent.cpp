// Recurrent layers (recurrent.hpp): the cells' steps, and LSTM's and GRU's walk over layers,
// directions and steps, all of ops; sizes and shapes checked with the layer's name.
#include "tapegrad/nn/recurrent.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "tapegrad/nn/checks.hpp"
#include "tapegrad/nn/init.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::nn {

using detail::fresh;
using detail::need_positive;

namespace {

constexpr int64_t kLSTMGates = 4, kGRUGates = 3;

std::string str(int64_t n) { return std::to_string(n); }

// The sizes every recurrent layer checks before it makes a parameter; returns gates * hidden.
int64_t checked_sizes(const char* kind, int64_t gates, int64_t input_size, int64_t hidden_size) {
  need_positive(kind, "input_size", input_size);
  need_positive(kind, "hidden_size", hidden_size);
  return detail::times(kind, "hidden_size", gates, hidden_size);
}

// One cell's parameters, named with `suffix` ("" for a cell, "_l1", "_l0_reverse" for a layer's):
// weight_ih (gates H, in), weight_hh (gates H, H), bias_ih, bias_hh (gates H,), made by
// make(name, shape) in this order (PyTorch's).
template <class Make>
RecurrentWeights make_weights(Make&& make, int64_t gates, int64_t in, int64_t hidden, bool bias,
                              const std::string& suffix) {
  RecurrentWeights w;
  w.weight_ih = make("weight_ih" + suffix, Shape{gates * hidden, in});
  w.weight_hh = make("weight_hh" + suffix, Shape{gates * hidden, hidden});
  if (bias) {
    w.bias_ih = make("bias_ih" + suffix, Shape{gates * hidden});
    w.bias_hh = make("bias_hh" + suffix, Shape{gates * hidden});
  }
  return w;
}

// ---- the steps, from gx = x W_ih^T + b_ih (B, gates H), the input's part of the gates

// gates = gx + h W_hh^T + b_hh (B, 4H), quarters i, f, g, o:
// c' = sigmoid(f) c + sigmoid(i) tanh(g),  h' = sigmoid(o) tanh(c')
LSTMState lstm_step(Var gx, const LSTMState& s, const RecurrentWeights& w, int64_t H) {
  const std::vector<Var> q = ops::split(gx + ops::linear(s.h, w.weight_hh, w.bias_hh), {H, H, H, H}, -1);
  Var c = ops::sigmoid(q[1]) * s.c + ops::sigmoid(q[0]) * ops::tanh(q[2]);
  return {ops::sigmoid(q[3]) * ops::tanh(c), c};
}

// gh = h W_hh^T + b_hh (B, 3H); thirds r, z, n of gx and gh:
// r = sigmoid(gx_r + gh_r), z = sigmoid(gx_z + gh_z), n = tanh(gx_n + r gh_n), h' = (1 - z) n + z h
Var gru_step(Var gx, Var h, const RecurrentWeights& w, int64_t H) {
  const std::vector<Var> x3 = ops::split(gx, {H, H, H}, -1);
  const std::vector<Var> h3 = ops::split(ops::linear(h, w.weight_hh, w.bias_hh), {H, H, H}, -1);
  Var r = ops::sigmoid(x3[0] + h3[0]), z = ops::sigmoid(x3[1] + h3[1]);
  Var n = ops::tanh(x3[2] + r * h3[2]);
  return (1.0 - z) * n + z * h;
}

// A cell's x (B, in) or (in,) and state parts (B, H) or (H,), checked; unbatched ones get a batch
// axis of 1, which `done` takes away again from the results.
struct CellInput {
  Var x;
  bool unbatched;
  Shape given;  // x's shape as given
  Var batched(Var part) const { return unbatched ? ops::unsqueeze(part, 0) : part; }
  Var done(Var part) const { return unbatched ? ops::squeeze(part, 0) : part; }
};

CellInput cell_input(const std::string& where, Var x, int64_t in) {
  const Shape& s = x.shape();
  if (!((s.ndim() == 2 || s.ndim() == 1) && s[s.ndim() - 1] == in))
    throw Error(where + "x must be (B, " + str(in) + ") or (" + str(in) + ",), got " + s.str());
  return {s.ndim() == 1 ? ops::unsqueeze(x, 0) : x, s.ndim() == 1, s};
}

// state part `name` of a cell: (B, H) for x (B, in), (H,) for an unbatched x; zeros when undefined
Var cell_state(const std::string& where, const CellInput& in, Var part, const char* name, int64_t H) {
  const int64_t B = in.x.shape()[0];
  if (!part.defined()) return in.x.graph().input(Tensor::zeros(Shape{B, H}, in.x.dtype(), in.x.device()));
  const Shape want = in.unbatched ? Shape{H} : Shape{B, H};
  if (!(part.shape() == want))
    throw Error(where + name + " must be " + want.str() + " for x " + in.given.str() + ", got " + part.shape().str());
  return in.batched(part);
}

// ---- LSTM's and GRU's walk

// x as (T, B, in) (or (B, T, in) with batch_first: time on axis `time`), an unbatched (T, in) given
// a batch axis of 1, checked with the layer's name.
struct SequenceInput {
  Var x;
  bool unbatched;
  int time;
  int64_t steps, batch;
};

SequenceInput sequence_input(const RecurrentBase& m, const std::string& where, Var x) {
  const Shape& s = x.shape();
  const std::string in = str(m.input_size);
  const std::string batched = m.batch_first ? "(B, T, " + in + ")" : "(T, B, " + in + ")";
  if (!((s.ndim() == 3 || s.ndim() == 2) && s[s.ndim() - 1] == m.input_size))
    throw Error(where + "x must be " + batched + " or (T, " + in + ") unbatched, got " + s.str());
  const int time = m.batch_first ? 1 : 0;
  SequenceInput out{s.ndim() == 2 ? ops::unsqueeze(x, 1 - time) : x, s.ndim() == 2, time, 0, 0};
  out.steps = out.x.shape()[time];
  out.batch = out.x.shape()[1 - time];
  if (out.steps == 0) throw Error(where + "x " + s.str() + " has no time steps");
  return out;
}

// A given initial state part (L D, B, H), or (L D, H) for an unbatched x, checked and made (L D, B, H).
Var sequence_state(const RecurrentBase& m, const std::string& where, const SequenceInput& in, Var part,
                   const char* name) {
  if (!part.defined()) return part;
  const int64_t layers = int64_t{m.num_layers} * m.directions();
  const Shape want = in.unbatched ? Shape{layers, m.hidden_size} : Shape{layers, in.batch, m.hidden_size};
  if (!(part.shape() == want))
    throw Error(where + name + " must be " + want.str() + " (num_layers * directions" +
                (in.unbatched ? "" : ", batch") + ", hidden_size), got " + part.shape().str());
  return in.unbatched ? ops::unsqueeze(part, 1) : part;
}

// The layers, directions and steps: for layer l and direction d (k = l D + d), gx = input W_ih^T +
// b_ih over every step at once, then step(gx_t (B, gates H), parts, weights) -> parts at t
// (parts[0] is h) for t forward, or backward for d = 1, from the initial parts' slice k or zeros.
// Returns the last layer's h at every step ((T, B, D H) or (B, T, D H)) and each part's finals
// (L D, B, H).
template <class Step>
std::pair<Var, std::vector<Var>> unroll(const RecurrentBase& m, const SequenceInput& in,
                                        const std::vector<Var>& initial, Step&& step) {
  const int D = m.directions();
  const int64_t T = in.steps, B = in.batch, H = m.hidden_size;
  Graph& g = in.x.graph();
  const Var zeros = g.input(Tensor::zeros(Shape{B, H}, in.x.dtype(), in.x.device()));
  std::vector<std::vector<Var>> finals(initial.size());
  Var layer_in = in.x;
  for (int l = 0; l < m.num_layers; ++l) {
    std::vector<Var> outputs;  // per direction: (T, B, H) or (B, T, H)
    for (int d = 0; d < D; ++d) {
      const int k = l * D + d;
      const RecurrentWeights& w = m.weights[static_cast<size_t>(k)];
      const Var gx = ops::linear(layer_in, w.weight_ih, w.bias_ih);  // (T, B, gates H) or (B, T, gates H)
      const int64_t width = gx.shape()[2];
      std::vector<Var> parts;
      for (const Var& s : initial) parts.push_back(s.defined() ? ops::reshape(ops::slice(s, 0, k, k + 1), {B, H}) : zeros);
      std::vector<Var> hs(static_cast<size_t>(T));
      for (int64_t i = 0; i < T; ++i) {
        const int64_t t = d == 0 ? i : T - 1 - i;
        parts = step(ops::reshape(ops::slice(gx, in.time, t, t + 1), {B, width}), parts, w);
        hs[static_cast<size_t>(t)] = parts[0];
      }
      outputs.push_back(ops::stack(hs, in.time));
      for (size_t j = 0; j < parts.size(); ++j) finals[j].push_back(parts[j]);
    }
    layer_in = D == 1 ? outputs[0] : ops::concat(outputs, -1);
    if (l + 1 < m.num_layers && m.dropout > 0 && m.training())
      layer_in = ops::dropout(layer_in, m.dropout, *m.generator, true);
  }
  std::vector<Var> states;
  for (const std::vector<Var>& part : finals) states.push_back(ops::stack(part, 0));
  return {layer_in, states};
}

}  // namespace

// ---- the cells
RNNCellBase::RNNCellBase(Factory& f, const char* kind, int64_t gates, int64_t in, int64_t hidden, bool bias)
    : input_size(in), hidden_size(hidden) {
  checked_sizes(kind, gates, in, hidden);
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  auto make = [&](const std::string& name, const Shape& shape) {
    Var p = register_parameter(name, fresh(f, kind, name.c_str(), shape), f.graph);
    init::uniform_(p, -bound, bound, f.generator);
    return p;
  };
  const RecurrentWeights w = make_weights(make, gates, in, hidden, bias, "");
  weight_ih = w.weight_ih, weight_hh = w.weight_hh, bias_ih = w.bias_ih, bias_hh = w.bias_hh;
}

LSTMCell::LSTMCell(Factory& f, int64_t in, int64_t hidden, bool bias)
    : RNNCellBase(f, "LSTMCell", kLSTMGates, in, hidden, bias) {}

LSTMState LSTMCell::operator()(Var x, LSTMState state) {
  const auto s = scope(x.graph());
  const CellInput in = cell_input(where(), x, input_size);
  const LSTMState from{cell_state(where(), in, state.h, "h", hidden_size), cell_state(where(), in, state.c, "c", hidden_size)};
  const LSTMState to = lstm_step(ops::linear(in.x, weight_ih, bias_ih), from, {weight_ih, weight_hh, bias_ih, bias_hh},
                                 hidden_size);
  return {labelled(in.done(to.h)), in.done(to.c)};
}

GRUCell::GRUCell(Factory& f, int64_t in, int64_t hidden, bool bias)
    : RNNCellBase(f, "GRUCell", kGRUGates, in, hidden, bias) {}

Var GRUCell::operator()(Var x, Var h) {
  const auto s = scope(x.graph());
  const CellInput in = cell_input(where(), x, input_size);
  const Var from = cell_state(where(), in, h, "h", hidden_size);
  return labelled(in.done(gru_step(ops::linear(in.x, weight_ih, bias_ih), from,
                                   {weight_ih, weight_hh, bias_ih, bias_hh}, hidden_size)));
}

// ---- LSTM and GRU
RecurrentBase::RecurrentBase(Factory& f, const char* kind, int64_t gates, int64_t in, int64_t hidden, int layers,
                             bool with_bias, bool first, double p, bool both)
    : input_size(in), hidden_size(hidden), num_layers(layers), bias(with_bias), batch_first(first), dropout(p),
      bidirectional(both), generator(&f.generator) {
  checked_sizes(kind, gates, in, hidden);
  need_positive(kind, "num_layers", layers);
  detail::need_probability(kind, p);
  const int64_t wide = detail::times(kind, "hidden_size", directions(), hidden);  // a later layer's input
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden));
  auto make = [&](const std::string& name, const Shape& shape) {
    Var w = register_parameter(name, fresh(f, kind, name.c_str(), shape), f.graph);
    init::uniform_(w, -bound, bound, f.generator);
    return w;
  };
  for (int l = 0; l < layers; ++l)
    for (int d = 0; d < directions(); ++d)
      weights.push_back(make_weights(make, gates, l == 0 ? in : wide, hidden, with_bias,
                                     "_l" + std::to_string(l) + (d == 1 ? "_reverse" : "")));
}

LSTM::LSTM(Factory& f, int64_t in, int64_t hidden, int layers, bool with_bias, bool first, double p, bool both)
    : RecurrentBase(f, "LSTM", kLSTMGates, in, hidden, layers, with_bias, first, p, both) {}

LSTMOutput LSTM::operator()(Var x, LSTMState state) {
  const auto s = scope(x.graph());
  const SequenceInput in = sequence_input(*this, where(), x);
  const std::vector<Var> initial{sequence_state(*this, where(), in, state.h, "h0"),
                                 sequence_state(*this, where(), in, state.c, "c0")};
  const int64_t H = hidden_size;
  auto [out, finals] = unroll(*this, in, initial, [H](Var gx, const std::vector<Var>& parts, const RecurrentWeights& w) {
    const LSTMState next = lstm_step(gx, {parts[0], parts[1]}, w, H);
    return std::vector<Var>{next.h, next.c};
  });
  if (in.unbatched) return {labelled(ops::squeeze(out, 1 - in.time)), {ops::squeeze(finals[0], 1), ops::squeeze(finals[1], 1)}};
  return {labelled(out), {finals[0], finals[1]}};
}

GRU::GRU(Factory& f, int64_t in, int64_t hidden, int layers, bool with_bias, bool first, double p, bool both)
    : RecurrentBase(f, "GRU", kGRUGates, in, hidden, layers, with_bias, first, p, both) {}

GRUOutput GRU::operator()(Var x, Var h0) {
  const auto s = scope(x.graph());
  const SequenceInput in = sequence_input(*this, where(), x);
  const int64_t H = hidden_size;
  auto [out, finals] = unroll(*this, in, {sequence_state(*this, where(), in, h0, "h0")},
                              [H](Var gx, const std::vector<Var>& parts, const RecurrentWeights& w) {
                                return std::vector<Var>{gru_step(gx, parts[0], w, H)};
                              });
  if (in.unbatched) return {labelled(ops::squeeze(out, 1 - in.time)), ops::squeeze(finals[0], 1)};
  return {labelled(out), finals[0]};
}

}  // namespace tapegrad::nn
