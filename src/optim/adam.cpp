// Adam (see adam.hpp): its checks and groups, the L2 decay added to the gradients, and AdamW's
// update without decay.
#include "tapegrad/optim/adam.hpp"

#include <string>
#include <utility>

namespace tapegrad::optim {
namespace {

void check_config(const AdamConfig& c, const std::string& where, bool at_step) {
  check_adam_config("adam", c, where, at_step);
}

// Adam's groups, checked; AdamW's are the same without weight decay.
std::vector<AdamConfig> checked_groups(const std::vector<ParamGroup>& groups, const AdamConfig& config) {
  std::vector<AdamConfig> out;
  for (size_t i = 0; i < groups.size(); ++i) {
    out.push_back(adam_group_config("adam", "Adam", groups[i].options, config, i));
    check_config(out.back(), group_where(i, groups.size()), false);
  }
  flatten_groups("adam", "Adam", groups);  // refuses a parameter that is not f32 or f64, or in two groups
  return out;
}

std::vector<ParamGroup> undecayed(std::vector<ParamGroup> groups) {
  for (ParamGroup& g : groups) g.options.weight_decay = 0.0;
  return groups;
}

AdamWConfig as_adamw(const AdamConfig& c) { return {.lr = c.lr, .beta1 = c.beta1, .beta2 = c.beta2, .eps = c.eps, .weight_decay = 0.0}; }

// Parameters whose gradients step() replaced by g + weight_decay * w, given back their own when
// the update is done (or has thrown).
class HeldGradients {
 public:
  void replace(const Var& p, Tensor d) {
    held_.emplace_back(p, p.grad());
    p.set_grad(std::move(d));
  }
  ~HeldGradients() {
    for (auto& [p, g] : held_) p.set_grad(std::move(g));
  }

 private:
  std::vector<std::pair<Var, Tensor>> held_;
};

}  // namespace

Adam::Adam(std::vector<Var> params, AdamConfig config)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, config) {}

Adam::Adam(const std::vector<ParamGroup>& groups, AdamConfig config)
    : groups_(checked_groups(groups, config)), adamw_(undecayed(groups), as_adamw(config)) {}

void Adam::set_lr(double lr) {
  check_lr("adam", "", lr, true);
  for (AdamConfig& c : groups_) c.lr = lr;
}

void Adam::step() {
  for (size_t i = 0; i < groups_.size(); ++i) {
    check_config(groups_[i], group_where(i, groups_.size()), true);
    adamw_.group(i) = as_adamw(groups_[i]);
  }
  HeldGradients held;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const double decay = groups_[i].weight_decay;
    if (decay == 0) continue;
    for (size_t k : adamw_.group_parameters(i)) {
      const Var& p = adamw_.parameters()[k];
      const Tensor& g = p.grad();
      if (!g.defined()) continue;
      Tensor d = Tensor::empty(g.shape(), g.dtype(), g.device());  // d = g + weight_decay * w
      kernels::scale(p.value(), decay, d);
      kernels::binary(kernels::Binary::add, g, d, d);
      held.replace(p, std::move(d));
    }
  }
  adamw_.step();
}

NamedTensors Adam::state_tensors() const {
  NamedTensors out;
  out.emplace_back("adam.step", count_tensor(adamw_.step_count()));
  for (size_t i = 0; i < groups_.size(); ++i) {
    const std::string prefix = "adam.group." + std::to_string(i) + ".";
    out.emplace_back(prefix + "params", index_tensor(adamw_.group_parameters(i)));
    out.emplace_back(prefix + "lr", real_tensor(groups_[i].lr));
    out.emplace_back(prefix + "beta1", real_tensor(groups_[i].beta1));
    out.emplace_back(prefix + "beta2", real_tensor(groups_[i].beta2));
    out.emplace_back(prefix + "eps", real_tensor(groups_[i].eps));
    out.emplace_back(prefix + "weight_decay", real_tensor(groups_[i].weight_decay));
  }
  for (size_t k = 0; k < parameters().size(); ++k) {
    out.emplace_back("adam.step." + std::to_string(k), count_tensor(adamw_.step_count(k)));
    out.emplace_back("adam.m." + std::to_string(k), adamw_.m(k).clone());
    out.emplace_back("adam.v." + std::to_string(k), adamw_.v(k).clone());
  }
  return out;
}

void Adam::load_state(const NamedTensors& state) {
  StateReader in("adam", state);
  const uint64_t t = in.count("adam.step");
  std::vector<AdamConfig> groups(groups_.size());
  for (size_t i = 0; i < groups_.size(); ++i) {
    const std::string prefix = "adam.group." + std::to_string(i) + ".";
    in.group_members(prefix + "params", adamw_.group_parameters(i), i);
    groups[i] = {.lr = in.real(prefix + "lr"), .beta1 = in.real(prefix + "beta1"), .beta2 = in.real(prefix + "beta2"),
                 .eps = in.real(prefix + "eps"), .weight_decay = in.real(prefix + "weight_decay")};
    check_config(groups[i], "load_state: group " + std::to_string(i) + ": ", true);
  }
  const std::vector<Var>& params = parameters();
  std::vector<uint64_t> steps(params.size());
  std::vector<const Tensor*> moments;
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor& p = params[k].value();
    steps[k] = in.count("adam.step." + std::to_string(k));
    moments.push_back(&in.tensor("adam.m." + std::to_string(k), p.shape(), p.dtype()));
    moments.push_back(&in.tensor("adam.v." + std::to_string(k), p.shape(), p.dtype()));
  }
  in.finish();
  // everything checked: now the state changes
  groups_ = std::move(groups);
  adamw_.set_step_count(t);
  for (size_t k = 0; k < params.size(); ++k) {
    adamw_.set_step_count(k, steps[k]);
    adamw_.set_moments(k, *moments[2 * k], *moments[2 * k + 1]);
  }
}

}  // namespace tapegrad::optim
