// AdamW with decoupled weight decay (Loshchilov and Hutter): torch.optim.AdamW's update, for any
// set of f32 or f64 parameters of any shapes, on any device.
//
// Semantics (PyTorch's): each parameter counts its own updates t, the ones it had a gradient for;
// a parameter without a gradient at some step() is left alone, moments and count included. For
// update t of a parameter, with the bias corrections in fp64:
//   bc1 = 1 - beta1^t, bc2 = 1 - beta2^t, step_size = lr / bc1, bc2_sqrt = sqrt(bc2)
//   w = w * (1 - lr*wd);  m = beta1*m + (1 - beta1)*g;  v = beta2*v + (1 - beta2)*g*g
//   w = w - step_size * (m / (sqrt(v) / bc2_sqrt + eps))
// (PyTorch writes the m update as a lerp, m + (g - m)*(1 - beta1): the same number in exact
// arithmetic, not always in floating point.)
// Arithmetic: f32 parameters compute in fp32, in exactly this order, with step_size and bc2_sqrt
// rounded once to fp32 and the hyperparameters taken as fp32 values: bob's arithmetic (docs/bob.md),
// which bob's checkpoints depend on bit for bit. f64 parameters compute the same expressions in fp64.
// The moments M and V live on each parameter's device, in its dtype. A row-sparse gradient
// (Var::sparse_grad) is read as it is on the CPU: the rows it does not name get the update of a
// +0 gradient.
// Parameter groups (param_group.hpp) each have their own hyperparameters, read at every step():
// set_lr (or a schedule, schedule.hpp) changes them between steps without a new optimizer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/autocast.hpp"
#include "tapegrad/optim/param_group.hpp"
#include "tapegrad/optim/state.hpp"

namespace tapegrad::optim {

struct AdamWConfig {  // PyTorch's defaults
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW {
 public:
  // Throws tapegrad::Error naming the hyperparameter (lr must be positive and finite, the betas in
  // [0, 1), eps and weight_decay finite and >= 0) or the parameter that is not f32 or f64.
  AdamW(std::vector<Var> params, AdamWConfig config);  // one group
  // Groups: each unset option takes `config`'s value; an option AdamW lacks (momentum) is refused,
  // and so is a parameter in two groups ("[adamw] group 1: weight_decay must be ...").
  AdamW(std::vector<ParamGroup> groups, AdamWConfig config);

  // One update of every parameter that has a gradient, with its group's hyperparameters as they
  // are now; each such parameter's count goes up by one. grad_scale, when defined, is a () f64
  // tensor on the parameters' device (clip_grad_factor_on_device's factor): every gradient is read
  // multiplied by it (rounded to the gradient's dtype), the update scaling the gradients first
  // would give; the gradients stay as they are.
  void step(const Tensor& grad_scale = Tensor());

  // The scalars the kernel gets for update number t (t >= 1) of a parameter of `group`: its
  // hyperparameters and the bias corrections (rounded to fp32 for the f32 fields).
  kernels::AdamWScalars scalars(uint64_t t, size_t group = 0) const;

  // ---- hyperparameters, per group: written between steps, checked at the next step() (where lr
  // may be 0, the end of a schedule; the constructor wants it positive)
  size_t group_count() const { return groups_.size(); }
  AdamWConfig& group(size_t i) { return groups_.at(i); }
  const AdamWConfig& group(size_t i) const { return groups_.at(i); }
  const std::vector<size_t>& group_parameters(size_t i) const { return members_.at(i); }  // indices into parameters()
  void set_lr(double lr);  // every group's; finite and >= 0
  double lr(size_t group = 0) const { return groups_.at(group).lr; }

  // ---- the whole state as named tensors (state.hpp), copies: "adamw.step" (step() calls), per
  // group i "adamw.group.<i>.params" (its parameters' indices, (n,) i64) and ".lr", ".beta1",
  // ".beta2", ".eps", ".weight_decay", per parameter k "adamw.step.<k>", "adamw.m.<k>",
  // "adamw.v.<k>". load_state takes them back bit for bit into an optimizer over parameters of the
  // same shapes and dtypes in the same groups, or refuses by name and changes nothing.
  NamedTensors state_tensors() const;
  void load_state(const NamedTensors& state);

  // ---- the same state piece by piece (what bob's checkpoints use): the step() calls made, each
  // parameter's own count, and parameter k's moments (same shape, dtype and device as the parameter). Write the moments only through
  // set_moments: on the CPU the optimizer keeps track of where they are zero (Note [adamw zero
  // blocks] in src/kernels/cpu/elementwise.cpp), and a write behind its back would leave that out
  // of date.
  uint64_t step_count() const { return t_; }
  uint64_t step_count(size_t k) const { return steps_.at(k); }
  void set_step_count(uint64_t t);  // step() calls made, and every parameter's count, = t
  void set_step_count(size_t k, uint64_t t) { steps_.at(k) = t; }
  const Tensor& m(size_t k) const { return m_.at(k); }
  const Tensor& v(size_t k) const { return v_.at(k); }
  // Copies m and v (parameter k's shape and dtype, any device) into parameter k's moments.
  void set_moments(size_t k, const Tensor& m, const Tensor& v);

  // ---- CUDA graphs (Note [AdamW in a captured graph] in adamw.cpp)
  // Writes the step scalars of updates t+1 .. t+n into slots 0 .. n-1 of a table on the
  // parameters' device, made by the first call with n slots and never moved (a captured graph holds
  // its address). Call it before capturing, and before each replay. Throws if n exceeds the table.
  // A captured update gives every parameter with a gradient these scalars (their own counts do not
  // apply, and do not move: set them after the replay with set_step_count). The table holds them
  // per group, from each group's lr when written (so a schedule's lr may change between replays);
  // the betas, eps and weight decay are those at capture: change them only with a new capture.
  void write_schedule(uint64_t t, size_t n);
  // The update of every parameter with a gradient, its step scalars read from slot k of that table
  // when the kernel runs: what a captured body calls. It does not move the step count; the caller
  // sets it after the replay that runs the update (set_step_count).
  void scheduled_step(size_t k, const Tensor& grad_scale = Tensor());  // grad_scale as step()'s

  // ---- bf16 weight copies (Note [bf16 weight copies] in ops/autocast.hpp)
  // From now on every update also rounds each f32 parameter into a bf16 copy, which autocast's
  // products take in place of casting the parameter while it has had no other write. Makes the
  // copies now (a cast each); calling it again does nothing. f64 parameters get none (they are
  // never cast). The copies go with the optimizer; its state (state_tensors) leaves them out.
  // Refused once a scheduled (captured) update exists: call it before capturing.
  void keep_bf16_copies();
  // Casts every parameter into its copy again and registers it as current: for a weight written
  // by anything but this optimizer while a captured step lives (a captured product reads the copy
  // its capture found, whatever the weight's version says). Eager steps need no call: a stale copy
  // is never taken there.
  void refresh_bf16_copies();
  bool keeps_bf16_copies() const { return copy_registry_ != nullptr; }

  const std::vector<Var>& parameters() const { return params_; }
  const AdamWConfig& config() const { return groups_.front(); }  // group 0's hyperparameters

 private:
  std::vector<Var> params_;
  std::vector<AdamWConfig> groups_;          // each group's hyperparameters, now
  std::vector<std::vector<size_t>> members_;  // each group's parameters (indices into params_)
  std::vector<Tensor> m_, v_;
  // per CPU parameter, a flag per block of kernels::adamw_zero_block elements: 1 where m and v are
  // known to be all +0 (empty for parameters on other devices)
  std::vector<std::vector<uint8_t>> zero_blocks_;
  uint64_t t_ = 0;              // step() calls
  std::vector<uint64_t> steps_;  // per parameter: the updates it has had
  // (slots, 3 * groups) f32 on the parameters' device: (step_size, bc2_sqrt, decay) per slot and group
  static constexpr int64_t kScheduleFloats = 3;
  Tensor schedule_;
  // keep_bf16_copies: per parameter its bf16 copy (undefined for f64), and their registrations,
  // shared by copies of this optimizer and dropped with the last
  std::vector<Tensor> copies_;
  std::shared_ptr<ops::Bf16Copies> copy_registry_;
  // each parameter with a copy cast into it and registered as current
  void cast_into_copies(const std::vector<Tensor>& copies, ops::Bf16Copies& registry) const;

  // Parameters with a gradient: each with its own count's scalars, or with its group's scalars from
  // slot `slot` of the schedule (a captured update) when slot >= 0.
  void update_all(int64_t slot, const Tensor& grad_scale);
};

}  // namespace tapegrad::optim
