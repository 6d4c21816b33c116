// cnn_epoch: the digits CNN's training epoch on the CPU, the model bench/cnn_epoch_torch.py times in
// PyTorch (bench/cnn_epoch.sh runs both in one invocation; docs/perf-cpu.md has the figures):
//
//   Conv2d(1, 16, 3, padding 1) ReLU MaxPool2d(2)  (B, 1, 8, 8) -> (B, 16, 4, 4)
//   Conv2d(16, 32, 3, padding 1) ReLU MaxPool2d(2)              -> (B, 32, 2, 2)
//   Flatten Linear(128, 10), cross-entropy, Adam (lr 1e-3)
//
// over the data file's images in batches of 32, in the file's order; MODEL mlp trains the digits
// MLP instead, Flatten Linear(64, 128) ReLU Linear(128, 10).
//
//   cnn_epoch FILE EPOCHS [THREADS [MODEL]]   (THREADS: set_num_threads, 0 for the library's
//                                              default; MODEL: cnn, the default, or mlp)
// One warm-up epoch, then EPOCHS epochs: "epoch_ms X" for each, then the last loss and the threads.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tapegrad/tapegrad.hpp"

using namespace tapegrad;

namespace {

constexpr int64_t kBatch = 32, kSide = 8;

// The file bench/cnn_epoch_torch.py writes: int64 n, n * 64 float32 pixels, n int32 labels.
struct Data {
  int64_t n = 0;
  std::vector<float> pixels;
  std::vector<int32_t> labels;
};

Data read_data(const char* path) {
  std::ifstream in(path, std::ios::binary);
  Data d;
  if (!in.read(reinterpret_cast<char*>(&d.n), sizeof d.n) || d.n <= 0 || d.n > (1 << 24))
    throw std::runtime_error(std::string("cnn_epoch: cannot read a data set from ") + path);
  d.pixels.resize(static_cast<size_t>(d.n * kSide * kSide));
  d.labels.resize(static_cast<size_t>(d.n));
  in.read(reinterpret_cast<char*>(d.pixels.data()), static_cast<std::streamsize>(d.pixels.size() * sizeof(float)));
  in.read(reinterpret_cast<char*>(d.labels.data()), static_cast<std::streamsize>(d.labels.size() * sizeof(int32_t)));
  if (!in) throw std::runtime_error(std::string("cnn_epoch: ") + path + " is shorter than its header says");
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model_name = argc > 4 ? argv[4] : "cnn";
  if (argc < 3 || argc > 5 || (model_name != "cnn" && model_name != "mlp")) {
    std::fprintf(stderr, "usage: cnn_epoch FILE EPOCHS [THREADS [cnn|mlp]]\n");
    return 2;
  }
  const Data data = read_data(argv[1]);
  const int epochs = std::atoi(argv[2]);
  if (argc > 3 && std::atoi(argv[3]) > 0) set_num_threads(std::atoi(argv[3]));

  Graph g;
  Generator gen(0);
  nn::Factory f{g, gen, DType::f32, Device::cpu()};
  nn::Sequential model;
  if (model_name == "cnn") {
    model.emplace_back<nn::Conv2d>(f, 1, 16, 3, 1, 1);
    model.emplace_back<nn::ReLU>();
    model.emplace_back<nn::MaxPool2d>(2);
    model.emplace_back<nn::Conv2d>(f, 16, 32, 3, 1, 1);
    model.emplace_back<nn::ReLU>();
    model.emplace_back<nn::MaxPool2d>(2);
    model.emplace_back<nn::Flatten>();
    model.emplace_back<nn::Linear>(f, 128, 10);
  } else {
    model.emplace_back<nn::Flatten>();
    model.emplace_back<nn::Linear>(f, 64, 128);
    model.emplace_back<nn::ReLU>();
    model.emplace_back<nn::Linear>(f, 128, 10);
  }
  optim::Adam adam(model.parameters(), {.lr = 1e-3});

  double last = 0;
  for (int epoch = 0; epoch <= epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < data.n; i += kBatch) {
      const int64_t b = std::min(kBatch, data.n - i);
      const float* px = data.pixels.data() + i * kSide * kSide;
      const int32_t* lb = data.labels.data() + i;
      const Tensor x = Tensor::from_vector(std::vector<float>(px, px + b * kSide * kSide), Shape{b, 1, kSide, kSide});
      const Tensor y = Tensor::from_vector(std::vector<int32_t>(lb, lb + b), Shape{b});
      g.clear();
      g.zero_grad();
      Var loss = ops::cross_entropy(model(g.input(x)), g.input(y));
      g.backward(loss);
      adam.step();
      if (i + kBatch >= data.n) last = loss.value().item();
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (epoch > 0) std::printf("epoch_ms %.3f\n", ms);  // the first is the warm-up
  }
  std::printf("loss %.4f threads %d\n", last, num_threads());
  return 0;
}
