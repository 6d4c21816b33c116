// Test helpers for tests/optim: give parameters exactly chosen gradients, and read tensors back.
#pragma once

#include <utility>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::testing {

// Gives each parameter exactly the gradient G beside it (in the parameter's dtype): the backward
// of sum(W_k * G_k) is 1 * G_k for W_k, bit for bit. Drops the old tape and gradients.
inline void give_gradients(Graph& g, const std::vector<std::pair<Var, std::vector<double>>>& grads) {
  g.zero_grad();
  for (const auto& [w, grad] : grads) {  // one backward each: the parameters' dtypes may differ
    g.clear();
    g.backward(ops::sum(ops::mul(w, g.input(Tensor::from_doubles(grad, w.shape(), w.dtype(), w.device())))));
  }
  g.clear();
}

inline std::vector<double> doubles(const Tensor& t) { return t.to_doubles(); }

}  // namespace tapegrad::testing
