// Shared by the nn suites (tests/nn, tests/cuda/test_nn_cuda.cpp): a model's graph, generator and
// factory in one place, the weight and input formulas of tests/fixtures/gen_nn_values.py, and a
// GPT-like stack with nanoGPT's names.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "tapegrad/nn/layers.hpp"
#include "tapegrad/nn/state_dict.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::testing {

// A graph, a seeded generator and the factory over both.
struct Place {
  explicit Place(uint64_t seed = 0, DType dtype = DType::f32, Device device = Device::cpu())
      : gen(seed), f{g, gen, dtype, device} {}
  Graph g;
  Generator gen;
  nn::Factory f;
};

// gen_nn_values.py's fill(): parameter p (named_parameters order), element i: 0.5 sin(0.7 p + 0.13 i + 0.1),
// loaded through load_state_dict.
inline void fill(nn::Module& m) {
  nn::StateDict tensors;
  int p = 0;
  for (const auto& [name, v] : m.named_parameters()) {
    std::vector<double> values(static_cast<size_t>(v.value().numel()));
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5 * std::sin(0.7 * p + 0.13 * static_cast<double>(i) + 0.1);
    tensors.push_back({name, Tensor::from_doubles(values, v.shape(), v.dtype())});
    ++p;
  }
  nn::load_state_dict(m, tensors);
}

// x[i] = sin(0.31 i + 0.2); value embeds ve[i] = 0.3 cos(0.17 i)
inline Tensor inputs(const Shape& shape, DType dtype, Device device = Device::cpu()) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.31 * static_cast<double>(i) + 0.2);
  return Tensor::from_doubles(v, shape, dtype, device);
}
inline Tensor value_embeds(const Shape& shape, DType dtype, Device device = Device::cpu()) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.3 * std::cos(0.17 * static_cast<double>(i));
  return Tensor::from_doubles(v, shape, dtype, device);
}

// nanoGPT's GPT without its tied head: wte, wpe, blocks "h", ln_f and an untied lm_head.
struct TinyGPT : nn::Module {
  TinyGPT(nn::Factory& f, int64_t vocab, int64_t block_size, int64_t dim, int64_t heads, int layers,
          double dropout = 0.0)
      : wte(f, vocab, dim), wpe(f, block_size, dim), ln_f(f, dim), lm_head(f, dim, vocab, false) {
    register_module("wte", wte);
    register_module("wpe", wpe);
    for (int l = 0; l < layers; ++l) h.emplace_back(f, dim, heads, dropout);
    register_module("h", h);
    register_module("ln_f", ln_f);
    register_module("lm_head", lm_head);
  }
  const char* kind() const override { return "TinyGPT"; }
  // ids (B, T) -> logits (B, T, vocab)
  Var operator()(Var ids) {
    const int64_t T = ids.shape()[1];
    std::vector<int64_t> positions(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) positions[static_cast<size_t>(t)] = t;
    Var pos = ids.graph().input(Tensor::from_vector(positions, Shape{T}, ids.device()));
    Var x = wte(ids) + wpe(pos);
    for (nn::Block& block : h) x = block(x);
    return lm_head(ln_f(x));
  }
  nn::Embedding wte, wpe;
  nn::ModuleList<nn::Block> h;
  nn::LayerNorm ln_f;
  nn::Linear lm_head;
};

}  // namespace tapegrad::testing
