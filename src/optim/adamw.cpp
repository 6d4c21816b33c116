// AdamW (see adamw.hpp): hyperparameter checks, the fp64 bias corrections, one kernel call per
// parameter.
#include "optim/adamw.hpp"

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
  }
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
  const kernels::AdamWScalars s = scalars(t_);
  for (size_t k = 0; k < params_.size(); ++k) {
    const Tensor& grad = params_[k].grad();
    if (!grad.defined()) continue;
    Tensor value = params_[k].value();
    kernels::adamw_step(value, grad, m_[k], v_[k], s);
  }
}

}  // namespace tapegrad::optim
