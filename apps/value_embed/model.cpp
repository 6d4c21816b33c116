// The value-embed demo model and its training loop (see model.hpp). No gradient code here: the
// engine and the lookup's backward compute them all.
#include "model.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <map>
#include <random>

#include "tapegrad/tape/tape_dump.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/optim/adamw.hpp"
#include "tapegrad/optim/sparse.hpp"

namespace ve_app {

using tapegrad::Error;
using tapegrad::Graph;
using tapegrad::Shape;
using tapegrad::Tensor;
using tapegrad::Var;
namespace ops = tapegrad::ops;
namespace optim = tapegrad::optim;

Corpus tokenize(const std::string& text) {
  std::vector<std::string> tokens;
  for (size_t i = 0; i < text.size();) {
    const unsigned char ch = static_cast<unsigned char>(text[i]);
    if (std::isspace(ch)) {
      ++i;
    } else if (std::isalpha(ch)) {
      std::string word;
      for (; i < text.size() && std::isalpha(static_cast<unsigned char>(text[i])); ++i)
        word += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
      tokens.push_back(word);
    } else {
      tokens.emplace_back(1, text[i++]);
    }
  }
  std::map<std::string, std::pair<int64_t, size_t>> seen;  // token -> (count, first position)
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto [it, fresh] = seen.try_emplace(tokens[i], 0, i);
    ++it->second.first;
  }
  Corpus c;
  for (const auto& [word, stats] : seen) c.words.push_back(word);
  std::sort(c.words.begin(), c.words.end(), [&](const std::string& a, const std::string& b) {
    const auto &sa = seen.at(a), &sb = seen.at(b);
    return sa.first != sb.first ? sa.first > sb.first : sa.second < sb.second;
  });
  std::map<std::string, int32_t> id;
  for (size_t k = 0; k < c.words.size(); ++k) id[c.words[k]] = static_cast<int32_t>(k);
  for (const std::string& t : tokens) c.ids.push_back(id.at(t));
  return c;
}

void check_sizes(int64_t planes, int64_t vocab, int64_t dim, int64_t tokens) {
  auto check = [](const std::string& what, std::initializer_list<int64_t> factors) {
    int64_t n = 1;
    bool overflow = false;
    for (int64_t f : factors) overflow = overflow || __builtin_mul_overflow(n, f, &n);
    if (overflow || n > max_elements)
      throw Error("[value_embed] " + what + " = " + (overflow ? std::string("more than 2^63") : std::to_string(n)) +
                  " elements; at most " + std::to_string(max_elements) + " (use smaller sizes)");
  };
  const std::string p = std::to_string(planes), v = std::to_string(vocab), d = std::to_string(dim),
                    t = std::to_string(tokens);
  check("the table P*V*D = " + p + "*" + v + "*" + d, {planes, vocab, dim});
  check("W's D*V = " + d + "*" + v, {dim, vocab});
  check("the planes' P*T*D = " + p + "*" + t + "*" + d, {planes, tokens, dim});
  check("the logits' T*V = " + t + "*" + v, {tokens, vocab});
}

void validate(const Config& c, const Corpus& corpus) {
  const int64_t distinct = static_cast<int64_t>(corpus.words.size()), n = static_cast<int64_t>(corpus.ids.size());
  auto refuse = [](const std::string& what) { throw Error("[value_embed] " + what); };
  if (c.planes < 1) refuse("--planes must be at least 1, got " + std::to_string(c.planes));
  if (c.vocab != 0 && c.vocab < distinct)
    refuse("--vocab " + std::to_string(c.vocab) + " is smaller than the text's " + std::to_string(distinct) +
           " distinct tokens; pass at least " + std::to_string(distinct) + " (or 0 for exactly that)");
  if (c.dim < 1) refuse("--dim must be at least 1, got " + std::to_string(c.dim));
  if (c.tokens < 1 || c.tokens + 1 > n)
    refuse("--tokens must be from 1 to " + std::to_string(n - 1) + " (the text has " + std::to_string(n) +
           " tokens), got " + std::to_string(c.tokens));
  if (c.steps < 1) refuse("--steps must be at least 1, got " + std::to_string(c.steps));
  if (c.accum < 1) refuse("--accum must be at least 1, got " + std::to_string(c.accum));
  check_sizes(c.planes, c.vocab ? c.vocab : distinct, c.dim, c.tokens);
}

namespace {

struct Model {
  Graph g;
  Var table, mix, w, b;  // E (P*V, D), mix (1, P), W (D, V), b (V,)
  int planes;
  int64_t vocab, dim;

  Model(const Config& c, int64_t v, std::mt19937_64& rng) : planes(c.planes), vocab(v), dim(c.dim) {
    auto uniform = [&](const Shape& s, double bound, DType dtype) {
      std::uniform_real_distribution<double> u(-bound, bound);
      std::vector<double> x(static_cast<size_t>(s.numel()));
      for (double& e : x) e = u(rng);
      return Tensor::from_doubles(x, s, dtype, c.device);
    };
    table = g.parameter(uniform(Shape{planes * vocab, dim}, 0.1, c.table), "value_embeds");
    mix = g.parameter(Tensor::from_doubles(std::vector<double>(static_cast<size_t>(planes), 1.0), Shape{1, planes},
                                           DType::f32, c.device), "mix");
    w = g.parameter(uniform(Shape{dim, vocab}, 1.0 / std::sqrt(static_cast<double>(dim)), DType::f32), "W");
    b = g.parameter(Tensor::zeros(Shape{vocab}, DType::f32, c.device), "b");
  }

  // The mean next-token loss over x (T,) against y (T,); with a buffer the lookup records its node.
  Var loss(const Tensor& x, const Tensor& y, const ops::ValueEmbedBuffer& buffer, ops::ValueEmbedAccumulate mode) {
    const int64_t t = x.dim(0);
    const ops::ValueEmbedOptions options{mode, DType::f32};  // f32 planes, whatever E's dtype
    Var planes_v = ops::value_embed_lookup(table, g.input(x, "tokens"), planes, buffer, options).label("planes");
    Var h = ops::reshape(ops::matmul(mix, ops::reshape(planes_v, Shape{planes, t * dim})), Shape{t, dim}).label("h");
    Var logits = ops::add_row(ops::matmul(h, w), b).label("logits");  // (T, V)
    return ops::cross_entropy(logits, g.input(y, "next_tokens")).label("loss");
  }
};

// Tokens [start, start + t) and the tokens after them, on `device`.
std::pair<Tensor, Tensor> window(const Corpus& corpus, int64_t start, int64_t t, Device device) {
  const auto first = corpus.ids.begin() + start;
  const std::vector<int32_t> x(first, first + t), y(first + 1, first + t + 1);
  return {Tensor::from_vector(x, Shape{t}, device), Tensor::from_vector(y, Shape{t}, device)};
}

// The mean loss over every whole window of the text, under NoGrad: the lookup is the plain gather.
double text_loss(Model& m, const Corpus& corpus, int64_t t, Device device) {
  tapegrad::NoGrad eval(m.g);
  double total = 0.0;
  int windows = 0;
  for (int64_t start = 0; start + t + 1 <= static_cast<int64_t>(corpus.ids.size()); start += t, ++windows) {
    const auto [x, y] = window(corpus, start, t, device);
    total += m.loss(x, y, {}, ops::ValueEmbedAccumulate::atomic).value().item();
    m.g.clear();
  }
  return total / windows;
}

}  // namespace

std::pair<double, double> train(const Config& c, const Corpus& corpus, std::FILE* out) {
  validate(c, corpus);
  const int64_t vocab = c.vocab ? c.vocab : static_cast<int64_t>(corpus.words.size());
  const int64_t n = static_cast<int64_t>(corpus.ids.size());
  std::mt19937_64 rng(c.seed);
  Model m(c, vocab, rng);
  ops::ValueEmbedBuffer buffer = ops::ValueEmbedBuffer::zeros(m.table.value(), c.planes, c.buffer);
  optim::AdamWConfig dense_config, table_config;
  dense_config.lr = c.lr;
  table_config.lr = c.table_lr;
  table_config.weight_decay = 0.0f;
  optim::AdamW dense({m.mix, m.w, m.b}, dense_config);
  optim::SparseAdamW sparse(m.table.value(), table_config);

  std::fprintf(out, "value_embed: %d planes of (%lld, %lld) %s on %s; buffer %s, %s; %lld tokens a step, a pull every %d steps\n",
               c.planes, static_cast<long long>(vocab), static_cast<long long>(c.dim), dtype_name(c.table), c.device.str().c_str(),
               dtype_name(c.buffer), ops::value_embed_accumulate_name(c.accumulate), static_cast<long long>(c.tokens),
               c.accum);
  const double before = text_loss(m, corpus, c.tokens, c.device);
  std::fprintf(out, "%6s  %10s  %12s\n", "step", "cycle loss", "rows pulled");
  double cycle_loss = 0.0;
  for (int step = 1; step <= c.steps; ++step) {
    const int64_t start = (static_cast<int64_t>(step - 1) * c.tokens) % (n - c.tokens);
    const auto [x, y] = window(corpus, start, c.tokens, c.device);
    Var loss = m.loss(x, y, buffer, c.accumulate);
    tapegrad::BackwardRecord record;
    const bool dump = step == 1 && !c.dump_tape.empty();
    if (dump) tapegrad::check_dump_size(m.g, c.dump_tape);  // before the recorded backward, which costs the memory
    m.g.backward(loss, {.record = dump ? &record : nullptr});
    if (dump) {
      tapegrad::DumpOptions options;
      options.title = "value_embed: the first step (" + std::to_string(c.tokens) + " tokens, " +
                      std::to_string(c.planes) + " planes)";
      for (int64_t i = 0; i < c.tokens; ++i) {
        options.row_names["tokens"].push_back(corpus.words[static_cast<size_t>(corpus.ids[static_cast<size_t>(start + i)])]);
        options.row_names["next_tokens"].push_back(
            corpus.words[static_cast<size_t>(corpus.ids[static_cast<size_t>(start + i + 1)])]);
      }
      tapegrad::write_tape_dump(c.dump_tape, m.g, &record, options);
    }
    cycle_loss += loss.value().item();
    dense.step();
    m.g.zero_grad();
    m.g.clear();
    if (step % c.accum == 0 || step == c.steps) {
      const ops::PulledRows pulled = ops::value_embed_pull(buffer);
      sparse.step(m.table.value(), pulled);
      const int in_cycle = step % c.accum == 0 ? c.accum : step % c.accum;
      std::fprintf(out, "%6d  %10.4f  %12lld\n", step, cycle_loss / in_cycle, static_cast<long long>(pulled.count()));
      cycle_loss = 0.0;
    }
  }
  const double after = text_loss(m, corpus, c.tokens, c.device);
  std::fprintf(out, "loss over the whole text (no buffer, NoGrad): %.4f before training, %.4f after %d steps\n", before,
               after, c.steps);
  return {before, after};
}

}  // namespace ve_app
