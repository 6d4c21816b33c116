// Sparse row updates for a table trained through the value-embed pull (ops::value_embed_pull): only
// the pulled rows change, every other row of the table (and of the optimizer's state) is left alone.
//
// Rules: the per-element arithmetic is the dense optimizer's (sgd.hpp, adamw.hpp), computed in fp32
// and rounded once to the table's dtype (bf16 or f32). SparseAdamW is "lazy" Adam: a row's moments
// move only at the updates that pull it, while the step count t (and so the bias corrections) counts
// every update, as in PyTorch's SparseAdam.
#pragma once

#include <cstdint>

#include "tapegrad/ops/value_embed.hpp"
#include "tapegrad/optim/adamw.hpp"
#include "tapegrad/optim/state.hpp"

namespace tapegrad::optim {

class SparseSGD {
 public:
  explicit SparseSGD(double lr);  // lr positive and finite
  double learning_rate() const { return lr_; }
  // table[rows[r]] -= lr * grad[r] for every pulled row; `table` shares the parameter's storage.
  void step(Tensor table, const ops::PulledRows& pulled) const;

 private:
  double lr_;
};

class SparseAdamW {
 public:
  // Moments m, v: zeros of the table's shape, f32, on its device. Throws as AdamW does for a bad config.
  SparseAdamW(const Tensor& table, AdamWConfig config);
  // One update (t += 1) of the pulled rows; the table must be the one the moments were made for.
  void step(Tensor table, const ops::PulledRows& pulled);

  uint64_t step_count() const { return t_; }
  // The state for a checkpoint (src/optim/state.hpp's rules): "sparse_adamw.step" () i64 and
  // "sparse_adamw.m", "sparse_adamw.v", the moments (the table's shape, f32). load_state takes them
  // back bit for bit, refusing by name a missing, extra or mis-shaped tensor before it changes any.
  NamedTensors state_tensors() const;
  void load_state(const NamedTensors& state);
  const Tensor& m() const { return m_; }
  const Tensor& v() const { return v_; }
  const AdamWConfig& config() const { return dense_.config(); }
  void set_lr(double lr) { dense_.set_lr(lr); }  // for a schedule (schedule.hpp); finite and >= 0
  double lr() const { return dense_.lr(); }

 private:
  AdamW dense_;  // no parameters of its own: it checks the config and gives the scalars of update t
  Tensor m_, v_;
  uint64_t t_ = 0;
};

}  // namespace tapegrad::optim
