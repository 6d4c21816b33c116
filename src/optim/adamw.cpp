// AdamW (see adamw.hpp): hyperparameter checks, the fp64 bias corrections, one kernel call per
// parameter.
#include "tapegrad/optim/adamw.hpp"

#include <algorithm>
#include <cmath>

namespace tapegrad::optim {
namespace {

// At a step, lr may be 0 (a schedule's end); the constructor wants it positive, as it always has.
void check_config(const AdamWConfig& c, const std::string& where, bool at_step) {
  check_adam_config("adamw", c, where, at_step);
}

AdamWConfig resolved(const GroupOptions& o, const AdamWConfig& c, size_t i) {
  return adam_group_config("adamw", "AdamW", o, c, i);
}

}  // namespace

AdamW::AdamW(std::vector<Var> params, AdamWConfig config)
    : AdamW(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, config) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWConfig config) {
  for (size_t i = 0; i < groups.size(); ++i) {
    groups_.push_back(resolved(groups[i].options, config, i));
    check_config(groups_.back(), group_where(i, groups.size()), false);
  }
  FlatGroups flat = flatten_groups("adamw", "AdamW", groups);
  params_ = std::move(flat.params);
  members_ = std::move(flat.members);
  m_.reserve(params_.size());
  v_.reserve(params_.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    const Tensor& p = params_[k].value();
    m_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    v_.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
    const int64_t blocks = (p.numel() + kernels::adamw_zero_block - 1) / kernels::adamw_zero_block;
    const bool tracked = p.device().is_cpu() && p.dtype() == DType::f32;
    zero_blocks_.emplace_back(tracked ? static_cast<size_t>(blocks) : 0, uint8_t{1});  // zeros so far
  }
  steps_.assign(params_.size(), 0);
}

void AdamW::keep_bf16_copies() {
  if (copy_registry_) return;
  if (schedule_.defined())  // a captured update (scheduled_step) would never write them
    throw Error("[adamw] keep_bf16_copies after a scheduled (captured) update: the captured kernels would never write "
                "the copies; call it before capturing");
  auto registry = std::make_shared<ops::Bf16Copies>();
  std::vector<Tensor> copies(params_.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    const Tensor& p = params_[k].value();
    if (p.dtype() == DType::f32) copies[k] = Tensor::empty(p.shape(), DType::bf16, p.device());
  }
  cast_into_copies(copies, *registry);  // a refusal leaves this optimizer as it was
  copies_ = std::move(copies);
  copy_registry_ = std::move(registry);
}

void AdamW::refresh_bf16_copies() {
  if (copy_registry_) cast_into_copies(copies_, *copy_registry_);
}

void AdamW::cast_into_copies(const std::vector<Tensor>& copies, ops::Bf16Copies& registry) const {
  for (size_t k = 0; k < params_.size(); ++k) {
    if (!copies[k].defined()) continue;
    const Tensor& p = params_[k].value();
    Tensor copy = copies[k];  // a handle: cast writes through it
    kernels::cast(p, copy);
    registry.keep(p, copy);
  }
}

void AdamW::set_lr(double lr) {
  check_lr("adamw", "", lr, true);
  for (AdamWConfig& c : groups_) c.lr = lr;
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

kernels::AdamWScalars AdamW::scalars(uint64_t t, size_t group) const {
  // The f32 fields take the hyperparameters as fp32 values; bc1 and bc2 are computed in fp64 from
  // those values (bob's arithmetic), the f64 fields from the config's own.
  const AdamWConfig& c = groups_.at(group);
  const float lr = static_cast<float>(c.lr), beta1 = static_cast<float>(c.beta1),
              beta2 = static_cast<float>(c.beta2);
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  kernels::AdamWScalars s{};
  s.lr = lr;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = static_cast<float>(c.eps);
  s.weight_decay = static_cast<float>(c.weight_decay);
  s.step_size = static_cast<float>(static_cast<double>(lr) / bc1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.lr64 = c.lr;
  s.beta1_64 = c.beta1;
  s.beta2_64 = c.beta2;
  s.eps64 = c.eps;
  s.weight_decay64 = c.weight_decay;
  s.step_size64 = c.lr / (1.0 - std::pow(c.beta1, static_cast<double>(t)));
  s.bc2_sqrt64 = std::sqrt(1.0 - std::pow(c.beta2, static_cast<double>(t)));
  return s;
}

void AdamW::step(const Tensor& grad_scale) {
  for (size_t i = 0; i < groups_.size(); ++i) check_config(groups_[i], group_where(i, groups_.size()), true);
  ++t_;
  update_all(-1, grad_scale);
}

// Note [AdamW in a captured graph]
// The step scalars (step_size, bc2_sqrt) change every update, and with a learning-rate schedule so
// does the decay factor 1 - lr * weight_decay; a captured kernel's arguments are frozen at
// capture. So a captured update passes the kernel the address of a slot in a small device table
// instead, and the host fills the table for the updates a replay will make: scalars(t) on the host
// from each group's lr when written, the same arithmetic, so the replayed update equals step() bit
// for bit. Computing
// beta^t on the device instead (what PyTorch's capturable AdamW does) would bring the device's pow,
// which need not round like the host's.
void AdamW::write_schedule(uint64_t t, size_t n) {
  if (params_.empty() || n == 0) return;
  const Device device = params_[0].value().device();
  for (const Var& p : params_)
    if (p.value().device() != device)
      throw Error("[adamw] a step schedule needs every parameter on one device; found " + device.str() + " and " +
                  p.value().device().str());
  const int64_t per_slot = kScheduleFloats * static_cast<int64_t>(groups_.size());
  if (!schedule_.defined()) schedule_ = Tensor::zeros(Shape{static_cast<int64_t>(n), per_slot}, DType::f32, device);
  if (static_cast<int64_t>(n) > schedule_.dim(0))
    throw Error("[adamw] the step schedule has " + std::to_string(schedule_.dim(0)) + " slots (a captured graph " +
                "reads them, so it does not grow); " + std::to_string(n) + " were asked for");
  std::vector<float> host(static_cast<size_t>(schedule_.numel()), 0.0f);
  for (size_t k = 0; k < n; ++k)
    for (size_t i = 0; i < groups_.size(); ++i) {
      const kernels::AdamWScalars s = scalars(t + k + 1, i);
      float* at = host.data() + k * static_cast<size_t>(per_slot) + kScheduleFloats * i;
      at[0] = s.step_size;
      at[1] = s.bc2_sqrt;
      at[2] = kernels::adamw_decay(s);
    }
  schedule_.copy_from(Tensor::from_vector(host, schedule_.shape()));
}

void AdamW::scheduled_step(size_t k, const Tensor& grad_scale) {
  if (!schedule_.defined() || static_cast<int64_t>(k) >= schedule_.dim(0))
    throw Error("[adamw] scheduled_step(" + std::to_string(k) + ") needs a step schedule with slot " +
                std::to_string(k) + "; call write_schedule first");
  update_all(static_cast<int64_t>(k), grad_scale);
}

void AdamW::update_all(int64_t slot, const Tensor& grad_scale) {
  // Parameters without a gradient are left alone; the others go in one call per group, device and
  // count (on CUDA, one launch per 16 parameters).
  const size_t n = params_.size();
  std::vector<Tensor> values(n);  // handles to the parameters' values (the same storage)
  std::vector<bool> pending(n, false);
  for (size_t k = 0; k < n; ++k) {
    values[k] = params_[k].value();
    pending[k] = params_[k].sparse_grad() != nullptr || params_[k].grad().defined();
    if (pending[k] && slot < 0) ++steps_[k];  // a scheduled (captured) update moves no count: the caller does
  }
  const Tensor none;
  for (size_t group = 0; group < groups_.size(); ++group) {
    const std::vector<size_t>& members = members_[group];
    for (size_t a = 0; a < members.size(); ++a) {
      const size_t first = members[a];
      if (!pending[first]) continue;
      std::vector<kernels::AdamWSlot> slots;
      for (size_t b = a; b < members.size(); ++b) {
        const size_t k = members[b];
        if (!pending[k] || !(values[k].device() == values[first].device()) || steps_[k] != steps_[first]) continue;
        const RowSparse* sparse = values[k].device().is_cpu() ? params_[k].sparse_grad() : nullptr;  // else dense
        kernels::AdamWSlot entry{&values[k], sparse ? &none : &params_[k].grad(), &m_[k], &v_[k],
                                 zero_blocks_[k].empty() ? nullptr : zero_blocks_[k].data()};
        if (sparse) {
          entry.row_ids = &sparse->ids;
          entry.rows = &sparse->rows;
        }
        if (!copies_.empty() && copies_[k].defined()) entry.copy = &copies_[k];
        slots.push_back(entry);
        pending[k] = false;
      }
      kernels::AdamWScalars s = scalars(slot < 0 ? steps_[first] : t_ + 1, group);
      s.grad_scale = grad_scale;
      if (slot >= 0)  // the other scalars are fixed at capture; these two are read when the kernel runs
        s.device_step_scalars = static_cast<const float*>(schedule_.raw_data()) + slot * schedule_.dim(1) +
                                kScheduleFloats * static_cast<int64_t>(group);
      kernels::adamw_step_many(slots, s);
      for (const kernels::AdamWSlot& entry : slots) {
        entry.param->mark_modified();
        entry.m->mark_modified();
        entry.v->mark_modified();
        if (entry.copy) {  // current again: made from the parameter as it now is
          entry.copy->mark_modified();
          copy_registry_->keep(*entry.param, *entry.copy);
        }
      }
    }
  }
}

// ---- state

NamedTensors AdamW::state_tensors() const {
  NamedTensors out;
  out.emplace_back("adamw.step", count_tensor(t_));
  for (size_t i = 0; i < groups_.size(); ++i) {
    const std::string prefix = "adamw.group." + std::to_string(i) + ".";
    out.emplace_back(prefix + "params", index_tensor(members_[i]));
    out.emplace_back(prefix + "lr", real_tensor(groups_[i].lr));
    out.emplace_back(prefix + "beta1", real_tensor(groups_[i].beta1));
    out.emplace_back(prefix + "beta2", real_tensor(groups_[i].beta2));
    out.emplace_back(prefix + "eps", real_tensor(groups_[i].eps));
    out.emplace_back(prefix + "weight_decay", real_tensor(groups_[i].weight_decay));
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    out.emplace_back("adamw.step." + std::to_string(k), count_tensor(steps_[k]));
    out.emplace_back("adamw.m." + std::to_string(k), m_[k].clone());
    out.emplace_back("adamw.v." + std::to_string(k), v_[k].clone());
  }
  return out;
}

void AdamW::load_state(const NamedTensors& state) {
  StateReader in("adamw", state);
  const uint64_t t = in.count("adamw.step");
  std::vector<AdamWConfig> groups(groups_.size());
  for (size_t i = 0; i < groups_.size(); ++i) {
    const std::string prefix = "adamw.group." + std::to_string(i) + ".";
    in.group_members(prefix + "params", members_[i], i);
    groups[i] = {.lr = in.real(prefix + "lr"), .beta1 = in.real(prefix + "beta1"), .beta2 = in.real(prefix + "beta2"),
                 .eps = in.real(prefix + "eps"), .weight_decay = in.real(prefix + "weight_decay")};
    check_config(groups[i], "load_state: group " + std::to_string(i) + ": ", true);
  }
  std::vector<uint64_t> steps(params_.size());
  std::vector<const Tensor*> moments;
  for (size_t k = 0; k < params_.size(); ++k) {
    const Tensor& p = params_[k].value();
    steps[k] = in.count("adamw.step." + std::to_string(k));
    moments.push_back(&in.tensor("adamw.m." + std::to_string(k), p.shape(), p.dtype()));
    moments.push_back(&in.tensor("adamw.v." + std::to_string(k), p.shape(), p.dtype()));
  }
  in.finish();
  // everything checked: now the state changes
  t_ = t;
  steps_ = std::move(steps);
  groups_ = std::move(groups);
  for (size_t k = 0; k < params_.size(); ++k) set_moments(k, *moments[2 * k], *moments[2 * k + 1]);
}

}  // namespace tapegrad::optim
