// Autocast's thread-local state (Note [autocast] in autocast.hpp).
#include "tapegrad/ops/autocast.hpp"

#include <mutex>
#include <string>
#include <unordered_map>

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

// ---- bf16 weight copies (Note [bf16 weight copies]): one table for every thread, keyed by the
// weight's storage, which the entry's handle keeps alive (so the key is never reused meanwhile)

namespace {

struct CopyEntry {
  Tensor weight, copy;
  uint32_t version;
  const Bf16Copies* owner;
};

std::mutex g_copies_mutex;
std::unordered_map<const void*, CopyEntry>& copies() {  // never destroyed: owners may outlive statics
  static auto* table = new std::unordered_map<const void*, CopyEntry>();
  return *table;
}

}  // namespace

Bf16Copies::~Bf16Copies() {
  const std::lock_guard<std::mutex> lock(g_copies_mutex);
  for (const void* key : keys_) {
    auto it = copies().find(key);
    if (it != copies().end() && it->second.owner == this) copies().erase(it);
  }
}

void Bf16Copies::keep(const Tensor& weight, const Tensor& copy) {
  if (weight.dtype() != DType::f32 || copy.dtype() != DType::bf16 || copy.shape() != weight.shape() ||
      !(copy.device() == weight.device()))
    throw Error("[autocast] a bf16 copy of a weight must be bf16 of the weight's shape on its device, and the weight "
                "f32: got a copy " + copy.shape().str() + " " + dtype_name(copy.dtype()) + " on " +
                copy.device().str() + " of a weight " + weight.shape().str() + " " + dtype_name(weight.dtype()) +
                " on " + weight.device().str());
  const std::lock_guard<std::mutex> lock(g_copies_mutex);
  const void* key = weight.raw_data();
  auto it = copies().find(key);
  if (it != copies().end() && it->second.owner != this)
    throw Error("[autocast] the weight " + weight.shape().str() + " already has a bf16 copy kept by another owner");
  if (it == copies().end()) keys_.push_back(key);
  copies()[key] = CopyEntry{weight, copy, weight.version(), this};
}

Tensor current_bf16_copy(const Tensor& v) {
  if (v.dtype() != DType::f32 || !v.defined()) return Tensor();
  const std::lock_guard<std::mutex> lock(g_copies_mutex);
  auto it = copies().find(v.raw_data());
  if (it == copies().end()) return Tensor();
  const CopyEntry& e = it->second;
  if (e.version != v.version() || e.weight.numel() != v.numel()) return Tensor();
  return e.copy.reshape(v.shape());
}

}  // namespace tapegrad::ops
