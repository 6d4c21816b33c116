// Anomaly mode (torch.autograd.detect_anomaly): every op's output checked for NaN and inf as it
// is recorded, and every gradient contribution as it passes the engine's door; the first one that
// holds either throws, naming the op, the value, its label and its scope (Note [anomaly mode] in
// anomaly.cpp). Off by default: Graph::set_detect_anomaly(true) turns on both checks,
// BackwardOptions::detect_anomaly the backward's alone.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "tapegrad/graph/graph.hpp"

namespace tapegrad {

// The non-finite elements of a tensor: how many are NaN and how many infinite, and where the first
// of either is (-1: none). Integer tensors have none. Reads the tensor on the host.
struct NonFinite {
  int64_t nan = 0, inf = 0, first = -1;
  bool any() const { return first >= 0; }
};
NonFinite non_finite(const Tensor& t);

// Throws "[anomaly] OP made NaN or inf: ..." when `out`, which `op` made from `inputs` in the scope
// named `scope`, holds a NaN or an inf; says which of the inputs were finite.
void check_output(const Graph& g, const char* op, const Tensor& out, std::span<const Var> inputs,
                  const std::string& scope);

}  // namespace tapegrad
