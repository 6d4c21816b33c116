// SGD (see sgd.hpp): the plain update, and the one with momentum, weight decay and groups.
#include "tapegrad/optim/sgd.hpp"

#include <cmath>

#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad::optim {
namespace {

// At a step, lr may be 0 (a schedule's end).
void check_config(const SGDConfig& c, const std::string& where, bool at_step) {
  check_lr("sgd", where, c.lr, at_step);
  check_nonnegative("sgd", where, "momentum", c.momentum);
  if (!std::isfinite(c.dampening)) refuse_hyperparameter("sgd", where, "dampening", c.dampening, "a finite number");
  check_nonnegative("sgd", where, "weight_decay", c.weight_decay);
  if (c.nesterov && (c.momentum <= 0 || c.dampening != 0))
    throw Error("[sgd] " + where + "nesterov momentum needs momentum > 0 and dampening 0, got momentum " +
                shortest_text(c.momentum) + " and dampening " + shortest_text(c.dampening));
}

SGDConfig resolved(const GroupOptions& o, SGDConfig c, size_t i) {
  const char* foreign = o.beta1 ? "beta1" : o.beta2 ? "beta2" : o.eps ? "eps" : nullptr;
  if (foreign)
    throw Error("[sgd] group " + std::to_string(i) + " sets " + foreign + ", which SGD does not have (AdamW does)");
  if (o.lr) c.lr = *o.lr;
  if (o.momentum) c.momentum = *o.momentum;
  if (o.dampening) c.dampening = *o.dampening;
  if (o.weight_decay) c.weight_decay = *o.weight_decay;
  if (o.nesterov) c.nesterov = *o.nesterov;
  return c;
}

}  // namespace

void check_learning_rate(double lr, const char* shown) {
  if (!(std::isfinite(lr) && lr > 0)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", lr);
    throw Error(std::string("learning rate must be a positive finite number, got ") + (shown ? shown : buf));
  }
}

SGD::SGD(double lr) {
  check_learning_rate(lr);
  groups_.push_back({.lr = lr});
  members_.emplace_back();
}

SGD::SGD(std::vector<Var> params, SGDConfig config)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, config) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDConfig config) {
  for (size_t i = 0; i < groups.size(); ++i) {
    groups_.push_back(resolved(groups[i].options, config, i));
    check_config(groups_.back(), group_where(i, groups.size()), false);
  }
  FlatGroups flat = flatten_groups("sgd", "SGD", groups);
  params_ = std::move(flat.params);
  members_ = std::move(flat.members);
  buffers_.resize(params_.size());
  steps_.assign(params_.size(), 0);
}

void SGD::set_lr(double lr) {
  check_lr("sgd", "", lr, true);
  for (SGDConfig& c : groups_) c.lr = lr;
}

void SGD::step(const std::vector<Var>& params) const {
  const SGDConfig& c = groups_.front();
  if (c.momentum != 0 || c.weight_decay != 0)
    throw Error("[sgd] step(params) is the plain update; this SGD has momentum or weight decay, whose state "
                "step() keeps for its own parameters");
  for (const Var& p : params) {
    if (!p.grad().defined()) continue;
    Tensor value = p.value();
    kernels::sgd_step(value, p.grad(), c.lr);
    value.mark_modified();
  }
}

void SGD::step() {
  for (size_t i = 0; i < groups_.size(); ++i) check_config(groups_[i], group_where(i, groups_.size()), true);
  for (size_t group = 0; group < groups_.size(); ++group) {
    const SGDConfig& c = groups_[group];
    for (const size_t k : members_[group]) {
      const Tensor& grad = params_[k].grad();
      if (!grad.defined()) continue;
      Tensor value = params_[k].value();
      const bool first = c.momentum != 0 && !buffers_[k].defined();
      if (first) buffers_[k] = Tensor::empty(value.shape(), value.dtype(), value.device());
      kernels::sgd_momentum_step(value, grad, buffers_[k],
                                 {.lr = c.lr, .momentum = c.momentum, .dampening = c.dampening,
                                  .weight_decay = c.weight_decay, .nesterov = c.nesterov, .first_step = first});
      value.mark_modified();
      if (c.momentum != 0) buffers_[k].mark_modified();
      ++steps_[k];
    }
  }
}

// ---- state

NamedTensors SGD::state_tensors() const {
  NamedTensors out;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const std::string prefix = "sgd.group." + std::to_string(i) + ".";
    out.emplace_back(prefix + "params", index_tensor(members_[i]));
    out.emplace_back(prefix + "lr", real_tensor(groups_[i].lr));
    out.emplace_back(prefix + "momentum", real_tensor(groups_[i].momentum));
    out.emplace_back(prefix + "dampening", real_tensor(groups_[i].dampening));
    out.emplace_back(prefix + "weight_decay", real_tensor(groups_[i].weight_decay));
    out.emplace_back(prefix + "nesterov", real_tensor(groups_[i].nesterov ? 1.0 : 0.0));
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    out.emplace_back("sgd.step." + std::to_string(k), count_tensor(steps_[k]));
    if (buffers_[k].defined()) out.emplace_back("sgd.momentum_buffer." + std::to_string(k), buffers_[k].clone());
  }
  return out;
}

void SGD::load_state(const NamedTensors& state) {
  StateReader in("sgd", state);
  std::vector<SGDConfig> groups(groups_.size());
  for (size_t i = 0; i < groups_.size(); ++i) {
    const std::string prefix = "sgd.group." + std::to_string(i) + ".";
    in.group_members(prefix + "params", members_[i], i);
    const double nesterov = in.real(prefix + "nesterov");
    if (nesterov != 0 && nesterov != 1)
      in.refuse("'" + prefix + "nesterov' is " + shortest_text(nesterov) + "; it is 0 or 1");
    groups[i] = {.lr = in.real(prefix + "lr"), .momentum = in.real(prefix + "momentum"),
                 .dampening = in.real(prefix + "dampening"), .weight_decay = in.real(prefix + "weight_decay"),
                 .nesterov = nesterov == 1};
    check_config(groups[i], "load_state: group " + std::to_string(i) + ": ", true);
  }
  std::vector<uint64_t> steps(params_.size());
  std::vector<const Tensor*> buffers(params_.size(), nullptr);  // a buffer is there or not, as the parameter has one
  for (size_t k = 0; k < params_.size(); ++k) {
    steps[k] = in.count("sgd.step." + std::to_string(k));
    const std::string name = "sgd.momentum_buffer." + std::to_string(k);
    const Tensor& p = params_[k].value();
    if (in.has(name)) buffers[k] = &in.tensor(name, p.shape(), p.dtype());
  }
  in.finish();
  // everything checked: now the state changes
  groups_ = std::move(groups);
  steps_ = std::move(steps);
  for (size_t k = 0; k < params_.size(); ++k) {
    if (!buffers[k]) {
      buffers_[k] = Tensor();
      continue;
    }
    const Tensor& p = params_[k].value();
    buffers_[k] = Tensor::empty(p.shape(), p.dtype(), p.device());
    buffers_[k].copy_from(*buffers[k]);
  }
}

}  // namespace tapegrad::optim
