// AdamW (see adamw.hpp): hyperparameter checks, the fp64 bias corrections, one kernel call per
// parameter.
#include "optim/adamw.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace tapegrad::optim {
namespace {

// The shortest decimal text that reads back as `value` ("0.1", "1e-08").
std::string shown(float value) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof text, value);
  return std::string(text, result.ptr);
}

void check_config(const AdamWConfig& c) {
  auto refuse = [](const char* name, float value, const char* rule) {
    throw Error(std::string("[adamw] ") + name + " must be " + rule + ", got " + shown(value));
  };
  if (!(std::isfinite(c.lr) && c.lr > 0)) refuse("lr", c.lr, "a positive finite number");
  if (!(c.beta1 >= 0 && c.beta1 < 1)) refuse("beta1", c.beta1, "in [0, 1)");
  if (!(c.beta2 >= 0 && c.beta2 < 1)) refuse("beta2", c.beta2, "in [0, 1)");
  if (!(std::isfinite(c.eps) && c.eps >= 0)) refuse("eps", c.eps, "a finite number >= 0");
  if (!(std::isfinite(c.weight_decay) && c.weight_decay >= 0))
    refuse("weight_decay", c.weight_decay, "a finite number >= 0");
}

}  // namespace

AdamW::AdamW(std::vector<Var> params, AdamWConfig config) : params_(std::move(params)), config_(config) {
  check_config(config_);
  m_.reserve(params_.size());
  v_.reserve(params_.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    const Tensor& p = params_[k].value();
    if (p.dtype() != DType::f32)
      throw Error("[adamw] parameter " + std::to_string(k) +
                  (params_[k].label().empty() ? "" : " ('" + params_[k].label() + "')") + " is " +
                  dtype_name(p.dtype()) + "; AdamW's arithmetic is fp32 (spec/bob.md), so parameters must be f32");
    m_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    v_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    const int64_t blocks = (p.numel() + kernels::adamw_zero_block - 1) / kernels::adamw_zero_block;
    zero_blocks_.emplace_back(p.device().is_cpu() ? static_cast<size_t>(blocks) : 0, uint8_t{1});  // zeros so far
  }
}

void AdamW::set_moments(size_t k, const Tensor& m, const Tensor& v) {
  m_.at(k).copy_from(m);
  v_.at(k).copy_from(v);
  std::fill(zero_blocks_[k].begin(), zero_blocks_[k].end(), uint8_t{0});  // unknown until the next update
}

kernels::AdamWScalars AdamW::scalars(uint64_t t) const {
  const double bc1 = 1.0 - std::pow(static_cast<double>(config_.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(config_.beta2), static_cast<double>(t));
  kernels::AdamWScalars s{};
  s.lr = config_.lr;
  s.beta1 = config_.beta1;
  s.beta2 = config_.beta2;
  s.eps = config_.eps;
  s.weight_decay = config_.weight_decay;
  s.step_size = static_cast<float>(static_cast<double>(config_.lr) / bc1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  return s;
}

void AdamW::step() {
  ++t_;
  update_all(scalars(t_));
}

// Note [AdamW in a captured graph]
// The step scalars (step_size, bc2_sqrt) change every update, and a captured kernel's arguments are
// frozen at capture. So a captured update passes the kernel the address of a slot in a small device
// table instead, and the host fills the table for the updates a replay will make: scalars(t) on
// the host, the same fp64 arithmetic, so the replayed update equals step() bit for bit. Computing
// beta^t on the device instead (what PyTorch's capturable AdamW does) would bring the device's pow,
// which need not round like the host's.
void AdamW::write_schedule(uint64_t t, size_t n) {
  if (params_.empty() || n == 0) return;
  const Device device = params_[0].value().device();
  for (const Var& p : params_)
    if (p.value().device() != device)
      throw Error("[adamw] a step schedule needs every parameter on one device; found " + device.str() + " and " +
                  p.value().device().str());
  if (!schedule_.defined()) schedule_ = Tensor::zeros(Shape{static_cast<int64_t>(n), 2}, DType::f32, device);
  if (static_cast<int64_t>(n) > schedule_.dim(0))
    throw Error("[adamw] the step schedule has " + std::to_string(schedule_.dim(0)) + " slots (a captured graph " +
                "reads them, so it does not grow); " + std::to_string(n) + " were asked for");
  std::vector<float> host(static_cast<size_t>(schedule_.numel()), 0.0f);
  for (size_t k = 0; k < n; ++k) {
    const kernels::AdamWScalars s = scalars(t + k + 1);
    host[2 * k] = s.step_size;
    host[2 * k + 1] = s.bc2_sqrt;
  }
  schedule_.copy_from(Tensor::from_vector(host, schedule_.shape()));
}

void AdamW::scheduled_step(size_t k) {
  if (!schedule_.defined() || static_cast<int64_t>(k) >= schedule_.dim(0))
    throw Error("[adamw] scheduled_step(" + std::to_string(k) + ") needs a step schedule with slot " +
                std::to_string(k) + "; call write_schedule first");
  kernels::AdamWScalars s = scalars(t_ + 1);  // the other scalars are fixed; these two are overridden
  s.device_step_scalars = static_cast<const float*>(schedule_.raw_data()) + 2 * k;
  update_all(s);
}

void AdamW::update_all(const kernels::AdamWScalars& s) {
  // Parameters without a gradient are left alone; the others go in one call (on CUDA, one launch per
  // 16 parameters of a device), grouped by device.
  std::vector<Tensor> values;  // handles to the parameters' values (the same storage)
  values.reserve(params_.size());
  for (const Var& p : params_) values.push_back(p.value());
  std::vector<bool> done(params_.size(), false);
  for (size_t first = 0; first < params_.size(); ++first) {
    if (done[first] || !params_[first].grad().defined()) continue;
    std::vector<kernels::AdamWSlot> slots;
    for (size_t k = first; k < params_.size(); ++k) {
      if (done[k] || !params_[k].grad().defined() || !(values[k].device() == values[first].device())) continue;
      const Tensor& grad = params_[k].grad();
      slots.push_back({&values[k], &grad, &m_[k], &v_[k], zero_blocks_[k].empty() ? nullptr : zero_blocks_[k].data(),
                       params_[k].grad_rows(), grad.ndim() > 0 && grad.dim(0) > 0 ? grad.numel() / grad.dim(0) : 0});
      done[k] = true;
    }
    kernels::adamw_step_many(slots, s);
  }
}

}  // namespace tapegrad::optim
