// gpt's sampler (examples/gpt/sample.hpp) with its KV cache against the full recompute, on tiny
// models with fresh weights: the same tokens, and each token's logits within rounding, through a
// prompt's prefill, single positions and the window sliding past the block; with value embeddings,
// in f64 and f32 (sparse value embeddings: f32), on 1 and 2 threads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "../../examples/gpt/sample.hpp"

using namespace tapegrad;

namespace {

struct Run {
  gpt::Sampled cached, full;
};

Run both_ways(const gpt::Config& c, DType dtype, const std::vector<int32_t>& prompt, int64_t n, int64_t top_k) {
  Graph g;
  Generator gen(7);
  nn::Factory f{g, gen, dtype, Device::cpu()};
  gpt::GPT model(f, c);
  Run r;
  gpt::SampleSettings s{.temperature = 1.0, .top_k = top_k, .seed = 5, .cache = true, .keep_logits = true};
  r.cached = gpt::generate(model, g, prompt, n, s, Device::cpu());
  s.cache = false;
  r.full = gpt::generate(model, g, prompt, n, s, Device::cpu());
  return r;
}

}  // namespace

TEST_CASE("the cached sampler draws the full recompute's tokens, its logits within rounding") {
  struct Case {
    const char* name;
    gpt::Config config;
    std::vector<int32_t> prompt;
    int64_t top_k;
  };
  // block 8: 20 tokens after a prompt of 3 pass it, so the window slides; a prompt longer than the
  // block starts sliding at once
  const gpt::Config base{.vocab = 13, .block = 8, .dim = 32, .heads = 4, .layers = 2, .batch = 1};
  gpt::Config ve = base;
  ve.value_embeds = 2;
  gpt::Config ve_dense = ve;
  ve_dense.ve_mode = gpt::ValueEmbeds::dense;
  const Case cases[] = {{"plain", base, {1, 2, 3}, 0},
                        {"value embeddings", ve, {4}, 5},
                        {"dense value embeddings", ve_dense, {0, 9, 2, 11, 4, 5, 6, 7, 8, 12}, 0}};
  for (DType dtype : {DType::f64, DType::f32})
    for (int threads : {1, 2})
      for (const Case& c : cases) {
        if (dtype == DType::f64 && c.config.value_embeds > 0 && c.config.ve_mode == gpt::ValueEmbeds::sparse)
          continue;  // value_embed_lookup is f32 (and bf16) only
        const std::string dtype_text = dtype_name(dtype), name = c.name;
        CAPTURE(dtype_text);
        CAPTURE(threads);
        CAPTURE(name);
        set_num_threads(threads);
        const int64_t n = 20;
        const Run r = both_ways(c.config, dtype, c.prompt, n, c.top_k);
        CHECK(r.cached.tokens == r.full.tokens);
        REQUIRE(r.cached.logits.size() == static_cast<size_t>(n));
        REQUIRE(r.full.logits.size() == static_cast<size_t>(n));
        double worst = 0;
        for (size_t k = 0; k < static_cast<size_t>(n); ++k)
          for (size_t i = 0; i < r.full.logits[k].size(); ++i)
            worst = std::max(worst, std::abs(r.cached.logits[k][i] - r.full.logits[k][i]));
        CHECK(worst <= (dtype == DType::f64 ? 1e-13 : 1e-5));
        // the draws are not all one token (the comparison would be idle)
        CHECK(std::count(r.full.tokens.begin(), r.full.tokens.end(), r.full.tokens[0]) < n);
      }
  set_num_threads(default_num_threads());
}

TEST_CASE("generate refuses an empty context") {
  Graph g;
  Generator gen(7);
  nn::Factory f{g, gen, DType::f32, Device::cpu()};
  gpt::GPT model(f, {.vocab = 5, .block = 4, .dim = 8, .heads = 2, .layers = 1});
  CHECK_THROWS_WITH_AS(gpt::generate(model, g, {}, 3, {}, Device::cpu()),
                       "[generate] the context is empty: give at least one token to continue", Error);
}
