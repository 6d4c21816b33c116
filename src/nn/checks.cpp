// What layers check and how they make parameters (checks.hpp).
#include "tapegrad/nn/checks.hpp"

#include <cstdio>
#include <string>

namespace tapegrad::nn::detail {

void need_positive(const char* kind, const char* what, int64_t n) {
  if (n <= 0) throw Error(std::string("[") + kind + "] " + what + " must be positive, got " + std::to_string(n));
}

void need_probability(const char* kind, double p) {
  if (!(p >= 0.0 && p <= 1.0)) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", p);
    throw Error(std::string("[") + kind + "] dropout p must be a probability in [0, 1], got " + text);
  }
}

int64_t times(const char* kind, const char* what, int64_t k, int64_t n) {
  int64_t out = 0;
  if (__builtin_mul_overflow(k, n, &out))
    throw Error(std::string("[") + kind + "] " + std::to_string(k) + " x " + what + " " + std::to_string(n) +
                " overflows 64 bits");
  return out;
}

Tensor fresh(const Factory& f, const char* kind, const char* name, const Shape& shape) {
  if (f.dtype != DType::f32 && f.dtype != DType::f64)
    throw Error(std::string("[") + kind + "] parameters are f32 or f64, the factory asks for " + dtype_name(f.dtype));
  try {
    return Tensor::empty(shape, f.dtype, f.device);
  } catch (const OutOfMemory& e) {
    throw e.told_by(kind, std::string(name) + " (" + dtype_name(f.dtype) + ", shape " + shape.str() +
                              (f.device.is_cpu() ? "" : ", on " + f.device.str()) + ")");
  }
}

}  // namespace tapegrad::nn::detail
