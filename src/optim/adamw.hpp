// AdamW with decoupled weight decay (Loshchilov and Hutter), the update torch.optim.AdamW makes,
// for any set of f32 parameters of any shapes, on any device.
//
// Rule: the arithmetic is spec/bob.md's, and it is normative. Hyperparameters are binary32; for
// update t (1-based, counting every update this state has made) the bias corrections are computed
// in fp64 from the fp32 values, rounded once to fp32, and the per-element update runs in fp32 in
// the kernel (kernels::adamw_step, so each device brings its own kernel):
//   bc1 = 1 - beta1^t, bc2 = 1 - beta2^t                          (fp64)
//   step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2)
//   w = w * (1 - lr*wd);  m = beta1*m + (1 - beta1)*g;  v = beta2*v + (1 - beta2)*g*g
//   w = w - step_size * (m / (sqrt(v) / bc2_sqrt + eps))         (fp32, in this order, no FMA)
// The moments M and V live on each parameter's device. The step count t is one for the whole
// optimizer (it is what a checkpoint carries); a parameter without a gradient at some update is
// left alone, moments included, as PyTorch leaves it.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.hpp"
#include "ops/kernels.hpp"

namespace tapegrad::optim {

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};

class AdamW {
 public:
  // Throws tapegrad::Error naming the hyperparameter (lr must be positive and finite, the betas in
  // [0, 1), eps and weight_decay finite and >= 0) or the parameter that is not f32.
  AdamW(std::vector<Var> params, AdamWConfig config);

  // One update of every parameter that has a gradient; the step count goes up by one.
  void step();

  // The scalars the kernel gets for update number t (t >= 1): the config and the rounded bias
  // corrections.
  kernels::AdamWScalars scalars(uint64_t t) const;

  // ---- state, for checkpoints: the step count and parameter k's moments (same shape and device
  // as the parameter). Write the moments only through set_moments: on the CPU the optimizer keeps
  // track of where they are zero (Note [adamw zero blocks] in src/ops/cpu/elementwise.cpp), and a
  // write behind its back would leave that out of date.
  uint64_t step_count() const { return t_; }
  void set_step_count(uint64_t t) { t_ = t; }
  const Tensor& m(size_t k) const { return m_.at(k); }
  const Tensor& v(size_t k) const { return v_.at(k); }
  // Copies m and v (parameter k's shape and dtype, any device) into parameter k's moments.
  void set_moments(size_t k, const Tensor& m, const Tensor& v);

  // ---- CUDA graphs (Note [AdamW in a captured graph] in adamw.cpp)
  // Writes the step scalars of updates t+1 .. t+n into slots 0 .. n-1 of a table on the
  // parameters' device, made by the first call with n slots and never moved (a captured graph holds
  // its address). Call it before capturing, and before each replay. Throws if n exceeds the table.
  void write_schedule(uint64_t t, size_t n);
  // The update of every parameter with a gradient, its step scalars read from slot k of that table
  // when the kernel runs: what a captured body calls. It does not move the step count; the caller
  // sets it after the replay that runs the update (set_step_count).
  void scheduled_step(size_t k);

  const std::vector<Var>& parameters() const { return params_; }
  const AdamWConfig& config() const { return config_; }

 private:
  std::vector<Var> params_;
  AdamWConfig config_;
  std::vector<Tensor> m_, v_;
  // per CPU parameter, a flag per block of kernels::adamw_zero_block elements: 1 where m and v are
  // known to be all +0 (empty for parameters on other devices)
  std::vector<std::vector<uint8_t>> zero_blocks_;
  uint64_t t_ = 0;
  Tensor schedule_;  // (slots, 2) f32 on the parameters' device: (step_size, bc2_sqrt) per slot

  void update_all(const kernels::AdamWScalars& s);
};

}  // namespace tapegrad::optim
