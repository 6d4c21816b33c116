// nn::Module: registration, names and modes (module.hpp).
#include "tapegrad/nn/module.hpp"
#include "tapegrad/nn/sequential.hpp"

namespace tapegrad::nn {

std::string Module::where() const {
  return std::string("[") + kind() + (path_.empty() ? "" : " " + path_) + "] ";
}

Var Module::labelled(Var y) const {
  if (!path_.empty()) y.label(path_);
  return y;
}

void Module::check_name(const std::string& name) const {
  bool bad = name.empty();
  for (const char c : name) bad |= c == '.' || static_cast<unsigned char>(c) <= ' ' || c == 0x7f;
  if (bad) throw Error(where() + "'" + name + "' is not a name: names are not empty and hold no '.' or white space");
  for (const auto& [taken, _] : params_)
    if (taken == name) throw Error(where() + "'" + name + "' is already a parameter of this module");
  for (const auto& [taken, _] : children_)
    if (taken == name) throw Error(where() + "'" + name + "' is already a child of this module");
}

Var Module::register_parameter(const std::string& name, Tensor value, Graph& g) {
  check_name(name);
  Var p = g.parameter(std::move(value), path_.empty() ? name : path_ + "." + name);
  params_.emplace_back(name, p);
  return p;
}

void Module::adopt(const std::string& name, Module& child) {
  check_name(name);
  if (&child == this) throw Error(where() + "a module cannot be its own child");
  if (child.parent_ != nullptr)
    throw Error(where() + "the " + child.kind() + " to register as '" + name + "' is already the child '" +
                child.path_ + "' of another module");
  child.parent_ = this;
  children_.emplace_back(name, &child);
  child.set_path(path_.empty() ? name : path_ + "." + name);
}

void Module::set_path(const std::string& path) {
  path_ = path;
  for (auto& [name, p] : params_) p.label(path_ + "." + name);
  for (auto& [name, child] : children_) child->set_path(path_ + "." + name);
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Var>>& out) const {
  for (const auto& [name, p] : params_) out.emplace_back(prefix + name, p);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Var>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Var>> out;
  collect("", out);
  return out;
}

std::vector<Var> Module::parameters() const {
  std::vector<Var> out;
  for (auto& [_, p] : named_parameters()) out.push_back(p);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (const Var& p : parameters()) n += p.value().numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [_, child] : children_) child->train(on);
}

}  // namespace tapegrad::nn

// ---- Sequential (sequential.hpp): each step's output is the next one's input
namespace tapegrad::nn {

Var Sequential::operator()(Var x) {
  const auto s = scope(x.graph());
  for (const Step& step : steps_) x = step.forward(x);
  return steps_.empty() ? x : labelled(x);
}

}  // namespace tapegrad::nn
