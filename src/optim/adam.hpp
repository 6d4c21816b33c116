// Adam with L2 weight decay: torch.optim.Adam's update (amsgrad, maximize and foreach left out),
// for any set of f32 or f64 parameters of any shapes, on any device.
//
// Semantics (PyTorch's): the weight decay joins the gradient before the moments see it,
//   d = g + weight_decay * w   (when weight_decay != 0; not decoupled, unlike AdamW's w *= 1 - lr wd)
// and d makes AdamW's update with no decay of its own, per parameter with its own count t:
//   m = beta1 m + (1 - beta1) d;  v = beta2 v + (1 - beta2) d^2;
//   w = w - (lr / (1 - beta1^t)) * (m / (sqrt(v) / sqrt(1 - beta2^t) + eps))
// That update is AdamW's (adamw.hpp: its arithmetic, counts, moments and device kernels), which
// this class runs with weight decay 0, handing it d in place of g for the step; the parameters'
// gradients are left as they were. A parameter without a gradient at some step() is left alone.
#pragma once

#include <cstdint>
#include <vector>

#include "tapegrad/optim/adamw.hpp"

namespace tapegrad::optim {

struct AdamConfig {  // PyTorch's defaults
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2: added to the gradient
};

class Adam {
 public:
  // Throws tapegrad::Error "[adam] ..." naming the hyperparameter (lr positive and finite, the
  // betas in [0, 1), eps and weight_decay finite and >= 0) or the parameter that is not f32 or f64.
  Adam(std::vector<Var> params, AdamConfig config);  // one group
  // Groups (param_group.hpp): each unset option takes `config`'s; SGD's options are refused.
  Adam(const std::vector<ParamGroup>& groups, AdamConfig config);

  // One update of every parameter that has a gradient, with its group's hyperparameters as they
  // are now; each such parameter's count goes up by one.
  void step();

  // ---- hyperparameters, per group: written between steps, checked at the next step()
  size_t group_count() const { return groups_.size(); }
  AdamConfig& group(size_t i) { return groups_.at(i); }
  const AdamConfig& group(size_t i) const { return groups_.at(i); }
  void set_lr(double lr);  // every group's; finite and >= 0
  double lr(size_t group = 0) const { return groups_.at(group).lr; }

  // ---- the state as named tensors (state.hpp), AdamW's layout under "adam.": "adam.step", per
  // group i "adam.group.<i>.params", ".lr", ".beta1", ".beta2", ".eps", ".weight_decay", per
  // parameter k "adam.step.<k>", "adam.m.<k>", "adam.v.<k>". load_state refuses by name and
  // changes nothing on a refusal.
  NamedTensors state_tensors() const;
  void load_state(const NamedTensors& state);

  uint64_t step_count() const { return adamw_.step_count(); }
  uint64_t step_count(size_t k) const { return adamw_.step_count(k); }
  const Tensor& m(size_t k) const { return adamw_.m(k); }
  const Tensor& v(size_t k) const { return adamw_.v(k); }
  const std::vector<Var>& parameters() const { return adamw_.parameters(); }

 private:
  std::vector<AdamConfig> groups_;  // their weight decay is Adam's L2; adamw_'s groups have none
  AdamW adamw_;
};

}  // namespace tapegrad::optim
