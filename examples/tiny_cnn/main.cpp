// A small convolutional network written against tapegrad's installed API: it learns to tell four
// kinds of stroke (horizontal, vertical and the two diagonals) in noisy 8 x 8 images. Two conv
// layers with relu, a max pool and an average pool, a linear classifier, cross-entropy, SGD. The
// model is the few lines in `logits_of`; everything else is data and printing. Build it as its own
// project (see meson.build here): it uses only <tapegrad/tapegrad.hpp>.
#include <tapegrad/tapegrad.hpp>

#include <cstdio>
#include <random>
#include <vector>

using namespace tapegrad;

constexpr int64_t kSide = 8, kClasses = 4;

// n images (n, 1, 8, 8) of a 4-pixel stroke at a random place, plus noise, and their classes (n,).
struct Batch {
  Tensor images, labels;
};
Batch make_batch(int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> cls(0, kClasses - 1), place(0, kSide - 4);
  std::normal_distribution<double> noise(0.0, 0.2);
  std::vector<double> pixels(static_cast<size_t>(n * kSide * kSide));
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double* image = pixels.data() + i * kSide * kSide;
    for (int64_t p = 0; p < kSide * kSide; ++p) image[p] = noise(rng);
    const int64_t c = cls(rng), r0 = place(rng), c0 = place(rng);
    for (int64_t k = 0; k < 4; ++k) {  // along a row (0), a column (1), a diagonal (2) or the other (3)
      const int64_t dr[] = {0, k, k, k}, dc[] = {k, 0, k, 3 - k};
      image[(r0 + dr[c]) * kSide + c0 + dc[c]] += 1.0;
    }
    labels[static_cast<size_t>(i)] = static_cast<int32_t>(c);
  }
  return {Tensor::from_doubles(pixels, Shape{n, 1, kSide, kSide}, DType::f32),
          Tensor::from_vector(labels, Shape{n})};
}

int main() {
  std::mt19937 rng(7);
  auto init = [&](Shape s, double scale) {
    std::normal_distribution<double> n(0.0, scale);
    std::vector<double> v(static_cast<size_t>(s.numel()));
    for (double& x : v) x = n(rng);
    return Tensor::from_doubles(v, s, DType::f32);
  };

  // ---- parameters
  Graph g;
  Var w1 = g.parameter(init({8, 1, 3, 3}, 0.5), "conv1");
  Var b1 = g.parameter(Tensor::zeros({8}, DType::f32), "conv1_bias");
  Var w2 = g.parameter(init({16, 8, 3, 3}, 0.15), "conv2");
  Var b2 = g.parameter(Tensor::zeros({16}, DType::f32), "conv2_bias");
  Var w3 = g.parameter(init({16, kClasses}, 0.25), "classifier");
  Var b3 = g.parameter(Tensor::zeros({kClasses}, DType::f32), "classifier_bias");

  // ---- the model: images (B, 1, 8, 8) -> logits (B, 4)
  auto logits_of = [&](Var x) {
    Var h = ops::max_pool2d(ops::relu(ops::conv2d(x, w1, b1, 1, 1)), 2);  // (B, 8, 4, 4)
    h = ops::avg_pool2d(ops::relu(ops::conv2d(h, w2, b2, 1, 1)), 4);      // (B, 16, 1, 1)
    h = ops::reshape(h, Shape{h.shape()[0], 16});                        // (B, 16)
    return ops::add_row(ops::matmul(h, w3), b3);                          // (B, 4)
  };
  auto accuracy = [&](const Batch& batch) {
    NoGrad no_grad(g);
    const std::vector<double> logits = logits_of(g.input(batch.images)).value().to_doubles();
    const std::vector<double> labels = batch.labels.to_doubles();
    int64_t right = 0;
    for (size_t i = 0; i < labels.size(); ++i) {
      size_t best = 0;
      for (size_t c = 1; c < kClasses; ++c) best = logits[i * kClasses + c] > logits[i * kClasses + best] ? c : best;
      right += static_cast<double>(best) == labels[i];
    }
    return static_cast<double>(right) / static_cast<double>(labels.size());
  };

  // ---- training: a fresh batch each step
  optim::SGD sgd(0.2);
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    const Batch batch = make_batch(32, rng);
    g.clear();
    g.zero_grad();
    Var loss = ops::cross_entropy(logits_of(g.input(batch.images)), g.input(batch.labels));
    g.backward(loss);
    sgd.step(g.parameters());
    last = loss.value().item();
    if (step == 0) first = last;
    if (step % 50 == 0 || step == 299) std::printf("step %3d  loss %.4f\n", step, last);
  }

  g.clear();
  const double held_out = accuracy(make_batch(256, rng));
  std::printf("loss fell from %.4f to %.4f; held-out accuracy %.3f\n", first, last, held_out);
  return last < first * 0.5 && held_out > 0.9 ? 0 : 1;
}
