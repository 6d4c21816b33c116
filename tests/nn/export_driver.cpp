// The tapegrad side of tests/nn/check_export.py: a 2-block GPT-like model (nn_testing.hpp's
// TinyGPT, default initialisation from a seed) in f64 and in f32, one forward and backward of a
// cross-entropy loss, all exported as safetensors: the parameters under "f64/NAME" and "f32/NAME",
// the batch, the logits, the loss and every parameter's gradient under "f64/grad/NAME" and so on.
// PyTorch then loads the parameters by name and must give the same logits, loss and gradients.
//   export_driver OUT.safetensors
#include <cstdio>

#include "nn_testing.hpp"

using namespace tapegrad;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: export_driver OUT.safetensors\n");
    return 2;
  }
  nn::StateDict out;
  std::vector<int64_t> ids(12), targets(12);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((5 * i + 2) % 11), targets[i] = static_cast<int64_t>((3 * i + 1) % 11);
  const Tensor ids_t = Tensor::from_vector(ids, Shape{2, 6}), targets_t = Tensor::from_vector(targets, Shape{2, 6});
  out.push_back({"ids", ids_t});
  out.push_back({"targets", targets_t});
  for (const DType dtype : {DType::f64, DType::f32}) {
    const std::string prefix = std::string(dtype_name(dtype)) + "/";
    testing::Place place(11, dtype);
    testing::TinyGPT model(place.f, 11, 6, 8, 2, 2);
    for (auto& t : nn::state_dict(model)) out.push_back({prefix + t.first, t.second});
    Var logits = model(place.g.input(ids_t));
    Var loss = ops::cross_entropy(logits, place.g.input(targets_t));
    place.g.backward(loss);
    out.push_back({prefix + "logits", logits.value()});
    out.push_back({prefix + "loss", loss.value()});
    for (const auto& [name, p] : model.named_parameters()) out.push_back({prefix + "grad/" + name, p.grad()});
  }
  nn::export_safetensors(argv[1], out);
  return 0;
}
