// Initialisers: fill a tensor (or a parameter's value) in place from a seeded generator, as
// torch.nn.init does.
//
// Rules:
// - Draws come from the Philox stream of a tapegrad::Generator (src/kernels/philox.hpp): a fill of
//   n values takes ceil(n / 2) counters, and counter c's block of four words makes the values 2j
//   and 2j + 1 (Note [initialiser draws] in init.cpp). The same seed and the same order of fills
//   give the same bits on every run and every device.
// - Values are drawn in double and converted to the tensor's dtype (f64, f32, bf16, f16) as
//   Tensor::from_doubles converts, on the host, then copied to the tensor's device. Filling a parameter counts as an in-place write
//   (Tensor::copy_from), so a tape recorded before it refuses to run its backward.
#pragma once

#include <cstdint>
#include <utility>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/ops/fused/dropout.hpp"  // Generator

namespace tapegrad::nn::init {

// U(lo, hi): lo + (hi - lo) u with u uniform on [0, 1) in steps of 2^-53.
void uniform_(Tensor t, double lo, double hi, Generator& gen);
// N(mean, std^2), by the Box-Muller transform.
void normal_(Tensor t, double mean, double std, Generator& gen);
void constant_(Tensor t, double value);
void zeros_(Tensor t);
void ones_(Tensor t);

// torch.nn.init's fans of a weight: (size(1) * receptive, size(0) * receptive), receptive the
// product of the extents after the first two; a tensor of fewer than 2 dimensions has none.
std::pair<int64_t, int64_t> fans(const Shape& shape);

enum class FanMode : uint8_t { fan_in, fan_out };
// U(-bound, bound), bound = gain * sqrt(3 / fan) with leaky_relu's gain sqrt(2 / (1 + a^2)):
// torch.nn.init.kaiming_uniform_(t, a, mode). Linear's default weight is a = sqrt(5), which makes
// bound = 1 / sqrt(in_features).
void kaiming_uniform_(Tensor t, Generator& gen, double a = 0.0, FanMode mode = FanMode::fan_in);

// The same on a parameter's value.
inline void uniform_(const Var& p, double lo, double hi, Generator& gen) { uniform_(p.value(), lo, hi, gen); }
inline void normal_(const Var& p, double mean, double std, Generator& gen) { normal_(p.value(), mean, std, gen); }
inline void constant_(const Var& p, double value) { constant_(p.value(), value); }
inline void zeros_(const Var& p) { zeros_(p.value()); }
inline void ones_(const Var& p) { ones_(p.value()); }
inline void kaiming_uniform_(const Var& p, Generator& gen, double a = 0.0, FanMode mode = FanMode::fan_in) {
  kaiming_uniform_(p.value(), gen, a, mode);
}

}  // namespace tapegrad::nn::init
