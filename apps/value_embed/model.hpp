// The value-embed demo: a next-token model whose input path is the value-embed lookup, trained on
// the built-in text with the buffer and the pull (src/ops/value_embed.hpp).
//
//   x (T,) tokens -> planes (P, T, D) f32 = value_embed_lookup(E (P*V, D) f32 or bf16, x)
//   h (T, D) = sum_p mix[p] * planes[p]              (reshape, (1, P) @ (P, T*D), reshape)
//   logits (T, V) = h @ W (D, V) + b;  loss = mean cross-entropy against the next tokens
//
// Rule: E never gets a dense gradient. Its gradient gathers in the buffer for `accum` steps; then a
// pull hands the touched rows to sparse AdamW. mix, W and b take dense AdamW every step.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/ops/value_embed.hpp"

namespace ve_app {

using tapegrad::Device;
using tapegrad::DType;

struct Config {
  Device device = Device::cpu();
  int planes = 2;
  int64_t vocab = 0;   // rows per plane; 0: the text's distinct tokens
  int64_t dim = 32;
  int64_t tokens = 64;  // T, tokens per step
  int steps = 200;
  int accum = 2;        // steps whose gradients the buffer gathers before each pull
  DType table = DType::f32;  // E's dtype; its planes are f32 either way
  DType buffer = DType::f16;
  tapegrad::ops::ValueEmbedAccumulate accumulate = tapegrad::ops::ValueEmbedAccumulate::atomic;
  float lr = 0.01f;        // dense AdamW (mix, W, b)
  float table_lr = 0.05f;  // sparse AdamW (E)
  uint64_t seed = 1;
  std::string dump_tape;   // when set, the first step's tape dump is written here
};

// The text as tokens: runs of letters (lowercased) and single punctuation marks, numbered by
// frequency (0 the most frequent; ties in order of first appearance).
struct Corpus {
  std::vector<std::string> words;  // id -> token
  std::vector<int32_t> ids;        // the text
};
Corpus tokenize(const std::string& text);

// The flags' limits (main.cpp refuses a value outside them by name): far above the seed's sizes
// (P = 4, V = 50304, D = 768), far below what would overflow a size.
constexpr int max_planes = 64;
constexpr int64_t max_vocab = int64_t{1} << 20, max_dim = int64_t{1} << 14, max_tokens = int64_t{1} << 20;
constexpr int max_steps = 1000000, max_accum = 1000000, max_runs = 10000;
// No tensor of the model (the table P*V*D, the planes P*T*D, W D*V, the logits T*V) may hold more
// elements than this (1 GiB in f32; its initialization takes 2 GiB more).
constexpr int64_t max_elements = int64_t{1} << 28;

// Refuses, naming the product, sizes whose tensors would overflow or exceed max_elements: called
// before anything is allocated. `tokens` 0: no step (the benchmark's sizes).
void check_sizes(int64_t planes, int64_t vocab, int64_t dim, int64_t tokens);

// Checks the config against the corpus (vocab at least the distinct tokens, T below the text's
// length, positive sizes, check_sizes); throws tapegrad::Error naming the flag.
void validate(const Config& c, const Corpus& corpus);

// Trains and prints one line per pull to `out`, then the loss over the whole text before and after
// (evaluated under NoGrad: the plain gather, no buffer). Returns {loss before, loss after}.
std::pair<double, double> train(const Config& c, const Corpus& corpus, std::FILE* out);

}  // namespace ve_app
