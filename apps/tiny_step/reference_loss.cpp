// The tiny step's cross-entropy (reference_loss.hpp): the library's row kernels in their
// reference form (kernels::cross_entropy and its backward), one node.
#include "reference_loss.hpp"

#include "tapegrad/kernels/kernels.hpp"

namespace tiny {

using namespace tapegrad;

Var reference_cross_entropy(Var logits, Var targets, ops::Reduction reduction) {
  const Tensor& z = logits.value();
  const Tensor& t = targets.value();
  if (z.ndim() != 2 || t.ndim() != 1 || z.dim(0) != t.dim(0) || z.dim(0) == 0 || z.dim(1) == 0)
    throw Error("[cross_entropy] the tiny step needs logits (B, V) and targets (B,) with B, V > 0, got " +
                z.shape().str() + " and " + t.shape().str());
  Tensor probs = Tensor::empty(z.shape(), z.dtype(), z.device());  // (B, V)
  Tensor losses = Tensor::empty(Shape{z.dim(0)}, z.dtype(), z.device());
  const double divisor = reduction == ops::Reduction::mean ? static_cast<double>(z.dim(0)) : 1.0;
  Tensor out = losses;
  if (reduction == ops::Reduction::none) {
    kernels::cross_entropy(z, t, probs, losses);
  } else {
    out = Tensor::empty(Shape{}, z.dtype(), z.device());
    kernels::cross_entropy_reduced(z, t, probs, losses, out, reduction == ops::Reduction::mean);
  }
  return logits.graph().record("cross_entropy", std::move(out), {logits, targets}, [](BackwardContext& ctx) {
    // dlogits over the saved probabilities when nothing reads them after this pass, else a new tensor
    Tensor dz = ctx.take_saved(0);
    const Tensor probs = dz.defined() ? dz : ctx.saved(0);
    if (!dz.defined()) dz = Tensor::empty(probs.shape(), probs.dtype(), probs.device());
    kernels::cross_entropy_backward(probs, ctx.input(1), ctx.grad_output(), ctx.scalar(), dz);
    ctx.accumulate(0, dz);
  }, {std::move(probs)}, divisor);
}

}  // namespace tiny
