// Helpers shared by the CPU kernels: dtype dispatch and flat xtensor views over tensor storage.
#pragma once

#include <array>
#include <string>

#include <xtensor/xadapt.hpp>

#include "graph/tensor.hpp"

namespace tapegrad::cpu {

// Calls f.template operator()<T>() with T = double or float; other dtypes are an error naming op.
template <class F>
decltype(auto) dispatch_float(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::f64: return f.template operator()<double>();
    case DType::f32: return f.template operator()<float>();
    default:
      throw Error(std::string("[") + op + "] no CPU kernel for " + dtype_name(t) + " (f64 and f32 only)");
  }
}

// Calls f.template operator()<I>() with I = int32_t or int64_t for index tensors.
template <class F>
decltype(auto) dispatch_index(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::i32: return f.template operator()<int32_t>();
    case DType::i64: return f.template operator()<int64_t>();
    default:
      throw Error(std::string("[") + op + "] indices must be i32 or i64, got " + dtype_name(t));
  }
}

// A 1-D xtensor view over every element of t (no copy, no ownership). Assigning to it evaluates.
template <class T>
auto flat(const Tensor& t) {
  size_t n = static_cast<size_t>(t.numel());
  return xt::adapt(static_cast<T*>(t.raw_data()), n, xt::no_ownership(), std::array<size_t, 1>{n});
}

}  // namespace tapegrad::cpu
