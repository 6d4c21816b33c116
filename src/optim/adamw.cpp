// AdamW (see adamw.hpp): hyperparameter checks, the fp64 bias corrections, one kernel call per
// parameter.
#include "tapegrad/optim/adamw.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace tapegrad::optim {
namespace {

// The shortest decimal text that reads back as `value` ("0.1", "1e-08").
std::string shown(double value) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof text, value);
  return std::string(text, result.ptr);
}

void check_config(const AdamWConfig& c) {
  auto refuse = [](const char* name, double value, const char* rule) {
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
    if (p.dtype() != DType::f32 && p.dtype() != DType::f64)
      throw Error("[adamw] parameter " + std::to_string(k) +
                  (params_[k].label().empty() ? "" : " ('" + params_[k].label() + "')") + " is " +
                  dtype_name(p.dtype()) + "; AdamW updates f32 and f64 parameters");
    m_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    v_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    const int64_t blocks = (p.numel() + kernels::adamw_zero_block - 1) / kernels::adamw_zero_block;
    const bool tracked = p.device().is_cpu() && p.dtype() == DType::f32;
    zero_blocks_.emplace_back(tracked ? static_cast<size_t>(blocks) : 0, uint8_t{1});  // zeros so far
  }
  steps_.assign(params_.size(), 0);
}

void AdamW::set_step_count(uint64_t t) {
  t_ = t;
  std::fill(steps_.begin(), steps_.end(), t);
}

void AdamW::set_moments(size_t k, const Tensor& m, const Tensor& v) {
  m_.at(k).copy_from(m);
  v_.at(k).copy_from(v);
  std::fill(zero_blocks_[k].begin(), zero_blocks_[k].end(), uint8_t{0});  // unknown until the next update
}

kernels::AdamWScalars AdamW::scalars(uint64_t t) const {
  // The f32 fields take the hyperparameters as fp32 values; bc1 and bc2 are computed in fp64 from
  // those values (bob's arithmetic), the f64 fields from the config's own.
  const float lr = static_cast<float>(config_.lr), beta1 = static_cast<float>(config_.beta1),
              beta2 = static_cast<float>(config_.beta2);
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  kernels::AdamWScalars s{};
  s.lr = lr;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = static_cast<float>(config_.eps);
  s.weight_decay = static_cast<float>(config_.weight_decay);
  s.step_size = static_cast<float>(static_cast<double>(lr) / bc1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.lr64 = config_.lr;
  s.beta1_64 = config_.beta1;
  s.beta2_64 = config_.beta2;
  s.eps64 = config_.eps;
  s.weight_decay64 = config_.weight_decay;
  s.step_size64 = config_.lr / (1.0 - std::pow(config_.beta1, static_cast<double>(t)));
  s.bc2_sqrt64 = std::sqrt(1.0 - std::pow(config_.beta2, static_cast<double>(t)));
  return s;
}

void AdamW::step() {
  ++t_;
  update_all(nullptr);
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
  update_all(&s);
}

void AdamW::update_all(const kernels::AdamWScalars* fixed) {
  // Parameters without a gradient are left alone; the others go in one call per device and count
  // (on CUDA, one launch per 16 parameters).
  const size_t n = params_.size();
  std::vector<Tensor> values(n);  // handles to the parameters' values (the same storage)
  std::vector<bool> pending(n, false);
  for (size_t k = 0; k < n; ++k) {
    values[k] = params_[k].value();
    pending[k] = params_[k].sparse_grad() != nullptr || params_[k].grad().defined();
    if (pending[k] && !fixed) ++steps_[k];  // a scheduled (captured) update moves no count: the caller does
  }
  const Tensor none;
  for (size_t first = 0; first < n; ++first) {
    if (!pending[first]) continue;
    std::vector<kernels::AdamWSlot> slots;
    for (size_t k = first; k < n; ++k) {
      if (!pending[k] || !(values[k].device() == values[first].device()) || steps_[k] != steps_[first]) continue;
      const RowSparse* sparse = values[k].device().is_cpu() ? params_[k].sparse_grad() : nullptr;  // else dense
      kernels::AdamWSlot slot{&values[k], sparse ? &none : &params_[k].grad(), &m_[k], &v_[k],
                              zero_blocks_[k].empty() ? nullptr : zero_blocks_[k].data()};
      if (sparse) {
        slot.row_ids = &sparse->ids;
        slot.rows = &sparse->rows;
      }
      slots.push_back(slot);
      pending[k] = false;
    }
    kernels::adamw_step_many(slots, fixed ? *fixed : scalars(steps_[first]));
    for (const kernels::AdamWSlot& slot : slots) {
      slot.param->mark_modified();
      slot.m->mark_modified();
      slot.v->mark_modified();
    }
  }
}

}  // namespace tapegrad::optim
