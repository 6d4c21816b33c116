// Gradient transforms between backward() and an optimizer's step(): clipping by the total norm or
// by value, and scaling (torch.nn.utils.clip_grad_norm_, clip_grad_value_; a loss scale's undo).
//
// Rules: they change gradients only through Var::grad_entries_for_write (each gradient's own
// bytes, its version moved) and the kernel facades, so they run on any device; a row-sparse
// gradient stays row-sparse (its rows are what is read and scaled, the other rows being +0).
// Parameters without a gradient are skipped; a parameter listed twice counts once. Gradients are
// f32 or f64; any other dtype is refused naming the parameter.
#pragma once

#include <vector>

#include "tapegrad/graph/graph.hpp"

namespace tapegrad::optim {

// The 2-norm of all the gradients together, sqrt(sum over every element of g^2): the sums of
// squares of every gradient's chunks of 4096 elements on its device, in double, and their
// correctly rounded sum there (Note [sum of squares order] in kernels/optim_ops.hpp: the same bits
// on every device, and however the gradients are cut into pieces at chunk boundaries, which
// dist's ZeRO-1 relies on), one scalar read back per device (a synchronization).
double grad_norm(const std::vector<Var>& params);

// PyTorch's clip_grad_norm_ (norm_type 2, error_if_nonfinite false): with total = grad_norm(params),
// every gradient is multiplied by max_norm / (total + 1e-6) when that is below 1 (computed in
// double, then rounded to the gradient's dtype). Returns total, the norm before clipping. A NaN or
// infinite total makes the gradients NaN (or 0 and NaN), as PyTorch's does: check the result.
// max_norm finite and >= 0.
double clip_grad_norm(const std::vector<Var>& params, double max_norm);

// clip_grad_norm without a synchronization: the total norm stays on the device, as a () f64
// tensor (returned), the coefficient is computed there (kernels::clip_factor) and every gradient is
// multiplied by it, 1 when the norm is within max_norm. The gradients get clip_grad_norm's bits,
// and the whole call can be captured in a CUDA graph (a training step replayed with no host
// synchronization). The gradients must be on one device.
Tensor clip_grad_norm_on_device(const std::vector<Var>& params, double max_norm);

// The same norm and coefficient, () f64 tensors on the gradients' device, without scaling any
// gradient: for an optimizer that applies the coefficient as it reads the gradients
// (AdamW::step(factor)), which updates as clip_grad_norm_on_device then step() would, bit for bit,
// without a pass over the gradients of its own. No gradient: norm 0 and factor 1, on the CPU.
struct ClipFactor {
  Tensor norm, factor;
};
ClipFactor clip_grad_factor_on_device(const std::vector<Var>& params, double max_norm);

// PyTorch's clip_grad_value_: every gradient element clamped to [-clip_value, clip_value] (NaN
// kept). clip_value finite and >= 0.
void clip_grad_value(const std::vector<Var>& params, double clip_value);

// Every gradient multiplied by factor (rounded to the gradient's dtype first), e.g. 1 / loss_scale.
void scale_grads(const std::vector<Var>& params, double factor);

}  // namespace tapegrad::optim
