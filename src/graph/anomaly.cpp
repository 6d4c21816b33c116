// Anomaly mode (see anomaly.hpp).
//
// Note [anomaly mode]
// A NaN shows up as a NaN loss several ops after the one that made it, and a NaN gradient in a
// parameter after the whole backward has spread it. Anomaly mode stops at the first: with
// Graph::set_detect_anomaly(true), Graph::record checks each op's output before it records it, and
// the engine's door checks each contribution as it arrives (BackwardOptions::detect_anomaly alone
// checks the backward's). Since every op is checked, the first to throw is the first op whose
// output is not finite; the message says whether its inputs were (a parameter or an input may
// bring the NaN in) and, in the backward, whether the gradient the op received was. Off, each
// check is one branch on a flag; on, each reads every element on the host, as PyTorch's mode is
// slow too: it is for finding a bug, not for training.
#include "tapegrad/graph/anomaly.hpp"

#include <cmath>
#include <vector>

namespace tapegrad {

namespace {

template <class T>
NonFinite scan(const T* p, int64_t n) {
  NonFinite r;
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(p[i]);
    if (std::isfinite(x)) continue;
    (std::isnan(x) ? r.nan : r.inf) += 1;
    if (r.first < 0) r.first = i;
  }
  return r;
}

std::string counted(const NonFinite& f, int64_t numel) {
  return std::to_string(f.nan) + " NaN and " + std::to_string(f.inf) + " inf among its " + std::to_string(numel) +
         " elements, the first at element " + std::to_string(f.first);
}

// "'x' (parameter -1)" or "value 4 (activation)", with " in scope \"h.0\"" when it has one
std::string value_name(const Graph& g, int32_t id) {
  const Value& v = g.value(id);
  std::string s = v.label.empty() ? "value " + std::to_string(id) + " (" + value_kind_name(v.kind) + ")"
                                  : "'" + v.label + "' (" + value_kind_name(v.kind) + " " + std::to_string(id) + ")";
  if (v.scope != 0) s += " in scope \"" + g.scope_name(v.scope) + "\"";
  return s;
}

}  // namespace

NonFinite non_finite(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return {};
  if (t.device().is_cpu() && t.dtype() == DType::f32) return scan(static_cast<const float*>(t.raw_data()), t.numel());
  if (t.device().is_cpu() && t.dtype() == DType::f64) return scan(static_cast<const double*>(t.raw_data()), t.numel());
  const std::vector<double> v = t.to_doubles();
  return scan(v.data(), static_cast<int64_t>(v.size()));
}

void check_output(const Graph& g, const char* op, const Tensor& out, std::span<const Var> inputs,
                  const std::string& scope) {
  const NonFinite f = non_finite(out);
  if (!f.any()) return;
  std::string s = std::string("[anomaly] ") + op + " made NaN or inf" + (scope.empty() ? "" : " in scope \"" + scope + "\"") +
                  ": its output " + out.shape().str() + " holds " + counted(f, out.numel()) + ". Its inputs: ";
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = g.checked(inputs[k]).data;
    const NonFinite in = non_finite(x);
    s += (k ? "; " : "") + std::string("input ") + std::to_string(k) + " " + value_name(g, inputs[k].id()) + " " +
         (in.any() ? "already held " + std::to_string(in.nan) + " NaN and " + std::to_string(in.inf) + " inf" : "finite");
  }
  throw Error(s);
}

void BackwardContext::check_anomaly(int k, const Tensor& contribution, const char* what) const {
  const NonFinite f = non_finite(contribution);
  if (!f.any()) return;
  const Value& out = g_.value(node_->output);
  throw Error(std::string("[anomaly] the backward of ") + node_->op + " (node " + std::to_string(node_index_) + ", " +
              value_name(g_, node_->output) + ") gave input " + std::to_string(k) + " " +
              value_name(g_, node_->inputs[k]) + " " + what + " " + contribution.shape().str() + " holding " +
              counted(f, contribution.numel()) + "; the gradient it received was " +
              (non_finite(out.sparse_grad.defined() ? out.sparse_grad.rows : out.grad).any() ? "not finite already"
                                                                                              : "finite"));
}

}  // namespace tapegrad
