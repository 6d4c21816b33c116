// Parameter groups (see param_group.hpp).
#include "tapegrad/optim/param_group.hpp"

#include <charconv>
#include <cmath>
#include <map>
#include <utility>

namespace tapegrad::optim {

std::vector<ParamGroup> decay_groups(const std::vector<Var>& params, double weight_decay) {
  std::vector<ParamGroup> groups(2);
  groups[0].options.weight_decay = weight_decay;
  groups[1].options.weight_decay = 0.0;
  for (const Var& p : params) groups[p.value().ndim() >= 2 ? 0 : 1].params.push_back(p);
  return groups;
}

FlatGroups flatten_groups(const char* op, const char* optimizer, const std::vector<ParamGroup>& groups) {
  if (groups.empty()) throw Error(std::string("[") + op + "] needs at least one parameter group");
  FlatGroups flat;
  std::map<std::pair<const Graph*, int32_t>, size_t> group_of;  // a parameter's value -> its group
  for (size_t i = 0; i < groups.size(); ++i) {
    flat.members.emplace_back();
    for (const Var& p : groups[i].params) {
      const size_t k = flat.params.size();
      const auto [at, fresh] = group_of.emplace(std::make_pair(&p.graph(), p.id()), i);
      if (!fresh)
        throw Error(std::string("[") + op + "] " + parameter_name(k, p) +
                    (at->second == i ? " is twice in group " + std::to_string(i)
                                     : " is in groups " + std::to_string(at->second) + " and " + std::to_string(i)) +
                    "; a parameter belongs to one group, once");
      const DType dtype = p.value().dtype();
      if (dtype != DType::f32 && dtype != DType::f64)
        throw Error(std::string("[") + op + "] " + parameter_name(k, p) + " is " + dtype_name(dtype) + "; " +
                    optimizer + " updates f32 and f64 parameters");
      flat.members.back().push_back(k);
      flat.params.push_back(p);
    }
  }
  return flat;
}

std::string shortest_text(double value) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof text, value);
  return std::string(text, result.ptr);
}

std::string group_where(size_t group, size_t groups) {
  return groups > 1 ? "group " + std::to_string(group) + ": " : "";
}

void refuse_hyperparameter(const char* op, const std::string& where, const char* name, double value,
                           const char* rule) {
  throw Error(std::string("[") + op + "] " + where + name + " must be " + rule + ", got " + shortest_text(value));
}

void check_lr(const char* op, const std::string& where, double lr, bool at_step) {
  if (at_step && !(std::isfinite(lr) && lr >= 0)) refuse_hyperparameter(op, where, "lr", lr, "a finite number >= 0");
  if (!at_step && !(std::isfinite(lr) && lr > 0)) refuse_hyperparameter(op, where, "lr", lr, "a positive finite number");
}

void check_nonnegative(const char* op, const std::string& where, const char* name, double value) {
  if (!(std::isfinite(value) && value >= 0)) refuse_hyperparameter(op, where, name, value, "a finite number >= 0");
}

std::string parameter_name(size_t k, const Var& p) {
  return "parameter " + std::to_string(k) + (p.label().empty() ? "" : " ('" + p.label() + "')");
}

}  // namespace tapegrad::optim
