// gpt's checks of a checkpoint's fields and of a step's loss (see checks.hpp).
#include "checks.hpp"

#include <cmath>
#include <cstdio>

namespace gpt {
namespace {

std::string number_text(double x) {
  if (std::isnan(x)) return "NaN";  // never "-nan"
  char b[32];
  std::snprintf(b, sizeof b, "%.10g", x);
  return b;
}

}  // namespace

int64_t parameter_count(const Config& c) {
  // The settings' bounds (layers and heads <= 1024, dim <= 2^16, block <= 2^20, vocab <= 2^16,
  // value_embeds <= layers) keep every term below 2^47: no overflow.
  const int64_t V = c.vocab, T = c.block, C = c.dim, L = c.layers, P = c.value_embeds;
  return V * C + T * C + L * (12 * C * C + 2 * C) + C + P * V * C;
}

void check_model_size(const std::string& path, const Config& c, const nn::StateDict& saved) {
  int64_t in_file = 0;
  for (const auto& [name, tensor] : saved)
    if (name.starts_with("model.")) in_file += tensor.numel();  // each below the file's size: no overflow
  const int64_t wanted = parameter_count(c);
  if (in_file != wanted)
    throw Error(path + ": its settings (layers=" + std::to_string(c.layers) + " dim=" + std::to_string(c.dim) +
                " block=" + std::to_string(c.block) + " value_embeds=" + std::to_string(c.value_embeds) + ", vocab " +
                std::to_string(c.vocab) + ") make a model of " + std::to_string(wanted) +
                " parameters, but its model tensors hold " + std::to_string(in_file) +
                " numbers; the file does not hold the model its settings describe");
}

std::string setting(const std::map<std::string, std::string>& fields, const std::string& path, const char* key,
                    std::initializer_list<const char*> allowed) {
  const auto it = fields.find(key);
  if (it == fields.end()) return *allowed.begin();
  std::string names;
  size_t k = 0;
  for (const char* a : allowed) {
    if (it->second == a) return a;
    names += (k == 0 ? "" : k + 1 == allowed.size() ? (allowed.size() == 2 ? " nor " : " or ") : ", ") + std::string(a);
    ++k;
  }
  throw Error(path + ": its settings say " + key + "=" + it->second + ", which is " +
              (allowed.size() == 2 ? "neither " : "none of ") + names);
}

void check_adamw_settings(const std::string& path, const nn::StateDict& saved,
                          const std::vector<optim::AdamWConfig>& groups) {
  for (size_t i = 0; i < groups.size(); ++i) {
    const optim::AdamWConfig& run = groups[i];
    const std::pair<const char*, double> fields[] = {
        {"beta1", run.beta1}, {"beta2", run.beta2}, {"eps", run.eps}, {"weight_decay", run.weight_decay}};
    for (const auto& [field, value] : fields) {
      const std::string name = "adamw.group." + std::to_string(i) + "." + field;
      for (const auto& [saved_name, tensor] : saved) {
        if (saved_name != name || tensor.dtype() != DType::f64 || tensor.numel() != 1) continue;
        const double in_file = tensor.to(Device::cpu()).item();
        if (!(in_file == value))
          throw Error(path + ": its " + name + " is " + number_text(in_file) + ", but this run's AdamW has " + field +
                      "=" + number_text(value) + ": the file's optimizer is not the one its settings describe; start "
                      "a fresh run");
      }
    }
  }
}

void check_loss(double loss, int64_t step) {
  if (std::isfinite(loss)) return;
  throw Error("the loss of step " + std::to_string(step) + " is " + number_text(loss) +
              ": training stops here, and nothing of this step is written (a checkpoint of non-finite weights "
              "would be useless); the data, the settings or the checkpoint resumed from made it diverge");
}

}  // namespace gpt
