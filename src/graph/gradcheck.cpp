// Central-difference gradient check (see gradcheck.hpp).
#include "tapegrad/graph/gradcheck.hpp"

#include <cmath>

namespace tapegrad {

namespace {

double loss_value(Graph& g, const LossFn& loss) {
  size_t mark = g.mark();
  double v;
  {
    NoGrad no_grad(g);
    v = loss(g).value().item();
  }
  g.rewind(mark);
  return v;
}

// Sets cell i of a host or device parameter tensor to `value` (converted to its dtype).
void set_cell(Tensor& p, int64_t i, double value) {
  Tensor host = p.to(Device::cpu());
  if (p.dtype() == DType::f64) host.mutable_data<double>()[i] = value;
  else if (p.dtype() == DType::f32) host.mutable_data<float>()[i] = static_cast<float>(value);
  else throw Error(std::string("[gradcheck] parameters must be f64 or f32, got ") + dtype_name(p.dtype()));
  if (!p.device().is_cpu()) p.copy_from(host);
}

}  // namespace

std::vector<Tensor> numerical_gradients(Graph& g, const LossFn& loss, double eps, const ProgressFn& progress) {
  std::vector<Tensor> grads;
  size_t total = 0, done = 0;
  for (Var param : g.parameters()) total += static_cast<size_t>(param.value().numel());
  for (Var param : g.parameters()) {
    Tensor p = param.value();  // shares storage with the parameter: nudges are seen by the forward
    std::vector<double> cells = p.to_doubles();
    std::vector<double> numeric(cells.size());
    for (size_t i = 0; i < cells.size(); ++i) {
      const double original = cells[i];
      set_cell(p, static_cast<int64_t>(i), original + eps);
      const double up = loss_value(g, loss);
      set_cell(p, static_cast<int64_t>(i), original - eps);
      const double down = loss_value(g, loss);
      set_cell(p, static_cast<int64_t>(i), original);
      numeric[i] = (up - down) / (2 * eps);
      if (progress) progress(++done, total);
    }
    grads.push_back(Tensor::from_doubles(numeric, p.shape(), p.dtype()));
  }
  return grads;
}

double max_gradient_error(const std::vector<Tensor>& analytic, const std::vector<Tensor>& numeric) {
  if (analytic.size() != numeric.size())
    throw Error("[gradcheck] " + std::to_string(analytic.size()) + " analytic gradients but " +
                std::to_string(numeric.size()) + " numeric ones");
  double worst = 0.0;
  bool any = false;
  for (size_t k = 0; k < analytic.size(); ++k) {
    if (!(analytic[k].shape() == numeric[k].shape()))
      throw Error("[gradcheck] parameter " + std::to_string(k) + ": analytic gradient " + analytic[k].shape().str() +
                  " but numeric " + numeric[k].shape().str());
    std::vector<double> a = analytic[k].to_doubles(), n = numeric[k].to_doubles();
    for (size_t i = 0; i < a.size(); ++i) {
      double e = std::fabs(a[i] - n[i]);
      if (!any || e > worst || std::isnan(e)) worst = e;
      any = true;
    }
  }
  return worst;
}

std::vector<Tensor> analytic_gradients(Graph& g, const LossFn& loss, const BackwardOptions& options) {
  size_t mark = g.mark();
  g.zero_grad();
  Var l = loss(g);
  BackwardOptions keep = options;
  keep.retain_graph = true;  // the tape is rewound below; the caller's tape stays usable
  g.backward(l, keep);
  std::vector<Tensor> grads;
  for (Var p : g.parameters())
    grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor::zeros(p.shape(), p.dtype(), p.device()));
  g.rewind(mark);
  return grads;
}

double gradcheck(Graph& g, const LossFn& loss, double eps) {
  std::vector<Tensor> a = analytic_gradients(g, loss);
  return max_gradient_error(a, numerical_gradients(g, loss, eps));
}

}  // namespace tapegrad
