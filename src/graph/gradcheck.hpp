// Gradient check for any model built on the graph: the analytic gradient of one backward pass
// against central differences, element by element, for the parameters and for inputs that require
// a gradient (torch.autograd.gradcheck; the tiny step reference's numerical_gradients /
// max_gradient_error).
//
// Rules:
// - The loss function records its forward on the graph and returns a scalar Var; the check runs it
//   under NoGrad for each nudge and rewinds the tape afterwards, so it leaves the tape and the
//   values as it found them (a nudged host element is restored bit for bit without counting as a
//   write; on a device the restoring copy counts as one).
// - What is checked is f64: central differences in f32 measure rounding more than the derivative
//   (a nudge of 1e-6 is 8 of f32's steps at 1), so an f32 tensor is refused by name, as
//   torch.autograd.gradcheck asks for double precision.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tapegrad/graph/graph.hpp"

namespace tapegrad {

using LossFn = std::function<Var(Graph&)>;
// Called after each element with (elements done, elements in all); used to show progress.
using ProgressFn = std::function<void(size_t done, size_t total)>;

struct GradcheckOptions {  // torch.autograd.gradcheck's defaults
  double eps = 1e-6;   // the nudge: numeric = (loss(x + eps) - loss(x - eps)) / (2 eps)
  double atol = 1e-5;  // an element passes when |analytic - numeric| <= atol + rtol |numeric|
  double rtol = 1e-3;
};

// One checked tensor: how many of its elements pass, and its worst analytic/numeric pair.
struct GradcheckTensor {
  std::string name;      // the value's label, or "parameter k" / "value k" (its id) without one
  Shape shape;
  int64_t worst = 0;     // the flat (row-major) index of the largest |analytic - numeric|
  double analytic = 0;   // at that element
  double numeric = 0;
  int64_t failed = 0;    // elements outside atol + rtol |numeric| (NaN counts as outside)
  double error() const;  // |analytic - numeric| at the worst element
  std::string where() const;  // the worst element's index: "[1, 0]"
};

struct GradcheckResult {
  GradcheckOptions options;
  std::vector<GradcheckTensor> tensors;  // in the order they were checked
  bool passed() const;       // no element failed
  double max_error() const;  // the largest |analytic - numeric| over every tensor (NaN if any is)
  // One line for the check, then one per tensor:
  //   gradcheck passed: 2 tensors, eps 1e-06, atol 1e-05, rtol 0.001
  //     w (3, 2): worst at [1, 0]: analytic 0.25 numeric 0.25000000001 (|difference| 1e-11)
  std::string str() const;
};

// Checks d loss / d v for every element of every v in `wrt`: parameters of g, or inputs made with
// g.input(t, label, true), recorded before the call; empty `wrt` checks every parameter of g.
// Refuses (tapegrad::Error, naming the value) a value that is not f64 or takes no gradient.
GradcheckResult gradcheck(Graph& g, const LossFn& loss, std::vector<Var> wrt = {}, const GradcheckOptions& options = {});
inline GradcheckResult gradcheck(Graph& g, const LossFn& loss, const GradcheckOptions& options) {
  return gradcheck(g, loss, {}, options);
}

// The pieces, for callers that keep their own format (apps/tiny_step's trace):
// d loss / d p for every element of every parameter (f64), in parameter order.
std::vector<Tensor> numerical_gradients(Graph& g, const LossFn& loss, double eps,
                                        const ProgressFn& progress = nullptr);
// max |a - n| over every element of every tensor; shapes must match.
double max_gradient_error(const std::vector<Tensor>& analytic, const std::vector<Tensor>& numeric);
// The parameters' gradients from one backward pass over loss(g) (zeroed first and left holding the
// result).
std::vector<Tensor> analytic_gradients(Graph& g, const LossFn& loss, const BackwardOptions& options = {});

}  // namespace tapegrad
