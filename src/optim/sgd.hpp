// SGD, torch.optim.SGD's update, for any set of f32 or f64 parameters of any shapes, on any device.
//
// Two forms:
// - plain, stateless: SGD(lr).step(params) makes p = p - lr * grad for every parameter passed that
//   has a gradient (the tiny step's arithmetic, bit for bit);
// - with state: SGD(params or groups, config).step() makes, per parameter with a gradient and with
//   its group's hyperparameters as they are at that step (PyTorch's _single_tensor_sgd):
//     d = g + weight_decay * p                                   (when weight_decay != 0)
//     buf = d at the buffer's first update, then momentum * buf + (1 - dampening) * d
//     d = d + momentum * buf (nesterov), else d = buf            (when momentum != 0)
//     p = p - lr * d
//   A momentum buffer is made at a parameter's first update with momentum, as PyTorch makes it
//   (buf = d, no dampening); without momentum there is none and the update is the plain one.
// Every product and sum is rounded on its own in the parameter's dtype (kernels::SGDElement). A
// row-sparse gradient is read dense (Var::grad makes it so).
#pragma once

#include <cstdint>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/optim/param_group.hpp"
#include "tapegrad/optim/state.hpp"

namespace tapegrad::optim {

// Throws "learning rate must be a positive finite number, got X" (the reference's check).
void check_learning_rate(double lr, const char* shown = nullptr);

struct SGDConfig {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD {
 public:
  // The plain form: no parameters of its own, step(params) only. Throws check_learning_rate's error.
  explicit SGD(double lr);
  // With state. Throws "[sgd] momentum must be a finite number >= 0, got -1" (lr positive and
  // finite; momentum, weight_decay finite and >= 0; dampening finite; nesterov needs momentum > 0
  // and dampening 0, as PyTorch wants), or names the parameter that is not f32 or f64, or one in
  // two groups. Groups: an unset option takes `config`'s value; AdamW's options are refused.
  SGD(std::vector<Var> params, SGDConfig config);
  SGD(std::vector<ParamGroup> groups, SGDConfig config);

  // The plain update of every parameter passed that has a gradient, in place, with group 0's lr.
  // Refused on an SGD with momentum or weight decay (its state is in step()).
  void step(const std::vector<Var>& params) const;
  // The update of every parameter of this SGD that has a gradient; its count goes up by one.
  void step();

  // ---- hyperparameters, per group: written between steps, checked at the next step() (where lr
  // may be 0, the end of a schedule)
  size_t group_count() const { return groups_.size(); }
  SGDConfig& group(size_t i) { return groups_.at(i); }
  const SGDConfig& group(size_t i) const { return groups_.at(i); }
  const std::vector<size_t>& group_parameters(size_t i) const { return members_.at(i); }  // indices into parameters()
  void set_lr(double lr);  // every group's; finite and >= 0
  double lr(size_t group = 0) const { return groups_.at(group).lr; }
  double learning_rate() const { return lr(); }

  // ---- state: parameter k's updates so far and its momentum buffer (undefined until its first
  // update with momentum)
  uint64_t step_count(size_t k) const { return steps_.at(k); }
  const Tensor& momentum_buffer(size_t k) const { return buffers_.at(k); }
  // The whole state as named tensors (state.hpp), copies: per group i "sgd.group.<i>.params" (its
  // parameters' indices, (n,) i64) and ".lr", ".momentum", ".dampening", ".weight_decay",
  // ".nesterov" (() f64, 0 or 1), per parameter k "sgd.step.<k>" and, where it exists,
  // "sgd.momentum_buffer.<k>". load_state takes them back bit for bit into an SGD over parameters
  // of the same shapes and dtypes in the same groups, or refuses by name and changes nothing.
  NamedTensors state_tensors() const;
  void load_state(const NamedTensors& state);

  const std::vector<Var>& parameters() const { return params_; }

 private:
  std::vector<Var> params_;
  std::vector<SGDConfig> groups_;
  std::vector<std::vector<size_t>> members_;
  std::vector<Tensor> buffers_;
  std::vector<uint64_t> steps_;
};

}  // namespace tapegrad::optim
