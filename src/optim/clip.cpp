// Gradient transforms (see clip.hpp): a device-side sum of squares per gradient, one read back
// per device, and in-place scaling or clamping through the gradients' own bytes.
#include "tapegrad/optim/clip.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/optim/param_group.hpp"

namespace tapegrad::optim {
namespace {

// The parameters that have a gradient, each once, in order; their gradients f32 or f64.
std::vector<Var> with_gradients(const char* op, const std::vector<Var>& params) {
  std::vector<Var> out;
  std::set<std::pair<const Graph*, int32_t>> seen;
  for (size_t k = 0; k < params.size(); ++k) {
    const Var& p = params[k];
    if (!seen.emplace(&p.graph(), p.id()).second) continue;
    const RowSparse* sparse = p.sparse_grad();
    const Tensor& entries = sparse ? sparse->rows : p.grad();
    if (!entries.defined()) continue;
    if (entries.dtype() != DType::f32 && entries.dtype() != DType::f64)
      throw Error(std::string("[") + op + "] the gradient of " + parameter_name(k, p) + " is " +
                  dtype_name(entries.dtype()) + "; " + op + " takes f32 and f64 gradients");
    out.push_back(p);
  }
  return out;
}

// What a gradient's entries are without changing it: the dense gradient or the row-sparse rows.
const Tensor& entries_of(const Var& p) {
  const RowSparse* sparse = p.sparse_grad();
  return sparse ? sparse->rows : p.grad();
}

double total_norm(const std::vector<Var>& params) {
  // Per device (in order of first appearance): the sums of squares into one (k,) f64 tensor there,
  // their exact sum (kernels::sum_all is correctly rounded in f64), one scalar read back.
  std::vector<std::pair<Device, std::vector<const Tensor*>>> by_device;
  for (const Var& p : params) {
    const Tensor& e = entries_of(p);
    auto it = std::find_if(by_device.begin(), by_device.end(), [&](const auto& d) { return d.first == e.device(); });
    if (it == by_device.end()) it = by_device.insert(by_device.end(), {e.device(), {}});
    it->second.push_back(&e);
  }
  double sum = 0.0;
  for (const auto& [device, entries] : by_device) {
    Tensor sums = Tensor::empty(Shape{static_cast<int64_t>(entries.size())}, DType::f64, device);
    for (size_t i = 0; i < entries.size(); ++i) kernels::sum_squares(*entries[i], sums, static_cast<int64_t>(i));
    Tensor total = Tensor::empty(Shape{}, DType::f64, device);
    kernels::sum_all(sums, total);
    sum += total.item();
  }
  return std::sqrt(sum);
}

void check_limit(const char* op, const char* name, double value) {
  if (!(std::isfinite(value) && value >= 0))
    throw Error(std::string("[") + op + "] " + name + " must be a finite number >= 0, got " + shortest_text(value));
}

void scale_all(const std::vector<Var>& params, double factor) {
  for (const Var& p : params) {
    Tensor e = p.grad_entries_for_write();
    kernels::scale(e, factor, e);
  }
}

}  // namespace

double grad_norm(const std::vector<Var>& params) { return total_norm(with_gradients("grad_norm", params)); }

double clip_grad_norm(const std::vector<Var>& params, double max_norm) {
  check_limit("clip_grad_norm", "max_norm", max_norm);
  const std::vector<Var> grads = with_gradients("clip_grad_norm", params);
  const double total = total_norm(grads);
  const double coefficient = max_norm / (total + 1e-6);
  if (!(coefficient >= 1.0)) scale_all(grads, coefficient);  // below 1, or NaN (PyTorch multiplies by it too)
  return total;
}

void clip_grad_value(const std::vector<Var>& params, double clip_value) {
  check_limit("clip_grad_value", "clip_value", clip_value);
  for (const Var& p : with_gradients("clip_grad_value", params)) {
    Tensor e = p.grad_entries_for_write();
    kernels::clamp(e, -clip_value, clip_value, e);
  }
}

void scale_grads(const std::vector<Var>& params, double factor) {
  if (!std::isfinite(factor))
    throw Error("[scale_grads] factor must be a finite number, got " + shortest_text(factor));
  scale_all(with_gradients("scale_grads", params), factor);
}

}  // namespace tapegrad::optim
