// Dtype dispatch both devices' N-d kernels share (cpu/strided.cpp, src/cuda/strided.cu).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "tapegrad/kernels/bf16.hpp"
#include "tapegrad/tensor/dtype.hpp"
#include "tapegrad/tensor/error.hpp"

namespace tapegrad::kernels {

// f.template operator()<U>() with U an unsigned integer of the dtype's size: copies, gathers and
// selections move elements of any dtype as bytes.
template <class F>
void dispatch_bytes(DType t, F&& f) {
  switch (dtype_size(t)) {
    case 1: f.template operator()<uint8_t>(); return;
    case 2: f.template operator()<uint16_t>(); return;
    case 4: f.template operator()<uint32_t>(); return;
    default: f.template operator()<uint64_t>(); return;
  }
}

// f.template operator()<T>() for every dtype with arithmetic (casts, comparisons); `device` names
// the device in the error for the others ("[to] no CUDA kernel for bf16").
template <class F>
void dispatch_arithmetic(const char* op, const char* device, DType t, F&& f) {
  switch (t) {
    case DType::f64: f.template operator()<double>(); return;
    case DType::f32: f.template operator()<float>(); return;
    case DType::i32: f.template operator()<int32_t>(); return;
    case DType::i64: f.template operator()<int64_t>(); return;
    case DType::u8: f.template operator()<uint8_t>(); return;
    default: throw Error(std::string("[") + op + "] no " + device + " kernel for " + dtype_name(t));
  }
}

// dispatch_arithmetic's dtypes and bf16 (as kernels::bf16, bf16.hpp): the casts'.
template <class F>
void dispatch_castable(const char* op, const char* device, DType t, F&& f) {
  if (t == DType::bf16) return f.template operator()<bf16>();
  dispatch_arithmetic(op, device, t, std::forward<F>(f));
}

}  // namespace tapegrad::kernels
