// An optimizer's state as named tensors, for checkpoints: what state_tensors() gives and
// load_state() takes back (AdamW, SGD). A trainer saves them beside the model's own (both through
// the checkpoint envelope, src/io/envelope.hpp, or any other format that keeps bytes).
//
// Rules: names are "<optimizer>.<what>[.<index>]" ("adamw.m.0", "sgd.group.1.lr"); counts are ()
// i64 tensors, hyperparameters () f64, moments and buffers their parameter's shape and dtype. A
// load refuses, by the tensor's name, one that is missing, one it does not expect, one given twice
// and one of another shape or dtype, before it changes anything.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/tensor/tensor.hpp"

namespace tapegrad::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

Tensor count_tensor(uint64_t count);                  // () i64 on the host
Tensor real_tensor(double value);                     // () f64 on the host
Tensor index_tensor(const std::vector<size_t>& ids);  // (n,) i64 on the host: a group's parameters

// Reads a NamedTensors for a load_state: the messages start "[op] load_state: ".
class StateReader {
 public:
  StateReader(const char* op, const NamedTensors& state);  // refuses a name given twice
  bool has(const std::string& name) const;
  // The tensor called `name`, of that shape and dtype (on any device); refuses it missing or other.
  const Tensor& tensor(const std::string& name, const Shape& shape, DType dtype);
  uint64_t count(const std::string& name);  // a () i64 >= 0
  double real(const std::string& name);     // a () f64
  // An index_tensor equal to `members` (group `group`'s parameters), else refused.
  void group_members(const std::string& name, const std::vector<size_t>& members, size_t group);
  void finish() const;                      // refuses every tensor nobody asked for

  [[noreturn]] void refuse(const std::string& what) const;

 private:
  std::string op_;
  const NamedTensors& state_;
  std::set<std::string> taken_;
};

}  // namespace tapegrad::optim
