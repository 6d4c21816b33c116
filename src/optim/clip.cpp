// Gradient transforms (see clip.hpp): device-side sums of squares of all the gradients, one read
// back per device, and in-place scaling or clamping through the gradients' own bytes; the sums and
// the scaling are multi-tensor kernel calls, one per device.
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

// The tensors grouped by device, in order of first appearance (a multi-tensor kernel takes one device).
template <class P>
std::vector<std::vector<P>> by_device(const std::vector<P>& tensors) {
  std::vector<std::vector<P>> groups;
  for (P t : tensors) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.front()->device() == t->device(); });
    if (it == groups.end()) groups.push_back({t});
    else it->push_back(t);
  }
  return groups;
}

// The chunks' sums of squares of tensors all on one device (Note [sum of squares order] in
// kernels/optim_ops.hpp), a (C,) f64 tensor there; their correctly rounded sum is the total.
Tensor chunk_sums(const std::vector<const Tensor*>& entries, const Device& device) {
  int64_t chunks = 0;
  for (const Tensor* e : entries) chunks += kernels::sum_squares_chunk_count(e->numel());
  Tensor sums = Tensor::zeros(Shape{std::max<int64_t>(chunks, 1)}, DType::f64, device);  // a +0 for no elements
  if (chunks > 0) kernels::sum_squares_chunks(entries, sums);
  return sums;
}

double total_norm(const std::vector<Var>& params) {
  // Per device: the chunks' sums there (one multi-tensor call) and their correctly rounded sum
  // (kernels::sum_all), read back; the devices' totals added in double.
  std::vector<const Tensor*> entries;
  for (const Var& p : params) entries.push_back(&entries_of(p));
  double sum = 0.0;
  for (const std::vector<const Tensor*>& on_device : by_device(entries)) {
    const Device device = on_device.front()->device();
    Tensor total = Tensor::empty(Shape{}, DType::f64, device);
    kernels::sum_all(chunk_sums(on_device, device), total);
    sum += total.item();
  }
  return std::sqrt(sum);
}

void check_limit(const char* op, const char* name, double value) {
  if (!(std::isfinite(value) && value >= 0))
    throw Error(std::string("[") + op + "] " + name + " must be a finite number >= 0, got " + shortest_text(value));
}

void scale_all(const std::vector<Var>& params, double factor) {
  // Every gradient made its own first (grad_entries_for_write may copy), then one multi-tensor
  // call per device.
  std::vector<Tensor> entries;
  entries.reserve(params.size());
  for (const Var& p : params) entries.push_back(p.grad_entries_for_write());
  std::vector<Tensor*> all;
  for (Tensor& e : entries) all.push_back(&e);
  for (const std::vector<Tensor*>& on_device : by_device(all)) kernels::scale_many(on_device, factor);
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

namespace {

// The device all of `grads`' entries are on, or an error naming two.
Device one_device(const char* op, const std::vector<const Tensor*>& entries) {
  const Device device = entries.front()->device();
  for (const Tensor* e : entries)
    if (!(e->device() == device))
      throw Error(std::string("[") + op + "] the gradients are on " + device.str() + " and " + e->device().str() +
                  "; it takes one device (clip_grad_norm takes several)");
  return device;
}

// norm and factor (clip_factor) of the gradients' entries, all on one device, on that device.
ClipFactor factor_of(const std::vector<const Tensor*>& entries, const Device& device, double max_norm) {
  Tensor sumsq = Tensor::empty(Shape{}, DType::f64, device);
  ClipFactor out{Tensor::empty(Shape{}, DType::f64, device), Tensor::empty(Shape{}, DType::f64, device)};
  kernels::sum_all(chunk_sums(entries, device), sumsq);
  kernels::clip_factor(sumsq, max_norm, out.norm, out.factor);
  return out;
}

}  // namespace

ClipFactor clip_grad_factor_on_device(const std::vector<Var>& params, double max_norm) {
  const char* op = "clip_grad_factor_on_device";
  check_limit(op, "max_norm", max_norm);
  const std::vector<Var> grads = with_gradients(op, params);
  if (grads.empty())
    return {Tensor::from_doubles({0.0}, Shape{}, DType::f64), Tensor::from_doubles({1.0}, Shape{}, DType::f64)};
  std::vector<const Tensor*> read;
  for (const Var& p : grads) read.push_back(&entries_of(p));
  return factor_of(read, one_device(op, read), max_norm);
}

Tensor clip_grad_norm_on_device(const std::vector<Var>& params, double max_norm) {
  const char* op = "clip_grad_norm_on_device";
  check_limit(op, "max_norm", max_norm);
  const std::vector<Var> grads = with_gradients(op, params);
  if (grads.empty()) return Tensor::from_doubles({0.0}, Shape{}, DType::f64);
  std::vector<Tensor> entries;
  entries.reserve(grads.size());
  for (const Var& p : grads) entries.push_back(p.grad_entries_for_write());
  std::vector<const Tensor*> read;
  std::vector<Tensor*> write;
  for (Tensor& e : entries) {
    read.push_back(&e);
    write.push_back(&e);
  }
  const ClipFactor f = factor_of(read, one_device(op, read), max_norm);
  kernels::scale_many_by(write, f.factor);
  return f.norm;
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
