// What every layer's constructor checks before it makes a parameter (a refused layer leaves the
// graph as it was), and how it makes one. Internal to src/nn (not installed): errors begin with the
// layer's kind, "[Linear] in_features must be positive, got 0".
#pragma once

#include <cstdint>

#include "tapegrad/nn/module.hpp"

namespace tapegrad::nn::detail {

void need_positive(const char* kind, const char* what, int64_t n);
void need_probability(const char* kind, double p);  // a dropout p in [0, 1]
// k * n, refused when it overflows.
int64_t times(const char* kind, const char* what, int64_t k, int64_t n);
// An uninitialised parameter tensor of the factory's dtype (f32 or f64) and device; one that cannot
// be allocated is refused naming the layer and the parameter (OutOfMemory).
Tensor fresh(const Factory& f, const char* kind, const char* name, const Shape& shape);

}  // namespace tapegrad::nn::detail
