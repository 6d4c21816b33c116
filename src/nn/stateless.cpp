// Modules without parameters (stateless.hpp): one op each, in the module's scope.
#include "tapegrad/nn/stateless.hpp"

namespace tapegrad::nn {

Var ReLU::operator()(Var x) {
  const auto s = scope(x.graph());
  return labelled(ops::relu(x));
}

Var GELU::operator()(Var x) {
  const auto s = scope(x.graph());
  return labelled(ops::gelu(x, approximate));
}

Var Tanh::operator()(Var x) {
  const auto s = scope(x.graph());
  return labelled(ops::tanh(x));
}

Var Sigmoid::operator()(Var x) {
  const auto s = scope(x.graph());
  return labelled(ops::sigmoid(x));
}

Var SiLU::operator()(Var x) {
  const auto s = scope(x.graph());
  return labelled(ops::silu(x));
}

Var Softmax::operator()(Var x) {
  const auto s = scope(x.graph());
  return labelled(ops::softmax(x, dim));
}

Var LogSoftmax::operator()(Var x) {
  const auto s = scope(x.graph());
  return labelled(ops::log_softmax(x, dim));
}

Var Flatten::operator()(Var x) {
  const auto s = scope(x.graph());
  return labelled(ops::flatten(x, start_dim, end_dim));
}

}  // namespace tapegrad::nn
