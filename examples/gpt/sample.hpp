// gpt's sampler (gpt sample, and gpt train --sample): tokens drawn one at a time from the model's
// logits, with a KV cache (ops::KVCache, one per layer) so that each token runs the model over
// itself alone, not over its whole context again. docs/nn.md ("The GPT example") describes it.
#pragma once

#include <cstdint>
#include <vector>

#include "model.hpp"

namespace gpt {

struct SampleSettings {
  double temperature = 1.0;   // > 0: divides the logits
  int64_t top_k = 0;          // draw among the top_k most likely tokens (0: all)
  uint64_t seed = 1337;
  bool cache = true;          // false: the whole window again for every token (the reference)
  bool keep_logits = false;   // Sampled::logits, for the tests
};

struct Sampled {
  std::vector<int32_t> tokens;
  std::vector<std::vector<double>> logits;  // with keep_logits: each drawn token's logits (V,)
  double seconds = 0;                       // the forwards and draws, the prompt's included
};

// n tokens after `context` (at least one token), each drawn from softmax(logits / temperature) at
// the last position, in eval mode under NoGrad. The model reads the last `block` tokens at
// positions 0 .. block - 1; with the cache, only those after the cached ones, so that both ways
// draw the same tokens (their logits agree to rounding: a lone row's products are not always the
// bits of the same row in a whole window's). Throws tapegrad::Error when the logits are not finite.
Sampled generate(GPT& model, Graph& g, std::vector<int32_t> context, int64_t n, const SampleSettings& s, Device device);

}  // namespace gpt
