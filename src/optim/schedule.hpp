// Learning-rate schedules: lr(step) for step = 0, 1, 2, ... (the number of optimizer steps made
// before the one it is for). A schedule is a pure function of the step, so a resumed run needs only
// its step count. Apply one before each step, with any optimizer:
//   opt.set_lr(schedule.lr(step));
//   opt.step();
// (PyTorch's LRScheduler keeps the step inside and calls scheduler.step() after the optimizer's;
// lr(step) here is what its get_last_lr() gives after `step` such calls.) set_lr sets every
// group's lr; to keep ratios between groups, set group(i).lr = ratio_i * schedule.lr(step).
//
// Every constructor checks its arguments and throws "[warmup_cosine] ..." naming the bad one.
#pragma once

#include <cstdint>

namespace tapegrad::optim {

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  virtual double lr(int64_t step) const = 0;  // step >= 0, else an error
};

// lr(step) = lr, always (torch.optim.lr_scheduler.ConstantLR with factor 1).
class Constant final : public LRSchedule {
 public:
  explicit Constant(double lr);
  double lr(int64_t step) const override;

 private:
  double lr_;
};

// Linear warmup, then a cosine down to min_lr (llm.c's and nanoGPT's get_lr):
//   step <  warmup:          lr = peak_lr * (step + 1) / warmup
//   warmup <= step < total:  r = (step - warmup) / (total - warmup),
//                            lr = min_lr + 0.5 * (1 + cos(pi * r)) * (peak_lr - min_lr)
//   step >= total:           lr = min_lr
// The warmup never gives 0 (step 0 gets peak_lr / warmup) and reaches peak_lr at its last step.
// peak_lr > 0, 0 <= min_lr <= peak_lr, 0 <= warmup <= total.
class WarmupCosine final : public LRSchedule {
 public:
  WarmupCosine(double peak_lr, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);
  double lr(int64_t step) const override;

 private:
  double peak_, min_;
  int64_t warmup_, total_;
};

// lr(step) = lr * gamma^floor(step / step_size) (torch.optim.lr_scheduler.StepLR, in its closed
// form; its chained steps multiply by gamma one decay at a time, which may differ in the last bit).
// lr > 0, step_size >= 1, gamma finite and > 0.
class StepLR final : public LRSchedule {
 public:
  StepLR(double lr, int64_t step_size, double gamma = 0.1);
  double lr(int64_t step) const override;

 private:
  double lr_, gamma_;
  int64_t step_size_;
};

}  // namespace tapegrad::optim
