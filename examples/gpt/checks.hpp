// gpt's checks of what a checkpoint says and of what a step computes: a field is checked before it
// is used, never taken as a default when it names something unknown, and a size is compared with
// the file before anything of that size is built (docs/reliability.md, "What gpt promises").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "model.hpp"

namespace gpt {

// The parameters GPT(c) has, from the settings alone (model.hpp's layers, nn::Block without biases):
// wte V C + wpe T C + L (12 C^2 + 2 C) + C (ln_f) + P V C (value embeddings). Exact for every size
// the settings' bounds allow (at most about 2^46).
int64_t parameter_count(const Config& c);

// Refuses a checkpoint at `path` whose model tensors ("model.*") hold another number of elements
// than the settings' model has: a file of a few hundred bytes whose settings ask for hundreds of
// gigabytes is refused before a byte of the model is allocated.
void check_model_size(const std::string& path, const Config& c, const nn::StateDict& saved);

// The value of `key` in a checkpoint's settings: one of `allowed`, or the first of them (the value
// checkpoints from before the setting existed ran with) when absent. An unknown value is refused by
// name ("P: its settings say dtype=f16, which is neither f32 nor f64").
std::string setting(const std::map<std::string, std::string>& fields, const std::string& path, const char* key,
                    std::initializer_list<const char*> allowed);

// Refuses a checkpoint whose AdamW hyperparameters (each group's beta1, beta2, eps, weight_decay)
// are not the ones this run's optimizer was built with: the settings text names them, the tensors
// are what load_state would take. (The learning rate is not compared: the schedule sets it at every
// step.) A missing or malformed tensor is left to AdamW::load_state, which names it.
void check_adamw_settings(const std::string& path, const nn::StateDict& saved,
                          const std::vector<optim::AdamWConfig>& groups);  // the run's, group by group

// Stops training at a loss that is not finite, naming the step (1-based), before anything of it is
// written.
void check_loss(double loss, int64_t step);

}  // namespace gpt
