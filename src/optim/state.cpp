// Named optimizer state (see state.hpp).
#include "tapegrad/optim/state.hpp"

#include <algorithm>

namespace tapegrad::optim {

Tensor count_tensor(uint64_t count) {
  return Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(count)}, Shape{});
}

Tensor real_tensor(double value) { return Tensor::from_vector(std::vector<double>{value}, Shape{}); }

Tensor index_tensor(const std::vector<size_t>& ids) {
  return Tensor::from_vector(std::vector<int64_t>(ids.begin(), ids.end()), Shape{static_cast<int64_t>(ids.size())});
}

StateReader::StateReader(const char* op, const NamedTensors& state) : op_(op), state_(state) {
  std::set<std::string> seen;
  for (const auto& [name, t] : state_)
    if (!seen.insert(name).second) refuse("'" + name + "' is given twice");
}

void StateReader::refuse(const std::string& what) const { throw Error("[" + op_ + "] load_state: " + what); }

bool StateReader::has(const std::string& name) const {
  return std::any_of(state_.begin(), state_.end(), [&](const auto& entry) { return entry.first == name; });
}

const Tensor& StateReader::tensor(const std::string& name, const Shape& shape, DType dtype) {
  for (const auto& [key, t] : state_) {
    if (key != name) continue;
    if (!t.defined()) refuse("'" + name + "' is an empty tensor");
    if (!(t.shape() == shape) || t.dtype() != dtype)
      refuse("'" + name + "' is " + t.shape().str() + " " + dtype_name(t.dtype()) + "; this optimizer's is " +
             shape.str() + " " + dtype_name(dtype));
    taken_.insert(name);
    return t;
  }
  refuse("no tensor '" + name + "'");
}

uint64_t StateReader::count(const std::string& name) {
  const int64_t c = tensor(name, Shape{}, DType::i64).to(Device::cpu()).data<int64_t>()[0];
  if (c < 0) refuse("'" + name + "' is " + std::to_string(c) + "; a count is >= 0");
  return static_cast<uint64_t>(c);
}

double StateReader::real(const std::string& name) {
  return tensor(name, Shape{}, DType::f64).to(Device::cpu()).data<double>()[0];
}

void StateReader::group_members(const std::string& name, const std::vector<size_t>& members, size_t group) {
  const Tensor ids = tensor(name, Shape{static_cast<int64_t>(members.size())}, DType::i64).to(Device::cpu());
  auto listed = [](auto begin, auto end) {
    std::string text = "(";
    for (auto it = begin; it != end; ++it) text += (it == begin ? "" : ", ") + std::to_string(*it);
    return text + ")";
  };
  const int64_t* p = ids.data<int64_t>();
  if (!std::equal(members.begin(), members.end(), p, [](size_t a, int64_t b) { return static_cast<int64_t>(a) == b; }))
    refuse("'" + name + "' lists parameters " + listed(p, p + ids.numel()) + "; this optimizer's group " +
           std::to_string(group) + " has " + listed(members.begin(), members.end()));
}

void StateReader::finish() const {
  for (const auto& [name, t] : state_)
    if (!taken_.count(name)) refuse("'" + name + "' is not part of this optimizer's state");
}

}  // namespace tapegrad::optim
