// Learning-rate schedules (see schedule.hpp).
#include "tapegrad/optim/schedule.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "tapegrad/optim/param_group.hpp"

namespace tapegrad::optim {
namespace {

[[noreturn]] void refuse(const char* op, const std::string& what) { throw Error(std::string("[") + op + "] " + what); }

void check_positive(const char* op, const char* name, double value) {
  if (!(std::isfinite(value) && value > 0))
    refuse(op, std::string(name) + " must be a positive finite number, got " + shortest_text(value));
}

void check_step(const char* op, int64_t step) {
  if (step < 0) refuse(op, "step must be >= 0, got " + std::to_string(step));
}

}  // namespace

Constant::Constant(double lr) : lr_(lr) { check_positive("constant", "lr", lr); }

double Constant::lr(int64_t step) const {
  check_step("constant", step);
  return lr_;
}

WarmupCosine::WarmupCosine(double peak_lr, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : peak_(peak_lr), min_(min_lr), warmup_(warmup_steps), total_(total_steps) {
  check_positive("warmup_cosine", "peak_lr", peak_lr);
  if (!(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= peak_lr))
    refuse("warmup_cosine", "min_lr must be in [0, peak_lr] = [0, " + shortest_text(peak_lr) + "], got " +
                                shortest_text(min_lr));
  if (warmup_steps < 0 || total_steps < warmup_steps)
    refuse("warmup_cosine", "the steps need 0 <= warmup_steps <= total_steps, got warmup_steps " +
                                std::to_string(warmup_steps) + " and total_steps " + std::to_string(total_steps));
}

double WarmupCosine::lr(int64_t step) const {
  check_step("warmup_cosine", step);
  if (step < warmup_) return peak_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (step >= total_) return min_;
  const double r = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  return min_ + 0.5 * (1.0 + std::cos(std::numbers::pi * r)) * (peak_ - min_);
}

StepLR::StepLR(double lr, int64_t step_size, double gamma) : lr_(lr), gamma_(gamma), step_size_(step_size) {
  check_positive("step_lr", "lr", lr);
  if (step_size < 1) refuse("step_lr", "step_size must be >= 1, got " + std::to_string(step_size));
  check_positive("step_lr", "gamma", gamma);
}

double StepLR::lr(int64_t step) const {
  check_step("step_lr", step);
  return lr_ * std::pow(gamma_, static_cast<double>(step / step_size_));
}

}  // namespace tapegrad::optim
