// A next-character MLP written against tapegrad's installed API: embedding, a tanh hidden layer,
// cross-entropy, SGD. The model is the dozen lines in `loss`; everything else is data and printing.
// Build it as its own project (see meson.build here and README.md): it uses only <tapegrad/tapegrad.hpp>.
#include <tapegrad/tapegrad.hpp>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace tapegrad;

static const char* kText =
    "it was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of light, "
    "it was the season of darkness, it was the spring of hope, it was the winter of despair.";

int main() {
  // ---- data: each character predicts the next one
  std::string text = kText;
  std::map<char, int32_t> index;
  std::string vocab;
  for (char c : text)
    if (!index.count(c)) index[c] = static_cast<int32_t>(vocab.size()), vocab += c;
  std::vector<int32_t> xs, ys;
  for (size_t i = 0; i + 1 < text.size(); ++i) xs.push_back(index[text[i]]), ys.push_back(index[text[i + 1]]);
  const int64_t V = static_cast<int64_t>(vocab.size()), B = static_cast<int64_t>(xs.size()), D = 16, H = 64;

  // ---- parameters
  std::mt19937 rng(1);
  auto init = [&](Shape s, double scale) {
    std::normal_distribution<double> n(0.0, scale);
    std::vector<double> v(static_cast<size_t>(s.numel()));
    for (double& x : v) x = n(rng);
    return Tensor::from_doubles(v, s, DType::f32);
  };
  Graph g;
  Var E = g.parameter(init({V, D}, 1.0), "embedding");
  Var W1 = g.parameter(init({D, H}, 0.25), "w1");
  Var b1 = g.parameter(Tensor::zeros({H}, DType::f32), "b1");
  Var W2 = g.parameter(init({H, V}, 0.125), "w2");
  Var b2 = g.parameter(Tensor::zeros({V}, DType::f32), "b2");
  Tensor x = Tensor::from_vector(xs, Shape{B}), y = Tensor::from_vector(ys, Shape{B});

  // ---- the model
  auto logits_of = [&](Var ids) {
    Var h = ops::tanh(ops::add_row(ops::matmul(ops::gather(E, ids), W1), b1));  // (B, H)
    return ops::add_row(ops::matmul(h, W2), b2);                                  // (B, V)
  };
  auto loss = [&]() { return ops::cross_entropy(logits_of(g.input(x)), g.input(y)); };

  // ---- training
  optim::SGD sgd(1.0);
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    g.clear();
    g.zero_grad();
    Var l = loss();
    g.backward(l);
    sgd.step(g.parameters());
    last = l.value().item();
    if (step == 0) first = last;
    if (step % 50 == 0 || step == 299) std::printf("step %3d  loss %.4f\n", step, last);
  }

  // ---- sample greedily from 'i'
  std::string out = "i";
  NoGrad no_grad(g);
  for (int i = 0; i < 40; ++i) {
    g.clear();
    Tensor id = Tensor::from_vector(std::vector<int32_t>{index[out.back()]}, Shape{1});
    std::vector<double> row = logits_of(g.input(id)).value().to_doubles();
    size_t best = 0;
    for (size_t j = 1; j < row.size(); ++j) best = row[j] > row[best] ? j : best;
    out += vocab[best];
  }
  std::printf("sample: %s\n", out.c_str());
  std::printf("loss fell from %.4f to %.4f\n", first, last);
  return last < first * 0.75 ? 0 : 1;
}
