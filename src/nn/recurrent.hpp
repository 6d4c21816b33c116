// Recurrent layers, PyTorch's of the same names, parameter names, gate order and initialisation,
// so a state dict loads both ways with load_state_dict(strict=True):
//
//   LSTMCell(input, hidden, bias)   x (B, input), {h, c} each (B, hidden) -> {h', c'}
//       gates = x W_ih^T + b_ih + h W_hh^T + b_hh  (B, 4 hidden), quarters i, f, g, o in that order:
//       c' = sigmoid(f) * c + sigmoid(i) * tanh(g),  h' = sigmoid(o) * tanh(c')
//       weight_ih (4 hidden, input), weight_hh (4 hidden, hidden), bias_ih, bias_hh (4 hidden,)
//   GRUCell(input, hidden, bias)    x (B, input), h (B, hidden) -> h'
//       thirds r, z, n of gx = x W_ih^T + b_ih and gh = h W_hh^T + b_hh (B, 3 hidden):
//       r = sigmoid(gx_r + gh_r), z = sigmoid(gx_z + gh_z), n = tanh(gx_n + r * gh_n),
//       h' = (1 - z) * n + z * h;  weight_ih (3 hidden, input), weight_hh (3 hidden, hidden), biases (3 hidden,)
//   LSTM / GRU(input, hidden, num_layers, bias, batch_first, dropout, bidirectional)
//       x (T, B, input), or (B, T, input) with batch_first, or (T, input) unbatched
//       -> output (T, B, D hidden) (the last layer's h at every step; (B, T, D hidden) with
//          batch_first) and the final states (L D, B, hidden), D = 2 if bidirectional else 1;
//       per layer l the cell's parameters named weight_ih_l<l>, weight_hh_l<l>, bias_ih_l<l>,
//       bias_hh_l<l> (and ..._l<l>_reverse for the backward direction), layer l > 0 reading the
//       previous layer's output (D hidden); dropout on each layer's output but the last's, in training.
//
// A state left out is zeros, as in PyTorch. Default initialisation (torch.nn's): every parameter
// U(-1/sqrt(hidden), 1/sqrt(hidden)), drawn in registration order. Each step is ops (linear, split,
// sigmoid, tanh, mul, add): the engine differentiates the unrolled sequence. An input's projection
// x W_ih^T + b_ih is one product over every step; the steps slice it.
#pragma once

#include <vector>

#include "tapegrad/nn/module.hpp"

namespace tapegrad::nn {

// An LSTM's state: h and c, each (B, hidden) for a cell and (L D, B, hidden) for an LSTM.
struct LSTMState {
  Var h, c;
};

// What LSTMCell and GRUCell share (PyTorch's RNNCellBase): sizes and parameters.
class RNNCellBase : public Module {
 public:
  Var weight_ih, weight_hh, bias_ih, bias_hh;  // biases undefined when built without them
  int64_t input_size, hidden_size;

 protected:
  RNNCellBase(Factory& f, const char* kind, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias);
};

class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(Factory& f, int64_t input_size, int64_t hidden_size, bool bias = true);
  const char* kind() const override { return "LSTMCell"; }
  // x (B, input) [, state each (B, hidden)] -> {h', c'}; x (input,) unbatched -> each (hidden,)
  LSTMState operator()(Var x, LSTMState state = {});
};

class GRUCell : public RNNCellBase {
 public:
  GRUCell(Factory& f, int64_t input_size, int64_t hidden_size, bool bias = true);
  const char* kind() const override { return "GRUCell"; }
  // x (B, input) [, h (B, hidden)] -> h'; x (input,) unbatched -> (hidden,)
  Var operator()(Var x, Var h = Var());
};

// One layer's and direction's parameters of an LSTM or a GRU.
struct RecurrentWeights {
  Var weight_ih, weight_hh, bias_ih, bias_hh;
};

struct LSTMOutput {
  Var output;         // (T, B, D hidden), or (B, T, D hidden) with batch_first
  LSTMState state;    // h_n, c_n: (L D, B, hidden)
};

struct GRUOutput {
  Var output;  // as LSTMOutput's
  Var h_n;     // (L D, B, hidden)
};

// What LSTM and GRU share: their sizes and parameters (the walk over layers, directions and steps
// is in recurrent.cpp).
class RecurrentBase : public Module {
 public:
  int64_t input_size, hidden_size;
  int num_layers;
  bool bias, batch_first;
  double dropout;
  bool bidirectional;
  int directions() const { return bidirectional ? 2 : 1; }
  // weights[l * directions() + d]: layer l, direction d (1: over the reversed sequence)
  std::vector<RecurrentWeights> weights;
  Generator* generator;  // dropout's, between layers

 protected:
  RecurrentBase(Factory& f, const char* kind, int64_t gates, int64_t input_size, int64_t hidden_size, int num_layers,
                bool bias, bool batch_first, double dropout, bool bidirectional);
};

class LSTM : public RecurrentBase {
 public:
  LSTM(Factory& f, int64_t input_size, int64_t hidden_size, int num_layers = 1, bool bias = true,
       bool batch_first = false, double dropout = 0.0, bool bidirectional = false);
  const char* kind() const override { return "LSTM"; }
  LSTMOutput operator()(Var x, LSTMState state = {});
};

class GRU : public RecurrentBase {
 public:
  GRU(Factory& f, int64_t input_size, int64_t hidden_size, int num_layers = 1, bool bias = true,
      bool batch_first = false, double dropout = 0.0, bool bidirectional = false);
  const char* kind() const override { return "GRU"; }
  GRUOutput operator()(Var x, Var h0 = Var());
};

}  // namespace tapegrad::nn
