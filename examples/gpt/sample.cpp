// gpt's sampler (sample.hpp).
//
// Note [sampling with a KV cache]
// A token at position t reads the keys and values of positions 0 .. t of every layer, and nothing
// else of the positions before it: so with each layer's keys and values kept (ops::KVCache), a new
// token needs the model over itself alone, a (1, 1, C) row through every product instead of the
// (1, t, C) window. The prompt is one prefill (the window at once, causal), then one position a
// call. The model's positions are learned and absolute: once the context passes `block` tokens,
// the window slides by one at each token and every position of it changes, so the cached keys are
// stale; the cache then starts again from the window (a prefill each token, the cost of sampling
// without it). The tokens are the full recompute's: tests/gpt/test_sample.cpp draws both ways.
#include "sample.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>

namespace gpt {

Sampled generate(GPT& model, Graph& g, std::vector<int32_t> context, int64_t n, const SampleSettings& s, Device device) {
  if (context.empty()) throw Error("[generate] the context is empty: give at least one token to continue");
  model.eval();
  NoGrad off(g);
  std::mt19937_64 rng(s.seed);
  Sampled out;
  const int64_t T = model.config.block;
  std::vector<ops::KVCache> caches(static_cast<size_t>(model.config.layers), ops::KVCache(T));
  int64_t cache_start = -1;  // which token of the context the cache's position 0 holds
  const auto start = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < n; ++k) {
    // the window: the last t tokens at positions 0 .. t - 1; the model reads those from `first` on
    const int64_t t = std::min<int64_t>(T, static_cast<int64_t>(context.size()));
    const int64_t window_start = static_cast<int64_t>(context.size()) - t;
    int64_t first = 0;
    if (s.cache) {
      if (window_start == cache_start && caches[0].length < t) first = caches[0].length;
      else for (ops::KVCache& c : caches) c.reset();  // the first token, or the window slid
      cache_start = window_start;
    }
    const std::vector<int32_t> ids(context.begin() + window_start + first, context.end());
    std::vector<int32_t> positions(static_cast<size_t>(t - first));
    for (int64_t i = first; i < t; ++i) positions[static_cast<size_t>(i - first)] = static_cast<int32_t>(i);
    g.clear();
    Var logits = model(g.input(Tensor::from_vector(ids, Shape{1, t - first}, device)),
                       g.input(Tensor::from_vector(positions, Shape{t - first}, device)), {},
                       s.cache ? &caches : nullptr);  // (1, t - first, V)
    std::vector<double> z = ops::slice(logits, 1, t - first - 1, t - first).value().to_doubles();  // (V,)
    if (!std::all_of(z.begin(), z.end(), [](double v) { return std::isfinite(v); }))
      throw Error("the model's logits are not finite: its weights hold a NaN or an infinity");
    if (s.keep_logits) out.logits.push_back(z);
    // exp((z - max z) / temperature): every exponent is at most 0, so no temperature, however
    // small, overflows them (a tiny one picks the most likely token), and the largest weight is 1
    if (s.top_k > 0 && s.top_k < static_cast<int64_t>(z.size())) {
      std::vector<double> sorted(z);
      std::nth_element(sorted.begin(), sorted.begin() + (s.top_k - 1), sorted.end(), std::greater<>());
      const double kth = sorted[static_cast<size_t>(s.top_k - 1)];
      for (double& v : z)
        if (v < kth) v = -INFINITY;
    }
    const double top = *std::max_element(z.begin(), z.end());
    for (double& v : z) v = std::exp((v - top) / s.temperature);
    std::discrete_distribution<int32_t> pick(z.begin(), z.end());
    const int32_t next = pick(rng);
    context.push_back(next);
    out.tokens.push_back(next);
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  g.clear();
  model.train();
  return out;
}

}  // namespace gpt
