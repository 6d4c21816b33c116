// Parameter groups: parameters that share hyperparameters of their own inside one optimizer
// (torch.optim's param_groups), e.g. weight decay on matrices and none on biases and norms:
//   optim::AdamW adamw({{matrices, {.weight_decay = 0.1}}, {vectors, {.weight_decay = 0.0}}}, config);
// A field left unset takes the optimizer's config value. A parameter may be in one group only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tapegrad/graph/graph.hpp"

namespace tapegrad::optim {

struct GroupOptions {
  std::optional<double> lr = std::nullopt, weight_decay = std::nullopt;
  std::optional<double> beta1 = std::nullopt, beta2 = std::nullopt, eps = std::nullopt;  // AdamW's
  std::optional<double> momentum = std::nullopt, dampening = std::nullopt;              // SGD's
  std::optional<bool> nesterov = std::nullopt;                                          // SGD's
};

struct ParamGroup {
  std::vector<Var> params = {};
  GroupOptions options = {};
};

// nanoGPT's split (its configure_optimizers): group 0 holds the parameters of rank >= 2 (matrices,
// embeddings, convolution kernels) with weight_decay, group 1 the others (biases, norms' weights
// and other vectors and scalars) with weight decay 0; each keeps the order of `params`. Both
// groups are there even when one is empty.
std::vector<ParamGroup> decay_groups(const std::vector<Var>& params, double weight_decay);

// ---- for the optimizers

// The groups' parameters in group order, and which of them (indices into params) each group has.
// Throws "[op] parameter 3 ('w') is in groups 0 and 1; a parameter belongs to one group, once"
// (or "twice in group 0"), "[op] parameter 1 ('table') is bf16; <optimizer> updates f32 and f64
// parameters", and refuses an empty list of groups.
struct FlatGroups {
  std::vector<Var> params;
  std::vector<std::vector<size_t>> members;
};
FlatGroups flatten_groups(const char* op, const char* optimizer, const std::vector<ParamGroup>& groups);

// The shortest decimal text that reads back as `value` ("0.1", "1e-08"): what refusals show.
std::string shortest_text(double value);

// The optimizers' refusals of a hyperparameter: "[op] <where>name must be <rule>, got <value>",
// where names the group when there are several (group_where: "group 1: ", or "").
std::string group_where(size_t group, size_t groups);
[[noreturn]] void refuse_hyperparameter(const char* op, const std::string& where, const char* name, double value,
                                        const char* rule);
// lr is positive and finite for a constructor; at a step it may be 0 (a schedule's end).
void check_lr(const char* op, const std::string& where, double lr, bool at_step);
void check_nonnegative(const char* op, const std::string& where, const char* name, double value);  // finite, >= 0

// Adam's and AdamW's hyperparameters (their configs have the same fields: lr, beta1, beta2, eps,
// weight_decay): checked, "[op] <where>beta1 must be in [0, 1), got 1" (lr may be 0 at a step);
// and group i's options over `config`, where SGD's options are refused naming `optimizer`.
template <class Config>
void check_adam_config(const char* op, const Config& c, const std::string& where, bool at_step) {
  check_lr(op, where, c.lr, at_step);
  if (!(c.beta1 >= 0 && c.beta1 < 1)) refuse_hyperparameter(op, where, "beta1", c.beta1, "in [0, 1)");
  if (!(c.beta2 >= 0 && c.beta2 < 1)) refuse_hyperparameter(op, where, "beta2", c.beta2, "in [0, 1)");
  check_nonnegative(op, where, "eps", c.eps);
  check_nonnegative(op, where, "weight_decay", c.weight_decay);
}
template <class Config>
Config adam_group_config(const char* op, const char* optimizer, const GroupOptions& o, Config c, size_t i) {
  const char* foreign = o.momentum ? "momentum" : o.dampening ? "dampening" : o.nesterov ? "nesterov" : nullptr;
  if (foreign)
    throw Error(std::string("[") + op + "] group " + std::to_string(i) + " sets " + foreign + ", which " + optimizer +
                " does not have (SGD does)");
  if (o.lr) c.lr = *o.lr;
  if (o.beta1) c.beta1 = *o.beta1;
  if (o.beta2) c.beta2 = *o.beta2;
  if (o.eps) c.eps = *o.eps;
  if (o.weight_decay) c.weight_decay = *o.weight_decay;
  return c;
}

// "parameter 2 ('w')", or "parameter 2" when it has no label: how refusals name a parameter.
std::string parameter_name(size_t k, const Var& p);

}  // namespace tapegrad::optim
