// Central-difference gradient check (see gradcheck.hpp).
#include "tapegrad/graph/gradcheck.hpp"

#include <cmath>
#include <cstdio>

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

std::string name_of(const Var& v) {
  const Value& value = v.graph().value(v.id());
  if (!value.label.empty()) return value.label;
  return v.id() < 0 ? "parameter " + std::to_string(-v.id() - 1) : "value " + std::to_string(v.id());
}

// What a check may nudge: f64 values that take a gradient.
void need_checkable(const Var& v) {
  const Value& value = v.graph().value(v.id());
  const std::string what = "'" + name_of(v) + "' (" + value_kind_name(value.kind) + ")";
  if (value.kind == ValueKind::activation)
    throw Error("[gradcheck] " + what + " is an op's result, which the loss function records anew: check the "
                "parameters or inputs it is computed from");
  if (!value.requires_grad)
    throw Error("[gradcheck] " + what + " takes no gradient: check parameters, or inputs made with "
                "g.input(tensor, label, true)");
  if (value.data.dtype() != DType::f64)
    throw Error("[gradcheck] " + what + " is " + dtype_name(value.data.dtype()) +
                ": central differences need f64 (in f32 a nudge of 1e-6 is a few rounding steps, so the check "
                "would measure rounding); build the model in f64, as torch.autograd.gradcheck asks for double");
}

// Element i of an f64 tensor, set to `value`. On the host the write is not counted (the check
// puts back the original bits before anything reads the value again); on a device it goes through
// copy_from, which counts it.
void set_element(const Tensor& t, int64_t i, double value) {
  if (t.device().is_cpu()) {
    static_cast<double*>(t.raw_data())[i] = value;
    return;
  }
  Tensor host = t.to(Device::cpu());
  host.mutable_data<double>()[i] = value;
  Tensor(t).copy_from(host);
}

// d loss / d v for every element of v, as an f64 host tensor of v's shape.
Tensor numeric_of(Graph& g, const LossFn& loss, const Var& v, double eps, size_t& done, size_t total,
                  const ProgressFn& progress) {
  const Tensor& x = v.value();  // shares storage with the value: nudges are seen by the forward
  const std::vector<double> cells = x.to_doubles();
  std::vector<double> numeric(cells.size());
  for (size_t i = 0; i < cells.size(); ++i) {
    const int64_t at = static_cast<int64_t>(i);
    set_element(x, at, cells[i] + eps);
    const double up = loss_value(g, loss);
    set_element(x, at, cells[i] - eps);
    const double down = loss_value(g, loss);
    set_element(x, at, cells[i]);
    numeric[i] = (up - down) / (2 * eps);
    if (progress) progress(++done, total);
  }
  return Tensor::from_doubles(numeric, x.shape(), DType::f64);
}

// The gradients of `wrt` from one backward pass over loss(g); zeros where none arrived.
std::vector<Tensor> analytic_of(Graph& g, const LossFn& loss, const std::vector<Var>& wrt,
                                const BackwardOptions& options) {
  size_t mark = g.mark();
  g.zero_grad();
  Var l = loss(g);
  BackwardOptions keep = options;
  keep.retain_graph = true;  // the tape is rewound below; the caller's tape stays usable
  g.backward(l, keep);
  std::vector<Tensor> grads;
  for (const Var& v : wrt)
    grads.push_back(v.grad().defined() ? v.grad().clone() : Tensor::zeros(v.shape(), v.dtype(), v.device()));
  g.rewind(mark);
  return grads;
}

std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.12g", x);
  return text;
}

}  // namespace

double GradcheckTensor::error() const { return std::fabs(analytic - numeric); }

std::string GradcheckTensor::where() const {
  std::string out = "]";
  int64_t rest = worst;
  for (int d = shape.ndim(); d-- > 0;) {
    out = (d > 0 ? ", " : "") + std::to_string(rest % shape[d]) + out;
    rest /= shape[d];
  }
  return "[" + out;
}

bool GradcheckResult::passed() const {
  for (const GradcheckTensor& t : tensors)
    if (t.failed > 0) return false;
  return true;
}

double GradcheckResult::max_error() const {
  double worst = 0.0;
  for (const GradcheckTensor& t : tensors)
    if (t.error() > worst || std::isnan(t.error())) worst = t.error();
  return worst;
}

std::string GradcheckResult::str() const {
  std::string out = std::string("gradcheck ") + (passed() ? "passed" : "FAILED") + ": " +
                    std::to_string(tensors.size()) + (tensors.size() == 1 ? " tensor" : " tensors") + ", eps " +
                    number(options.eps) + ", atol " + number(options.atol) + ", rtol " + number(options.rtol) + "\n";
  for (const GradcheckTensor& t : tensors) {
    out += "  " + t.name + " " + t.shape.str() + ": worst at " + t.where() + ": analytic " + number(t.analytic) +
           " numeric " + number(t.numeric) + " (|difference| " + number(t.error()) + ")";
    if (t.failed > 0)
      out += "; " + std::to_string(t.failed) + " of " + std::to_string(t.shape.numel()) +
             " elements outside atol + rtol |numeric|";
    out += "\n";
  }
  return out;
}

GradcheckResult gradcheck(Graph& g, const LossFn& loss, std::vector<Var> wrt, const GradcheckOptions& options) {
  if (wrt.empty()) wrt = g.parameters();
  if (!(options.eps > 0) || !std::isfinite(options.eps))
    throw Error("[gradcheck] eps must be positive and finite, got " + number(options.eps));
  size_t total = 0, done = 0;
  for (const Var& v : wrt) {
    need_checkable(v);
    total += static_cast<size_t>(v.value().numel());
  }
  const std::vector<Tensor> analytic = analytic_of(g, loss, wrt, {});
  GradcheckResult result;
  result.options = options;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const std::vector<double> a = analytic[k].to_doubles();
    const std::vector<double> n = numeric_of(g, loss, wrt[k], options.eps, done, total, nullptr).to_doubles();
    GradcheckTensor t;
    t.name = name_of(wrt[k]);
    t.shape = wrt[k].shape();
    double worst = -1.0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double e = std::fabs(a[i] - n[i]);
      if (!(e <= options.atol + options.rtol * std::fabs(n[i]))) ++t.failed;
      if (e > worst || (std::isnan(e) && !std::isnan(worst))) {
        worst = e;
        t.worst = static_cast<int64_t>(i);
        t.analytic = a[i];
        t.numeric = n[i];
      }
    }
    result.tensors.push_back(t);
  }
  return result;
}

std::vector<Tensor> numerical_gradients(Graph& g, const LossFn& loss, double eps, const ProgressFn& progress) {
  const std::vector<Var> params = g.parameters();
  size_t total = 0, done = 0;
  for (const Var& p : params) {
    need_checkable(p);
    total += static_cast<size_t>(p.value().numel());
  }
  std::vector<Tensor> grads;
  for (const Var& p : params) grads.push_back(numeric_of(g, loss, p, eps, done, total, progress));
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
  return analytic_of(g, loss, g.parameters(), options);
}

}  // namespace tapegrad
