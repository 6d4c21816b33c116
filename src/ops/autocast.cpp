// Autocast's thread-local state (Note [autocast] in autocast.hpp).
#include "tapegrad/ops/autocast.hpp"

#include <string>

#include "tapegrad/tensor/error.hpp"

namespace tapegrad::ops {

namespace {
thread_local DType t_autocast = DType::f32;
}

Autocast::Autocast(DType dtype) : previous_(t_autocast) {
  if (dtype != DType::bf16 && dtype != DType::f32)
    throw Error(std::string("[autocast] products compute in bf16 (or f32, to turn autocast off), not ") +
                dtype_name(dtype));
  t_autocast = dtype;
}

Autocast::~Autocast() { t_autocast = previous_; }

DType autocast_dtype() { return t_autocast; }

}  // namespace tapegrad::ops
