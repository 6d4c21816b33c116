// The tiny step's cross-entropy: the Python reference's own arithmetic (docs/tiny_step.md,
// "Arithmetic"), kept in the app because it is a property of this path, not of the library's
// loss. Probabilities p = exp(v - max) / fsum(exp(row - max)) and loss = -log(p[t]) in f64, with
// the exp and log the reference calls, so the trace matches it byte for byte; the library's
// ops::cross_entropy computes the loss from log-sum-exp instead, which stays finite where p[t]
// underflows (Note [log-sum-exp rows] in src/kernels/cpu/log_softmax.cpp). Recorded as the node
// "cross_entropy", with the library's derivative (dz = (p - onehot(t)) / B * dy).
#pragma once

#include "tapegrad/ops/ops.hpp"

namespace tiny {

// logits (B, V), targets (B,) -> () mean or sum, or (B,) none
tapegrad::Var reference_cross_entropy(tapegrad::Var logits, tapegrad::Var targets,
                                      tapegrad::ops::Reduction reduction = tapegrad::ops::Reduction::mean);

}  // namespace tiny
