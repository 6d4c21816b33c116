// A next-character model with one causal self-attention block, written against tapegrad's installed
// API: token and position embeddings, a pre-norm attention block with a residual, a linear head,
// cross-entropy over (B, T) targets, AdamW. The model is the dozen lines of `loss_of`; everything
// else is data and printing. Build it as its own project (meson.build here): it uses only
// <tapegrad/tapegrad.hpp>.
#include <tapegrad/tapegrad.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace tapegrad;

static const char* kText =
    "it was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of light, "
    "it was the season of darkness, it was the spring of hope, it was the winter of despair, we had "
    "everything before us, we had nothing before us, we were all going direct to heaven, we were all "
    "going direct the other way.";

int main() {
  // ---- data: windows of T characters, each predicting the next
  const std::string text = kText;
  std::map<char, int32_t> index;
  for (char c : text) index.emplace(c, static_cast<int32_t>(index.size()));
  const int64_t V = static_cast<int64_t>(index.size()), B = 16, T = 64, C = 128, H = 4;
  std::mt19937_64 rng(7);
  auto batch = [&](std::vector<int32_t>& xs, std::vector<int32_t>& ys) {
    xs.clear(), ys.clear();
    std::uniform_int_distribution<size_t> start(0, text.size() - static_cast<size_t>(T) - 1);
    for (int64_t b = 0; b < B; ++b)
      for (size_t s = start(rng), t = 0; t < static_cast<size_t>(T); ++t)
        xs.push_back(index[text[s + t]]), ys.push_back(index[text[s + t + 1]]);
  };

  // ---- parameters (f32, on the CPU; Device::cuda() would put them on the GPU)
  Graph g;
  auto param = [&](Shape s, double std, const char* name) {
    std::normal_distribution<double> n(0.0, std);
    std::vector<double> v(static_cast<size_t>(s.numel()));
    for (double& x : v) x = std == 1.0 ? 1.0 : std == 0.0 ? 0.0 : n(rng);  // std 1: ones, std 0: zeros
    return g.parameter(Tensor::from_doubles(v, s, DType::f32), name);
  };
  Var wte = param({V, C}, 0.02, "wte"), wpe = param({T, C}, 0.02, "wpe");
  Var ln_w = param({C}, 1.0, "ln.weight"), ln_b = param({C}, 0.0, "ln.bias");
  Var w_qkv = param({3 * C, C}, 0.02, "attn.qkv.weight"), b_qkv = param({3 * C}, 0.0, "attn.qkv.bias");
  Var w_o = param({C, C}, 0.02, "attn.proj.weight"), b_o = param({C}, 0.0, "attn.proj.bias");
  Var w_head = param({V, C}, 0.02, "head.weight");

  // ---- the model: ids (B, T) -> loss
  auto heads = [&](Var t) { return ops::transpose(ops::reshape(t, {B, T, H, C / H}), 1, 2); };  // (B, H, T, C/H)
  auto loss_of = [&](Var ids, Var targets) {
    Var x = ops::embedding(wte, ids) + wpe;                                             // (B, T, C) + (T, C)
    std::vector<Var> qkv = ops::split(ops::linear(ops::layer_norm(x, ln_w, ln_b), w_qkv, b_qkv), {C, C, C}, -1);
    Var y = ops::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), true);  // causal
    x = x + ops::linear(ops::reshape(ops::transpose(y, 1, 2), {B, T, C}), w_o, b_o);  // heads joined, residual
    return ops::cross_entropy(ops::linear(x, w_head, Var()), targets);                // logits (B, T, V)
  };

  // ---- training
  optim::AdamW opt(g.parameters(), {.lr = 3e-3, .weight_decay = 0.0});
  std::vector<int32_t> xs, ys;
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    batch(xs, ys);
    g.clear();
    g.zero_grad();
    Var loss = loss_of(g.input(Tensor::from_vector(xs, Shape{B, T})), g.input(Tensor::from_vector(ys, Shape{B, T})));
    g.backward(loss);
    opt.step();
    last = loss.value().item();
    if (step == 0) first = last;
    if (step % 25 == 0 || step == 149) std::printf("step %3d  loss %.4f\n", step, last);
  }
  std::printf("loss %.4f -> %.4f (uniform guess: %.4f)\n", first, last, std::log(static_cast<double>(V)));
  if (!(last < 0.5 * first)) {
    std::printf("FAIL: the loss did not halve\n");
    return 1;
  }
  return 0;
}
