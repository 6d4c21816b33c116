// A character-level GPT (nanoGPT's architecture) written against tapegrad's installed API: the
// model is the GPT struct below, built from tapegrad::nn layers; training is AdamW with nanoGPT's
// decay groups and a warmup + cosine schedule, gradients clipped at 1. It trains on a built-in
// text (or --data FILE), prints one line per step that begins `step N loss X`, evaluates on the
// last tenth of the text, samples from the trained model and, with --checkpoint, saves its
// state dict. A first version: docs/nn.md describes the layers; resume, value embeddings and the
// small config's GPU run come next.
//
//   gpt [--steps N] [--device cpu|cuda] [--seed S] [--data FILE] [--checkpoint FILE]
#include <tapegrad/io/atomic_file.hpp>
#include <tapegrad/tapegrad.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace tapegrad;

// ---- the model: nanoGPT's GPT (tiny config: 2 layers, 4 heads, 128 wide, blocks of 64)
struct GPT : nn::Module {
  GPT(nn::Factory& f, int64_t vocab, int64_t block, int64_t dim, int64_t heads, int layers)
      : wte(f, vocab, dim), wpe(f, block, dim), ln_f(f, dim), lm_head(f, dim, vocab, false) {
    register_module("wte", wte);
    register_module("wpe", wpe);
    for (int l = 0; l < layers; ++l) h.emplace_back(f, dim, heads);
    register_module("h", h);
    register_module("ln_f", ln_f);
    register_module("lm_head", lm_head);
  }
  const char* kind() const override { return "GPT"; }
  Var operator()(Var ids, Var positions) {  // ids (B, T) -> logits (B, T, vocab)
    Var x = wte(ids) + wpe(positions);       // (B, T, C) + (T, C)
    for (nn::Block& block : h) x = block(x);
    return lm_head(ln_f(x));
  }
  nn::Embedding wte, wpe;
  nn::ModuleList<nn::Block> h;
  nn::LayerNorm ln_f;
  nn::Linear lm_head;
};

static const char* kCorpus =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
    "it was the season of Darkness, it was the spring of hope, it was the winter of despair, we had "
    "everything before us, we had nothing before us, we were all going direct to Heaven, we were all going "
    "direct the other way - in short, the period was so far like the present period, that some of its "
    "noisiest authorities insisted on its being received, for good or for evil, in the superlative degree "
    "of comparison only. There were a king with a large jaw and a queen with a plain face, on the throne of "
    "England; there were a king with a large jaw and a queen with a fair face, on the throne of France. In "
    "both countries it was clearer than crystal to the lords of the State preserves of loaves and fishes, "
    "that things in general were settled for ever.\n";

int main(int argc, char** argv) {
  int steps = 200;
  uint64_t seed = 1337;
  std::string device_name = "cpu", data, checkpoint;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpt: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps") steps = std::atoi(value().c_str());
    else if (a == "--seed") seed = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--device") device_name = value();
    else if (a == "--data") data = value();
    else if (a == "--checkpoint") checkpoint = value();
    else {
      std::fprintf(stderr, "gpt: unknown argument '%s' (--steps N --device cpu|cuda --seed S --data FILE --checkpoint FILE)\n", a.c_str());
      return 2;
    }
  }
  if (steps < 1) {
    std::fprintf(stderr, "gpt: --steps must be a positive number\n");
    return 2;
  }
  try {
    const Device device = parse_device(device_name);
    std::string text = kCorpus;
    if (!data.empty()) {
      text = io::read_file(data);  // a regular file of at most 1 GiB (the default bound), or an error naming it
    }
    const int64_t B = 16, T = 64, C = 128, H = 4;
    const int L = 2;
    std::map<char, int32_t> index;
    std::vector<char> chars;
    for (char c : text)
      if (index.emplace(c, static_cast<int32_t>(index.size())).second) chars.push_back(c);
    const int64_t V = static_cast<int64_t>(chars.size());
    const size_t split = text.size() * 9 / 10;
    if (split < static_cast<size_t>(T) + 2 || text.size() - split < static_cast<size_t>(T) + 2)
      throw Error("the text is too short for blocks of " + std::to_string(T) + " characters");

    Graph g;
    Generator gen(seed);
    nn::Factory f{g, gen, DType::f32, device};
    GPT model(f, V, T, C, H, L);
    for (auto& [name, p] : model.named_parameters())  // nanoGPT's N(0, 0.02) for the matrices
      if (p.shape().ndim() == 2) nn::init::normal_(p, 0.0, 0.02, gen);
    optim::AdamW adamw(optim::decay_groups(model.parameters(), 0.1), {.lr = 1e-3, .beta2 = 0.99});
    const optim::WarmupCosine schedule(1e-3, std::min(20, steps), steps, 1e-4);  // warmup, then cosine to 1e-4

    std::mt19937_64 rng(seed);
    std::vector<int32_t> positions(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) positions[static_cast<size_t>(t)] = static_cast<int32_t>(t);
    const Tensor pos = Tensor::from_vector(positions, Shape{T}, device);
    auto batch = [&](size_t begin, size_t end, std::vector<int32_t>& xs, std::vector<int32_t>& ys) {
      std::uniform_int_distribution<size_t> start(begin, end - static_cast<size_t>(T) - 1);
      xs.clear(), ys.clear();
      for (int64_t b = 0; b < B; ++b)
        for (size_t s = start(rng), t = 0; t < static_cast<size_t>(T); ++t)
          xs.push_back(index[text[s + t]]), ys.push_back(index[text[s + t + 1]]);
    };
    auto loss_of = [&](const std::vector<int32_t>& xs, const std::vector<int32_t>& ys) {
      Var logits = model(g.input(Tensor::from_vector(xs, Shape{B, T}, device)), g.input(pos));
      return ops::cross_entropy(logits, g.input(Tensor::from_vector(ys, Shape{B, T}, device)));
    };

    std::vector<int32_t> xs, ys;
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < steps; ++step) {
      adamw.set_lr(schedule.lr(step));
      batch(0, split, xs, ys);
      g.clear();
      g.zero_grad();
      Var loss = loss_of(xs, ys);
      g.backward(loss);
      optim::clip_grad_norm(model.parameters(), 1.0);
      adamw.step();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("step %d loss %.4f  %.0f tokens/s\n", step + 1, loss.value().item(),
                  static_cast<double>((step + 1) * B * T) / seconds);
    }
    {  // validation on the last tenth of the text, in eval mode, no tape
      model.eval();
      NoGrad off(g);
      double total = 0;
      for (int k = 0; k < 8; ++k) {
        batch(split, text.size(), xs, ys);
        g.clear();
        total += loss_of(xs, ys).value().item();
      }
      const double uniform = std::log(static_cast<double>(V));
      std::printf("validation loss %.4f (uniform guess %.4f)\n", total / 8, uniform);
    }
    {  // sampling: each next character from the softmax of the last position's logits
      NoGrad off(g);
      std::string out = text.substr(0, static_cast<size_t>(T));
      std::uniform_real_distribution<double> u(0.0, 1.0);
      for (int k = 0; k < 120; ++k) {
        std::vector<int32_t> context;
        for (size_t t = out.size() - static_cast<size_t>(T); t < out.size(); ++t) context.push_back(index[out[t]]);
        g.clear();
        std::vector<int32_t> one(context);
        Var logits = model(g.input(Tensor::from_vector(one, Shape{1, T}, device)), g.input(pos));
        const std::vector<double> p = ops::softmax(ops::slice(logits, 1, T - 1, T), -1).value().to_doubles();
        double r = u(rng), acc = 0;
        size_t pick = p.size() - 1;
        for (size_t j = 0; j < p.size(); ++j)
          if ((acc += p[j]) >= r) {
            pick = j;
            break;
          }
        out += chars[pick];
      }
      std::printf("sample: %s\n", out.substr(static_cast<size_t>(T)).c_str());
    }
    if (!checkpoint.empty()) nn::save_state_dict(checkpoint, model, {.step = static_cast<uint64_t>(steps)});
  } catch (const Error& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 2;
  }
  return 0;
}
