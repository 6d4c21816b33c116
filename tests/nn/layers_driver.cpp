// The tapegrad side of tests/nn/check_layers.py: PyTorch parity of the layers a PyTorch user
// reaches for first (Conv2d, the pools, Flatten, the activations, Sequential, LSTM and GRU and their
// cells), in f64, both ways.
//   layers_driver export OUT.safetensors   each case's layer from its default initialisation (seed
//       37), its inputs, its outputs, and the gradients of loss = sum over outputs k of sum(out_k *
//       r_k) for every parameter and every input, under "<case>/": "<case>/weight", "<case>/in0",
//       "<case>/r0", "<case>/out0", "<case>/grad/weight", "<case>/grad/in0", ...; and optim::Adam's
//       weights after each of 3 steps of given gradients, "adam/w0", "adam/g1", "adam/w1", ...
//   layers_driver check EXPORT IMPORT      IMPORT holds PyTorch's default-initialised layers'
//       state dicts and their outputs on the same inputs: each is loaded by name (strict: every
//       parameter present, none extra, the shapes PyTorch's) and must give PyTorch's outputs.
// check_layers.py builds each case by the same name.
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn_testing.hpp"
#include "tapegrad/nn/conv.hpp"
#include "tapegrad/nn/recurrent.hpp"
#include "tapegrad/nn/sequential.hpp"
#include "tapegrad/nn/stateless.hpp"
#include "tapegrad/optim/adam.hpp"

using namespace tapegrad;

namespace {

struct Case {
  std::string name;
  std::function<std::unique_ptr<nn::Module>(nn::Factory&)> make;
  std::vector<Shape> inputs;  // x first, then any states
  std::function<std::vector<Var>(nn::Module&, const std::vector<Var>&)> forward;
};

template <class M, class... Args>
std::function<std::unique_ptr<nn::Module>(nn::Factory&)> make(Args... args) {
  return [=](nn::Factory& f) -> std::unique_ptr<nn::Module> {
    if constexpr (std::is_constructible_v<M, nn::Factory&, Args...>) return std::make_unique<M>(f, args...);
    else return std::make_unique<M>(args...);
  };
}

// a module M called on x alone, one output
template <class M>
std::vector<Var> one(nn::Module& m, const std::vector<Var>& in) {
  return {static_cast<M&>(m)(in[0])};
}

std::vector<Case> cases() {
  using nn::KernelSize;
  std::vector<Case> c;
  c.push_back({"conv2d", make<nn::Conv2d>(int64_t{3}, int64_t{4}, KernelSize(3), 1, 1), {{2, 3, 6, 6}}, one<nn::Conv2d>});
  c.push_back({"conv2d_rect_stride_nobias", make<nn::Conv2d>(int64_t{2}, int64_t{3}, KernelSize(2, 3), 2, 0, false),
               {{2, 2, 7, 8}}, one<nn::Conv2d>});
  c.push_back({"conv2d_unbatched", make<nn::Conv2d>(int64_t{3}, int64_t{2}, KernelSize(3), 1, 0), {{3, 5, 5}},
               one<nn::Conv2d>});
  c.push_back({"max_pool2d", make<nn::MaxPool2d>(2), {{2, 3, 6, 6}}, one<nn::MaxPool2d>});
  c.push_back({"max_pool2d_stride_padding", make<nn::MaxPool2d>(3, std::optional<int>(2), 1), {{2, 2, 7, 7}},
               one<nn::MaxPool2d>});
  c.push_back({"avg_pool2d", make<nn::AvgPool2d>(2), {{2, 3, 6, 6}}, one<nn::AvgPool2d>});
  c.push_back({"avg_pool2d_stride_padding", make<nn::AvgPool2d>(3, std::optional<int>(2), 1), {{2, 2, 7, 7}},
               one<nn::AvgPool2d>});
  c.push_back({"flatten", make<nn::Flatten>(), {{2, 3, 4}}, one<nn::Flatten>});
  c.push_back({"flatten_0_1", make<nn::Flatten>(0, 1), {{2, 3, 4}}, one<nn::Flatten>});
  c.push_back({"relu", make<nn::ReLU>(), {{2, 5}}, one<nn::ReLU>});
  c.push_back({"gelu", make<nn::GELU>(), {{2, 5}}, one<nn::GELU>});
  c.push_back({"gelu_tanh", make<nn::GELU>(ops::Gelu::tanh), {{2, 5}}, one<nn::GELU>});
  c.push_back({"tanh", make<nn::Tanh>(), {{2, 5}}, one<nn::Tanh>});
  c.push_back({"sigmoid", make<nn::Sigmoid>(), {{2, 5}}, one<nn::Sigmoid>});
  c.push_back({"silu", make<nn::SiLU>(), {{2, 5}}, one<nn::SiLU>});
  c.push_back({"softmax", make<nn::Softmax>(1), {{2, 3, 4}}, one<nn::Softmax>});
  c.push_back({"log_softmax", make<nn::LogSoftmax>(-1), {{2, 3, 4}}, one<nn::LogSoftmax>});
  // nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(36, 5), nn.Tanh())
  c.push_back({"sequential_cnn",
               [](nn::Factory& f) -> std::unique_ptr<nn::Module> {
                 auto s = std::make_unique<nn::Sequential>();
                 s->emplace_back<nn::Conv2d>(f, 1, 4, 3);
                 s->emplace_back<nn::ReLU>();
                 s->emplace_back<nn::MaxPool2d>(2);
                 s->emplace_back<nn::Flatten>();
                 s->emplace_back<nn::Linear>(f, 36, 5);
                 s->emplace_back<nn::Tanh>();
                 return s;
               },
               {{2, 1, 8, 8}}, one<nn::Sequential>});
  auto lstm_cell = [](nn::Module& m, const std::vector<Var>& in) {
    const nn::LSTMState s = static_cast<nn::LSTMCell&>(m)(in[0], in.size() > 1 ? nn::LSTMState{in[1], in[2]} : nn::LSTMState{});
    return std::vector<Var>{s.h, s.c};
  };
  c.push_back({"lstm_cell", make<nn::LSTMCell>(int64_t{3}, int64_t{5}), {{2, 3}, {2, 5}, {2, 5}}, lstm_cell});
  c.push_back({"lstm_cell_zero_state_nobias", make<nn::LSTMCell>(int64_t{3}, int64_t{4}, false), {{2, 3}}, lstm_cell});
  auto gru_cell = [](nn::Module& m, const std::vector<Var>& in) {
    return std::vector<Var>{static_cast<nn::GRUCell&>(m)(in[0], in.size() > 1 ? in[1] : Var())};
  };
  c.push_back({"gru_cell", make<nn::GRUCell>(int64_t{3}, int64_t{5}), {{2, 3}, {2, 5}}, gru_cell});
  c.push_back({"gru_cell_unbatched", make<nn::GRUCell>(int64_t{3}, int64_t{4}), {{3}}, gru_cell});
  auto lstm = [](nn::Module& m, const std::vector<Var>& in) {
    const nn::LSTMOutput o = static_cast<nn::LSTM&>(m)(in[0], in.size() > 1 ? nn::LSTMState{in[1], in[2]} : nn::LSTMState{});
    return std::vector<Var>{o.output, o.state.h, o.state.c};
  };
  c.push_back({"lstm_2_layers_state", make<nn::LSTM>(int64_t{3}, int64_t{5}, 2), {{4, 2, 3}, {2, 2, 5}, {2, 2, 5}}, lstm});
  c.push_back({"lstm_bidirectional_batch_first", make<nn::LSTM>(int64_t{3}, int64_t{4}, 2, true, true, 0.0, true),
               {{2, 5, 3}}, lstm});
  c.push_back({"lstm_unbatched", make<nn::LSTM>(int64_t{3}, int64_t{4}), {{6, 3}}, lstm});
  auto gru = [](nn::Module& m, const std::vector<Var>& in) {
    const nn::GRUOutput o = static_cast<nn::GRU&>(m)(in[0], in.size() > 1 ? in[1] : Var());
    return std::vector<Var>{o.output, o.h_n};
  };
  c.push_back({"gru_2_layers_state", make<nn::GRU>(int64_t{3}, int64_t{5}, 2), {{4, 2, 3}, {2, 2, 5}}, gru});
  c.push_back({"gru_bidirectional_batch_first_nobias", make<nn::GRU>(int64_t{3}, int64_t{4}, 1, false, true, 0.0, true),
               {{2, 5, 3}}, gru});
  return c;
}

// in_k[i] = sin(0.31 i + 0.2 + k), r_k[i] = 0.3 cos(0.17 i + k): every output element its own weight
Tensor values(const Shape& shape, int k, bool weights) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = weights ? 0.3 * std::cos(0.17 * static_cast<double>(i) + k) : std::sin(0.31 * static_cast<double>(i) + 0.2 + k);
  return Tensor::from_doubles(v, shape, DType::f64);
}

int export_cases(const std::string& path) {
  nn::StateDict out;
  for (const Case& c : cases()) {
    const std::string prefix = c.name + "/";
    testing::Place place(37, DType::f64);
    std::unique_ptr<nn::Module> m = c.make(place.f);
    for (const auto& [name, t] : nn::state_dict(*m)) out.push_back({prefix + name, t});
    std::vector<Var> in;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      in.push_back(place.g.input(values(c.inputs[k], static_cast<int>(k), false), "in" + std::to_string(k), true));
      out.push_back({prefix + "in" + std::to_string(k), in.back().value()});
    }
    const std::vector<Var> ys = c.forward(*m, in);
    Var loss;
    for (size_t k = 0; k < ys.size(); ++k) {
      const Tensor r = values(ys[k].shape(), static_cast<int>(k), true);
      out.push_back({prefix + "r" + std::to_string(k), r});
      out.push_back({prefix + "out" + std::to_string(k), ys[k].value()});
      Var term = ops::sum(ys[k] * place.g.input(r));
      loss = loss.defined() ? loss + term : term;
    }
    place.g.backward(loss);
    for (const auto& [name, p] : m->named_parameters()) out.push_back({prefix + "grad/" + name, p.grad()});
    for (size_t k = 0; k < in.size(); ++k) out.push_back({prefix + "grad/in" + std::to_string(k), in[k].grad()});
  }
  // optim::Adam against torch.optim.Adam(lr=0.01, betas=(0.9, 0.99), weight_decay=0.1): the weights
  // after each of 3 steps of given gradients, under "adam/"
  Graph g;
  Var w = g.parameter(values({3, 4}, 0, false), "w");
  out.push_back({"adam/w0", w.value().clone()});
  optim::Adam adam({w}, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1});
  for (int t = 1; t <= 3; ++t) {
    const Tensor grad = values({3, 4}, t, true);
    w.set_grad(grad);
    adam.step();
    out.push_back({"adam/g" + std::to_string(t), grad});
    out.push_back({"adam/w" + std::to_string(t), w.value().clone()});
  }
  nn::export_safetensors(path, out);
  return 0;
}

// Largest |a - b| over the largest |b|.
double relative(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  double diff = 0, scale = 1e-300;
  for (size_t i = 0; i < x.size(); ++i) diff = std::max(diff, std::fabs(x[i] - y[i])), scale = std::max(scale, std::fabs(y[i]));
  return diff / scale;
}

int check_cases(const std::string& exported, const std::string& imported) {
  const nn::StateDict mine = nn::import_safetensors(exported), theirs = nn::import_safetensors(imported);
  int failures = 0;
  double worst = 0;
  for (const Case& c : cases()) {
    const std::string prefix = c.name + "/";
    testing::Place place(1, DType::f64);
    std::unique_ptr<nn::Module> m = c.make(place.f);
    nn::StateDict weights;  // the parameters: every name under the prefix but the inputs and outputs
    for (const auto& [name, t] : nn::under(theirs, prefix))
      if (name.rfind("out", 0) != 0) weights.push_back({name, t});
    try {
      nn::load_state_dict(*m, weights);
    } catch (const Error& e) {
      std::printf("FAIL %s: PyTorch's state dict does not load: %s\n", c.name.c_str(), e.what());
      ++failures;
      continue;
    }
    std::vector<Var> in;
    for (const auto& [name, t] : nn::under(mine, prefix))
      if (name.rfind("in", 0) == 0) in.push_back(place.g.input(t));
    const std::vector<Var> ys = c.forward(*m, in);
    for (size_t k = 0; k < ys.size(); ++k) {
      const std::string out = "out" + std::to_string(k);
      const nn::StateDict expected = nn::under(theirs, prefix + out);
      if (expected.size() != 1 || !(expected[0].second.shape() == ys[k].shape())) {
        std::printf("FAIL %s: PyTorch's %s is missing or of another shape\n", c.name.c_str(), out.c_str());
        ++failures;
        continue;
      }
      const double err = relative(ys[k].value(), expected[0].second);
      worst = std::max(worst, err);
      if (!(err <= 1e-12)) {
        std::printf("FAIL %s: %s differs from PyTorch's by %.3g of its largest value\n", c.name.c_str(), out.c_str(), err);
        ++failures;
      }
    }
  }
  std::printf("PyTorch -> tapegrad: %zu cases' default-initialised state dicts loaded strictly, outputs within %.3g "
              "relative (tolerance 1e-12)\n", cases().size(), worst);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "export" && argc == 3) return export_cases(argv[2]);
  if (mode == "check" && argc == 4) return check_cases(argv[2], argv[3]);
  std::fprintf(stderr, "usage: layers_driver export OUT.safetensors | layers_driver check EXPORT IMPORT\n");
  return 2;
}
