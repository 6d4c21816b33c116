// Gradient check for any model built on the graph: central differences over every cell of every
// parameter (the tiny step reference's numerical_gradients / max_gradient_error).
//
// Rule: the loss function records its forward on the graph and returns a scalar Var; the check
// runs it under NoGrad for each nudge and rewinds the tape afterwards, so it leaves the tape and
// the parameters exactly as it found them.
#pragma once

#include <functional>
#include <vector>

#include "tapegrad/graph/graph.hpp"

namespace tapegrad {

using LossFn = std::function<Var(Graph&)>;
// Called after each parameter cell with (cells done, cells in all); used to show progress.
using ProgressFn = std::function<void(size_t done, size_t total)>;

// d loss / d p for every cell of every parameter, in parameter order: (up - down) / (2 eps) where
// up and down are the losses at p + eps and p - eps. Parameters must be f64 or f32.
std::vector<Tensor> numerical_gradients(Graph& g, const LossFn& loss, double eps,
                                        const ProgressFn& progress = nullptr);

// max |a - n| over every cell of every parameter; shapes must match.
double max_gradient_error(const std::vector<Tensor>& analytic, const std::vector<Tensor>& numeric);

// Analytic gradients of one backward pass over loss(g) (the parameters' gradients are zeroed
// first and left holding the result).
std::vector<Tensor> analytic_gradients(Graph& g, const LossFn& loss, const BackwardOptions& options = {});

// max_gradient_error(analytic_gradients(g, loss), numerical_gradients(g, loss, eps))
double gradcheck(Graph& g, const LossFn& loss, double eps);

}  // namespace tapegrad
